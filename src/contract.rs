//! The contract's words, each defined once: the names the committed JSON Schemas (`contract/`)
//! and the scenario's `[slo]` keys fix.
//!
//! - [`ErrorKind`]: the failure classes (`error_counts`, `failures[].error_kind`, `retry.on`).
//! - [`Metric`] and [`Stat`], joined by [`metric_key`]: every distribution's statistics in the
//!   artifact's flat `metrics` map (`ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`), and what a
//!   percentile is ([`nearest_rank`]).
//! - [`Total`]: every other key of that map (totals, rates, counts).
//! - [`Objective`]: what an `[slo]` key names, read once when the scenario is validated.
//! - [`Worse`]: which way a number gets worse, for objectives' bounds and `compare`'s verdicts.
//!
//! This module imports nothing from the rest of the crate: the scenario, the worker, the records,
//! the summary, the artifact and the commands that read artifacts all take their words from here,
//! so a new metric is one variant here plus the code that measures it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Stable failure classes; their string forms are part of the artifact contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The TCP/TLS connection could not be opened.
    ConnectFailed,
    ConnectTimeout,
    /// No output (a non-empty reasoning or content delta) within `client.first_byte_timeout`
    /// of sending; headers, comments and chunks without text do not stop this clock.
    FirstByteTimeout,
    /// After the first output, no progress (text, a finish reason, usage or `[DONE]`) for
    /// longer than `client.idle_timeout`.
    IdleTimeout,
    /// The whole request took longer than `client.request_timeout`.
    RequestTimeout,
    /// The server answered with a redirect (3xx); redirects are not followed.
    Redirect,
    /// HTTP 400 saying the prompt does not fit the context window.
    ContextLengthExceeded,
    /// Any other non-2xx status.
    Http(u16),
    /// The connection broke while the response was streaming.
    StreamBroken,
    /// A line of the stream is no SSE field, or one event grew without bound.
    MalformedSse,
    InvalidJson,
    InvalidUtf8,
    /// The server sent an error object inside the stream.
    ServerErrorEvent,
    /// Responses API: `response.failed` (the server gave up on the response).
    ResponseFailed,
    /// Responses API: `response.incomplete` for a reason other than the output budget (a
    /// content filter, say).
    ResponseIncomplete,
    /// The stream ended without its last event (`data: [DONE]`, `response.completed` or
    /// `message_stop`), or a non-streamed answer ended before its JSON did.
    MissingDone,
    /// The stream finished without any reasoning or content text.
    EmptyResponse,
    /// The run was stopped (Ctrl-C) while the request was in flight; not a server error.
    Interrupted,
    /// Any other client-side error while sending.
    RequestFailed,
}

impl ErrorKind {
    /// Every kind but `Http`, whose name carries its status (`http_503`).
    const WITHOUT_STATUS: [ErrorKind; 18] = [
        ErrorKind::ConnectFailed,
        ErrorKind::ConnectTimeout,
        ErrorKind::FirstByteTimeout,
        ErrorKind::IdleTimeout,
        ErrorKind::RequestTimeout,
        ErrorKind::Redirect,
        ErrorKind::ContextLengthExceeded,
        ErrorKind::StreamBroken,
        ErrorKind::MalformedSse,
        ErrorKind::InvalidJson,
        ErrorKind::InvalidUtf8,
        ErrorKind::ServerErrorEvent,
        ErrorKind::ResponseFailed,
        ErrorKind::ResponseIncomplete,
        ErrorKind::MissingDone,
        ErrorKind::EmptyResponse,
        ErrorKind::Interrupted,
        ErrorKind::RequestFailed,
    ];

    /// Interrupted requests are the operator's doing, not the server's.
    pub fn is_server_fault(self) -> bool {
        self != ErrorKind::Interrupted
    }

