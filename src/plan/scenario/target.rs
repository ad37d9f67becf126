//! The validated `[target]`: where requests go (a server or the embedded simulator), which API
//! they speak, in which engine's dialect, with which key, and where the server's own metrics are
//! scraped.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bounds::humantime_serde;
pub use super::headers::NamedValues;
use crate::redact::{Secrets, redact_url};

/// `[target]`: the server under test and how to speak to it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub endpoint: Endpoint,
    /// The model sent in every request. Empty until the preflight reads it from the server's
    /// `/models` when the scenario names none (`model_named` false).
    pub model: String,
    /// Whether the scenario (or `--model`) named the model.
    #[serde(skip)]
    pub model_named: bool,
    pub api: Api,
    /// The name of the variable the key came from; the key itself is in `api_key`.
    pub api_key_env: Option<String>,
    #[serde(skip)]
    pub api_key: Option<ApiKey>,
    /// The command printing the key (`api_key_command`), instead of `api_key_env`. Absent from
    /// the serialized scenario when not set, so earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_command: Option<super::key_command::KeyCommand>,
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
    /// `target.headers` (and `--header`): written as the list of their names, never a value;
    /// absent when none, so earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "NamedValues::is_empty")]
    pub headers: NamedValues,
    /// `target.query`: written as the list of their names, like `headers`.
    #[serde(skip_serializing_if = "NamedValues::is_empty")]
    pub query: NamedValues,
    /// `[target.tls]`: which trust was used (see `TlsSettings`). Absent when the table is, so
    /// earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<std::sync::Arc<super::TlsSettings>>,
    /// Several replicas (`target.base_urls`, `target.balance`); `endpoint` is then the first.
    /// Absent with one server, so earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<super::Replicas>,
    /// Several models (`target.models`); `model` is then the first. Absent with one model, so
    /// earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<super::ModelMix>,
    /// `target.unix_socket`: the socket every request goes through. Absent when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix_socket: Option<std::path::PathBuf>,
}

/// Where and how often the server's Prometheus metrics are scraped.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerMetricsSettings {
    pub endpoint: MetricsEndpoint,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// `target.metrics_urls`: other endpoints scraped beside the server's, in order, written
    /// without credentials. Absent when none, so earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "serialize_urls_without_credentials")]
    pub endpoints: Vec<String>,
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
    s.serialize_str(&redact_url(url))
}

fn serialize_urls_without_credentials<S: serde::Serializer>(urls: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(urls.iter().map(|u| redact_url(u)))
}

/// Request spellings for fields outside the OpenAI API.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
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
    /// Azure OpenAI: no fields beyond the OpenAI API, deployment paths, `api-version`, the key
    /// in `api-key` (see `azure`).
    Azure,
}

impl Dialect {
    /// Whether requests carry only fields of the OpenAI API (no `ignore_eos`, `min_tokens`, …).
    pub fn openai_fields_only(self) -> bool {
        matches!(self, Dialect::Openai | Dialect::Azure)
    }

    /// The name written in scenarios and artifacts.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Generic => "generic",
            Dialect::Vllm => "vllm",
            Dialect::Sglang => "sglang",
            Dialect::Llamacpp => "llamacpp",
            Dialect::Openai => "openai",
            Dialect::Azure => "azure",
        }
    }
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

impl super::Scenario {
    /// Every secret the scenario holds, which nothing written may carry: its API key (or every
    /// token its key command printed), its header and query values, and its base URL's and
    /// metrics URL's credentials and query values.
    pub fn secrets(&self) -> Secrets {
        let mut urls: Vec<&str> = Vec::new();
        if let Endpoint::Remote { base_url } = &self.target.endpoint {
            urls.push(base_url);
        }
        if let Some(r) = &self.target.replicas {
            urls.extend(r.base_urls.iter().map(String::as_str));
        }
        if let Some(m) = &self.target.metrics {
            if let MetricsEndpoint::Url { url } = &m.endpoint {
                urls.push(url);
            }
            urls.extend(m.endpoints.iter().map(String::as_str));
        }
        let mut secrets: Vec<String> =
            self.target.api_key.as_ref().map(ApiKey::expose).into_iter().map(str::to_string).collect();
        // Every header value, and every query value but a version-shaped `api-version`.
        secrets.extend(self.target.headers.secret_values().chain(self.target.query.secret_values()));
        let secrets = Secrets::with_urls(secrets, &urls);
        // Every token the key command prints, before or after this call.
        match &self.target.api_key_command {
            Some(command) => secrets.learning(&command.tokens),
            None => secrets,
        }
    }
}
