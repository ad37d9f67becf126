//! The coordinator, served by shard 0: joins, start instants, warm-up relay, results.
//!
//! One task per admitted connection (`peer`) reads its shard's messages (answering pings at once
//! and writing its records into this host's `--out`) and reports events to one central task,
//! which owns the run's state: every shard joined (or the join timeout names the missing ones),
//! every shard ready for the same level with the same plan (then one start instant: now plus a
//! slack that covers the slowest round trip), every shard finished (then the merge). Every
//! barrier has a deadline: once the first shard reaches it, the others have `--barrier-timeout`.
//! A shard lost, failed, late or inconsistent aborts the run on every shard, with the reason; a
//! connection that never became a shard of this run never does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::args::Listen;
use super::auth::Token;
use super::clock::{MAX_ROUND_TRIP, MIN_START_SLACK};
use super::merge;
use super::peer::{self, Ignored};
use super::protocol::Msg;

/// Refusals kept for the join verdict.
const NOTES: usize = 10;

/// What every shard must agree with.
#[derive(Debug, Clone)]
pub struct Config {
    pub count: u32,
    pub fingerprint: String,
    pub join_timeout: Duration,
    pub barrier_timeout: Duration,
    /// Where every shard's records file is gathered.
    pub out: PathBuf,
    pub run_id: String,
    pub salt: u64,
    pub token: Token,
}

impl Config {
    /// The directory the shards' records files are gathered into.
    pub fn gathered_dir(&self) -> PathBuf {
        self.out.join(format!("{}.shards", self.run_id))
    }

    pub fn gathered_file(&self, index: u32) -> PathBuf {
        self.gathered_dir().join(super::names::records_file_name(&self.run_id, index, self.count))
    }
}

/// Bind the coordinator's listener where it was asked to serve. A host name serves on the
/// address it resolves to here; only when it resolves to none of this host's addresses (a
/// NAT's, a name not published yet) does it serve on every interface, and says so loudly.
pub async fn bind(listen: &Listen, authenticated: bool) -> Result<TcpListener, String> {
    let listener = match listen {
        Listen::Exact(addr) => TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--coordinator-listen {addr}: cannot serve the coordinator there ({e})"))?,
        Listen::Host { host, port } => bind_host(host, *port).await?,
    };
    let addr = listener.local_addr().map_err(|e| format!("the coordinator's address: {e}"))?;
    if addr.ip().is_unspecified() {
        let auth = if authenticated {
            "Every message is authenticated with ANVIL_SHARD_TOKEN: peers without it are logged and ignored."
        } else {
            "There is no ANVIL_SHARD_TOKEN (--insecure-coordinator): anyone who reaches this port can join the run."
        };
        eprintln!(
            "WARNING: shard 0 serves the coordinator on EVERY interface ({addr}): any host that can reach port {} can connect. {auth} Give --coordinator-listen ADDR to serve on one address only.",
            addr.port()
        );
    }
    Ok(listener)
}

async fn bind_host(host: &str, port: u16) -> Result<TcpListener, String> {
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let resolved: Vec<SocketAddr> = if name.eq_ignore_ascii_case("localhost") {
        vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]
    } else if let Ok(ip) = name.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        match tokio::net::lookup_host((name, port)).await {
            Ok(addrs) => addrs.collect(),
            Err(e) => {
                eprintln!("note: shard 0: {name} does not resolve here ({e})");
                Vec::new()
            }
        }
    };
    let mut why = Vec::new();
    for addr in &resolved {
        match TcpListener::bind(addr).await {
            Ok(listener) => {
                if addr.ip().is_loopback() && name.parse::<IpAddr>().is_err() && !name.eq_ignore_ascii_case("localhost")
                {
                    eprintln!(
                        "note: shard 0: {name} resolves to {} on this host, so the coordinator serves on loopback only, out of reach of other hosts; give --coordinator-listen ADDR to serve on another interface",
                        addr.ip()
                    );
                }
                return Ok(listener);
            }
            // The port is taken: serving elsewhere would not help.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(format!("--coordinator {host}:{port}: cannot serve the coordinator on {addr} ({e})"));
            }
            Err(e) => why.push(format!("{addr}: {e}")),
        }
    }
    let every = if resolved.iter().all(SocketAddr::is_ipv6) && !resolved.is_empty() {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
    };
    if !why.is_empty() {
        eprintln!("note: shard 0: {name} is not an address of this host ({})", why.join("; "));
    }
    TcpListener::bind(every)
        .await
        .map_err(|e| format!("--coordinator {host}:{port}: cannot serve the coordinator on {every} ({e})"))
}

/// A running coordinator; `finish` waits for its verdict.
pub struct Coordinator {
    task: JoinHandle<Result<merge::Merged, String>>,
    accept: JoinHandle<()>,
}

