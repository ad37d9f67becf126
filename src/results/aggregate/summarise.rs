//! `summarise`: one level's samples in, its typed `LevelSummary` out: distributions, totals,
//! rates, load and validity, objectives, steady state, drift and the methodology warnings. The
//! first step of `finish_level`, which every level's end goes through.
//!
//! Only performance-eligible requests enter distributions and totals; failures and failed
//! canaries are counted, never averaged in. Dispatch lag and queue wait describe the client, so
//! every request sent counts there.

use std::collections::BTreeMap;

use serde_json::Value;

use super::collected::Collected;
use super::load;
use super::sample::{FailureSample, Sample, total};
use super::slo::{self, request_value};
use super::stats::Summary;
use super::steady::{self, SHORT_SHARE};
use super::summary::{
    Canaries, ControlledOutputSummary, Distributions, Goodput, LevelSummary, Population, PrefixCache, Rates,
    SizingErrors, Totals,
};
use super::warnings::{SizingAdvice, Warning};
use crate::contract::{ErrorKind, Metric};
use crate::request::record::timing::error_counts;
use crate::request::record::{ClientLoad, Issued, LevelPacing, RunInfo, Stamp, TokenSource};
use crate::request::server_metrics::{self, ClientTokens, LevelServerMetrics};

/// Below this many samples a p99 is only descriptive (one sample decides it).
pub const P99_MIN_SAMPLES: usize = 100;

/// Sizing error above which the planned context is not what the server saw.
const SIZING_WARN_PCT: f64 = 5.0;

/// The distributions over eligible requests only.
const ELIGIBLE_METRICS: [Metric; 16] = [
    Metric::CompletionTokens,
    Metric::PromptTokens,
    Metric::DecodeTokS,
    Metric::EffectivePrefillTokS,
    Metric::MeanInterTokenLatency,
    Metric::E2e,
    Metric::Generation,
    Metric::TimeToFirstOutput,
    Metric::MeanTimePerOutputToken,
    Metric::Tpot,
    Metric::Ttft,
    Metric::TtftFromIntended,
    Metric::E2eFromIntended,
    Metric::TokensPerChunk,
    Metric::MaxStall,
    Metric::TpotCorrected,
];

/// The distributions whose p99 sample counts are reported in `metric_population`.
const P99_METRICS: [Metric; 5] =
    [Metric::DecodeTokS, Metric::E2e, Metric::EffectivePrefillTokS, Metric::Tpot, Metric::Ttft];

/// What one level produced, plus what is needed to describe it.
pub struct LevelInput<'a> {
    pub info: &'a RunInfo,
    pub level_id: String,
    pub pacing: LevelPacing,
    pub issued: Issued,
    pub started: Stamp,
    pub finished: Stamp,
    pub collected: Collected,
    pub interrupted: bool,
    /// The embedded simulator's counters for this level, when it was the target.
    pub simulator: Option<Value>,
    /// The server's own metrics over the level, when they were scraped.
    pub server_metrics: Option<LevelServerMetrics>,
    /// How late the client's own runtime was during the level (absent in older records).
    pub client: Option<ClientLoad>,
}

