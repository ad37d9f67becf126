//! The artifact's `metrics` and `metric_population` blocks, computed from the compact sample
//! store. Only performance-eligible requests enter distributions and totals; failures and failed
//! canaries are counted, never averaged in.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::sample::{FailureSample, Sample};
use super::stats::{PERCENTILES, Summary};
use crate::scenario::{Bound, Slo};

/// Below this many samples a p99 is only descriptive (one sample decides it).
pub const P99_MIN_SAMPLES: usize = 100;

/// A distribution family: its key stem in `metrics`, the record field it summarises, and whether
/// its statistic keys end in `_ms`.
struct Family {
    stem: &'static str,
    value: fn(&Sample) -> Option<f64>,
    ms_suffix: bool,
}

const FAMILIES: &[Family] = &[
    Family { stem: "completion_tokens", value: |r| Some(r.output_tokens() as f64), ms_suffix: false },
    Family { stem: "prompt_tokens", value: |r| r.prompt_tokens().map(|p| p as f64), ms_suffix: false },
    Family { stem: "decode_tok_s", value: Sample::decode_tok_s, ms_suffix: false },
    Family { stem: "effective_prefill_tok_s", value: Sample::effective_prefill_tok_s, ms_suffix: false },
    Family { stem: "mean_inter_token_latency_ms", value: Sample::tpot_ms, ms_suffix: false },
    Family { stem: "e2e", value: |r| Some(r.e2e_ms()), ms_suffix: true },
    Family { stem: "generation", value: |r| Some(r.generation_ms()), ms_suffix: true },
    Family { stem: "time_to_first_output", value: |r| Some(r.ttfo_ms()), ms_suffix: true },
    Family { stem: "mean_time_per_output_token", value: Sample::tpot_ms, ms_suffix: true },
    Family { stem: "tpot", value: Sample::tpot_ms, ms_suffix: true },
    Family { stem: "ttft", value: Sample::ttft_ms, ms_suffix: true },
];

/// The metrics whose p99 sample counts are reported in `metric_population`.
const P99_METRICS: &[(&str, &str)] = &[
    ("decode_tok_s", "decode_tok_s"),
    ("e2e", "e2e"),
    ("effective_prefill_tok_s", "effective_prefill_tok_s"),
    ("tpot", "tpot"),
    ("ttft", "ttft"),
];

/// Summaries of every family over the eligible requests, keyed by family stem.
pub fn summaries(samples: &[Sample]) -> BTreeMap<&'static str, Option<Summary>> {
    let eligible: Vec<&Sample> = samples.iter().filter(|r| r.eligible()).collect();
    FAMILIES.iter().map(|f| (f.stem, Summary::of(eligible.iter().filter_map(|r| (f.value)(r)).collect()))).collect()
}

fn summary_keys(out: &mut Map<String, Value>, family: &Family, s: Option<&Summary>) {
    let unit = if family.ms_suffix { "_ms" } else { "" };
    let mut put = |stat: &str, v: Option<f64>| {
        out.insert(format!("{}_{stat}{unit}", family.stem), v.map_or(Value::Null, |x| json!(x)));
    };
    put("mean", s.map(|s| s.mean));
    put("stddev", s.map(|s| s.stddev));
    put("mean_ci95_low", s.map(|s| s.mean_ci95_low));
    put("mean_ci95_high", s.map(|s| s.mean_ci95_high));
    put("min", s.map(|s| s.min));
    put("max", s.map(|s| s.max));
    for (i, p) in PERCENTILES.iter().enumerate() {
        put(&format!("p{p}"), s.map(|s| s.percentiles[i]));
    }
    out.insert(format!("{}_samples", family.stem), json!(s.map_or(0, |s| s.samples)));
}

/// Families that exist only for open loops (null elsewhere): the user-visible latencies from the
/// intended time, and the dispatch lag itself.
const OPEN_LOOP_FAMILIES: &[Family] = &[
    Family { stem: "ttft_from_intended", value: Sample::ttft_from_intended_ms, ms_suffix: true },
    Family { stem: "e2e_from_intended", value: Sample::e2e_from_intended_ms, ms_suffix: true },
];