    /// Its name, but for `Http`, whose name is `http_` and the status.
    fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::FirstByteTimeout => "first_byte_timeout",
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::Redirect => "redirect",
            ErrorKind::ContextLengthExceeded => "context_length_exceeded",
            ErrorKind::Http(_) => "http",
            ErrorKind::StreamBroken => "stream_broken",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::InvalidUtf8 => "invalid_utf8",
            ErrorKind::ServerErrorEvent => "server_error_event",
            ErrorKind::ResponseFailed => "response_failed",
            ErrorKind::ResponseIncomplete => "response_incomplete",
            ErrorKind::MissingDone => "missing_done",
            ErrorKind::EmptyResponse => "empty_response",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::RequestFailed => "request_failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Http(code) => write!(f, "http_{code}"),
            kind => f.write_str(kind.name()),
        }
    }
}

impl std::str::FromStr for ErrorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(code) = s.strip_prefix("http_") {
            return code.parse().map(ErrorKind::Http).map_err(|_| format!("unknown error kind {s:?}"));
        }
        ErrorKind::WITHOUT_STATUS
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| format!("unknown error kind {s:?}"))
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Which way a number gets worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worse {
    /// Latencies, lags, stalls, the error rate.
    WhenHigher,
    /// Throughputs and other rates.
    WhenLower,
}

/// A per-request distribution the artifact summarises, with its key stem in `metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    CompletionTokens,
    PromptTokens,
    DecodeTokS,
    EffectivePrefillTokS,
    /// Legacy name of TPOT (same values).
    MeanInterTokenLatency,
    E2e,
    Generation,
    TimeToFirstOutput,
    /// Legacy name of TPOT (same values).
    MeanTimePerOutputToken,
    Tpot,
    Ttft,
    /// Open loop: TTFT plus schedule lag.
    TtftFromIntended,
    /// Open loop: e2e plus schedule lag.
    E2eFromIntended,
    /// Open loop: every request sent, eligible or not.
    ScheduleLag,
    /// Open loop with an in-flight cap: every request sent.
    QueueWait,
    /// Per request: output tokens per output chunk.
    TokensPerChunk,
    /// Per request: the longest gap between output chunks.
    MaxStall,
    /// Per request, with per-chunk counts: TPOT without the first chunk's tokens.
    TpotCorrected,
    /// Every gap between output chunks of eligible requests (HDR, see `record::gaps`).
    ItlChunk,
    /// Every such gap divided by the tokens its chunk delivered (HDR).
    ItlToken,
}

impl Metric {
    /// Every metric, in declaration order (so `ALL[m.index()] == m`).
    pub const ALL: [Metric; 20] = [
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
        Metric::ScheduleLag,
        Metric::QueueWait,
        Metric::TokensPerChunk,
        Metric::MaxStall,
        Metric::TpotCorrected,
        Metric::ItlChunk,
        Metric::ItlToken,
    ];

