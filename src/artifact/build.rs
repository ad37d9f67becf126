//! Assemble one level's artifact from what the level produced.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::load;
use super::{
    Artifact, ClientInfo, SCHEMA, SamplingParam, SamplingRecord, ServeFlagsRecord, Stamp, TimingMethodology,
    fingerprint,
};
use crate::aggregate::Collected;
use crate::aggregate::metrics::{self, MetricsInput, P99_MIN_SAMPLES};
use crate::aggregate::timing::{DroppedRecord, FailureRecord, RequestTiming, error_counts, ms};
use crate::report::Warning;
use crate::scenario::{Endpoint, PromptCache, Scenario};
use crate::schedule::{Issued, LevelPacing};
use crate::worker::{ErrorKind, TokenSource};
use crate::workload::SizingRecord;

/// What one level produced, plus the context needed to describe it.
pub struct LevelRun<'a> {
    pub scenario: &'a Scenario,
    pub run_id: String,
    pub pacing: LevelPacing,
    pub issued: Issued,
    pub base_url: &'a str,
    pub started: Stamp,
    pub finished: Stamp,
    pub collected: Collected,
    pub interrupted: bool,
    /// The embedded simulator's counters for this level, when it was the target.
    pub simulator: Option<Value>,
    pub sizing: &'a SizingRecord,
    /// The salt mixed into prompt text (0: reproducible prompts).
    pub prompt_salt: u64,
}

pub fn build(run: LevelRun<'_>) -> Artifact {
    let s = run.scenario;
    let rules = load::exclusions(s, &run.collected, run.issued);
    let mut records: Vec<RequestTiming> =
        run.collected.completed.iter().map(|c| RequestTiming::from_completed(c, rules)).collect();
    records.sort_by_key(|r| r.request_index);
    let mut failures: Vec<FailureRecord> =
        run.collected.failed.iter().map(|f| FailureRecord::from_failed(f, rules)).collect();
    failures.sort_by_key(|f| f.request_index);
    let mut dropped: Vec<DroppedRecord> = run.collected.dropped.iter().map(DroppedRecord::from_dropped).collect();
    dropped.sort_by_key(|d| d.request_index);

    // The level's wall clock: from the level start to the end of its last request.
    let wall = run
        .collected
        .completed
        .iter()
        .map(|c| c.start_offset + c.end)
        .chain(run.collected.failed.iter().map(|f| f.start_offset + f.elapsed))
        .max()
        .unwrap_or(Duration::ZERO);
    let wall_clock_ms = ms(wall);
    let attempted = (records.len() + failures.len()) as u64;
    let failed_server_faults = failures.iter().filter(|f| f.error_kind.is_server_fault()).count() as u64;
    let (metrics, population) = metrics::compute(&MetricsInput {
        records: &records,
        failures: &failures,
        wall_clock_ms,
        attempted,
        failed_server_faults,
        interrupted: run.interrupted,
        slo: &s.slo,
    });
    let slo = metrics::evaluate_slo(&s.slo, &metrics, &population);
    let load = load::load_record(s, run.pacing, run.issued, &records, &failures, &dropped);

    let mut context_distribution: BTreeMap<String, u64> = BTreeMap::new();
    for planned in
        records.iter().map(|r| r.planned_context_tokens).chain(failures.iter().map(|f| f.planned_context_tokens))
    {
        *context_distribution.entry(planned.to_string()).or_default() += 1;
    }
    let context_tokens = s.workload.prompts.context_json();

    let canary_failures = records.iter().filter(|r| r.request_canary.as_ref().is_some_and(|c| !c.passed)).count();
    let mut warnings = warnings(&run, &records, &failures, canary_failures, &population, &metrics);
    for reason in &load.validity.reasons {
        warnings.push(Warning::new("invalid_load", reason.clone()));
    }
    let scenario_json = serde_json::to_value(s).unwrap_or(Value::Null);
    let engine = match &s.target.endpoint {
        Endpoint::Simulator { profile } => Some(format!("anvil-simulator/{profile}")),
        Endpoint::Remote { .. } => s.target.engine.clone(),
    };
    let responses_received = records.len() as u64 + failures.iter().filter(|f| f.http_status.is_some()).count() as u64;
    // Eligible when nothing was left out except by design (warm-up, cool-down, the burst's
    // warm-up request).
    let unplanned_exclusions =
        records.iter().filter(|r| matches!(r.exclusion_reason, Some("canary_failed" | "controlled_output"))).count();
    let performance_eligible =
        !run.interrupted && failures.is_empty() && unplanned_exclusions == 0 && !records.is_empty();

    Artifact {
        schema: SCHEMA,
        run_id: run.run_id,
        measurement_protocol: s.run.protocol.clone(),
        tier: s.run.tier.clone(),
        engine,
        gpu: s.target.gpu.clone(),
        model: s.target.model.clone(),
        api: s.target.api,
        base_url: if s.target.redact_base_url { "[redacted]".to_string() } else { run.base_url.to_string() },
        started_at: run.started.iso(),
        started_at_unix_ns: run.started.unix_ns(),
        finished_at: run.finished.iso(),
        finished_at_unix_ns: run.finished.unix_ns(),
        timestamp_precision: "nanosecond-unix-fields; ISO labels are second precision",
        clock_domain_id: s.run.clock_domain_id.clone(),
        configuration_fingerprint: fingerprint(&scenario_json),
        manifest: None,
        source_recipe: None,
        load,
        requests: attempted,
        completed: records.len() as u64,
        failed: failures.len() as u64,
        responses_received,
        interrupted: run.interrupted,
        context_tokens,
        context_seed: s.run.seed,
        context_distribution,
        max_context_tokens: s.workload.max_context_tokens,
        max_tokens: s.workload.max_tokens,
        prompt_cache_mode: s.workload.prompt_cache.as_str(),
        shared_prefix_tokens: s.workload.prompt_cache.shared_prefix_tokens(),
        prompts_reproducible: s.workload.prompt_cache.reproducible(),
        prompt_salt: format!("{:016x}", run.prompt_salt),
        prompt_sizing: run.sizing.clone(),
        request_canaries: s.workload.canaries,
        controlled_output_policy: s.output.policy.as_str(),
        response_words: s.output.response_words.unwrap_or(0),
        sampling: SamplingRecord {
            temperature: SamplingParam::from_requested(s.sampling.temperature),
            top_p: SamplingParam::from_requested(s.sampling.top_p),
        },
        serve_flags: ServeFlagsRecord {
            thinking_mode: s.serve.thinking_mode,
            reasoning_effort: s.serve.reasoning_effort,
            no_thinking: s.serve.no_thinking,
            shared_prefix_burst: s.workload.prompt_cache.burst(),
        },
        performance_eligible,
        wall_clock_ms,
        metrics,
        metric_population: population,
        error_counts: error_counts(&failures),
        warnings,
        timing_methodology: TimingMethodology::current(),
        slo,
        request_timings: records,
        failures,
        dropped,
        scenario: scenario_json,
        simulator: run.simulator,
        client: ClientInfo::this(),
    }
}

