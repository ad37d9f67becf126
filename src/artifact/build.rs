//! Assemble one level's artifact from what the level produced: the run's fixed description, the
//! compact samples (summaries), and the records file (the per-request lists, streamed).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::load;
use super::{Artifact, ClientInfo, SCHEMA, StreamKind, Streamed, TimingMethodology};
use crate::aggregate::Collected;
use crate::aggregate::metrics::{self, MetricsInput, P99_MIN_SAMPLES};
use crate::aggregate::sample::{FailureSample, Sample};
use crate::aggregate::snapshots;
use crate::record::timing::error_counts;
use crate::record::{ErrorKind, TokenSource};
use crate::record::{Issued, LevelPacing};
use crate::record::{RunInfo, Stamp};
use crate::report::Warning;

/// What one level produced, plus the context needed to describe it.
pub struct LevelRun<'a> {
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
    /// The records file holding this level's request lines.
    pub records: &'a Path,
}

pub fn build(mut run: LevelRun<'_>) -> Artifact {
    let info = run.info;
    let rules = load::final_rules(info, &run.collected, run.issued);
    for s in &mut run.collected.samples {
        s.exclusion = rules.exclusion(s.facts());
    }
    let samples = &run.collected.samples;
    let failures = &run.collected.failures;

    // The level's wall clock: from the level start to the end of its last request.
    let wall_clock_ms = samples
        .iter()
        .map(|s| s.start_offset_ms + s.e2e_ms())
        .chain(failures.iter().map(|f| f.start_offset_ms + f.elapsed_ms))
        .fold(0.0, f64::max);
    let attempted = (samples.len() + failures.len()) as u64;
    let failed_server_faults = failures.iter().filter(|f| f.kind.is_server_fault()).count() as u64;
    let (metrics, population) = metrics::compute(&MetricsInput {
        samples,
        failures,
        wall_clock_ms,
        attempted,
        failed_server_faults,
        interrupted: run.interrupted,
        slo: &info.slo,
    });
    let slo = metrics::evaluate_slo(&info.slo, &metrics, &population);
    let load = load::load_record(info, run.pacing, run.issued, samples, failures, run.collected.dropped);

    let mut context_distribution: BTreeMap<String, u64> = BTreeMap::new();
    for planned in
        samples.iter().map(|s| s.planned_context_tokens).chain(failures.iter().map(|f| f.planned_context_tokens))
    {
        *context_distribution.entry(planned.to_string()).or_default() += 1;
    }
    let mut warnings = warnings(&run, &population, &metrics);
    for reason in &load.validity.reasons {
        warnings.push(Warning::new("invalid_load", reason.clone()));
    }
    let responses_received = samples.len() as u64 + failures.iter().filter(|f| f.responded).count() as u64;
    // Eligible when nothing was left out but by design (warm-up, cool-down, a burst's warm-up).
    let unplanned_exclusions = samples.iter().filter(|s| s.exclusion.is_some_and(|e| !e.planned())).count();
    let performance_eligible =
        !run.interrupted && failures.is_empty() && unplanned_exclusions == 0 && !samples.is_empty();
    let stream = |kind| Streamed { path: run.records.to_path_buf(), level: run.level_id.clone(), kind, rules };

    Artifact {
        schema: SCHEMA,
        run_id: run.level_id.clone(),
        measurement_protocol: info.measurement_protocol.clone(),
        tier: info.tier.clone(),
        engine: info.engine.clone(),
        gpu: info.gpu.clone(),
        model: info.model.clone(),
        api: info.api,
        base_url: info.base_url.clone(),
        started_at: run.started.iso(),
        started_at_unix_ns: run.started.unix_ns(),
        finished_at: run.finished.iso(),
        finished_at_unix_ns: run.finished.unix_ns(),
        timestamp_precision: "nanosecond-unix-fields; ISO labels are second precision",
        clock_domain_id: info.clock_domain_id.clone(),
        configuration_fingerprint: info.configuration_fingerprint.clone(),
        manifest: None,
        source_recipe: None,
        load,
        requests: attempted,
        completed: samples.len() as u64,
        failed: failures.len() as u64,
        responses_received,
        interrupted: run.interrupted,
        context_tokens: info.context_tokens.clone(),
        context_seed: info.context_seed,
        context_distribution,
        max_context_tokens: info.max_context_tokens,
        max_tokens: info.max_tokens,
        prompt_cache_mode: info.prompt_cache_mode.clone(),
        shared_prefix_tokens: info.shared_prefix_tokens,
        prompts_reproducible: info.prompts_reproducible,
        prompt_salt: info.prompt_salt.clone(),
        prompt_sizing: info.prompt_sizing.clone(),
        request_canaries: info.request_canaries,
        controlled_output_policy: info.controlled_output_policy,
        response_words: info.response_words,
        sampling: info.sampling.clone(),
        serve_flags: info.serve_flags.clone(),
        performance_eligible,
        wall_clock_ms,
        metrics,
        metric_population: population,
        error_counts: error_counts(failures.iter().map(|f| &f.kind)),
        warnings,
        timing_methodology: TimingMethodology::current(),
        slo,
        drift: snapshots::drift(&run.collected.windows),
        snapshot_windows: run.collected.windows.len(),
        request_timings: stream(StreamKind::Requests),
        failures: stream(StreamKind::Failures),
        dropped: stream(StreamKind::Dropped),
        scenario: info.scenario.clone(),
        simulator: run.simulator.take(),
        client: ClientInfo::this(),
    }
}

