//! Each engine's metric names mapped to one small normalised set, with version tolerance: a
//! trailing `_total` is optional (prometheus_client adds it to counters in the text format, and
//! several engines changed their spelling across versions), and old and new names are both
//! listed, the newer first.
//!
//! Sources, per engine:
//! - vLLM: `docs/design/metrics.md` and `vllm/v1/metrics/loggers.py` (V1 engine). The renames
//!   `gpu_cache_usage_perc` → `kv_cache_usage_perc` and `gpu_prefix_cache_*` →
//!   `prefix_cache_*` are listed there under deprecated metrics; inference-perf's
//!   `vllm_client.py` matches `vllm:request_success(_total)?` for the suffix change.
//! - SGLang: `docs/references/production_metrics.md` (`--enable-metrics`).
//! - llama.cpp: `tools/server/README.md`, "Available metrics" (`--metrics`), and the server's
//!   `server_task_result_metrics::to_metrics()`. Its `prompt_tokens_total` ("Number of prompt
//!   tokens processed, excluding cached tokens") counts prompt tokens *evaluated*, so tokens
//!   reused from the cache are not in it: it maps to `prompt_tokens_computed`, not
//!   `prompt_tokens`. Builds since ggml-org/llama.cpp#26920 (August 2026: "metrics now reflect
//!   processed and cached prompt tokens separately") also export
//!   `prompt_tokens_cached_total` ("Number of prompt tokens reused from the cache"): the
//!   prefix-cache hits, in tokens. The prefix-cache queries, every prompt token looked up, are
//!   then the evaluated tokens plus the cached ones (see [`derive`]).
//!   `kv_cache_usage_ratio` was removed from current builds and is matched for older ones.
//! - TGI: `docs/source/reference/metrics.md`; token counts are the `_sum` of its per-request
//!   length histograms.
//! - Dynamo frontend: AIPerf `docs/tutorials/server-metrics.md`. TensorRT-LLM behind Dynamo
//!   (`trtllm_*`, Dynamo `backends/trtllm/prometheus.md`) exposes latency histograms only, so
//!   it is recognised but maps to nothing; `trtllm-serve`'s own `/metrics` is JSON, not this
//!   format, and is reported as such by the parser.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse::Series;

/// The engine whose names a scrape carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
    Llamacpp,
    Tgi,
    Dynamo,
    Trtllm,
}

impl Engine {
    pub const ALL: [Engine; 6] =
        [Engine::Vllm, Engine::Sglang, Engine::Llamacpp, Engine::Tgi, Engine::Dynamo, Engine::Trtllm];

    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::Llamacpp => "llamacpp",
            Engine::Tgi => "tgi",
            Engine::Dynamo => "dynamo",
            Engine::Trtllm => "trtllm",
        }
    }

    /// The prefix every metric of the engine starts with.
    fn prefix(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm:",
            Engine::Sglang => "sglang:",
            Engine::Llamacpp => "llamacpp:",
            Engine::Tgi => "tgi_",
            Engine::Dynamo => "dynamo_",
            Engine::Trtllm => "trtllm_",
        }
    }

    /// The engine a metric name belongs to, by prefix.
    pub fn of_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| name.starts_with(e.prefix()))
    }
}

/// The normalised metrics. Gauges are sampled; counters are reported as deltas over a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// Requests being executed (in the running batch).
    Running,
    /// Requests queued, not yet scheduled.
    Waiting,
    /// KV-cache blocks in use, 0–1.
    KvCacheUsage,
    /// A hit-rate gauge, 0–1, for engines that export no hit counters (SGLang).
    PrefixCacheHitRate,
    /// Prompt tokens looked up in the prefix cache (vLLM counts tokens, not requests; for
    /// llama.cpp, derived: `prompt_tokens_computed` + `prefix_cache_hits`).
    PrefixCacheQueries,
    /// Prompt tokens found in the prefix cache (llama.cpp: reused from its cache).
    PrefixCacheHits,
    /// Prompt tokens of the requests served, cached ones included.
    PromptTokens,
    /// Prompt tokens evaluated, cache hits excluded (llama.cpp's only prompt counter).
    PromptTokensComputed,
    /// Output tokens generated.
    GenerationTokens,
    /// Requests that finished successfully.
    RequestsSucceeded,
    /// Requests preempted (their KV cache evicted, to be recomputed).
    Preemptions,
    /// Speculative-decoding draft rounds.
    SpecDecodeDrafts,
    /// Draft tokens proposed.
    SpecDecodeDraftTokens,
    /// Draft tokens accepted.
    SpecDecodeAcceptedTokens,
}

