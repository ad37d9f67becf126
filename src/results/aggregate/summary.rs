//! `LevelSummary`: everything a finished load level adds up to, typed. `summarise` builds it (the
//! only place numbers are computed); the artifact, the console, the sweep table and the capacity
//! search read its fields. Nothing downstream reads a number back by name.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::load::LoadRecord;
use super::slo::SloReport;
use super::snapshots::Drift;
use super::stats::Summary;
use super::steady::SteadyState;
use super::warnings::Warning;
use crate::contract::{Metric, Stat, Total};
use crate::request::record::{Exclusions, LevelPacing, ShardsBlock, Stamp, TokenSource};
use crate::request::server_metrics::LevelServerMetrics;

/// Every distribution of a level, indexed by `Metric`.
#[derive(Debug, Clone, Default)]
pub struct Distributions([Option<Summary>; Metric::ALL.len()]);

impl Distributions {
    pub fn get(&self, m: Metric) -> Option<&Summary> {
        self.0[m.index()].as_ref()
    }
    pub fn set(&mut self, m: Metric, s: Option<Summary>) {
        self.0[m.index()] = s;
    }
    /// One statistic, when the distribution has samples.
    pub fn stat(&self, m: Metric, stat: Stat) -> Option<f64> {
        self.get(m).map(|s| s.stat(stat))
    }
    /// Samples in a distribution (0 when empty).
    pub fn samples(&self, m: Metric) -> usize {
        self.get(m).map_or(0, |s| s.samples)
    }
}

/// Sums over the eligible requests.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub output_tokens: u64,
    /// Sum of server-reported prompt tokens, over the requests that reported them.
    pub prompt_tokens: u64,
    pub prompt_token_samples: usize,
    pub content_chunks: u64,
    pub reasoning_chunks: u64,
}

/// Rates of the level.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    /// Eligible output tokens over the level's wall clock.
    pub throughput_tok_s: Option<f64>,
    /// Eligible requests over the wall clock.
    pub request_throughput_rps: Option<f64>,
    /// From the first eligible request's start to the last one's end.
    pub measurement_window_ms: Option<f64>,
    pub window_throughput_tok_s: Option<f64>,
    /// With objectives: eligible requests meeting every one, and their rate over the window.
    pub goodput: Option<Goodput>,
    /// The wall-clock throughput compares across runs (nothing excluded, not interrupted).
    pub throughput_performance_eligible: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct Goodput {
    pub requests: usize,
    pub rps: Option<f64>,
}

/// Mean `cached_tokens / prompt_tokens` over the eligible requests that report both.
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    pub hit_avg: Option<f64>,
    pub samples: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Canaries {
    /// Completed requests that carried a canary.
    pub samples: usize,
    pub passed: usize,
    /// Failed canaries whose response held another request's marker.
    pub foreign: usize,
    /// Failed canaries whose response held a cut-off or garbled marker, and no other request's.
    pub malformed: usize,
    /// Failed canaries whose response had no visible content to check (all reasoning).
    pub no_content: usize,
}

impl Canaries {
    pub fn failed(&self) -> usize {
        self.samples - self.passed
    }
}

/// The `response_words` check over every completed response.
#[derive(Debug, Clone, Default)]
pub struct ControlledOutputSummary {
    pub samples: usize,
    pub exact: usize,
    /// `exact / observable`.
    pub exact_rate: Option<f64>,
    pub unobservable: usize,
    pub truncated: usize,
}

