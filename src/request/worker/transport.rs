//! The HTTP client of the measured requests (and of the probes and the warm-up that share their
//! connections): hyper's pooled client, used directly.
//!
//! Why not reqwest, which the rest of the program uses: a connection's read buffer. hyper starts
//! it at 8 KiB and doubles it whenever a read fills it, up to some 400 KiB, so against a server
//! that streams faster than the client reads, every connection's buffer grows and stays grown;
//! at 256 streams of a zero-delay server that was half the client's memory. reqwest does not
//! expose hyper's cap on it; here it is `READ_BUFFER_MAX`. Going direct also drops reqwest's
//! per-request URL handling and its body wrappers, which the measured path does not use (it
//! follows no redirects, uses no proxy, sets its own deadlines).
//!
//! What stays as reqwest set it: `Accept: */*`, Nagle off, the connect timeout, the pool's size
//! and idle timeout, TLS with rustls and the WebPKI roots (HTTP/2 offered by ALPN), prior-knowledge
//! HTTP/2 when `client.http2` is set. `[target.tls]` replaces the roots (see `tls`), for both.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, HeaderValue};
use http_body_util::{BodyDataStream, Full};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ClientConfig;
use tokio::net::UnixStream;

use crate::plan::scenario::ClientSettings;

/// The cap on a connection's read buffer (hyper's minimum is 8 KiB, its default some 400 KiB).
/// hyper grows the buffer in its own steps, so a read may hold somewhat more (a 24 KiB read was
/// seen), never the default's hundreds; that is still dozens of SSE events per read. Response
/// headers must fit within the cap (llama.cpp's are under 200 bytes).
pub const READ_BUFFER_MAX: usize = 16 * 1024;

/// A response whose body is still to be read.
pub type Response = http::Response<Incoming>;
/// A response body, read as its data frames.
pub type Body = BodyDataStream<Incoming>;
/// Why a send failed.
pub type SendError = hyper_util::client::legacy::Error;

/// A pool of connections to the server.
#[derive(Debug, Clone)]
pub enum Http {
    /// `http` URLs. A pool of its own: a connection that may also be TLS holds room for the TLS
    /// state inline (1.1 KB, against 40 bytes for the socket), several times over in each
    /// connection's tasks, and plain HTTP is what most runs use.
    Plain(Client<HttpConnector, Full<Bytes>>),
    /// `https` URLs (and `http` ones, which it passes through).
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
    /// `target.unix_socket`: every connection to the one socket, whatever the URL's host.
    Unix(Client<UnixConnector, Full<Bytes>>),
}

/// Connects to a Unix socket for any URI (the URI gives the `Host` header and the path only).
#[derive(Debug, Clone)]
pub struct UnixConnector {
    path: Arc<Path>,
    connect: Duration,
}

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let (path, limit) = (Arc::clone(&self.path), self.connect);
        Box::pin(async move {
            match tokio::time::timeout(limit, UnixStream::connect(&*path)).await {
                Ok(stream) => stream.map(TokioIo::new),
                Err(_) => {
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting to the Unix socket timed out"))
                }
            }
        })
    }
}

impl Http {
    /// A pool for `tls` (`https`) or plain URLs, keeping up to `pool_idle` idle connections
    /// (0: none, every request opens its own). `config`: the TLS configuration of
    /// `[target.tls]` (see `tls`), or the WebPKI roots.
    pub fn new(settings: &ClientSettings, pool_idle: usize, tls: bool, config: Option<&ClientConfig>) -> Http {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(settings.connect));
        let builder = builder(settings, pool_idle);
        if let Some(path) = &settings.unix_socket {
            let connector = UnixConnector { path: Arc::from(path.as_path()), connect: settings.connect };
            return Http::Unix(builder.build(connector));
        }
        if !tls {
            return Http::Plain(builder.build(tcp));
        }
        // `https` URLs are handed on to rustls.
        tcp.enforce_http(false);
        let connector = match config {
            None => HttpsConnectorBuilder::new().with_webpki_roots().https_or_http().enable_http1().enable_http2(),
            Some(config) => {
                let builder = HttpsConnectorBuilder::new().with_tls_config(config.clone()).https_or_http();
                // `server_name`: sent as SNI too (the verifier checks the certificate against it).
                let builder = match settings.tls.as_ref().and_then(|t| t.server_name.clone()) {
                    Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name)),
                    None => builder,
                };
                builder.enable_http1().enable_http2()
            }
        }
        .wrap_connector(tcp);
        Http::Tls(builder.build(connector))
    }

    /// Send `request`; the response once its headers are in.
    pub fn send(&self, mut request: http::Request<Full<Bytes>>) -> ResponseFuture {
        request.headers_mut().entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
        match self {
            Http::Plain(client) => client.request(request),
            Http::Tls(client) => client.request(request),
            Http::Unix(client) => client.request(request),
        }
    }
}

