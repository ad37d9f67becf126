//! Everything about a run that its artifacts repeat, fixed once when the run starts: labels,
//! workload settings, the sizing evidence, the rules that decide phases and exclusions. It is the
//! first line of the records file, so `anvil-load summarize` rebuilds the same artifacts from the
//! records alone.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::level::Issued;
use super::timing::{Exclusions, ms};
use crate::plan::scenario::{
    Api, ControlledOutputPolicy, Endpoint, PhaseLength, ReasoningEffort, Scenario, Slo, ThinkingMode,
};
use crate::redact::{REDACTED, redact_url};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub measurement_protocol: Option<String>,
    pub tier: Option<String>,
    pub engine: Option<String>,
    pub gpu: Option<String>,
    pub model: String,
    pub api: Api,
    /// As written into artifacts: without credentials, `[redacted]` when asked.
    pub base_url: String,
    /// Several replicas (`target.base_urls`): each one's URL as `base_url` is written, in the
    /// order the records' `replica` indices name them. Absent with one server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
    /// Several models (`target.models`): their names, in the order the per-model table lists
    /// them. Absent with one model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// `load.reset_cache`: the engine whose cache reset is called before each level. Absent
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_cache: Option<String>,
    /// The embedded simulator's profile, when it was the target.
    pub simulator_profile: Option<String>,
    pub clock_domain_id: Option<String>,
    pub configuration_fingerprint: String,
    /// The validated scenario (the API key's variable name, never the key; the base URL without
    /// credentials, `[redacted]` when asked).
    pub scenario: Value,
    pub context_tokens: Value,
    pub context_seed: u64,
    pub max_context_tokens: u32,
    pub max_tokens: u32,
    pub prompt_cache_mode: String,
    pub shared_prefix_tokens: u32,
    pub shared_prefix_burst: bool,
    pub unique_prefixes: bool,
    pub prompts_reproducible: bool,
    /// Every load level of the run sends the same prompts (reproducible prompts in a sweep or a
    /// search): later levels may find earlier levels' prefixes in the server's cache. Absent
    /// (false) when each level has its own prompts, and in records written before it existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub levels_share_prompts: bool,
    pub prompt_salt: String,
    pub prompt_sizing: SizingRecord,
    pub request_canaries: bool,
    pub controlled_output_policy: ControlledOutputPolicy,
    pub response_words: u32,
    pub sampling: SamplingRecord,
    pub serve_flags: ServeFlagsRecord,
    pub warmup: Option<PhaseLength>,
    pub cooldown: Option<PhaseLength>,
    /// Planned issuing duration, for time-based cool-down.
    pub duration_ms: Option<f64>,
    pub max_dispatch_lag_ms: f64,
    /// Absent in records written before the client's lateness was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_client_lateness_ms: Option<f64>,
    pub slo: Slo,
    /// Set when the run was one shard of several (absent otherwise, so unsharded records and the
    /// artifacts rebuilt from them are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<super::ShardInfo>,
    /// The server's `/models` list, checked before the run, did not name the model (absent when
    /// it did, when it listed nothing, or when the check could not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_not_listed: Option<ModelNotListed>,
    /// Where `model` came from when the scenario did not decide it (absent when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_source: Option<ModelSource>,
}

/// The model was taken from the server: `source` is `server_models_list` (the one model its
/// `/models` listed); `instead_of` the model the scenario named, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSource {
    pub source: String,
    pub instead_of: Option<String>,
}

/// What the server's `/models` list held instead of the scenario's model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelNotListed {
    /// The first ids it listed, as the sanitizer leaves them (bounded, one line, no secret).
    pub listed: Vec<String>,
    /// Ids listed beyond those.
    pub more: u64,
}

impl ModelNotListed {
    pub fn message(&self, model: &str) -> String {
        let more = if self.more > 0 { format!(" and {} more", self.more) } else { String::new() };
        format!(
            "model {model:?} is not in the server's /models list ({}{more}); llama.cpp accepts any name, vLLM answers 404: check target.model",
            self.listed.iter().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
        )
    }
}

/// Every replica URL of the serialized scenario (`target.replicas.base_urls`) rewritten by `f`.
fn replica_urls(scenario: &mut Value, f: impl Fn(&str) -> String) {
    if let Some(Value::Array(urls)) = scenario.pointer_mut("/target/replicas/base_urls") {
        for url in urls.iter_mut() {
            if let Value::String(u) = url {
                *u = f(u);
            }
        }
    }
}