/// How series of one name combine into the normalised value of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Summed across label sets (data-parallel engines, models, finish reasons).
    Counter,
    /// Summed across label sets: a count of requests.
    CountGauge,
    /// Averaged across label sets: a ratio in 0–1.
    RatioGauge,
}

impl Norm {
    pub const ALL: [Norm; 14] = [
        Norm::Running,
        Norm::Waiting,
        Norm::KvCacheUsage,
        Norm::PrefixCacheHitRate,
        Norm::PrefixCacheQueries,
        Norm::PrefixCacheHits,
        Norm::PromptTokens,
        Norm::PromptTokensComputed,
        Norm::GenerationTokens,
        Norm::RequestsSucceeded,
        Norm::Preemptions,
        Norm::SpecDecodeDrafts,
        Norm::SpecDecodeDraftTokens,
        Norm::SpecDecodeAcceptedTokens,
    ];

    pub fn kind(self) -> Kind {
        match self {
            Norm::Running | Norm::Waiting => Kind::CountGauge,
            Norm::KvCacheUsage | Norm::PrefixCacheHitRate => Kind::RatioGauge,
            _ => Kind::Counter,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Norm::Running => "running",
            Norm::Waiting => "waiting",
            Norm::KvCacheUsage => "kv_cache_usage",
            Norm::PrefixCacheHitRate => "prefix_cache_hit_rate",
            Norm::PrefixCacheQueries => "prefix_cache_queries",
            Norm::PrefixCacheHits => "prefix_cache_hits",
            Norm::PromptTokens => "prompt_tokens",
            Norm::PromptTokensComputed => "prompt_tokens_computed",
            Norm::GenerationTokens => "generation_tokens",
            Norm::RequestsSucceeded => "requests_succeeded",
            Norm::Preemptions => "preemptions",
            Norm::SpecDecodeDrafts => "spec_decode_drafts",
            Norm::SpecDecodeDraftTokens => "spec_decode_draft_tokens",
            Norm::SpecDecodeAcceptedTokens => "spec_decode_accepted_tokens",
        }
    }
}

/// One engine's name for a normalised metric. `name` is written without a `_total` suffix.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    pub name: &'static str,
    pub norm: Norm,
    pub engine: Engine,
}

const fn alias(name: &'static str, norm: Norm, engine: Engine) -> Alias {
    Alias { name, norm, engine }
}

