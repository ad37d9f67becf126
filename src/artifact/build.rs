//! The mapping from a typed `LevelSummary` (plus the run's fixed description and the records
//! file) to the `anvil-serving.benchmark/v1` document. Nothing is computed here: the flat
//! `metrics` map is the summary's fields under the contract's key names, and only here.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Artifact, ClientInfo, SCHEMA, StreamKind, Streamed, TimingMethodology};
use crate::aggregate::stats::{PERCENTILES, Summary};
use crate::aggregate::steady::SteadyState;
use crate::aggregate::summary::{LevelSummary, Metric};
use crate::record::RunInfo;

/// The artifact of one level. `records` is the file holding the level's request lines, streamed
/// into `request_timings`, `failures` and `dropped` when the artifact is written.
pub fn build(info: &RunInfo, summary: &LevelSummary, records: &Path) -> Artifact {
    let s = summary;
    let stream = |kind| Streamed {
        path: records.to_path_buf(),
        level: s.level_id.clone(),
        kind,
        rules: s.rules,
        as_written: s.records_as_written,
    };
    Artifact {
        schema: SCHEMA,
        run_id: s.level_id.clone(),
        measurement_protocol: info.measurement_protocol.clone(),
        tier: info.tier.clone(),
        engine: info.engine.clone(),
        gpu: info.gpu.clone(),
        model: info.model.clone(),
        api: info.api,
        base_url: info.base_url.clone(),
        started_at: s.started.iso(),
        started_at_unix_ns: s.started.unix_ns(),
        finished_at: s.finished.iso(),
        finished_at_unix_ns: s.finished.unix_ns(),
        timestamp_precision: "nanosecond-unix-fields; ISO labels are second precision",
        clock_domain_id: info.clock_domain_id.clone(),
        configuration_fingerprint: info.configuration_fingerprint.clone(),
        manifest: None,
        source_recipe: None,
        load: s.load.clone(),
        requests: s.requests,
        completed: s.completed,
        failed: s.failed,
        responses_received: s.responses_received,
        interrupted: s.interrupted,
        context_tokens: info.context_tokens.clone(),
        context_seed: info.context_seed,
        context_distribution: s.context_distribution.clone(),
        max_context_tokens: info.max_context_tokens,
        max_tokens: info.max_tokens,
        prompt_cache_mode: info.prompt_cache_mode.clone(),
        shared_prefix_tokens: info.shared_prefix_tokens,
        prompts_reproducible: info.prompts_reproducible,
        levels_share_prompts: info.levels_share_prompts,
        prompt_salt: info.prompt_salt.clone(),
        level_prompt_salt: crate::workload::level_prompt_salt_hex(
            &info.prompt_salt,
            info.prompts_reproducible,
            s.pacing.level(),
        ),
        prompt_sizing: info.prompt_sizing.clone(),
        request_canaries: info.request_canaries,
        controlled_output_policy: info.controlled_output_policy,
        response_words: info.response_words,
        sampling: info.sampling.clone(),
        serve_flags: info.serve_flags.clone(),
        performance_eligible: s.performance_eligible,
        wall_clock_ms: s.wall_clock_ms,
        metrics: metrics(s),
        metric_population: s.population.clone(),
        error_counts: s.error_counts.clone(),
        warnings: s.warnings.clone(),
        timing_methodology: TimingMethodology::current(),
        slo: s.slo.clone(),
        drift: s.drift.clone(),
        snapshot_windows: s.snapshot_windows,
        steady_state: s.steady_state.as_ref().map(steady_state),
        request_timings: stream(StreamKind::Requests),
        failures: stream(StreamKind::Failures),
        dropped: stream(StreamKind::Dropped),
        scenario: info.scenario.clone(),
        simulator: s.simulator.clone(),
        server_metrics: s.server_metrics.clone(),
        conversations: s.conversations.clone(),
        shard: info.shard.clone(),
        shards: s.shards.clone(),
        metric_notes: s.unstreamed.as_ref().map(|u| u.notes.clone()),
        client: ClientInfo::this(),
    }
}