/// How far the server's prompt counts were from the targets, in percent.
#[derive(Debug, Clone, Default)]
pub struct SizingErrors {
    /// Mean absolute error.
    pub mean_pct: Option<f64>,
    /// Largest absolute error.
    pub max_pct: Option<f64>,
    /// Signed mean.
    pub bias_pct: Option<f64>,
    pub samples: usize,
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

impl Population {
    /// Server-fault failures over attempted requests (`error_rate` of `[slo]`).
    pub fn server_fault_rate(&self) -> Option<f64> {
        (self.attempted_requests > 0).then(|| self.failed_server_faults as f64 / self.attempted_requests as f64)
    }
}

/// One finished level, every number computed.
#[derive(Debug, Clone)]
pub struct LevelSummary {
    pub level_id: String,
    pub pacing: LevelPacing,
    pub started: Stamp,
    pub finished: Stamp,
    pub interrupted: bool,
    /// From the level start to the end of its last request.
    pub wall_clock_ms: f64,
    /// Attempted requests: completed plus failed.
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    /// Requests that got any HTTP response.
    pub responses_received: u64,
    /// Planned contexts drawn, over attempted requests.
    pub context_distribution: BTreeMap<String, u64>,
    pub distributions: Distributions,
    pub totals: Totals,
    pub rates: Rates,
    pub output_token_sources: BTreeMap<TokenSource, u64>,
    pub prefix_cache: PrefixCache,
    pub canaries: Canaries,
    pub controlled_output: ControlledOutputSummary,
    pub sizing: SizingErrors,
    pub population: Population,
    pub load: LoadRecord,
    pub slo: Option<SloReport>,
    /// Failures by `error_kind`.
    pub error_counts: BTreeMap<String, u64>,
    /// Completed requests left out of the distributions, by `exclusion_reason`.
    pub excluded_by_reason: BTreeMap<&'static str, u64>,
    pub warnings: Vec<Warning>,
    pub drift: Option<Drift>,
    pub snapshot_windows: usize,
    /// The part of the level where the planned load was on (ramp-up and drain left out).
    pub steady_state: Option<SteadyState>,
    /// Nothing left out but by design, no failure, not interrupted.
    pub performance_eligible: bool,
    /// The level's final phase and exclusion rules (the records are brought in line with them).
    pub rules: Exclusions,
    /// The embedded simulator's counters for this level, when it was the target.
    pub simulator: Option<Value>,
    /// The server's own metrics over the level, when they were scraped.
    pub server_metrics: Option<LevelServerMetrics>,
    /// Conversations: per-turn latency and cache effectiveness, sessions, backends.
    pub conversations: Option<SessionSummary>,
    /// Several replicas: one row per replica (see `replicas`).
    pub replicas: Option<Vec<super::replicas::ReplicaSummary>>,
    /// Structured output: answers against their schemas, and the level's gate (see `structured`).
    pub structured_output: Option<super::structured::StructuredSummary>,
    /// Several models: one row per model of the mix (see `models`).
    pub models: Option<Vec<super::models::ModelSummary>>,
    /// `load.reset_cache`: the reset called before the level, with each replica's answer.
    pub cache_reset: Option<crate::request::cache_reset::CacheResetRecord>,
    /// Runs that offer tools: the level's tool calls (see `tool_calls`).
    pub tool_calls: Option<super::tool_calls::ToolCallSummary>,
    /// `[workload.media]`: what the requests carried, and TTFT by media count (see `media`).
    pub media: Option<super::media::MediaSummary>,
    /// Embeddings and rerank: why the streaming metrics are null, and the input throughput.
    pub unstreamed: Option<Unstreamed>,
    /// A merged level: the shards it was merged from, each with its own validity verdict.
    pub shards: Option<ShardsBlock>,
    /// The rules this process wrote the level's records under, when it wrote them itself (a
    /// live run): while they are still `rules`, the artifact copies the records as written.
    pub records_as_written: Option<Exclusions>,
}

/// An API whose answer arrives whole (embeddings, rerank): nothing streams, no output tokens
/// are generated, so the streaming metrics are null (or trivial) for a stated reason and the
/// throughput that means something is the input side.
#[derive(Debug, Clone)]
pub struct Unstreamed {
    /// Eligible prompt tokens over the level's wall clock.
    pub input_throughput_tok_s: Option<f64>,
    /// Metric family → why it is null, zero or equal to another.
    pub notes: BTreeMap<&'static str, String>,
}

impl Unstreamed {
    pub fn new(api: &str, prompt_tokens: u64, wall_clock_ms: f64) -> Self {
        let wall_s = wall_clock_ms / 1000.0;
        let none = format!("null: the {api} answer arrives whole, with no output tokens to time");
        let whole = format!("the {api} answer arrives whole: time_to_first_output equals e2e, generation is 0");
        let mut notes = BTreeMap::new();
        for metric in [
            Metric::Ttft,
            Metric::Tpot,
            Metric::TpotCorrected,
            Metric::DecodeTokS,
            Metric::MeanInterTokenLatency,
            Metric::MeanTimePerOutputToken,
            Metric::ItlChunk,
            Metric::ItlToken,
            Metric::TokensPerChunk,
            Metric::MaxStall,
        ] {
            notes.insert(metric.stem(), none.clone());
        }
        notes.insert(Metric::TimeToFirstOutput.stem(), whole.clone());
        notes.insert(Metric::Generation.stem(), whole);
        notes.insert(
            Metric::EffectivePrefillTokS.stem(),
            format!("prompt tokens over e2e: the {api} answer is all prefill"),
        );
        notes.insert(
            Total::ThroughputTokS.key(),
            format!("0: {api} generates no output tokens; see {}", Total::InputThroughputTokS.key()),
        );
        Unstreamed { input_throughput_tok_s: (wall_s > 0.0).then(|| prompt_tokens as f64 / wall_s), notes }
    }
}

/// Everything about a level's conversations (see `conversations`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    pub by_turn: Vec<TurnSummary>,
    pub cache: CacheEffectiveness,
    pub totals: SessionTotals,
    /// `None` without `[slo]` objectives.
    pub goodput: Option<SessionGoodput>,
    pub backends: Vec<BackendSummary>,
    /// Sessions whose requests all named one backend, of those with any backend recorded.
    pub sessions_on_one_backend: Option<(u64, u64)>,
    /// Responses holding a marker of another session.
    pub cross_session_contaminated: u64,
    /// Agent sessions (tool results fed back): their figures (see `agent_sessions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::agent_sessions::AgentSummary>,
}

