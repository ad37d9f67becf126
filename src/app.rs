//! `run()`: the whole program, top to bottom.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::aggregate;
use crate::artifact::{self, LevelRun, Stamp};
use crate::cli::{Cli, Command, MockArgs, RunArgs, exit};
use crate::mock::{self, MockServer};
use crate::report::{self, Progress, SweepRow, Warning};
use crate::scenario::{Endpoint, Scenario, ScenarioError};
use crate::scenario::{PromptSource, SizingMode};
use crate::schedule::{self, ClosedLoop};
use crate::worker::Client;
use crate::workload::sizing::{self, ProbeResult, default_overhead, probe_sizes};
use crate::workload::{Sizer, SizingRecord, Workload};

/// Why the program stopped early.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The scenario or the options are wrong; nothing was sent.
    #[error("{0}")]
    BadInput(String),
    /// The run could not go on (server unreachable, artifact not writable, …).
    #[error("{0}")]
    Aborted(String),
}

impl AppError {
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::BadInput(_) => exit::BAD_INPUT,
            AppError::Aborted(_) => exit::ABORTED,
        }
    }
}

impl From<ScenarioError> for AppError {
    fn from(e: ScenarioError) -> Self {
        AppError::BadInput(e.to_string())
    }
}

pub async fn run(cli: Cli) -> Result<u8, AppError> {
    match cli.command {
        Some(Command::Validate(args)) => validate(&args),
        Some(Command::Mock(args)) => serve_mock(&args).await,
        None => benchmark(&cli.run).await,
    }
}

fn scenario_path(args: &RunArgs) -> Result<&Path, AppError> {
    args.scenario
        .as_deref()
        .ok_or_else(|| AppError::BadInput("no scenario file given; try scenarios/smoke.toml".into()))
}

/// `anvil-load validate FILE`: the resolved plan, nothing sent.
fn validate(args: &RunArgs) -> Result<u8, AppError> {
    let scenario = Scenario::load(scenario_path(args)?, &args.overrides())?;
    print!("{}", crate::scenario::describe(&scenario));
    println!("valid; nothing was sent");
    Ok(exit::OK)
}

/// `anvil-load mock`: the simulator in the foreground until Ctrl-C.
async fn serve_mock(args: &MockArgs) -> Result<u8, AppError> {
    let profile = mock::Profile::named(&args.profile).ok_or_else(|| {
        AppError::BadInput(format!(
            "--profile {:?} is not a simulator profile; use one of: {}",
            args.profile,
            mock::PROFILE_NAMES.join(", ")
        ))
    })?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| AppError::BadInput(format!("--listen {}: cannot listen there: {e}", args.listen)))?;
    let addr = listener.local_addr().map_err(|e| AppError::Aborted(e.to_string()))?;
    eprintln!("anvil-load simulator (profile {}) listening on http://{addr}/v1 — Ctrl-C stops it", args.profile);
    let stats = Arc::new(mock::MockStats::default());
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    mock::serve(listener, profile, stats, shutdown)
        .await
        .map_err(|e| AppError::Aborted(format!("simulator failed: {e}")))?;
    Ok(exit::OK)
}

/// The server under test for this run: a URL, and the simulator when it is embedded.
struct RunTarget {
    base_url: String,
    simulator: Option<MockServer>,
}

