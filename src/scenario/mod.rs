//! The validated scenario: the one typed description of a run that every later stage reads.
//!
//! `Scenario::load` reads a TOML file, applies command-line overrides, and validates once
//! (`validate`). Errors name the file, the key path, what is wrong and how to fix it; the
//! program exits with code 2 and sends nothing. No other module sees TOML shapes.

mod api_rules;
pub mod bounds;
mod describe;
mod load_rules;
mod metrics_rules;
mod raw;
mod session_rules;
mod trace_rules;
pub mod url_rules;
mod validate;
mod wording;
mod workload_rules;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use describe::describe;
pub use raw::RawScenario;
pub use session_rules::RawSessions;
pub use trace_rules::RawTrace;
pub use validate::ScenarioError;
pub use workload_rules::MIN_CONTEXT_TOKENS;

/// Values given on the command line (or in the environment) that replace the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub base_url: Option<String>,
    /// Where `base_url` came from, for error messages (`--base-url` or `ANVIL_BASE_URL`).
    pub base_url_origin: Option<&'static str>,
    pub model: Option<String>,
    pub concurrency: Option<Vec<u32>>,
    /// `--rate`: open-loop rates.
    pub rate: Option<Vec<f64>>,
    pub requests: Option<u64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    pub simulator: Option<String>,
    /// `--tokenizer`: `estimate`, `calibrate` or a path.
    pub tokenizer: Option<String>,
}

/// A fully validated scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// The file it came from (for messages; not written into artifacts).
    #[serde(skip)]
    pub path: PathBuf,
    pub target: Target,
    pub run: RunLimits,
    pub load: Load,
    pub workload: Workload,
    pub sampling: Sampling,
    pub serve: ServeFlags,
    pub output: OutputControl,
    pub slo: Slo,
    pub client: ClientSettings,
    /// What the command-line options replaced beyond their own key (e.g. `--rate` on a
    /// closed-loop file drops `load.concurrency`), for `validate` and the console.
    #[serde(skip)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub endpoint: Endpoint,
    pub model: String,
    pub api: Api,
    /// The name of the variable the key came from; the key itself is in `api_key`.
    pub api_key_env: Option<String>,
    #[serde(skip)]
    pub api_key: Option<ApiKey>,
    pub engine: Option<String>,
    pub gpu: Option<String>,
    pub redact_base_url: bool,
    pub dialect: Dialect,
    /// Extra fields merged into every request body.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Messages API: the `anthropic-version` header, when the scenario sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<String>,
    /// Scrape the server's own metrics beside the run. Absent from the serialized scenario when
    /// off, so configurations written before the key existed keep their fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ServerMetricsSettings>,
    /// Ask for usage on every chunk (`stream_options.continuous_usage_stats`). Absent when off,
    /// so earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continuous_usage_stats: bool,
}

/// Where and how often the server's Prometheus metrics are scraped.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerMetricsSettings {
    pub endpoint: MetricsEndpoint,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

/// The metrics URL: given, or `/metrics` beside the base URL (known only at run time for the
/// embedded simulator).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MetricsEndpoint {
    /// Written without any `user:password@` part, which is kept for the requests only.
    Url {
        #[serde(serialize_with = "serialize_url_without_credentials")]
        url: String,
    },
    BesideBaseUrl,
}

fn serialize_url_without_credentials<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::server_metrics::display_url(url))
}

/// Request spellings for fields outside the OpenAI API.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// vLLM and SGLang (and most OpenAI-compatible engines): `ignore_eos`, `min_tokens`.
    Generic,
    Vllm,
    Sglang,
    /// llama.cpp: `ignore_eos`; `min_tokens` does not exist.
    Llamacpp,
    /// Hosted OpenAI-style APIs: no fields beyond the OpenAI API.
    Openai,
}

/// Where requests go.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Endpoint {
    /// A real server. `base_url` ends in the API root, e.g. `http://host:8000/v1`.
    Remote { base_url: String },
    /// The embedded simulator, started on 127.0.0.1:0 for the run.
    Simulator {
        profile: String,
        /// The profile's time per output token replaced (`target.simulator_time_per_output_token_ms`).
        #[serde(skip_serializing_if = "Option::is_none")]
        time_per_output_token_ms: Option<f64>,
    },
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    #[default]
    Chat,
    Completions,
    /// The OpenAI Responses API (`/responses`), streamed.
    Responses,
    /// Anthropic's Messages API (`/messages`), streamed.
    Messages,
    /// `/embeddings`, one JSON answer per request.
    Embeddings,
    /// `/rerank` (query and documents), one JSON answer per request.
    Rerank,
}

