//! A shard's connection to the coordinator.
//!
//! `connect` retries until the join deadline (the coordinator may start after this shard, or
//! turn a connection away while it is busy), then says `hello` and derives the connection's key
//! (`auth`). One writer task seals and sends everything (messages, records, heartbeats), so
//! nothing interleaves; one reader task opens everything that comes in: a line that fails
//! authentication, `abort` or a lost coordinator stops the run at once through the run's
//! `RunControl`, a relayed warm-up end releases the level's followers, and every other answer
//! waits in the inbox for the step that expects it. Every wait ends at its deadline, at the
//! run's stop (Ctrl-C, SIGTERM), or when the run fails.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::auth::{self, Direction, Opener, Sealer, SessionKey, Token};
use super::protocol::{self, HEARTBEAT, MAX_LINE, Msg, ReadError, VERSION};
use crate::request::schedule::RunControl;

/// How long between connection attempts while the coordinator is not up yet (or busy).
const RETRY: Duration = Duration::from_millis(250);
/// How long a shard that fails takes at most to tell the coordinator before it ends.
const LAST_WORD: Duration = Duration::from_secs(2);

enum Frame {
    Line(Msg),
    /// `header`, then bytes `from..from + len` of the file at `path`.
    Records {
        header: Msg,
        path: PathBuf,
        from: u64,
        len: u64,
        sent: oneshot::Sender<Result<(), String>>,
    },
    /// Everything queued before this is written.
    Flush(oneshot::Sender<()>),
}

#[derive(Default)]
struct State {
    /// Why the run stopped, once it has.
    failure: Option<String>,
    /// The level whose warm-up end this shard waits for.
    follow: Option<(String, oneshot::Sender<()>)>,
    /// The coordinator said the run is done: its closing the connection is expected.
    done: bool,
}

pub struct Link {
    addr: String,
    tx: mpsc::Sender<Frame>,
    inbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<Msg>>,
    state: Arc<Mutex<State>>,
    control: RunControl,
}

/// Why a connection attempt did not give a link.
enum Attempt {
    /// Worth another try before the deadline (not listening yet, busy, closed).
    Retry(String),
    Fatal(String),
}

impl Link {
    /// Connect and say hello (retrying until `deadline`).
    pub async fn connect(addr: &str, token: &Token, deadline: Instant, control: RunControl) -> Result<Link, String> {
        let stop = control.stop_issuing.clone();
        let (input, write, key) = loop {
            let attempt = async {
                let stream = match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => return Err(Attempt::Retry(e.to_string())),
                    Err(_) => return Err(Attempt::Retry("connection timed out".to_string())),
                };
                match tokio::time::timeout(protocol::HANDSHAKE_LIMIT, hello(stream, token, addr)).await {
                    Ok(result) => result,
                    Err(_) => Err(Attempt::Retry("no hello from it in time".to_string())),
                }
            };
            let result = tokio::select! {
                biased;
                () = stop.cancelled() => {
                    return Err("interrupted (Ctrl-C or SIGTERM) before joining the coordinator".to_string());
                }
                result = attempt => result,
            };
            match result {
                Ok(parts) => break parts,
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(why)) if Instant::now() + RETRY >= deadline => {
                    return Err(format!("cannot reach the coordinator at {addr}: {why}"));
                }
                Err(Attempt::Retry(_)) => {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State::default()));
        tokio::spawn(writer(write, Sealer::new(key.clone(), Direction::ToCoordinator), rx));
        let opener = Opener::new(key, Direction::ToShard);
        tokio::spawn(reader(input, opener, addr.to_string(), inbox_tx, state.clone(), control.clone()));
        Ok(Link { addr: addr.to_string(), tx, inbox: tokio::sync::Mutex::new(inbox), state, control })
    }

    pub async fn send(&self, msg: &Msg) -> Result<(), String> {
        self.tx.send(Frame::Line(msg.clone())).await.map_err(|_| self.failure())
    }

    /// Send `msg` and wait (a little) until it is written: the last word before this process
    /// may end.
    pub async fn last_word(&self, msg: &Msg) {
        let (done, written) = oneshot::channel();
        let sent = async {
            self.tx.send(Frame::Line(msg.clone())).await.ok()?;
            self.tx.send(Frame::Flush(done)).await.ok()?;
            written.await.ok()
        };
        let _ = tokio::time::timeout(LAST_WORD, sent).await;
    }

    /// The next message, within `limit`. A closed inbox means the run stopped (`failure` says
    /// why); the run's stop (Ctrl-C, SIGTERM, an abort) ends the wait at once.
    pub async fn next(&self, what: &str, limit: Duration) -> Result<Msg, String> {
        let mut inbox = self.inbox.lock().await;
        tokio::select! {
            biased;
            () = self.control.stop_issuing.cancelled() => Err(self.failed().unwrap_or_else(|| {
                format!("interrupted (Ctrl-C or SIGTERM) while waiting for {what}")
            })),
            received = tokio::time::timeout(limit, inbox.recv()) => match received {
                Ok(Some(msg)) => Ok(msg),
                Ok(None) => Err(self.failure()),
                Err(_) => Err(format!(
                    "no {what} from the coordinator at {} within {}",
                    self.addr,
                    humantime::format_duration(limit)
                )),
            },
        }
    }

    /// Why the run stopped, as the coordinator (or the lost connection) said.
    pub fn failure(&self) -> String {
        self.failed().unwrap_or_else(|| format!("lost the coordinator at {}", self.addr))
    }

    pub fn failed(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.failure.clone())
    }

    /// Wait for shard 0's warm-up request of `level` to end (see `WarmUpSync::Follow`).
    pub fn follow(&self, level: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut s) = self.state.lock() {
            s.follow = Some((level.to_string(), tx));
        }
        rx
    }

    /// Send the records file at `path` from byte `from` to its end, announced as the lines of
    /// `level` with their count and SHA-256; the file's length, once sent.
    pub async fn send_records(&self, level: &str, path: PathBuf, from: u64) -> Result<u64, String> {
        let (end, lines, sha256) = count_lines(path.clone(), from).await?;
        let len = end.saturating_sub(from);
        let header = Msg::Records { level: level.to_string(), lines, bytes: len, sha256 };
        let (sent, result) = oneshot::channel();
        self.tx.send(Frame::Records { header, path, from, len, sent }).await.map_err(|_| self.failure())?;
        result.await.map_err(|_| self.failure())??;
        Ok(end)
    }

    pub fn mark_done(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.done = true;
        }
    }
}

