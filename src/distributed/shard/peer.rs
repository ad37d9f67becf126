//! The coordinator's side of each connection: admission, the handshake, and the messages of one
//! admitted shard.
//!
//! A connection is admitted only while fewer than the shard count plus `MARGIN` are open (the
//! rest are closed at once), must say `hello` and a sealed `join` within `HANDSHAKE_LIMIT` in
//! lines of at most `MAX_HANDSHAKE_LINE` bytes, and must join as a shard of this run (same
//! version, shard count, configuration, an index not taken). Anything else (no token or another
//! one, another protocol, garbage, a line too long, too slow) is logged with the peer's address
//! and closed: never an event of the run, so never blamed on a shard. An admitted shard's
//! messages go to the central task; its records are written into the gathered file as they
//! arrive and checked against the SHA-256 their announcement carries.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::auth::{self, Digest, Direction, Opener, Sealer, SessionKey};
use super::clock;
use super::coordinator::{Config, Event};
use super::protocol::{self, HEARTBEAT, MAX_LINE, Msg, ReadError, VERSION};

/// Connections admitted beyond the shard count: room for a shard reconnecting after a
/// refusal, or a few stray peers, without letting a crowd in.
pub const MARGIN: usize = 4;
/// Ignored connections logged one by one; the rest are counted.
const LOGGED: u64 = 10;
/// The read buffer of a connection: small before admission; records are read through it in
/// pieces of at most this.
const READ_BUFFER: usize = 16 * 1024;

/// Connections that were not shards of this run: the first few logged, all counted.
#[derive(Default)]
pub struct Ignored(AtomicU64);

impl Ignored {
    pub fn note(&self, peer: SocketAddr, why: &str) {
        let n = self.0.fetch_add(1, Ordering::Relaxed);
        if n < LOGGED {
            tracing::warn!("coordinator: ignored a connection from {peer}: {why}");
        } else if n == LOGGED {
            tracing::warn!("coordinator: more connections ignored; counting them without logging each");
        }
    }

    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub async fn accept_loop(
    listener: TcpListener,
    config: Config,
    events: mpsc::UnboundedSender<Event>,
    ignored: Arc<Ignored>,
) {
    let slots = Arc::new(Semaphore::new(config.count as usize + MARGIN));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was taken: not a reason
                // to spin.
                tracing::warn!("coordinator: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Best effort, never waiting on the peer: the shard retries a refusal.
            let _ = stream.try_write(&Msg::Refused { reason: "busy".into() }.plain_line());
            ignored.note(
                peer,
                &format!(
                    "{} connections are open already (the shard count plus {MARGIN})",
                    config.count as usize + MARGIN
                ),
            );
            continue;
        };
        let (config, events, ignored) = (config.clone(), events.clone(), ignored.clone());
        tokio::spawn(async move {
            let _slot = slot;
            connection(stream, peer, &config, &events, &ignored).await;
        });
    }
}

/// What a handshake gives: an admitted shard.
struct Admitted {
    index: u32,
    host: String,
    reader: BufReader<OwnedReadHalf>,
    opener: Opener,
    write: OwnedWriteHalf,
    sealer: Sealer,
}

/// Why a connection was not admitted, and what the peer is told (a plain line before its key
/// is known, a sealed one after).
enum NotAdmitted {
    /// Not a shard of this run at all: logged and closed.
    Ignored(String),
    /// A shard of this run that cannot take part (another configuration, version, shard count
    /// or index): logged, told why, and reported to the central task for the join verdict.
    Refused(Box<Refusal>),
}

struct Refusal {
    index: u32,
    reason: String,
    write: OwnedWriteHalf,
    sealer: Sealer,
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    config: &Config,
    events: &mpsc::UnboundedSender<Event>,
    ignored: &Ignored,
) {
    let _ = stream.set_nodelay(true);
    let admitted = match tokio::time::timeout(protocol::HANDSHAKE_LIMIT, handshake(stream, config)).await {
        Err(_) => {
            ignored.note(peer, &format!("no hello and join within {} s", protocol::HANDSHAKE_LIMIT.as_secs()));
            return;
        }
        Ok(Err(NotAdmitted::Ignored(why))) => {
            ignored.note(peer, &why);
            return;
        }
        Ok(Err(NotAdmitted::Refused(refusal))) => {
            let Refusal { index, reason, mut write, mut sealer } = *refusal;
            tracing::warn!("coordinator: refused a shard from {peer}: {reason}");
            let _ =
                events.send(Event::Refused { note: format!("a peer from {peer} claiming shard {index}: {reason}") });
            let line = sealer.seal(&Msg::Refused { reason }.json());
            let _ = tokio::time::timeout(Duration::from_secs(2), write.write_all(&line)).await;
            return;
        }
        Ok(Ok(admitted)) => admitted,
    };
    let Admitted { index, host, mut reader, mut opener, write, sealer } = admitted;
    let (tx, rx) = mpsc::channel::<Msg>(64);
    let writing = tokio::spawn(writer(write, sealer, rx));
    let (decide, decision) = oneshot::channel();
    if events.send(Event::Joined { index, host, peer, tx: tx.clone(), decide }).is_err() {
        return;
    }
    match decision.await {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => {
            tracing::warn!("coordinator: refused a shard from {peer}: {reason}");
            let _ = tx.send(Msg::Refused { reason }).await;
            drop(tx);
            let _ = tokio::time::timeout(Duration::from_secs(2), writing).await;
            return;
        }
        Err(_) => return, // the run is over
    }
    if let Err(reason) = serve(index, &mut reader, &mut opener, &tx, config, events).await {
        let _ = events.send(Event::Lost { index, reason: format!("{reason} (from {peer})") });
    }
}

