//! The raw peers of the coordinator tests: a shard side and a coordinator side of the protocol
//! written with the library's `auth` (so a test can seal with any token and say anything), and
//! a proxy that alters records in transit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anvil_load::distributed::shard::auth::{self, Direction, Opener, Sealer, SessionKey, Token};
use serde_json::{Value, json};

use super::common::text;

pub const TOKEN: &str = "coordinator-trust-token-0123456789";
pub const SHARDS: u32 = 2;

/// Until something accepts connections at `addr`.
pub fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens at {addr}");
}

/// A process's peak resident memory in kB (Linux).
pub fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A raw peer speaking the shard side of the protocol, sealing with whatever token it is given.
pub struct Peer {
    pub stream: TcpStream,
    reader: BufReader<TcpStream>,
    pub sealer: Option<Sealer>,
    opener: Option<Opener>,
}

impl Peer {
    pub fn connect(addr: &str) -> Peer {
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("{addr}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Peer { stream, reader, sealer: None, opener: None }
    }

    /// Both hellos, then the connection's key from `token`.
    pub fn hello(addr: &str, token: &str) -> Peer {
        let mut p = Peer::connect(addr);
        let nonce = auth::nonce();
        let hello = json!({"type": "hello", "protocol": 2, "nonce": auth::hex(&nonce)});
        p.plain(&hello);
        let answer = p.line();
        let answer: Value = serde_json::from_slice(&answer).unwrap_or_else(|_| panic!("{}", text(&answer)));
        assert_eq!(answer["type"], "hello", "{answer}");
        let theirs = auth::nonce_from_hex(answer["nonce"].as_str().unwrap()).unwrap();
        let key = SessionKey::derive(&Token::parse(token).unwrap(), &nonce, &theirs);
        p.sealer = Some(Sealer::new(key.clone(), Direction::ToCoordinator));
        p.opener = Some(Opener::new(key, Direction::ToShard));
        p
    }

    pub fn plain(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).unwrap();
        line.push(b'\n');
        let _ = self.stream.write_all(&line);
    }

    pub fn send(&mut self, msg: &Value) {
        let line = self.sealer.as_mut().unwrap().seal(&serde_json::to_vec(msg).unwrap());
        let _ = self.stream.write_all(&line);
    }

    pub fn line(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        let _ = self.reader.read_until(b'\n', &mut buf);
        buf
    }

    /// The next message that is not a heartbeat: opened when sealed, as is when plain; `None`
    /// when the connection closed.
    pub fn recv(&mut self) -> Option<Value> {
        loop {
            let line = self.line();
            if line.is_empty() {
                return None;
            }
            let msg: Value = match self.opener.as_mut().map(|o| o.open(&line).map(<[u8]>::to_vec)) {
                Some(Ok(json)) => serde_json::from_slice(&json).unwrap(),
                _ => serde_json::from_slice(&line).unwrap_or(Value::String(text(&line))),
            };
            if msg["type"] != "alive" {
                return Some(msg);
            }
        }
    }

    pub fn join(&mut self, index: u32, fingerprint: &str) {
        let version = env!("CARGO_PKG_VERSION");
        self.send(&json!({"type": "join", "index": index, "count": SHARDS, "protocol": 2, "version": version, "fingerprint": fingerprint, "host": "peer"}));
    }
}

/// Shard 0's configuration fingerprint, as an authenticated peer with a wrong one is told it.
pub fn fingerprint_of_shard_0(addr: &str) -> String {
    let mut p = Peer::hello(addr, TOKEN);
    p.join(1, "fnv1a64:0000000000000000");
    let refused = p.recv().expect("a refusal");
    assert_eq!(refused["type"], "refused", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.contains("different configuration"), "{reason}");
    let at = reason.rfind("(fnv1a64:").unwrap() + 1;
    reason[at..at + 24].to_string()
}

/// A proxy between shard 1 and the coordinator that changes one byte of the first records it
/// carries (not a newline, so the line count stays right): what the SHA-256 must catch. It
/// serves every connection the shard makes (a shard that starts before the coordinator listens
/// tries again), waiting for the coordinator the way the shard would.
pub fn tampering_proxy(listen: TcpListener, to: String) {
    let tampered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::spawn(move || {
        for inbound in listen.incoming() {
            let Ok(inbound) = inbound else { return };
            let (to, tampered) = (to.clone(), std::sync::Arc::clone(&tampered));
            std::thread::spawn(move || relay_tampering(inbound, &to, &tampered));
        }
    });
}

fn relay_tampering(inbound: TcpStream, to: &str, tampered: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering;
    let deadline = Instant::now() + Duration::from_secs(60);
    let outbound = loop {
        match TcpStream::connect(to) {
            Ok(outbound) => break outbound,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => return,
        }
    };
    let (mut in_r, mut out_w) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
    let (mut out_r, mut in_w) = (outbound, inbound);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut out_r, &mut in_w);
    });
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match in_r.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !tampered.load(Ordering::SeqCst) {
            let start = seen.len();
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if let Some(at) = text.find("\"type\":\"records\"") {
                if let Some(eol) = seen[at..].iter().position(|&b| b == b'\n') {
                    // Ten bytes into the records themselves.
                    let target = at + eol + 10;
                    if target < seen.len() && target >= start {
                        let b = &mut buf[target - start];
                        *b = if *b == b'1' { b'2' } else { b'1' };
                        tampered.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        if out_w.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A coordinator played by the test: the protocol done right, with the welcome and start
/// instant it is given. Returns every message the shard sent.
pub fn fake_coordinator(
    listen: TcpListener,
    run_id: String,
    start_in: Duration,
) -> std::thread::JoinHandle<Vec<Value>> {
    std::thread::spawn(move || {
        let (stream, _) = listen.accept().unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).unwrap();
        let hello: Value = serde_json::from_slice(&line).unwrap();
        let shard_nonce = auth::nonce_from_hex(hello["nonce"].as_str().unwrap()).unwrap();
        let nonce = auth::nonce();
        let mut answer =
            serde_json::to_vec(&json!({"type": "hello", "protocol": 2, "nonce": auth::hex(&nonce)})).unwrap();
        answer.push(b'\n');
        out.write_all(&answer).unwrap();
        let key = SessionKey::derive(&Token::parse(TOKEN).unwrap(), &shard_nonce, &nonce);
        let mut sealer = Sealer::new(key.clone(), Direction::ToShard);
        let mut opener = Opener::new(key, Direction::ToCoordinator);
        let mut seen = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                return seen;
            }
            let Ok(json) = opener.open(&line) else { panic!("a forged line from the shard: {}", text(&line)) };
            let msg: Value = serde_json::from_slice(json).unwrap();
            let reply = match msg["type"].as_str().unwrap() {
                "join" => Some(json!({"type": "welcome", "run_id": run_id, "salt": 7})),
                "ping" => {
                    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
                    Some(json!({"type": "pong", "seq": msg["seq"], "unix_ns": now}))
                }
                "ready" => {
                    let at = SystemTime::now() + start_in;
                    let at = at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
                    Some(json!({"type": "start", "level": msg["level"], "at_unix_ns": at}))
                }
                _ => None,
            };
            if msg["type"] != "alive" {
                seen.push(msg);
            }
            if let Some(reply) = reply {
                if out.write_all(&sealer.seal(&serde_json::to_vec(&reply).unwrap())).is_err() {
                    return seen;
                }
            }
        }
    })
}