/// Every known name. Within one engine and metric the first listed name present in a scrape
/// wins (newer spellings come first), so a server exporting both an old and a new name for a
/// while is not counted twice.
pub const ALIASES: &[Alias] = &[
    // vLLM (docs/design/metrics.md, vllm/v1/metrics/loggers.py).
    alias("vllm:num_requests_running", Norm::Running, Engine::Vllm),
    alias("vllm:num_requests_waiting", Norm::Waiting, Engine::Vllm),
    alias("vllm:kv_cache_usage_perc", Norm::KvCacheUsage, Engine::Vllm),
    alias("vllm:gpu_cache_usage_perc", Norm::KvCacheUsage, Engine::Vllm),
    alias("vllm:prefix_cache_queries", Norm::PrefixCacheQueries, Engine::Vllm),
    alias("vllm:gpu_prefix_cache_queries", Norm::PrefixCacheQueries, Engine::Vllm),
    alias("vllm:prefix_cache_hits", Norm::PrefixCacheHits, Engine::Vllm),
    alias("vllm:gpu_prefix_cache_hits", Norm::PrefixCacheHits, Engine::Vllm),
    alias("vllm:prompt_tokens", Norm::PromptTokens, Engine::Vllm),
    alias("vllm:generation_tokens", Norm::GenerationTokens, Engine::Vllm),
    alias("vllm:request_success", Norm::RequestsSucceeded, Engine::Vllm),
    alias("vllm:num_preemptions", Norm::Preemptions, Engine::Vllm),
    alias("vllm:spec_decode_num_drafts", Norm::SpecDecodeDrafts, Engine::Vllm),
    alias("vllm:spec_decode_num_draft_tokens", Norm::SpecDecodeDraftTokens, Engine::Vllm),
    alias("vllm:spec_decode_num_accepted_tokens", Norm::SpecDecodeAcceptedTokens, Engine::Vllm),
    // SGLang (docs/references/production_metrics.md). `cached_tokens_total` was seen in a
    // documentation mirror, not in the repository's file; matched when present.
    alias("sglang:num_running_reqs", Norm::Running, Engine::Sglang),
    alias("sglang:num_queue_reqs", Norm::Waiting, Engine::Sglang),
    alias("sglang:token_usage", Norm::KvCacheUsage, Engine::Sglang),
    alias("sglang:cache_hit_rate", Norm::PrefixCacheHitRate, Engine::Sglang),
    alias("sglang:cached_tokens", Norm::PrefixCacheHits, Engine::Sglang),
    alias("sglang:prompt_tokens", Norm::PromptTokens, Engine::Sglang),
    alias("sglang:generation_tokens", Norm::GenerationTokens, Engine::Sglang),
    // llama.cpp (tools/server/README.md, "Available metrics").
    alias("llamacpp:requests_processing", Norm::Running, Engine::Llamacpp),
    alias("llamacpp:requests_deferred", Norm::Waiting, Engine::Llamacpp),
    alias("llamacpp:kv_cache_usage_ratio", Norm::KvCacheUsage, Engine::Llamacpp),
    alias("llamacpp:prompt_tokens", Norm::PromptTokensComputed, Engine::Llamacpp),
    alias("llamacpp:prompt_tokens_cached", Norm::PrefixCacheHits, Engine::Llamacpp),
    alias("llamacpp:tokens_predicted", Norm::GenerationTokens, Engine::Llamacpp),
    alias("llamacpp:spec_decode_num_drafts", Norm::SpecDecodeDrafts, Engine::Llamacpp),
    alias("llamacpp:spec_decode_num_draft_tokens", Norm::SpecDecodeDraftTokens, Engine::Llamacpp),
    alias("llamacpp:spec_decode_num_accepted_tokens", Norm::SpecDecodeAcceptedTokens, Engine::Llamacpp),
    // TGI (docs/source/reference/metrics.md).
    alias("tgi_batch_current_size", Norm::Running, Engine::Tgi),
    alias("tgi_queue_size", Norm::Waiting, Engine::Tgi),
    alias("tgi_request_input_length_sum", Norm::PromptTokens, Engine::Tgi),
    alias("tgi_request_generated_tokens_sum", Norm::GenerationTokens, Engine::Tgi),
    alias("tgi_request_success", Norm::RequestsSucceeded, Engine::Tgi),
    // Dynamo frontend (AIPerf docs/tutorials/server-metrics.md).
    alias("dynamo_frontend_inflight_requests", Norm::Running, Engine::Dynamo),
    alias("dynamo_frontend_queued_requests", Norm::Waiting, Engine::Dynamo),
    alias("dynamo_frontend_input_sequence_tokens_sum", Norm::PromptTokens, Engine::Dynamo),
    alias("dynamo_frontend_output_sequence_tokens_sum", Norm::GenerationTokens, Engine::Dynamo),
];

/// Engine metrics the Grafana dashboard (`deploy/grafana/anvil-load.json`) reads beside
/// [`ALIASES`]: the engines' own latency histograms and throughput gauges, which the per-level
/// summary does not normalise. Written without `_total`, `_bucket`, `_sum` or `_count`.
/// Sources: vLLM `vllm/v1/metrics/loggers.py`; SGLang
/// `python/sglang/srt/metrics/collector.py`; llama.cpp `tools/server/README.md`.
pub const DASHBOARD_NAMES: &[(&str, Engine)] = &[
    ("vllm:time_to_first_token_seconds", Engine::Vllm),
    ("vllm:inter_token_latency_seconds", Engine::Vllm),
    ("vllm:e2e_request_latency_seconds", Engine::Vllm),
    ("vllm:request_queue_time_seconds", Engine::Vllm),
    ("sglang:time_to_first_token_seconds", Engine::Sglang),
    ("sglang:inter_token_latency_seconds", Engine::Sglang),
    ("sglang:e2e_request_latency_seconds", Engine::Sglang),
    ("sglang:gen_throughput", Engine::Sglang),
    ("llamacpp:prompt_tokens_seconds", Engine::Llamacpp),
    ("llamacpp:predicted_tokens_seconds", Engine::Llamacpp),
    ("llamacpp:n_busy_slots_per_decode", Engine::Llamacpp),
];

