//! Fault injection: the ways a broken server or network can fail a request, chosen per request
//! with configured probabilities, reproducibly, and counted so a test can compare the client's
//! failure records with what the server actually did.
//!
//! The n-th generation request (1-based, counted per server over its whole life, restarts
//! included) draws its fault from a generator seeded by `(fault_seed, n)`, so the same seed and
//! the same request order give the same faults whatever the timing. Every POST to a generation
//! endpoint takes a number, invalid ones included: an invalid request that draws anything but an
//! HTTP error gets its usual 400 and nothing is injected.
//!
//! # Which counters each fault touches
//!
//! Every fault is counted under its own name in `faults_injected` when it actually reaches the
//! wire (a fault planned for a point the response never reaches, because the client left
//! first, is not counted). Every request counts in `requests_received` as usual. Besides that:
//!
//! | fault | other counters |
//! |---|---|
//! | `http_429`, `http_500`, `http_503` | `requests_rejected` |
//! | `reset_mid_stream` | none: neither completed nor disconnected |
//! | `missing_done` | none: neither completed nor disconnected (no `[DONE]`, so not complete; its usage is not added to `completion_tokens`) |
//! | `stall_before_first_byte`, `stall_mid_stream` | `requests_disconnected` when the client gives up during the stall (the usual case); `requests_completed` if it waits the stall out |
//! | `malformed_sse`, `invalid_json`, `invalid_utf8`, `huge_chunk` | `requests_completed` (the stream goes on and ends with `[DONE]`) |
//! | `contamination_swapped`, `contamination_merged` | `requests_completed`, and `contaminated_responses` |
//! | `restart` | once per restart, when it begins |
//! | `restart_cut` | per request in flight when a restart cut its connection; neither completed nor disconnected |
//! | `connection_refused` | once per restart downtime (the window in which the port is closed); the server never sees the refused attempts themselves, the kernel refuses them |
//!
//! Injected extra lines and the huge chunk are not part of the planned output: they do not
//! count in `chunks_streamed`, `tokens_streamed` or the usage. A contaminating marker replaces
//! one planned token, so all token counts stay as planned.
//!
//! HTTP error faults are answered after the request body was read (a server that answers
//! before reading makes the client see a reset instead of the status) and before it is
//! parsed. The stream faults apply to streamed requests only; a non-streamed request that draws
//! one is answered normally and nothing is counted. Contamination applies to both.

use std::time::Duration;

use bytes::BytesMut;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::profile::duration_ms;

/// Names of the fault counters, in index order: the per-request kinds ([`FaultKind`] as
/// index) first, then the server-wide events.
pub(crate) const COUNTER_NAMES: [&str; FAULT_COUNTERS] = [
    "reset_mid_stream",
    "http_429",
    "http_500",
    "http_503",
    "stall_before_first_byte",
    "stall_mid_stream",
    "malformed_sse",
    "invalid_json",
    "invalid_utf8",
    "huge_chunk",
    "missing_done",
    "contamination_swapped",
    "contamination_merged",
    "restart",
    "restart_cut",
    "connection_refused",
];
pub(crate) const FAULT_COUNTERS: usize = 16;
pub(crate) const RESTART: usize = 13;
pub(crate) const RESTART_CUT: usize = 14;
pub(crate) const CONNECTION_REFUSED: usize = 15;

/// The made-up marker a swapped or merged answer carries when no other request's marker is known.
pub(crate) const FALLBACK_MARKER: &str = "ANVIL_REQ_0_99999";

