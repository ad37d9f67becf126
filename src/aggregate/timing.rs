//! Per-request records in the artifact's units: milliseconds and tokens per second, derived once
//! from the worker's `Duration`s. Summaries are computed from these exact values, so anyone
//! re-deriving them from the artifact gets the same numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::worker::{Completed, Dropped, ErrorKind, Failed, TokenSource};
use crate::workload::{CanaryCheck, ControlledOutput};

pub fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// One completed request, as `request_timings[]` in the artifact.
#[derive(Debug, Clone, Serialize)]
pub struct RequestTiming {
    pub request_index: u64,
    pub planned_context_tokens: u32,
    /// Prompt size the text was built to (built-in estimate, chat template included).
    pub prompt_target_tokens: u32,
    /// Server-reported `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// Server-reported `prompt_tokens_details.cached_tokens`; null when not reported.
    pub cached_tokens: Option<u64>,
    pub output_tokens: u64,
    pub output_token_source: TokenSource,
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
    pub exclusion_reason: Option<&'static str>,
    pub stale_connection_retries: u32,
}

/// Where a request falls in its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Warmup,
    Measure,
    Cooldown,
}

/// Why a completed request is kept out of the distributions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exclusions {
    /// `controlled_output_policy = "strict"`: responses off the requested length are excluded.
    pub strict_output: bool,
    /// The request that warmed a shared prefix before a burst (its cache was cold by design).
    pub prefix_warmup_index: Option<u64>,
    /// Requests with a lower index are warm-up.
    pub warmup_below_index: Option<u64>,
    /// Requests sent before this offset are warm-up.
    pub warmup_before: Option<Duration>,
    /// Requests with this index or higher are cool-down.
    pub cooldown_from_index: Option<u64>,
    /// Requests sent at or after this offset are cool-down.
    pub cooldown_from: Option<Duration>,
}

impl Exclusions {
    pub fn phase(&self, index: u64, start_offset: Duration) -> Phase {
        if self.warmup_below_index.is_some_and(|n| index < n) || self.warmup_before.is_some_and(|t| start_offset < t) {
            Phase::Warmup
        } else if self.cooldown_from_index.is_some_and(|n| index >= n)
            || self.cooldown_from.is_some_and(|t| start_offset >= t)
        {
            Phase::Cooldown
        } else {
            Phase::Measure
        }
    }
}

/// The three clocks of an open-loop request, in milliseconds: (intended offset, schedule lag,
/// queue wait).
fn clocks(
    start_offset: Duration,
    intended: Option<Duration>,
    queue_wait: Option<Duration>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let intended_ms = intended.map(ms);
    // Differences of the recorded values, so the arithmetic holds exactly in the artifact.
    let lag = intended_ms.map(|i| ms(start_offset) - i);
    (intended_ms, lag, queue_wait.map(ms))
}