/// The `metrics` block: every distribution's statistics under `<stem>_<stat>[_ms]`, then totals,
/// rates and counts (a flat, sorted map like the reference's).
pub fn metrics(s: &LevelSummary) -> Map<String, Value> {
    let mut m = Map::new();
    for metric in Metric::ALL {
        distribution_keys(&mut m, s, metric);
    }
    let t = &s.totals;
    m.insert("output_tokens".into(), json!(t.output_tokens));
    m.insert("prompt_tokens".into(), json!(t.prompt_tokens));
    m.insert("prompt_token_samples".into(), json!(t.prompt_token_samples));
    m.insert("content_chunks".into(), json!(t.content_chunks));
    m.insert("reasoning_chunks".into(), json!(t.reasoning_chunks));
    // Reserved by the contract; no definition is published for it, so it stays null.
    m.insert("content_chunks_s".into(), Value::Null);
    let r = &s.rates;
    m.insert("throughput_tok_s".into(), json!(r.throughput_tok_s));
    m.insert("request_throughput_rps".into(), json!(r.request_throughput_rps));
    m.insert("measurement_window_ms".into(), json!(r.measurement_window_ms));
    m.insert("window_throughput_tok_s".into(), json!(r.window_throughput_tok_s));
    if let Some(g) = r.goodput {
        m.insert("goodput_requests".into(), json!(g.requests));
        m.insert("goodput_rps".into(), json!(g.rps));
    }
    let sources: BTreeMap<&str, u64> = s.output_token_sources.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    m.insert("output_token_sources".into(), json!(sources));
    m.insert("prefix_cache_hit_avg".into(), json!(s.prefix_cache.hit_avg));
    m.insert("prefix_cache_hit_samples".into(), json!(s.prefix_cache.samples));
    m.insert("request_canary_samples".into(), json!(s.canaries.samples));
    m.insert("request_canary_passed".into(), json!(s.canaries.passed));
    let c = &s.controlled_output;
    m.insert("controlled_output_samples".into(), json!(c.samples));
    m.insert("controlled_output_exact_adherence".into(), json!(c.exact));
    m.insert("controlled_output_exact_adherence_rate".into(), json!(c.exact_rate));
    m.insert("controlled_output_unobservable".into(), json!(c.unobservable));
    m.insert("controlled_output_truncated".into(), json!(c.truncated));
    m.insert("prompt_sizing_error_pct_mean".into(), json!(s.sizing.mean_pct));
    m.insert("prompt_sizing_error_pct_max".into(), json!(s.sizing.max_pct));
    m.insert("prompt_sizing_error_pct_bias".into(), json!(s.sizing.bias_pct));
    m.insert("prompt_sizing_samples".into(), json!(s.sizing.samples));
    m.insert("throughput_performance_eligible".into(), json!(r.throughput_performance_eligible));
    if let Some(u) = &s.unstreamed {
        m.insert("input_throughput_tok_s".into(), json!(u.input_throughput_tok_s));
    }
    m
}

/// The `steady_state` block.
fn steady_state(st: &SteadyState) -> Value {
    json!({
        "basis": st.basis,
        "start_ms": st.start_ms,
        "end_ms": st.end_ms,
        "duration_ms": st.duration_ms(),
        "share_of_level": st.share_of_level,
        "requests": st.requests,
        "throughput_tok_s": st.throughput_tok_s,
        "completion_rate_rps": st.completion_rate_rps,
        "ttft_ms": st.ttft.as_ref().map(summary),
        "tpot_ms": st.tpot.as_ref().map(summary),
        "e2e_ms": st.e2e.as_ref().map(summary),
    })
}

/// One distribution as a block: the same statistics, named as in `metrics`.
pub fn summary(d: &Summary) -> Value {
    let mut m = Map::new();
    m.insert("mean".into(), json!(d.mean));
    m.insert("stddev".into(), json!(d.stddev));
    m.insert("mean_ci95_low".into(), json!(d.mean_ci95_low));
    m.insert("mean_ci95_high".into(), json!(d.mean_ci95_high));
    m.insert("min".into(), json!(d.min));
    for (i, p) in PERCENTILES.iter().enumerate() {
        m.insert(format!("p{p}"), json!(d.percentiles[i]));
    }
    m.insert("max".into(), json!(d.max));
    m.insert("samples".into(), json!(d.samples));
    Value::Object(m)
}

/// The key of one statistic: `ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`.
pub fn metric_key(metric: Metric, stat: &str) -> String {
    let unit = if metric.ms_suffix() && stat != "samples" { "_ms" } else { "" };
    format!("{}_{stat}{unit}", metric.stem())
}

fn distribution_keys(out: &mut Map<String, Value>, s: &LevelSummary, metric: Metric) {
    let d = s.distributions.get(metric);
    let mut put = |stat: &str, v: Option<f64>| {
        out.insert(metric_key(metric, stat), v.map_or(Value::Null, |x| json!(x)));
    };
    put("mean", d.map(|d| d.mean));
    put("stddev", d.map(|d| d.stddev));
    put("mean_ci95_low", d.map(|d| d.mean_ci95_low));
    put("mean_ci95_high", d.map(|d| d.mean_ci95_high));
    put("min", d.map(|d| d.min));
    put("max", d.map(|d| d.max));
    for (i, p) in PERCENTILES.iter().enumerate() {
        put(&format!("p{p}"), d.map(|d| d.percentiles[i]));
    }
    out.insert(metric_key(metric, "samples"), json!(d.map_or(0, |d| d.samples)));
}