/// The records file's length, and the lines in `from..length` and their SHA-256.
async fn count_lines(path: PathBuf, from: u64) -> Result<(u64, u64, String), String> {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek};
        let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
        file.seek(std::io::SeekFrom::Start(from)).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut reader = std::io::BufReader::with_capacity(1 << 20, file.take(len.saturating_sub(from)));
        let mut buf = vec![0u8; 1 << 20];
        let (mut lines, mut last) = (0u64, b'\n');
        let mut digest = auth::Digest::default();
        loop {
            let n = reader.read(&mut buf).map_err(|e| format!("{}: {e}", path.display()))?;
            if n == 0 {
                break;
            }
            lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
            last = buf[n - 1];
            digest.update(&buf[..n]);
        }
        if last != b'\n' {
            return Err(format!("{}: ends in the middle of a line", path.display()));
        }
        Ok((len, lines, digest.finish()))
    })
    .await
    .map_err(|e| format!("counting records: {e}"))?
}

/// Plain hellos both ways; the connection's key from both nonces.
async fn hello(
    stream: TcpStream,
    token: &Token,
    addr: &str,
) -> Result<(BufReader<OwnedReadHalf>, OwnedWriteHalf, SessionKey), Attempt> {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let nonce = auth::nonce();
    let hello = Msg::Hello { protocol: VERSION, nonce: auth::hex(&nonce) }.plain_line();
    write.write_all(&hello).await.map_err(|e| Attempt::Retry(e.to_string()))?;
    let mut reader = BufReader::new(read);
    let mut buf = Vec::new();
    match protocol::read_plain(&mut reader, &mut buf).await {
        Ok(Msg::Hello { protocol, nonce: theirs }) if protocol == VERSION => {
            let theirs = auth::nonce_from_hex(&theirs).ok_or_else(|| {
                Attempt::Fatal(format!("the coordinator at {addr} sent a hello without a valid nonce"))
            })?;
            Ok((reader, write, SessionKey::derive(token, &nonce, &theirs)))
        }
        Ok(Msg::Hello { protocol, .. }) => Err(Attempt::Fatal(format!(
            "the coordinator at {addr} speaks protocol {protocol}, this shard {VERSION}; run one anvil-load version on every shard"
        ))),
        Ok(Msg::Refused { .. }) => Err(Attempt::Retry("it turned the connection away (busy)".to_string())),
        Err(ReadError::Closed) => {
            Err(Attempt::Retry("it closed the connection at once (an older anvil-load as shard 0?)".to_string()))
        }
        Err(ReadError::Io(e)) => Err(Attempt::Retry(e.to_string())),
        Err(ReadError::Silent) => Err(Attempt::Retry("no hello from it".to_string())),
        Ok(_) | Err(_) => Err(Attempt::Fatal(format!(
            "{addr} answered, but not as an anvil-load coordinator of protocol {VERSION}: is --coordinator right?"
        ))),
    }
}

