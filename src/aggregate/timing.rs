//! Per-request records in the artifact's units: milliseconds and tokens per second, derived once
//! from the worker's `Duration`s. Summaries are computed from these exact values, so anyone
//! re-deriving them from the artifact gets the same numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::worker::{Completed, ErrorKind, Failed, TokenSource};
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
    /// `(prompt_tokens − prompt_target_tokens) / prompt_target_tokens · 100`.
    pub prompt_sizing_error_pct: Option<f64>,
    /// The `response_words` check; null when no word count was requested.
    pub controlled_output: Option<ControlledOutput>,
    /// False when the record is kept but left out of the distributions.
    pub performance_eligible: bool,
    pub exclusion_reason: Option<&'static str>,
    pub stale_connection_retries: u32,
}

/// Why a completed request is kept out of the distributions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exclusions {
    /// `controlled_output_policy = "strict"`: responses off the requested length are excluded.
    pub strict_output: bool,
    /// The request that warmed a shared prefix before a burst (its cache was cold by design).
    pub prefix_warmup_index: Option<u64>,
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
        let exclusion_reason = if c.canary.as_ref().is_some_and(|k| !k.passed) {
            Some("canary_failed")
        } else if rules.strict_output && c.controlled_output.as_ref().is_some_and(|o| !o.exact || o.truncated) {
            Some("controlled_output")
        } else if rules.prefix_warmup_index == Some(c.index) {
            Some("prefix_warmup")
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
    /// Time from sending to the failure.
    pub elapsed_ms: f64,
    pub time_to_first_output_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub stale_connection_retries: u32,
}

impl FailureRecord {
    pub fn from_failed(f: &Failed) -> Self {
        FailureRecord {
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

/// Failures counted by `error_kind`.
pub fn error_counts(failures: &[FailureRecord]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for f in failures {
        *counts.entry(f.error_kind.to_string()).or_insert(0) += 1;
    }
    counts
}