/// `hello` both ways, then a sealed `join` of this run.
async fn handshake(stream: TcpStream, config: &Config) -> Result<Admitted, NotAdmitted> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER, read);
    let mut buf = Vec::new();
    let ignored = |e: ReadError| NotAdmitted::Ignored(describe(&e));
    let shard_nonce = match protocol::read_plain(&mut reader, &mut buf).await.map_err(ignored)? {
        Msg::Hello { protocol, nonce } if protocol == VERSION => auth::nonce_from_hex(&nonce)
            .ok_or_else(|| NotAdmitted::Ignored("a hello without a valid nonce".to_string()))?,
        Msg::Hello { protocol, .. } => {
            return Err(NotAdmitted::Ignored(format!(
                "it speaks protocol {protocol}, this coordinator {VERSION} (run one anvil-load version everywhere)"
            )));
        }
        Msg::Join { protocol, .. } => {
            return Err(NotAdmitted::Ignored(format!(
                "it speaks protocol {protocol} (an older anvil-load?), this coordinator {VERSION}"
            )));
        }
        _ => return Err(NotAdmitted::Ignored("its first message is not a hello".to_string())),
    };
    let nonce = auth::nonce();
    let hello = Msg::Hello { protocol: VERSION, nonce: auth::hex(&nonce) }.plain_line();
    write.write_all(&hello).await.map_err(|e| NotAdmitted::Ignored(format!("cannot answer it ({e})")))?;
    let key = SessionKey::derive(&config.token, &shard_nonce, &nonce);
    let mut opener = Opener::new(key.clone(), Direction::ToCoordinator);
    let sealer = Sealer::new(key, Direction::ToShard);
    // The join, perhaps after a heartbeat or two (a shard's writer may beat first).
    let mut first = true;
    let (index, count, proto, version, fingerprint, host) = loop {
        protocol::read_line(&mut reader, &mut buf, protocol::MAX_HANDSHAKE_LINE).await.map_err(ignored)?;
        let Ok(json) = opener.open(&buf) else {
            if first {
                // Said in plain words: the peer does not hold the key to read a sealed line.
                let _ = write.write_all(&Msg::Refused { reason: "authentication".into() }.plain_line()).await;
                return Err(NotAdmitted::Ignored(
                    "its join failed authentication (no ANVIL_SHARD_TOKEN, or another one than shard 0's)".to_string(),
                ));
            }
            return Err(NotAdmitted::Ignored("a line that failed authentication after its first".to_string()));
        };
        first = false;
        match protocol::parse(json) {
            Ok(Msg::Alive) if opener.opened() <= 4 => continue,
            Ok(Msg::Join { index, count, protocol, version, fingerprint, host }) => {
                break (index, count, protocol, version, fingerprint, host);
            }
            _ => return Err(NotAdmitted::Ignored("an authenticated first message that is not a join".to_string())),
        }
    };
    let reason = if proto != VERSION || version != env!("CARGO_PKG_VERSION") {
        Some(format!(
            "shard {index} runs anvil-load {} (protocol {proto}), shard 0 runs {} (protocol {VERSION}); run one version everywhere",
            protocol::printable(&version),
            env!("CARGO_PKG_VERSION")
        ))
    } else if count != config.count {
        Some(format!("shard {index} was started as one of {count} shards, shard 0 as one of {}", config.count))
    } else if index >= config.count {
        Some(format!("a shard joined with index {index}, out of range for {} shards", config.count))
    } else if fingerprint != config.fingerprint {
        Some(format!(
            "shard {index} runs a different configuration ({}) from shard 0 ({}); every shard needs the same scenario and options",
            protocol::printable(&fingerprint),
            config.fingerprint
        ))
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(NotAdmitted::Refused(Box::new(Refusal { index, reason, write, sealer })));
    }
    Ok(Admitted { index, host: protocol::printable(&host), reader, opener, write, sealer })
}

fn describe(e: &ReadError) -> String {
    match e {
        ReadError::Closed => "disconnected (killed, crashed or unreachable)".to_string(),
        ReadError::Silent => format!("silent for {} s (hung or unreachable)", protocol::SILENCE_LIMIT.as_secs()),
        other => other.to_string(),
    }
}