    /// The key stem in `metrics` (`ttft` gives `ttft_p99_ms`).
    pub fn stem(self) -> &'static str {
        match self {
            Metric::CompletionTokens => "completion_tokens",
            Metric::PromptTokens => "prompt_tokens",
            Metric::DecodeTokS => "decode_tok_s",
            Metric::EffectivePrefillTokS => "effective_prefill_tok_s",
            Metric::MeanInterTokenLatency => "mean_inter_token_latency_ms",
            Metric::E2e => "e2e",
            Metric::Generation => "generation",
            Metric::TimeToFirstOutput => "time_to_first_output",
            Metric::MeanTimePerOutputToken => "mean_time_per_output_token",
            Metric::Tpot => "tpot",
            Metric::Ttft => "ttft",
            Metric::TtftFromIntended => "ttft_from_intended",
            Metric::E2eFromIntended => "e2e_from_intended",
            Metric::ScheduleLag => "schedule_lag",
            Metric::QueueWait => "queue_wait",
            Metric::TokensPerChunk => "tokens_per_chunk",
            Metric::MaxStall => "max_stall",
            Metric::TpotCorrected => "tpot_corrected",
            Metric::ItlChunk => "itl_chunk",
            Metric::ItlToken => "itl_token",
        }
    }

    /// Whether the statistic keys end in `_ms` (`ttft_p99_ms`; the legacy
    /// `mean_inter_token_latency_ms` carries its unit in the stem).
    pub fn ms_suffix(self) -> bool {
        !matches!(
            self,
            Metric::CompletionTokens
                | Metric::PromptTokens
                | Metric::DecodeTokS
                | Metric::EffectivePrefillTokS
                | Metric::MeanInterTokenLatency
                | Metric::TokensPerChunk
        )
    }

    /// Which way the metric gets worse; `None` for the shape of the work (token counts, tokens
    /// per chunk), which no direction judges.
    pub fn worse(self) -> Option<Worse> {
        match self {
            Metric::DecodeTokS | Metric::EffectivePrefillTokS => Some(Worse::WhenLower),
            Metric::CompletionTokens | Metric::PromptTokens | Metric::TokensPerChunk => None,
            Metric::MeanInterTokenLatency
            | Metric::E2e
            | Metric::Generation
            | Metric::TimeToFirstOutput
            | Metric::MeanTimePerOutputToken
            | Metric::Tpot
            | Metric::Ttft
            | Metric::TtftFromIntended
            | Metric::E2eFromIntended
            | Metric::ScheduleLag
            | Metric::QueueWait
            | Metric::MaxStall
            | Metric::TpotCorrected
            | Metric::ItlChunk
            | Metric::ItlToken => Some(Worse::WhenHigher),
        }
    }

    /// Its place in [`Metric::ALL`], for tables indexed by metric.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A statistic of a distribution, as the artifact names it (`metrics`, and every summary block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Mean,
    /// Sample standard deviation (n − 1).
    Stddev,
    /// The normal-approximation 95 % confidence interval of the mean.
    MeanCi95Low,
    MeanCi95High,
    Min,
    P25,
    P50,
    P75,
    P90,
    P95,
    P99,
    Max,
    /// How many values the distribution holds (a count: never `_ms`, 0 when empty).
    Samples,
}

impl Stat {
    /// Every statistic a distribution reports.
    pub const ALL: [Stat; 13] = [
        Stat::Mean,
        Stat::Stddev,
        Stat::MeanCi95Low,
        Stat::MeanCi95High,
        Stat::Min,
        Stat::P25,
        Stat::P50,
        Stat::P75,
        Stat::P90,
        Stat::P95,
        Stat::P99,
        Stat::Max,
        Stat::Samples,
    ];

    /// The nearest-rank percentiles a distribution reports, in order.
    pub const PERCENTILES: [Stat; 6] = [Stat::P25, Stat::P50, Stat::P75, Stat::P90, Stat::P95, Stat::P99];

    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Stddev => "stddev",
            Stat::MeanCi95Low => "mean_ci95_low",
            Stat::MeanCi95High => "mean_ci95_high",
            Stat::Min => "min",
            Stat::P25 => "p25",
            Stat::P50 => "p50",
            Stat::P75 => "p75",
            Stat::P90 => "p90",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::Max => "max",
            Stat::Samples => "samples",
        }
    }

    /// The percentile a percentile statistic stands for (`P99` is 99).
    pub const fn percentile(self) -> Option<u32> {
        match self {
            Stat::P25 => Some(25),
            Stat::P50 => Some(50),
            Stat::P75 => Some(75),
            Stat::P90 => Some(90),
            Stat::P95 => Some(95),
            Stat::P99 => Some(99),
            Stat::Mean
            | Stat::Stddev
            | Stat::MeanCi95Low
            | Stat::MeanCi95High
            | Stat::Min
            | Stat::Max
            | Stat::Samples => None,
        }
    }
}

/// What `pNN` means wherever the program states or tests a percentile (the artifact's
/// `timing_methodology.distributions` says so): the 1-based rank of percentile `p` among `n`
/// ordered values by the nearest-rank rule, ⌈p/100 · n⌉, at least 1 and at most `n`, so every
/// percentile is an observed value. Integer arithmetic avoids float rounding at exact ranks (p99
/// of 100 samples is rank 99).
pub fn nearest_rank_position(p: u32, n: u64) -> u64 {
    (u64::from(p) * n).div_ceil(100).clamp(1, n.max(1))
}

/// Nearest-rank percentile of sorted values (see [`nearest_rank_position`]). `sorted` must be
/// non-empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: u32) -> T {
    sorted[nearest_rank_position(p, sorted.len() as u64) as usize - 1]
}

