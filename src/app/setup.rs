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
use crate::scenario::{Endpoint, Pacing, PromptSource, Scenario, SizingMode};
use crate::schedule::RunControl;
use crate::sys;
use crate::worker::Client;
use crate::workload::sizing::{self, default_overhead, probe_sizes};
use crate::workload::{Sizer, Workload};
use tokio_util::sync::CancellationToken;

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
/// probe requests, or a local tokenizer (with one probe pair for the template overhead). When
/// the dataset holds conversations with their own system message, one more probe measures that
/// shape. `None` when `stop` fired (Ctrl-C): no probe is sent after it, and the one in flight is
/// abandoned.
pub(super) async fn size_prompts(
    scenario: &Scenario,
    client: &Client,
    salt: u64,
    stop: &CancellationToken,
) -> Option<(Sizer, SizingRecord)> {
    let default = default_overhead(scenario.target.api);
    let (initial, mode, path) = match &scenario.workload.sizing {
        SizingMode::Estimate => {
            let sizer = Sizer::Estimate { overhead: default };
            let record = SizingRecord::for_sizer("estimate", &sizer, None);
            return Some((sizer, record));
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
    };
    let mut sizes = probe_sizes(largest, w.max_context_tokens);
    if mode == "tokenizer" {
        // The tokenizer counts text exactly; two probes only measure the template overhead.
        sizes = vec![sizes[0], sizes[sizes.len() - 1]];
    }
    let probe_workload = Workload::new(scenario, salt, initial.clone());
    let system_probe = probe_workload.has_system_conversations();
    eprintln!(
        "sizing prompts: {} probe requests (max_tokens 1) to fit the server's token count",
        sizes.len() + usize::from(system_probe)
    );
    let mut probes = Vec::with_capacity(sizes.len());
    let mid_words = sizes[sizes.len() / 2];
    for (k, words) in sizes.into_iter().enumerate() {
        let (body, predicted_text_tokens) = probe_workload.probe(k as u64, words);
        let result = probe_unless_stopped(client, body, stop).await?;
        probes.push(ProbeResult {
            predicted_text_tokens,
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    let (sizer, mut record) = sizing::fit_from_probes(&initial, mode, path, probes, default);
    if system_probe {
        let k = record.probes.len() as u64;
        let (body, system, user) = probe_workload.system_probe(k, mid_words);
        let result = probe_unless_stopped(client, body, stop).await?;
        // Counted with the fitted sizer: what is left is the template of that shape.
        let text = sizer.text_tokens(&system) + sizer.text_tokens(&user);
        record.system_message_overhead = result.as_ref().ok().map(|&served| served as f64 - text);
        record.system_probe = Some(ProbeResult {
            predicted_text_tokens: initial.text_tokens(&system) + initial.text_tokens(&user),
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    Some((sizer, record))
}

/// One probe, unless the run is being stopped: `None` when `stop` fired before or during it.
async fn probe_unless_stopped(
    client: &Client,
    body: bytes::Bytes,
    stop: &CancellationToken,
) -> Option<Result<u64, String>> {
    if stop.is_cancelled() {
        return None;
    }
    tokio::select! {
        biased;
        () = stop.cancelled() => None,
        result = client.probe(body) => Some(result),
    }
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

/// Descriptors a run holds besides its connections: standard streams, the runtime's own (epoll,
/// event and timer descriptors), the records file, an artifact or summary being written, two
/// snapshot files, a listening socket, a DNS lookup, with headroom.
pub(super) const FILES_AND_HEADROOM: u64 = 64;

/// What one run needs from the open-file limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DescriptorNeed {
    /// Connections open at once at the largest level.
    pub connections: u64,
    /// The embedded simulator holds the other end of every connection in this process.
    pub embedded: bool,
    /// The setting that decides `connections`, for the message.
    pub setting: &'static str,
}

impl DescriptorNeed {
    /// The largest level's connections (closed loop: its concurrency; open loop: the in-flight
    /// cap, or without one the connections the pool keeps, one per request per second).
    pub fn for_scenario(s: &Scenario) -> Self {
        let (connections, setting) = match (&s.load.pacing, s.load.search) {
            (_, Some(search)) => (search.max, "load.search_max"),
            (Pacing::Closed { levels, .. }, None) => {
                (levels.iter().copied().max().map_or(1.0, f64::from), "load.concurrency (--concurrency)")
            }
            (Pacing::Open { max_in_flight: Some(m), .. }, None) => (f64::from(*m), "load.max_in_flight"),
            (Pacing::Open { rates, .. }, None) => (
                rates.iter().copied().fold(1.0, f64::max),
                "load.rate (--rate), or cap the connections with load.max_in_flight",
            ),
        };
        DescriptorNeed {
            connections: (connections.ceil() as u64).clamp(1, 100_000),
            embedded: matches!(s.target.endpoint, Endpoint::Simulator { .. }),
            setting,
        }
    }

    pub fn total(&self) -> u64 {
        self.connections.saturating_mul(if self.embedded { 2 } else { 1 }).saturating_add(FILES_AND_HEADROOM)
    }
}

/// Each in-flight request holds a socket (two with the embedded simulator): raise the open-file
/// limit to what the run needs (up to the hard limit). When that is not enough the run is
/// refused before anything is sent, rather than failing connections mid-run and then being
/// unable to write its artifact ("Too many open files"). Refusing, not capping: a capped
/// concurrency would measure a different load than the one asked for.
pub(super) fn ensure_file_limit(need: &DescriptorNeed) -> Result<(), AppError> {
    let needed = need.total();
    let Some(limit) = sys::raise_file_limit(needed) else { return Ok(()) };
    if limit.soft >= needed {
        if limit.soft_before < needed {
            tracing::info!("raised the open-file limit from {} to {}", limit.soft_before, limit.soft);
        }
        return Ok(());
    }
    Err(AppError::BadInput(format!(
        "{}: this run holds up to {} connections{} plus up to {FILES_AND_HEADROOM} files, {needed} descriptors, but the open-file limit is {} (hard limit {}) and cannot be raised further\n  fix: raise the limit (`ulimit -n {needed}`; above the hard limit, as root or in /etc/security/limits.conf), or lower {}",
        need.setting,
        need.connections,
        if need.embedded { " (twice: the embedded simulator holds the other end)" } else { "" },
        limit.soft,
        limit.hard,
        need.setting,
    )))
}
