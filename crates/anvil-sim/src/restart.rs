//! The accept loop, and the simulated server restart: after the configured request the server
//! closes its listener and every open connection, keeps the port closed for a while (clients
//! get "connection refused"), then binds the same address again and serves on.
//!
//! Connections are cut from the read side: every accepted socket is wrapped so that its
//! reads fail once the restart begins. hyper always has a read pending on a connection (to
//! notice a client that leaves), so every connection, idle or busy, fails promptly and hyper
//! drops it together with the response it was sending. Writes are left alone, so a response
//! whose last bytes are being flushed when the restart begins still gets them out.
//!
//! One restart per server: a load test needs to see the client survive one; more would only
//! repeat it.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::faults::{CONNECTION_REFUSED, RESTART};
use super::stats::MockStats;

/// After shutdown is requested, in-flight responses get this long to finish before `serve`
/// returns anyway (a client that stops reading would otherwise hold it forever).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a restart waits for cut connections to wind down before it stops waiting.
const CUT_GRACE: Duration = Duration::from_secs(1);
/// Rebinding retries this long, in case the port is briefly held by something else.
const REBIND_PATIENCE: Duration = Duration::from_secs(5);
const REBIND_RETRY: Duration = Duration::from_millis(20);

/// Shared between the accept loop and the requests.
#[derive(Debug)]
pub(crate) struct RestartState {
    /// The generation request whose end triggers the restart.
    after_requests: Option<u64>,
    downtime: Duration,
    /// Fired when that request has ended.
    trigger: CancellationToken,
    /// Restarts that have begun cutting connections so far; a request remembers the value at
    /// its arrival, so one dropped after a later cut was cut by it.
    cuts: AtomicU64,
    /// Restarts whose listener is bound again. While fewer than `cuts`, a restart is under
    /// way: no connection is being accepted, so a request arriving then came in on a
    /// connection the restart has cut, or is about to (its bytes were read just before).
    /// That happens: the client answers the end of the request that triggers the restart
    /// with its next request on the same connection, at the moment the restart begins.
    rebinds: AtomicU64,
}

impl RestartState {
    pub fn new(after_requests: Option<u64>, downtime: Duration) -> RestartState {
        RestartState {
            after_requests,
            downtime,
            trigger: CancellationToken::new(),
            cuts: AtomicU64::new(0),
            rebinds: AtomicU64::new(0),
        }
    }

    /// The restart hook of the `n`-th generation request; `None` when no restart is set up.
    pub fn watch(self: &Arc<Self>, n: u64) -> Option<RestartWatch> {
        let after = self.after_requests?;
        // Read in this order: a restart that begins in between counts as begun either way.
        let rebinds = self.rebinds.load(Ordering::Acquire);
        let cuts = self.cuts.load(Ordering::Acquire);
        Some(RestartWatch {
            state: Arc::clone(self),
            cuts_at_arrival: cuts,
            doomed: cuts > rebinds,
            trigger: n == after,
        })
    }
}

impl RestartState {
    /// A restart begins: connections open now are about to be cut.
    fn begin(&self) {
        self.cuts.fetch_add(1, Ordering::AcqRel);
    }

    /// The restarted server accepts connections again.
    fn rebound(&self) {
        self.rebinds.fetch_add(1, Ordering::AcqRel);
    }
}

/// Held by a request until its response has ended.
#[derive(Debug)]
pub(crate) struct RestartWatch {
    state: Arc<RestartState>,
    cuts_at_arrival: u64,
    /// Arrived while a restart was under way, on a connection it cuts.
    doomed: bool,
    /// This request's end starts the restart.
    trigger: bool,
}

impl RestartWatch {
    /// Whether a restart has cut connections since this request arrived, so its unfinished
    /// end is the restart's doing rather than the client's.
    pub fn cut_by_restart(&self) -> bool {
        self.doomed || self.state.cuts.load(Ordering::Acquire) > self.cuts_at_arrival
    }
}