impl RunInfo {
    pub fn new(s: &Scenario, run_id: &str, base_url: &str, sizing: SizingRecord, prompt_salt: u64) -> Self {
        // A validated scenario is plain data: it always serialises, and an empty fingerprint would be
        // a silent lie. Credentials never reach the records or the artifact; the fingerprint is
        // taken over the URL without them (unchanged for a URL that had none), before any
        // `[redacted]`.
        let mut scenario = serde_json::to_value(s).expect("a validated scenario serialises to JSON");
        if let Some(Value::String(url)) = scenario.pointer_mut("/target/endpoint/base_url") {
            *url = redact_url(url);
        }
        replica_urls(&mut scenario, redact_url);
        // Every other string through the one sanitizer too: a URL anywhere (a path given as
        // one, an `extra_body` field) loses its credentials, and no secret of the run is kept.
        s.secrets().scrub_json(&mut scenario);
        let configuration_fingerprint = fingerprint(&scenario);
        if s.target.redact_base_url {
            if let Some(Value::String(url)) = scenario.pointer_mut("/target/endpoint/base_url") {
                *url = REDACTED.to_string();
            }
            replica_urls(&mut scenario, |_| REDACTED.to_string());
        }
        let (engine, simulator_profile) = match &s.target.endpoint {
            Endpoint::Simulator { profile, .. } => (Some(format!("anvil-simulator/{profile}")), Some(profile.clone())),
            Endpoint::Remote { .. } => (s.target.engine.clone(), None),
        };
        RunInfo {
            run_id: run_id.to_string(),
            measurement_protocol: s.run.protocol.clone(),
            tier: s.run.tier.clone(),
            engine,
            gpu: s.target.gpu.clone(),
            model: s.target.model.clone(),
            api: s.target.api,
            base_url: if s.target.redact_base_url { REDACTED.to_string() } else { redact_url(base_url) },
            replicas: match &s.target.replicas {
                Some(r) if s.target.redact_base_url => vec![REDACTED.to_string(); r.base_urls.len()],
                Some(r) => r.base_urls.iter().map(|u| redact_url(u)).collect(),
                None => Vec::new(),
            },
            models: s.target.models.as_ref().map(|m| m.names.clone()).unwrap_or_default(),
            reset_cache: (!s.load.reset_cache.is_none()).then(|| s.load.reset_cache.name().to_string()),
            simulator_profile,
            clock_domain_id: s.run.clock_domain_id.clone(),
            configuration_fingerprint,
            scenario,
            context_tokens: s.workload.prompts.context_json(),
            context_seed: s.run.seed,
            max_context_tokens: s.workload.max_context_tokens,
            max_tokens: s.workload.max_tokens,
            // A trace's prompts share the blocks its hash ids name: neither unique nor one prefix.
            prompt_cache_mode: match &s.workload.prompts {
                crate::plan::scenario::PromptSource::Trace(_) => "trace".to_string(),
                crate::plan::scenario::PromptSource::Sessions(_) => "sessions".to_string(),
                _ => s.workload.prompt_cache.as_str().to_string(),
            },
            shared_prefix_tokens: s.workload.prompt_cache.shared_prefix_tokens(),
            shared_prefix_burst: s.workload.prompt_cache.burst(),
            unique_prefixes: matches!(s.workload.prompt_cache, crate::plan::scenario::PromptCache::Unique { .. })
                && !matches!(
                    s.workload.prompts,
                    crate::plan::scenario::PromptSource::Trace(_) | crate::plan::scenario::PromptSource::Sessions(_)
                ),
            prompts_reproducible: s.workload.prompt_cache.reproducible(),
            levels_share_prompts: s.workload.prompt_cache.reproducible()
                && (s.load.search.is_some() || s.load.pacing.levels().len() > 1),
            prompt_salt: format!("{prompt_salt:016x}"),
            prompt_sizing: sizing,
            request_canaries: s.workload.canaries,
            controlled_output_policy: s.output.policy,
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
            warmup: s.run.warmup,
            cooldown: s.run.cooldown,
            duration_ms: s.run.duration.map(ms),
            max_dispatch_lag_ms: ms(s.load.max_dispatch_lag),
            max_client_lateness_ms: Some(ms(s.load.max_client_lateness)),
            slo: s.slo.clone(),
            shard: None,
            model_not_listed: None,
            model_source: None,
        }
    }

