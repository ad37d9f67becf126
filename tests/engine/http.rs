//! Just enough HTTP/1.1 to read what passed between the client and a real engine: message heads,
//! bodies framed by `Content-Length`, chunked transfer or the connection's end, server-sent
//! events, and a one-shot `GET` for the engine's own endpoints (`/health`, `/metrics`, `/slots`)
//! or `POST` for a request a test sends the engine itself.
//! Everything here reads bytes an engine wrote, so nothing is unwrapped: a message that does not
//! parse is reported with what was found.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// One HTTP message head: the start line's words and the headers (names lower-cased).
#[derive(Debug, Clone)]
pub struct Head {
    pub start: Vec<String>,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn chunked(&self) -> bool {
        self.header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    fn content_length(&self) -> Option<usize> {
        self.header("content-length").and_then(|v| v.trim().parse().ok())
    }
}

/// One message from the front of `bytes`: its head, its body (de-chunked) and the bytes it took.
/// `until_close` reads a body without framing to the end of `bytes` (a response that ends with
/// its connection); a request without framing has no body. `None` when no whole head is there.
pub fn message(bytes: &[u8], until_close: bool) -> Option<(Head, Vec<u8>, usize)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = text.split("\r\n");
    let start = lines.next()?.split(' ').map(str::to_string).collect();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let head = Head { start, headers };
    let rest = &bytes[end + 4..];
    let (body, used) = if head.chunked() {
        dechunk(rest)
    } else if let Some(n) = head.content_length() {
        let n = n.min(rest.len());
        (rest[..n].to_vec(), n)
    } else if until_close {
        (rest.to_vec(), rest.len())
    } else {
        (Vec::new(), 0)
    };
    Some((head, body, end + 4 + used))
}

/// A chunked body: its data and the bytes it took (up to what arrived, if it was cut).
fn dechunk(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = bytes[at..].windows(2).position(|w| w == b"\r\n") else { return (out, bytes.len()) };
        let size_text = String::from_utf8_lossy(&bytes[at..at + eol]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16) else {
            return (out, bytes.len());
        };
        at += eol + 2;
        if size == 0 {
            // The last chunk, then (no trailers here) the empty line.
            let end = (at + 2).min(bytes.len());
            return (out, end);
        }
        let take = size.min(bytes.len() - at);
        out.extend_from_slice(&bytes[at..at + take]);
        at += take;
        if take < size {
            return (out, bytes.len());
        }
        at = (at + 2).min(bytes.len());
    }
}

/// One server-sent event: its `event:` name (if any) and its `data:` payload.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    /// The payload as JSON (`None` for `[DONE]` or anything else that is not JSON).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.data).ok()
    }
}

/// The events of an SSE body, in order.
pub fn sse_events(body: &[u8]) -> Vec<Event> {
    let text = String::from_utf8_lossy(body);
    let mut events = Vec::new();
    let (mut name, mut data): (Option<String>, Vec<String>) = (None, Vec::new());
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !data.is_empty() {
                events.push(Event { name: name.take(), data: data.join("\n") });
            }
            name = None;
            data.clear();
        } else if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
        }
    }
    if !data.is_empty() {
        events.push(Event { name, data: data.join("\n") });
    }
    events
}

/// `GET path` on a connection of its own, bounded to 10 s: the status and the body.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>), String> {
    exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes(), path)
}

/// `POST path` of a JSON body (not streamed) on a connection of its own, bounded to 10 s past
/// the engine's first byte: the status and the body.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Result<(u16, Vec<u8>), String> {
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    exchange(addr, &[head.as_bytes(), body.as_bytes()].concat(), path)
}

/// Send one whole request and read the answer to the connection's end.
fn exchange(addr: SocketAddr, request: &[u8], path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connect to {addr}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream.write_all(request).map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
    let (head, body, _) =
        message(&bytes, true).ok_or_else(|| format!("{path}: no HTTP answer ({} bytes)", bytes.len()))?;
    let status = head.start.get(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("{path}: no status"))?;
    Ok((status, body))
}

/// A Prometheus text exposition as name (with labels, as written) → value; comments left out.
pub fn prometheus(body: &[u8]) -> Vec<(String, f64)> {
    String::from_utf8_lossy(body)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.trim().rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn chunked_bodies_and_events_are_read_back() {
    let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n9\r\n{\"a\":1}\n\n\r\n0\r\n\r\n";
    let (head, body, used) = message(wire, true).expect("a message");
    assert_eq!(head.start[1], "200");
    assert_eq!(used, wire.len());
    let events = sse_events(&body);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].json().expect("json")["a"], 1);
    let request = b"POST /v1/x HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}GET /";
    let (head, body, used) = message(request, false).expect("a request");
    assert_eq!((head.start[0].as_str(), body.as_slice(), used), ("POST", &b"{}"[..], request.len() - 5));
}