impl Drop for RestartWatch {
    fn drop(&mut self) {
        if self.trigger {
            self.state.trigger.cancel();
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, restarting once if configured.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    restart: Arc<RestartState>,
    stats: Arc<MockStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    let mut listener = listener;
    let mut restarted = false;
    tokio::pin!(shutdown);
    loop {
        // Connections accepted before the one restart can be cut; later ones need not be.
        let cut = (!restarted && restart.after_requests.is_some()).then(CancellationToken::new);
        let stop = CancellationToken::new();
        let server = axum::serve(CuttableListener { inner: listener, cut: cut.clone() }, app.clone())
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future();
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return result,
            () = &mut shutdown => {
                // Graceful: no new connections, in-flight responses may finish, for a while.
                stop.cancel();
                if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
                    tracing::debug!("mock server: in-flight responses outlived the shutdown grace");
                }
                return Ok(());
            }
            () = restart.trigger.cancelled(), if !restarted => {}
        }
        restarted = true;
        stats.count_fault(RESTART);
        tracing::debug!("mock server: restarting, down for {:?}", restart.downtime);
        restart.begin();
        // Stop accepting (the listener is dropped as soon as the server is polled), and cut
        // every connection.
        stop.cancel();
        if let Some(cut) = &cut {
            cut.cancel();
        }
        if tokio::time::timeout(CUT_GRACE, server).await.is_err() {
            tracing::debug!("mock server: cut connections outlived the restart grace");
        }
        stats.count_fault(CONNECTION_REFUSED);
        // The restarted process's metrics count from here (the connections are cut by now).
        stats.mark_restart();
        tokio::select! {
            () = tokio::time::sleep(restart.downtime) => {}
            () = &mut shutdown => return Ok(()),
        }
        listener = rebind(addr).await?;
        restart.rebound();
    }
}

async fn rebind(addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + REBIND_PATIENCE;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(err) if err.kind() == io::ErrorKind::AddrInUse && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(REBIND_RETRY).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// A TCP listener whose connections can all be cut at once.
struct CuttableListener {
    inner: TcpListener,
    cut: Option<CancellationToken>,
}

impl Listener for CuttableListener {
    type Io = CuttableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CuttableStream, SocketAddr) {
        // axum's accept retries transient errors itself.
        let (tcp, addr) = Listener::accept(&mut self.inner).await;
        // Chunks are small writes that must leave at once; Nagle's algorithm would hold them
        // back behind delayed ACKs and distort every latency the client measures.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {err}");
        }
        let cut = self.cut.clone().map(|token| Box::pin(token.cancelled_owned()));
        (CuttableStream { tcp, cut }, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A server-side connection whose reads fail once `cut` fires.
struct CuttableStream {
    tcp: TcpStream,
    /// `None` when no restart can cut this connection: nothing to check per read.
    cut: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl AsyncRead for CuttableStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(cut) = this.cut.as_mut() {
            if cut.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "server restarting")));
            }
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for CuttableStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Arc<RestartState> {
        Arc::new(RestartState::new(Some(10), Duration::ZERO))
    }

    #[test]
    fn a_request_in_flight_when_a_restart_begins_is_cut_by_it() {
        let state = state();
        let watch = state.watch(3).unwrap();
        assert!(!watch.cut_by_restart());
        state.begin();
        assert!(watch.cut_by_restart());
        state.rebound();
        assert!(watch.cut_by_restart());
    }

    #[test]
    fn a_request_arriving_during_a_restart_came_on_a_cut_connection() {
        let state = state();
        state.begin();
        assert!(state.watch(3).unwrap().cut_by_restart());
    }

    #[test]
    fn a_request_after_the_restart_is_on_a_new_connection() {
        let state = state();
        state.begin();
        state.rebound();
        assert!(!state.watch(3).unwrap().cut_by_restart());
        assert!(state.watch(10).unwrap().trigger);
        assert!(Arc::new(RestartState::new(None, Duration::ZERO)).watch(1).is_none());
    }
}