/// Inputs beyond the records that the metrics need.
pub struct MetricsInput<'a> {
    /// Completed requests, their exclusions already decided.
    pub samples: &'a [Sample],
    pub failures: &'a [FailureSample],
    pub wall_clock_ms: f64,
    pub attempted: u64,
    pub failed_server_faults: u64,
    pub interrupted: bool,
    pub slo: &'a Slo,
}

/// `metrics` (a flat, sorted map like the reference's) and `metric_population`.
pub fn compute(input: &MetricsInput) -> (Map<String, Value>, Population) {
    let records = input.samples;
    let eligible: Vec<&Sample> = records.iter().filter(|r| r.eligible()).collect();
    let sums = summaries(records);
    let mut m = Map::new();
    for f in FAMILIES {
        summary_keys(&mut m, f, sums.get(f.stem).and_then(Option::as_ref));
    }
    for f in OPEN_LOOP_FAMILIES {
        summary_keys(&mut m, f, Summary::of(eligible.iter().filter_map(|r| (f.value)(r)).collect()).as_ref());
    }
    // Dispatch lag and queue wait are about the client, so every request sent counts, eligible
    // or not, failed or not.
    let lags = records
        .iter()
        .filter_map(Sample::schedule_lag_ms)
        .chain(input.failures.iter().filter_map(FailureSample::schedule_lag_ms));
    let waits = records
        .iter()
        .filter_map(Sample::queue_wait_ms)
        .chain(input.failures.iter().filter_map(FailureSample::queue_wait_ms));
    let lag_family = Family { stem: "schedule_lag", value: Sample::schedule_lag_ms, ms_suffix: true };
    let wait_family = Family { stem: "queue_wait", value: Sample::queue_wait_ms, ms_suffix: true };
    summary_keys(&mut m, &lag_family, Summary::of(lags.collect()).as_ref());
    summary_keys(&mut m, &wait_family, Summary::of(waits.collect()).as_ref());

    let output_tokens: u64 = eligible.iter().map(|r| r.output_tokens()).sum();
    let prompt_reported: Vec<u64> = eligible.iter().filter_map(|r| r.prompt_tokens()).collect();
    let wall_s = input.wall_clock_ms / 1000.0;
    m.insert("output_tokens".into(), json!(output_tokens));
    m.insert("prompt_tokens".into(), json!(prompt_reported.iter().sum::<u64>()));
    m.insert("prompt_token_samples".into(), json!(prompt_reported.len()));
    m.insert("content_chunks".into(), json!(eligible.iter().map(|r| u64::from(r.content_chunks)).sum::<u64>()));
    m.insert("reasoning_chunks".into(), json!(eligible.iter().map(|r| u64::from(r.reasoning_chunks)).sum::<u64>()));
    // Reserved by the contract; no definition is published for it, so it stays null.
    m.insert("content_chunks_s".into(), Value::Null);
    let throughput = (wall_s > 0.0).then(|| output_tokens as f64 / wall_s);
    m.insert("throughput_tok_s".into(), json!(throughput));
    m.insert("request_throughput_rps".into(), json!((wall_s > 0.0).then(|| eligible.len() as f64 / wall_s)));
    // The measurement window: from the first eligible request's start to the last one's end.
    // With warm-up or cool-down excluded, rates over this window describe the measured phase.
    let window_ms = eligible
        .iter()
        .map(|r| r.start_offset_ms + r.e2e_ms())
        .reduce(f64::max)
        .zip(eligible.iter().map(|r| r.start_offset_ms).reduce(f64::min))
        .map(|(end, start)| end - start);
    let window_s = window_ms.map(|w| w / 1000.0).filter(|&w| w > 0.0);
    m.insert("measurement_window_ms".into(), json!(window_ms));
    m.insert("window_throughput_tok_s".into(), json!(window_s.map(|w| output_tokens as f64 / w)));
    if !input.slo.criteria.is_empty() {
        let good = eligible.iter().filter(|r| meets_request_slos(r, input.slo)).count();
        m.insert("goodput_requests".into(), json!(good));
        m.insert("goodput_rps".into(), json!(window_s.map(|w| good as f64 / w)));
    }

    let mut sources: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &eligible {
        *sources.entry(r.token_source().as_str()).or_default() += 1;
    }
    m.insert("output_token_sources".into(), json!(sources));

    let ratios: Vec<f64> = eligible
        .iter()
        .filter_map(|r| match (r.cached_tokens(), r.prompt_tokens()) {
            (Some(c), Some(p)) if p > 0 => Some(c as f64 / p as f64),
            _ => None,
        })
        .collect();
    let hit_avg = (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64);
    m.insert("prefix_cache_hit_avg".into(), json!(hit_avg));
    m.insert("prefix_cache_hit_samples".into(), json!(ratios.len()));

    let canaries: Vec<bool> = records.iter().filter_map(Sample::canary).collect();
    m.insert("request_canary_samples".into(), json!(canaries.len()));
    m.insert("request_canary_passed".into(), json!(canaries.iter().filter(|&&passed| passed).count()));

    // Controlled output is judged over every completed response, eligible or not: under the
    // strict policy the misses are exactly what gets excluded.
    let controlled: Vec<(bool, bool, bool)> = records.iter().filter_map(Sample::controlled).collect();
    let observable = controlled.iter().filter(|c| c.1).count();
    let exact = controlled.iter().filter(|c| c.0).count();
    m.insert("controlled_output_samples".into(), json!(controlled.len()));
    m.insert("controlled_output_exact_adherence".into(), json!(exact));
    m.insert(
        "controlled_output_exact_adherence_rate".into(),
        json!((observable > 0).then(|| exact as f64 / observable as f64)),
    );
    m.insert("controlled_output_unobservable".into(), json!(controlled.len() - observable));
    m.insert("controlled_output_truncated".into(), json!(controlled.iter().filter(|c| c.2).count()));

    // Prompt sizing: how far the server's count was from the size the prompt was built to.
    let sizing: Vec<f64> = records.iter().filter_map(Sample::sizing_error_pct).collect();
    let abs: Vec<f64> = sizing.iter().map(|e| e.abs()).collect();
    m.insert(
        "prompt_sizing_error_pct_mean".into(),
        json!((!abs.is_empty()).then(|| abs.iter().sum::<f64>() / abs.len() as f64)),
    );
    m.insert("prompt_sizing_error_pct_max".into(), json!(abs.iter().copied().reduce(f64::max)));
    m.insert(
        "prompt_sizing_error_pct_bias".into(),
        json!((!sizing.is_empty()).then(|| sizing.iter().sum::<f64>() / sizing.len() as f64)),
    );
    m.insert("prompt_sizing_samples".into(), json!(sizing.len()));

    let excluded = input.attempted.saturating_sub(eligible.len() as u64);
    // Aggregate throughput divides eligible tokens by the whole wall clock; it is comparable only
    // when nothing was excluded and the run was not cut short.
    let throughput_eligible = excluded == 0 && !input.interrupted && !eligible.is_empty();
    m.insert("throughput_performance_eligible".into(), json!(throughput_eligible));

    let samples_of = |stem: &str| sums.get(stem).and_then(Option::as_ref).map_or(0, |s| s.samples);
    let interpret = |n: usize| if n >= P99_MIN_SAMPLES { "nearest-rank" } else { "descriptive-nearest-rank-only" };
    let by_metric: BTreeMap<&str, usize> = P99_METRICS.iter().map(|(name, stem)| (*name, samples_of(stem))).collect();
    let fewest = by_metric.values().copied().min().unwrap_or(0);
    let population = Population {
        attempted_requests: input.attempted,
        successful_requests: records.len() as u64,
        performance_eligible_requests: eligible.len() as u64,
        excluded_requests: excluded,
        failed_requests: input.attempted - records.len() as u64,
        failed_server_faults: input.failed_server_faults,
        aggregate_throughput_eligible: throughput_eligible,
        failure_policy: "failed or contract-invalid responses retain sanitized timing and metadata but are excluded from performance distributions",
        p99_interpretation: interpret(fewest),
        p99_interpretation_by_metric: by_metric.iter().map(|(k, &n)| (*k, interpret(n))).collect(),
        p99_minimum_recommended_samples: P99_MIN_SAMPLES,
        p99_samples_by_metric: by_metric,
    };
    (m, population)
}

