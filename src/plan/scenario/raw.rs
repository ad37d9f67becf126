//! The scenario file exactly as written: serde shapes of the TOML, nothing more.
//!
//! Every struct denies unknown keys so a typo is an error rather than a silently ignored
//! setting. Nothing outside `scenario` sees these types: `validate` turns them into the typed
//! plan once. A key whose value is one of a few names the plan keeps as they are (`api`,
//! `overload`, `thinking_mode`, …) reads straight into the plan's own enum, so the names are
//! spelled once and the parser lists them when a value is not one of them. Each field's doc
//! comment is the scenario reference; a test checks that docs/scenario.md documents every key these
//! structs accept.

use serde::Deserialize;

use super::pacing::{Overload, SearchBy};
use super::target::{Api, Dialect};
use super::{ControlledOutputPolicy, PromptEncoding, ReasoningEffort, ThinkingMode};

/// The whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// `[target]`: the server under test.
    #[serde(default)]
    pub target: RawTarget,
    /// `[run]`: how many requests, for how long, with which seed.
    #[serde(default)]
    pub run: RawRun,
    /// `[load]`: how requests are paced.
    #[serde(default)]
    pub load: RawLoad,
    /// `[workload]`: what each request asks for.
    pub workload: RawWorkload,
    /// `[sampling]`: sampling parameters sent with each request.
    #[serde(default)]
    pub sampling: RawSampling,
    /// `[serve]`: engine flags translated into request fields.
    #[serde(default)]
    pub serve: RawServe,
    /// `[output]`: output-length control and checks.
    #[serde(default)]
    pub output: RawOutput,
    /// `[slo]`: service-level objectives, e.g. `ttft_p99_ms = 2000`, for capacity search and
    /// goodput.
    #[serde(default)]
    pub slo: toml::Table,
    /// `[client]`: client-side timeouts.
    #[serde(default)]
    pub client: RawClient,
}

