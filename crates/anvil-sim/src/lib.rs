//! anvil-sim: a simulated OpenAI-compatible LLM inference server, fast and faithful enough to
//! test a client against, run in-process ([`MockServer`]) or on its own (the `anvil-sim` binary,
//! or `anvil-load mock`; both take [`cli::ServeArgs`]).
//!
//! It answers `/v1/chat/completions` and `/v1/completions` (streamed or not), the Responses and
//! Messages APIs, `/v1/embeddings` and `/v1/rerank`, with paced, deterministic output shaped like
//! real engines' ([`Profile`] holds the knobs, including llama.cpp's quirks; [`PROFILE_NAMES`]
//! the named profiles), plus `/v1/models`, `/health`, and `/mock/stats` / `/mock/profile` /
//! `/mock/ground-truth` so a test can compare what the client measured with what the server
//! did, `/metrics` in an engine's Prometheus names (see [`metrics`]) and `/dcgm/metrics`, a GPU
//! in NVIDIA's DCGM exporter's names driven by the load (see [`gpu`]). It can also break on
//! purpose, in every way a client must survive ([`FaultProfile`]), restarts included.
//!
//! It depends on no client: the canary markers it echoes and the counters it keeps are its
//! side of the wire. The manual's page is `docs/simulator.md` in the repository.

mod api_prompts;
mod api_wire;
mod auth;
pub mod cli;
mod contamination;
mod faults;
pub mod gpu;
mod ground_truth;
pub mod json_instance;
mod lora;
pub mod media;
pub mod metrics;
mod plan;
mod pooling;
mod prefix_cache;
mod profile;
mod request;
mod restart;
mod seen;
mod server;
mod stats;
mod stream;
mod structured;
pub mod tokenize;
mod tool_call;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::FaultProfile;
pub use ground_truth::{ChunkKind, GroundTruthChunk, GroundTruthRecord};
pub use lora::{Lora, SLOTS as LLAMACPP_SLOTS};
pub use profile::{MetricsNames, PROFILE_NAMES, Profile, ReasoningField, UsagePlacement};
pub use request::DEFAULT_MODEL;
pub use seen::SeenRequests;
pub use stats::{MockStats, MockStatsSnapshot};
pub use tokenize::{count_prompt_tokens, count_text_tokens};
pub use tool_call::ToolCallCounts;

/// Serve until `shutdown` resolves. The listener is already bound.
///
/// Shutdown is graceful: no new connections are accepted and in-flight responses may finish,
/// for at most a few seconds. With `faults.restart_after_requests` the server restarts once
/// on the listener's address (see `FaultProfile`).
pub async fn serve(
    listener: TcpListener,
    profile: Profile,
    stats: Arc<MockStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, profile, stats, Arc::new(ground_truth::GroundTruthStore::new()), shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    profile: Profile,
    stats: Arc<MockStats>,
    ground_truth: Arc<ground_truth::GroundTruthStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tokenizer = match &profile.tokenizer {
        None => None,
        Some(path) => Some(Arc::new(tokenize::load_tokenizer(path).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("tokenizer {}: {e}", path.display()))
        })?)),
    };
    let state = Arc::new(server::AppState::new(profile, Arc::clone(&stats), ground_truth, tokenizer));
    let restart = Arc::clone(&state.restart);
    restart::run(listener, server::router(state), restart, stats, shutdown).await
}

/// As [`serve_with`], on a Unix socket (no simulated restart: it cuts TCP connections only).
async fn serve_unix_with(
    listener: tokio::net::UnixListener,
    profile: Profile,
    stats: Arc<MockStats>,
    ground_truth: Arc<ground_truth::GroundTruthStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tokenizer = match &profile.tokenizer {
        None => None,
        Some(path) => Some(Arc::new(tokenize::load_tokenizer(path).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("tokenizer {}: {e}", path.display()))
        })?)),
    };
    let state = Arc::new(server::AppState::new(profile, stats, ground_truth, tokenizer));
    axum::serve(listener, server::router(state)).with_graceful_shutdown(shutdown).await
}

