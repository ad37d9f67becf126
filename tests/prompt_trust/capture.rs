//! A transparent HTTP/1.1 proxy on `127.0.0.1:0` in front of a server: bytes pass unchanged both
//! ways, and the body of every POST the client sends is kept, so a test can check what was
//! actually sent. Bounded: no connection lives longer than `CONNECTION_LIMIT`, and dropping the
//! `Capture` stops the listener and every connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// No proxied connection lives longer than this.
const CONNECTION_LIMIT: Duration = Duration::from_secs(60);

/// One request body the client sent, with its path.
#[derive(Debug, Clone)]
pub struct Sent {
    pub path: String,
    pub body: Value,
}

/// A transparent HTTP/1.1 proxy on `127.0.0.1:0` in front of the simulator: bytes pass
/// unchanged both ways, and every POST body is kept.
pub struct Capture {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<Sent>>>,
    stop: CancellationToken,
}

impl Capture {
    pub async fn start(upstream: SocketAddr) -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (kept, stopped) = (sent.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stopped.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else { continue };
                let (kept, stopped) = (kept.clone(), stopped.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = stopped.cancelled() => {}
                        _ = tokio::time::timeout(CONNECTION_LIMIT, relay(client, upstream, kept)) => {}
                    }
                });
            }
        });
        Capture { addr, sent, stop }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bodies sent since the last call.
    pub fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Pass one connection through, keeping each request's body as it goes by.
async fn relay(client: TcpStream, upstream: SocketAddr, sent: Arc<Mutex<Vec<Sent>>>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if server_write.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        pending.extend_from_slice(&chunk[..n]);
        while let Some((request, used)) = parse_request(&pending) {
            sent.lock().unwrap().extend(request);
            pending.drain(..used);
        }
    }
    let _ = server_write.shutdown().await;
    let _ = back.await;
}

/// The first complete request in `bytes`: its body when it is a POST, and its length.
fn parse_request(bytes: &[u8]) -> Option<(Option<Sent>, usize)> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let mut length = 0usize;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let name = name.trim().to_ascii_lowercase();
        assert_ne!(name, "transfer-encoding", "the client sends bodies with a length");
        if name == "content-length" {
            length = value.trim().parse().ok()?;
        }
    }
    let end = head_end + 4 + length;
    if bytes.len() < end {
        return None;
    }
    let request = (method == "POST").then(|| Sent {
        path,
        body: serde_json::from_slice(&bytes[head_end + 4..end]).expect("a request body is JSON"),
    });
    Some((request, end))
}
