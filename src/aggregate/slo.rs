//! Service-level objectives: each `[slo]` criterion read as a typed objective, checked against a
//! level's distributions (the `slo` block) and against each request's own values (goodput).

use serde::{Deserialize, Serialize};

use super::sample::Sample;
use super::summary::{Distributions, Metric, Population, Stat};
use crate::scenario::{Bound, Slo, SloCriterion};

/// What a criterion reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// A statistic of a distribution, e.g. `ttft_p99_ms`.
    Distribution(Metric, Stat),
    /// Server-fault failures over attempted requests.
    ErrorRate,
}

/// Statistics an objective may name.
const OBJECTIVE_STATS: [Stat; 7] = [Stat::Mean, Stat::P50, Stat::P75, Stat::P90, Stat::P95, Stat::P99, Stat::Max];

/// Distributions an objective may name.
const OBJECTIVE_METRICS: [Metric; 9] = [
    Metric::Ttft,
    Metric::TimeToFirstOutput,
    Metric::Tpot,
    Metric::E2e,
    Metric::Generation,
    Metric::TtftFromIntended,
    Metric::E2eFromIntended,
    Metric::DecodeTokS,
    Metric::EffectivePrefillTokS,
];

impl Objective {
    /// The objective a validated criterion names (`None` only for a key validation refused).
    pub fn of(criterion: &SloCriterion) -> Option<Objective> {
        if criterion.key == "error_rate" {
            return Some(Objective::ErrorRate);
        }
        OBJECTIVE_METRICS.iter().find_map(|&m| {
            OBJECTIVE_STATS.iter().find_map(|&stat| {
                let unit = if m.ms_suffix() { "_ms" } else { "" };
                (criterion.key == format!("{}_{}{unit}", m.stem(), stat.name()))
                    .then_some(Objective::Distribution(m, stat))
            })
        })
    }
}

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

/// Check a level against its objectives. A missing value (no samples) fails.
pub fn evaluate(slo: &Slo, distributions: &Distributions, population: &Population) -> Option<SloReport> {
    if slo.criteria.is_empty() {
        return None;
    }
    let criteria: Vec<SloResult> = slo
        .criteria
        .iter()
        .map(|c| {
            let observed = match Objective::of(c) {
                Some(Objective::ErrorRate) => (population.attempted_requests > 0)
                    .then(|| population.failed_server_faults as f64 / population.attempted_requests as f64),
                Some(Objective::Distribution(m, stat)) => distributions.stat(m, stat),
                None => None,
            };
            let passed = observed.is_some_and(|v| c.bound.holds(v, c.threshold));
            SloResult { key: c.key.clone(), threshold: c.threshold, bound: c.bound, observed, passed }
        })
        .collect();
    let passed = criteria.iter().all(|c| c.passed);
    Some(SloReport { criteria, passed })
}

/// Whether one request meets every per-request objective (a p99 objective is checked against the
/// request's own value). Objectives without a per-request reading (error rate) do not apply.
pub fn meets_request_slos(r: &Sample, slo: &Slo) -> bool {
    slo.criteria.iter().all(|c| match Objective::of(c) {
        Some(Objective::Distribution(m, _)) => request_value(r, m).is_some_and(|v| c.bound.holds(v, c.threshold)),
        Some(Objective::ErrorRate) | None => true,
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