pub(super) fn summarise(input: LevelInput<'_>) -> LevelSummary {
    let LevelInput {
        info,
        level_id,
        pacing,
        issued,
        started,
        finished,
        mut collected,
        interrupted,
        simulator,
        server_metrics,
        client,
    } = input;
    let last_start_ms = collected
        .samples
        .iter()
        .map(|s| s.start_offset_ms)
        .chain(collected.failures.iter().map(|f| f.start_offset_ms))
        .fold(0.0, f64::max);
    let indices = collected.samples.iter().map(|s| s.index).chain(collected.failures.iter().map(|f| f.index));
    let rules = info.final_rules(indices, last_start_ms, issued);
    for s in &mut collected.samples {
        s.exclusion = rules.exclusion(s.facts());
    }
    let samples = &collected.samples;
    let failures = &collected.failures;
    // Walked again for each figure rather than gathered: an array of references is 8 bytes a
    // request beside the sample store.
    let eligible = || samples.iter().filter(|s| s.eligible());
    let eligible_count = eligible().count();

    // The level's wall clock: from the level start to the end of its last request.
    let wall_clock_ms = samples
        .iter()
        .map(|s| s.start_offset_ms + s.e2e_ms())
        .chain(failures.iter().map(|f| f.start_offset_ms + f.elapsed_ms))
        .fold(0.0, f64::max);
    let attempted = (samples.len() + failures.len()) as u64;

    let mut distributions = Distributions::default();
    for m in ELIGIBLE_METRICS {
        distributions.set(m, Summary::of(eligible().filter_map(|r| request_value(r, m)).collect()));
    }
    let lags = samples.iter().filter_map(Sample::schedule_lag_ms);
    let lags = lags.chain(failures.iter().filter_map(FailureSample::schedule_lag_ms));
    distributions.set(Metric::ScheduleLag, Summary::of(lags.collect()));
    let waits = samples.iter().filter_map(Sample::queue_wait_ms);
    let waits = waits.chain(failures.iter().filter_map(FailureSample::queue_wait_ms));
    distributions.set(Metric::QueueWait, Summary::of(waits.collect()));

    // Counts and sums folded as they go, not gathered into arrays: every array here is 8 bytes
    // a request beside the sample store.
    let (prompt_tokens, prompt_token_samples) =
        eligible().filter_map(|r| r.prompt_tokens()).fold((0u64, 0usize), |(sum, n), p| (sum.saturating_add(p), n + 1));
    let totals = Totals {
        output_tokens: total(eligible().map(|r| r.output_tokens())),
        prompt_tokens,
        prompt_token_samples,
        content_chunks: total(eligible().map(|r| u64::from(r.content_chunks))),
        reasoning_chunks: total(eligible().map(|r| u64::from(r.reasoning_chunks))),
    };
    let excluded = attempted.saturating_sub(eligible_count as u64);
    let rates = rates(
        eligible,
        eligible_count,
        &totals,
        wall_clock_ms,
        info,
        excluded == 0 && !interrupted && eligible_count > 0,
    );

    let mut output_token_sources: BTreeMap<TokenSource, u64> = BTreeMap::new();
    for r in eligible() {
        *output_token_sources.entry(r.token_source()).or_default() += 1;
    }
    // Summed in the records' order.
    let (ratio_sum, ratio_samples) = eligible()
        .filter_map(|r| match (r.cached_tokens(), r.prompt_tokens()) {
            (Some(c), Some(p)) if p > 0 => Some(c as f64 / p as f64),
            _ => None,
        })
        .fold((0.0, 0usize), |(sum, n), ratio| (sum + ratio, n + 1));
    let prefix_cache =
        PrefixCache { hit_avg: (ratio_samples > 0).then(|| ratio_sum / ratio_samples as f64), samples: ratio_samples };
    let canary_results: Vec<bool> = samples.iter().filter_map(Sample::canary).collect();
    let canaries = Canaries {
        samples: canary_results.len(),
        passed: canary_results.iter().filter(|&&p| p).count(),
        foreign: samples.iter().filter(|s| s.canary_failed() && s.canary_foreign()).count(),
        malformed: samples.iter().filter(|s| s.canary_failed() && !s.canary_foreign() && s.canary_malformed()).count(),
        no_content: samples.iter().filter(|s| s.canary_failed() && s.canary_no_content()).count(),
    };
    let controlled_output = controlled_output(samples);
    let sizing = sizing_errors(samples);

    let failed_server_faults = failures.iter().filter(|f| f.kind.is_server_fault()).count() as u64;
    let population = population(
        &distributions,
        attempted,
        samples.len() as u64,
        eligible_count as u64,
        failed_server_faults,
        rates.throughput_performance_eligible,
    );
    let slo = slo::evaluate(&info.slo, |m, stat| distributions.stat(m, stat), population.server_fault_rate());
    let load = load::load_record(info, pacing, issued, samples, failures, collected.dropped, client);

    let mut context_distribution: BTreeMap<String, u64> = BTreeMap::new();
    for planned in
        samples.iter().map(|s| s.planned_context_tokens).chain(failures.iter().map(|f| f.planned_context_tokens))
    {
        *context_distribution.entry(planned.to_string()).or_default() += 1;
    }
    let responses_received = samples.len() as u64 + failures.iter().filter(|f| f.responded).count() as u64;
    // Eligible when nothing was left out but by design (warm-up, cool-down, a burst's warm-up).
    let unplanned_exclusions =
        samples.iter().filter(|s| s.exclusion.is_some_and(crate::request::record::Exclusion::gates_level)).count();
    let performance_eligible = !interrupted && failures.is_empty() && unplanned_exclusions == 0 && !samples.is_empty();

    let mut summary = LevelSummary {
        level_id,
        pacing,
        started,
        finished,
        interrupted,
        wall_clock_ms,
        requests: attempted,
        completed: samples.len() as u64,
        failed: failures.len() as u64,
        responses_received,
        context_distribution,
        distributions,
        totals,
        rates,
        output_token_sources,
        prefix_cache,
        canaries,
        controlled_output,
        sizing,
        population,
        load,
        slo,
        error_counts: error_counts(failures.iter().map(|f| &f.kind)),
        excluded_by_reason: excluded_by_reason(samples),
        warnings: Vec::new(),
        drift: super::drift::drift(
            &collected.windows,
            super::drift::Measured {
                from_ms: rules.warmup_before_ms,
                until_ms: [
                    info.duration_ms.or((!samples.is_empty() || !failures.is_empty()).then_some(last_start_ms)),
                    rules.cooldown_from_ms,
                ]
                .into_iter()
                .flatten()
                .reduce(f64::min),
            },
        ),
        snapshot_windows: collected.windows.len(),
        steady_state: steady::steady_state(pacing, samples, failures, wall_clock_ms),
        performance_eligible,
        rules,
        simulator,
        // The GPUs worked for every request of the level (warm-up, cool-down and failed ones
        // included): energy per output token divides by what the server was asked to generate.
        server_metrics: server_metrics
            .map(|m| m.with_gpu_telemetry(client_tokens(samples, failures).completion_tokens)),
        conversations: None,
        replicas: None,
        structured_output: None,
        models: None,
        cache_reset: None,
        tool_calls: None,
        media: None,
        unstreamed: None,
        shards: None,
        records_as_written: None,
    };
    if !info.api.streams_text() {
        summary.unstreamed =
            Some(super::summary::Unstreamed::new(info.api.name(), summary.totals.prompt_tokens, wall_clock_ms));
    }
    summary.warnings = warnings(info, &summary, samples, failures);
    summary
}

