//! The coordinator, served by shard 0: joins, start instants, warm-up relay, results.
//!
//! One task per connection reads its shard's messages (answering pings at once and writing its
//! records into this host's `--out`) and reports events to one central task, which owns the run's
//! state: every shard joined (or the join timeout names the missing ones), every shard ready for
//! the same level with the same plan (then one start instant: now plus a slack that covers the
//! slowest round trip), every shard finished (then the merge). Any shard lost, failed or
//! inconsistent aborts the run on every shard, with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::clock;
use super::merge;
use super::protocol::{self, HEARTBEAT, Msg, ReadError, VERSION};

/// The smallest lead a start instant gets over the moment it is sent: message delivery plus a
/// busy runtime's wake-up, on top of four times the slowest measured round trip.
const MIN_START_SLACK: Duration = Duration::from_millis(50);

/// What every shard must agree with.
#[derive(Debug, Clone)]
pub struct Config {
    pub count: u32,
    pub fingerprint: String,
    pub join_timeout: Duration,
    /// Where every shard's records file is gathered.
    pub out: PathBuf,
    pub run_id: String,
    pub salt: u64,
}

impl Config {
    /// The directory the shards' records files are gathered into.
    pub fn gathered_dir(&self) -> PathBuf {
        self.out.join(format!("{}.shards", self.run_id))
    }

    pub fn gathered_file(&self, index: u32) -> PathBuf {
        self.gathered_dir().join(super::records_file_name(&self.run_id, index, self.count))
    }
}

/// A running coordinator; `finish` waits for its verdict.
pub struct Coordinator {
    task: JoinHandle<Result<String, String>>,
    accept: JoinHandle<()>,
}

impl Coordinator {
    /// Bind (an error here is bad input: nothing has been sent) and start serving.
    pub async fn start(listen: SocketAddr, config: Config) -> std::io::Result<(Coordinator, SocketAddr)> {
        std::fs::create_dir_all(config.gathered_dir())?;
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (events, rx) = mpsc::unbounded_channel();
        let accept = tokio::spawn(accept_loop(listener, config.clone(), events));
        let task = tokio::spawn(central(config, rx));
        Ok((Coordinator { task, accept }, addr))
    }

    /// The run's outcome: what became of the results, or why it failed. Waits at most `limit`.
    pub async fn finish(self, limit: Duration) -> Result<String, String> {
        let verdict = match tokio::time::timeout(limit, self.task).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(e)) => Err(format!("the coordinator failed: {e}")),
            Err(_) => Err("the coordinator did not finish in time".to_string()),
        };
        self.accept.abort();
        verdict
    }
}

/// What the connection tasks tell the central task.
#[derive(Debug)]
enum Event {
    Joined { index: u32, host: String, tx: mpsc::Sender<Vec<u8>>, check: Result<(), String> },
    Ready { index: u32, level: String, plan: String, round_trip_ns: u64 },
    WarmUpDone { level: String },
    Records { index: u32, level: String, lines: u64 },
    Finished { index: u32 },
    Failed { index: u32, reason: String },
    Lost { index: Option<u32>, reason: String },
}

async fn accept_loop(listener: TcpListener, config: Config, events: mpsc::UnboundedSender<Event>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let (config, events) = (config.clone(), events.clone());
                tokio::spawn(async move {
                    let (index, reason) = match connection(stream, &config, &events).await {
                        Ok(()) => return,
                        Err(lost) => lost,
                    };
                    let _ = events.send(Event::Lost { index, reason: format!("{reason} (from {peer})") });
                });
            }
            Err(e) => tracing::warn!("coordinator: accept failed: {e}"),
        }
    }
}

