//! Simulator profiles: the knobs that decide how the mock server behaves on the wire
//! (latencies, output lengths, chunking, engine quirks) and the named presets.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::faults::FaultProfile;

/// Names accepted by [`Profile::named`].
pub const PROFILE_NAMES: &[&str] = &["instant", "fast", "realistic", "llamacpp", "faults", "spec"];

/// Which delta key carries reasoning text in streamed chat chunks (and the `message` of
/// non-streamed chat responses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningField {
    /// `reasoning_content`, as llama.cpp, SGLang and older vLLM send it.
    ReasoningContent,
    /// `reasoning`, as newer vLLM sends it.
    Reasoning,
}

impl ReasoningField {
    /// The JSON key this variant stands for.
    pub fn key(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
}

/// Where `usage` goes in a streamed response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsagePlacement {
    /// OpenAI / vLLM: only with `stream_options.include_usage`, in one extra chunk with
    /// `"choices": []` after the finish chunk.
    SeparateChunk,
    /// llama.cpp: on `/v1/completions` usage rides on the finish chunk itself, always. Chat
    /// streams behave as [`UsagePlacement::SeparateChunk`], because llama.cpp's chat endpoint
    /// does too.
    FinishChunk,
}

/// Whose metric names `GET /metrics` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsNames {
    /// vLLM V1's (`vllm:num_requests_running`, `vllm:prompt_tokens_total`, …).
    #[default]
    Vllm,
    /// llama.cpp server's (`llamacpp:requests_processing`, `llamacpp:tokens_predicted_total`, …).
    Llamacpp,
}

/// How the simulated engine behaves. Plain data so a scenario file can override any field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Shown by `GET /mock/profile`; informational only.
    pub name: String,
    /// Prompt processing rate in tokens per second, applied to uncached prompt tokens only.
    /// `None` makes prefill instant.
    pub prefill_tok_s: Option<f64>,
    /// Decode time per output token; zero makes decoding instant. Serialized as fractional
    /// milliseconds because that is how people quote it.
    #[serde(rename = "time_per_output_token_ms", with = "duration_ms")]
    pub time_per_output_token: Duration,
    /// Inclusive range of the model's natural reasoning length in tokens, drawn per request
    /// from a hash of the prompt so runs are reproducible.
    pub reasoning_tokens: (u32, u32),
    /// Inclusive range of the model's natural visible answer length in tokens, drawn like
    /// `reasoning_tokens`.
    pub content_tokens: (u32, u32),
    /// Tokens per SSE chunk (at least 1); more than one imitates speculative decoding.
    pub tokens_per_chunk: u32,
    /// Prompts with more tokens than this are refused with HTTP 400 before any stream bytes;
    /// output stops with `length` at this edge too.
    pub context_limit: u32,
    /// Delta key used for reasoning text.
    pub reasoning_field: ReasoningField,
    /// Where usage is reported in streams.
    pub usage_placement: UsagePlacement,
    /// llama.cpp quirk: on `finish_reason: "stop"` the reported `completion_tokens` includes
    /// one end-of-turn token that is never streamed.
    pub eos_in_usage: bool,
    /// Answer every generation request with `Connection: close`, so each stream ends its
    /// connection the way llama.cpp does; exercises the client's reconnect path.
    pub close_connection: bool,
    /// Simulate a prefix cache: repeated prompt prefixes skip prefill and are reported in
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub prefix_cache: bool,
    /// Load-dependent slowdown: time per output token and prefill time are multiplied by
    /// `1 + batch_slowdown * (active_requests - 1)`. Zero makes latency independent of load.
    pub batch_slowdown: f64,
    /// Injected failures (see `faults`); none by default.
    #[serde(default)]
    pub faults: FaultProfile,
    /// Record when every chunk of every streamed response left, for `GET /mock/ground-truth`.
    /// Off by default: it costs a clock read per chunk and memory per request.
    #[serde(default)]
    pub record_ground_truth: bool,
    /// Count prompt tokens with this local Hugging Face `tokenizer.json` instead of the
    /// built-in byte rule (each word counted on its own, plus the same template tokens).
    #[serde(default)]
    pub tokenizer: Option<std::path::PathBuf>,
    /// vLLM's `--served-model-name`: the names `/v1/models` lists and the only ones a request may
    /// name (another gets vLLM's 404). Empty: `anvil-sim` is listed and any name is answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_model_names: Vec<String>,
    /// LoRA adapters served beside the base model (`--lora NAME[:MS]`), each with its own decode
    /// speed when given (see `lora`); with any, a request naming no served model gets a 404.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loras: Vec<super::lora::Lora>,
    /// The cache reset endpoints answer (and are counted) but clear nothing: a server whose
    /// reset does not take.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_cache_resets: bool,
    /// Whose names `GET /metrics` uses (default vLLM's; the `llamacpp` preset uses llama.cpp's).
    #[serde(default)]
    pub metrics_names: MetricsNames,
    /// Tokens of the system prompt the chat template adds when a conversation brings none of
    /// its own (Qwen2.5's templates do this); a conversation that starts with a system message
    /// replaces it. Zero (the default) adds nothing.
    #[serde(default)]
    pub default_system_prompt_tokens: u32,
    /// Pretend to be a router in front of this many backends (0: none): every answer names
    /// one in `x-anvil-backend: backend-<k>`. A request naming a backend in that header (echoed
    /// from an earlier answer) is served by it; one with `X-Session-ID` by the backend its id
    /// hashes to; any other in turn (round robin).
    #[serde(default)]
    pub backends: u32,
    /// Speculative decoding: each chunk carries 1–4 tokens (drawn per chunk: 1 with 5 %, 2 with
    /// 15 %, 3 with 55 %, 4 with 25 %; mean 3), as a decoder accepting a varying number of
    /// drafts does; replaces `tokens_per_chunk`. A chunk still leaves when its last token is
    /// ready, so the time per output token stays `time_per_output_token`.
    #[serde(default)]
    pub speculative: bool,
    /// llama.cpp's server converts the Responses and Messages APIs into a chat request, and
    /// the conversion shows on the wire: a Responses answer cut at `max_output_tokens` ends
    /// with `response.completed` and `"status": "completed"` (never `response.incomplete`); a
    /// Responses `input` item it cannot place (an assistant message without `"type":
    /// "message"`, an item with neither a known role nor a known type) is refused with 400
    /// "Cannot determine type of 'item'"; and a Messages request loses `ignore_eos` and
    /// `min_tokens` (the conversion keeps only the sampling fields), so its answers stop at
    /// their natural length. Off by default; the `llamacpp` preset turns it on.
    #[serde(default)]
    pub llamacpp_conversions: bool,
    /// Tool calls: a request that offers tools gets a call unless its input ends with this many
    /// tool results in a row (see `tool_call`); default 1, so an agent turn after a tool's
    /// result is answered in text.
    #[serde(default = "one")]
    pub tool_turns: u32,
}