/// A server running in-process on `127.0.0.1` with an ephemeral port (tests, the demo).
///
/// Dropping it without [`MockServer::shutdown`] still asks the server to stop, but does not
/// wait for it.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    /// The Unix socket served instead of `addr` (`start_unix`).
    socket: Option<std::path::PathBuf>,
    stats: Arc<MockStats>,
    ground_truth: Arc<ground_truth::GroundTruthStore>,
    stop: CancellationToken,
    /// Taken by `shutdown`; `None` only after it.
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockServer {
    /// Binds `127.0.0.1:0` and starts serving `profile` on the current tokio runtime.
    pub async fn start(profile: Profile) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(MockStats::new());
        let ground_truth = Arc::new(ground_truth::GroundTruthStore::new());
        let stop = CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let task = tokio::spawn(serve_with(listener, profile, Arc::clone(&stats), Arc::clone(&ground_truth), shutdown));
        Ok(MockServer { addr, socket: None, stats, ground_truth, stop, task: Some(task) })
    }

    /// Serves `profile` on a Unix socket created at `path` (as vLLM's `--uds` does), on the
    /// current tokio runtime. Its [`MockServer::base_url`] is then `http://localhost/v1`, to be
    /// reached through the socket; [`MockServer::addr`] means nothing.
    pub async fn start_unix(profile: Profile, path: &std::path::Path) -> std::io::Result<MockServer> {
        let listener = tokio::net::UnixListener::bind(path)?;
        let stats = Arc::new(MockStats::new());
        let ground_truth = Arc::new(ground_truth::GroundTruthStore::new());
        let stop = CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let task =
            tokio::spawn(serve_unix_with(listener, profile, Arc::clone(&stats), Arc::clone(&ground_truth), shutdown));
        let addr = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0));
        Ok(MockServer { addr, socket: Some(path.to_path_buf()), stats, ground_truth, stop, task: Some(task) })
    }

    /// The Unix socket it serves on, when it was started with [`MockServer::start_unix`].
    pub fn socket(&self) -> Option<&std::path::Path> {
        self.socket.as_deref()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client is configured with (`http://localhost/v1`
    /// through the socket of `start_unix`).
    pub fn base_url(&self) -> String {
        if self.socket.is_some() {
            return "http://localhost/v1".to_string();
        }
        format!("http://{}/v1", self.addr)
    }

    /// The server's counters right now.
    pub fn stats(&self) -> MockStatsSnapshot {
        self.stats.snapshot()
    }

    /// The paths, queries and headers the server has seen so far (see [`SeenRequests`]); also
    /// served as `GET /mock/seen`.
    pub fn seen(&self) -> SeenRequests {
        self.stats.seen()
    }

    /// Answer 401 to every API request (`/v1/…`) whose bearer token is not one of `tokens`, from
    /// now on; `None` accepts every request again (the default). The tokens seen are in
    /// `stats().bearer_tokens`.
    pub fn accept_only_tokens(&self, tokens: Option<&[&str]>) {
        self.stats.tokens.accept_only(tokens);
    }

    /// Starts `peak_active_requests` again from the requests in flight now, so that the next
    /// snapshot's peak is that of what ran in between.
    pub fn reset_peak(&self) {
        self.stats.reset_peak();
    }

    /// The timing records of streamed responses so far (empty unless the profile has
    /// `record_ground_truth`), oldest first; also served as `GET /mock/ground-truth`.
    pub fn ground_truth(&self) -> Vec<GroundTruthRecord> {
        self.ground_truth.records()
    }

    /// Stops accepting connections, lets in-flight responses finish (bounded by a grace
    /// period) and waits for the server task to end.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return;
        };
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!("mock server ended with an error: {err}"),
            Err(err) => tracing::warn!("mock server task failed: {err}"),
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        // A server forgotten by a failing test must not keep its port and task alive.
        self.stop.cancel();
    }
}
