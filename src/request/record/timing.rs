//! Per-request records in the artifact's units: milliseconds and tokens per second, derived once
//! from the worker's `Duration`s. Every derived value is computed by the functions in `derive`
//! from the recorded milliseconds, here and in the compact sample store alike, so summaries,
//! records and anyone re-deriving them from the artifact agree to the last bit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::checks::{CanaryCheck, ControlledOutput, MAX_PLAUSIBLE_TOKENS, UsageImplausible};
use super::gaps::GapSketch;
use super::outcome::{Completed, Dropped, Failed, TokenSource};
use super::replay::ReplayFacts;
use super::schema_check::SchemaCheck;
use crate::contract::ErrorKind;

pub fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// The derived metrics, as functions of recorded values (one definition for every consumer).
pub mod derive {
    /// `e2e − time to first output`.
    pub fn generation_ms(ttfo_ms: f64, e2e_ms: f64) -> f64 {
        e2e_ms - ttfo_ms
    }
    /// `generation / (tokens − 1)`; none below two tokens or without generation time.
    pub fn tpot_ms(generation_ms: f64, output_tokens: u64) -> Option<f64> {
        (output_tokens > 1 && generation_ms > 0.0).then(|| generation_ms / (output_tokens - 1) as f64)
    }
    /// `(tokens − 1) / generation seconds`.
    pub fn decode_tok_s(generation_ms: f64, output_tokens: u64) -> Option<f64> {
        (output_tokens > 1 && generation_ms > 0.0).then(|| (output_tokens - 1) as f64 / (generation_ms / 1000.0))
    }
    /// `prompt tokens / time-to-first-output seconds`.
    pub fn effective_prefill_tok_s(prompt_tokens: Option<u64>, ttfo_ms: f64) -> Option<f64> {
        match prompt_tokens {
            Some(p) if p > 0 && ttfo_ms > 0.0 => Some(p as f64 / (ttfo_ms / 1000.0)),
            _ => None,
        }
    }
    /// `start − intended` (open loop).
    pub fn schedule_lag_ms(start_offset_ms: f64, intended_offset_ms: Option<f64>) -> Option<f64> {
        intended_offset_ms.map(|i| start_offset_ms - i)
    }
    /// Tokens per output chunk.
    pub fn tokens_per_chunk(tokens: u64, chunks: u64) -> Option<f64> {
        (chunks > 0).then(|| tokens as f64 / chunks as f64)
    }
    /// `generation / (streamed − first chunk's tokens)`: TPOT without the tokens the first
    /// chunk delivered at once; none without per-chunk counts.
    pub fn tpot_corrected_ms(generation_ms: f64, streamed: Option<u64>, first_chunk: Option<u32>) -> Option<f64> {
        let after_first = streamed?.checked_sub(u64::from(first_chunk?)).filter(|&n| n > 0)?;
        (generation_ms > 0.0).then(|| generation_ms / after_first as f64)
    }
    /// `(server − target) / target · 100`.
    pub fn sizing_error_pct(prompt_tokens: Option<u64>, target: u32) -> Option<f64> {
        prompt_tokens.filter(|_| target > 0).map(|p| (p as f64 - f64::from(target)) / f64::from(target) * 100.0)
    }
}