/// The index in [`ALIASES`] of a sample's name, `_total` or not.
pub fn lookup(name: &str) -> Option<usize> {
    // Only names with a known prefix can match: most of an exposition (process and Python
    // runtime metrics, histogram buckets of other names) is skipped after one comparison.
    Engine::of_name(name)?;
    let base = name.strip_suffix("_total").unwrap_or(name);
    ALIASES.iter().position(|a| a.name == base)
}

/// One scrape in the normalised set: for each metric, the first listed name present, its series
/// summed (counts) or averaged (ratios) across label sets.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Normalised {
    pub values: BTreeMap<Norm, f64>,
    /// The engine most of the recognised names belong to; by prefix alone when none maps.
    pub engine: Option<Engine>,
}

pub fn normalise(series: &[Series]) -> Normalised {
    // (alias index → sum, count) for every alias present.
    let mut present: BTreeMap<usize, (f64, u32)> = BTreeMap::new();
    let mut engines: BTreeMap<Engine, usize> = BTreeMap::new();
    for s in series {
        if let Some(engine) = Engine::of_name(&s.name) {
            *engines.entry(engine).or_default() += 1;
        }
        if let Some(i) = lookup(&s.name) {
            if s.value.is_finite() {
                let entry = present.entry(i).or_insert((0.0, 0));
                entry.0 += s.value;
                entry.1 += 1;
            }
        }
    }
    let mut values = BTreeMap::new();
    // In table order, so the first name listed for a metric wins.
    for (&i, &(sum, count)) in &present {
        let norm = ALIASES[i].norm;
        if values.contains_key(&norm) {
            continue;
        }
        let value = match norm.kind() {
            Kind::RatioGauge => sum / f64::from(count.max(1)),
            Kind::Counter | Kind::CountGauge => sum,
        };
        values.insert(norm, value);
    }
    derive(&mut values);
    let engine = engines.into_iter().max_by_key(|&(e, n)| (n, std::cmp::Reverse(e))).map(|(e, _)| e);
    Normalised { values, engine }
}