/// One shard's connection, from its join to its end. Returns why it was lost, if it was.
async fn connection(
    stream: TcpStream,
    config: &Config,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<(), (Option<u32>, String)> {
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    let mut reader = BufReader::with_capacity(256 * 1024, read);
    let mut buf = Vec::new();
    let first = tokio::time::timeout(config.join_timeout, protocol::read_msg(&mut reader, &mut buf)).await;
    let Ok(Ok(Msg::Join { index, count, protocol: proto, version, fingerprint, host })) = first else {
        return Err((None, "a connection that did not join".to_string()));
    };
    let check = if proto != VERSION || version != env!("CARGO_PKG_VERSION") {
        Err(format!(
            "shard {index} runs anvil-load {version} (protocol {proto}), shard 0 runs {} (protocol {VERSION}); run one version everywhere",
            env!("CARGO_PKG_VERSION")
        ))
    } else if count != config.count {
        Err(format!("shard {index} was started as one of {count} shards, shard 0 as one of {}", config.count))
    } else if index >= config.count {
        Err(format!("a shard joined with index {index}, out of range for {} shards", config.count))
    } else if fingerprint != config.fingerprint {
        Err(format!(
            "shard {index} runs a different configuration ({fingerprint}) from shard 0 ({}); every shard needs the same scenario and options",
            config.fingerprint
        ))
    } else {
        Ok(())
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(writer(write, rx));
    let ok = check.is_ok();
    let _ = events.send(Event::Joined { index, host, tx: tx.clone(), check });
    if !ok {
        return Ok(());
    }
    let lost = |e: ReadError| (Some(index), format!("shard {index}: {}", describe(&e)));
    let mut finished = false;
    loop {
        let msg = match protocol::read_msg(&mut reader, &mut buf).await {
            Ok(msg) => msg,
            // A shard that finished may go once it has its answer.
            Err(ReadError::Closed) if finished => return Ok(()),
            Err(e) => return Err(lost(e)),
        };
        let event = match msg {
            Msg::Ping { seq } => {
                let _ = tx.send(Msg::Pong { seq, unix_ns: clock::now_ns() }.line()).await;
                continue;
            }
            Msg::Ready { level, plan, round_trip_ns, .. } => Event::Ready { index, level, plan, round_trip_ns },
            Msg::WarmUpDone { level } => Event::WarmUpDone { level },
            Msg::Records { level, lines, bytes } => {
                gather(&mut reader, &mut buf, &config.gathered_file(index), lines, bytes).await.map_err(|e| {
                    (Some(index), format!("shard {index}: its records for level {level} did not arrive whole: {e}"))
                })?;
                let _ = tx.send(Msg::RecordsOk { level: level.clone() }.line()).await;
                Event::Records { index, level, lines }
            }
            Msg::Finished => {
                finished = true;
                Event::Finished { index }
            }
            Msg::Failed { reason } => Event::Failed { index, reason },
            other => return Err((Some(index), format!("shard {index} sent an unexpected message: {other:?}"))),
        };
        if events.send(event).is_err() {
            return Ok(()); // the run is over
        }
    }
}

fn describe(e: &ReadError) -> String {
    match e {
        ReadError::Closed => "disconnected (killed, crashed or unreachable)".to_string(),
        ReadError::Silent => format!("silent for {} s (hung or unreachable)", protocol::SILENCE_LIMIT.as_secs()),
        other => other.to_string(),
    }
}

/// Append `lines` records-file lines (`bytes` in all) from the connection to `path`, durably.
async fn gather(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    buf: &mut Vec<u8>,
    path: &Path,
    lines: u64,
    bytes: u64,
) -> Result<(), String> {
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    let mut got = 0u64;
    for _ in 0..lines {
        protocol::read_line(reader, buf).await.map_err(|e| describe(&e))?;
        got += buf.len() as u64;
        out.write_all(buf).await.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    out.flush().await.map_err(|e| e.to_string())?;
    out.get_ref().sync_data().await.map_err(|e| e.to_string())?;
    if got != bytes {
        return Err(format!("{got} bytes received, {bytes} announced"));
    }
    Ok(())
}

/// Write queued lines to the shard; a heartbeat whenever nothing else went for a while. Ends
/// (after writing everything queued) when the central task lets go of the shard.
async fn writer(write: tokio::net::tcp::OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut out = BufWriter::new(write);
    let mut beat = tokio::time::interval(HEARTBEAT);
    loop {
        let line = tokio::select! {
            line = rx.recv() => match line {
                Some(line) => line,
                None => break,
            },
            _ = beat.tick() => Msg::Alive.line(),
        };
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

/// The run's state, from the first join to the merge.
struct Central {
    config: Config,
    shards: BTreeMap<u32, mpsc::Sender<Vec<u8>>>,
    hosts: BTreeMap<u32, String>,
}

impl Central {
    async fn broadcast(&self, msg: &Msg) {
        let line = msg.line();
        for tx in self.shards.values() {
            let _ = tokio::time::timeout(Duration::from_secs(2), tx.send(line.clone())).await;
        }
    }

    /// Tell every shard the run failed, and let the writers deliver it.
    async fn abort(self, reason: String) -> Result<String, String> {
        tracing::error!("coordinator: {reason}");
        self.broadcast(&Msg::Abort { reason: reason.clone() }).await;
        drop(self.shards);
        // Writers end once their queues are empty; give them a moment before the process goes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(reason)
    }

    fn missing(&self) -> String {
        let missing: Vec<String> =
            (0..self.config.count).filter(|i| !self.shards.contains_key(i)).map(|i| i.to_string()).collect();
        missing.join(", ")
    }
}

async fn central(config: Config, mut events: mpsc::UnboundedReceiver<Event>) -> Result<String, String> {
    let deadline = Instant::now() + config.join_timeout;
    let mut c = Central { config, shards: BTreeMap::new(), hosts: BTreeMap::new() };
    let count = c.config.count;

    // 1. Every shard joins.
    while (c.shards.len() as u32) < count {
        let event = tokio::select! {
            event = events.recv() => event,
            () = tokio::time::sleep_until(deadline) => {
                let missing = c.missing();
                let reason = format!(
                    "shard(s) {missing} of {count} did not join within {} (--join-timeout); check that they started and can reach the coordinator",
                    humantime::format_duration(c.config.join_timeout)
                );
                return c.abort(reason).await;
            }
        };
        match event {
            Some(Event::Joined { index, host, tx, check }) => {
                if let Err(reason) = check {
                    let _ = tx.send(Msg::Abort { reason: reason.clone() }.line()).await;
                    return c.abort(reason).await;
                }
                if c.shards.contains_key(&index) {
                    let reason = format!(
                        "shard {index} joined twice (a restarted shard would replay its schedule); the run is void"
                    );
                    let _ = tx.send(Msg::Abort { reason: reason.clone() }.line()).await;
                    return c.abort(reason).await;
                }
                c.shards.insert(index, tx);
                c.hosts.insert(index, host);
            }
            Some(Event::Lost { index: None, reason }) => tracing::warn!("coordinator: {reason}"),
            Some(Event::Lost { reason, .. } | Event::Failed { reason, .. }) => {
                return c.abort(format!("before the start: {reason}")).await;
            }
            Some(other) => {
                return c.abort(format!("a shard spoke out of turn before every shard joined: {other:?}")).await;
            }
            None => return Err("the coordinator lost its listener".to_string()),
        }
    }
    let welcome = Msg::Welcome { run_id: c.config.run_id.clone(), salt: c.config.salt };
    c.broadcast(&welcome).await;
    tracing::info!("coordinator: all {count} shards joined ({:?})", c.hosts);

    // 2. Levels, until every shard has finished.
    let mut ready: BTreeMap<u32, (String, String, u64)> = BTreeMap::new();
    let mut finished: BTreeSet<u32> = BTreeSet::new();
    let mut records_lines: u64 = 0;
    loop {
        let Some(event) = events.recv().await else {
            return Err("the coordinator lost its listener".to_string());
        };
        match event {
            Event::Ready { index, level, plan, round_trip_ns } => {
                ready.insert(index, (level, plan, round_trip_ns));
            }
            Event::Finished { index } => {
                finished.insert(index);
            }
            Event::WarmUpDone { level } => c.broadcast(&Msg::WarmUpDone { level }).await,
            Event::Records { index, level, lines } => {
                tracing::debug!("coordinator: shard {index} sent {lines} records lines for level {level}");
                records_lines += lines;
            }
            Event::Failed { index, reason } => {
                return c.abort(format!("shard {index} stopped: {reason}; the run is incomplete")).await;
            }
            Event::Lost { index: Some(index), reason } => {
                return c.abort(format!("{reason}; shard {index} is missing and the run is incomplete")).await;
            }
            Event::Lost { index: None, reason } => tracing::warn!("coordinator: {reason}"),
            Event::Joined { index, tx, .. } => {
                let reason = format!(
                    "shard {index} joined again during the run (a restarted shard would replay its schedule); the run is void"
                );
                let _ = tx.send(Msg::Abort { reason: reason.clone() }.line()).await;
                return c.abort(reason).await;
            }
        }
        if (ready.len() + finished.len()) as u32 != count {
            continue;
        }
        if !finished.is_empty() && !ready.is_empty() {
            let (done, more): (Vec<u32>, Vec<u32>) =
                (finished.iter().copied().collect(), ready.keys().copied().collect());
            return c
                .abort(format!(
                    "shards {done:?} finished while shards {more:?} have another level: they ran different plans"
                ))
                .await;
        }
        if finished.len() as u32 == count {
            break;
        }
        let (level, plan, _) = ready[&0].clone();
        if let Some((index, (other, ..))) = ready.iter().find(|(_, (l, ..))| *l != level) {
            return c
                .abort(format!("shard {index} is ready for level {other} while shard 0 is ready for {level}"))
                .await;
        }
        if let Some((index, _)) = ready.iter().find(|(_, (_, p, _))| *p != plan) {
            return c
                .abort(format!(
                    "shard {index} computed a different plan from shard 0 for level {level} (prompt sizing or prompts differ; compare the prompt_sizing blocks of their records files)"
                ))
                .await;
        }
        let slowest = ready.values().map(|(.., rtt)| *rtt).max().unwrap_or(0);
        let slack = MIN_START_SLACK + Duration::from_nanos(slowest.saturating_mul(4));
        let at_unix_ns = clock::now_ns() + slack.as_nanos() as u64;
        c.broadcast(&Msg::Start { level, at_unix_ns }).await;
        ready.clear();
    }

    // 3. Every shard's records are here: merge them.
    let paths: Vec<PathBuf> = (0..count).map(|i| c.config.gathered_file(i)).collect();
    let out = c.config.out.clone();
    let by_hand = merge::command(&paths, &out);
    let outcome = tokio::task::spawn_blocking(move || merge::merge(&paths, &out))
        .await
        .unwrap_or_else(|e| Err(format!("the merge failed: {e}")));
    let merged = match outcome {
        Ok(outcome) => outcome.describe(),
        Err(e) => {
            let dir = c.config.gathered_dir();
            return c
                .abort(format!(
                    "the merge failed: {e}; every shard's records are in {}; merge them with: {by_hand}",
                    dir.display()
                ))
                .await;
        }
    };
    tracing::info!("coordinator: {records_lines} records lines gathered");
    c.broadcast(&Msg::Done { merged: merged.clone() }).await;
    drop(c.shards);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(merged)
}