/// One completed request, as `request_timings[]` in the artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestTiming {
    pub request_index: u64,
    pub planned_context_tokens: u32,
    /// The sizer's prediction of the server's count for the prompt built.
    pub prompt_target_tokens: u32,
    /// Server-reported `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// Server-reported `prompt_tokens_details.cached_tokens`; null when not reported.
    pub cached_tokens: Option<u64>,
    pub output_tokens: u64,
    pub output_token_source: TokenSource,
    /// The server's `usage.completion_tokens`, present only when it was set aside as
    /// implausible (0, or far fewer than the chunks that streamed); `output_tokens` is then the
    /// chunk count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_completion_tokens: Option<u64>,
    /// Reasoning tokens among `output_tokens`, when the server's usage reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    /// When the request was sent, from the start of the level.
    pub start_offset_ms: f64,
    /// Open loop: when the schedule meant it to be sent.
    pub intended_offset_ms: Option<f64>,
    /// Open loop: `start_offset_ms − intended_offset_ms`, queueing included.
    pub schedule_lag_ms: Option<f64>,
    /// Open loop: the part of the lag spent waiting for an in-flight slot.
    pub queue_wait_ms: Option<f64>,
    pub time_to_first_output_ms: f64,
    /// Null when the response had reasoning but no visible content.
    pub ttft_ms: Option<f64>,
    pub e2e_ms: f64,
    /// `e2e_ms − time_to_first_output_ms`.
    pub generation_ms: f64,
    /// `e2e_ms − ttft_ms`.
    pub visible_generation_ms: Option<f64>,
    /// `generation_ms / (output_tokens − 1)`; null for fewer than two tokens or zero generation time.
    pub tpot_ms: Option<f64>,
    pub mean_time_per_output_token_ms: Option<f64>,
    pub mean_inter_token_latency_ms: Option<f64>,
    /// `(output_tokens − 1) / generation seconds`.
    pub decode_tok_s: Option<f64>,
    /// `prompt_tokens / time-to-first-output seconds`.
    pub effective_prefill_tok_s: Option<f64>,
    pub finish_reason: Option<String>,
    /// The server's own finish reason, present only when it disagreed with the budget: the
    /// output reached `max_tokens` but the server said it stopped on its own (`stop`; the
    /// Responses API's `completed`), and `finish_reason` says `length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_finish_reason: Option<String>,
    /// Present only when the server's usage could not describe this request (beyond what it
    /// could produce, going backwards, or no count at all): the first offending count. The
    /// record then keeps none of the server's counts and is excluded (`usage_implausible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_implausible: Option<UsageImplausible>,
    pub visible_content_truncated: bool,
    pub request_canary: Option<CanaryCheck>,
    /// Open loop: TTFT seen by the user whose request arrived at the intended time
    /// (`ttft_ms + schedule_lag_ms`).
    pub ttft_from_intended_ms: Option<f64>,
    /// Open loop: `e2e_ms + schedule_lag_ms`.
    pub e2e_from_intended_ms: Option<f64>,
    /// `warmup`, `measure` or `cooldown`.
    pub phase: Phase,
    /// `(prompt_tokens − prompt_target_tokens) / prompt_target_tokens · 100`.
    pub prompt_sizing_error_pct: Option<f64>,
    /// The `response_words` check; null when no word count was requested.
    pub controlled_output: Option<ControlledOutput>,
    /// False when the record is kept but left out of the distributions.
    pub performance_eligible: bool,
    pub exclusion_reason: Option<Exclusion>,
    pub stale_connection_retries: u32,
    /// Attempts repeated under the `[client]` retry policy, and why.
    pub retries: u32,
    pub retried_errors: Vec<ErrorKind>,
    /// Trace replay and conversations: where the request came from and what was planned for it
    /// (each field absent when unset, so other runs' records are unchanged).
    #[serde(flatten)]
    pub replay: ReplayFacts,
    /// The longest gap between two output chunks (absent below two chunks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stall_ms: Option<f64>,
    /// Tokens per output chunk: `streamed_tokens` (else `output_tokens`) over the output chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_chunk: Option<f64>,
    /// Per-chunk counts: the cumulative `usage.completion_tokens` on the last output chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed_tokens: Option<u64>,
    /// Per-chunk counts: the tokens of the first output chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_tokens: Option<u32>,
    /// Per-chunk counts: `generation_ms / (streamed_tokens − first_chunk_tokens)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_corrected_ms: Option<f64>,
    /// Gaps between output chunks, as a sparse histogram `[[value_us, count], …]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_gaps_us: Option<GapSketch>,
    /// Per-chunk counts: each gap divided by the tokens its chunk delivered, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_gaps_us: Option<GapSketch>,
    /// Structured output: the schema asked for and what the check found (absent otherwise).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<SchemaCheck>,
    /// Runs that offer tools: the response's tool calls (see `tool_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<super::ToolCallRecord>,
}

/// Where a request falls in its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Warmup,
    Measure,
    Cooldown,
}