/// An admitted shard's messages, until it is done. `Err` says why it was lost.
async fn serve(
    index: u32,
    reader: &mut BufReader<OwnedReadHalf>,
    opener: &mut Opener,
    tx: &mpsc::Sender<Msg>,
    config: &Config,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<(), String> {
    let mut buf = Vec::new();
    let mut finished = false;
    loop {
        let msg = match protocol::read_sealed(reader, &mut buf, opener, MAX_LINE).await {
            Ok(msg) => msg,
            // A shard that finished may go once it has its answer.
            Err(ReadError::Closed) if finished => return Ok(()),
            Err(e) => return Err(format!("shard {index}: {}", describe(&e))),
        };
        let event = match msg {
            Msg::Ping { seq } => {
                let _ = tx.send(Msg::Pong { seq, unix_ns: clock::now_ns() }).await;
                continue;
            }
            Msg::Ready { level, plan, round_trip_ns, .. } => Event::Ready { index, level, plan, round_trip_ns },
            Msg::WarmUpDone { level } => Event::WarmUpDone { index, level },
            Msg::Records { level, lines, bytes, sha256 } => {
                gather(reader, &config.gathered_file(index), lines, bytes, &sha256).await.map_err(|e| {
                    format!(
                        "shard {index}: its records for level {} did not arrive whole: {e}",
                        protocol::printable(&level)
                    )
                })?;
                let _ = tx.send(Msg::RecordsOk { level: level.clone() }).await;
                Event::Records { index, level, lines }
            }
            Msg::Finished => {
                finished = true;
                Event::Finished { index }
            }
            Msg::Failed { reason } => Event::Failed { index, reason: protocol::printable(&reason) },
            other => {
                return Err(format!("shard {index} sent a message out of place ({})", kind(&other)));
            }
        };
        if events.send(event).is_err() {
            return Ok(()); // the run is over
        }
    }
}

/// A message's type, for errors (never its content).
fn kind(msg: &Msg) -> String {
    serde_json::to_value(msg).ok().and_then(|v| v["type"].as_str().map(str::to_string)).unwrap_or_default()
}

/// Append `bytes` bytes of records (`lines` lines) from the connection to `path`, durably, and
/// check them against their announcement. Whatever does not check out is cut off again, so the
/// gathered file only ever holds what arrived as it was sent.
async fn gather(
    reader: &mut BufReader<OwnedReadHalf>,
    path: &Path,
    lines: u64,
    bytes: u64,
    sha256: &str,
) -> Result<(), String> {
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let before = file.metadata().await.map_err(|e| format!("cannot write {}: {e}", path.display()))?.len();
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    let received = copy_checked(reader, &mut out, bytes).await;
    let flushed = async {
        out.flush().await?;
        out.get_ref().sync_data().await
    }
    .await;
    let outcome = match (received, flushed) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(format!("cannot write {}: {e}", path.display())),
        (Ok((got_lines, last, digest)), Ok(())) => {
            if digest != sha256 {
                Err(format!(
                    "the {bytes} bytes received have the SHA-256 {digest}, the authenticated announcement says {}: altered in transit",
                    protocol::printable(sha256)
                ))
            } else if got_lines != lines || (bytes > 0 && last != b'\n') {
                Err(format!("{got_lines} lines received, {lines} announced"))
            } else {
                Ok(())
            }
        }
    };
    if outcome.is_err() {
        let _ = out.get_ref().set_len(before).await;
    }
    outcome
}

/// Copy exactly `bytes` bytes, each piece within the silence limit: (newlines, last byte,
/// SHA-256).
async fn copy_checked(
    reader: &mut BufReader<OwnedReadHalf>,
    out: &mut BufWriter<tokio::fs::File>,
    bytes: u64,
) -> Result<(u64, u8, String), String> {
    let mut digest = Digest::default();
    let (mut left, mut lines, mut last) = (bytes, 0u64, b'\n');
    let mut piece = vec![0u8; READ_BUFFER];
    while left > 0 {
        let want = piece.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = match tokio::time::timeout(protocol::SILENCE_LIMIT, reader.read(&mut piece[..want])).await {
            Err(_) => return Err(describe(&ReadError::Silent)),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(0)) => {
                return Err(format!("{} of {bytes} bytes received: {}", bytes - left, describe(&ReadError::Closed)));
            }
            Ok(Ok(n)) => n,
        };
        let got = &piece[..n];
        digest.update(got);
        lines += memchr::memchr_iter(b'\n', got).count() as u64;
        last = got[n - 1];
        out.write_all(got).await.map_err(|e| format!("cannot write the gathered records: {e}"))?;
        left -= n as u64;
    }
    Ok((lines, last, digest.finish()))
}

/// Write queued messages to the shard, sealed; a heartbeat whenever nothing else went for a
/// while. Ends (after writing everything queued) when the central task lets go of the shard.
async fn writer(write: OwnedWriteHalf, mut sealer: Sealer, mut rx: mpsc::Receiver<Msg>) {
    let mut out = BufWriter::new(write);
    let mut beat = tokio::time::interval(HEARTBEAT);
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => msg,
                None => break,
            },
            _ = beat.tick() => Msg::Alive,
        };
        let line = sealer.seal(&msg.json());
        let write = async {
            out.write_all(&line).await?;
            out.flush().await
        };
        if !matches!(tokio::time::timeout(protocol::SILENCE_LIMIT, write).await, Ok(Ok(()))) {
            return;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), out.shutdown()).await;
}
