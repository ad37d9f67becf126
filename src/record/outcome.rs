//! What one request produced: a completed measurement or a failure, both compact and free of
//! prompt text, response text and credentials. Durations are measured from the request's own
//! start; `start_offset` places the request on the level's clock.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::checks::{CanaryCheck, ControlledOutput, UsageImplausible};

/// Every attempted request ends as exactly one of these; an arrival the open loop could not
/// start (`overload = "drop"`) is `Dropped`.
#[derive(Debug, Clone)]
pub enum Outcome {
    Completed(Completed),
    Failed(Failed),
    Dropped(Dropped),
}

/// An arrival that found every in-flight slot taken and was not sent.
#[derive(Debug, Clone)]
pub struct Dropped {
    pub index: u64,
    pub planned_context_tokens: u32,
    /// Its place in the schedule, from the start of the level.
    pub intended_offset: Duration,
}

/// A response that streamed to its end (`[DONE]`).
#[derive(Debug, Clone)]
pub struct Completed {
    pub index: u64,
    pub planned_context_tokens: u32,
    pub prompt_target_tokens: u32,
    /// When the request was sent, from the start of the level.
    pub start_offset: Duration,
    /// When the schedule meant it to be sent (open loop).
    pub intended_offset: Option<Duration>,
    /// Time waiting for an in-flight slot (open loop with `max_in_flight`).
    pub queue_wait: Option<std::time::Duration>,
    /// First non-empty reasoning or content delta.
    pub first_output: Duration,
    /// First non-empty content delta; `None` when the response had no visible content.
    pub first_content: Option<Duration>,
    /// `[DONE]` received.
    pub end: Duration,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub output_tokens: u64,
    pub output_token_source: TokenSource,
    /// The server's `usage.completion_tokens` when it was set aside as implausible (0, or far
    /// fewer than the chunks that streamed; see `checks::usage_plausible`): `output_tokens` is
    /// then the chunk count.
    pub usage_completion_tokens: Option<u64>,
    /// Reasoning tokens among the output tokens, when the server's usage says (Responses API
    /// `output_tokens_details.reasoning_tokens`, chat `completion_tokens_details`).
    pub reasoning_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    pub visible_content_truncated: bool,
    pub canary: Option<CanaryCheck>,
    pub controlled_output: Option<ControlledOutput>,
    /// Attempts repeated under the retry policy, and the errors that caused them.
    pub retries: u32,
    pub retried_errors: Vec<ErrorKind>,
    /// Sends repeated because a pooled connection turned out to be closed (not timed).
    pub stale_connection_retries: u32,
    /// Trace or conversation facts, for those runs.
    pub replay: Option<Box<super::ReplayFacts>>,
    /// Gaps between output chunks and tokens per chunk (see `gaps`).
    pub chunks: Box<super::gaps::ChunkFacts>,
    /// Where the server's own words could not be taken as sent (usually `None`).
    pub corrections: Option<Box<Corrections>>,
}

/// What the client could not take as the server sent it, and what it recorded instead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corrections {
    /// Usage beyond what the request could produce: none of the server's counts is kept (prompt
    /// and cached tokens unknown, output tokens from the chunks) and the request is excluded.
    pub usage_implausible: Option<UsageImplausible>,
    /// The server's finish reason when the output reached the budget and the server still said
    /// it stopped on its own (`stop`, or the Responses API's `completed`): the record says
    /// `length`, as every API's truncation does.
    pub reported_finish_reason: Option<String>,
}

/// Where `output_tokens` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage.completion_tokens`.
    Usage,
    /// No usage was reported, or its count was implausible: the count of non-empty reasoning
    /// and content chunks, which undercounts when a chunk carries several tokens.
    ChunkCount,
}

impl TokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Usage => "usage",
            TokenSource::ChunkCount => "chunk_count",
        }
    }
}

/// A request that did not complete, with whatever was observed before it ended.
#[derive(Debug, Clone)]
pub struct Failed {
    pub index: u64,
    pub planned_context_tokens: u32,
    pub start_offset: Duration,
    pub intended_offset: Option<Duration>,
    pub queue_wait: Option<Duration>,
    pub kind: ErrorKind,
    pub http_status: Option<u16>,
    /// The server's error type or code, when it sent one.
    pub server_error_type: Option<String>,
    /// Short, sanitized description (never prompt text or credentials).
    pub message: String,
    /// Time from sending to the failure.
    pub elapsed: Duration,
    pub first_output: Option<Duration>,
    pub first_content: Option<Duration>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub stale_connection_retries: u32,
    pub retries: u32,
    pub retried_errors: Vec<ErrorKind>,
    /// The server's `Retry-After`, for the retry policy (not recorded).
    pub retry_after: Option<Duration>,
    /// Trace or conversation facts, for those runs.
    pub replay: Option<Box<super::ReplayFacts>>,
}