/// Sizing error above which the planned context is not what the server saw.
const SIZING_WARN_PCT: f64 = 5.0;

fn warnings(
    run: &LevelRun<'_>,
    population: &metrics::Population,
    metrics: &serde_json::Map<String, Value>,
) -> Vec<Warning> {
    let info = run.info;
    let samples: &[Sample] = &run.collected.samples;
    let failures: &[FailureSample] = &run.collected.failures;
    let mut w = Vec::new();
    if let Some(profile) = &info.simulator_profile {
        w.push(Warning::new(
            "simulated_target",
            format!("measured against the embedded simulator (profile {profile}), not a real engine; give --base-url to measure a server"),
        ));
    }
    if run.interrupted {
        w.push(Warning::new("interrupted", "the run was stopped before it finished; the numbers cover what completed"));
    }
    let canaries = samples.iter().filter(|s| s.canary().is_some()).count();
    let canary_failures = samples.iter().filter(|s| s.canary_failed()).count();
    if canary_failures > 0 && canary_failures == canaries {
        w.push(Warning::new(
            "canaries_all_failed",
            format!(
                "all {canaries} canaries failed: the model did not begin its replies with the requested marker (small models often cannot), or responses are being mixed up between requests; if the model cannot follow the instruction, set workload.canaries = false"
            ),
        ));
    } else if canary_failures > 0 {
        w.push(Warning::new(
            "canaries_failed",
            format!("{canary_failures} of {canaries} canaries failed; those responses are excluded from the distributions (see request_timings[].request_canary)"),
        ));
    }
    let server_failures = failures.iter().filter(|f| f.kind != ErrorKind::Interrupted).count();
    if server_failures > 0 {
        let counts = error_counts(failures.iter().map(|f| &f.kind));
        let kinds: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        w.push(Warning::new(
            "requests_failed",
            format!(
                "{server_failures} of {} requests failed ({}); they are listed under failures and excluded from the distributions",
                population.attempted_requests,
                kinds.join(", ")
            ),
        ));
    }
    let chunk_counted = samples.iter().filter(|s| s.token_source() == TokenSource::ChunkCount).count();
    if chunk_counted > 0 {
        w.push(Warning::new(
            "no_usage_reported",
            format!("{chunk_counted} responses reported no usage: their output tokens are counted from chunks, which undercounts when a chunk carries several tokens (TPOT and decode rates use that count)"),
        ));
    }
    if let Some(reason) = &info.prompt_sizing.fallback_reason {
        w.push(Warning::new("sizing_fallback", format!("prompt sizing fell back to the built-in estimate: {reason}")));
    }
    if let Some(bias) = metrics.get("prompt_sizing_error_pct_bias").and_then(Value::as_f64) {
        let mean = metrics.get("prompt_sizing_error_pct_mean").and_then(Value::as_f64).unwrap_or(0.0);
        if mean > SIZING_WARN_PCT {
            w.push(Warning::new(
                "prompt_sizing_off",
                format!(
                    "the server counted prompts {mean:.1}% away from their target on average (bias {bias:+.1}%): the planned context is not what the server saw; use workload.tokenizer = \"calibrate\" or a tokenizer.json"
                ),
            ));
        }
    }
    if info.unique_prefixes {
        // A few cached tokens are the chat template's shared opening (token-granular caches
        // report them); more than that means a prompt prefix was already in the cache.
        let warm = samples
            .iter()
            .filter(|s| matches!((s.cached_tokens(), s.prompt_tokens()), (Some(c), Some(p)) if c > 32.max(p / 100)))
            .count();
        if warm > 0 {
            w.push(Warning::new(
                "cache_warm_in_unique_mode",
                format!(
                    "{warm} of {} requests reported cached prompt tokens although every prompt starts with a unique prefix: the cache was warm (reproducible prompts sent before, or another client), so this cold-cache measurement was partly warm",
                    samples.len()
                ),
            ));
        }
    }
    let fewest = population.p99_samples_by_metric.values().copied().min().unwrap_or(0);
    if fewest < P99_MIN_SAMPLES && !samples.is_empty() {
        w.push(Warning::new(
            "p99_descriptive",
            format!("only {fewest} eligible samples: p99 is descriptive (one sample decides it); use at least {P99_MIN_SAMPLES} requests for a p99 to compare"),
        ));
    }
    w
}