/// `[target]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:8000/v1`. Omit it to run against the
    /// embedded simulator. `--base-url` and `ANVIL_BASE_URL` override it.
    pub base_url: Option<String>,
    /// Model name sent in every request. Optional: without it, the model the server's
    /// `/models` lists is used when it lists exactly one (`--model` names it otherwise).
    pub model: Option<String>,
    /// `"chat"` (`/chat/completions`, the default), `"completions"` (`/completions`),
    /// `"responses"` (`/responses`), `"messages"` (Anthropic-style `/messages`),
    /// `"embeddings"` (`/embeddings`) or `"rerank"` (`/rerank`).
    #[serde(default)]
    pub api: Api,
    /// Name of the environment variable holding the API key (sent as a bearer token). The key
    /// itself never appears in the scenario, the artifact or the logs.
    pub api_key_env: Option<String>,
    /// The command printing the key (a bearer token), as a list run without a shell, e.g.
    /// `["gcloud", "auth", "print-access-token"]`; run before the run, again every
    /// `api_key_refresh`, and once when a request is refused with 401. Not with `api_key_env`.
    pub api_key_command: Option<Vec<String>>,
    /// Run `api_key_command` again this often during the run (e.g. `"45m"`; 10s to 24h).
    pub api_key_refresh: Option<String>,
    /// Label recorded as the artifact's `engine` (e.g. `"vllm-0.11"`).
    pub engine: Option<String>,
    /// Label recorded as the artifact's `gpu`.
    pub gpu: Option<String>,
    /// Write `[redacted]` instead of the base URL into the artifact.
    #[serde(default)]
    pub redact_base_url: bool,
    /// Simulator profile used when no base URL is given: `instant`, `fast`, `realistic`,
    /// `llamacpp`, `faults` or `spec` (default `realistic`). `--simulator` overrides it.
    pub simulator: Option<String>,
    /// The simulator profile's decode time per output token, in milliseconds, instead of the
    /// profile's own (e.g. to simulate a build 20 % slower per token). Simulator only.
    pub simulator_time_per_output_token_ms: Option<f64>,
    /// Which engine's request spellings to use for non-standard fields: `"generic"` (default;
    /// vLLM, SGLang), `"llamacpp"`, `"openai"` (hosted OpenAI-style APIs: no extra fields), or
    /// `"azure"` (Azure OpenAI: deployment paths, `api-version`, the key in `api-key`).
    pub dialect: Option<Dialect>,
    /// Extra JSON fields merged into every request body, e.g. `{ top_k = 20 }`. They may not
    /// replace fields the tool sets itself.
    pub extra_body: Option<toml::Table>,
    /// `api = "messages"`: send this `anthropic-version` header, e.g. `"2023-06-01"`.
    pub anthropic_version: Option<String>,
    /// Scrape the server's Prometheus metrics from this URL during the run, e.g.
    /// `"http://127.0.0.1:8000/metrics"`.
    pub metrics_url: Option<String>,
    /// `true`: scrape `http://host:port/metrics` of the base URL (the simulator's too).
    pub metrics: Option<bool>,
    /// Other endpoints scraped beside the server's (a DCGM exporter, a node exporter, another
    /// replica's `/metrics`), each kept apart in `server_metrics.endpoints[]`.
    pub metrics_urls: Option<Vec<String>>,
    /// `true`: ask for usage on every chunk (vLLM's `stream_options.continuous_usage_stats`),
    /// which gives the tokens each chunk delivered.
    #[serde(default)]
    pub continuous_usage_stats: bool,
    /// Several models in one run (LoRA adapters of one base, or several served names), each
    /// `{ name = "sql-lora", weight = 1 }`; exclusive with `model` (the first is the default).
    pub models: Option<Vec<RawModel>>,
    /// With `models`: `"random"` (default), `"round_robin"` or `"zipf"`.
    pub model_assignment: Option<String>,
    /// With `model_assignment = "zipf"`: the exponent (default 1).
    pub model_zipf_exponent: Option<f64>,
    /// Extra request headers sent with every request, e.g. `{ "X-Tenant" = "team-a" }`; a value
    /// is text or `{ env = "NAME" }` (read once, before the run). Values are secrets: the artifact
    /// records the names only. `--header 'K: V'` adds one.
    pub headers: Option<toml::Table>,
    /// Query parameters appended to every request URL, e.g. `{ "api-version" = "2024-10-21" }`;
    /// values as in `headers`, and secret too.
    pub query: Option<toml::Table>,
    /// Several replicas of the server, each an API root like `base_url` (2 to 64, exclusive
    /// with `base_url`); requests are spread over them by `balance`.
    pub base_urls: Option<Vec<String>>,
    /// How requests choose their replica: `"round_robin"` (default), `"least_in_flight"` or
    /// `"session"` (a conversation stays on one replica).
    pub balance: Option<String>,
    /// `[target.tls]`: trusted roots, client certificate, server name (https base URLs only).
    pub tls: Option<RawTls>,
    /// Connect through this Unix domain socket (e.g. vLLM's `--uds /run/vllm.sock`) instead of
    /// the base URL's host and port; the base URL (`http://localhost/v1`) gives the path.
    pub unix_socket: Option<String>,
}

/// `[target.tls]`: how an https server is trusted and how the client proves itself to it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// A PEM file of CA certificates trusted beside the roots (e.g. a company's private CA),
    /// relative to the scenario file.
    pub ca_file: Option<String>,
    /// `true`: trust the operating system's certificate store instead of the bundled WebPKI roots.
    pub system_roots: Option<bool>,
    /// The client certificate (PEM, with any intermediates) for servers that require one (mTLS).
    pub client_cert: Option<String>,
    /// The client certificate's private key (PEM). Its contents are never written anywhere.
    pub client_key: Option<String>,
    /// Check the server's certificate against this name (and send it as SNI) instead of the
    /// base URL's host.
    pub server_name: Option<String>,
    /// `true`: do not check the server's certificate at all (a lab's self-signed server). Loud:
    /// a warning on the console and in every artifact.
    pub insecure_skip_verify: Option<bool>,
}