/// Stable failure classes; their string forms are part of the artifact contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The TCP/TLS connection could not be opened.
    ConnectFailed,
    ConnectTimeout,
    /// No output (a non-empty reasoning or content delta) within `client.first_byte_timeout`
    /// of sending; headers, comments and chunks without text do not stop this clock.
    FirstByteTimeout,
    /// After the first output, no progress (text, a finish reason, usage or `[DONE]`) for
    /// longer than `client.idle_timeout`.
    IdleTimeout,
    /// The whole request took longer than `client.request_timeout`.
    RequestTimeout,
    /// The server answered with a redirect (3xx); redirects are not followed.
    Redirect,
    /// HTTP 400 saying the prompt does not fit the context window.
    ContextLengthExceeded,
    /// Any other non-2xx status.
    Http(u16),
    /// The connection broke while the response was streaming.
    StreamBroken,
    /// A line of the stream is no SSE field, or one event grew without bound.
    MalformedSse,
    InvalidJson,
    InvalidUtf8,
    /// The server sent an error object inside the stream.
    ServerErrorEvent,
    /// Responses API: `response.failed` (the server gave up on the response).
    ResponseFailed,
    /// Responses API: `response.incomplete` for a reason other than the output budget (a
    /// content filter, say).
    ResponseIncomplete,
    /// The stream ended without its last event (`data: [DONE]`, `response.completed` or
    /// `message_stop`), or a non-streamed answer ended before its JSON did.
    MissingDone,
    /// The stream finished without any reasoning or content text.
    EmptyResponse,
    /// The run was stopped (Ctrl-C) while the request was in flight; not a server error.
    Interrupted,
    /// Any other client-side error while sending.
    RequestFailed,
}

impl ErrorKind {
    /// Interrupted requests are the operator's doing, not the server's.
    pub fn is_server_fault(self) -> bool {
        self != ErrorKind::Interrupted
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::FirstByteTimeout => "first_byte_timeout",
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::Redirect => "redirect",
            ErrorKind::ContextLengthExceeded => "context_length_exceeded",
            ErrorKind::Http(code) => return write!(f, "http_{code}"),
            ErrorKind::StreamBroken => "stream_broken",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::InvalidUtf8 => "invalid_utf8",
            ErrorKind::ServerErrorEvent => "server_error_event",
            ErrorKind::ResponseFailed => "response_failed",
            ErrorKind::ResponseIncomplete => "response_incomplete",
            ErrorKind::MissingDone => "missing_done",
            ErrorKind::EmptyResponse => "empty_response",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::RequestFailed => "request_failed",
        };
        f.write_str(s)
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for ErrorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(code) = s.strip_prefix("http_") {
            return code.parse().map(ErrorKind::Http).map_err(|_| format!("unknown error kind {s:?}"));
        }
        Ok(match s {
            "connect_failed" => ErrorKind::ConnectFailed,
            "connect_timeout" => ErrorKind::ConnectTimeout,
            "first_byte_timeout" => ErrorKind::FirstByteTimeout,
            "idle_timeout" => ErrorKind::IdleTimeout,
            "request_timeout" => ErrorKind::RequestTimeout,
            "redirect" => ErrorKind::Redirect,
            "context_length_exceeded" => ErrorKind::ContextLengthExceeded,
            "stream_broken" => ErrorKind::StreamBroken,
            "malformed_sse" => ErrorKind::MalformedSse,
            "invalid_json" => ErrorKind::InvalidJson,
            "invalid_utf8" => ErrorKind::InvalidUtf8,
            "server_error_event" => ErrorKind::ServerErrorEvent,
            "response_failed" => ErrorKind::ResponseFailed,
            "response_incomplete" => ErrorKind::ResponseIncomplete,
            "missing_done" => ErrorKind::MissingDone,
            "empty_response" => ErrorKind::EmptyResponse,
            "interrupted" => ErrorKind::Interrupted,
            "request_failed" => ErrorKind::RequestFailed,
            _ => return Err(format!("unknown error kind {s:?}")),
        })
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_stable_names() {
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
        assert_eq!(serde_json::to_string(&ErrorKind::StreamBroken).unwrap(), "\"stream_broken\"");
        for kind in [
            ErrorKind::Http(429),
            ErrorKind::IdleTimeout,
            ErrorKind::Interrupted,
            ErrorKind::MissingDone,
            ErrorKind::RequestTimeout,
            ErrorKind::Redirect,
            ErrorKind::ResponseFailed,
            ErrorKind::ResponseIncomplete,
        ] {
            assert_eq!(kind.to_string().parse::<ErrorKind>(), Ok(kind));
        }
        assert!("http_x".parse::<ErrorKind>().is_err() && "nope".parse::<ErrorKind>().is_err());
    }
}
