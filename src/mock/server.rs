//! HTTP routes of the mock server and the handling of one generation request, from raw body
//! to response: validation, prompt accounting, prefix cache, output plan, then a streamed or
//! a complete answer.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::plan::{TextSource, plan_output};
use super::prefix_cache::{PrefixCache, prompt_seed};
use super::profile::Profile;
use super::request::{self, DEFAULT_MODEL};
use super::stats::MockStats;
use super::stream::{ActiveGuard, Generation, sse_stream};
use super::tokenize::PromptKind;
use super::wire::{self, ChunkWriter, ResponseIds, Usage};

/// Request bodies above this are refused. Generous: a prompt at the largest context limits
/// engines offer is a few megabytes of JSON.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Shared by every handler.
pub(crate) struct AppState {
    pub profile: Arc<Profile>,
    pub stats: Arc<MockStats>,
    pub cache: PrefixCache,
}

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/mock/stats", get(mock_stats))
        .route("/mock/profile", get(mock_profile))
        .with_state(state)
}

async fn chat_completions(State(state): State<Arc<AppState>>, body: Body) -> Response {
    generate(&state, PromptKind::Chat, body).await
}

async fn completions(State(state): State<Arc<AppState>>, body: Body) -> Response {
    generate(&state, PromptKind::Completion, body).await
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": DEFAULT_MODEL, "object": "model", "owned_by": "anvil-load"}],
    }))
    .into_response()
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn mock_stats(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(state.stats.snapshot()).into_response()
}

async fn mock_profile(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(&*state.profile).into_response()
}

/// An error answer. Errors always close the connection, as llama.cpp's do.
fn reject(state: &AppState, status: StatusCode, body: Value) -> Response {
    MockStats::add(&state.stats.requests_rejected, 1);
    let mut response = (status, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn generate(state: &AppState, kind: PromptKind, body: Body) -> Response {
    let arrival = Instant::now();
    MockStats::add(&state.stats.requests_received, 1);
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(err) => {
            let message = format!("could not read the request body: {err}");
            return reject(
                state,
                StatusCode::BAD_REQUEST,
                wire::invalid_request_body(&message),
            );
        }
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(err) => {
            let message = format!("request body is not valid JSON: {err}");
            return reject(
                state,
                StatusCode::INTERNAL_SERVER_ERROR,
                wire::server_error_body(&message),
            );
        }
    };
    drop(bytes);
    match accept(state, kind, &value, arrival) {
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
fn accept(state: &AppState, kind: PromptKind, value: &Value, arrival: Instant) -> Accepted {
    let profile = &state.profile;
    let req = match request::parse(kind, value) {
        Ok(req) => req,
        Err(message) => {
            let body = wire::invalid_request_body(&message);
            return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
        }
    };
    let prompt_tokens = req.prompt.token_count();
    if prompt_tokens > profile.context_limit {
        let body = wire::context_error_body(prompt_tokens, profile.context_limit);
        return Accepted::Respond(reject(state, StatusCode::BAD_REQUEST, body));
    }
    let cached_tokens = if profile.prefix_cache {
        state.cache.lookup_and_insert(&req.prompt, prompt_tokens)
    } else {
        0
    };
    MockStats::add(&state.stats.prompt_tokens, u64::from(prompt_tokens));
    MockStats::add(&state.stats.cached_tokens, u64::from(cached_tokens));

    let seed = prompt_seed(&req.prompt);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let plan = plan_output(profile, &req, prompt_tokens, &mut rng);
    let ids = ResponseIds::new(kind, req.model);
    let generation = Generation {
        profile: Arc::clone(profile),
        kind,
        plan,
        text: TextSource::new(seed, req.canary),
        usage: Usage::new(prompt_tokens, cached_tokens, plan.completion_tokens),
        include_usage: req.include_usage,
        arrival,
        uncached_tokens: prompt_tokens - cached_tokens,
        guard: ActiveGuard::new(Arc::clone(&state.stats)),
    };
    let reasoning_key = profile.reasoning_field.key();

    if !req.stream {
        let mut generation = generation;
        let mut reasoning = String::new();
        let mut content = String::new();
        generation
            .text
            .push_reasoning(&mut reasoning, generation.plan.reasoning);
        generation
            .text
            .push_content(&mut content, generation.plan.content);
        let body = wire::full_body(
            kind,
            &ids,
            reasoning_key,
            &reasoning,
            &content,
            plan.finish,
            &generation.usage,
        );
        return Accepted::Full(Box::new(generation), body);
    }

    let writer = ChunkWriter::new(kind, reasoning_key, &ids);
    let mut response = Response::new(Body::from_stream(sse_stream(generation, writer)));
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
    generation.guard.complete(generation.plan.completion_tokens);
    let mut response = axum::Json(body).into_response();
    if state.profile.close_connection {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