/// Why a completed request is kept out of the distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    CanaryFailed,
    /// The answer did not satisfy its `workload.response_format` schema (and was not cut by
    /// the output budget).
    SchemaInvalid,
    /// The server's usage could not describe the request (see `RequestTiming::usage_implausible`).
    UsageImplausible,
    ControlledOutput,
    PrefixWarmup,
    Warmup,
    Cooldown,
}

impl Exclusion {
    /// The name written in `exclusion_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Exclusion::CanaryFailed => "canary_failed",
            Exclusion::SchemaInvalid => "schema_invalid",
            Exclusion::UsageImplausible => "usage_implausible",
            Exclusion::ControlledOutput => "controlled_output",
            Exclusion::PrefixWarmup => "prefix_warmup",
            Exclusion::Warmup => "warmup",
            Exclusion::Cooldown => "cooldown",
        }
    }

    /// Exclusions the scenario planned (warm-up, cool-down, a burst's warm-up request), as
    /// opposed to responses that failed a check.
    pub fn planned(self) -> bool {
        matches!(self, Exclusion::PrefixWarmup | Exclusion::Warmup | Exclusion::Cooldown)
    }

    /// Whether one such exclusion makes the level ineligible. An invalid structured answer
    /// does not: its level is judged on the share of them (`max_invalid_rate`).
    pub fn gates_level(self) -> bool {
        !self.planned() && self != Exclusion::SchemaInvalid
    }
}

/// The plain facts about a completed request that decide its exclusion.
#[derive(Debug, Clone, Copy)]
pub struct ExclusionFacts {
    pub index: u64,
    pub start_offset_ms: f64,
    pub canary_failed: bool,
    /// The answer broke its structured-output schema (see `SchemaCheck::invalid`).
    pub schema_invalid: bool,
    /// The server's usage was rejected, or a recorded count is beyond any request's.
    pub usage_implausible: bool,
    /// Off the requested `response_words` or truncated: what the strict policy excludes.
    pub controlled_miss: bool,
}

/// The rules that decide phases and exclusions; all thresholds are in the records' own units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Exclusions {
    /// `controlled_output_policy = "strict"`: responses off the requested length are excluded.
    pub strict_output: bool,
    /// The request that warmed a shared prefix before a burst (its cache was cold by design).
    pub prefix_warmup_index: Option<u64>,
    /// Requests with a lower index are warm-up.
    pub warmup_below_index: Option<u64>,
    /// Requests sent before this offset (ms) are warm-up.
    pub warmup_before_ms: Option<f64>,
    /// Requests with this index or higher are cool-down.
    pub cooldown_from_index: Option<u64>,
    /// Requests sent at or after this offset (ms) are cool-down.
    pub cooldown_from_ms: Option<f64>,
}

impl Exclusions {
    pub fn phase(&self, index: u64, start_offset_ms: f64) -> Phase {
        if self.warmup_below_index.is_some_and(|n| index < n)
            || self.warmup_before_ms.is_some_and(|t| start_offset_ms < t)
        {
            Phase::Warmup
        } else if self.cooldown_from_index.is_some_and(|n| index >= n)
            || self.cooldown_from_ms.is_some_and(|t| start_offset_ms >= t)
        {
            Phase::Cooldown
        } else {
            Phase::Measure
        }
    }

    /// The exclusion of one completed request, first reason first.
    pub fn exclusion(&self, s: ExclusionFacts) -> Option<Exclusion> {
        if s.canary_failed {
            Some(Exclusion::CanaryFailed)
        } else if s.usage_implausible {
            Some(Exclusion::UsageImplausible)
        } else if s.schema_invalid {
            Some(Exclusion::SchemaInvalid)
        } else if self.strict_output && s.controlled_miss {
            Some(Exclusion::ControlledOutput)
        } else if self.prefix_warmup_index == Some(s.index) {
            Some(Exclusion::PrefixWarmup)
        } else {
            match self.phase(s.index, s.start_offset_ms) {
                Phase::Warmup => Some(Exclusion::Warmup),
                Phase::Cooldown => Some(Exclusion::Cooldown),
                Phase::Measure => None,
            }
        }
    }