/// The pool's settings, whichever its connector.
fn builder(settings: &ClientSettings, pool_idle: usize) -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(pool_idle)
        .http1_max_buf_size(READ_BUFFER_MAX);
    if settings.http2 {
        // Cleartext HTTP/2 without an upgrade round trip: every stream shares one connection.
        builder.http2_only(true);
    }
    builder
}

/// `response`'s body as a stream of its bytes.
pub fn body(response: Response) -> Body {
    BodyDataStream::new(response.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ErrorKind;
    use crate::plan::scenario::RetryPolicy;
    use crate::request::worker::errors::{error_chain, send_error_kind};
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings(http2: bool) -> ClientSettings {
        let s = Duration::from_secs(5);
        ClientSettings {
            connect: s,
            first_byte: s,
            idle: s,
            request: s,
            request_given: None,
            retry: RetryPolicy { max_retries: 0, on: Vec::new(), backoff: s },
            http2,
            tls: None,
            unix_socket: None,
        }
    }

    /// A GET of `uri`, bounded in time.
    async fn send(http2: bool, uri: &str) -> Result<Response, SendError> {
        let sent = Http::new(&settings(http2), 1, uri.starts_with("https:"), None).send(get(uri));
        tokio::time::timeout(Duration::from_secs(10), sent).await.expect("an answer or an error within 10 s")
    }

    fn get(uri: &str) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = uri.parse().unwrap();
        request
    }

    /// A server that answers one request per connection with `answer`, after reading its head
    /// (or at once: a TLS hello has no head to wait for).
    async fn serve(answer: Vec<u8>, at_once: bool) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !at_once && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = socket.write_all(&answer).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_body_far_larger_than_the_read_buffer_arrives_whole() {
        let body = vec![b'x'; 40 * READ_BUFFER_MAX + 7];
        let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        answer.extend_from_slice(&body);
        let addr = serve(answer, false).await;
        let response = send(false, &format!("http://{addr}/")).await.unwrap();
        let mut stream = super::body(response);
        let (mut got, mut largest) = (0, 0);
        while let Some(bytes) = stream.next().await {
            let bytes = bytes.unwrap();
            largest = largest.max(bytes.len());
            got += bytes.len();
        }
        assert_eq!(got, body.len());
        // A read fills what the buffer has room for, which hyper rounds up past the cap when it
        // reserves; but nowhere near its default of some 400 KiB.
        assert!(largest <= 4 * READ_BUFFER_MAX, "a read of {largest} bytes");
    }

    #[tokio::test]
    async fn https_to_a_plaintext_server_is_a_connect_failure() {
        // The TLS stack initialises (no crypto provider missing) and its failure is a connect's.
        let addr = serve(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec(), true).await;
        let e = send(false, &format!("https://127.0.0.1:{}/", addr.port())).await.unwrap_err();
        assert_eq!(send_error_kind(&e), ErrorKind::ConnectFailed, "{}", error_chain(&e));
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        for http2 in [false, true] {
            let e = send(http2, &format!("http://127.0.0.1:{port}/")).await.unwrap_err();
            assert_eq!(send_error_kind(&e), ErrorKind::ConnectFailed, "{}", error_chain(&e));
        }
    }

    #[tokio::test]
    async fn response_headers_beyond_the_read_buffer_are_refused_not_hung() {
        let answer = format!("HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n", "a".repeat(READ_BUFFER_MAX));
        let addr = serve(answer.into_bytes(), false).await;
        let e = send(false, &format!("http://{addr}/")).await.unwrap_err();
        assert_eq!(send_error_kind(&e), ErrorKind::StreamBroken);
        assert!(error_chain(&e).contains("too large"), "{}", error_chain(&e));
    }
}
