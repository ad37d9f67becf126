//! Setting a run up: the target (and the embedded simulator), the preflight check, prompt
//! sizing, signals, run ids.

use std::time::Duration;

use serde_json::Value;

use super::AppError;
use crate::cli::exit;
use crate::mock::{self, MockServer};
use crate::record::Stamp;
use crate::record::{ProbeResult, SizingRecord};
use crate::report;
use crate::scenario::{Endpoint, PromptSource, Scenario, SizingMode};
use crate::schedule::RunControl;
use crate::sys;
use crate::worker::Client;
use crate::workload::sizing::{self, default_overhead, probe_sizes};
use crate::workload::{Sizer, Workload};

/// The server under test for this run: a URL, and the simulator when it is embedded.
pub(super) struct RunTarget {
    pub base_url: String,
    pub simulator: Option<MockServer>,
}

impl RunTarget {
    pub async fn start(scenario: &Scenario) -> Result<Self, AppError> {
        match &scenario.target.endpoint {
            Endpoint::Remote { base_url } => Ok(RunTarget { base_url: base_url.clone(), simulator: None }),
            Endpoint::Simulator { profile } => {
                let p = mock::Profile::named(profile)
                    .ok_or_else(|| AppError::BadInput(format!("unknown simulator profile {profile}")))?;
                let server = MockServer::start(p)
                    .await
                    .map_err(|e| AppError::Aborted(format!("cannot start the embedded simulator: {e}")))?;
                eprintln!(
                    "no base_url given: running against the embedded simulator (profile {profile}) at {}\n\
                     these numbers describe the simulator, not a real engine; use --base-url URL to measure a server",
                    server.base_url()
                );
                Ok(RunTarget { base_url: server.base_url(), simulator: Some(server) })
            }
        }
    }

    pub fn simulator_counts(&self) -> Option<Value> {
        self.simulator.as_ref().and_then(|s| serde_json::to_value(s.stats()).ok())
    }

    pub async fn shutdown(self) {
        if let Some(server) = self.simulator {
            server.shutdown().await;
        }
    }
}

/// Before any load: is the server there, and does it serve the model? Unreachable is fatal;
/// anything else is a warning (not every server implements `/models`).
pub(super) async fn preflight(base_url: &str, model: &str, timeout: Duration) -> Result<(), AppError> {
    let url = format!("{base_url}/models");
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout + Duration::from_secs(5))
        .build()
        .map_err(|e| AppError::Aborted(e.to_string()))?;
    match http.get(&url).send().await {
        Err(e) if e.is_connect() || e.is_timeout() => Err(AppError::Aborted(format!(
            "cannot reach the server at {base_url} ({}); is it running? check --base-url or target.base_url",
            if e.is_timeout() { "timed out" } else { "connection failed" }
        ))),
        Err(e) => {
            eprintln!("warning: GET {url} failed ({e}); continuing");
            Ok(())
        }
        Ok(resp) if !resp.status().is_success() => {
            eprintln!("warning: GET {url} answered {}; continuing", resp.status());
            Ok(())
        }
        Ok(resp) => {
            let body = resp.bytes().await.unwrap_or_default();
            let ids: Vec<String> = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                .collect();
            if !ids.is_empty() && !ids.iter().any(|id| id == model) {
                eprintln!(
                    "warning: model {model:?} is not in the server's /models list ({}); llama.cpp accepts any name, vLLM answers 404",
                    ids.join(", ")
                );
            }
            Ok(())
        }
    }
}

/// First Ctrl-C (or SIGTERM): stop issuing, give in-flight requests `grace` to finish, then cut
/// them; the artifact is written with what was measured. A second one exits at once.
pub(super) fn watch_signals(control: RunControl, grace: Duration) {
    tokio::spawn(async move {
        stop_signal().await;
        eprintln!(
            "\nstopping: no new requests; in-flight requests get {} to finish (Ctrl-C again to quit at once)",
            report::fmt_duration(grace)
        );
        control.stop_issuing.cancel();
        let cut = control.cut_in_flight.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            cut.cancel();
        });
        stop_signal().await;
        eprintln!("quitting without writing the artifact");
        std::process::exit(i32::from(exit::ABORTED));
    });
}

