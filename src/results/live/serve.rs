//! The client's own `/metrics` (`run.metrics_listen`, `--metrics-listen`): a listener bound
//! before the first request, served on its own task from a registry's readings, and stopped
//! with the run (after `run.metrics_linger`, so that a scraper's last visit sees the end).
//!
//! What it reads is bounded by hyper's own limits on a request's head (the body of a `GET` is
//! never read); a reading is a copy taken under the registry's lock, rendered outside it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::exposition::{self, Format};
use super::registry::Registry;

/// A listening socket, bound and not yet served: binding first lets a run refuse an address in
/// use before it sends anything.
#[derive(Debug)]
pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

/// Why the address cannot be listened on, in words for the user.
pub fn bind_error(addr: SocketAddr, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => format!("{addr}: address in use (another process listens on that port)"),
        std::io::ErrorKind::AddrNotAvailable => format!("{addr}: address not available on this host"),
        std::io::ErrorKind::PermissionDenied => format!("{addr}: permission denied (ports below 1024 need privileges)"),
        _ => format!("{addr}: cannot listen there ({e})"),
    }
}

impl Bound {
    /// Bind `addr` (port 0 takes a free port).
    pub async fn bind(addr: SocketAddr) -> Result<Bound, String> {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| bind_error(addr, &e))?;
        let addr = listener.local_addr().map_err(|e| bind_error(addr, &e))?;
        Ok(Bound { listener, addr })
    }

    /// The URL scrapers use: the bound port, and `127.0.0.1` for an unspecified address
    /// (`0.0.0.0`: every interface, loopback among them).
    pub fn url(&self) -> String {
        let host = match self.addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
            ip if ip.is_unspecified() => "[::1]".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        format!("http://{host}:{}/metrics", self.addr.port())
    }

    /// Serve `/metrics` from `registry` until the exporter is stopped or dropped.
    pub fn serve(self, registry: Registry) -> Exporter {
        let url = self.url();
        let stop = CancellationToken::new();
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(metrics))
            .route("/", axum::routing::get(|| async { "anvil-load: the client's metrics are at /metrics\n" }))
            .with_state(registry);
        let shutdown = stop.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            let _ = axum::serve(self.listener, app).with_graceful_shutdown(shutdown).await;
        });
        Exporter { url, stop, task: Some(task) }
    }
}

async fn metrics(State(registry): State<Registry>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let body = exposition::render(&registry.snapshot(), format);
    (StatusCode::OK, [(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

/// `/metrics`, being served.
#[derive(Debug)]
pub struct Exporter {
    url: String,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// How long a stop waits for scrapes in progress to finish before it cuts them.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Exporter {
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Keep serving for `linger` (a scraper's last visit after the run sees its final counts),
    /// then stop: scrapes in progress get `STOP_WAIT` to finish.
    pub async fn finish(mut self, linger: Duration) {
        tokio::time::sleep(linger).await;
        self.stop.cancel();
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl Drop for Exporter {
    /// A run that ends early (an error, a refusal) stops serving at once.
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_the_registry_and_stops() {
        let registry = Registry::new();
        let level = registry.start_level("c2");
        level.dropped(crate::request::record::timing::Phase::Measure);
        let bound = Bound::bind("127.0.0.1:0".parse().unwrap()).await.expect("a free port");
        let exporter = bound.serve(registry);
        let url = exporter.url().to_string();
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/metrics"), "{url}");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
        let response = client.get(&url).send().await.expect("served");
        assert_eq!(response.headers()[header::CONTENT_TYPE], Format::Prometheus.content_type());
        let body = response.text().await.unwrap();
        assert!(
            body.contains("anvil_requests_total{level=\"c2\",phase=\"measured\",outcome=\"dropped\"} 1\n"),
            "{body}"
        );
        let open = client.get(&url).header(header::ACCEPT, "application/openmetrics-text; version=1.0.0").send();
        let open = open.await.expect("served");
        assert_eq!(open.headers()[header::CONTENT_TYPE], Format::OpenMetrics.content_type());
        exporter.finish(Duration::ZERO).await;
        assert!(client.get(&url).send().await.is_err(), "stopped");
    }

    #[tokio::test]
    async fn an_address_in_use_is_named() {
        let first = Bound::bind("127.0.0.1:0".parse().unwrap()).await.expect("a free port");
        let err = Bound::bind(first.addr).await.expect_err("the port is taken");
        assert!(err.contains("address in use"), "{err}");
    }
}