impl RunTarget {
    async fn start(scenario: &Scenario) -> Result<Self, AppError> {
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

    fn simulator_counts(&self) -> Option<Value> {
        self.simulator.as_ref().and_then(|s| serde_json::to_value(s.stats()).ok())
    }

    async fn shutdown(self) {
        if let Some(server) = self.simulator {
            server.shutdown().await;
        }
    }
}

/// Before any load: is the server there, and does it serve the model? Unreachable is fatal;
/// anything else is a warning (not every server implements `/models`).
async fn preflight(base_url: &str, model: &str, timeout: Duration) -> Result<(), AppError> {
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

/// First Ctrl-C (or SIGTERM): stop issuing and interrupt in-flight requests, then write what was
/// measured. A second one exits at once.
fn watch_signals(cancel: CancellationToken) {
    tokio::spawn(async move {
        stop_signal().await;
        eprintln!("\nstopping: no new requests; writing the artifact (press Ctrl-C again to quit at once)");
        cancel.cancel();
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
fn new_run_id(started: Stamp) -> String {
    let iso = started.iso().replace(['-', ':'], "");
    format!("anvil-{}-{:04x}", iso.trim_end_matches('Z').to_string() + "Z", rand::random::<u16>())
}

/// `anvil-load SCENARIO`: run every load level and write its artifact.
async fn benchmark(args: &RunArgs) -> Result<u8, AppError> {
    let scenario = Scenario::load(scenario_path(args)?, &args.overrides())?;
    artifact::ensure_writable_dir(&args.out).map_err(|e| {
        AppError::BadInput(format!(
            "--out {}: cannot write artifacts there ({e}); choose another directory",
            args.out.display()
        ))
    })?;

    let target = RunTarget::start(&scenario).await?;
    if target.simulator.is_none() {
        preflight(&target.base_url, &scenario.target.model, scenario.client.connect).await?;
    }
    let levels = scenario.load.levels().to_vec();
    let pool = levels.iter().copied().max().unwrap_or(1) as usize;
    let endpoint = format!("{}{}", target.base_url, scenario.target.api.path());
    let client = Client::new(&endpoint, scenario.target.api_key.clone(), scenario.client.clone(), pool)
        .map_err(|e| AppError::BadInput(format!("target.base_url: {e}")))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());

    let run_id = new_run_id(Stamp::now());
    let run_salt: u64 = rand::random();
    let (sizer, sizing) = size_prompts(&scenario, &client, run_salt).await;
    if let Some(reason) = &sizing.fallback_reason {
        eprintln!("warning: prompt sizing fell back to the built-in estimate: {reason}");
    }
    let workload = Arc::new(Workload::new(&scenario, run_salt, sizer));
    let mut written: Vec<PathBuf> = Vec::new();
    let mut rows = Vec::new();
    let mut any_success = false;
    for &concurrency in &levels {
        let level_id = if levels.len() > 1 { format!("{run_id}-c{concurrency}") } else { run_id.clone() };
        let before = target.simulator_counts();
        let started = Stamp::now();
        let collected = run_level(&scenario, &client, workload.clone(), concurrency, &cancel, !args.no_progress).await;
        let simulator = target.simulator_counts().map(|after| counts_delta(&after, before.as_ref()));
        let artifact = artifact::build(LevelRun {
            scenario: &scenario,
            run_id: level_id.clone(),
            concurrency,
            base_url: &target.base_url,
            started,
            finished: Stamp::now(),
            collected,
            interrupted: cancel.is_cancelled(),
            simulator,
            sizing: &sizing,
            prompt_salt: workload.salt(),
        });
        let path = artifact::write_json_atomic(&args.out, &format!("{level_id}.json"), &artifact)
            .map_err(|e| AppError::Aborted(format!("cannot write the artifact to {}: {e}", args.out.display())))?;
        print!("{}", report::level_summary(&artifact));
        report::print_warnings(&artifact.warnings);
        any_success |= artifact.completed > 0;
        rows.push(SweepRow::from_artifact(&artifact, &path));
        written.push(path);
        if cancel.is_cancelled() {
            break;
        }
    }
    if levels.len() > 1 {
        print!("{}", report::sweep_table(&rows));
        let summary = serde_json::json!({ "schema": "anvil-load.sweep/v1", "run_id": run_id, "levels": rows });
        let path = artifact::write_json_atomic(&args.out, &format!("{run_id}-sweep.json"), &summary)
            .map_err(|e| AppError::Aborted(format!("cannot write the sweep summary: {e}")))?;
        written.push(path);
    }
    target.shutdown().await;
    for path in &written {
        println!("artifact: {}", path.display());
    }
    if cancel.is_cancelled() {
        return Ok(exit::ABORTED);
    }
    if !any_success {
        report::print_warnings(&[Warning::new("no_success", "no request succeeded; see the failures in the artifact")]);
        return Ok(exit::ABORTED);
    }
    Ok(exit::OK)
}

/// Decide how prompts are sized: the built-in estimate, a fit to the server's counts for a few
/// probe requests, or a local tokenizer (with one probe pair for the template overhead).
async fn size_prompts(scenario: &Scenario, client: &Client, salt: u64) -> (Sizer, SizingRecord) {
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

/// One load level: workers and the aggregator run side by side until the workers are done.
async fn run_level(
    scenario: &Scenario,
    client: &Client,
    workload: Arc<Workload>,
    concurrency: u32,
    cancel: &CancellationToken,
    progress: bool,
) -> aggregate::Collected {
    let plan = ClosedLoop {
        concurrency,
        requests: scenario.run.requests,
        duration: scenario.run.duration,
        warm_up_first: scenario.workload.prompt_cache.burst(),
    };
    let label = format!("c={concurrency}");
    let progress = Progress::new(progress, scenario.run.requests, &label);
    // Bounded: a stalled aggregator slows the workers instead of growing memory.
    let (tx, rx) = mpsc::channel(4096);
    let level_start = Instant::now();
    let ((), collected) = tokio::join!(
        schedule::run_closed(plan, workload, client.clone(), tx, cancel.clone(), level_start),
        aggregate::collect(rx, &progress),
    );
    progress.finish();
    collected
}

/// The simulator's counters for one level: cumulative counters minus their value before it.
fn counts_delta(after: &Value, before: Option<&Value>) -> Value {
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