    /// The rules known before a level runs: everything but the cool-down, which depends on
    /// where the level ends.
    pub fn initial_rules(&self) -> Exclusions {
        let mut rules = Exclusions {
            strict_output: self.controlled_output_policy == ControlledOutputPolicy::Strict,
            prefix_warmup_index: self.shared_prefix_burst.then_some(0),
            ..Exclusions::default()
        };
        match self.warmup {
            Some(PhaseLength::Requests(n)) => rules.warmup_below_index = Some(n),
            Some(PhaseLength::Time(t)) => rules.warmup_before_ms = Some(ms(t)),
            None => {}
        }
        rules
    }

    /// A level's final rules: the initial ones plus the cool-down, which depends on where the
    /// level ended (the highest indices attempted, or the end of the issuing window).
    pub fn final_rules(&self, indices: impl Iterator<Item = u64>, last_start_ms: f64, issued: Issued) -> Exclusions {
        let mut rules = self.initial_rules();
        match self.cooldown {
            Some(PhaseLength::Requests(n)) if n > 0 => {
                let mut indices: Vec<u64> = indices.collect();
                indices.sort_unstable();
                let n = n as usize;
                rules.cooldown_from_index = Some(if n < indices.len() { indices[indices.len() - n] } else { 0 });
            }
            Some(PhaseLength::Time(t)) => {
                let end = issued.planned_window.map(ms).or(self.duration_ms).unwrap_or(last_start_ms);
                rules.cooldown_from_ms = Some((end - ms(t)).max(0.0));
            }
            _ => {}
        }
        rules
    }
}

/// How one sampling parameter was handled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SamplingParam {
    /// Value in the scenario (null: not set).
    pub requested: Option<f64>,
    /// Whether it was put in the request body.
    pub sent: bool,
    /// The value the request carried; null means the server's default applied.
    pub effective_request: Option<f64>,
}