/// Per-request fault probabilities and the parameters of the faults. All probabilities are
/// zero by default; their sum may not exceed 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultProfile {
    /// After 1 to 5 chunks the body fails, so the connection is torn down without the end of
    /// the chunked body.
    pub reset_mid_stream: f64,
    /// Immediate 429 with `Retry-After: 1`.
    pub http_429: f64,
    /// Immediate 500.
    pub http_500: f64,
    /// Immediate 503 with `Retry-After: 1`.
    pub http_503: f64,
    /// The 200 headers, then nothing for `stall_duration` (then the stream goes on).
    pub stall_before_first_byte: f64,
    /// After 1 to 5 chunks, nothing for `stall_duration` (then the stream goes on).
    pub stall_mid_stream: f64,
    /// After 1 to 5 chunks, one line that is no SSE field (`dta: …`), then the stream goes on.
    pub malformed_sse: f64,
    /// After 1 to 5 chunks, one `data:` event with truncated JSON, then the stream goes on.
    pub invalid_json: f64,
    /// After 1 to 5 chunks, one `data:` event whose JSON string holds the bytes 0xFF 0xFE.
    pub invalid_utf8: f64,
    /// One extra content chunk of `huge_chunk_bytes` of text once content has started.
    pub huge_chunk: f64,
    /// Finish chunk and usage as usual, but no `data: [DONE]`.
    pub missing_done: f64,
    /// The answer starts with another request's canary marker instead of its own.
    pub contamination_swapped: f64,
    /// The answer starts with its own marker, and another request's marker appears mid-content.
    pub contamination_merged: f64,
    /// How long a stall lasts. The default (an hour) outlasts any client timeout; the stall
    /// ends early when the client disconnects.
    #[serde(rename = "stall_duration_ms", with = "duration_ms")]
    pub stall_duration: Duration,
    /// Size of the text in a huge chunk.
    pub huge_chunk_bytes: usize,
    /// Seeds the per-request draws.
    pub fault_seed: u64,
    /// Restart the server once, when the response to this generation request has ended:
    /// the listener and every open connection are closed (in-flight requests are cut), the
    /// port stays closed for `restart_downtime_ms`, then the same address is served again.
    /// Only one restart happens per server.
    pub restart_after_requests: Option<u64>,
    /// How long the port stays closed during a restart.
    pub restart_downtime_ms: u64,
    /// Contamination takes a marker of another conversation (`…_S<n>_T<turn>` markers name
    /// theirs), never an earlier turn of the answer's own: cross-session contamination.
    pub cross_session: bool,
    /// Structured output: this share of the answers that asked for JSON break their schema
    /// (a required property left out, or the JSON cut short; see `structured`). Drawn apart
    /// from the faults above, from the prompt, so it adds to them.
    pub schema_invalid_rate: f64,
    /// The fraction of tool calls whose arguments are broken on purpose (invalid JSON or a
    /// required property left out; see `tool_call`). Not drawn with the other faults: it
    /// applies to calls, every call whose `n · fraction` crosses a whole number.
    pub invalid_tool_arguments: f64,
}

impl Default for FaultProfile {
    fn default() -> FaultProfile {
        FaultProfile {
            reset_mid_stream: 0.0,
            http_429: 0.0,
            http_500: 0.0,
            http_503: 0.0,
            stall_before_first_byte: 0.0,
            stall_mid_stream: 0.0,
            malformed_sse: 0.0,
            invalid_json: 0.0,
            invalid_utf8: 0.0,
            huge_chunk: 0.0,
            missing_done: 0.0,
            contamination_swapped: 0.0,
            contamination_merged: 0.0,
            stall_duration: Duration::from_secs(3600),
            huge_chunk_bytes: 1 << 20,
            fault_seed: 0,
            restart_after_requests: None,
            restart_downtime_ms: 500,
            cross_session: false,
            schema_invalid_rate: 0.0,
            invalid_tool_arguments: 0.0,
        }
    }
}

/// Larger huge chunks would only measure the machine's memory.
const MAX_HUGE_CHUNK_BYTES: usize = 256 << 20;

impl FaultProfile {
    /// Checks the probabilities and parameters.
    pub fn validate(&self) -> Result<(), String> {
        let mut sum = 0.0;
        for kind in FaultKind::ALL {
            let p = kind.probability(self);
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(format!("faults.{}: a probability must be between 0 and 1", kind.name()));
            }
            sum += p;
        }
        // A little slack for decimal fractions that do not add up exactly in binary.
        if sum > 1.0 + 1e-9 {
            return Err(format!("faults: the probabilities add up to {sum}, more than 1"));
        }
        if !(self.schema_invalid_rate.is_finite() && (0.0..=1.0).contains(&self.schema_invalid_rate)) {
            return Err("faults.schema_invalid_rate: a probability must be between 0 and 1".into());
        }
        if !(self.invalid_tool_arguments.is_finite() && (0.0..=1.0).contains(&self.invalid_tool_arguments)) {
            return Err("faults.invalid_tool_arguments: a fraction must be between 0 and 1".into());
        }
        if self.huge_chunk_bytes == 0 || self.huge_chunk_bytes > MAX_HUGE_CHUNK_BYTES {
            return Err(format!("faults.huge_chunk_bytes must be between 1 and {MAX_HUGE_CHUNK_BYTES}"));
        }
        if self.restart_after_requests == Some(0) {
            return Err("faults.restart_after_requests must be at least 1".into());
        }
        Ok(())
    }

    /// Whether any per-request fault can be drawn at all; when not, nothing is drawn.
    pub(crate) fn any(&self) -> bool {
        FaultKind::ALL.iter().any(|kind| kind.probability(self) > 0.0)
    }

    /// Whether answers can be contaminated, which needs the registry of markers.
    pub(crate) fn contaminates(&self) -> bool {
        self.contamination_swapped > 0.0 || self.contamination_merged > 0.0
    }

    /// The fault the `n`-th generation request (from 1) draws, by its name in `faults_injected`;
    /// `None` when it draws none. The same seed gives the same faults, whatever the timing.
    pub fn fault_of_request(&self, n: u64) -> Option<&'static str> {
        self.draw(n).map(|i| i.kind.name())
    }

    /// The fault of the `n`-th generation request, if it draws one.
    pub(crate) fn draw(&self, n: u64) -> Option<Injection> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.fault_seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let u: f64 = rng.random();
        let mut cumulative = 0.0;
        for kind in FaultKind::ALL {
            let p = kind.probability(self);
            if p.is_nan() || p <= 0.0 {
                continue;
            }
            cumulative += p;
            if u < cumulative {
                return Some(Injection { kind, after_chunks: rng.random_range(1..=5) });
            }
        }
        None
    }
}

