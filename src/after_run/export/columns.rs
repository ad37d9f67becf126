//! The columns of an exported table: one row per request, completed or failed, each column a
//! name, a type, a unit and what it means, and the one function that reads it from a record.
//! Parquet and CSV write the same columns in this order; `docs/export.md` lists them and a test
//! holds the page to this table.
//!
//! A column is typed by the function that reads it (`Get`), so a column's declared type and its
//! values cannot disagree. Fields only one kind of record has are null on the other: `e2e_ms` on
//! a failure, `error_kind` on a completed request.

use std::borrow::Cow;

use crate::contract::ErrorKind;
use crate::request::record::checks::UsageProblem;
use crate::request::record::replay::{MediaFacts, ReplayFacts};
use crate::request::record::{FailureRecord, GapSketch, RequestTiming};

/// One request as a row: its level, when the level started, and its record.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The level's id: the artifact's `run_id`, the records file's `level`.
    pub level: &'a str,
    /// The level's start, ns since the Unix epoch (the artifact's `started_at_unix_ns`).
    pub level_started_ns: u64,
    pub record: Record<'a>,
}

/// A completed or a failed request.
#[derive(Debug, Clone, Copy)]
pub enum Record<'a> {
    Completed(&'a RequestTiming),
    Failed(&'a FailureRecord),
}

impl<'a> Row<'a> {
    fn done(&self) -> Option<&'a RequestTiming> {
        match self.record {
            Record::Completed(t) => Some(t),
            Record::Failed(_) => None,
        }
    }

    fn failed(&self) -> Option<&'a FailureRecord> {
        match self.record {
            Record::Completed(_) => None,
            Record::Failed(f) => Some(f),
        }
    }

    fn replay(&self) -> &'a ReplayFacts {
        match self.record {
            Record::Completed(t) => &t.replay,
            Record::Failed(f) => &f.replay,
        }
    }

    fn media(&self) -> Option<&'a MediaFacts> {
        self.replay().media.as_ref()
    }

    /// Both kinds of record have it.
    fn both<T>(&self, done: impl Fn(&'a RequestTiming) -> T, failed: impl Fn(&'a FailureRecord) -> T) -> T {
        match self.record {
            Record::Completed(t) => done(t),
            Record::Failed(f) => failed(f),
        }
    }
}

/// How a column is read from a row, and so its type.
#[derive(Clone, Copy)]
pub enum Get {
    /// UTF-8 text.
    Str(for<'a> fn(&Row<'a>) -> Option<Cow<'a, str>>),
    /// An unsigned 32-bit integer.
    U32(fn(&Row) -> Option<u32>),
    /// An unsigned 64-bit integer.
    U64(fn(&Row) -> Option<u64>),
    /// A 64-bit float.
    F64(fn(&Row) -> Option<f64>),
    Bool(fn(&Row) -> Option<bool>),
    /// An instant, ns since the Unix epoch (UTC).
    Timestamp(fn(&Row) -> Option<u64>),
    /// A list of words (null when the record has no such list).
    StrList(for<'a> fn(&Row<'a>) -> Option<Vec<Cow<'a, str>>>),
    /// A gap sketch: a list of `{value_us, count}` (null when the record has none).
    Gaps(for<'a> fn(&Row<'a>) -> Option<&'a GapSketch>),
}

impl Get {
    /// The type as `docs/export.md` names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Get::Str(_) => "string",
            Get::U32(_) => "uint32",
            Get::U64(_) => "uint64",
            Get::F64(_) => "double",
            Get::Bool(_) => "bool",
            Get::Timestamp(_) => "timestamp[ns, UTC]",
            Get::StrList(_) => "list<string>",
            Get::Gaps(_) => "list<struct<value_us: uint64, count: uint32>>",
        }
    }
}

/// One column.
pub struct Column {
    pub name: &'static str,
    /// Empty for counts, words and flags.
    pub unit: &'static str,
    pub meaning: &'static str,
    pub get: Get,
}

const fn col(name: &'static str, unit: &'static str, meaning: &'static str, get: Get) -> Column {
    Column { name, unit, meaning, get }
}