/// One turn index across every conversation of the level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnSummary {
    pub turn: u32,
    /// Completed requests of this turn index (eligible or not), and failed ones.
    pub completed: u64,
    pub failed: u64,
    #[serde(serialize_with = "brief")]
    pub ttft_ms: Option<Summary>,
    #[serde(serialize_with = "brief")]
    pub tpot_ms: Option<Summary>,
    #[serde(serialize_with = "brief")]
    pub e2e_ms: Option<Summary>,
    #[serde(serialize_with = "brief")]
    pub prompt_tokens: Option<Summary>,
    pub cache: CacheEffectiveness,
}

/// The prefix the client expected a cache to hold, against what the server reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheEffectiveness {
    /// Records with both an expectation and a server count.
    pub samples: u64,
    pub expected_cached_tokens: u64,
    pub cached_tokens: u64,
    /// `cached_tokens / expected_cached_tokens`; `None` when nothing was expected.
    pub ratio: Option<f64>,
}

/// Conversations as wholes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionTotals {
    pub sessions: u64,
    /// Sessions none of whose requests failed.
    pub without_failures: u64,
    /// From the first turn's start to the last turn's end, per session.
    #[serde(serialize_with = "brief")]
    pub duration_ms: Option<Summary>,
    /// Requests (turns) per session, completed or failed.
    #[serde(serialize_with = "brief")]
    pub turns: Option<Summary>,
}

/// Sessions whose every turn completed, passed its checks and met every per-request objective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SessionGoodput {
    pub sessions: u64,
    pub good_sessions: u64,
    pub ratio: f64,
}

/// Requests served by one backend (from the configured backend header).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendSummary {
    pub backend: String,
    pub completed: u64,
    pub failed: u64,
    #[serde(serialize_with = "brief")]
    pub ttft_ms: Option<Summary>,
    #[serde(serialize_with = "brief")]
    pub e2e_ms: Option<Summary>,
}

/// A conversation statistic as the artifact's `conversations` block writes it: the sample
/// count, the mean, nearest-rank p50, p90 and p99, and the max.
fn brief<S: Serializer>(summary: &Option<Summary>, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Brief {
        samples: usize,
        mean: f64,
        p50: Option<f64>,
        p90: Option<f64>,
        p99: Option<f64>,
        max: f64,
    }
    let brief = summary.as_ref().map(|s| Brief {
        samples: s.samples,
        mean: s.mean,
        p50: Some(s.stat(Stat::P50)),
        p90: Some(s.stat(Stat::P90)),
        p99: Some(s.stat(Stat::P99)),
        max: s.max,
    });
    brief.serialize(serializer)
}
