//! A hostile server for tests: raw TCP on `127.0.0.1:0` that answers each request with exact
//! bytes and timing chosen by the test (a `Script`), so the client can be shown streams no
//! real engine would send: comments forever, empty chunks at full speed, junk after `[DONE]`,
//! secrets echoed in every field, redirects, absurd `Retry-After` values, connections closed
//! under a pooled client.
//!
//! Bounded: every connection is dropped after `CONNECTION_LIMIT` whatever its script says, and
//! dropping the `Hostile` stops the listener and every connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// No connection lives longer than this, whatever its script.
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(60);
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Requests this connection answered before this one.
    pub on_connection: u64,
    /// 0-based number of this generation request (POST) across the server; 0 for others.
    pub number: u64,
}

impl Request {
    pub fn is_generation(&self) -> bool {
        self.method == "POST"
    }
    /// `"stream": true` in the body (a measured request, not a calibration probe).
    pub fn streamed(&self) -> bool {
        serde_json::from_slice::<Value>(&self.body).ok().and_then(|v| v.get("stream")?.as_bool()).unwrap_or(false)
    }
    /// The canary marker the prompt asks for, when there is one.
    pub fn canary(&self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.body);
        let at = text.find("ANVIL_REQ_")?;
        let len = text[at..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
        Some(text[at..at + len].to_string())
    }
    /// Characters of prompt text in the body (for a plausible token count).
    pub fn prompt_chars(&self) -> usize {
        self.body.len()
    }
}

/// What to do on the wire.
#[derive(Debug, Clone)]
pub enum Step {
    /// Write these bytes.
    Send(Vec<u8>),
    Sleep(Duration),
    /// Write `bytes` every `every` for `total`.
    Repeat {
        bytes: Vec<u8>,
        every: Duration,
        total: Duration,
    },
    /// Write `bytes` back to back, as fast as the socket takes them, for `total`.
    Flood {
        bytes: Vec<u8>,
        total: Duration,
    },
}

/// The answer to one request, and what happens to the connection afterwards.
#[derive(Debug, Clone)]
pub struct Reply {
    pub steps: Vec<Step>,
    /// Keep the connection for another request (otherwise it is closed after the steps).
    pub keep_alive: bool,
}

impl Reply {
    pub fn close(steps: Vec<Step>) -> Self {
        Reply { steps, keep_alive: false }
    }
    pub fn keep_alive(steps: Vec<Step>) -> Self {
        Reply { steps, keep_alive: true }
    }
    /// Close the connection without a byte of answer.
    pub fn hang_up() -> Self {
        Reply { steps: Vec::new(), keep_alive: false }
    }
}

pub type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// What the server saw.
#[derive(Debug, Default)]
pub struct Counts {
    pub connections: AtomicU64,
    /// POSTs with `"stream": true`.
    pub streamed: AtomicU64,
    /// POSTs without (calibration probes).
    pub unstreamed: AtomicU64,
    pub models: AtomicU64,
}

pub struct Hostile {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: CancellationToken,
}