/// Completed requests left out of the distributions, by why.
fn excluded_by_reason(samples: &[Sample]) -> BTreeMap<&'static str, u64> {
    let mut by_reason = BTreeMap::new();
    for e in samples.iter().filter_map(|r| r.exclusion) {
        *by_reason.entry(e.as_str()).or_default() += 1;
    }
    by_reason
}

/// Throughput over the wall clock and over the measurement window, and goodput.
fn rates<'a, I: Iterator<Item = &'a Sample>>(
    eligible: impl Fn() -> I,
    eligible_count: usize,
    totals: &Totals,
    wall_clock_ms: f64,
    info: &RunInfo,
    comparable: bool,
) -> Rates {
    let wall_s = wall_clock_ms / 1000.0;
    // The measurement window: from the first eligible request's start to the last one's end.
    // With warm-up or cool-down excluded, rates over this window describe the measured phase.
    let window_ms = eligible()
        .map(|r| r.start_offset_ms + r.e2e_ms())
        .reduce(f64::max)
        .zip(eligible().map(|r| r.start_offset_ms).reduce(f64::min))
        .map(|(end, start)| end - start);
    let window_s = window_ms.map(|w| w / 1000.0).filter(|&w| w > 0.0);
    let goodput = (!info.slo.criteria.is_empty()).then(|| {
        let good = eligible().filter(|r| slo::meets_request_slos(r, &info.slo)).count();
        Goodput { requests: good, rps: window_s.map(|w| good as f64 / w) }
    });
    Rates {
        throughput_tok_s: (wall_s > 0.0).then(|| totals.output_tokens as f64 / wall_s),
        request_throughput_rps: (wall_s > 0.0).then(|| eligible_count as f64 / wall_s),
        measurement_window_ms: window_ms,
        window_throughput_tok_s: window_s.map(|w| totals.output_tokens as f64 / w),
        goodput,
        // Aggregate throughput divides eligible tokens by the whole wall clock; it is comparable
        // only when nothing was excluded and the run was not cut short.
        throughput_performance_eligible: comparable,
    }
}

/// Controlled output is judged over every completed response, eligible or not: under the strict
/// policy the misses are exactly what gets excluded.
fn controlled_output(samples: &[Sample]) -> ControlledOutputSummary {
    let controlled: Vec<(bool, bool, bool)> = samples.iter().filter_map(Sample::controlled).collect();
    let observable = controlled.iter().filter(|c| c.1).count();
    let exact = controlled.iter().filter(|c| c.0).count();
    ControlledOutputSummary {
        samples: controlled.len(),
        exact,
        exact_rate: (observable > 0).then(|| exact as f64 / observable as f64),
        unobservable: controlled.len() - observable,
        truncated: controlled.iter().filter(|c| c.2).count(),
    }
}