/// Sizing error above which the planned context is not what the server saw.
const SIZING_WARN_PCT: f64 = 5.0;

fn warnings(
    run: &LevelRun<'_>,
    records: &[RequestTiming],
    failures: &[FailureRecord],
    canary_failures: usize,
    population: &metrics::Population,
    metrics: &serde_json::Map<String, Value>,
) -> Vec<Warning> {
    let mut w = Vec::new();
    if let Endpoint::Simulator { profile } = &run.scenario.target.endpoint {
        w.push(Warning::new(
            "simulated_target",
            format!("measured against the embedded simulator (profile {profile}), not a real engine; give --base-url to measure a server"),
        ));
    }
    if run.interrupted {
        w.push(Warning::new("interrupted", "the run was stopped before it finished; the numbers cover what completed"));
    }
    let canaries = records.iter().filter(|r| r.request_canary.is_some()).count();
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
    let server_failures: Vec<&FailureRecord> =
        failures.iter().filter(|f| f.error_kind != ErrorKind::Interrupted).collect();
    if !server_failures.is_empty() {
        let counts = error_counts(failures);
        let kinds: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        w.push(Warning::new(
            "requests_failed",
            format!(
                "{} of {} requests failed ({}); they are listed under failures and excluded from the distributions",
                server_failures.len(),
                population.attempted_requests,
                kinds.join(", ")
            ),
        ));
    }
    let chunk_counted = records.iter().filter(|r| r.output_token_source == TokenSource::ChunkCount).count();
    if chunk_counted > 0 {
        w.push(Warning::new(
            "no_usage_reported",
            format!("{chunk_counted} responses reported no usage: their output tokens are counted from chunks, which undercounts when a chunk carries several tokens (TPOT and decode rates use that count)"),
        ));
    }
    if let Some(reason) = &run.sizing.fallback_reason {
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
    if let PromptCache::Unique { .. } = run.scenario.workload.prompt_cache {
        // A few cached tokens are the chat template's shared opening (token-granular caches
        // report them); more than that means a prompt prefix was already in the cache.
        let warm: Vec<&RequestTiming> = records
            .iter()
            .filter(|r| matches!((r.cached_tokens, r.prompt_tokens), (Some(c), Some(p)) if c > 32.max(p / 100)))
            .collect();
        if !warm.is_empty() {
            w.push(Warning::new(
                "cache_warm_in_unique_mode",
                format!(
                    "{} of {} requests reported cached prompt tokens although every prompt starts with a unique prefix: the cache was warm (reproducible prompts sent before, or another client), so this cold-cache measurement was partly warm",
                    warm.len(),
                    records.len()
                ),
            ));
        }
    }
    let fewest = population.p99_samples_by_metric.values().copied().min().unwrap_or(0);
    if fewest < P99_MIN_SAMPLES && !records.is_empty() {
        w.push(Warning::new(
            "p99_descriptive",
            format!("only {fewest} eligible samples: p99 is descriptive (one sample decides it); use at least {P99_MIN_SAMPLES} requests for a p99 to compare"),
        ));
    }
    w
}
