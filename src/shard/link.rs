//! A shard's connection to the coordinator.
//!
//! One writer task sends everything (messages, records, heartbeats), so nothing interleaves; one
//! reader task takes everything in: `abort` (or a lost coordinator) stops the run at once
//! through the run's `RunControl`, a relayed warm-up end releases the level's followers, and
//! every other answer waits in the inbox for the step that expects it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::protocol::{self, HEARTBEAT, Msg};
use crate::schedule::RunControl;

/// How long between connection attempts while the coordinator is not up yet.
const RETRY: Duration = Duration::from_millis(250);

enum Frame {
    Line(Vec<u8>),
    /// `header`, then bytes `from..from + len` of the file at `path`.
    Records {
        header: Vec<u8>,
        path: PathBuf,
        from: u64,
        len: u64,
        sent: oneshot::Sender<Result<(), String>>,
    },
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
}

impl Link {
    /// Connect (retrying until `deadline`: the coordinator may start after this shard).
    pub async fn connect(addr: &str, deadline: Instant, control: RunControl) -> Result<Link, String> {
        let stream = loop {
            let attempt = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await;
            match attempt {
                Ok(Ok(stream)) => break stream,
                Ok(Err(e)) if Instant::now() + RETRY >= deadline => {
                    return Err(format!("cannot reach the coordinator at {addr}: {e}"));
                }
                Err(_) if Instant::now() >= deadline => {
                    return Err(format!("cannot reach the coordinator at {addr}: connection timed out"));
                }
                _ => tokio::time::sleep(RETRY).await,
            }
        };
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::channel(64);
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State::default()));
        tokio::spawn(writer(write, rx));
        tokio::spawn(reader(BufReader::new(read), addr.to_string(), inbox_tx, state.clone(), control));
        Ok(Link { addr: addr.to_string(), tx, inbox: tokio::sync::Mutex::new(inbox), state })
    }

    pub async fn send(&self, msg: &Msg) -> Result<(), String> {
        self.tx.send(Frame::Line(msg.line())).await.map_err(|_| self.failure())
    }

    /// The next message, within `limit`; a closed inbox means the run stopped (`failure` says why).
    pub async fn next(&self, what: &str, limit: Duration) -> Result<Msg, String> {
        let mut inbox = self.inbox.lock().await;
        match tokio::time::timeout(limit, inbox.recv()).await {
            Ok(Some(msg)) => Ok(msg),
            Ok(None) => Err(self.failure()),
            Err(_) => Err(format!(
                "no {what} from the coordinator at {} within {}",
                self.addr,
                humantime::format_duration(limit)
            )),
        }
    }

    /// Why the run stopped, as the coordinator (or the lost connection) said.
    pub fn failure(&self) -> String {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.failure.clone())
            .unwrap_or_else(|| format!("lost the coordinator at {}", self.addr))
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

    /// Send the bytes `from..from + len` of a records file, announced as `lines` lines of `level`.
    pub async fn send_records(
        &self,
        level: &str,
        path: PathBuf,
        from: u64,
        len: u64,
        lines: u64,
    ) -> Result<(), String> {
        let header = Msg::Records { level: level.to_string(), lines, bytes: len }.line();
        let (sent, result) = oneshot::channel();
        self.tx.send(Frame::Records { header, path, from, len, sent }).await.map_err(|_| self.failure())?;
        result.await.map_err(|_| self.failure())?
    }

    pub fn mark_done(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.done = true;
        }
    }
}

async fn writer(write: OwnedWriteHalf, mut rx: mpsc::Receiver<Frame>) {
    let mut out = BufWriter::with_capacity(256 * 1024, write);
    let mut beat = tokio::time::interval(HEARTBEAT);
    loop {
        let frame = tokio::select! {
            frame = rx.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            _ = beat.tick() => Frame::Line(Msg::Alive.line()),
        };
        let ok = match frame {
            Frame::Line(line) => {
                let write = async {
                    out.write_all(&line).await?;
                    out.flush().await
                };
                matches!(tokio::time::timeout(protocol::SILENCE_LIMIT, write).await, Ok(Ok(())))
            }
            Frame::Records { header, path, from, len, sent } => {
                let result = copy_records(&mut out, &header, &path, from, len).await;
                let ok = result.is_ok();
                let _ = sent.send(result);
                ok
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
    mut reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    addr: String,
    inbox: mpsc::UnboundedSender<Msg>,
    state: Arc<Mutex<State>>,
    control: RunControl,
) {
    let mut buf = Vec::new();
    let failure = loop {
        match protocol::read_msg(&mut reader, &mut buf).await {
            Ok(Msg::Abort { reason }) => break reason,
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
