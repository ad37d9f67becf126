//! A recording TCP proxy between the client and the engine: every byte is passed on unchanged
//! (and a connection the engine closes is closed to the client, as llama.cpp closes after every
//! stream), and a copy is kept, so a test reads the engine's own answer to each request — its
//! `usage`, its `timings` block, its event names — beside the artifact the client wrote from
//! the same bytes. The tap adds a hop on loopback; it never makes the client's clocks shorter.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::http::{Event, Head, message, sse_events};

/// Bytes one direction of a connection carried, with when each read arrived.
#[derive(Default)]
struct Direction {
    bytes: Vec<u8>,
    /// (offset of the read's first byte, when it was read).
    reads: Vec<(usize, SystemTime)>,
}

impl Direction {
    /// When the byte at `offset` arrived.
    fn arrival(&self, offset: usize) -> SystemTime {
        self.reads.iter().rev().find(|(at, _)| *at <= offset).map_or(SystemTime::UNIX_EPOCH, |r| r.1)
    }
}

/// One finished connection.
struct Connection {
    up: Direction,
    down: Direction,
}

struct Shared {
    upstream: SocketAddr,
    open: AtomicUsize,
    /// `POST` heads with `"stream":true` sent upstream so far, over every connection.
    streamed_posts: AtomicUsize,
    finished: Mutex<Vec<Connection>>,
    stop: AtomicBool,
}

/// One request and the engine's answer to it, as they crossed the tap.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The connection it went on (numbered by the tap) and its place there, from 0.
    pub connection: usize,
    pub position: usize,
    pub sent: SystemTime,
    pub method: String,
    pub path: String,
    pub request_head: Head,
    pub body: Value,
    /// The answer's head and body (de-chunked); `None` when none arrived.
    pub status: Option<u16>,
    pub response_head: Option<Head>,
    pub response: Vec<u8>,
}

impl Exchange {
    /// A measured request (streamed), not a calibration probe or a `GET`.
    pub fn streamed(&self) -> bool {
        self.method == "POST" && self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    pub fn events(&self) -> Vec<Event> {
        sse_events(&self.response)
    }

    /// The JSON payloads of the answer's events (`[DONE]` left out), in order.
    pub fn payloads(&self) -> Vec<Value> {
        self.events().iter().filter_map(Event::json).collect()
    }

    /// The JSON of a non-streamed answer.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.response).ok()
    }

    /// The last payload that carries `key` (at its top level, or inside `response` for the
    /// Responses API's lifecycle events).
    pub fn last_with(&self, key: &str) -> Option<Value> {
        self.payloads().into_iter().rev().find_map(|p| {
            p.get(key)
                .filter(|v| !v.is_null())
                .cloned()
                .or_else(|| p.get("response")?.get(key).filter(|v| !v.is_null()).cloned())
        })
    }
}

