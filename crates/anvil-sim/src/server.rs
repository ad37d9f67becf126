//! HTTP routes of the mock server and the handling of one generation request, from raw body
//! to response: validation, prompt accounting, prefix cache, output plan, then a streamed or
//! a complete answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::api_wire::{ApiEvents, WireApi};
use super::contamination::MarkerRegistry;
use super::faults::{FaultKind, Injection};
use super::ground_truth::{GroundTruthRecord, GroundTruthStore, Recorder};
use super::plan::{TextSource, plan_output};
use super::prefix_cache::{PrefixCache, prompt_seed};
use super::profile::Profile;
use super::request::{self, DEFAULT_MODEL};
use super::restart::{RestartState, RestartWatch};
use super::stats::MockStats;
use super::stream::{ActiveGuard, Generation, sse_stream};
use super::tokenize::PromptKind;
use super::wire::{self, ChunkWriter, ResponseIds, Usage};

/// Request bodies above this are refused. Generous: a prompt at the largest context limits
/// engines offer is a few megabytes of JSON.
pub(super) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Shared by every handler.
pub(crate) struct AppState {
    pub profile: Arc<Profile>,
    pub stats: Arc<MockStats>,
    pub cache: PrefixCache,
    /// Generation requests received so far; numbers each one for its fault draw and the restart.
    pub requests: AtomicU64,
    /// Answers routed round robin (`profile.backends`, requests without a session).
    pub routed: AtomicU64,
    pub restart: Arc<RestartState>,
    /// Present only when answers can be contaminated.
    pub markers: Option<Arc<MarkerRegistry>>,
    pub ground_truth: Arc<GroundTruthStore>,
    /// Loaded from `profile.tokenizer`, when set.
    pub tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    /// The profile of each adapter with its own decode speed (see `lora`).
    pub lora_profiles: std::collections::BTreeMap<String, Arc<Profile>>,
}

impl AppState {
    pub fn new(
        profile: Profile,
        stats: Arc<MockStats>,
        ground_truth: Arc<GroundTruthStore>,
        tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    ) -> AppState {
        let downtime = std::time::Duration::from_millis(profile.faults.restart_downtime_ms);
        AppState {
            tokenizer,
            restart: Arc::new(RestartState::new(profile.faults.restart_after_requests, downtime)),
            markers: profile.faults.contaminates().then(|| Arc::new(MarkerRegistry::new())),
            lora_profiles: super::lora::profiles(&Arc::new(profile.clone())),
            profile: Arc::new(profile),
            stats,
            cache: PrefixCache::new(),
            requests: AtomicU64::new(0),
            routed: AtomicU64::new(0),
            ground_truth,
        }
    }
}

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/embeddings", post(super::pooling::embeddings))
        .route("/v1/rerank", post(super::pooling::rerank))
        .route("/v1/models", get(models))
        // Azure OpenAI's shapes: a deployment's endpoints (which has no /models) and the v1 API.
        .route("/openai/deployments/{deployment}/chat/completions", post(chat_completions))
        .route("/openai/deployments/{deployment}/completions", post(completions))
        .route("/openai/deployments/{deployment}/embeddings", post(super::pooling::embeddings))
        .route("/openai/v1/chat/completions", post(chat_completions))
        .route("/openai/v1/completions", post(completions))
        .route("/openai/v1/embeddings", post(super::pooling::embeddings))
        .route("/openai/v1/models", get(models))
        .route("/health", get(health))
        .route("/mock/stats", get(mock_stats))
        .route("/mock/seen", get(mock_seen))
        .route("/mock/profile", get(mock_profile))
        .route("/mock/ground-truth", get(mock_ground_truth))
        .route("/metrics", get(prometheus_metrics))
        .route("/dcgm/metrics", get(dcgm_metrics))
        .route("/reset_prefix_cache", post(super::lora::reset_prefix_cache))
        .route("/flush_cache", post(super::lora::flush_cache))
        .route("/slots", get(super::lora::slots))
        .route("/slots/{id}", post(super::lora::slot_action))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), super::seen::record))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), super::auth::gate))
        .with_state(state)
}

async fn chat_completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    routed(&state, &headers, generate(&state, PromptKind::Chat, WireApi::OpenAi, body).await)
}

async fn completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    routed(&state, &headers, generate(&state, PromptKind::Completion, WireApi::OpenAi, body).await)
}