async fn writer(write: OwnedWriteHalf, mut sealer: Sealer, mut rx: mpsc::Receiver<Frame>) {
    let mut out = BufWriter::with_capacity(256 * 1024, write);
    // The first beat after one period: the join goes first.
    let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        let frame = tokio::select! {
            frame = rx.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            _ = beat.tick() => Frame::Line(Msg::Alive),
        };
        let ok = match frame {
            Frame::Line(msg) => {
                let line = sealer.seal(&msg.json());
                let write = async {
                    out.write_all(&line).await?;
                    out.flush().await
                };
                matches!(tokio::time::timeout(protocol::SILENCE_LIMIT, write).await, Ok(Ok(())))
            }
            Frame::Records { header, path, from, len, sent } => {
                let header = sealer.seal(&header.json());
                let result = copy_records(&mut out, &header, &path, from, len).await;
                let ok = result.is_ok();
                let _ = sent.send(result);
                ok
            }
            Frame::Flush(done) => {
                let _ = done.send(());
                true
            }
        };
        if !ok {
            return;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), out.shutdown()).await;
}

async fn copy_records(
    out: &mut BufWriter<OwnedWriteHalf>,
    header: &[u8],
    path: &std::path::Path,
    from: u64,
    len: u64,
) -> Result<(), String> {
    let mut file = tokio::fs::File::open(path).await.map_err(|e| format!("{}: {e}", path.display()))?;
    file.seek(std::io::SeekFrom::Start(from)).await.map_err(|e| format!("{}: {e}", path.display()))?;
    out.write_all(header).await.map_err(|e| format!("sending records: {e}"))?;
    let mut chunk = file.take(len);
    // Bounded by progress: each piece must go out within the silence limit.
    let mut piece = vec![0u8; 256 * 1024];
    let mut left = len;
    while left > 0 {
        let n = chunk.read(&mut piece).await.map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            return Err(format!("{}: shorter than announced", path.display()));
        }
        tokio::time::timeout(protocol::SILENCE_LIMIT, out.write_all(&piece[..n]))
            .await
            .map_err(|_| "sending records: the coordinator stopped reading".to_string())?
            .map_err(|e| format!("sending records: {e}"))?;
        left -= n as u64;
    }
    out.flush().await.map_err(|e| format!("sending records: {e}"))
}

async fn reader(
    mut reader: BufReader<OwnedReadHalf>,
    mut opener: Opener,
    addr: String,
    inbox: mpsc::UnboundedSender<Msg>,
    state: Arc<Mutex<State>>,
    control: RunControl,
) {
    let mut buf = Vec::new();
    let failure = loop {
        match protocol::read_sealed(&mut reader, &mut buf, &mut opener, MAX_LINE).await {
            Ok(Msg::Abort { reason }) => break protocol::printable(&reason),
            Ok(Msg::Refused { reason }) => {
                break format!("the coordinator at {addr} refused this shard: {}", protocol::printable(&reason));
            }
            Ok(Msg::WarmUpDone { level }) => {
                let waiting = state.lock().ok().and_then(|mut s| s.follow.take());
                match waiting {
                    Some((l, tx)) if l == level => {
                        let _ = tx.send(());
                    }
                    other => {
                        if let Ok(mut s) = state.lock() {
                            s.follow = other;
                        }
                    }
                }
            }
            Ok(msg) => {
                let done = matches!(msg, Msg::Done { .. });
                let _ = inbox.send(msg);
                if done {
                    if let Ok(mut s) = state.lock() {
                        s.done = true;
                    }
                }
            }
            // Before anything sealed arrived, a plain refusal is the coordinator saying it could
            // not authenticate this shard's join.
            Err(ReadError::Forged)
                if opener.opened() == 0
                    && matches!(protocol::parse(&buf), Ok(Msg::Refused { reason }) if reason == "authentication") =>
            {
                break format!(
                    "the coordinator at {addr} refused this shard: its join failed authentication; every shard needs shard 0's {} (or none, with a coordinator on loopback)",
                    auth::TOKEN_ENV
                );
            }
            Err(e) => {
                if state.lock().is_ok_and(|s| s.done) {
                    return;
                }
                break format!("lost the coordinator at {addr}: {e}");
            }
        }
    };
    // The run is void: stop sending and cut what is in flight (its records stay, marked
    // interrupted), then let every waiting step see the reason.
    if let Ok(mut s) = state.lock() {
        s.failure.get_or_insert(failure);
    }
    control.stop_issuing.cancel();
    control.cut_in_flight.cancel();
}
