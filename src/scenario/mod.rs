//! The validated scenario: the one typed description of a run that every later stage reads.
//!
//! `Scenario::load` reads a TOML file, applies command-line overrides, and validates once
//! (`validate`). Errors name the file, the key path, what is wrong and how to fix it; the
//! program exits with code 2 and sends nothing. No other module sees TOML shapes.

mod describe;
mod raw;
mod validate;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use describe::describe;
pub use raw::RawScenario;
pub use validate::ScenarioError;

/// Values given on the command line (or in the environment) that replace the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub base_url: Option<String>,
    /// Where `base_url` came from, for error messages (`--base-url` or `ANVIL_BASE_URL`).
    pub base_url_origin: Option<&'static str>,
    pub model: Option<String>,
    pub concurrency: Option<Vec<u32>>,
    pub requests: Option<u64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    pub simulator: Option<String>,
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
    pub client: ClientTimeouts,
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
}

/// Where requests go.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Endpoint {
    /// A real server. `base_url` ends in the API root, e.g. `http://host:8000/v1`.
    Remote { base_url: String },
    /// The embedded simulator, started on 127.0.0.1:0 for the run.
    Simulator { profile: String },
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    Chat,
    Completions,
}

impl Api {
    /// Path below the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/chat/completions",
            Api::Completions => "/completions",
        }
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
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Load {
    /// Fixed concurrency: each worker issues its next request when the last one ends.
    Closed { levels: Vec<u32> },
}

impl Load {
    /// Each level is one run with its own artifact.
    pub fn levels(&self) -> &[u32] {
        match self {
            Load::Closed { levels } => levels,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub context: ContextDistribution,
    pub max_context_tokens: u32,
    pub max_tokens: u32,
    pub prompt_cache: PromptCache,
    pub canaries: bool,
}

/// Planned context sizes and their weights; a single size is one entry of weight 1.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContextDistribution {
    /// `(tokens, weight)`, sorted by tokens, weights positive.
    pub choices: Vec<(u32, u32)>,
}

impl ContextDistribution {
    pub fn is_single(&self) -> bool {
        self.choices.len() == 1
    }
    pub fn largest(&self) -> u32 {
        self.choices.iter().map(|c| c.0).max().unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PromptCache {
    Unique,
}

impl PromptCache {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptCache::Unique => "unique",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingMode {
    Default,
    Enabled,
    Disabled,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
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
pub struct ClientTimeouts {
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    #[serde(with = "humantime_serde")]
    pub first_byte: Duration,
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
}

impl Scenario {
    /// Read, override and validate a scenario file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::unreadable(path, &e))?;
        Self::from_toml(path, &text, overrides)
    }

    /// Validate scenario text; `path` is only used in messages.
    pub fn from_toml(path: &Path, text: &str, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        validate::validate(path, text, overrides)
    }
}

/// Durations are written the way they are read (`"1m 30s"`), for the resolved plan.
mod humantime_serde {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
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