impl Coordinator {
    /// Start serving on a bound listener (`bind`).
    pub fn start(listener: TcpListener, config: Config) -> std::io::Result<Coordinator> {
        std::fs::create_dir_all(config.gathered_dir())?;
        let (events, rx) = mpsc::unbounded_channel();
        let ignored = Arc::new(Ignored::default());
        let accept = tokio::spawn(peer::accept_loop(listener, config.clone(), events, ignored.clone()));
        let task = tokio::spawn(central(config, rx, ignored));
        Ok(Coordinator { task, accept })
    }

    /// The run's outcome: what became of the results, or why it failed. Waits at most `limit`.
    pub async fn finish(self, limit: Duration) -> Result<merge::Merged, String> {
        let verdict = match tokio::time::timeout(limit, self.task).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(e)) => Err(format!("the coordinator failed: {e}")),
            Err(_) => Err("the coordinator did not finish in time".to_string()),
        };
        self.accept.abort();
        verdict
    }
}

/// What the connection tasks tell the central task. Only admitted shards send anything but
/// `Refused` notes.
#[derive(Debug)]
pub enum Event {
    /// A shard of this run joined; the central task decides whether it takes the index.
    Joined {
        index: u32,
        host: String,
        peer: SocketAddr,
        tx: mpsc::Sender<Msg>,
        decide: oneshot::Sender<Result<(), String>>,
    },
    /// A peer with the token that cannot take part (another configuration, version, count).
    Refused {
        note: String,
    },
    Ready {
        index: u32,
        level: String,
        plan: String,
        round_trip_ns: u64,
    },
    WarmUpDone {
        index: u32,
        level: String,
    },
    Records {
        index: u32,
        level: String,
        lines: u64,
    },
    Finished {
        index: u32,
    },
    Failed {
        index: u32,
        reason: String,
    },
    Lost {
        index: u32,
        reason: String,
    },
}

/// The run's state, from the first join to the merge.
struct Central {
    config: Config,
    shards: BTreeMap<u32, mpsc::Sender<Msg>>,
    hosts: BTreeMap<u32, (String, SocketAddr)>,
    ignored: Arc<Ignored>,
}

impl Central {
    async fn broadcast(&self, msg: &Msg) {
        for tx in self.shards.values() {
            let _ = tokio::time::timeout(Duration::from_secs(2), tx.send(msg.clone())).await;
        }
    }

    /// Tell every shard the run failed, and let the writers deliver it.
    async fn abort(self, reason: String) -> Result<merge::Merged, String> {
        tracing::error!("coordinator: {reason}");
        self.log_ignored();
        self.broadcast(&Msg::Abort { reason: reason.clone() }).await;
        drop(self.shards);
        // Writers end once their queues are empty; give them a moment before the process goes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(reason)
    }

    fn log_ignored(&self) {
        let n = self.ignored.count();
        if n > 0 {
            tracing::warn!("coordinator: {n} connection(s) ignored in all (not shards of this run)");
        }
    }

    fn missing(&self, present: impl Fn(u32) -> bool) -> String {
        let missing: Vec<String> = (0..self.config.count).filter(|&i| !present(i)).map(|i| i.to_string()).collect();
        missing.join(", ")
    }
}