    /// Bring a record's phase and exclusion in line with these rules.
    pub fn apply(&self, r: &mut RequestTiming) {
        r.phase = self.phase(r.request_index, r.start_offset_ms);
        r.exclusion_reason = self.exclusion(r.facts());
        r.performance_eligible = r.exclusion_reason.is_none();
    }

    /// Bring a failure's phase in line with these rules (failures are never in distributions).
    pub fn apply_to_failure(&self, f: &mut FailureRecord) {
        f.phase = self.phase(f.request_index, f.start_offset_ms);
    }
}

impl RequestTiming {
    pub fn facts(&self) -> ExclusionFacts {
        ExclusionFacts {
            index: self.request_index,
            start_offset_ms: self.start_offset_ms,
            canary_failed: self.request_canary.as_ref().is_some_and(|c| !c.passed),
            schema_invalid: self.schema.as_ref().is_some_and(SchemaCheck::invalid),
            // A count no request reaches (a records file written by hand, say) is rejected here
            // too, so no total over eligible records can wrap.
            usage_implausible: self.usage_implausible.is_some()
                || [
                    Some(self.output_tokens),
                    self.prompt_tokens,
                    self.cached_tokens,
                    self.streamed_tokens,
                    self.reasoning_tokens,
                ]
                .into_iter()
                .flatten()
                .any(|n| n > MAX_PLAUSIBLE_TOKENS),
            controlled_miss: self.controlled_output.as_ref().is_some_and(|o| !o.exact || o.truncated),
        }
    }

    pub fn from_completed(c: &Completed, rules: &Exclusions) -> Self {
        let ttfo = ms(c.first_output);
        let ttft = c.first_content.map(ms);
        let e2e = ms(c.end);
        let start = ms(c.start_offset);
        let intended = c.intended_offset.map(ms);
        let generation = derive::generation_ms(ttfo, e2e);
        let tpot = derive::tpot_ms(generation, c.output_tokens);
        let lag = derive::schedule_lag_ms(start, intended);
        let x = c.replay.as_deref().cloned().unwrap_or_default();
        let per_chunk = c.chunks.per_chunk.as_ref();
        let streamed = per_chunk.map(|p| p.streamed_tokens);
        let first_chunk = per_chunk.map(|p| p.first_chunk_tokens);
        let chunks = u64::from(c.content_chunks) + u64::from(c.reasoning_chunks);
        let mut r = RequestTiming {
            request_index: c.index,
            planned_context_tokens: c.planned_context_tokens,
            prompt_target_tokens: c.prompt_target_tokens,
            prompt_tokens: c.prompt_tokens,
            cached_tokens: c.cached_tokens,
            output_tokens: c.output_tokens,
            output_token_source: c.output_token_source,
            usage_completion_tokens: c.usage_completion_tokens,
            reasoning_tokens: c.reasoning_tokens,
            content_chunks: c.content_chunks,
            reasoning_chunks: c.reasoning_chunks,
            start_offset_ms: start,
            intended_offset_ms: intended,
            schedule_lag_ms: lag,
            queue_wait_ms: c.queue_wait.map(ms),
            time_to_first_output_ms: ttfo,
            ttft_ms: ttft,
            e2e_ms: e2e,
            generation_ms: generation,
            visible_generation_ms: ttft.map(|t| e2e - t),
            tpot_ms: tpot,
            mean_time_per_output_token_ms: tpot,
            mean_inter_token_latency_ms: tpot,
            decode_tok_s: derive::decode_tok_s(generation, c.output_tokens),
            effective_prefill_tok_s: derive::effective_prefill_tok_s(c.prompt_tokens, ttfo),
            finish_reason: c.finish_reason.clone(),
            reported_finish_reason: c.corrections.as_ref().and_then(|x| x.reported_finish_reason.clone()),
            usage_implausible: c.corrections.as_ref().and_then(|x| x.usage_implausible.clone()),
            visible_content_truncated: c.visible_content_truncated,
            request_canary: c.canary.clone(),
            ttft_from_intended_ms: lag.and_then(|lag| ttft.map(|t| t + lag)),
            e2e_from_intended_ms: lag.map(|lag| e2e + lag),
            phase: Phase::Measure,
            prompt_sizing_error_pct: derive::sizing_error_pct(c.prompt_tokens, c.prompt_target_tokens),
            controlled_output: c.controlled_output.clone(),
            performance_eligible: true,
            exclusion_reason: None,
            stale_connection_retries: c.stale_connection_retries,
            retries: c.retries,
            retried_errors: c.retried_errors.clone(),
            replay: x,
            max_stall_ms: c.chunks.max_stall.map(ms),
            tokens_per_chunk: derive::tokens_per_chunk(streamed.unwrap_or(c.output_tokens), chunks),
            streamed_tokens: streamed,
            first_chunk_tokens: first_chunk,
            tpot_corrected_ms: derive::tpot_corrected_ms(generation, streamed, first_chunk),
            chunk_gaps_us: Some(c.chunks.chunk_gaps.clone()).filter(|g| !g.is_empty()),
            token_gaps_us: per_chunk.map(|p| p.token_gaps.clone()).filter(|g| !g.is_empty()),
            schema: c.schema.as_deref().cloned(),
            tool_calls: c.tool_calls.as_deref().cloned(),
        };
        rules.apply(&mut r);
        r
    }
}