impl Api {
    /// Path below the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/chat/completions",
            Api::Completions => "/completions",
            Api::Responses => "/responses",
            Api::Messages => "/messages",
            Api::Embeddings => "/embeddings",
            Api::Rerank => "/rerank",
        }
    }

    /// The name written in scenarios and artifacts.
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Embeddings => "embeddings",
            Api::Rerank => "rerank",
        }
    }

    /// Whether prompt sizing can calibrate against it: the probes speak chat and completions.
    pub fn can_calibrate(self) -> bool {
        matches!(self, Api::Chat | Api::Completions)
    }

    /// Whether the answer streams generated text (every API but embeddings and rerank).
    pub fn streams_text(self) -> bool {
        !matches!(self, Api::Embeddings | Api::Rerank)
    }

    /// Whether calibration probes (short chat or completions requests) speak this API.
    pub fn has_probes(self) -> bool {
        matches!(self, Api::Chat | Api::Completions)
    }
}

/// How a completions prompt is sent: as text, or as the token ids of a local tokenizer.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PromptEncoding {
    #[default]
    Text,
    /// `prompt` as an array of integers of exactly the planned length.
    TokenIds,
}

impl PromptEncoding {
    pub fn is_text(&self) -> bool {
        *self == PromptEncoding::Text
    }
}

/// An API key. Its `Debug` never shows the value, so it cannot leak through logs.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        ApiKey(key)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([hidden])")
    }
}

/// When a load level ends.
#[derive(Debug, Clone, Serialize)]
pub struct RunLimits {
    /// Stop after this many requests per level.
    pub requests: Option<u64>,
    /// Stop issuing after this long per level.
    #[serde(with = "humantime_serde_opt")]
    pub duration: Option<Duration>,
    pub seed: u64,
    pub protocol: Option<String>,
    pub tier: Option<String>,
    pub clock_domain_id: Option<String>,
    pub warmup: Option<Phase>,
    pub cooldown: Option<Phase>,
    /// How long in-flight requests may finish after `duration` (or Ctrl-C) before being cut.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Window snapshots every this long; `None` turns them off.
    #[serde(with = "humantime_serde_opt")]
    pub snapshot_interval: Option<Duration>,
    /// Keep the records file.
    pub keep_records: bool,
}

/// How requests are paced, level by level.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub pacing: Pacing,
    /// Capacity search instead of a fixed list of levels.
    pub search: Option<Search>,
    /// Dispatch lag p99 above this marks a run invalid.
    #[serde(with = "humantime_serde")]
    pub max_dispatch_lag: Duration,
    /// Client lateness p99 above this marks a level invalid.
    #[serde(with = "humantime_serde")]
    pub max_client_lateness: Duration,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Pacing {
    /// Fixed concurrency: each worker sends its next request when its last one ends.
    Closed {
        levels: Vec<u32>,
        /// A ceiling on request starts per second across workers.
        max_rate: Option<f64>,
    },
    /// Arrivals on a schedule, independent of the server.
    Open {
        rates: Vec<f64>,
        arrival: Arrival,
        #[serde(with = "humantime_serde_opt")]
        ramp: Option<Duration>,
        max_in_flight: Option<u32>,
        overload: Overload,
    },
}

impl Pacing {
    pub fn mode(&self) -> &'static str {
        match self {
            Pacing::Closed { .. } => "closed",
            Pacing::Open { .. } => "open",
        }
    }

    /// The configured levels: concurrencies or rates.
    pub fn levels(&self) -> Vec<crate::record::Level> {
        use crate::record::Level;
        match self {
            Pacing::Closed { levels, .. } => levels.iter().map(|&c| Level::Concurrency(c)).collect(),
            Pacing::Open { rates, .. } => rates.iter().map(|&r| Level::Rate(r)).collect(),
        }
    }
}