/// Whether one request meets every per-request objective (a p99 objective is checked against the
/// request's own value). Objectives without a per-request reading (error rate) do not apply.
fn meets_request_slos(r: &Sample, slo: &Slo) -> bool {
    slo.criteria.iter().all(|c| match c.request_field.as_deref().and_then(|field| request_value(r, field)) {
        Some(v) => c.bound.holds(v, c.threshold),
        None => c.request_field.is_none(),
    })
}

fn request_value(r: &Sample, field: &str) -> Option<f64> {
    match field {
        "ttft_ms" => r.ttft_ms(),
        "time_to_first_output_ms" => Some(r.ttfo_ms()),
        "tpot_ms" => r.tpot_ms(),
        "e2e_ms" => Some(r.e2e_ms()),
        "generation_ms" => Some(r.generation_ms()),
        "ttft_from_intended_ms" => r.ttft_from_intended_ms(),
        "e2e_from_intended_ms" => r.e2e_from_intended_ms(),
        "decode_tok_s" => r.decode_tok_s(),
        "effective_prefill_tok_s" => r.effective_prefill_tok_s(),
        _ => None,
    }
}

/// One objective checked against a level's metrics.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SloResult {
    pub key: String,
    pub threshold: f64,
    pub bound: Bound,
    pub observed: Option<f64>,
    pub passed: bool,
}