async fn responses(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    routed(&state, &headers, generate(&state, PromptKind::Chat, WireApi::Responses, body).await)
}

async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    routed(&state, &headers, generate(&state, PromptKind::Chat, WireApi::Messages, body).await)
}

/// The response header naming the (simulated) backend behind a router.
const BACKEND_HEADER: &str = "x-anvil-backend";

/// With `profile.backends`, name the backend that served a successful answer: the one the
/// request asks for (echoed), else the one its session hashes to, else the next in turn.
fn routed(state: &AppState, headers: &HeaderMap, mut response: Response) -> Response {
    let n = state.profile.backends;
    if n == 0 || !response.status().is_success() {
        return response;
    }
    let asked = headers
        .get(BACKEND_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("backend-")?.parse::<u32>().ok())
        .filter(|k| *k < n);
    let by_session = headers.get("x-session-id").map(|v| {
        let h = v
            .as_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        (h % u64::from(n)) as u32
    });
    let k =
        asked.or(by_session).unwrap_or_else(|| (state.routed.fetch_add(1, Ordering::Relaxed) % u64::from(n)) as u32);
    if let Ok(value) = HeaderValue::from_str(&format!("backend-{k}")) {
        response.headers_mut().insert(BACKEND_HEADER, value);
    }
    response
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    let data = super::lora::listing(&state.profile, DEFAULT_MODEL);
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn mock_stats(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(state.stats.snapshot()).into_response()
}

async fn mock_seen(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(state.stats.seen()).into_response()
}

async fn mock_profile(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(&*state.profile).into_response()
}

async fn prometheus_metrics(State(state): State<Arc<AppState>>) -> Response {
    let body = super::metrics::render(&state.profile, &state.stats.since_restart());
    ([(CONTENT_TYPE, HeaderValue::from_static(super::metrics::CONTENT_TYPE))], body).into_response()
}

async fn dcgm_metrics(State(state): State<Arc<AppState>>) -> Response {
    // The GPU's counters run since boot: a simulated engine restart does not reset them.
    let body = super::gpu::render(&state.stats.snapshot());
    ([(CONTENT_TYPE, HeaderValue::from_static(super::metrics::CONTENT_TYPE))], body).into_response()
}

#[derive(Serialize)]
struct GroundTruthBody {
    requests: Vec<GroundTruthRecord>,
}

async fn mock_ground_truth(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(GroundTruthBody { requests: state.ground_truth.records() }).into_response()
}

/// An error answer. Errors always close the connection, as llama.cpp's do.
pub(super) fn reject(state: &AppState, status: StatusCode, body: Value) -> Response {
    MockStats::add(&state.stats.requests_rejected, 1);
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The answer of an HTTP error fault; `None` for the other kinds.
fn fault_response(state: &AppState, kind: FaultKind) -> Option<Response> {
    let (status, retry_after, body) = kind.http_error()?;
    state.stats.count_fault(kind.counter());
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = reject(state, status, body);
    if retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    Some(response)
}

async fn generate(state: &AppState, kind: PromptKind, api: WireApi, body: Body) -> Response {
    let arrival = Instant::now();
    MockStats::add(&state.stats.requests_received, 1);
    let n = state.requests.fetch_add(1, Ordering::Relaxed) + 1;
    let injection = if state.profile.faults.any() { state.profile.faults.draw(n) } else { None };
    // Lives until the response has ended (moved into the generation when there is one).
    let restart = state.restart.watch(n);
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(err) => {
            let message = format!("could not read the request body: {err}");
            return reject(state, StatusCode::BAD_REQUEST, wire::invalid_request_body(&message));
        }
    };
    // Like an overloaded server or a gateway: refused without looking at the request.
    if let Some(response) = injection.and_then(|injection| fault_response(state, injection.kind)) {
        return response;
    }
    let mut value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(err) => {
            let message = format!("request body is not valid JSON: {err}");
            return reject(state, StatusCode::INTERNAL_SERVER_ERROR, wire::server_error_body(&message));
        }
    };
    drop(bytes);
    let exact_tokens = match kind {
        PromptKind::Completion => super::api_prompts::token_id_prompt(&mut value, state.tokenizer.as_deref()),
        PromptKind::Chat => None,
    };
    // Media named by URL are fetched first, as an engine fetches them.
    let fetched = match super::media::fetch_urls(&value).await {
        Ok(fetched) => fetched,
        Err(message) => return reject(state, StatusCode::BAD_REQUEST, wire::invalid_request_body(&message)),
    };
    match accept(state, (kind, api, exact_tokens, &fetched), &value, arrival, injection, restart) {
        Accepted::Respond(response) => response,
        Accepted::Full(generation, body) => full_response(state, *generation, body).await,
    }
}