/// The arrival process of an open loop.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// Evenly spaced.
    Constant,
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps of shape `burstiness` (coefficient of variation 1/√burstiness).
    Gamma { burstiness: f64 },
    /// A trace's own times, multiplied by `time_scale` (`[workload.trace]`).
    Trace { time_scale: f64 },
}

impl Arrival {
    pub fn name(&self) -> &'static str {
        match self {
            Arrival::Constant => "constant",
            Arrival::Poisson => "poisson",
            Arrival::Gamma { .. } => "gamma",
            Arrival::Trace { .. } => "trace",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overload {
    /// Arrivals beyond `max_in_flight` wait for a slot; the wait is measured.
    Queue,
    /// Arrivals beyond `max_in_flight` are not sent; they are counted and listed.
    Drop,
}

/// Find the highest level meeting every SLO.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Search {
    pub by: SearchBy,
    pub min: f64,
    pub max: f64,
    pub max_steps: u32,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBy {
    Concurrency,
    Rate,
}

/// Service-level objectives: every criterion must hold for a level to pass.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Slo {
    pub criteria: Vec<SloCriterion>,
}

/// One objective, e.g. `ttft_p99_ms ≤ 2000`, its key read once at validation. Written as
/// `{key, threshold, bound, request_field}` (see `load_rules::WrittenCriterion`).
#[derive(Debug, Clone, Serialize, PartialEq, Deserialize)]
#[serde(into = "load_rules::WrittenCriterion", try_from = "load_rules::WrittenCriterion")]
pub struct SloCriterion {
    /// What it reads: a statistic under its `metrics` key (`ttft_p99_ms`), or `error_rate`.
    pub objective: crate::contract::Objective,
    pub threshold: f64,
    /// `at_most` for latencies and error rate, `at_least` for rates (`decode_tok_s_p50`).
    pub bound: Bound,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtMost,
    AtLeast,
}

impl Bound {
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Bound::AtMost => value <= threshold,
            Bound::AtLeast => value >= threshold,
        }
    }
}

/// Requests at the start or end of a level kept out of the distributions.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Requests(u64),
    #[serde(with = "humantime_serde")]
    Time(Duration),
}

#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub prompts: PromptSource,
    pub max_context_tokens: u32,
    pub max_tokens: u32,
    pub sizing: SizingMode,
    pub prompt_cache: PromptCache,
    pub canaries: bool,
    /// Embeddings: inputs per request; rerank: documents per request (absent for other APIs,
    /// so earlier configurations keep their fingerprint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    #[serde(skip_serializing_if = "PromptEncoding::is_text")]
    pub prompt_encoding: PromptEncoding,
}

/// Where prompt text comes from.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PromptSource {
    /// Seeded filler text sized to a planned context drawn per request.
    Synthetic { context: ContextDistribution },
    /// Prompts read from a file, used as they are.
    Dataset(Arc<Dataset>),
    /// A production trace replayed row by row: sizes, shared blocks, output lengths, times.
    Trace(Arc<crate::trace::Trace>),
    /// Multi-turn conversations.
    Sessions(Arc<crate::session::SessionSpec>),
}

/// Prompts loaded from a JSON Lines or ShareGPT file.
#[derive(Debug, Clone, Serialize)]
pub struct Dataset {
    pub path: PathBuf,
    pub format: DatasetFormat,
    /// Number of prompts; the prompts themselves are not written into artifacts.
    pub count: usize,
    #[serde(skip)]
    pub prompts: Vec<DatasetPrompt>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DatasetFormat {
    Jsonl,
    Sharegpt,
}

/// One prompt from a dataset.
#[derive(Debug, Clone, PartialEq)]
pub enum DatasetPrompt {
    Text(String),
    /// A chat conversation, sent as it is; the canary instruction joins the last user turn.
    Messages(Vec<ChatMessage>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Planned context sizes. Draws are clamped to `[min, max]`: at least the smallest prompt the
/// tool can build, and at most the context window minus the output reserve.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ContextDistribution {
    /// `(tokens, weight)`, sorted by tokens, weights positive; one entry for a single size.
    Weighted { choices: Vec<(u32, u32)> },
    /// Uniform over the integers `lo..=hi`.
    Uniform { lo: u32, hi: u32 },
    /// Normal, rounded to an integer and clamped to `[min, max]`.
    Normal { mean: f64, sd: f64, min: u32, max: u32 },
}

impl ContextDistribution {
    pub fn single(tokens: u32) -> Self {
        ContextDistribution::Weighted { choices: vec![(tokens, 1)] }
    }
    /// As the scenario wrote it: `65536`, `{"4096": 3, "65536": 1}`, `{"uniform": [lo, hi]}`,
    /// `{"normal": [mean, sd]}` (the artifact's `context_tokens`).
    pub fn as_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            ContextDistribution::Weighted { choices } if choices.len() == 1 => json!(choices[0].0),
            ContextDistribution::Weighted { choices } => {
                json!(choices.iter().map(|(t, w)| (t.to_string(), *w)).collect::<std::collections::BTreeMap<_, _>>())
            }
            ContextDistribution::Uniform { lo, hi } => json!({ "uniform": [lo, hi] }),
            ContextDistribution::Normal { mean, sd, .. } => json!({ "normal": [mean, sd] }),
        }
    }

