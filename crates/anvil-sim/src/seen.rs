//! What the simulator saw of each request beyond its body: the method, path and query it asked
//! for, and its headers outside a small built-in list (those every HTTP client sends, and the
//! per-request ones), each as a distinct entry with a count. Bounded ([`MAX_DISTINCT`] entries
//! of each kind), so a long run keeps a few kilobytes. A test reads it to check that a client sent
//! its own headers and query parameters on every request (`MockServer::seen`, `GET /mock/seen`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::server::AppState;

/// Distinct targets, and distinct headers, kept at most (the numbers in `SeenRequests::dropped`).
pub const MAX_DISTINCT: usize = 64;

/// Headers not recorded: those any HTTP client sends, and those that differ on every request.
const NOT_RECORDED: &[&str] = &[
    "host",
    "user-agent",
    "accept",
    "accept-encoding",
    "content-type",
    "content-length",
    "connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "x-session-id",
    "x-anvil-backend",
];

/// The requests seen, `GET /mock/…` excepted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenRequests {
    /// Every request seen.
    pub requests: u64,
    /// `METHOD /path?query` → how many requests asked for it.
    pub targets: BTreeMap<String, u64>,
    /// `name: value` (the name in lowercase) → how many requests carried it.
    pub headers: BTreeMap<String, u64>,
    /// Entries not kept because 64 distinct ones of their kind were kept already.
    pub dropped: u64,
}

impl SeenRequests {
    /// How many requests carried the header `name: value` (`name` in any case).
    pub fn header_count(&self, name: &str, value: &str) -> u64 {
        self.headers.get(&format!("{}: {value}", name.to_ascii_lowercase())).copied().unwrap_or(0)
    }

    /// How many requests asked for a target starting with `prefix` (`POST /v1/chat/completions`).
    pub fn target_count(&self, prefix: &str) -> u64 {
        self.targets.iter().filter(|(t, _)| t.starts_with(prefix)).map(|(_, n)| n).sum()
    }

    fn count(map: &mut BTreeMap<String, u64>, key: String, dropped: &mut u64) {
        if let Some(n) = map.get_mut(&key) {
            *n += 1;
        } else if map.len() < MAX_DISTINCT {
            map.insert(key, 1);
        } else {
            *dropped += 1;
        }
    }

    fn record(&mut self, request: &Request) {
        self.requests += 1;
        let uri = request.uri();
        let target = format!("{} {}", request.method(), uri.path_and_query().map_or(uri.path(), |p| p.as_str()));
        Self::count(&mut self.targets, target, &mut self.dropped);
        for (name, value) in request.headers() {
            if NOT_RECORDED.contains(&name.as_str()) {
                continue;
            }
            let value = String::from_utf8_lossy(value.as_bytes());
            Self::count(&mut self.headers, format!("{name}: {value}"), &mut self.dropped);
        }
    }
}

/// The middleware that records every request but `/mock/…`.
pub(crate) async fn record(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/mock/") {
        if let Ok(mut seen) = state.stats.seen.lock() {
            seen.record(&request);
        }
    }
    next.run(request).await
}