/// A per-request fault. The discriminant is the index of its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    ResetMidStream = 0,
    Http429 = 1,
    Http500 = 2,
    Http503 = 3,
    StallBeforeFirstByte = 4,
    StallMidStream = 5,
    MalformedSse = 6,
    InvalidJson = 7,
    InvalidUtf8 = 8,
    HugeChunk = 9,
    MissingDone = 10,
    ContaminationSwapped = 11,
    ContaminationMerged = 12,
}

impl FaultKind {
    /// Also the order in which a draw walks the probabilities.
    pub const ALL: [FaultKind; 13] = [
        FaultKind::ResetMidStream,
        FaultKind::Http429,
        FaultKind::Http500,
        FaultKind::Http503,
        FaultKind::StallBeforeFirstByte,
        FaultKind::StallMidStream,
        FaultKind::MalformedSse,
        FaultKind::InvalidJson,
        FaultKind::InvalidUtf8,
        FaultKind::HugeChunk,
        FaultKind::MissingDone,
        FaultKind::ContaminationSwapped,
        FaultKind::ContaminationMerged,
    ];

    pub fn counter(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        COUNTER_NAMES[self.counter()]
    }

    fn probability(self, p: &FaultProfile) -> f64 {
        match self {
            FaultKind::ResetMidStream => p.reset_mid_stream,
            FaultKind::Http429 => p.http_429,
            FaultKind::Http500 => p.http_500,
            FaultKind::Http503 => p.http_503,
            FaultKind::StallBeforeFirstByte => p.stall_before_first_byte,
            FaultKind::StallMidStream => p.stall_mid_stream,
            FaultKind::MalformedSse => p.malformed_sse,
            FaultKind::InvalidJson => p.invalid_json,
            FaultKind::InvalidUtf8 => p.invalid_utf8,
            FaultKind::HugeChunk => p.huge_chunk,
            FaultKind::MissingDone => p.missing_done,
            FaultKind::ContaminationSwapped => p.contamination_swapped,
            FaultKind::ContaminationMerged => p.contamination_merged,
        }
    }

    /// Faults that only exist in an SSE body.
    pub fn stream_only(self) -> bool {
        !matches!(
            self,
            FaultKind::Http429
                | FaultKind::Http500
                | FaultKind::Http503
                | FaultKind::ContaminationSwapped
                | FaultKind::ContaminationMerged
        )
    }

    /// Status, `Retry-After` and body of the HTTP error faults; `None` for the others.
    pub fn http_error(self) -> Option<(u16, bool, Value)> {
        let (status, retry_after, kind, message) = match self {
            FaultKind::Http429 => (429, true, "rate_limit_error", "Rate limit reached; retry after 1 second"),
            FaultKind::Http500 => (500, false, "server_error", "The server had an error processing the request"),
            FaultKind::Http503 => (503, true, "service_unavailable", "The server is overloaded; retry after 1 second"),
            _ => return None,
        };
        Some((status, retry_after, json!({"error": {"message": message, "type": kind, "code": status}})))
    }
}

/// The fault one request drew, with where in the stream it strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Injection {
    pub kind: FaultKind,
    /// Delta chunks sent before a mid-stream fault strikes (1..=5); a shorter stream gets the
    /// fault just before its final frame instead.
    pub after_chunks: u32,
}

/// Appends the broken event of `malformed_sse`, `invalid_json` or `invalid_utf8`.
pub(crate) fn write_broken_event(kind: FaultKind, buf: &mut BytesMut) {
    match kind {
        // An unknown field name: a strict SSE parser ignores the line, a naive one chokes.
        FaultKind::MalformedSse => buf.extend_from_slice(
            b"dta: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n",
        ),
        FaultKind::InvalidJson => buf.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n"),
        FaultKind::InvalidUtf8 => buf.extend_from_slice(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\xfe\"},\"finish_reason\":null}]}\n\n",
        ),
        _ => {}
    }
}