    /// For people: `65536`, `4096 ×3, 65536 ×1`, `uniform 1024–8192`, `normal 4096 ± 512`.
    pub fn describe(&self) -> String {
        match self {
            ContextDistribution::Weighted { choices } if choices.len() == 1 => choices[0].0.to_string(),
            ContextDistribution::Weighted { choices } => {
                choices.iter().map(|(t, w)| format!("{t} ×{w}")).collect::<Vec<_>>().join(", ")
            }
            ContextDistribution::Uniform { lo, hi } => format!("uniform {lo}–{hi}"),
            ContextDistribution::Normal { mean, sd, min, max } => {
                format!("normal {mean} ± {sd}, clamped to {min}–{max}")
            }
        }
    }

    /// The largest context a draw can give.
    pub fn largest(&self) -> u32 {
        match self {
            ContextDistribution::Weighted { choices } => choices.iter().map(|c| c.0).max().unwrap_or(0),
            ContextDistribution::Uniform { hi, .. } => *hi,
            ContextDistribution::Normal { max, .. } => *max,
        }
    }
}

/// How prompt text is sized to the server's token count.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SizingMode {
    /// The built-in estimate; no probe.
    Estimate,
    /// Probe the server with short requests and fit the estimate to its counts.
    Calibrate,
    /// Exact counts from a local Hugging Face `tokenizer.json`.
    Tokenizer {
        path: PathBuf,
        #[serde(skip)]
        tokenizer: Arc<tokenizers::Tokenizer>,
    },
}

impl PromptSource {
    /// The artifact's `context_tokens`: the planned-context spec, null for dataset prompts.
    pub fn context_json(&self) -> serde_json::Value {
        match self {
            PromptSource::Synthetic { context } => context.as_json(),
            PromptSource::Dataset(_) | PromptSource::Trace(_) | PromptSource::Sessions(_) => serde_json::Value::Null,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PromptSource::Synthetic { context } => format!("{} tokens", context.describe()),
            PromptSource::Dataset(d) => format!("{} prompts from {} ({:?})", d.count, d.path.display(), d.format),
            PromptSource::Trace(t) => {
                format!("{} rows of the {} trace {}", t.rows.len(), t.format.name(), t.file.display())
            }
            PromptSource::Sessions(s) => match &s.dataset {
                Some(d) => {
                    format!("conversations of {} ({} conversations, {} turns)", d.path.display(), d.count, d.turns)
                }
                None => format!(
                    "conversations of {} turns, first prompt {} tokens, {} new user tokens a turn",
                    s.turns.describe(""),
                    s.first_tokens.describe(""),
                    s.user_tokens.describe("")
                ),
            },
        }
    }
}

impl SizingMode {
    pub fn name(&self) -> &'static str {
        match self {
            SizingMode::Estimate => "estimate",
            SizingMode::Calibrate => "calibrate",
            SizingMode::Tokenizer { .. } => "tokenizer",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum PromptCache {
    /// Every prompt starts with a prefix unique to its request.
    Unique { reproducible: bool },
    /// Every prompt starts with the same `tokens` of text, then a unique tail.
    SharedPrefix { tokens: u32, burst: bool, reproducible: bool },
}

impl PromptCache {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptCache::Unique { .. } => "unique",
            PromptCache::SharedPrefix { .. } => "shared-prefix",
        }
    }
    pub fn reproducible(self) -> bool {
        match self {
            PromptCache::Unique { reproducible } | PromptCache::SharedPrefix { reproducible, .. } => reproducible,
        }
    }
    pub fn shared_prefix_tokens(self) -> u32 {
        match self {
            PromptCache::SharedPrefix { tokens, .. } => tokens,
            PromptCache::Unique { .. } => 0,
        }
    }
    pub fn burst(self) -> bool {
        matches!(self, PromptCache::SharedPrefix { burst: true, .. })
    }
}