/// One entry of `target.models`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// The model name sent in the request's `model` field.
    pub name: String,
    /// Its share of the requests against the others' (default 1).
    pub weight: Option<i64>,
}

/// `[run]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    /// Number of requests per load level. At least one of `requests` and `duration` is needed;
    /// with both, the run stops at whichever comes first.
    pub requests: Option<u64>,
    /// Stop issuing new requests after this long (e.g. `"90s"`, `"10m"`, `"8h"`).
    pub duration: Option<String>,
    /// Seed for context draws and prompt text (default 0). Same seed, same prompts.
    pub seed: Option<u64>,
    /// Protocol name recorded as the artifact's `measurement_protocol`.
    pub protocol: Option<String>,
    /// Free-form tier label recorded as the artifact's `tier`.
    pub tier: Option<String>,
    /// Clock-domain label recorded as `clock_domain_id`: give two runs the same label only when
    /// their Unix timestamps may be compared.
    pub clock_domain_id: Option<String>,
    /// Leading requests kept out of the distributions: a count (`20`) or a time (`"30s"`).
    pub warmup: Option<RawPhaseLength>,
    /// Trailing requests kept out of the distributions: a count or a time before the end.
    pub cooldown: Option<RawPhaseLength>,
    /// After `duration`, how long in-flight requests may finish before they are cut and counted
    /// as interrupted (default `"30s"`). Also the wait after Ctrl-C.
    pub grace: Option<String>,
    /// How often a window snapshot is taken (default `"60s"`); `"0s"` turns snapshots off.
    pub snapshot_interval: Option<String>,
    /// Keep the per-request records file `<out>/<run_id>.records.ndjson` (default `false`;
    /// `--records FILE` chooses the file).
    pub records: Option<bool>,
    /// `"ndjson"` (default): the records file only; `"parquet"`: also the run's records as one
    /// Parquet table, `<out>/<run_id>.records.parquet`, written when the run ends.
    pub records_format: Option<RecordsFormat>,
    /// How often the server's metrics are scraped between the start and the end of each level
    /// (default `"5s"`, from `"100ms"` to `"10m"`); needs `target.metrics` or `target.metrics_url`.
    pub metrics_interval: Option<String>,
    /// The address the client's own `/metrics` listens on during the run (`"127.0.0.1:9464"`;
    /// port 0 takes a free port; `":9464"` every interface).
    pub metrics_listen: Option<String>,
    /// How long the client's `/metrics` stays up after the run (default `"0s"`), so that a last
    /// scrape sees the final counts; needs `run.metrics_listen`.
    pub metrics_linger: Option<String>,
    /// Push the client's live metrics to this Prometheus remote write URL
    /// (`"http://host:9090/api/v1/write"`) every `push_interval` and at the end.
    pub remote_write: Option<String>,
    /// Push the client's live metrics to this OTLP/HTTP metrics URL
    /// (`"http://host:4318/v1/metrics"`) every `push_interval` and at the end.
    pub otlp: Option<String>,
    /// How often the live metrics are pushed (default `"10s"`, from `"100ms"` to `"10m"`);
    /// needs `remote_write` or `otlp`.
    pub push_interval: Option<String>,
    /// The environment variable holding a bearer token sent with every push.
    pub push_token_env: Option<String>,
}

/// A number of requests or a duration.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "expected a number of requests (20) or a duration (\"30s\")")]
pub enum RawPhaseLength {
    Requests(i64),
    Time(String),
}