impl RequestTiming {
    pub fn from_completed(c: &Completed, rules: Exclusions) -> Self {
        let time_to_first_output_ms = ms(c.first_output);
        let ttft_ms = c.first_content.map(ms);
        let e2e_ms = ms(c.end);
        // Differences of the recorded values, so the arithmetic holds exactly in the artifact.
        let generation_ms = e2e_ms - time_to_first_output_ms;
        let n = c.output_tokens;
        let tpot_ms = (n > 1 && generation_ms > 0.0).then(|| generation_ms / (n - 1) as f64);
        let decode_tok_s = (n > 1 && generation_ms > 0.0).then(|| (n - 1) as f64 / (generation_ms / 1000.0));
        let effective_prefill_tok_s = match c.prompt_tokens {
            Some(p) if p > 0 && time_to_first_output_ms > 0.0 => Some(p as f64 / (time_to_first_output_ms / 1000.0)),
            _ => None,
        };
        let phase = rules.phase(c.index, c.start_offset);
        let (intended_offset_ms, schedule_lag_ms, queue_wait_ms) =
            clocks(c.start_offset, c.intended_offset, c.queue_wait);
        let exclusion_reason = if c.canary.as_ref().is_some_and(|k| !k.passed) {
            Some("canary_failed")
        } else if rules.strict_output && c.controlled_output.as_ref().is_some_and(|o| !o.exact || o.truncated) {
            Some("controlled_output")
        } else if rules.prefix_warmup_index == Some(c.index) {
            Some("prefix_warmup")
        } else if phase == Phase::Warmup {
            Some("warmup")
        } else if phase == Phase::Cooldown {
            Some("cooldown")
        } else {
            None
        };
        let prompt_sizing_error_pct = c
            .prompt_tokens
            .filter(|_| c.prompt_target_tokens > 0)
            .map(|p| (p as f64 - f64::from(c.prompt_target_tokens)) / f64::from(c.prompt_target_tokens) * 100.0);
        RequestTiming {
            request_index: c.index,
            planned_context_tokens: c.planned_context_tokens,
            prompt_target_tokens: c.prompt_target_tokens,
            prompt_tokens: c.prompt_tokens,
            cached_tokens: c.cached_tokens,
            output_tokens: n,
            output_token_source: c.output_token_source,
            content_chunks: c.content_chunks,
            reasoning_chunks: c.reasoning_chunks,
            start_offset_ms: ms(c.start_offset),
            intended_offset_ms,
            schedule_lag_ms,
            queue_wait_ms,
            time_to_first_output_ms,
            ttft_ms,
            e2e_ms,
            generation_ms,
            visible_generation_ms: ttft_ms.map(|t| e2e_ms - t),
            tpot_ms,
            mean_time_per_output_token_ms: tpot_ms,
            mean_inter_token_latency_ms: tpot_ms,
            decode_tok_s,
            effective_prefill_tok_s,
            finish_reason: c.finish_reason.clone(),
            visible_content_truncated: c.visible_content_truncated,
            request_canary: c.canary.clone(),
            ttft_from_intended_ms: schedule_lag_ms.and_then(|lag| ttft_ms.map(|t| t + lag)),
            e2e_from_intended_ms: schedule_lag_ms.map(|lag| e2e_ms + lag),
            phase,
            prompt_sizing_error_pct,
            controlled_output: c.controlled_output.clone(),
            performance_eligible: exclusion_reason.is_none(),
            exclusion_reason,
            stale_connection_retries: c.stale_connection_retries,
        }
    }
}

/// One failed request, as `failures[]` in the artifact: sanitized metadata and partial timings.
#[derive(Debug, Clone, Serialize)]
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
}

impl FailureRecord {
    pub fn from_failed(f: &Failed, rules: Exclusions) -> Self {
        let (intended_offset_ms, schedule_lag_ms, queue_wait_ms) =
            clocks(f.start_offset, f.intended_offset, f.queue_wait);
        FailureRecord {
            intended_offset_ms,
            schedule_lag_ms,
            queue_wait_ms,
            phase: rules.phase(f.index, f.start_offset),
            request_index: f.index,
            error_kind: f.kind,
            http_status: f.http_status,
            server_error_type: f.server_error_type.clone(),
            message: f.message.clone(),
            planned_context_tokens: f.planned_context_tokens,
            start_offset_ms: ms(f.start_offset),
            elapsed_ms: ms(f.elapsed),
            time_to_first_output_ms: f.first_output.map(ms),
            ttft_ms: f.first_content.map(ms),
            content_chunks: f.content_chunks,
            reasoning_chunks: f.reasoning_chunks,
            stale_connection_retries: f.stale_connection_retries,
        }
    }
}

/// An arrival the open loop did not send (`overload = "drop"`), as `dropped[]` in the artifact.
#[derive(Debug, Clone, Serialize)]
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
pub fn error_counts(failures: &[FailureRecord]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for f in failures {
        *counts.entry(f.error_kind.to_string()).or_insert(0) += 1;
    }
    counts
}
