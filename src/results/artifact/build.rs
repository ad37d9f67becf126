//! The mapping from a typed `LevelSummary` (plus the run's fixed description and the records
//! file) to the `anvil-serving.benchmark/v1` document. Nothing is computed here: the flat
//! `metrics` map is the summary's fields under the contract's key names, and only here.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Artifact, ClientInfo, SCHEMA, StreamKind, Streamed, TimingMethodology};
use crate::contract::{Metric, Stat, Total, metric_key};
use crate::request::record::RunInfo;
use crate::results::aggregate::stats::Summary;
use crate::results::aggregate::steady::SteadyState;
use crate::results::aggregate::summary::LevelSummary;

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
        model_source: info.model_source.clone(),
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
        level_prompt_salt: crate::request::workload::level_prompt_salt_hex(
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
        replicas: s.replicas.clone(),
        structured_output: s.structured_output.clone(),
        models: s.models.clone(),
        cache_reset: s.cache_reset.clone(),
        tool_calls: s.tool_calls.clone(),
        media: s.media.clone(),
        shard: info.shard.clone(),
        shards: s.shards.clone(),
        metric_notes: s.unstreamed.as_ref().map(|u| u.notes.clone()),
        client: ClientInfo::this(),
        credential_refreshes: None,
    }
}

/// The `metrics` block: every distribution's statistics under `<stem>_<stat>[_ms]`, then totals,
/// rates and counts (a flat, sorted map like the reference's), every key in the contract's words.
pub fn metrics(s: &LevelSummary) -> Map<String, Value> {
    let mut m = Map::new();
    for metric in Metric::ALL {
        for stat in Stat::ALL {
            m.insert(metric_key(metric, stat), statistic(s.distributions.get(metric), stat));
        }
    }
    let (t, r, c) = (&s.totals, &s.rates, &s.controlled_output);
    let sources: BTreeMap<&str, u64> = s.output_token_sources.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    for total in Total::ALL {
        let value = match total {
            Total::OutputTokens => json!(t.output_tokens),
            Total::PromptTokens => json!(t.prompt_tokens),
            Total::PromptTokenSamples => json!(t.prompt_token_samples),
            Total::ContentChunks => json!(t.content_chunks),
            Total::ReasoningChunks => json!(t.reasoning_chunks),
            // Reserved by the contract; no definition is published for it, so it stays null.
            Total::ContentChunksS => Value::Null,
            Total::ThroughputTokS => json!(r.throughput_tok_s),
            Total::RequestThroughputRps => json!(r.request_throughput_rps),
            Total::MeasurementWindowMs => json!(r.measurement_window_ms),
            Total::WindowThroughputTokS => json!(r.window_throughput_tok_s),
            // Present only with objectives.
            Total::GoodputRequests => match r.goodput {
                Some(g) => json!(g.requests),
                None => continue,
            },
            Total::GoodputRps => match r.goodput {
                Some(g) => json!(g.rps),
                None => continue,
            },
            Total::OutputTokenSources => json!(sources),
            Total::PrefixCacheHitAvg => json!(s.prefix_cache.hit_avg),
            Total::PrefixCacheHitSamples => json!(s.prefix_cache.samples),
            Total::RequestCanarySamples => json!(s.canaries.samples),
            Total::RequestCanaryPassed => json!(s.canaries.passed),
            Total::ControlledOutputSamples => json!(c.samples),
            Total::ControlledOutputExactAdherence => json!(c.exact),
            Total::ControlledOutputExactAdherenceRate => json!(c.exact_rate),
            Total::ControlledOutputUnobservable => json!(c.unobservable),
            Total::ControlledOutputTruncated => json!(c.truncated),
            Total::PromptSizingErrorPctMean => json!(s.sizing.mean_pct),
            Total::PromptSizingErrorPctMax => json!(s.sizing.max_pct),
            Total::PromptSizingErrorPctBias => json!(s.sizing.bias_pct),
            Total::PromptSizingSamples => json!(s.sizing.samples),
            Total::ThroughputPerformanceEligible => json!(r.throughput_performance_eligible),
            // Present only for the APIs that do not stream.
            Total::InputThroughputTokS => match &s.unstreamed {
                Some(u) => json!(u.input_throughput_tok_s),
                None => continue,
            },
        };
        m.insert(total.key().into(), value);
    }
    m
}

/// One statistic of a distribution as `metrics` and the summary blocks write it: null when the
/// distribution has no samples, but the sample count, which is then 0.
fn statistic(d: Option<&Summary>, stat: Stat) -> Value {
    match (d, stat) {
        (d, Stat::Samples) => json!(d.map_or(0, |d| d.samples)),
        (Some(d), stat) => json!(d.stat(stat)),
        (None, _) => Value::Null,
    }
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
    Value::Object(Stat::ALL.into_iter().map(|stat| (stat.name().to_string(), statistic(Some(d), stat))).collect())
}
