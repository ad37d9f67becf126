//! The embedded simulated OpenAI-compatible server, used by the demo, the integration tests
//! and the benchmarks.
//!
//! It answers `/v1/chat/completions` and `/v1/completions` (streamed or not) with paced,
//! deterministic output shaped like real engines' (see `profile` for the knobs, including
//! llama.cpp's quirks), plus `/v1/models`, `/health`, and `/mock/stats` / `/mock/profile` so
//! a test can compare what the client measured with what the server did.

mod plan;
mod prefix_cache;
mod profile;
mod request;
mod server;
mod stats;
mod stream;
pub mod tokenize;
mod wire;

#[cfg(test)]
mod tests;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use profile::{PROFILE_NAMES, Profile, ReasoningField, UsagePlacement};
pub use stats::{MockStats, MockStatsSnapshot};
pub use tokenize::{count_prompt_tokens, count_text_tokens};

/// After shutdown is requested, in-flight responses get this long to finish before `serve`
/// returns anyway (a client that stops reading would otherwise hold it forever).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serve until `shutdown` resolves. The listener is already bound.
///
/// Shutdown is graceful: no new connections are accepted and in-flight responses may finish,
/// for at most a few seconds.
pub async fn serve(
    listener: TcpListener,
    profile: Profile,
    stats: Arc<MockStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Arc::new(server::AppState {
        profile: Arc::new(profile),
        stats,
        cache: prefix_cache::PrefixCache::new(),
    });
    // Chunks are small writes that must leave at once; Nagle's algorithm would hold them
    // back behind delayed ACKs and distort every latency the client measures.
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {err}");
        }
    });
    let stop = CancellationToken::new();
    let server = axum::serve(listener, server::router(state))
        .with_graceful_shutdown(stop.clone().cancelled_owned())
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result,
        () = shutdown => {}
    }
    stop.cancel();
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::debug!("mock server: in-flight responses outlived the shutdown grace");
            Ok(())
        }
    }
}

/// A server running in-process on `127.0.0.1` with an ephemeral port (tests, the demo).
///
/// Dropping it without [`MockServer::shutdown`] still asks the server to stop, but does not
/// wait for it.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    stats: Arc<MockStats>,
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
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(
            listener,
            profile,
            Arc::clone(&stats),
            stop.clone().cancelled_owned(),
        ));
        Ok(MockServer {
            addr,
            stats,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client is configured with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The server's counters right now.
    pub fn stats(&self) -> MockStatsSnapshot {
        self.stats.snapshot()
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