/// How far the server's count was from the size each prompt was built to.
fn sizing_errors(samples: &[Sample]) -> SizingErrors {
    let errors: Vec<f64> = samples.iter().filter_map(Sample::sizing_error_pct).collect();
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    SizingErrors {
        mean_pct: (!abs.is_empty()).then(|| abs.iter().sum::<f64>() / abs.len() as f64),
        max_pct: abs.iter().copied().reduce(f64::max),
        bias_pct: (!errors.is_empty()).then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        samples: errors.len(),
    }
}

fn population(
    distributions: &Distributions,
    attempted: u64,
    successful: u64,
    eligible: u64,
    failed_server_faults: u64,
    aggregate_throughput_eligible: bool,
) -> Population {
    let interpret = |n: usize| if n >= P99_MIN_SAMPLES { "nearest-rank" } else { "descriptive-nearest-rank-only" };
    let by_metric: BTreeMap<&'static str, usize> =
        P99_METRICS.iter().map(|&m| (m.stem(), distributions.samples(m))).collect();
    let fewest = by_metric.values().copied().min().unwrap_or(0);
    Population {
        attempted_requests: attempted,
        successful_requests: successful,
        performance_eligible_requests: eligible,
        excluded_requests: attempted.saturating_sub(eligible),
        failed_requests: attempted - successful,
        failed_server_faults,
        aggregate_throughput_eligible,
        failure_policy: "failed or contract-invalid responses retain sanitized timing and metadata but are excluded from performance distributions",
        p99_interpretation: interpret(fewest),
        p99_interpretation_by_metric: by_metric.iter().map(|(k, &n)| (*k, interpret(n))).collect(),
        p99_minimum_recommended_samples: P99_MIN_SAMPLES,
        p99_samples_by_metric: by_metric,
    }
}

/// What the client counted over the level, every request the server saw included (warm-up,
/// cool-down and failed canaries too), to set beside the server's own counters.
fn client_tokens(samples: &[Sample], failures: &[FailureSample]) -> ClientTokens {
    let reported: Vec<&Sample> = samples.iter().filter(|s| s.token_source() == TokenSource::Usage).collect();
    let cached: Vec<u64> = samples.iter().filter_map(Sample::cached_tokens).collect();
    let unsent = |k: ErrorKind| matches!(k, ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout);
    ClientTokens {
        prompt_tokens: total(samples.iter().filter_map(Sample::prompt_tokens)),
        cached_tokens: (!cached.is_empty()).then(|| total(cached.iter().copied())),
        completion_tokens: total(reported.iter().map(|s| s.output_tokens())),
        without_usage: (samples.len() - reported.len()) as u64
            + failures.iter().filter(|f| !unsent(f.kind)).count() as u64,
    }
}