async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `anvil-<UTC time>-<4 hex>`: sortable, and unique even for runs started in the same second.
pub(super) fn new_run_id(started: Stamp) -> String {
    let iso = started.iso().replace(['-', ':'], "");
    format!("anvil-{}-{:04x}", iso.trim_end_matches('Z').to_string() + "Z", rand::random::<u16>())
}

/// Decide how prompts are sized: the built-in estimate, a fit to the server's counts for a few
/// probe requests, or a local tokenizer (with one probe pair for the template overhead).
pub(super) async fn size_prompts(scenario: &Scenario, client: &Client, salt: u64) -> (Sizer, SizingRecord) {
    let default = default_overhead(scenario.target.api);
    let (initial, mode, path) = match &scenario.workload.sizing {
        SizingMode::Estimate => {
            let sizer = Sizer::Estimate { overhead: default };
            let record = SizingRecord::for_sizer("estimate", &sizer, None);
            return (sizer, record);
        }
        SizingMode::Calibrate => (Sizer::Estimate { overhead: default }, "calibrate", None),
        SizingMode::Tokenizer { path, tokenizer } => (
            Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead: default },
            "tokenizer",
            Some(path.display().to_string()),
        ),
    };
    let w = &scenario.workload;
    let largest = match &w.prompts {
        PromptSource::Synthetic { context } => context.largest(),
        PromptSource::Dataset(_) => w.max_context_tokens.saturating_sub(w.max_tokens) / 2,
        PromptSource::Trace(t) => t.stats.input_tokens.max,
        PromptSource::Sessions(s) => s.first_tokens.max().max(1024.0) as u32,
    };
    let mut sizes = probe_sizes(largest);
    if mode == "tokenizer" {
        // The tokenizer counts text exactly; two probes only measure the template overhead.
        sizes = vec![sizes[0], sizes[sizes.len() - 1]];
    }
    eprintln!("sizing prompts: {} probe requests (max_tokens 1) to fit the server's token count", sizes.len());
    let probe_workload = Workload::new(scenario, salt, initial.clone());
    let mut probes = Vec::with_capacity(sizes.len());
    for (k, words) in sizes.into_iter().enumerate() {
        let (body, predicted_text_tokens) = probe_workload.probe(k as u64, words);
        let result = client.probe(body).await;
        probes.push(ProbeResult {
            predicted_text_tokens,
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    sizing::fit_from_probes(&initial, mode, path, probes, default)
}

/// The simulator's counters for one level: cumulative counters minus their value before it.
pub(super) fn counts_delta(after: &Value, before: Option<&Value>) -> Value {
    let (Value::Object(after), Some(Value::Object(before))) = (after, before) else {
        return after.clone();
    };
    let mut out = after.clone();
    for (key, value) in out.iter_mut() {
        if let (Some(a), Some(b)) = (value.as_u64(), before.get(key).and_then(Value::as_u64)) {
            if key != "active_requests" {
                *value = Value::from(a.saturating_sub(b));
            }
        }
    }
    Value::Object(out)
}

/// Each in-flight request holds a socket: raise the open-file limit to what the run needs (up to
/// the hard limit) and say clearly when that is not enough.
pub(super) fn raise_file_limit(needed: u64) {
    let Some(limit) = sys::raise_file_limit(needed) else { return };
    if limit.soft_before >= needed {
        return;
    }
    if limit.soft < needed {
        eprintln!(
            "warning: this run may hold {needed} connections but the open-file limit is {} (hard limit {}); raise it (ulimit -n {needed}) or connections will fail with connect_failed",
            limit.soft, limit.hard
        );
    } else {
        tracing::info!("raised the open-file limit from {} to {}", limit.soft_before, limit.soft);
    }
}