/// The key of one statistic in `metrics`: `ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`.
pub fn metric_key(metric: Metric, stat: Stat) -> String {
    let unit = if metric.ms_suffix() && stat != Stat::Samples { "_ms" } else { "" };
    format!("{}_{}{unit}", metric.stem(), stat.name())
}

/// Every key of `metrics` that is not a distribution's statistic: totals, rates and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    OutputTokens,
    PromptTokens,
    PromptTokenSamples,
    ContentChunks,
    ReasoningChunks,
    /// Reserved by the contract with no published definition: always null.
    ContentChunksS,
    ThroughputTokS,
    RequestThroughputRps,
    MeasurementWindowMs,
    WindowThroughputTokS,
    GoodputRequests,
    GoodputRps,
    /// An object: output tokens by where their count came from.
    OutputTokenSources,
    PrefixCacheHitAvg,
    PrefixCacheHitSamples,
    RequestCanarySamples,
    RequestCanaryPassed,
    ControlledOutputSamples,
    ControlledOutputExactAdherence,
    ControlledOutputExactAdherenceRate,
    ControlledOutputUnobservable,
    ControlledOutputTruncated,
    PromptSizingErrorPctMean,
    PromptSizingErrorPctMax,
    PromptSizingErrorPctBias,
    PromptSizingSamples,
    /// A boolean: the wall-clock throughput compares across runs.
    ThroughputPerformanceEligible,
    /// APIs that do not stream (embeddings, rerank): eligible prompt tokens over the wall clock.
    InputThroughputTokS,
}

impl Total {
    /// Every key, in the order the artifact's `metrics` block is built.
    pub const ALL: [Total; 28] = [
        Total::OutputTokens,
        Total::PromptTokens,
        Total::PromptTokenSamples,
        Total::ContentChunks,
        Total::ReasoningChunks,
        Total::ContentChunksS,
        Total::ThroughputTokS,
        Total::RequestThroughputRps,
        Total::MeasurementWindowMs,
        Total::WindowThroughputTokS,
        Total::GoodputRequests,
        Total::GoodputRps,
        Total::OutputTokenSources,
        Total::PrefixCacheHitAvg,
        Total::PrefixCacheHitSamples,
        Total::RequestCanarySamples,
        Total::RequestCanaryPassed,
        Total::ControlledOutputSamples,
        Total::ControlledOutputExactAdherence,
        Total::ControlledOutputExactAdherenceRate,
        Total::ControlledOutputUnobservable,
        Total::ControlledOutputTruncated,
        Total::PromptSizingErrorPctMean,
        Total::PromptSizingErrorPctMax,
        Total::PromptSizingErrorPctBias,
        Total::PromptSizingSamples,
        Total::ThroughputPerformanceEligible,
        Total::InputThroughputTokS,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Total::OutputTokens => "output_tokens",
            Total::PromptTokens => "prompt_tokens",
            Total::PromptTokenSamples => "prompt_token_samples",
            Total::ContentChunks => "content_chunks",
            Total::ReasoningChunks => "reasoning_chunks",
            Total::ContentChunksS => "content_chunks_s",
            Total::ThroughputTokS => "throughput_tok_s",
            Total::RequestThroughputRps => "request_throughput_rps",
            Total::MeasurementWindowMs => "measurement_window_ms",
            Total::WindowThroughputTokS => "window_throughput_tok_s",
            Total::GoodputRequests => "goodput_requests",
            Total::GoodputRps => "goodput_rps",
            Total::OutputTokenSources => "output_token_sources",
            Total::PrefixCacheHitAvg => "prefix_cache_hit_avg",
            Total::PrefixCacheHitSamples => "prefix_cache_hit_samples",
            Total::RequestCanarySamples => "request_canary_samples",
            Total::RequestCanaryPassed => "request_canary_passed",
            Total::ControlledOutputSamples => "controlled_output_samples",
            Total::ControlledOutputExactAdherence => "controlled_output_exact_adherence",
            Total::ControlledOutputExactAdherenceRate => "controlled_output_exact_adherence_rate",
            Total::ControlledOutputUnobservable => "controlled_output_unobservable",
            Total::ControlledOutputTruncated => "controlled_output_truncated",
            Total::PromptSizingErrorPctMean => "prompt_sizing_error_pct_mean",
            Total::PromptSizingErrorPctMax => "prompt_sizing_error_pct_max",
            Total::PromptSizingErrorPctBias => "prompt_sizing_error_pct_bias",
            Total::PromptSizingSamples => "prompt_sizing_samples",
            Total::ThroughputPerformanceEligible => "throughput_performance_eligible",
            Total::InputThroughputTokS => "input_throughput_tok_s",
        }
    }

    /// Which way a rate gets worse (throughputs: when they fall); `None` for counts and the
    /// rest, which no direction judges.
    pub fn worse(self) -> Option<Worse> {
        match self {
            Total::ThroughputTokS
            | Total::RequestThroughputRps
            | Total::WindowThroughputTokS
            | Total::GoodputRps
            | Total::InputThroughputTokS => Some(Worse::WhenLower),
            _ => None,
        }
    }
}

