//! Bearer tokens: which ones the server saw (each distinct token counted, at most
//! `MAX_TOKENS_SEEN` of them), and, when a test asks, a 401 for every API request whose token
//! is not in the accepted set (`MockServer::accept_only_tokens`), as a cloud endpoint
//! answers an expired token (its message echoes the token, as some gateways do). The tokens are kept out of every serialized snapshot: a test reads
//! them from `MockServer::stats`, never from `/mock/stats` or an artifact.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONNECTION};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::server::AppState;
use super::stats::MockStats;

/// Distinct tokens remembered; later new ones are not (a soak's hourly tokens fit many times).
pub const MAX_TOKENS_SEEN: usize = 256;

/// The server's record of bearer tokens, and the accepted set.
#[derive(Debug, Default)]
pub(crate) struct TokenRecord {
    seen: Mutex<BTreeMap<String, u64>>,
    /// `None`: every request is accepted, with or without a token.
    accepted: Mutex<Option<BTreeSet<String>>>,
    /// Generation requests answered 401 for their token.
    pub(crate) refused: AtomicU64,
}

impl TokenRecord {
    fn saw(&self, token: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = seen.get_mut(token) {
            *n += 1;
        } else if seen.len() < MAX_TOKENS_SEEN {
            seen.insert(token.to_string(), 1);
        }
    }

    fn accepts(&self, token: Option<&str>) -> bool {
        match &*self.accepted.lock().unwrap_or_else(PoisonError::into_inner) {
            None => true,
            Some(set) => token.is_some_and(|t| set.contains(t)),
        }
    }

    /// Accept only these tokens from now on; `None`: accept every request again.
    pub(crate) fn accept_only(&self, tokens: Option<&[&str]>) {
        *self.accepted.lock().unwrap_or_else(PoisonError::into_inner) =
            tokens.map(|t| t.iter().map(|s| (*s).to_string()).collect());
    }

    /// Every distinct token seen, with how many requests carried it.
    pub(crate) fn seen(&self) -> BTreeMap<String, u64> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Before every handler: note the request's bearer token, and answer 401 to a request of the API
/// (below `/v1/`, `/v1/models` included) whose token is not accepted. Only generation requests
/// (POSTs) count in `requests_received` and `requests_rejected`.
pub(crate) async fn gate(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let tokens = &state.stats.tokens;
    if let Some(t) = &token {
        tokens.saw(t);
    }
    if request.uri().path().starts_with("/v1/") && !tokens.accepts(token.as_deref()) {
        tokens.refused.fetch_add(1, Ordering::Relaxed);
        if request.method() == Method::POST {
            MockStats::add(&state.stats.requests_received, 1);
            MockStats::add(&state.stats.requests_rejected, 1);
        }
        // Echoed, as some gateways do: a client must not write it.
        let message = match &token {
            Some(t) => format!("invalid or expired token {t}"),
            None => "no bearer token".to_string(),
        };
        let body = json!({"error": {"message": message, "type": "authentication_error", "code": 401}});
        let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    next.run(request).await
}