impl Hostile {
    /// Serve `script` on a fresh loopback port. `GET …/models` is answered by the script too.
    pub async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let counts = Arc::new(Counts::default());
        let stop = CancellationToken::new();
        let script: Script = Arc::new(script);
        let generation = Arc::new(AtomicU64::new(0));
        {
            let (counts, stop) = (counts.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        () = stop.cancelled() => return,
                        a = listener.accept() => a,
                    };
                    let Ok((socket, _)) = accepted else { continue };
                    counts.connections.fetch_add(1, Ordering::Relaxed);
                    let (script, counts, stop, generation) =
                        (script.clone(), counts.clone(), stop.clone(), generation.clone());
                    tokio::spawn(async move {
                        tokio::select! {
                            () = stop.cancelled() => {}
                            _ = tokio::time::timeout(CONNECTION_LIMIT, serve(socket, script, counts, generation)) => {}
                        }
                    });
                }
            });
        }
        Hostile { addr, counts, stop }
    }

    /// `http://127.0.0.1:<port>/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn streamed(&self) -> u64 {
        self.counts.streamed.load(Ordering::Relaxed)
    }
    pub fn unstreamed(&self) -> u64 {
        self.counts.unstreamed.load(Ordering::Relaxed)
    }
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(mut socket: TcpStream, script: Script, counts: Arc<Counts>, generation: Arc<AtomicU64>) {
    let _ = socket.set_nodelay(true);
    let mut buffered = Vec::new();
    let mut on_connection = 0;
    loop {
        let Some(mut request) = read_request(&mut socket, &mut buffered).await else { return };
        request.on_connection = on_connection;
        on_connection += 1;
        if request.method == "PRI" {
            // An HTTP/2 preface: this server speaks HTTP/1.1 only, as most engines' servers do.
            let _ = socket
                .write_all(b"HTTP/1.1 505 HTTP Version Not Supported\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            return;
        }
        if request.is_generation() {
            request.number = generation.fetch_add(1, Ordering::Relaxed);
            let counter = if request.streamed() { &counts.streamed } else { &counts.unstreamed };
            counter.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.models.fetch_add(1, Ordering::Relaxed);
        }
        let reply = script(&request);
        for step in &reply.steps {
            if play(&mut socket, step).await.is_err() {
                return; // the client left
            }
        }
        if !reply.keep_alive {
            let _ = socket.shutdown().await;
            return;
        }
    }
}

async fn play(socket: &mut TcpStream, step: &Step) -> std::io::Result<()> {
    match step {
        Step::Send(bytes) => socket.write_all(bytes).await,
        Step::Sleep(d) => {
            tokio::time::sleep(*d).await;
            Ok(())
        }
        Step::Repeat { bytes, every, total } => {
            let end = tokio::time::Instant::now() + *total;
            while tokio::time::Instant::now() < end {
                socket.write_all(bytes).await?;
                tokio::time::sleep(*every).await;
            }
            Ok(())
        }
        Step::Flood { bytes, total } => {
            let block = bytes.repeat((16 * 1024 / bytes.len().max(1)).max(1));
            let end = tokio::time::Instant::now() + *total;
            while tokio::time::Instant::now() < end {
                socket.write_all(&block).await?;
            }
            Ok(())
        }
    }
}

/// One HTTP/1.1 request (head and `content-length` body), or `None` when the client closed.
async fn read_request(socket: &mut TcpStream, buffered: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buffered.len() > MAX_HEAD {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffered.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffered[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next().unwrap_or("").to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
        .min(MAX_BODY);
    buffered.drain(..head_end + 4);
    while buffered.len() < length {
        let mut chunk = [0u8; 65536];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffered.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = buffered.drain(..length).collect();
    Some(Request { method, target, headers, body, on_connection: 0, number: 0 })
}

// ---- Bytes of well-formed (and deliberately ill-formed) answers ----

/// Headers of a streamed answer whose body ends when the connection closes.
pub fn sse_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
        .to_vec()
}

/// One `data:` event holding `value`.
pub fn event(value: &Value) -> Vec<u8> {
    format!("data: {value}\n\n").into_bytes()
}

pub fn role_chunk() -> Vec<u8> {
    event(&json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}))
}

pub fn content_chunk(text: &str) -> Vec<u8> {
    event(&json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
}

pub fn finish_chunk(reason: &str) -> Vec<u8> {
    event(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
}

pub fn usage_chunk(prompt_tokens: u64, completion_tokens: u64) -> Vec<u8> {
    event(&json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}))
}

pub fn done() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

/// A complete, well-formed streamed answer of `tokens` one-word chunks, without its headers.
pub fn stream_body(tokens: u64) -> Vec<u8> {
    let mut out = role_chunk();
    for i in 0..tokens {
        out.extend(content_chunk(if i == 0 { "word" } else { " word" }));
    }
    out.extend(finish_chunk("length"));
    out.extend(usage_chunk(100, tokens));
    out.extend(done());
    out
}

/// A JSON answer with `status` (e.g. `"400 Bad Request"`) and extra header lines.
pub fn json_answer(status: &str, extra_headers: &str, body: &Value, keep_alive: bool) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: {}\r\n{extra_headers}\r\n{body}",
        body.len(),
        if keep_alive { "keep-alive" } else { "close" }
    )
    .into_bytes()
}

/// `GET /models` listing `ids`.
pub fn models_answer(ids: &[&str], keep_alive: bool) -> Vec<u8> {
    let data: Vec<Value> = ids.iter().map(|id| json!({"id": id, "object": "model"})).collect();
    json_answer("200 OK", "", &json!({"object": "list", "data": data}), keep_alive)
}