/// What an `[slo]` key names: a statistic of a distribution under its `metrics` key
/// (`ttft_p99_ms`, `decode_tok_s_p50`), or `error_rate` (server-fault failures over attempted
/// requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    Distribution(Metric, Stat),
    ErrorRate,
}

impl Objective {
    /// The distributions an objective may name: the ones each request has its own value of, so
    /// goodput can check every request against the same threshold.
    pub const METRICS: [Metric; 9] = [
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

    /// The statistics an objective may name.
    pub const STATS: [Stat; 7] = [Stat::Mean, Stat::P50, Stat::P75, Stat::P90, Stat::P95, Stat::P99, Stat::Max];

    /// The objective an `[slo]` key names, if it names one.
    pub fn parse(key: &str) -> Option<Objective> {
        if key == "error_rate" {
            return Some(Objective::ErrorRate);
        }
        Objective::METRICS.iter().find_map(|&m| {
            Objective::STATS
                .iter()
                .find_map(|&stat| (metric_key(m, stat) == key).then_some(Objective::Distribution(m, stat)))
        })
    }

    /// Its `[slo]` key, the `metrics` key it reads.
    pub fn key(self) -> String {
        match self {
            Objective::Distribution(m, stat) => metric_key(m, stat),
            Objective::ErrorRate => "error_rate".to_string(),
        }
    }

    /// Which way it gets worse: a latency or the error rate when it grows, a rate when it falls.
    pub fn worse(self) -> Worse {
        match self {
            // Every metric an objective may name has a direction (a test checks).
            Objective::Distribution(m, _) => m.worse().unwrap_or(Worse::WhenHigher),
            Objective::ErrorRate => Worse::WhenHigher,
        }
    }

    /// The per-request record field compared with the threshold for goodput (`ttft_ms`), if any.
    pub fn request_field(self) -> Option<String> {
        match self {
            Objective::Distribution(m, _) => Some(format!("{}{}", m.stem(), if m.ms_suffix() { "_ms" } else { "" })),
            Objective::ErrorRate => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_have_stable_names() {
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
        assert_eq!(serde_json::to_string(&ErrorKind::StreamBroken).unwrap(), "\"stream_broken\"");
        for kind in ErrorKind::WITHOUT_STATUS.into_iter().chain([ErrorKind::Http(429)]) {
            assert_eq!(kind.to_string().parse::<ErrorKind>(), Ok(kind));
        }
        assert!("http_x".parse::<ErrorKind>().is_err() && "nope".parse::<ErrorKind>().is_err());
        assert!("http".parse::<ErrorKind>().is_err());
    }

    /// The alternatives of a schema pattern such as `^(a|b|c)$` or `_(a|b)(_ms)?$`.
    fn alternatives(pattern: &str) -> Vec<&str> {
        let open = pattern.find('(').unwrap() + 1;
        let close = open + pattern[open..].find(')').unwrap();
        pattern[open..close].split('|').collect()
    }

    #[test]
    fn the_committed_schema_spells_every_word_as_here() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../contract/anvil-serving.benchmark.v1.schema.json")).unwrap();
        let kinds = schema.pointer("/$defs/error_kind/pattern").and_then(|v| v.as_str());
        let kinds = alternatives(kinds.expect("the schema's error_kind pattern"));
        let ours: Vec<String> =
            ErrorKind::WITHOUT_STATUS.iter().map(|k| k.to_string()).chain(["http_[0-9]{3}".into()]).collect();
        assert_eq!(kinds, ours);

        let metrics = &schema["$defs"]["metrics"];
        let patterns = metrics["patternProperties"].as_object().unwrap();
        let stats = patterns.keys().find(|k| k.contains("mean_ci95_low")).unwrap();
        let named: Vec<&str> = Stat::ALL.iter().filter(|&&s| s != Stat::Samples).map(|s| s.name()).collect();
        assert_eq!(alternatives(stats), named);
        assert!(patterns.contains_key("_samples$"));

        let required: Vec<&str> = metrics["required"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        let properties = metrics["properties"].as_object().unwrap();
        for m in Metric::ALL {
            assert_eq!(Metric::ALL[m.index()], m);
            // The families after `queue_wait` came after the list of required keys; their keys
            // follow the same patterns.
            if m <= Metric::QueueWait {
                for stat in Stat::ALL {
                    assert!(required.contains(&metric_key(m, stat).as_str()), "{m:?} {stat:?}");
                }
            }
        }
        for t in Total::ALL {
            assert!(properties.contains_key(t.key()), "{t:?}");
        }
    }

    #[test]
    fn keys_read_as_the_contract_spells_them() {
        assert_eq!(metric_key(Metric::Ttft, Stat::P99), "ttft_p99_ms");
        assert_eq!(metric_key(Metric::DecodeTokS, Stat::P50), "decode_tok_s_p50");
        assert_eq!(metric_key(Metric::E2e, Stat::Samples), "e2e_samples");
        assert_eq!(metric_key(Metric::MeanInterTokenLatency, Stat::Mean), "mean_inter_token_latency_ms_mean");
        assert_eq!(Stat::PERCENTILES.map(|s| s.percentile()), [25, 50, 75, 90, 95, 99].map(Some));
    }

    #[test]
    fn nearest_rank_matches_the_definition() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 99.0);
        assert_eq!(nearest_rank(&v, 50), 50.0);
        let six = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        // ⌈0.25·6⌉ = 2, ⌈0.5·6⌉ = 3, ⌈0.75·6⌉ = 5, ⌈0.9·6⌉ = 6.
        assert_eq!([25, 50, 75, 90, 99].map(|p| nearest_rank(&six, p)), [2.0, 3.0, 5.0, 6.0, 6.0]);
        assert_eq!(nearest_rank(&[7.0], 1), 7.0);
        assert_eq!(nearest_rank(&[3u32, 5, 8], 99), 8);
        assert_eq!(
            (nearest_rank_position(0, 10), nearest_rank_position(100, 10), nearest_rank_position(101, 10)),
            (1, 10, 10)
        );
    }

    #[test]
    fn objectives_read_back_from_their_keys() {
        assert_eq!(Objective::parse("error_rate"), Some(Objective::ErrorRate));
        assert_eq!(Objective::parse("ttft_p99_ms"), Some(Objective::Distribution(Metric::Ttft, Stat::P99)));
        assert_eq!(Objective::parse("ttft_p99"), None);
        assert_eq!(Objective::parse("ttft_p25_ms"), None);
        assert_eq!(Objective::parse("queue_wait_p99_ms"), None);
        for m in Objective::METRICS {
            assert!(m.worse().is_some(), "{m:?}");
            for stat in Objective::STATS {
                let o = Objective::Distribution(m, stat);
                assert_eq!(Objective::parse(&o.key()), Some(o));
            }
        }
        let rate = Objective::Distribution(Metric::DecodeTokS, Stat::P50);
        assert_eq!((rate.worse(), rate.request_field().as_deref()), (Worse::WhenLower, Some("decode_tok_s")));
        let ttft = Objective::Distribution(Metric::Ttft, Stat::P99);
        assert_eq!((ttft.worse(), ttft.request_field().as_deref()), (Worse::WhenHigher, Some("ttft_ms")));
        assert_eq!(Objective::ErrorRate.request_field(), None);
    }
}