/// Output-length control and its check.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OutputControl {
    pub ignore_eos: bool,
    pub min_tokens: Option<u32>,
    pub response_words: Option<u32>,
    pub policy: ControlledOutputPolicy,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlledOutputPolicy {
    /// Record adherence; keep every response in the distributions.
    Observe,
    /// Exclude responses that are not exactly `response_words` long or were truncated.
    Strict,
}

impl ControlledOutputPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ControlledOutputPolicy::Observe => "observe",
            ControlledOutputPolicy::Strict => "strict",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingMode {
    Default,
    Enabled,
    Disabled,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServeFlags {
    pub thinking_mode: ThinkingMode,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub no_thinking: bool,
}

impl ServeFlags {
    /// The `enable_thinking` value to send, if any (`no_thinking` implies disabled).
    pub fn enable_thinking(&self) -> Option<bool> {
        if self.no_thinking {
            return Some(false);
        }
        match self.thinking_mode {
            ThinkingMode::Default => None,
            ThinkingMode::Enabled => Some(true),
            ThinkingMode::Disabled => Some(false),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientSettings {
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// Until the first output (see `worker` for the exact clocks).
    #[serde(with = "humantime_serde")]
    pub first_byte: Duration,
    /// After the first output, the longest time without progress.
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
    /// The whole request, from sending to `[DONE]`: what `client.request_timeout` says, or
    /// `REQUEST_TIMEOUT_PER_TOKEN` per `max_tokens` after `first_byte`.
    #[serde(skip)]
    pub request: Duration,
    /// `client.request_timeout` as written; absent when derived, so the fingerprint of a
    /// scenario that does not set it is what it was before the setting existed.
    #[serde(rename = "request_timeout", with = "humantime_serde_opt", skip_serializing_if = "Option::is_none")]
    pub request_given: Option<Duration>,
    pub retry: RetryPolicy,
    /// Speak HTTP/2 (prior knowledge) instead of HTTP/1.1 with keep-alive.
    pub http2: bool,
}

/// The default `client.request_timeout` allows this much per `max_tokens` after the first
/// output's deadline: generous (a server streaming a token a second still finishes) yet finite,
/// so a server that ignores `max_tokens` and streams forever cannot hold a request forever.
pub const REQUEST_TIMEOUT_PER_TOKEN: Duration = Duration::from_secs(1);

impl ClientSettings {
    /// The default overall deadline: `first_byte + max_tokens × REQUEST_TIMEOUT_PER_TOKEN`.
    pub fn default_request_timeout(first_byte: Duration, max_tokens: u32) -> Duration {
        first_byte.saturating_add(REQUEST_TIMEOUT_PER_TOKEN.saturating_mul(max_tokens.max(1)))
    }
}

/// Which failures are retried, how often, and how long to wait. Off by default: a retried
/// request measures the retry, not the server.
#[derive(Debug, Clone, Serialize)]
pub struct RetryPolicy {
    /// Attempts beyond the first (0: never retry).
    pub max_retries: u32,
    /// Failure kinds that are retried; only failures before any output qualify.
    pub on: Vec<crate::contract::ErrorKind>,
    /// Wait before the first retry, doubled for each further one; a `Retry-After` header wins.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
}

impl Scenario {
    /// Read, override and validate a scenario file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        let text = crate::sys::read_input_to_string(path).map_err(|e| ScenarioError::unreadable(path, &e))?;
        Self::from_toml(path, &text, overrides)
    }

    /// Validate scenario text; `path` is only used in messages.
    pub fn from_toml(path: &Path, text: &str, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        validate::validate(path, text, overrides)
    }
}

/// Durations are written the way they are read (`"1m 30s"`), for the resolved plan.
mod humantime_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

mod humantime_serde_opt {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }
}