/// `[load]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoad {
    /// Reset the server's prefix cache before each level: `"vllm"`, `"sglang"`, `"llamacpp"` or
    /// `"none"` (default).
    pub reset_cache: Option<String>,
    /// `"closed"` (default: a fixed number of requests in flight) or `"open"` (requests arrive
    /// on a schedule at `rate`, whatever the server does).
    pub mode: Option<RawLoadMode>,
    /// Closed loop: requests in flight, one level (`4`) or a sweep (`[1, 2, 4, 8]`). Default 1.
    pub concurrency: Option<Levels>,
    /// Closed loop: a ceiling on requests started per second (token bucket), across workers.
    pub max_rate: Option<f64>,
    /// Open loop: arrivals per second, one level (`200`) or a sweep (`[50, 100, 200]`).
    pub rate: Option<Levels>,
    /// Open loop: `"poisson"` (default), `"constant"` or `"gamma"`.
    pub arrival: Option<RawArrival>,
    /// `gamma` only: the shape of the gaps (1 = Poisson, below 1 burstier, above 1 smoother).
    pub burstiness: Option<f64>,
    /// Open loop: ramp the rate linearly from zero to `rate` over this long (e.g. `"30s"`).
    pub ramp: Option<String>,
    /// Open loop: at most this many requests in flight; see `overload`.
    pub max_in_flight: Option<i64>,
    /// Open loop, with `max_in_flight`: `"queue"` (default: late arrivals wait for a slot and the
    /// wait is measured) or `"drop"` (they are counted and listed, not sent).
    pub overload: Option<Overload>,
    /// A run whose dispatch lag p99 exceeds this is marked invalid (default `"5ms"`).
    pub max_dispatch_lag: Option<String>,
    /// A level whose client lateness p99 (how late the client's runtime woke a probe task)
    /// exceeds this is marked invalid (default `"10ms"`).
    pub max_client_lateness: Option<String>,
    /// Conversations (`[workload.sessions]`): conversations held at once, through their think
    /// time; a list is a sweep.
    pub sessions: Option<Levels>,
    /// Conversations: at most this many requests in flight across them.
    pub in_flight: Option<i64>,
    /// Capacity search: `"concurrency"` (closed loop) or `"rate"` (open loop): find the highest
    /// level that meets every `[slo]`.
    pub search: Option<SearchBy>,
    /// Search: the first level tried (default 1).
    pub search_min: Option<f64>,
    /// Search: the highest level tried (default 1024).
    pub search_max: Option<f64>,
    /// Search: at most this many levels probed (default 12).
    pub search_steps: Option<i64>,
}

/// One level or a list of levels.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "expected a number or a list of numbers, e.g. 4 or [1, 2, 4]")]
pub enum Levels {
    One(f64),
    Many(Vec<f64>),
}

pub use super::RecordsFormat;

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawLoadMode {
    Closed,
    Open,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawArrival {
    Constant,
    Poisson,
    Gamma,
}

/// `[workload]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    /// Planned context per request, in tokens: one size (`65536`), a weighted mixture
    /// (`{ 4096 = 3, 65536 = 1 }`), `{ uniform = [lo, hi] }` or `{ normal = [mean, sd] }`,
    /// drawn per request from the seed. Not used with `prompts`.
    pub context_tokens: Option<toml::Value>,
    /// How prompts are sized to the server's token count: `"calibrate"` (default: probe the
    /// server), `"estimate"` (built-in estimate, no probe) or a path to a local `tokenizer.json`.
    pub tokenizer: Option<String>,
    /// The server's context window. Every planned context plus `max_tokens` must fit in it.
    pub max_context_tokens: i64,
    /// Output budget sent as `max_tokens` in each request.
    pub max_tokens: i64,
    /// Prefix-cache mode: `"unique"` (every prompt starts with a unique prefix) or
    /// `"shared-prefix"` (every prompt starts with the same `shared_prefix_tokens`).
    #[serde(default)]
    pub prompt_cache: RawPromptCache,
    /// Keep prompts identical across runs with the same seed (default `false`: prompts are
    /// salted with the run id so no earlier run can have warmed the cache).
    pub reproducible: Option<bool>,
    /// `shared-prefix` only: tokens of text every prompt starts with.
    pub shared_prefix_tokens: Option<i64>,
    /// `shared-prefix` only: one request warms the prefix, then the others are released together.
    pub shared_prefix_burst: Option<bool>,
    /// Prompts from a file instead of synthetic text: JSON Lines (`{"prompt": ...}`,
    /// `{"messages": [...]}` or a string per line) or a ShareGPT-style JSON array.
    pub prompts: Option<String>,
    /// Ask each response to begin with a per-request marker and check it (default `true`).
    /// Set `false` for models that cannot follow the instruction.
    pub canaries: Option<bool>,
    /// `[workload.trace]`: replay a production trace (prompt sizes, shared blocks, output
    /// lengths and times) instead of drawn prompts.
    pub trace: Option<RawTrace>,
    /// `[workload.sessions]`: multi-turn conversations instead of single prompts.
    pub sessions: Option<RawSessions>,
    /// `api = "embeddings"`: inputs per request; `api = "rerank"`: documents per request
    /// (default 1). Each is a prompt of the planned context.
    pub batch_size: Option<i64>,
    /// `api = "completions"`: `"text"` (default) or `"token_ids"`, which sends `prompt` as the
    /// token ids of the local tokenizer (`workload.tokenizer`), exactly the planned length.
    pub prompt_encoding: Option<PromptEncoding>,
    /// `[workload.response_format]`: structured output asked of every answer and checked.
    pub response_format: Option<super::structured_rules::RawResponseFormat>,
    /// `[workload.tools]`: the tool set every request offers, and `tool_choice`.
    pub tools: Option<RawTools>,
    /// `[workload.media]`: images and audio sent with each prompt (see media.md).
    pub media: Option<super::media_rules::RawMedia>,
}

