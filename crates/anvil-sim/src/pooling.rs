//! `/v1/embeddings` and `/v1/rerank`: one JSON answer per request, after a prefill-only wait
//! (the profile's prefill rate at the current load), with usage counted by the simulator's own
//! rule: per input (or per query and document pair) a start token plus its text.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::server::{AppState, MAX_BODY_BYTES, reject};
use super::stats::MockStats;
use super::stream::ActiveGuard;
use super::tokenize::{Message, Prompt, PromptKind};
use super::wire;

/// Dimensions of the simulated embedding vectors (small: the answer's size is not the point).
const DIMENSIONS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Embeddings,
    Rerank,
}

pub(crate) async fn embeddings(State(state): State<Arc<AppState>>, body: Body) -> Response {
    answer(&state, Pooling::Embeddings, body).await
}

pub(crate) async fn rerank(State(state): State<Arc<AppState>>, body: Body) -> Response {
    answer(&state, Pooling::Rerank, body).await
}

async fn answer(state: &AppState, api: Pooling, body: Body) -> Response {
    let arrival = Instant::now();
    MockStats::add(&state.stats.requests_received, 1);
    let value: Value = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            Err(err) => {
                let body = wire::invalid_request_body(&format!("request body is not valid JSON: {err}"));
                return reject(state, StatusCode::BAD_REQUEST, body);
            }
        },
        Err(err) => {
            let body = wire::invalid_request_body(&format!("could not read the request body: {err}"));
            return reject(state, StatusCode::BAD_REQUEST, body);
        }
    };
    if !state.profile.serves(model(&value)) {
        return reject(state, StatusCode::NOT_FOUND, wire::model_not_found_body(model(&value)));
    }
    let tokenizer = state.tokenizer.as_deref();
    let read = match api {
        Pooling::Embeddings => read_embeddings(&value, tokenizer),
        Pooling::Rerank => read_rerank(&value, tokenizer),
    };
    let (tokens, body) = match read {
        Ok(read) => read,
        Err(message) => return reject(state, StatusCode::BAD_REQUEST, wire::invalid_request_body(&message)),
    };
    MockStats::add(&state.stats.prompt_tokens, u64::from(tokens));
    // Counted active while it waits; a client that leaves drops this future and the guard
    // counts the disconnect.
    let mut guard = ActiveGuard::new(Arc::clone(&state.stats));
    let factor = state.profile.load_factor(state.stats.active());
    let ready = arrival + state.profile.prefill_time(tokens, factor);
    if ready > Instant::now() {
        tokio::time::sleep_until(ready).await;
    }
    guard.complete(0);
    axum::Json(body).into_response()
}

/// Tokens of texts read one after another behind one start token.
fn count(texts: &[&str], tokenizer: Option<&tokenizers::Tokenizer>) -> u32 {
    let prompt = Prompt {
        kind: PromptKind::Completion,
        messages: vec![Message { role: "", parts: texts.to_vec() }],
        tokenizer,
        default_system_tokens: 0,
    };
    prompt.token_count()
}

/// A stable number in [0, 1) from a text.
fn unit(text: &str, salt: u64) -> f64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn model(value: &Value) -> &str {
    value.get("model").and_then(Value::as_str).unwrap_or(super::request::DEFAULT_MODEL)
}

/// `input`: a string, an array of strings, or token ids (an array of integers, or of arrays).
fn read_embeddings(value: &Value, tokenizer: Option<&tokenizers::Tokenizer>) -> Result<(u32, Value), String> {
    let Some(input) = value.get("input") else { return Err("'input' is required".into()) };
    let items: Vec<Value> = match input {
        Value::String(_) => vec![input.clone()],
        Value::Array(items) if items.first().is_some_and(Value::is_u64) => vec![input.clone()],
        Value::Array(items) if !items.is_empty() => items.clone(),
        _ => return Err("'input' must be a string or a non-empty array".into()),
    };
    let mut tokens = 0u32;
    let mut data = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let (n, text) = match item {
            Value::String(text) => (count(&[text], tokenizer), text.clone()),
            Value::Array(ids) if ids.iter().all(Value::is_u64) => (ids.len() as u32, item.to_string()),
            _ => return Err(format!("input[{i}] must be a string or an array of token ids")),
        };
        tokens = tokens.saturating_add(n);
        let embedding: Vec<f64> = (0..DIMENSIONS as u64).map(|d| unit(&text, d) * 2.0 - 1.0).collect();
        data.push(json!({"object": "embedding", "embedding": embedding, "index": i}));
    }
    let body = json!({
        "object": "list", "data": data, "model": model(value),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    Ok((tokens, body))
}

/// `query` and `documents` (strings, or objects with `text`); `top_n` keeps the best.
fn read_rerank(value: &Value, tokenizer: Option<&tokenizers::Tokenizer>) -> Result<(u32, Value), String> {
    let Some(query) = value.get("query").and_then(Value::as_str) else {
        return Err("'query' is required: a string".into());
    };
    let Some(documents) = value.get("documents").and_then(Value::as_array).filter(|d| !d.is_empty()) else {
        return Err("'documents' is required: a non-empty array".into());
    };
    let mut tokens = 0u32;
    let mut results = Vec::with_capacity(documents.len());
    for (i, doc) in documents.iter().enumerate() {
        let Some(text) = doc.as_str().or_else(|| doc.get("text").and_then(Value::as_str)) else {
            return Err(format!("documents[{i}] must be a string or an object with 'text'"));
        };
        // The model reads the query beside every document.
        tokens = tokens.saturating_add(count(&[query, text], tokenizer));
        results.push((i, text, unit(text, query.len() as u64)));
    }
    results.sort_by(|a, b| b.2.total_cmp(&a.2));
    let top_n = value.get("top_n").and_then(Value::as_u64).map_or(results.len(), |n| n as usize);
    let results: Vec<Value> = results
        .into_iter()
        .take(top_n)
        .map(|(index, text, score)| json!({"index": index, "document": {"text": text}, "relevance_score": score}))
        .collect();
    let body = json!({"id": format!("rerank-{:016x}", (unit(query, 7) * 1e15) as u64), "model": model(value),
        "usage": {"total_tokens": tokens}, "results": results});
    Ok((tokens, body))
}