fn s(text: &str) -> Option<Cow<'_, str>> {
    Some(Cow::Borrowed(text))
}

fn kind(k: &ErrorKind) -> Cow<'static, str> {
    Cow::Owned(k.to_string())
}

fn problem(p: UsageProblem) -> &'static str {
    match p {
        UsageProblem::AboveBound => "above_bound",
        UsageProblem::WentBackwards => "went_backwards",
        UsageProblem::NotACount => "not_a_count",
    }
}

/// Every column, in order.
pub static COLUMNS: &[Column] = &[
    col("level", "", "the level's id: the artifact's `run_id`, the records file's `level`", Get::Str(|r| s(r.level))),
    col(
        "outcome",
        "",
        "`completed` (in the artifact's `request_timings`) or `failed` (in `failures`)",
        Get::Str(|r| s(r.both(|_| "completed", |_| "failed"))),
    ),
    col(
        "request_index",
        "",
        "the request's index in its level",
        Get::U64(|r| Some(r.both(|t| t.request_index, |f| f.request_index))),
    ),
    col("phase", "", "`warmup`, `measure` or `cooldown`", Get::Str(|r| s(phase(r.both(|t| t.phase, |f| f.phase))))),
    col(
        "started_at",
        "ns",
        "when the request was sent: the level's start plus `start_offset_ms`",
        Get::Timestamp(|r| {
            let offset = r.both(|t| t.start_offset_ms, |f| f.start_offset_ms);
            Some(r.level_started_ns.saturating_add((offset * 1e6) as u64))
        }),
    ),
    col(
        "start_offset_ms",
        "ms",
        "when the request was sent, from the level's start",
        Get::F64(|r| Some(r.both(|t| t.start_offset_ms, |f| f.start_offset_ms))),
    ),
    col(
        "intended_offset_ms",
        "ms",
        "open loop: when the schedule meant it to be sent",
        Get::F64(|r| r.both(|t| t.intended_offset_ms, |f| f.intended_offset_ms)),
    ),
    col(
        "schedule_lag_ms",
        "ms",
        "open loop: `start_offset_ms − intended_offset_ms`",
        Get::F64(|r| r.both(|t| t.schedule_lag_ms, |f| f.schedule_lag_ms)),
    ),
    col(
        "queue_wait_ms",
        "ms",
        "open loop: the part of the lag spent waiting for an in-flight slot",
        Get::F64(|r| r.both(|t| t.queue_wait_ms, |f| f.queue_wait_ms)),
    ),
    col(
        "time_to_first_output_ms",
        "ms",
        "request start → first reasoning or content delta",
        Get::F64(|r| r.both(|t| Some(t.time_to_first_output_ms), |f| f.time_to_first_output_ms)),
    ),
    col("ttft_ms", "ms", "request start → first content delta", Get::F64(|r| r.both(|t| t.ttft_ms, |f| f.ttft_ms))),
    col("e2e_ms", "ms", "completed: request start → `[DONE]`", Get::F64(|r| r.done().map(|t| t.e2e_ms))),
    col("elapsed_ms", "ms", "failed: request start → the failure", Get::F64(|r| r.failed().map(|f| f.elapsed_ms))),
    col("generation_ms", "ms", "`e2e_ms − time_to_first_output_ms`", Get::F64(|r| r.done().map(|t| t.generation_ms))),
    col(
        "visible_generation_ms",
        "ms",
        "`e2e_ms − ttft_ms`",
        Get::F64(|r| r.done().and_then(|t| t.visible_generation_ms)),
    ),
    col(
        "tpot_ms",
        "ms",
        "`generation_ms / (output_tokens − 1)` (the artifact's `mean_time_per_output_token_ms` and `mean_inter_token_latency_ms` are the same number)",
        Get::F64(|r| r.done().and_then(|t| t.tpot_ms)),
    ),
    col(
        "tpot_corrected_ms",
        "ms",
        "per-chunk counts: `generation_ms / (streamed_tokens − first_chunk_tokens)`",
        Get::F64(|r| r.done().and_then(|t| t.tpot_corrected_ms)),
    ),
    col(
        "decode_tok_s",
        "tokens/s",
        "`(output_tokens − 1) / generation seconds`",
        Get::F64(|r| r.done().and_then(|t| t.decode_tok_s)),
    ),
    col(
        "effective_prefill_tok_s",
        "tokens/s",
        "`prompt_tokens / time-to-first-output seconds`",
        Get::F64(|r| r.done().and_then(|t| t.effective_prefill_tok_s)),
    ),
    col(
        "ttft_from_intended_ms",
        "ms",
        "open loop: `ttft_ms + schedule_lag_ms`",
        Get::F64(|r| r.done().and_then(|t| t.ttft_from_intended_ms)),
    ),
    col(
        "e2e_from_intended_ms",
        "ms",
        "open loop: `e2e_ms + schedule_lag_ms`",
        Get::F64(|r| r.done().and_then(|t| t.e2e_from_intended_ms)),
    ),
    col(
        "max_stall_ms",
        "ms",
        "the longest gap between two output chunks",
        Get::F64(|r| r.done().and_then(|t| t.max_stall_ms)),
    ),
    col(
        "planned_context_tokens",
        "tokens",
        "the drawn context size",
        Get::U32(|r| Some(r.both(|t| t.planned_context_tokens, |f| f.planned_context_tokens))),
    ),
    col(
        "prompt_target_tokens",
        "tokens",
        "the sizer's prediction of the server's count for the prompt built",
        Get::U32(|r| r.done().map(|t| t.prompt_target_tokens)),
    ),
    col(
        "prompt_sizing_error_pct",
        "%",
        "`(prompt_tokens − prompt_target_tokens) / prompt_target_tokens · 100`",
        Get::F64(|r| r.done().and_then(|t| t.prompt_sizing_error_pct)),
    ),
    col(
        "prompt_tokens",
        "tokens",
        "the server's `usage.prompt_tokens`",
        Get::U64(|r| r.done().and_then(|t| t.prompt_tokens)),
    ),
    col(
        "cached_tokens",
        "tokens",
        "the server's `prompt_tokens_details.cached_tokens`",
        Get::U64(|r| r.done().and_then(|t| t.cached_tokens)),
    ),
    col(
        "output_tokens",
        "tokens",
        "completion tokens (reasoning included)",
        Get::U64(|r| r.done().map(|t| t.output_tokens)),
    ),
    col(
        "output_token_source",
        "",
        "`usage` or `chunk_count`",
        Get::Str(|r| r.done().and_then(|t| s(t.output_token_source.as_str()))),
    ),
    col(
        "usage_completion_tokens",
        "tokens",
        "the server's count when it was set aside as implausible",
        Get::U64(|r| r.done().and_then(|t| t.usage_completion_tokens)),
    ),
    col(
        "reasoning_tokens",
        "tokens",
        "reasoning tokens among `output_tokens`",
        Get::U64(|r| r.done().and_then(|t| t.reasoning_tokens)),
    ),
    col(
        "streamed_tokens",
        "tokens",
        "per-chunk counts: the cumulative count on the last output chunk",
        Get::U64(|r| r.done().and_then(|t| t.streamed_tokens)),
    ),
    col(
        "first_chunk_tokens",
        "tokens",
        "per-chunk counts: the first output chunk's tokens",
        Get::U32(|r| r.done().and_then(|t| t.first_chunk_tokens)),
    ),
    col(
        "tokens_per_chunk",
        "tokens",
        "`streamed_tokens` (else `output_tokens`) per output chunk",
        Get::F64(|r| r.done().and_then(|t| t.tokens_per_chunk)),
    ),
    col(
        "content_chunks",
        "",
        "chunks with non-empty content",
        Get::U32(|r| Some(r.both(|t| t.content_chunks, |f| f.content_chunks))),
    ),
    col(
        "reasoning_chunks",
        "",
        "chunks with non-empty reasoning",
        Get::U32(|r| Some(r.both(|t| t.reasoning_chunks, |f| f.reasoning_chunks))),
    ),
    col(
        "finish_reason",
        "",
        "as the server sent it (`length` when the output reached its budget)",
        Get::Str(|r| r.done().and_then(|t| t.finish_reason.as_deref()).and_then(s)),
    ),
    col(
        "reported_finish_reason",
        "",
        "the server's own word when it disagreed with the budget",
        Get::Str(|r| r.done().and_then(|t| t.reported_finish_reason.as_deref()).and_then(s)),
    ),
    col(
        "performance_eligible",
        "",
        "in the level's distributions (false for every failure)",
        Get::Bool(|r| Some(r.done().is_some_and(|t| t.performance_eligible))),
    ),
    col(
        "exclusion_reason",
        "",
        "why a completed request is left out of the distributions",
        Get::Str(|r| r.done().and_then(|t| t.exclusion_reason).and_then(|e| s(e.as_str()))),
    ),
    col(
        "visible_content_truncated",
        "",
        "the visible content exceeded the capture",
        Get::Bool(|r| r.done().map(|t| t.visible_content_truncated)),
    ),
    col("error_kind", "", "failed: the kind of failure", Get::Str(|r| r.failed().map(|f| kind(&f.error_kind)))),
    col(
        "http_status",
        "",
        "failed: the HTTP status, when one came",
        Get::U32(|r| r.failed().and_then(|f| f.http_status).map(u32::from)),
    ),
    col(
        "server_error_type",
        "",
        "failed: the server's error type or code (sanitized)",
        Get::Str(|r| r.failed().and_then(|f| f.server_error_type.as_deref()).and_then(s)),
    ),
    col(
        "message",
        "",
        "failed: the error message (sanitized, at most 200 characters)",
        Get::Str(|r| r.failed().and_then(|f| s(&f.message))),
    ),
    col(
        "stale_connection_retries",
        "",
        "sends repeated on a fresh connection",
        Get::U32(|r| Some(r.both(|t| t.stale_connection_retries, |f| f.stale_connection_retries))),
    ),
    col(
        "retries",
        "",
        "attempts repeated under the `[client]` retry policy",
        Get::U32(|r| Some(r.both(|t| t.retries, |f| f.retries))),
    ),
    col(
        "retried_errors",
        "",
        "the failures that caused them",
        Get::StrList(|r| Some(r.both(|t| &t.retried_errors, |f| &f.retried_errors).iter().map(kind).collect())),
    ),
    col(
        "canary_passed",
        "",
        "the request canary's verdict (null when canaries are off)",
        Get::Bool(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.passed)),
    ),
    col(
        "canary_failure_reason",
        "",
        "why the canary failed",
        Get::Str(|r| {
            r.done().and_then(|t| t.request_canary.as_ref()).and_then(|c| c.failure_reason).and_then(|f| s(f.as_str()))
        }),
    ),
    col(
        "canary_marker_at_start",
        "",
        "the visible content starts with the request's marker",
        Get::Bool(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.marker_at_start)),
    ),
    col(
        "canary_observed_marker_count",
        "",
        "occurrences of the request's own marker",
        Get::U32(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.observed_marker_count)),
    ),
    col(
        "canary_foreign_marker_count",
        "",
        "occurrences of another request's marker",
        Get::U32(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.foreign_marker_count)),
    ),
    col(
        "canary_malformed_marker_count",
        "",
        "marker-like text that is no request's marker",
        Get::U32(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.malformed_marker_count)),
    ),
    col(
        "canary_cross_session_marker_count",
        "",
        "conversations: markers of another session",
        Get::U32(|r| r.done().and_then(|t| t.request_canary.as_ref()).and_then(|c| c.cross_session_marker_count)),
    ),
    col(
        "canary_capture_complete",
        "",
        "the whole visible response was scanned",
        Get::Bool(|r| r.done().and_then(|t| t.request_canary.as_ref()).map(|c| c.capture_complete)),
    ),
    col(
        "canary_offending_marker",
        "",
        "the first foreign or malformed marker (bounded, sanitized)",
        Get::Str(|r| {
            r.done().and_then(|t| t.request_canary.as_ref()).and_then(|c| c.offending_marker.as_deref()).and_then(s)
        }),
    ),
    col(
        "controlled_requested_words",
        "words",
        "`response_words`: the words asked for",
        Get::U32(|r| r.done().and_then(|t| t.controlled_output.as_ref()).map(|c| c.requested_words)),
    ),
    col(
        "controlled_observed_words",
        "words",
        "`response_words`: the words of visible content",
        Get::U32(|r| r.done().and_then(|t| t.controlled_output.as_ref()).and_then(|c| c.observed_words)),
    ),
    col(
        "controlled_exact",
        "",
        "`response_words`: exactly the words asked for",
        Get::Bool(|r| r.done().and_then(|t| t.controlled_output.as_ref()).map(|c| c.exact)),
    ),
    col(
        "controlled_truncated",
        "",
        "`response_words`: cut by the budget or the capture",
        Get::Bool(|r| r.done().and_then(|t| t.controlled_output.as_ref()).map(|c| c.truncated)),
    ),
    col(
        "controlled_observable",
        "",
        "`response_words`: the length could be known",
        Get::Bool(|r| r.done().and_then(|t| t.controlled_output.as_ref()).map(|c| c.observable)),
    ),
    col(
        "usage_implausible_field",
        "",
        "the usage field the server's counts were rejected on",
        Get::Str(|r| r.done().and_then(|t| t.usage_implausible.as_ref()).and_then(|u| s(&u.field))),
    ),
    col(
        "usage_implausible_value",
        "",
        "the number the server sent, as its JSON text",
        Get::Str(|r| r.done().and_then(|t| t.usage_implausible.as_ref()).map(|u| Cow::Owned(u.value.to_string()))),
    ),
    col(
        "usage_implausible_limit",
        "tokens",
        "the bound it broke",
        Get::U64(|r| r.done().and_then(|t| t.usage_implausible.as_ref()).and_then(|u| u.limit)),
    ),
    col(
        "usage_implausible_problem",
        "",
        "`above_bound`, `went_backwards` or `not_a_count`",
        Get::Str(|r| r.done().and_then(|t| t.usage_implausible.as_ref()).and_then(|u| s(problem(u.problem)))),
    ),
    col("trace_row", "", "trace replay: the trace's data row (1-based)", Get::U64(|r| r.replay().trace_row)),
    col(
        "planned_output_tokens",
        "tokens",
        "the output length a trace or conversation asked for",
        Get::U32(|r| r.replay().planned_output_tokens),
    ),
    col(
        "expected_cached_tokens",
        "tokens",
        "leading prompt tokens an earlier request already sent",
        Get::U32(|r| r.replay().expected_cached_tokens),
    ),
    col("session", "", "conversations: the session id", Get::Str(|r| r.replay().session.as_deref().and_then(s))),
    col("turn", "", "conversations: the turn, from 1", Get::U32(|r| r.replay().turn)),
    col(
        "history_tokens",
        "tokens",
        "conversations: prompt tokens before the new user message",
        Get::U32(|r| r.replay().history_tokens),
    ),
    col(
        "backend",
        "",
        "the backend a router named in its response header",
        Get::Str(|r| r.replay().backend.as_deref().and_then(s)),
    ),
    col("replica", "", "several replicas: the replica's index", Get::U32(|r| r.replay().replica)),
    col(
        "model",
        "",
        "several models: the model the request named",
        Get::Str(|r| r.replay().model.as_deref().and_then(s)),
    ),
    col("media_images", "", "media: images in the request", Get::U32(|r| r.media().map(|m| m.images))),
    col("media_audio", "", "media: audio clips in the request", Get::U32(|r| r.media().map(|m| m.audio))),
    col("media_pixels", "pixels", "media: pixels of its images", Get::U64(|r| r.media().map(|m| m.pixels))),
    col("media_audio_seconds", "s", "media: seconds of its audio", Get::U32(|r| r.media().map(|m| m.audio_seconds))),
    col("media_bytes", "bytes", "media: encoded files before base64", Get::U64(|r| r.media().map(|m| m.media_bytes))),
    col("body_bytes", "bytes", "media: the whole request body", Get::U64(|r| r.media().map(|m| m.body_bytes))),
    col("tool_turn", "", "agent sessions: the request is a tool turn", Get::Bool(|r| r.replay().tool_turn)),
    col(
        "tool_latency_ms",
        "ms",
        "agent sessions: the tool latency slept before the request",
        Get::U64(|r| r.replay().tool_latency_ms),
    ),
    col(
        "schema_index",
        "",
        "structured output: the schema's place in `workload.response_format`",
        Get::U32(|r| r.done().and_then(|t| t.schema.as_ref()).map(|x| x.schema_index)),
    ),
    col(
        "schema_name",
        "",
        "structured output: the schema's name",
        Get::Str(|r| r.done().and_then(|t| t.schema.as_ref()).and_then(|x| s(&x.schema_name))),
    ),
    col(
        "schema_valid",
        "",
        "structured output: the answer satisfied its schema",
        Get::Bool(|r| r.done().and_then(|t| t.schema.as_ref()).and_then(|x| x.schema_valid)),
    ),
    col(
        "schema_violation",
        "",
        "structured output: the first rule the answer broke",
        Get::Str(|r| {
            r.done().and_then(|t| t.schema.as_ref()).and_then(|x| x.schema_violation).and_then(|v| s(v.as_str()))
        }),
    ),
    col(
        "schema_truncated",
        "",
        "structured output: not valid, and cut by the output budget",
        Get::Bool(|r| r.done().and_then(|t| t.schema.as_ref()).map(|x| x.schema_truncated)),
    ),
    col(
        "tool_calls",
        "",
        "tools offered: calls the response made",
        Get::U32(|r| r.done().and_then(|t| t.tool_calls.as_ref()).map(|c| c.calls)),
    ),
    col(
        "tool_calls_valid",
        "",
        "tools offered: calls to an offered tool with valid arguments",
        Get::U32(|r| r.done().and_then(|t| t.tool_calls.as_ref()).map(|c| c.valid)),
    ),
    col(
        "time_to_first_tool_call_ms",
        "ms",
        "tools offered: request start → the first piece of a call",
        Get::F64(|r| r.done().and_then(|t| t.tool_calls.as_ref()).and_then(|c| c.time_to_first_tool_call_ms)),
    ),
    col(
        "tool_argument_bytes",
        "bytes",
        "tools offered: bytes of every call's arguments",
        Get::U64(|r| r.done().and_then(|t| t.tool_calls.as_ref()).map(|c| c.argument_bytes)),
    ),
    col(
        "tool_argument_tokens",
        "tokens",
        "tools offered: tokens of the arguments",
        Get::U64(|r| r.done().and_then(|t| t.tool_calls.as_ref()).map(|c| c.argument_tokens)),
    ),
    col(
        "tool_argument_token_source",
        "",
        "tools offered: `usage` or `estimate`",
        Get::Str(|r| r.done().and_then(|t| t.tool_calls.as_ref()).and_then(|c| s(&c.argument_token_source))),
    ),
    col(
        "tool_argument_tok_s",
        "tokens/s",
        "tools offered: how fast the arguments streamed",
        Get::F64(|r| r.done().and_then(|t| t.tool_calls.as_ref()).and_then(|c| c.argument_tok_s)),
    ),
    col(
        "tool_invalid_reasons",
        "",
        "tools offered: why each invalid call was invalid",
        Get::StrList(|r| {
            r.done()
                .and_then(|t| t.tool_calls.as_ref())
                .map(|c| c.invalid_reasons.iter().map(|w| Cow::Borrowed(w.as_str())).collect())
        }),
    ),
    col(
        "chunk_gaps_us",
        "µs",
        "gaps between output chunks, a sparse histogram",
        Get::Gaps(|r| r.done().and_then(|t| t.chunk_gaps_us.as_ref())),
    ),
    col(
        "token_gaps_us",
        "µs",
        "per-chunk counts: each gap divided by its chunk's tokens, likewise",
        Get::Gaps(|r| r.done().and_then(|t| t.token_gaps_us.as_ref())),
    ),
];

fn phase(p: crate::request::record::Phase) -> &'static str {
    use crate::request::record::Phase;
    match p {
        Phase::Warmup => "warmup",
        Phase::Measure => "measure",
        Phase::Cooldown => "cooldown",
    }
}