/// `bytes` of plain text for a huge chunk: valid, just far larger than any real chunk.
pub(crate) fn huge_text(bytes: usize) -> String {
    const WORD: &str = " data";
    let mut text = WORD.repeat(bytes / WORD.len() + 1);
    text.truncate(bytes);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_inject_nothing_and_validate() {
        let faults = FaultProfile::default();
        faults.validate().expect("valid");
        assert!(!faults.any());
        assert!((1..100).all(|n| faults.draw(n).is_none()));
        let parsed: FaultProfile = serde_json::from_str("{}").expect("all fields default");
        assert_eq!(parsed, faults);
        assert_eq!(faults.stall_duration, Duration::from_secs(3600));
        assert_eq!(faults.huge_chunk_bytes, 1 << 20);
    }

    #[test]
    fn validation_refuses_bad_probabilities() {
        let bad = [
            FaultProfile { http_500: 1.5, ..FaultProfile::default() },
            FaultProfile { http_500: -0.1, ..FaultProfile::default() },
            FaultProfile { http_500: f64::NAN, ..FaultProfile::default() },
            FaultProfile { http_500: 0.6, reset_mid_stream: 0.6, ..FaultProfile::default() },
            FaultProfile { restart_after_requests: Some(0), ..FaultProfile::default() },
            FaultProfile { huge_chunk_bytes: 0, ..FaultProfile::default() },
        ];
        for faults in bad {
            assert!(faults.validate().is_err(), "accepted {faults:?}");
        }
        let exact = FaultProfile { http_500: 0.7, reset_mid_stream: 0.2, missing_done: 0.1, ..Default::default() };
        exact.validate().expect("a sum of exactly 1 is fine");
    }

    #[test]
    fn draws_follow_the_probabilities_and_the_seed() {
        let faults = FaultProfile { http_500: 0.25, missing_done: 0.25, fault_seed: 9, ..FaultProfile::default() };
        let draws: Vec<_> = (1..=4000).map(|n| faults.draw(n).map(|i| i.kind)).collect();
        let count = |kind| draws.iter().filter(|d| **d == kind).count();
        for (kind, expected) in [(Some(FaultKind::Http500), 1000), (Some(FaultKind::MissingDone), 1000), (None, 2000)] {
            let n = count(kind);
            assert!(n.abs_diff(expected) < expected / 8, "{kind:?}: {n}");
        }
        let again: Vec<_> = (1..=4000).map(|n| faults.draw(n).map(|i| i.kind)).collect();
        assert_eq!(draws, again);
        let other = FaultProfile { fault_seed: 10, ..faults };
        let different: Vec<_> = (1..=4000).map(|n| other.draw(n).map(|i| i.kind)).collect();
        assert_ne!(draws, different);
        assert!((1..=4000).filter_map(|n| faults.draw(n)).all(|i| (1..=5).contains(&i.after_chunks)));
    }

    #[test]
    fn certain_fault_is_always_drawn() {
        for kind in FaultKind::ALL {
            let mut faults = FaultProfile::default();
            match kind {
                FaultKind::ResetMidStream => faults.reset_mid_stream = 1.0,
                FaultKind::Http429 => faults.http_429 = 1.0,
                FaultKind::Http500 => faults.http_500 = 1.0,
                FaultKind::Http503 => faults.http_503 = 1.0,
                FaultKind::StallBeforeFirstByte => faults.stall_before_first_byte = 1.0,
                FaultKind::StallMidStream => faults.stall_mid_stream = 1.0,
                FaultKind::MalformedSse => faults.malformed_sse = 1.0,
                FaultKind::InvalidJson => faults.invalid_json = 1.0,
                FaultKind::InvalidUtf8 => faults.invalid_utf8 = 1.0,
                FaultKind::HugeChunk => faults.huge_chunk = 1.0,
                FaultKind::MissingDone => faults.missing_done = 1.0,
                FaultKind::ContaminationSwapped => faults.contamination_swapped = 1.0,
                FaultKind::ContaminationMerged => faults.contamination_merged = 1.0,
            }
            assert!((1..50).all(|n| faults.draw(n).map(|i| i.kind) == Some(kind)), "{kind:?}");
            assert_eq!(kind.name(), COUNTER_NAMES[kind as usize]);
        }
    }

    #[test]
    fn huge_text_has_the_exact_size() {
        assert_eq!(huge_text(1 << 20).len(), 1 << 20);
        assert_eq!(huge_text(3), " da");
    }
}