/// Methodology warnings, in the order the console prints them.
fn warnings(info: &RunInfo, s: &LevelSummary, samples: &[Sample], failures: &[FailureSample]) -> Vec<Warning> {
    let mut w = Vec::new();
    if let Some(profile) = &info.simulator_profile {
        w.push(Warning::SimulatedTarget { profile: profile.clone() });
    }
    if info.scenario.pointer("/target/tls/insecure_skip_verify") == Some(&serde_json::Value::Bool(true)) {
        w.push(Warning::TlsVerificationOff);
    }
    if s.interrupted {
        w.push(Warning::Interrupted);
    }
    let canaries = &s.canaries;
    // A response with no visible content gave its canary nothing to check: not a model that
    // cannot copy the marker, not a swapped response. `budget_spent_in_reasoning` says why.
    let (checked, failed) = (canaries.samples - canaries.no_content, canaries.failed() - canaries.no_content);
    if failed > 0 && failed == checked {
        w.push(Warning::CanariesAllFailed { canaries: checked, foreign: canaries.foreign });
    } else if failed > 0 {
        w.push(Warning::CanariesFailed { failed, canaries: checked, foreign: canaries.foreign });
    }
    let in_reasoning =
        if info.api.streams_text() { samples.iter().filter(|s| s.budget_spent_in_reasoning()).count() } else { 0 };
    if in_reasoning > 0 {
        w.push(Warning::BudgetSpentInReasoning {
            responses: in_reasoning,
            completed: samples.len(),
            max_tokens: info.max_tokens,
            unchecked_canaries: canaries.no_content,
        });
    }
    if canaries.malformed > 0 {
        w.push(Warning::CanaryMarkersMalformed { responses: canaries.malformed });
    }
    let server_failures = failures.iter().filter(|f| f.kind != ErrorKind::Interrupted).count();
    if server_failures > 0 {
        w.push(Warning::RequestsFailed {
            failed: server_failures,
            attempted: s.population.attempted_requests,
            by_kind: s.error_counts.clone(),
        });
    }
    let set_aside = samples.iter().filter(|r| r.usage_set_aside()).count();
    // Responses whose usage was rejected are counted from chunks too, but reported usage.
    let chunk_counted = samples
        .iter()
        .filter(|r| r.token_source() == TokenSource::ChunkCount && !r.usage_set_aside() && !r.usage_implausible())
        .count();
    if chunk_counted > 0 {
        w.push(Warning::NoUsageReported { responses: chunk_counted });
    }
    if set_aside > 0 {
        w.push(Warning::UsageUndercounted { responses: set_aside });
    }
    let rejected = samples.iter().filter(|r| r.usage_implausible()).count();
    if rejected > 0 {
        w.push(Warning::UsageRejected { responses: rejected });
    }
    let corrected = samples.iter().filter(|r| r.finish_corrected()).count();
    if corrected > 0 {
        w.push(Warning::FinishAtBudget { responses: corrected, api: info.api.name() });
    }
    if let Some(ignored) = super::output_warnings::output_control_ignored(info, samples) {
        w.push(ignored);
    }
    if let Some(reason) = &info.prompt_sizing.fallback_reason {
        w.push(Warning::SizingFallback { reason: reason.clone() });
    }
    if let Some(missing) = &info.model_not_listed {
        w.push(Warning::ModelNotListed { model: info.model.clone(), missing: missing.clone() });
    }
    if let (Some(bias_pct), Some(mean_pct)) = (s.sizing.bias_pct, s.sizing.mean_pct) {
        if mean_pct > SIZING_WARN_PCT {
            w.push(Warning::PromptSizingOff {
                mean_pct,
                bias_pct,
                advice: match (info.prompt_sizing.calibration_would_help(), info.api.can_calibrate()) {
                    (false, _) => SizingAdvice::ServerTokenizer,
                    (true, true) => SizingAdvice::Calibrate,
                    (true, false) => SizingAdvice::Tokenizer,
                },
            });
        }
    }
    if info.unique_prefixes {
        // A few cached tokens are the chat template's shared opening (token-granular caches
        // report them); more than that means a prompt prefix was already in the cache.
        let warm = samples
            .iter()
            .filter(|r| matches!((r.cached_tokens(), r.prompt_tokens()), (Some(c), Some(p)) if c > 32.max(p / 100)))
            .count();
        if warm > 0 {
            w.push(Warning::CacheWarmInUniqueMode { warm, completed: samples.len() });
        }
    }
    let eligible = s.population.performance_eligible_requests;
    if eligible == 0 && !samples.is_empty() {
        w.push(Warning::NothingEligible {
            completed: samples.len() as u64,
            by_reason: s.excluded_by_reason.clone(),
            no_content: canaries.no_content > 0 && canaries.no_content == canaries.failed(),
        });
    } else if eligible > 0 {
        let thin: Vec<(&'static str, usize)> = s
            .population
            .p99_samples_by_metric
            .iter()
            .filter(|&(_, &n)| n < P99_MIN_SAMPLES)
            // A metric null by the API's nature (see `Unstreamed`) is not thin.
            .filter(|&(k, &n)| n > 0 || s.unstreamed.as_ref().is_none_or(|u| !u.notes.contains_key(k)))
            .map(|(&k, &n)| (k, n))
            .collect();
        // A level that sent fewer requests than a comparable p99 needs was sized that way by
        // its scenario (run.requests, a trace's rows): metric_population.p99_interpretation
        // says its p99 is descriptive, and a warning would repeat what was asked for at every
        // level. The warning is for samples the level lost (exclusions, failures, a metric
        // most responses lack) and for a metric with none at all.
        let lost = s.population.attempted_requests >= P99_MIN_SAMPLES as u64 || thin.iter().any(|&(_, n)| n == 0);
        if !thin.is_empty() && lost {
            w.push(Warning::P99Descriptive { eligible, minimum: P99_MIN_SAMPLES, thin });
        }
    }
    match &s.steady_state {
        Some(st) if st.share_of_level < SHORT_SHARE && !s.interrupted => {
            w.push(Warning::SteadyStateShort { share: st.share_of_level, duration_ms: st.duration_ms() });
        }
        None if eligible > 0 && !s.interrupted => w.push(Warning::SteadyStateNone),
        _ => {}
    }
    super::output_warnings::token_warnings(&mut w, samples, info.simulator_profile.as_deref());
    for reason in &s.load.validity.reasons {
        w.push(Warning::InvalidLoad { reason: reason.clone() });
    }
    if let Some(m) = &s.server_metrics {
        let client = client_tokens(samples, failures);
        // With several replicas each server saw a share of the requests: no count to compare.
        for warning in server_metrics::warnings(m, m.replicas.is_empty().then_some(&client)) {
            w.push(Warning::Server { warning, url: m.url.clone() });
        }
        for r in m.replicas.iter().skip(1) {
            for warning in server_metrics::warnings(r, None) {
                w.push(Warning::Server { warning, url: r.url.clone() });
            }
        }
        // Other endpoints count no tokens, and a DCGM or node exporter carries no engine's
        // names by design: their failures, gaps and files only.
        for e in &m.endpoints {
            for warning in server_metrics::warnings(e, None) {
                if warning != server_metrics::ServerMetricsWarning::Unrecognised {
                    w.push(Warning::Server { warning, url: e.url.clone() });
                }
            }
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::{Overrides, Scenario};
    use crate::request::record::{RequestTiming, SizingRecord};
    use crate::request::workload::Sizer;

    fn info() -> RunInfo {
        let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
        let s = Scenario::from_toml(std::path::Path::new("t.toml"), text, &Overrides::default()).unwrap();
        let sizing = SizingRecord::for_sizer("estimate", &Sizer::Estimate { overhead: 8.0 }, None);
        RunInfo::new(&s, "t", "http://127.0.0.1:1/v1", sizing, 0)
    }

    /// Twelve completed requests; `fail(i)` sets request i's canary to failed, with a foreign
    /// marker when it says so.
    fn level(fail: impl Fn(u64) -> Option<bool>) -> LevelSummary {
        let template: RequestTiming =
            serde_json::from_str(include_str!("../../../tests/fixtures/request-timing.json")).unwrap();
        let mut collected = Collected::default();
        for i in 0..12 {
            let mut r = template.clone();
            r.request_index = i;
            if let Some(c) = r.request_canary.as_mut() {
                c.passed = true;
                c.foreign_marker_count = 0;
                if let Some(foreign) = fail(i) {
                    c.passed = false;
                    c.marker_at_start = false;
                    c.foreign_marker_count = u32::from(foreign);
                }
            }
            collected.samples.push(Sample::from_record(&r));
        }
        summarise(LevelInput {
            info: &info(),
            level_id: "t".into(),
            pacing: LevelPacing::Closed { concurrency: 2, max_rate: None },
            issued: Issued::default(),
            started: Stamp::now(),
            finished: Stamp::now(),
            collected,
            interrupted: false,
            simulator: None,
            server_metrics: None,
            client: None,
        })
    }

    fn canary_message(s: &LevelSummary) -> String {
        s.warnings.iter().find(|w| w.code().starts_with("canaries")).map(Warning::message).expect("a canary warning")
    }

    #[test]
    fn a_partial_canary_failure_without_foreign_markers_offers_the_way_out() {
        let s = level(|i| (i == 3).then_some(false));
        assert_eq!((s.canaries.samples, s.canaries.passed, s.canaries.foreign), (12, 11, 0));
        let m = canary_message(&s);
        assert!(m.contains("1 of 12 canaries failed, none holding another request's marker"), "{m}");
        assert!(m.contains("workload.canaries = false"), "{m}");
    }

    #[test]
    fn contamination_is_named_as_such_and_not_blamed_on_the_model() {
        let s = level(|i| (i < 2).then_some(true));
        let m = canary_message(&s);
        assert!(m.contains("2 of 12 canaries failed, 2 of them holding another request's marker"), "{m}");
        assert!(!m.contains("canaries = false"), "{m}");
        let all = level(|_| Some(false));
        assert!(canary_message(&all).contains("no response held another request's marker"));
    }
}