/// Counters an engine does not export but that follow from two it does. A server that counts
/// the prompt tokens it evaluated (cache hits excluded) and the cache hits looked up every prompt
/// token it was sent: its prefix-cache queries are the sum (llama.cpp). Counters add up over a
/// level, so this holds for a scrape's values and for a level's increases alike.
pub fn derive(values: &mut BTreeMap<Norm, f64>) {
    if values.contains_key(&Norm::PrefixCacheQueries) {
        return;
    }
    if let (Some(&computed), Some(&hits)) =
        (values.get(&Norm::PromptTokensComputed), values.get(&Norm::PrefixCacheHits))
    {
        values.insert(Norm::PrefixCacheQueries, computed + hits);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_match_with_and_without_total() {
        let a = lookup("vllm:prompt_tokens_total").expect("known");
        assert_eq!(ALIASES[a].norm, Norm::PromptTokens);
        assert_eq!(lookup("vllm:prompt_tokens"), Some(a));
        assert_eq!(ALIASES[lookup("llamacpp:prompt_tokens_total").expect("known")].norm, Norm::PromptTokensComputed);
        assert_eq!(ALIASES[lookup("tgi_request_input_length_sum").expect("known")].norm, Norm::PromptTokens);
        assert_eq!(lookup("vllm:prompt_tokens_created"), None);
        assert_eq!(lookup("process_cpu_seconds_total"), None);
        assert_eq!(lookup("tgi_request_input_length_count"), None);
    }

    #[test]
    fn the_table_is_consistent() {
        let mut seen = HashSet::new();
        for a in ALIASES {
            assert!(seen.insert(a.name), "{} listed twice", a.name);
            assert!(!a.name.ends_with("_total"), "{}: list names without _total", a.name);
            assert_eq!(Engine::of_name(a.name), Some(a.engine), "{}: prefix and engine disagree", a.name);
        }
        // The old vLLM names come after the new ones, so the new ones win when both are exported.
        let pos = |n: &str| ALIASES.iter().position(|a| a.name == n).expect("listed");
        assert!(pos("vllm:kv_cache_usage_perc") < pos("vllm:gpu_cache_usage_perc"));
        assert!(pos("vllm:prefix_cache_hits") < pos("vllm:gpu_prefix_cache_hits"));
        assert_eq!(Engine::of_name("trtllm_time_to_first_token_seconds_bucket"), Some(Engine::Trtllm));
        assert_eq!(Norm::ALL.iter().map(|n| n.as_str()).collect::<HashSet<_>>().len(), Norm::ALL.len());
    }

    fn series(name: &str, labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
            value,
        }
    }

    #[test]
    fn normalise_sums_counts_averages_ratios_and_prefers_new_names() {
        let scrape = [
            series("vllm:num_requests_running", &[("engine", "0")], 3.0),
            series("vllm:num_requests_running", &[("engine", "1")], 2.0),
            series("vllm:kv_cache_usage_perc", &[("engine", "0")], 0.2),
            series("vllm:kv_cache_usage_perc", &[("engine", "1")], 0.4),
            series("vllm:gpu_cache_usage_perc", &[("engine", "0")], 0.9),
            series("vllm:prompt_tokens_total", &[("engine", "0")], 100.0),
            series("vllm:prompt_tokens_total", &[("engine", "1")], 50.0),
            series("vllm:request_success_total", &[("finished_reason", "stop")], f64::NAN),
            series("process_cpu_seconds_total", &[], 7.0),
        ];
        let n = normalise(&scrape);
        assert_eq!(n.engine, Some(Engine::Vllm));
        assert_eq!(n.values[&Norm::Running], 5.0);
        assert!((n.values[&Norm::KvCacheUsage] - 0.3).abs() < 1e-12, "the new name wins, averaged");
        assert_eq!(n.values[&Norm::PromptTokens], 150.0);
        assert!(!n.values.contains_key(&Norm::RequestsSucceeded), "NaN is not a value");
        assert!(!n.values.contains_key(&Norm::Waiting));
        let legacy = normalise(&[series("vllm:gpu_cache_usage_perc", &[], 0.9)]);
        assert_eq!(legacy.values[&Norm::KvCacheUsage], 0.9);
        let trt = normalise(&[series("trtllm_time_to_first_token_seconds_count", &[], 4.0)]);
        assert_eq!((trt.engine, trt.values.len()), (Some(Engine::Trtllm), 0));
        assert_eq!(normalise(&[series("up", &[], 1.0)]), Normalised::default());
    }

    /// llama.cpp's own exposition since ggml-org/llama.cpp#26920: evaluated and cached prompt
    /// tokens apart.
    #[test]
    fn llamacpp_cache_counters_give_hits_and_queries() {
        let scrape = [
            series("llamacpp:prompt_tokens_total", &[], 600.0),
            series("llamacpp:prompt_tokens_cached_total", &[], 400.0),
            series("llamacpp:tokens_predicted_total", &[], 250.0),
        ];
        let n = normalise(&scrape);
        assert_eq!(n.engine, Some(Engine::Llamacpp));
        assert_eq!(n.values[&Norm::PromptTokensComputed], 600.0);
        assert_eq!(n.values[&Norm::PrefixCacheHits], 400.0);
        assert_eq!(n.values[&Norm::PrefixCacheQueries], 1000.0);
        assert!(!n.values.contains_key(&Norm::PromptTokens), "evaluated tokens are not all prompt tokens");
        // An older build without the cached counter: nothing is made up.
        let old = normalise(&scrape[..1]);
        assert!(
            !old.values.contains_key(&Norm::PrefixCacheQueries) && !old.values.contains_key(&Norm::PrefixCacheHits)
        );
        // An engine that exports queries keeps its own.
        let mut own = BTreeMap::from([
            (Norm::PrefixCacheQueries, 5.0),
            (Norm::PrefixCacheHits, 1.0),
            (Norm::PromptTokensComputed, 9.0),
        ]);
        derive(&mut own);
        assert_eq!(own[&Norm::PrefixCacheQueries], 5.0);
    }
}