enum Accepted {
    /// An SSE response (its body paces itself), or a rejection.
    Respond(Response),
    /// A non-streamed answer still to be waited for; the body is already rendered.
    Full(Box<Generation>, Value),
}

/// Everything up to the point where time has to pass. Synchronous, so the borrow of the
/// parsed body ends before the first `.await`.
fn accept(
    state: &AppState,
    (kind, api, exact_tokens, fetched): (PromptKind, WireApi, Option<u32>, &super::media::Fetched),
    value: &Value,
    arrival: Instant,
    injection: Option<Injection>,
    restart: Option<RestartWatch>,
) -> Accepted {
    let profile = &state.profile;
    let mut req = match request::parse_api(kind, api, value) {
        Ok(req) => req,
        Err(message) => {
            let body = wire::invalid_request_body(&message);
            return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
        }
    };
    // vLLM serves only the names it was started with (`--served-model-name`).
    if !profile.serves(req.model) {
        let body = wire::model_not_found_body(req.model);
        return Accepted::Respond(reject(state, StatusCode::NOT_FOUND, body));
    }
    state.stats.models.request(req.model);
    // An adapter with its own speed answers with its own profile.
    let profile = state.lora_profiles.get(req.model).unwrap_or(profile);
    if profile.llamacpp_conversions {
        // What llama.cpp's conversion to a chat request keeps and refuses (see the field).
        match api {
            WireApi::Messages => (req.ignore_eos, req.min_tokens) = (false, 0),
            WireApi::Responses => {
                if let Some(message) = super::api_prompts::llamacpp_unplaceable_item(value) {
                    let body = wire::invalid_request_body(&message);
                    return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
                }
            }
            WireApi::OpenAi => {}
        }
    }
    if !req.stream && api != WireApi::OpenAi {
        let body = wire::invalid_request_body("the simulator answers this API streamed only: set stream = true");
        return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
    }
    req.prompt.tokenizer = state.tokenizer.as_deref();
    req.prompt.default_system_tokens = profile.default_system_prompt_tokens;
    // Images and audio: read, counted by the media rule, prefilled like the text.
    let media = match super::media::scan(value, fetched) {
        Ok(media) => media,
        Err(message) => {
            let body = wire::invalid_request_body(&message);
            return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
        }
    };
    // Token ids are counted as they are; text by the simulator's own rule.
    let prompt_tokens = exact_tokens.unwrap_or_else(|| req.prompt.token_count()).saturating_add(media.tokens as u32);
    if prompt_tokens > profile.context_limit {
        let body = wire::context_error_body(prompt_tokens, profile.context_limit);
        return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
    }
    let seed = prompt_seed(&req.prompt);
    let json = super::structured::requested_schema(value).map(|schema| {
        let faults = (profile.faults.fault_seed, profile.faults.schema_invalid_rate);
        super::structured::answer(&schema, seed, faults, &state.stats.schema)
    });
    req.content_tokens = json.as_ref().map(|t| u32::try_from(t.len()).unwrap_or(u32::MAX).max(1));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let plan = plan_output(profile, &req, prompt_tokens, &mut rng);
    // Tool calls, streamed only (chat, Responses, Messages; see `tool_call`).
    let tool = (req.stream && !(api == WireApi::OpenAi && kind == PromptKind::Completion))
        .then(|| {
            let f = profile.faults.invalid_tool_arguments;
            super::tool_call::plan(api, value, profile.tool_turns, f, &state.stats.tools)
        })
        .flatten();
    let plan = tool.as_ref().map_or(plan, |call| super::tool_call::output_plan(call, req.max_tokens));
    let ids = ResponseIds::new(kind, req.model);
    let mut text = TextSource::new(seed, req.canary);
    if let Some(tokens) = json {
        text = text.with_json(tokens);
    }
    let contamination = injection
        .map(|injection| injection.kind)
        .filter(|kind| matches!(kind, FaultKind::ContaminationSwapped | FaultKind::ContaminationMerged));
    if let (Some(kind), Some(markers)) = (contamination, &state.markers) {
        let index = if kind == FaultKind::ContaminationSwapped { 0 } else { (plan.content / 2).max(1) };
        // A merged marker needs a second content token to replace; without one nothing is
        // injected (and nothing counted).
        if index < plan.content {
            let foreign = if profile.faults.cross_session {
                markers.foreign_session(req.canary)
            } else {
                markers.foreign(req.canary)
            };
            text.contaminate(index, foreign);
        }
    }
    let cached_tokens = if profile.prefix_cache {
        // The answer is known now (it is drawn from the prompt): the cache keeps its tokens as
        // a continuation of the prompt, so a conversation's next turn finds them.
        let mut answer = String::new();
        let mut words = text.clone();
        words.push_reasoning(&mut answer, plan.reasoning);
        answer.push(' ');
        words.push_content(&mut answer, plan.content);
        // Capped: a token-id prompt's text may walk to more tokens than its ids.
        state.cache.lookup_and_insert_answered(&req.prompt, prompt_tokens, &answer).min(prompt_tokens)
    } else {
        0
    };
    MockStats::add(&state.stats.prompt_tokens, u64::from(prompt_tokens));
    state.stats.count_media(&media);
    MockStats::add(&state.stats.cached_tokens, u64::from(cached_tokens));
    let mut guard = ActiveGuard::new(Arc::clone(&state.stats));
    guard.restart = restart;
    if let (Some(markers), Some(canary)) = (&state.markers, req.canary) {
        guard.marker = Some(markers.enter(canary));
    }
    let mut generation = Generation {
        profile: Arc::clone(profile),
        kind,
        plan,
        text,
        usage: Usage::new(prompt_tokens, cached_tokens, plan.completion_tokens),
        include_usage: req.include_usage,
        continuous_usage: req.continuous_usage,
        arrival,
        uncached_tokens: prompt_tokens - cached_tokens,
        guard,
        fault: injection.filter(|injection| req.stream && injection.kind.stream_only()),
        contamination,
        tool: tool.clone().map(Box::new),
    };
    let reasoning_key = profile.reasoning_field.key();

    if !req.stream {
        let mut reasoning = String::new();
        let mut content = String::new();
        generation.text.push_reasoning(&mut reasoning, generation.plan.reasoning);
        let contaminated = generation.text.push_content(&mut content, generation.plan.content);
        // Counted once the body goes out.
        generation.contamination = contamination.filter(|_| contaminated);
        let body = wire::full_body(kind, &ids, reasoning_key, &reasoning, &content, plan.finish, &generation.usage);
        return Accepted::Full(Box::new(generation), body);
    }

    let mut writer = ChunkWriter::new(kind, reasoning_key, &ids);
    if let Some(call) = &tool {
        writer = writer.with_tool(call);
    }
    if api != WireApi::OpenAi {
        let mut events = ApiEvents::new(api, &ids, plan.reasoning, generation.usage);
        if let Some(call) = &tool {
            events = events.with_tool(call);
        }
        writer = writer.with_events(events.completed_at_budget(profile.llamacpp_conversions));
    }
    let recorder = profile.record_ground_truth.then(|| {
        let per_chunk = profile.tokens_per_chunk.max(1);
        // Role, finish, usage, done and a spare on top of the deltas.
        let events = usize::try_from(plan.total().div_ceil(per_chunk)).unwrap_or(0).saturating_add(5);
        Recorder::new(&state.ground_truth, req.canary, arrival, events)
    });
    let mut response = Response::new(Body::from_stream(sse_stream(generation, writer, recorder)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if profile.close_connection {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Accepted::Respond(response)
}

/// Waits for the simulated generation, then answers with the whole body. A client that
/// leaves meanwhile drops this future, and with it the guard, which counts the disconnect.
async fn full_response(state: &AppState, mut generation: Generation, body: Value) -> Response {
    generation.wait_until_generated().await;
    if let Some(kind) = generation.contamination {
        state.stats.count_fault(kind.counter());
    }
    generation.guard.complete(generation.plan.completion_tokens);
    let mut response = axum::Json(body).into_response();
    if state.profile.close_connection {
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
