//! Runs that offer tools: the level's tool calls — requests that made any, calls, valid calls
//! and the valid rate, the reasons of the invalid ones counted, argument tokens, and the time to
//! the first tool-call piece (p50, p90, p99 nearest rank, over the performance-eligible
//! requests that made a call).
//!
//! Tallied in the one pass `finish_level` makes over the level's records (every phase, as
//! `replicas` is), so the live run, `summarize` and `merge` agree.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::contract::nearest_rank;
use crate::request::record::RequestTiming;

/// The level's `tool_calls` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallSummary {
    /// Completed requests (they all offered the tools).
    pub requests: u64,
    /// Requests whose response made at least one call.
    pub requests_with_calls: u64,
    pub calls: u64,
    pub valid: u64,
    pub invalid: u64,
    /// `valid / calls`; null without a call.
    pub valid_rate: Option<f64>,
    /// Invalid calls by reason (`unknown_tool`, `not_json`, `required`, …).
    pub invalid_by_reason: BTreeMap<String, u64>,
    pub argument_bytes: u64,
    pub argument_tokens: u64,
    pub time_to_first_tool_call_ms: Spread,
    /// Argument tokens per second, per request.
    pub argument_tok_s: Spread,
}

/// Nearest-rank percentiles of one per-request figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    pub samples: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let at = |p| (!values.is_empty()).then(|| nearest_rank(&values, p));
        Spread { samples: values.len(), p50: at(50), p90: at(90), p99: at(99) }
    }
}

/// The block being tallied.
#[derive(Debug, Default)]
pub struct Tally {
    requests: u64,
    with_calls: u64,
    calls: u64,
    valid: u64,
    reasons: BTreeMap<String, u64>,
    bytes: u64,
    tokens: u64,
    first: Vec<f64>,
    rate: Vec<f64>,
}

impl Tally {
    /// A completed request, after the level's final rules were applied to it.
    pub fn request(&mut self, r: &RequestTiming) {
        let Some(t) = &r.tool_calls else { return };
        self.requests += 1;
        self.with_calls += u64::from(t.calls > 0);
        self.calls += u64::from(t.calls);
        self.valid += u64::from(t.valid);
        for reason in &t.invalid_reasons {
            *self.reasons.entry(reason.clone()).or_default() += 1;
        }
        self.bytes += t.argument_bytes;
        self.tokens += t.argument_tokens;
        if r.performance_eligible {
            self.first.extend(t.time_to_first_tool_call_ms);
            self.rate.extend(t.argument_tok_s);
        }
    }

    /// The block; `None` when no record carried tool calls.
    pub fn finish(self) -> Option<ToolCallSummary> {
        (self.requests > 0).then(|| ToolCallSummary {
            requests: self.requests,
            requests_with_calls: self.with_calls,
            calls: self.calls,
            valid: self.valid,
            invalid: self.calls - self.valid.min(self.calls),
            valid_rate: (self.calls > 0).then(|| self.valid as f64 / self.calls as f64),
            invalid_by_reason: self.reasons,
            argument_bytes: self.bytes,
            argument_tokens: self.tokens,
            time_to_first_tool_call_ms: Spread::of(self.first),
            argument_tok_s: Spread::of(self.rate),
        })
    }
}
