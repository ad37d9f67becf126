//! What a request of a replayed trace or of a conversation carries beyond a plain request: where
//! it came from (trace row, session, turn), what was planned for it (output length, reusable
//! prefix), and which backend served it; and, with several replicas, which replica it went to.
//! Absent from the records of other runs.

use serde::{Deserialize, Serialize};

/// Per-request facts of a trace replay or a conversation turn; every field is optional and
/// written only when set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayFacts {
    /// The trace's data row (1-based) this request replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_row: Option<u64>,
    /// Output tokens the trace (or the conversation plan) asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_output_tokens: Option<u32>,
    /// Leading prompt tokens an earlier request already sent (trace: shared hash-id blocks;
    /// conversation: the history): what a prefix cache could reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cached_tokens: Option<u32>,
    /// The conversation (trace session or generated session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// 1-based turn within the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Prompt tokens of earlier turns (and the system prompt) in this turn's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_tokens: Option<u32>,
    /// The response header naming the backend that served the request (behind a router).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Several replicas (`target.base_urls`): the index of the replica the request was sent to,
    /// in the run description's `replicas` order. Absent with one server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// Several models (`target.models`): the model the request named. Absent with one model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `[workload.media]`: what the request carried (absent without media).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaFacts>,
    /// Agent sessions: the request is a tool turn (it carries the results of the previous
    /// answer's tool calls); absent on other requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_turn: Option<bool>,
    /// Agent sessions, tool turns: the tool latency slept before the request, in whole ms (not in any of its
    /// timings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_latency_ms: Option<u64>,
}

/// The media one request carried, and the size of its body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaFacts {
    /// Images in the request.
    pub images: u32,
    /// Audio clips in the request.
    pub audio: u32,
    /// Pixels of its images, summed.
    pub pixels: u64,
    /// Seconds of its audio, summed.
    pub audio_seconds: u32,
    /// Bytes of the encoded files (JPEG, PNG, WAV) before base64.
    pub media_bytes: u64,
    /// Bytes of the whole request body.
    pub body_bytes: u64,
}

/// What the calibration learned of one media bucket: the server's prompt tokens for a probe with
/// one item of it, less the same probe's without (`prompt_sizing.media_tokens`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaProbe {
    /// `image` or `audio`.
    pub modality: String,
    /// `WxH` for an image, `Ns` for audio.
    pub bucket: String,
    /// Prompt tokens one item adds, as the server counted; null when the probe failed or the
    /// server reported no usage.
    pub tokens: Option<u64>,
    pub error: Option<String>,
}

impl MediaFacts {
    /// Media items of every modality.
    pub fn items(&self) -> u32 {
        self.images + self.audio
    }
}