async fn central(
    config: Config,
    mut events: mpsc::UnboundedReceiver<Event>,
    ignored: Arc<Ignored>,
) -> Result<merge::Merged, String> {
    let deadline = Instant::now() + config.join_timeout;
    let mut c = Central { config, shards: BTreeMap::new(), hosts: BTreeMap::new(), ignored };
    let count = c.config.count;
    let mut notes: Vec<String> = Vec::new();

    // 1. Every shard joins. Nothing a connection says here stops the run: a peer that is not a
    //    shard of it is refused, and only the deadline ends the wait.
    while (c.shards.len() as u32) < count {
        let event = tokio::select! {
            event = events.recv() => event,
            () = tokio::time::sleep_until(deadline) => {
                let missing = c.missing(|i| c.shards.contains_key(&i));
                let mut reason = format!(
                    "shard(s) {missing} of {count} did not join within {} (--join-timeout); check that they started, can reach the coordinator and have shard 0's ANVIL_SHARD_TOKEN",
                    humantime::format_duration(c.config.join_timeout)
                );
                if !notes.is_empty() {
                    reason.push_str(&format!("; refused meanwhile: {}", notes.join("; ")));
                }
                let n = c.ignored.count();
                if n > 0 {
                    reason.push_str(&format!("; {n} connection(s) that were not shards of this run were ignored"));
                }
                return c.abort(reason).await;
            }
        };
        match event {
            Some(Event::Joined { index, host, peer, tx, decide }) => {
                if let Some((_, first)) = c.hosts.get(&index) {
                    let reason = format!(
                        "shard {index} has joined already (from {first}); a second shard {index} is refused (run each index once)"
                    );
                    if notes.len() < NOTES {
                        notes.push(format!("a peer from {peer} claiming shard {index}: it had joined already"));
                    }
                    let _ = decide.send(Err(reason));
                    continue;
                }
                if decide.send(Ok(())).is_ok() {
                    c.shards.insert(index, tx);
                    c.hosts.insert(index, (host, peer));
                }
            }
            Some(Event::Refused { note }) => {
                if notes.len() < NOTES {
                    notes.push(note);
                }
            }
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
    let hosts: BTreeMap<u32, &str> = c.hosts.iter().map(|(i, (h, _))| (*i, h.as_str())).collect();
    tracing::info!("coordinator: all {count} shards joined ({hosts:?})");

    // 2. Levels, until every shard has finished.
    let mut ready: BTreeMap<u32, (String, String, u64)> = BTreeMap::new();
    let mut finished: BTreeSet<u32> = BTreeSet::new();
    // The barrier's deadline and the shard that opened it.
    let mut barrier: Option<(Instant, u32)> = None;
    let mut started: Option<String> = None;
    let mut records_lines: u64 = 0;
    loop {
        let expired = async {
            match barrier {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            event = events.recv() => event,
            () = expired => {
                let first = barrier.map_or(0, |(_, i)| i);
                let missing = c.missing(|i| ready.contains_key(&i) || finished.contains(&i));
                let what = match ready.get(&first) {
                    Some((level, ..)) => format!("ready for level {level}"),
                    None => "finished".to_string(),
                };
                let limit = humantime::format_duration(c.config.barrier_timeout);
                return c
                    .abort(format!(
                        "shard(s) {missing} did not reach the barrier within {limit} of shard {first} (--barrier-timeout): shard {first} is {what}, they are not; the run is incomplete"
                    ))
                    .await;
            }
        };
        let Some(event) = event else {
            return Err("the coordinator lost its listener".to_string());
        };
        let arrived = match event {
            Event::Ready { index, level, plan, round_trip_ns } => {
                if Duration::from_nanos(round_trip_ns) > MAX_ROUND_TRIP {
                    return c
                        .abort(format!(
                            "shard {index} measured a round trip of {} to the coordinator, more than the {} accepted: its clock offset would be uncertain by half of that and the start instant {} away; run the shards nearer to shard 0",
                            fmt_ns(round_trip_ns),
                            humantime::format_duration(MAX_ROUND_TRIP),
                            fmt_ns(round_trip_ns.saturating_mul(4))
                        ))
                        .await;
                }
                ready.insert(index, (level, plan, round_trip_ns));
                Some(index)
            }
            Event::Finished { index } => {
                finished.insert(index);
                Some(index)
            }
            Event::WarmUpDone { index, level } => {
                if index == 0 && started.as_deref() == Some(level.as_str()) {
                    c.broadcast(&Msg::WarmUpDone { level }).await;
                } else {
                    tracing::warn!(
                        "coordinator: ignored a warm-up end for level {} from shard {index} (only shard 0's, for the running level, counts)",
                        super::protocol::printable(&level)
                    );
                }
                None
            }
            Event::Records { index, level, lines } => {
                tracing::debug!("coordinator: shard {index} sent {lines} records lines for level {level}");
                records_lines += lines;
                None
            }
            Event::Failed { index, reason } => {
                return c.abort(format!("shard {index} stopped: {reason}; the run is incomplete")).await;
            }
            Event::Lost { index, reason } => {
                return c.abort(format!("{reason}; shard {index} is missing and the run is incomplete")).await;
            }
            Event::Refused { .. } => None,
            Event::Joined { index, decide, peer, .. } => {
                // The shard that joined first goes on: if it is gone, its silence ends the run.
                let _ = decide.send(Err(format!(
                    "shard {index} joined again during the run (a restarted shard would replay its schedule); refused"
                )));
                tracing::warn!("coordinator: refused shard {index} joining again from {peer} during the run");
                None
            }
        };
        if let Some(index) = arrived {
            if barrier.is_none() {
                barrier = Some((Instant::now() + c.config.barrier_timeout, index));
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
        let at_unix_ns = super::clock::now_ns() + slack.as_nanos() as u64;
        started = Some(level.clone());
        c.broadcast(&Msg::Start { level, at_unix_ns }).await;
        ready.clear();
        barrier = None;
    }

    // 3. Every shard's records are here: merge them.
    c.broadcast(&Msg::Merging).await;
    let paths: Vec<PathBuf> = (0..count).map(|i| c.config.gathered_file(i)).collect();
    let out = c.config.out.clone();
    let by_hand = merge::command(&paths, &out);
    let outcome = tokio::task::spawn_blocking(move || merge::merge(&paths, &out))
        .await
        .unwrap_or_else(|e| Err(format!("the merge failed: {e}")));
    let merged = match outcome {
        Ok(merged) => merged,
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
    c.log_ignored();
    c.broadcast(&Msg::Done { merged: merged.describe() }).await;
    drop(c.shards);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(merged)
}

fn fmt_ns(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}
