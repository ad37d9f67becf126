//! Service-level objectives: each `[slo]` criterion (its objective read once, at validation)
//! checked against a level's distributions (the `slo` block) and against each request's own
//! values (goodput).

use serde::{Deserialize, Serialize};

use super::sample::Sample;
use crate::contract::{Metric, Objective, Stat};
use crate::plan::scenario::{Bound, Slo};

/// One objective checked against a level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SloResult {
    pub key: String,
    pub threshold: f64,
    pub bound: Bound,
    pub observed: Option<f64>,
    pub passed: bool,
}

/// The `slo` block: every objective and whether the level met them all.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SloReport {
    pub criteria: Vec<SloResult>,
    pub passed: bool,
}

/// Check a level against its objectives: `stat` gives a statistic of the level's distributions,
/// `error_rate` its server-fault failures over attempted requests. A missing value (no samples)
/// fails.
pub fn evaluate(slo: &Slo, stat: impl Fn(Metric, Stat) -> Option<f64>, error_rate: Option<f64>) -> Option<SloReport> {
    if slo.criteria.is_empty() {
        return None;
    }
    let criteria: Vec<SloResult> = slo
        .criteria
        .iter()
        .map(|c| {
            let observed = match c.objective {
                Objective::ErrorRate => error_rate,
                Objective::Distribution(m, s) => stat(m, s),
            };
            let passed = observed.is_some_and(|v| c.bound.holds(v, c.threshold));
            SloResult { key: c.objective.key(), threshold: c.threshold, bound: c.bound, observed, passed }
        })
        .collect();
    let passed = criteria.iter().all(|c| c.passed);
    Some(SloReport { criteria, passed })
}

/// Whether one request meets every per-request objective (a p99 objective is checked against the
/// request's own value). Objectives without a per-request reading (error rate) do not apply.
pub fn meets_request_slos(r: &Sample, slo: &Slo) -> bool {
    slo.criteria.iter().all(|c| match c.objective {
        Objective::Distribution(m, _) => request_value(r, m).is_some_and(|v| c.bound.holds(v, c.threshold)),
        Objective::ErrorRate => true,
    })
}

/// A request's own value of a distribution's metric.
pub fn request_value(r: &Sample, m: Metric) -> Option<f64> {
    match m {
        Metric::CompletionTokens => Some(r.output_tokens() as f64),
        Metric::PromptTokens => r.prompt_tokens().map(|p| p as f64),
        Metric::DecodeTokS => r.decode_tok_s(),
        Metric::EffectivePrefillTokS => r.effective_prefill_tok_s(),
        Metric::MeanInterTokenLatency | Metric::MeanTimePerOutputToken | Metric::Tpot => r.tpot_ms(),
        Metric::E2e => Some(r.e2e_ms()),
        Metric::Generation => Some(r.generation_ms()),
        Metric::TimeToFirstOutput => Some(r.ttfo_ms()),
        Metric::Ttft => r.ttft_ms(),
        Metric::TtftFromIntended => r.ttft_from_intended_ms(),
        Metric::E2eFromIntended => r.e2e_from_intended_ms(),
        Metric::ScheduleLag => r.schedule_lag_ms(),
        Metric::QueueWait => r.queue_wait_ms(),
        Metric::TokensPerChunk => r.tokens_per_chunk(),
        Metric::MaxStall => r.max_stall_ms(),
        Metric::TpotCorrected => r.tpot_corrected_ms(),
        // Per gap, not per request: from the gap histograms.
        Metric::ItlChunk | Metric::ItlToken => None,
    }
}
