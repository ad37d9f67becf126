//! Several models on one simulated server, as vLLM serves LoRA adapters beside its base model
//! (`--lora-modules NAME=PATH`): each adapter (`Profile::loras`, `--lora NAME[:MS]`) is listed in
//! `/v1/models` with its base as `parent`, answers with its own decode time per output token when
//! one is given, and a request naming no served model is answered 404 as vLLM does. The requests
//! each model accepted are counted (`requests_by_model`).
//!
//! And the engines' cache resets, at the server root: vLLM's `POST /reset_prefix_cache`,
//! SGLang's `POST /flush_cache`, llama.cpp's `GET /slots` and `POST /slots/{id}?action=erase`.
//! Each clears the simulated prefix cache (unless `Profile::ignore_cache_resets`, a server that
//! answers and keeps its cache) and is counted per endpoint (`cache_resets`: `vllm`, `sglang`,
//! `llamacpp` one per slot erased).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::profile::Profile;
use super::server::AppState;

/// Slots the simulated llama.cpp `/slots` lists.
pub const SLOTS: u32 = 4;

/// One adapter served beside the base model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lora {
    pub name: String,
    /// Its decode time per output token in milliseconds; `None`: the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_per_output_token_ms: Option<f64>,
}

impl Lora {
    /// `NAME` or `NAME:MS` (`--lora sql-lora:12.5`).
    pub fn parse(text: &str) -> Result<Lora, String> {
        let (name, speed) = match text.rsplit_once(':') {
            Some((name, ms)) => {
                let ms: f64 =
                    ms.parse().map_err(|_| format!("--lora {text:?}: {ms:?} is not a number of milliseconds"))?;
                if !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)) {
                    return Err(format!("--lora {text:?}: the time per output token is 0 to 60000 ms"));
                }
                (name, Some(ms))
            }
            None => (text, None),
        };
        if name.trim().is_empty() {
            return Err(format!("--lora {text:?}: an adapter needs a name (NAME or NAME:MS)"));
        }
        Ok(Lora { name: name.to_string(), time_per_output_token_ms: speed })
    }
}

/// Per-model request counts and per-endpoint reset counts.
#[derive(Debug, Default)]
pub(crate) struct ModelCounts {
    by_model: Mutex<BTreeMap<String, u64>>,
    resets: Mutex<BTreeMap<String, u64>>,
}

impl ModelCounts {
    /// A request naming `model` was accepted.
    pub fn request(&self, model: &str) {
        if let Ok(mut m) = self.by_model.lock() {
            *m.entry(model.to_string()).or_default() += 1;
        }
    }

    fn reset(&self, endpoint: &str) {
        if let Ok(mut m) = self.resets.lock() {
            *m.entry(endpoint.to_string()).or_default() += 1;
        }
    }

    pub fn by_model(&self) -> BTreeMap<String, u64> {
        self.by_model.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn resets(&self) -> BTreeMap<String, u64> {
        self.resets.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The profile each adapter with its own speed answers with.
pub(crate) fn profiles(profile: &Arc<Profile>) -> BTreeMap<String, Arc<Profile>> {
    profile
        .loras
        .iter()
        .filter_map(|l| {
            let ms = l.time_per_output_token_ms?;
            let mut own = (**profile).clone();
            own.time_per_output_token = Duration::from_secs_f64(ms / 1000.0);
            Some((l.name.clone(), Arc::new(own)))
        })
        .collect()
}

/// `/v1/models`: the served names (or the default), then each adapter with its base as parent.
pub(crate) fn listing(profile: &Profile, default_model: &str) -> Vec<serde_json::Value> {
    let served = &profile.served_model_names;
    let bases: Vec<&str> =
        if served.is_empty() { vec![default_model] } else { served.iter().map(String::as_str).collect() };
    let base = bases.first().copied().unwrap_or(default_model);
    let mut data: Vec<serde_json::Value> =
        bases.iter().map(|id| json!({"id": id, "object": "model", "owned_by": "anvil-load"})).collect();
    data.extend(
        profile.loras.iter().map(
            |l| json!({"id": l.name, "object": "model", "owned_by": "anvil-load", "root": l.name, "parent": base}),
        ),
    );
    data
}

fn cleared(state: &AppState, endpoint: &str) {
    if !state.profile.ignore_cache_resets {
        state.cache.clear();
    }
    state.stats.models.reset(endpoint);
}

/// vLLM: `POST /reset_prefix_cache`.
pub(crate) async fn reset_prefix_cache(State(state): State<Arc<AppState>>) -> Response {
    cleared(&state, "vllm");
    StatusCode::OK.into_response()
}

/// SGLang: `POST /flush_cache`.
pub(crate) async fn flush_cache(State(state): State<Arc<AppState>>) -> Response {
    cleared(&state, "sglang");
    (StatusCode::OK, "Cache flushed.\n").into_response()
}

/// llama.cpp: `GET /slots`.
pub(crate) async fn slots() -> Response {
    let list: Vec<serde_json::Value> = (0..SLOTS).map(|id| json!({"id": id, "is_processing": false})).collect();
    axum::Json(list).into_response()
}

#[derive(Deserialize)]
pub(crate) struct SlotAction {
    action: Option<String>,
}

/// llama.cpp: `POST /slots/{id}?action=erase`.
pub(crate) async fn slot_action(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<SlotAction>,
) -> Response {
    let id = match id.parse::<u32>() {
        Ok(id) if id < SLOTS => id,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"error": {"code": 400, "message": "Invalid slot id", "type": "invalid_request_error"}}),
                ),
            )
                .into_response();
        }
    };
    if q.action.as_deref() != Some("erase") {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"code": 400, "message": "Invalid action", "type": "invalid_request_error"}})),
        )
            .into_response();
    }
    cleared(&state, "llamacpp");
    axum::Json(json!({"id_slot": id, "n_erased": 0})).into_response()
}