/// The proxy: listens on `127.0.0.1:0` and forwards to `upstream`. Dropping it stops the
/// listener; connections end with their peers.
pub struct Tap {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Tap {
    pub fn start(upstream: SocketAddr) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the tap listens");
        let addr = listener.local_addr().expect("the tap's address");
        let shared = Arc::new(Shared {
            upstream,
            open: AtomicUsize::new(0),
            streamed_posts: AtomicUsize::new(0),
            finished: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                accept.open.fetch_add(1, Ordering::SeqCst);
                let shared = accept.clone();
                std::thread::spawn(move || serve(client, shared));
            }
        });
        Tap { addr, shared }
    }

    /// The base URL the client is given.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Streamed generation requests sent to the engine so far (live, while the run goes on).
    pub fn streamed_posts(&self) -> usize {
        self.shared.streamed_posts.load(Ordering::SeqCst)
    }

    /// Every exchange, in the order the requests were sent, once every connection has ended
    /// (the client has exited): waits up to 30 s for them.
    pub fn exchanges(&self) -> Vec<Exchange> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.shared.open.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "connections through the tap still open 30 s after the run");
            std::thread::sleep(Duration::from_millis(20));
        }
        let finished = self.shared.finished.lock().expect("tap lock");
        let mut out: Vec<Exchange> = finished.iter().enumerate().flat_map(|(n, c)| exchanges_of(n, c)).collect();
        out.sort_by_key(|e| e.sent);
        out
    }

    /// The streamed generation requests among [`Tap::exchanges`].
    pub fn streamed(&self) -> Vec<Exchange> {
        self.exchanges().into_iter().filter(Exchange::streamed).collect()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Pass one connection through both ways until both ends are done, then keep its bytes.
fn serve(client: TcpStream, shared: Arc<Shared>) {
    let finish = |up: Direction, down: Direction| {
        shared.finished.lock().expect("tap lock").push(Connection { up, down });
        shared.open.fetch_sub(1, Ordering::SeqCst);
    };
    let Ok(server) = TcpStream::connect(shared.upstream) else {
        finish(Direction::default(), Direction::default());
        return;
    };
    let (Ok(client_read), Ok(server_write)) = (client.try_clone(), server.try_clone()) else {
        finish(Direction::default(), Direction::default());
        return;
    };
    let counter = shared.clone();
    let up = std::thread::spawn(move || pump(client_read, server_write, Some(&counter.streamed_posts)));
    let down = pump(server, client, None);
    let up = up.join().unwrap_or_default();
    finish(up, down);
}

/// Copy `from` to `to` until `from` ends, then end `to`'s writing side (or both on an error).
/// With `posts`, the streamed `POST`s among the bytes are counted into it as they pass, so a
/// test can act while the run goes on.
fn pump(mut from: TcpStream, mut to: TcpStream, posts: Option<&AtomicUsize>) -> Direction {
    let mut dir = Direction::default();
    let mut counted = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
            Ok(n) => {
                dir.reads.push((dir.bytes.len(), SystemTime::now()));
                dir.bytes.extend_from_slice(&buf[..n]);
                if let Some(total) = posts {
                    let count = count_streamed_posts(&dir.bytes);
                    total.fetch_add(count.saturating_sub(counted), Ordering::SeqCst);
                    counted = counted.max(count);
                }
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    break;
                }
            }
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                break;
            }
        }
    }
    dir
}

/// Whole `POST` requests with `"stream":true` at the front of a connection's upstream bytes.
fn count_streamed_posts(bytes: &[u8]) -> usize {
    let mut at = 0;
    let mut count = 0;
    while let Some((head, body, used)) = message(&bytes[at..], false) {
        let whole = head.header("content-length").and_then(|v| v.parse::<usize>().ok()).is_none_or(|n| body.len() == n);
        if !whole {
            break;
        }
        let streamed = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("stream")?.as_bool());
        count += usize::from(head.start.first().map(String::as_str) == Some("POST") && streamed == Some(true));
        at += used;
    }
    count
}

/// The requests of connection `number` paired with its answers, in order.
fn exchanges_of(number: usize, conn: &Connection) -> Vec<Exchange> {
    let mut out = Vec::new();
    let (mut up_at, mut down_at) = (0, 0);
    while let Some((head, body, used)) = message(&conn.up.bytes[up_at..], false) {
        let sent = conn.up.arrival(up_at);
        up_at += used;
        let answer = message(&conn.down.bytes[down_at..], true);
        if let Some((_, _, used)) = &answer {
            down_at += used;
        }
        let (status, response_head, response) = match answer {
            Some((h, b, _)) => (h.start.get(1).and_then(|s| s.parse().ok()), Some(h), b),
            None => (None, None, Vec::new()),
        };
        out.push(Exchange {
            connection: number,
            position: out.len(),
            sent,
            method: head.start.first().cloned().unwrap_or_default(),
            path: head.start.get(1).cloned().unwrap_or_default(),
            request_head: head,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            status,
            response_head,
            response,
        });
    }
    out
}