/// `[workload.tools]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTools {
    /// Synthetic tools in the set (default 8).
    pub count: Option<i64>,
    /// Parameters of each synthetic tool (default 6).
    pub properties: Option<i64>,
    /// Words of each synthetic tool's description (default 40).
    pub description_words: Option<i64>,
    /// A JSON array of tool definitions instead of synthetic tools.
    pub file: Option<String>,
    /// `auto` (default), `required`, `none` or a tool's name.
    pub tool_choice: Option<String>,
    /// Agent sessions (with `[workload.sessions]`): most tool turns after one user turn.
    pub max_tool_turns: Option<i64>,
    /// Agent sessions: tokens of each tool result fed back (a count or a distribution).
    pub result_tokens: Option<toml::Value>,
    /// Agent sessions: the tool's latency, slept before a tool turn (e.g. `"200ms"`, or a
    /// distribution).
    pub latency: Option<toml::Value>,
}

/// `[workload.trace]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrace {
    /// The trace file, relative to the scenario file.
    pub file: String,
    /// `"mooncake"`, `"azure"`, `"burstgpt"`, `"bailian"` or `"jsonl"`.
    pub format: String,
    /// Tokens per hash id (default: 512 for Mooncake, 16 for Bailian; required for `jsonl`
    /// rows with hash ids).
    pub block_size: Option<i64>,
    /// Intended send time = start + `time_scale` × the row's offset (default 1; 0.1 replays ten
    /// times faster).
    pub time_scale: Option<f64>,
    /// Idle gaps longer than this on the trace's clock are shortened to it (e.g. `"5s"`).
    pub max_gap: Option<String>,
    /// Only rows whose offset from the trace's first row lies in `[start, end)`, e.g.
    /// `["10m", "20m"]`.
    pub window: Option<Vec<String>>,
    /// Replay this fraction of sessions (whole sessions; rows without one count as sessions of
    /// their own), chosen by `run.seed`.
    pub sample: Option<f64>,
    /// Session traces: `"open"` (each row at its own time; the only mode so far).
    pub replay: Option<String>,
}

