//! The validated scenario: the one typed description of a run that every later stage reads.
//!
//! `Scenario::load` reads a TOML file, applies command-line overrides, and validates once
//! (`validate`). Errors name the file, the key path, what is wrong and how to fix it; the
//! program exits with code 2 and sends nothing. No other module sees TOML shapes.
//!
//! The files, from the ground up: this one, `target` and `pacing` hold the typed plan; `raw`
//! the TOML's shapes; `checker` the toolbox every rule reports through; the `*_rules` files
//! one section each; `overrides` the command line's values; `validate` reads the file once,
//! section by section, calling the rules. `key_command` is the key a command prints
//! (`target.api_key_command`); `json_schema` the JSON Schemas a scenario names, compiled once;
//! `structured_rules` the structured output asked of each answer (`[workload.response_format]`).
//! `tools_rules` the tool set of `[workload.tools]` and the check of each call's arguments;
//! `agent_rules` the agent sessions' keys (tool results fed back into conversations).

pub mod agent_rules;
mod api_rules;
mod azure;
pub mod bounds;
mod checker;
mod dataset;
pub mod dataset_media;
mod exporter_rules;
mod headers;
pub mod json_schema;
pub mod key_command;
mod load_rules;
mod media_rules;
mod metrics_rules;
mod model_rules;
mod overrides;
mod pacing;
pub mod push_rules;
mod query;
mod raw;
mod replica_rules;
mod session_rules;
mod socket_rules;
pub mod structured_rules;
mod target;
mod tls_rules;
pub mod tools_rules;
mod trace_rules;
pub mod url_rules;
mod validate;
mod wording;
mod workload_rules;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use bounds::{humantime_serde, humantime_serde_opt};

pub use azure::API_VERSION as AZURE_API_VERSION;
pub use checker::ScenarioError;
pub use media_rules::{AudioSpec, ImageFormat, ImageSpec, MediaDelivery, MediaSpec};
pub use model_rules::{Assignment, CacheReset, ModelMix};
pub use overrides::Overrides;
pub use pacing::{Arrival, LevelPacing, Load, Overload, Pacing, Search, SearchBy};
pub use query::with_query;
pub use raw::RawScenario;
pub use replica_rules::{Balance, MAX_REPLICAS, Replicas};
pub use structured_rules::{FormatKind, ResponseFormat, SchemaChoice, Spelling};
pub use target::{Api, ApiKey, Dialect, Endpoint, MetricsEndpoint, NamedValues, ServerMetricsSettings, Target};
pub use tls_rules::TlsSettings;

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
    /// Every key whose value did not come from the file, with what set it (`--rate`,
    /// `--set load.rate`, `ANVIL_BASE_URL`), for `validate`.
    #[serde(skip)]
    pub provenance: Vec<(String, String)>,
    /// The built-in scenario (no file given).
    #[serde(skip)]
    pub built_in: bool,
}

/// The built-in scenario: what runs when no scenario file is given, kept as a file users can copy.
pub const BUILT_IN: &str = include_str!("../../../scenarios/default.toml");
/// How messages name the built-in scenario.
pub const BUILT_IN_NAME: &str = "built-in scenario";
/// How messages name a scenario read from standard input (`-`).
pub const STDIN_NAME: &str = "standard input";

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
    pub warmup: Option<PhaseLength>,
    pub cooldown: Option<PhaseLength>,
    /// How long in-flight requests may finish after `duration` (or Ctrl-C) before being cut.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Window snapshots every this long; `None` turns them off.
    #[serde(with = "humantime_serde_opt")]
    pub snapshot_interval: Option<Duration>,
    /// Keep the records file.
    pub keep_records: bool,
    /// Where the client's own `/metrics` listens during the run (`run.metrics_listen`). Like
    /// `push`, not what was measured: not serialized, so two runs that differ only in where
    /// their live numbers go keep one configuration fingerprint.
    #[serde(skip)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How long it stays up after the run (`run.metrics_linger`).
    #[serde(skip)]
    pub metrics_linger: Duration,
    /// Where the live metrics are pushed (`run.remote_write`, `run.otlp`): not what was
    /// measured, so not serialized (nor fingerprinted), and its URLs may hold credentials.
    #[serde(skip)]
    pub push: Option<push_rules::PushSettings>,
    /// `run.records_format`: what the run's records are kept as besides the records file.
    /// Left out of the resolved scenario when it is the default, so earlier fingerprints hold.
    #[serde(skip_serializing_if = "RecordsFormat::is_ndjson")]
    pub records_format: RecordsFormat,
}

/// `run.records_format`: `ndjson`, the records file alone; `parquet`, also one Parquet table of
/// the run's requests beside the artifacts (`<run_id>.records.parquet`) when the run ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordsFormat {
    #[default]
    Ndjson,
    Parquet,
}

impl RecordsFormat {
    pub fn is_ndjson(&self) -> bool {
        *self == RecordsFormat::Ndjson
    }
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
pub enum PhaseLength {
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
    /// `[workload.response_format]`: structured output asked for and checked (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Arc<ResponseFormat>>,
    /// `[workload.tools]`: the tools every request offers (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<tools_rules::SharedTools>,
    /// `[workload.media]`: images and audio with each prompt (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<Arc<MediaSpec>>,
}

/// How a completions prompt is sent: as text, or as the token ids of a local tokenizer.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq, Deserialize)]
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
/// Where prompt text comes from.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PromptSource {
    /// Seeded filler text sized to a planned context drawn per request.
    Synthetic { context: ContextDistribution },
    /// Prompts read from a file, used as they are.
    Dataset(Arc<Dataset>),
    /// A production trace replayed row by row: sizes, shared blocks, output lengths, times.
    Trace(Arc<crate::plan::trace::Trace>),
    /// Multi-turn conversations.
    Sessions(Arc<crate::plan::session::SessionSpec>),
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
    /// The checked images each prompt's row names (`prompts`' order), or empty when no row
    /// names one.
    #[serde(skip)]
    pub images: Vec<Vec<dataset_media::DatasetImage>>,
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

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingMode {
    #[default]
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
    /// `[target.tls]`, for the HTTP clients (written under `target.tls`, not here).
    #[serde(skip)]
    pub tls: Option<Arc<TlsSettings>>,
    /// `target.unix_socket`, for the HTTP clients (written under `target`, not here).
    #[serde(skip)]
    pub unix_socket: Option<PathBuf>,
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
