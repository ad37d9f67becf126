//! What one request produced: a completed measurement or a failure, both compact and free of
//! prompt text, response text and credentials. Durations are measured from the request's own
//! start; `start_offset` places the request on the level's clock.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::checks::{CanaryCheck, ControlledOutput, UsageImplausible};
use crate::contract::ErrorKind;

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
    /// Structured output: the answer checked against its schema.
    pub schema: Option<Box<super::SchemaCheck>>,
    /// Runs that offer tools: the response's tool calls.
    pub tool_calls: Option<Box<super::ToolCallRecord>>,
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