/// One failed request, as `failures[]` in the artifact: sanitized metadata and partial timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailureRecord {
    pub request_index: u64,
    pub error_kind: ErrorKind,
    pub http_status: Option<u16>,
    pub server_error_type: Option<String>,
    pub message: String,
    pub planned_context_tokens: u32,
    pub start_offset_ms: f64,
    pub intended_offset_ms: Option<f64>,
    pub schedule_lag_ms: Option<f64>,
    pub queue_wait_ms: Option<f64>,
    pub phase: Phase,
    /// Time from sending to the failure.
    pub elapsed_ms: f64,
    pub time_to_first_output_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub stale_connection_retries: u32,
    pub retries: u32,
    pub retried_errors: Vec<ErrorKind>,
    /// Trace replay and conversations: where the request came from and what was planned for it
    /// (each field absent when unset, so other runs' records are unchanged).
    #[serde(flatten)]
    pub replay: ReplayFacts,
}

impl FailureRecord {
    pub fn from_failed(f: &Failed, rules: &Exclusions) -> Self {
        let start = ms(f.start_offset);
        let intended = f.intended_offset.map(ms);
        let x = f.replay.as_deref().cloned().unwrap_or_default();
        FailureRecord {
            request_index: f.index,
            error_kind: f.kind,
            http_status: f.http_status,
            server_error_type: f.server_error_type.clone(),
            message: f.message.clone(),
            planned_context_tokens: f.planned_context_tokens,
            start_offset_ms: start,
            intended_offset_ms: intended,
            schedule_lag_ms: derive::schedule_lag_ms(start, intended),
            queue_wait_ms: f.queue_wait.map(ms),
            phase: rules.phase(f.index, start),
            elapsed_ms: ms(f.elapsed),
            time_to_first_output_ms: f.first_output.map(ms),
            ttft_ms: f.first_content.map(ms),
            content_chunks: f.content_chunks,
            reasoning_chunks: f.reasoning_chunks,
            stale_connection_retries: f.stale_connection_retries,
            retries: f.retries,
            retried_errors: f.retried_errors.clone(),
            replay: x,
        }
    }
}

/// An arrival the open loop did not send (`overload = "drop"`), as `dropped[]` in the artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DroppedRecord {
    pub request_index: u64,
    pub planned_context_tokens: u32,
    pub intended_offset_ms: f64,
}

impl DroppedRecord {
    pub fn from_dropped(d: &Dropped) -> Self {
        DroppedRecord {
            request_index: d.index,
            planned_context_tokens: d.planned_context_tokens,
            intended_offset_ms: ms(d.intended_offset),
        }
    }
}

/// Failures counted by `error_kind`.
pub fn error_counts<'a>(kinds: impl Iterator<Item = &'a ErrorKind>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for kind in kinds {
        *counts.entry(kind.to_string()).or_insert(0) += 1;
    }
    counts
}