fn one() -> u32 {
    1
}

impl Profile {
    /// Whether a request may name `model`: any name, unless `served_model_names` or `loras` list
    /// some.
    pub fn serves(&self, model: &str) -> bool {
        if self.loras.iter().any(|l| l.name == model) {
            return true;
        }
        if self.served_model_names.is_empty() {
            // With adapters, the base is the default name, as vLLM serves its model's name.
            return self.loras.is_empty() || model == super::request::DEFAULT_MODEL;
        }
        self.served_model_names.iter().any(|m| m == model)
    }

    /// A named preset, or `None` for an unknown name (see [`PROFILE_NAMES`]).
    pub fn named(name: &str) -> Option<Profile> {
        let base = Profile {
            name: name.to_string(),
            prefill_tok_s: None,
            time_per_output_token: Duration::ZERO,
            reasoning_tokens: (0, 0),
            content_tokens: (256, 256),
            tokens_per_chunk: 1,
            context_limit: 262_144,
            reasoning_field: ReasoningField::ReasoningContent,
            usage_placement: UsagePlacement::SeparateChunk,
            eos_in_usage: false,
            close_connection: false,
            prefix_cache: false,
            batch_slowdown: 0.0,
            faults: FaultProfile::default(),
            record_ground_truth: false,
            tokenizer: None,
            served_model_names: Vec::new(),
            loras: Vec::new(),
            ignore_cache_resets: false,
            metrics_names: MetricsNames::Vllm,
            default_system_prompt_tokens: 0,
            backends: 0,
            speculative: false,
            llamacpp_conversions: false,
            tool_turns: 1,
        };
        match name {
            // Measures the client's own cost per chunk: nothing on the server side may sleep,
            // and the prefix cache stays off so the server does as little as possible.
            "instant" => Some(base),
            "fast" => Some(Profile {
                prefill_tok_s: Some(2_000_000.0),
                time_per_output_token: Duration::from_micros(200),
                reasoning_tokens: (8, 24),
                content_tokens: (8, 24),
                tokens_per_chunk: 2,
                prefix_cache: true,
                ..base
            }),
            // One large GPU running a reasoning model; the slowdown gives a capacity search a
            // knee to find (16 concurrent streams decode 1.75x slower than one).
            "realistic" => Some(Profile {
                prefill_tok_s: Some(7_700.0),
                time_per_output_token: Duration::from_micros(4_300),
                reasoning_tokens: (200, 450),
                content_tokens: (20, 60),
                tokens_per_chunk: 4,
                prefix_cache: true,
                batch_slowdown: 0.05,
                ..base
            }),
            "llamacpp" => Some(Profile {
                prefill_tok_s: Some(50_000.0),
                time_per_output_token: Duration::from_millis(1),
                reasoning_tokens: (0, 0),
                content_tokens: (16, 48),
                tokens_per_chunk: 1,
                usage_placement: UsagePlacement::FinishChunk,
                eos_in_usage: true,
                close_connection: true,
                prefix_cache: true,
                metrics_names: MetricsNames::Llamacpp,
                llamacpp_conversions: true,
                ..base
            }),
            // A broken server for robustness runs: `fast`, with every kind of failure now
            // and then and one restart. Clients run it with short timeouts, which end stalls.
            "faults" => Some(Profile {
                name: base.name,
                faults: FaultProfile {
                    reset_mid_stream: 0.05,
                    http_500: 0.02,
                    http_429: 0.005,
                    http_503: 0.005,
                    stall_before_first_byte: 0.005,
                    stall_mid_stream: 0.005,
                    malformed_sse: 0.01,
                    invalid_json: 0.005,
                    invalid_utf8: 0.005,
                    huge_chunk: 0.002,
                    missing_done: 0.005,
                    contamination_swapped: 0.01,
                    contamination_merged: 0.01,
                    restart_after_requests: Some(1000),
                    restart_downtime_ms: 300,
                    stall_duration: Duration::from_secs(3600),
                    fault_seed: 1,
                    ..FaultProfile::default()
                },
                ..Profile::named("fast")?
            }),
            // Speculative decoding with a known time per token: 1–4 tokens per chunk, usage on
            // every chunk when the client asks (`stream_options.continuous_usage_stats`).
            "spec" => Some(Profile {
                prefill_tok_s: Some(200_000.0),
                time_per_output_token: Duration::from_millis(8),
                content_tokens: (60, 60),
                tokens_per_chunk: 3,
                speculative: true,
                ..base
            }),
            _ => None,
        }
    }