/// The `slo` block: every objective and whether the level met them all.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SloReport {
    pub criteria: Vec<SloResult>,
    pub passed: bool,
}

/// Check a level against its objectives. A missing value (no samples) fails.
pub fn evaluate_slo(slo: &Slo, metrics: &Map<String, Value>, population: &Population) -> Option<SloReport> {
    if slo.criteria.is_empty() {
        return None;
    }
    let criteria: Vec<SloResult> = slo
        .criteria
        .iter()
        .map(|c| {
            let observed = if c.key == "error_rate" {
                (population.attempted_requests > 0)
                    .then(|| population.failed_server_faults as f64 / population.attempted_requests as f64)
            } else {
                metrics.get(&c.key).and_then(Value::as_f64)
            };
            let passed = observed.is_some_and(|v| c.bound.holds(v, c.threshold));
            SloResult { key: c.key.clone(), threshold: c.threshold, bound: c.bound, observed, passed }
        })
        .collect();
    let passed = criteria.iter().all(|c| c.passed);
    Some(SloReport { criteria, passed })
}

/// `metric_population`: who is counted where.
#[derive(Debug, Clone, Serialize)]
pub struct Population {
    pub attempted_requests: u64,
    /// Requests that streamed to `[DONE]` (including failed canaries).
    pub successful_requests: u64,
    pub performance_eligible_requests: u64,
    /// `attempted − performance_eligible`: failures plus failed canaries.
    pub excluded_requests: u64,
    pub failed_requests: u64,
    /// Failures that were the server's (everything but `interrupted`).
    pub failed_server_faults: u64,
    pub aggregate_throughput_eligible: bool,
    pub failure_policy: &'static str,
    pub p99_interpretation: &'static str,
    pub p99_interpretation_by_metric: BTreeMap<&'static str, &'static str>,
    pub p99_minimum_recommended_samples: usize,
    pub p99_samples_by_metric: BTreeMap<&'static str, usize>,
}