/// `[workload.sessions]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    /// Conversations started per level.
    pub conversations: Option<i64>,
    /// Turns per conversation: `4`, `{ uniform = [2, 6] }`, `{ normal = [4, 1], min = 1 }`.
    pub turns: Option<toml::Value>,
    /// Tokens of the whole first prompt (system prompt and first user message).
    pub first_tokens: Option<toml::Value>,
    /// New user tokens in each later turn.
    pub user_tokens: Option<toml::Value>,
    /// Output tokens per turn (default: `workload.max_tokens`).
    pub output_tokens: Option<toml::Value>,
    /// The wait between a response's end and the next turn: `"2s"`, `{ uniform = ["1s", "3s"] }`.
    pub think_time: Option<toml::Value>,
    /// Tokens of a system prompt shared by the conversations of a group (default 0: none).
    pub system_prompt_tokens: Option<i64>,
    /// Distinct system prompts (default 1).
    pub system_prompt_groups: Option<i64>,
    /// Choose groups with Zipf weights of this exponent (default: uniformly).
    pub system_prompt_zipf: Option<f64>,
    /// `"live"` (default: the model's answers) or `"recorded"` (the dataset's answers).
    pub history: Option<String>,
    /// `"drop"` (default) or `"keep"`: reasoning text in the history.
    pub history_reasoning: Option<String>,
    /// Request headers carrying the conversation's id (default `["X-Session-ID"]`).
    pub affinity_headers: Option<Vec<String>>,
    /// A response header sent back on the conversation's later turns (e.g. `x-session-token`).
    pub echo_header: Option<String>,
    /// A response header naming the backend that served a request, recorded per request.
    pub backend_header: Option<String>,
    /// Conversations from a file: a ShareGPT JSON array (every turn) or OpenAI `messages` JSONL.
    pub dataset: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RawPromptCache {
    #[default]
    Unique,
    SharedPrefix,
}

/// `[output]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// Generate exactly `max_tokens` tokens, ignoring end-of-sequence (sent as `ignore_eos`).
    #[serde(default)]
    pub ignore_eos: bool,
    /// Generate at least this many tokens (vLLM and SGLang `min_tokens`).
    pub min_tokens: Option<i64>,
    /// Ask for a visible answer of exactly this many words, and check it.
    pub response_words: Option<i64>,
    /// `"observe"` (default: record adherence) or `"strict"` (exclude responses that are not
    /// exactly `response_words` long or were truncated).
    pub controlled_output_policy: Option<ControlledOutputPolicy>,
}

/// `[sampling]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSampling {
    /// Sampling temperature; omitted from requests (server default) when not set.
    pub temperature: Option<f64>,
    /// Nucleus sampling `top_p`; omitted from requests when not set.
    pub top_p: Option<f64>,
}

/// `[serve]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServe {
    /// `"default"` (send nothing), `"enabled"` or `"disabled"`: sent as
    /// `chat_template_kwargs.enable_thinking` (Qwen3-style templates in vLLM, SGLang, llama.cpp).
    #[serde(default)]
    pub thinking_mode: ThinkingMode,
    /// Sent as the request's `reasoning_effort` (`"low"`, `"medium"`, `"high"`).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Shorthand for `thinking_mode = "disabled"`; contradicts `thinking_mode = "enabled"`.
    #[serde(default)]
    pub no_thinking: bool,
}

/// `[client]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClient {
    /// Time allowed to open a connection (default `"10s"`).
    pub connect_timeout: Option<String>,
    /// Time allowed from sending a request to its first output, a non-empty reasoning or content
    /// delta (default `"10m"`: long prompts on a busy server take minutes to prefill).
    pub first_byte_timeout: Option<String>,
    /// After the first output, the longest time without progress (text, a finish reason, usage
    /// or `[DONE]`; default `"2m"`).
    pub idle_timeout: Option<String>,
    /// The whole request, from sending to `[DONE]` (default: `first_byte_timeout` plus one
    /// second per `max_tokens`).
    pub request_timeout: Option<String>,
    /// Retries per request for the failure kinds in `retry_on` (default 0: retries distort
    /// measurements and are off unless asked for).
    pub retries: Option<i64>,
    /// Failure kinds retried (default: connection failures, HTTP 429, 502, 503, 504).
    pub retry_on: Option<Vec<String>>,
    /// Wait before the first retry, doubled for each further one (default `"500ms"`); a
    /// `Retry-After` header wins.
    pub retry_backoff: Option<String>,
    /// Speak HTTP/2 with prior knowledge (default `false`: HTTP/1.1 with keep-alive, one
    /// connection per in-flight request, which is what engines' OpenAI servers expect).
    pub http2: Option<bool>,
}