impl SamplingParam {
    pub fn from_requested(requested: Option<f64>) -> Self {
        SamplingParam { requested, sent: requested.is_some(), effective_request: requested }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SamplingRecord {
    pub temperature: SamplingParam,
    pub top_p: SamplingParam,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeFlagsRecord {
    pub thinking_mode: ThinkingMode,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub no_thinking: bool,
    pub shared_prefix_burst: bool,
}

/// One calibration probe and what the server said.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeResult {
    /// The sizer's prediction before calibration: the built-in estimate of the probe's text, or
    /// the tokenizer's count.
    pub predicted_text_tokens: f64,
    /// `usage.prompt_tokens` as reported by the server.
    pub server_prompt_tokens: Option<u64>,
    pub error: Option<String>,
}

/// `prompt_sizing` in the artifact: how prompts were sized, and the evidence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizingRecord {
    /// `estimate`, `calibrate` or `tokenizer`.
    pub mode: String,
    pub tokenizer_path: Option<String>,
    pub probes: Vec<ProbeResult>,
    /// Server tokens per estimated token (1 for `estimate` and `tokenizer`).
    pub slope: f64,
    /// Tokens the server adds to every prompt (chat template, BOS).
    pub intercept: f64,
    /// Largest distance between a probe's server count and the fitted line, in tokens.
    pub fit_residual_max: Option<f64>,
    /// Set when calibration failed and the built-in estimate was used instead.
    pub fallback_reason: Option<String>,
    /// The probe shaped like a conversation with its own system message (sent only when the
    /// dataset holds such conversations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_probe: Option<ProbeResult>,
    /// Template tokens of a conversation that opens with its own system message (the template
    /// then drops its default system prompt), from `system_probe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message_overhead: Option<f64>,
    /// The probe shaped like a later turn of a conversation (sent only when conversations have
    /// later turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_probe: Option<ProbeResult>,
    /// Tokens a later turn adds to the prompt beyond its answer's and new message's text (the
    /// template of both messages, the new message's fixed words as the server counts them
    /// against the fit), from `turn_probe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_overhead: Option<f64>,
    /// `[workload.media]`: prompt tokens one item of each size (or length) adds, one probe each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_tokens: Option<Vec<super::MediaProbe>>,
}

impl SizingRecord {
    /// A sizing by a straight line (`slope` server tokens per estimated token, `intercept` added
    /// to every prompt), before any probe is recorded.
    pub fn line(mode: &str, slope: f64, intercept: f64, tokenizer_path: Option<String>) -> Self {
        SizingRecord {
            mode: mode.to_string(),
            tokenizer_path,
            probes: Vec::new(),
            slope,
            intercept,
            fit_residual_max: None,
            fallback_reason: None,
            system_probe: None,
            system_message_overhead: None,
            turn_probe: None,
            turn_overhead: None,
            media_tokens: None,
        }
    }
}

impl SizingRecord {
    /// Whether a `prompt_sizing_off` warning should advise `workload.tokenizer = "calibrate"` (or a
    /// tokenizer.json): only when the run did not already size prompts from the server's own counts,
    /// i.e. it used the built-in estimate or its calibration fell back to it. A calibrated run that
    /// is still off needs another explanation (prompts of a shape the probes did not have).
    pub fn calibration_would_help(&self) -> bool {
        self.mode == "estimate" || self.fallback_reason.is_some()
    }
}

/// FNV-1a over the canonical JSON of the configuration: equal fingerprints, equal settings.
pub fn fingerprint(config: &Value) -> String {
    let bytes = serde_json::to_vec(config).expect("a JSON value serialises");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::Overrides;

    fn info(base_url: &str, redact: bool) -> (Scenario, RunInfo) {
        let text = format!(
            "[target]\nmodel = \"m\"\nbase_url = \"{base_url}\"\nredact_base_url = {redact}\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n"
        );
        let s = Scenario::from_toml(std::path::Path::new("t.toml"), &text, &Overrides::default()).unwrap();
        let sizing = SizingRecord::line("estimate", 1.0, 8.0, None);
        let url = match &s.target.endpoint {
            Endpoint::Remote { base_url } => base_url.clone(),
            Endpoint::Simulator { .. } => unreachable!(),
        };
        let info = RunInfo::new(&s, "r", &url, sizing, 0);
        (s, info)
    }

    fn replicas_info(redact: bool) -> RunInfo {
        let text = format!(
            "[target]\nmodel = \"m\"\nbase_urls = [\"http://alice:s3cret@a:8000/v1\", \"http://b:8000/v1?k=tok999\"]\nredact_base_url = {redact}\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n"
        );
        let s = Scenario::from_toml(std::path::Path::new("t.toml"), &text, &Overrides::default()).unwrap();
        let sizing = SizingRecord::line("estimate", 1.0, 8.0, None);
        RunInfo::new(&s, "r", "http://alice:s3cret@a:8000/v1", sizing, 0)
    }

    #[test]
    fn replicas_are_listed_without_credentials_or_redacted() {
        let info = replicas_info(false);
        let json = serde_json::to_string(&info).unwrap();
        assert!(!json.contains("s3cret") && !json.contains("tok999") && !json.contains("alice"), "{json}");
        assert_eq!(info.replicas, ["http://a:8000/v1", "http://b:8000/v1?k=[redacted]"]);
        assert_eq!(info.scenario["target"]["replicas"]["base_urls"][1], info.replicas[1].as_str());
        let redacted = replicas_info(true);
        assert_eq!(redacted.replicas, ["[redacted]", "[redacted]"]);
        let json = serde_json::to_string(&redacted).unwrap();
        assert!(!json.contains("a:8000") && !json.contains("b:8000"), "{json}");
    }

    #[test]
    fn credentials_in_the_base_url_are_never_kept() {
        let (_, info) = info("http://alice:s3cret@127.0.0.1:8000/v1?api_key=tok999", false);
        let json = serde_json::to_string(&info).unwrap();
        assert!(!json.contains("s3cret") && !json.contains("tok999") && !json.contains("alice"), "{json}");
        assert_eq!(info.base_url, "http://127.0.0.1:8000/v1?api_key=[redacted]");
        assert_eq!(info.scenario["target"]["endpoint"]["base_url"], info.base_url);
    }

    #[test]
    fn the_fingerprint_of_a_url_without_credentials_is_unchanged() {
        let (s, plain) = info("http://127.0.0.1:8000/v1", false);
        assert_eq!(plain.configuration_fingerprint, fingerprint(&serde_json::to_value(&s).unwrap()));
        // Redaction hides the URL everywhere but the fingerprint is taken before it.
        let (s, redacted) = info("http://127.0.0.1:8000/v1", true);
        assert_eq!(redacted.configuration_fingerprint, fingerprint(&serde_json::to_value(&s).unwrap()));
        assert_eq!(
            (redacted.base_url.as_str(), &redacted.scenario["target"]["endpoint"]["base_url"]),
            ("[redacted]", &Value::from("[redacted]"))
        );
    }
}