    /// Tokens in the chunk numbered `frame` of a response (see `speculative`); `seed` varies
    /// the draw between responses.
    pub(crate) fn chunk_tokens(&self, seed: u64, frame: u32) -> u32 {
        if !self.speculative {
            return self.tokens_per_chunk.max(1);
        }
        let mut x = seed ^ (u64::from(frame) << 32 | u64::from(frame)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        match (x ^ (x >> 31)) % 100 {
            0..5 => 1,
            5..20 => 2,
            20..75 => 3,
            _ => 4,
        }
    }

    /// Checks the values a hand-written profile could get wrong. The server tolerates all
    /// of them anyway (it clamps), so this is for callers that want to tell the user early.
    pub fn validate(&self) -> Result<(), String> {
        if self.tokens_per_chunk == 0 {
            return Err("tokens_per_chunk must be at least 1".into());
        }
        if self.reasoning_tokens.0 > self.reasoning_tokens.1 {
            return Err("reasoning_tokens: lower bound above upper bound".into());
        }
        if self.content_tokens.0 > self.content_tokens.1 {
            return Err("content_tokens: lower bound above upper bound".into());
        }
        if self.prefill_tok_s.is_some_and(|rate| !(rate.is_finite() && rate > 0.0)) {
            return Err("prefill_tok_s must be a positive number".into());
        }
        if !(self.batch_slowdown.is_finite() && self.batch_slowdown >= 0.0) {
            return Err("batch_slowdown must be zero or positive".into());
        }
        if self.context_limit == 0 {
            return Err("context_limit must be at least 1".into());
        }
        self.faults.validate()
    }

    /// Load factor for `active` concurrent generation requests.
    pub(crate) fn load_factor(&self, active: u64) -> f64 {
        let extra = active.saturating_sub(1) as f64;
        let slowdown =
            if self.batch_slowdown.is_finite() && self.batch_slowdown > 0.0 { self.batch_slowdown } else { 0.0 };
        1.0 + slowdown * extra
    }

    /// Prefill time for `uncached` prompt tokens at load factor `factor`.
    pub(crate) fn prefill_time(&self, uncached: u32, factor: f64) -> Duration {
        match self.prefill_tok_s {
            Some(rate) if rate.is_finite() && rate > 0.0 && uncached > 0 => {
                Duration::try_from_secs_f64(f64::from(uncached) / rate * factor).unwrap_or(Duration::ZERO)
            }
            _ => Duration::ZERO,
        }
    }
}

/// Durations as fractional milliseconds (`4.3` rather than `{"secs":0,"nanos":4300000}`).
pub(crate) mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64() * 1000.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(ms / 1000.0)
            .map_err(|_| D::Error::custom("expected a finite, non-negative number of milliseconds"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_resolves_and_validates() {
        for name in PROFILE_NAMES {
            let profile = Profile::named(name).expect("listed profile exists");
            assert_eq!(&profile.name, name);
            profile.validate().expect("preset is valid");
        }
        assert!(Profile::named("nope").is_none());
    }

    #[test]
    fn presets_carry_the_documented_values() {
        let instant = Profile::named("instant").expect("instant");
        assert_eq!(instant.time_per_output_token, Duration::ZERO);
        assert_eq!(instant.prefill_tok_s, None);
        assert_eq!(instant.content_tokens, (256, 256));
        assert_eq!(instant.reasoning_tokens, (0, 0));
        let llama = Profile::named("llamacpp").expect("llamacpp");
        assert!(llama.eos_in_usage && llama.close_connection && llama.llamacpp_conversions);
        assert_eq!(llama.usage_placement, UsagePlacement::FinishChunk);
        let realistic = Profile::named("realistic").expect("realistic");
        assert_eq!(realistic.time_per_output_token, Duration::from_micros(4_300));
        assert_eq!(realistic.faults, FaultProfile::default());
        let faults = Profile::named("faults").expect("faults");
        assert_eq!(faults.time_per_output_token, Profile::named("fast").expect("fast").time_per_output_token);
        assert_eq!((faults.faults.reset_mid_stream, faults.faults.fault_seed), (0.05, 1));
        assert_eq!(faults.faults.restart_after_requests, Some(1000));
    }

    #[test]
    fn serde_round_trip_uses_milliseconds() {
        let profile = Profile::named("realistic").expect("realistic");
        let json = serde_json::to_value(&profile).expect("serialize");
        let ms = json["time_per_output_token_ms"].as_f64().expect("ms");
        assert!((ms - 4.3).abs() < 1e-9);
        assert_eq!(json["reasoning_field"], "reasoning_content");
        let back: Profile = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, profile);
        let faults = Profile::named("faults").expect("faults");
        let json = serde_json::to_value(&faults).expect("serialize");
        assert_eq!(json["faults"]["stall_duration_ms"], 3_600_000.0);
        assert_eq!(serde_json::from_value::<Profile>(json).expect("deserialize"), faults);
    }

    #[test]
    fn fault_fields_default_when_absent() {
        let mut json = serde_json::to_value(Profile::named("fast").expect("fast")).expect("ser");
        let object = json.as_object_mut().expect("object");
        object.remove("faults");
        object.remove("record_ground_truth");
        object.remove("tokenizer");
        object.remove("metrics_names");
        object.remove("llamacpp_conversions");
        let profile: Profile = serde_json::from_value(json).expect("deserialize");
        assert_eq!(profile, Profile::named("fast").expect("fast"));
    }

    #[test]
    fn negative_milliseconds_are_refused() {
        let mut json = serde_json::to_value(Profile::named("fast").expect("fast")).expect("ser");
        json["time_per_output_token_ms"] = serde_json::json!(-1.0);
        assert!(serde_json::from_value::<Profile>(json).is_err());
    }

    #[test]
    fn load_factor_and_prefill() {
        let mut profile = Profile::named("fast").expect("fast");
        profile.batch_slowdown = 0.5;
        assert_eq!(profile.load_factor(0), 1.0);
        assert_eq!(profile.load_factor(1), 1.0);
        assert_eq!(profile.load_factor(3), 2.0);
        profile.prefill_tok_s = Some(1000.0);
        assert_eq!(profile.prefill_time(500, 2.0), Duration::from_secs(1));
        assert_eq!(profile.prefill_time(0, 2.0), Duration::ZERO);
        profile.prefill_tok_s = None;
        assert_eq!(profile.prefill_time(500, 1.0), Duration::ZERO);
    }
}
