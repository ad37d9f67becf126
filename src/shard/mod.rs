//! Sharded runs: one test split over N processes or hosts (Slurm tasks, an Indexed Job's pods),
//! whose records together are exactly those of one process running it.
//!
//! Every shard computes the same global plan and sends its part of it (`schedule::part`). The
//! shards agree on when each level starts either through a coordinator served by shard 0
//! (`coordinator`, reached over `link`: joins, clock offsets from ping exchanges (`clock`), one
//! start instant per level, the warm-up relay, every shard's records gathered after each level,
//! any failure stopping every shard) or, for a single level under a scheduler that starts every
//! task together, at a `--start-at` instant on the hosts' own clocks. Every coordinator message
//! is authenticated with the run's shared secret (`auth`); the coordinator admits only shards of
//! this run (`peer`), and every wait on either side has a deadline and ends at Ctrl-C or SIGTERM.
//!
//! The run's steps call `Shard` through a narrow interface: `plan` (validate, before anything is
//! sent), `join`, `attach`, `start_level`, `finish_level`, `finish`. An unsharded run is
//! `Shard` in its solo form, for which each step is what the run did before.

pub mod args;
pub mod auth;
pub mod clock;
mod coordinator;
mod join;
mod link;
pub mod merge;
mod peer;
mod protocol;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::time::Instant;

pub use crate::record::ShardInfo;
pub use args::{ShardArgs, ShardSpec, Sync};

use crate::record::writer::RecordSink;
use crate::record::{RunInfo, Stamp, fingerprint};
use crate::scenario::Scenario;
use crate::schedule::{LevelShard, Part, RunControl, WarmUpSync};
use crate::workload::Workload;
use clock::Offset;
use coordinator::Coordinator;
pub use join::is_run_id;
use join::{host_name, join_coordinator, kind};
use link::Link;
use protocol::Msg;

/// Ping exchanges per shard when it joins; the one with the smallest round trip counts.
const PINGS: u32 = 16;
/// A `--start-at` instant may be this far behind when a shard is ready (it starts at once and
/// its lateness shows as dispatch lag); further behind is an error.
const START_AT_TOLERANCE: Duration = Duration::from_secs(1);
/// Waits whose only bound is the liveness of the peers (heartbeats; see `protocol`): the merge.
const LIVENESS_ONLY: Duration = Duration::from_secs(7 * 86_400);
/// A shard's own wait at a barrier outlasts the coordinator's by this, so the coordinator's
/// verdict (naming the late shard) arrives first.
const BARRIER_MARGIN: Duration = Duration::from_secs(60);
/// How long a shard that fails takes at most to tell the coordinator before it ends.
const LAST_WORD: Duration = Duration::from_secs(2);

/// The name of shard `index`'s records file.
pub fn records_file_name(run_id: &str, index: u32, count: u32) -> String {
    format!("{run_id}.shard{index}of{count}.records.ndjson")
}

/// A validated sharding request (or none), before anything is sent.
#[derive(Debug, Clone)]
pub struct ShardPlan(Option<ShardSpec>);

/// Resolve the options against the scenario and the environment; errors are bad input.
pub fn plan(args: &ShardArgs, scenario: &Scenario) -> Result<ShardPlan, String> {
    args.resolve(scenario, &args::ProcessEnv).map(ShardPlan)
}

/// When a level starts, and this shard's part of it.
pub struct LevelStart {
    /// The wall-clock start (this host's clock).
    pub started: Stamp,
    /// The same instant on the monotonic clock: the level clock's zero.
    pub at: Instant,
    pub shard: LevelShard,
}

/// This process's place in the run.
pub struct Shard {
    kind: Kind,
}

enum Kind {
    Solo,
    StartAt(Box<StartAt>),
    Coordinated(Box<Coordinated>),
}

struct StartAt {
    part: Part,
    at: SystemTime,
    run_id: String,
    salt: u64,
    info: ShardInfo,
}

struct Coordinated {
    part: Part,
    link: Arc<Link>,
    coordinator: tokio::sync::Mutex<Option<Coordinator>>,
    offset: Offset,
    run_id: String,
    salt: u64,
    info: ShardInfo,
    plan: std::sync::Mutex<String>,
    barrier_timeout: Duration,
    /// Bytes of the records file already sent to the coordinator.
    sent: AtomicU64,
    interrupted: AtomicBool,
}

impl ShardPlan {
    pub fn is_sharded(&self) -> bool {
        self.0.is_some()
    }

    /// Join the run: for a coordinated run, serve the coordinator (shard 0), connect, get the
    /// run's id and prompt salt, and measure this host's clock against shard 0's.
    pub async fn join(self, scenario: &Scenario, out: &Path, control: &RunControl) -> Result<Shard, String> {
        let Some(spec) = self.0 else { return Ok(Shard { kind: Kind::Solo }) };
        let part = spec.part;
        let config_fingerprint = fingerprint(&serde_json::to_value(scenario).unwrap_or_default());
        let kind = match spec.sync {
            Sync::StartAt(at) => {
                // No one to hand out an id and a salt: both follow from what every shard knows.
                let key = fingerprint(&serde_json::json!([config_fingerprint, clock::unix_ns(at), part.count]));
                let hash = u64::from_str_radix(key.trim_start_matches("fnv1a64:"), 16).unwrap_or(0);
                let info = ShardInfo {
                    index: part.index,
                    count: part.count,
                    sync: "start_at".to_string(),
                    clock_offset_ms: None,
                    clock_offset_uncertainty_ms: None,
                    host: host_name(),
                    coordinator: None,
                };
                Kind::StartAt(Box::new(StartAt { part, at, run_id: run_id(at, hash as u16), salt: hash, info }))
            }
            Sync::Coordinator { connect, listen, join_timeout, barrier_timeout, token } => {
                let authenticated = token.is_some();
                if !authenticated && spec.part.index == 0 {
                    eprintln!(
                        "note: shard 0: no {}: the coordinator's messages are checked, not authenticated; anyone who reaches its port can join",
                        auth::TOKEN_ENV
                    );
                }
                let token = token.unwrap_or_else(auth::Token::none);
                let coordinator = match listen {
                    Some(listen) => {
                        let listener = coordinator::bind(&listen, authenticated).await?;
                        let bound = listener.local_addr().map_err(|e| format!("the coordinator's address: {e}"))?;
                        let config = coordinator::Config {
                            count: part.count,
                            fingerprint: config_fingerprint.clone(),
                            join_timeout,
                            barrier_timeout,
                            out: out.to_path_buf(),
                            run_id: run_id(SystemTime::now(), rand::random()),
                            salt: rand::random(),
                            token: token.clone(),
                        };
                        let c = Coordinator::start(listener, config).map_err(|e| {
                            format!("--out {}: cannot gather the shards' records there ({e})", out.display())
                        })?;
                        let auth =
                            if authenticated { "authenticated with ANVIL_SHARD_TOKEN" } else { "without a token" };
                        eprintln!("shard 0: coordinator listening on {bound} for {} shards ({auth})", part.count);
                        Some(c)
                    }
                    None => None,
                };
                let joined = join_coordinator(part, &connect, &token, &config_fingerprint, join_timeout, control).await;
                match joined {
                    Ok((link, run_id, salt, offset)) => {
                        let info = ShardInfo {
                            index: part.index,
                            count: part.count,
                            sync: "coordinator".to_string(),
                            clock_offset_ms: Some(offset.offset_ns as f64 / 1e6),
                            clock_offset_uncertainty_ms: Some(offset.uncertainty_ns as f64 / 1e6),
                            host: host_name(),
                            coordinator: Some(connect.clone()),
                        };
                        Kind::Coordinated(Box::new(Coordinated {
                            part,
                            link: Arc::new(link),
                            coordinator: tokio::sync::Mutex::new(coordinator),
                            offset,
                            run_id,
                            salt,
                            info,
                            plan: std::sync::Mutex::new(String::new()),
                            barrier_timeout,
                            sent: AtomicU64::new(0),
                            interrupted: AtomicBool::new(false),
                        }))
                    }
                    Err(e) => {
                        // Shard 0's process must not end before its coordinator told the others.
                        if let Some(c) = coordinator {
                            let _ = c.finish(Duration::from_secs(3)).await;
                        }
                        return Err(e);
                    }
                }
            }
        };
        Ok(Shard { kind })
    }
}

impl Shard {
    /// The run's id when the shards share one (otherwise the run makes its own).
    pub fn run_id(&self) -> Option<String> {
        match &self.kind {
            Kind::Solo => None,
            Kind::StartAt(s) => Some(s.run_id.clone()),
            Kind::Coordinated(c) => Some(c.run_id.clone()),
        }
    }

    /// The prompt salt when the shards share one.
    pub fn salt(&self) -> Option<u64> {
        match &self.kind {
            Kind::Solo => None,
            Kind::StartAt(s) => Some(s.salt),
            Kind::Coordinated(c) => Some(c.salt),
        }
    }

    pub fn is_sharded(&self) -> bool {
        !matches!(self.kind, Kind::Solo)
    }

    fn part(&self) -> Part {
        match &self.kind {
            Kind::Solo => Part::WHOLE,
            Kind::StartAt(s) => s.part,
            Kind::Coordinated(c) => c.part,
        }
    }

    /// This shard's share of `n` connections (or slots).
    pub fn share(&self, n: usize) -> usize {
        self.part().share(n as u64) as usize
    }

    /// `stem`, with the shard appended when sharded (`{stem}.shard{i}of{N}`), so that shards
    /// writing into one directory never overwrite each other.
    pub fn stem(&self, stem: &str) -> String {
        match self.part() {
            Part::WHOLE if !self.is_sharded() => stem.to_string(),
            p => format!("{stem}.shard{}of{}", p.index, p.count),
        }
    }

    /// `{stem}.{ext}`, with the shard in the stem.
    pub fn file_name(&self, stem: &str, ext: &str) -> String {
        format!("{}.{ext}", self.stem(stem))
    }

    /// Mark the run's description with this shard, and fix the plan every shard must share.
    pub fn attach(&self, info: &mut RunInfo, workload: &Workload) {
        let shard_info = match &self.kind {
            Kind::Solo => return,
            Kind::StartAt(s) => s.info.clone(),
            Kind::Coordinated(c) => c.info.clone(),
        };
        info.shard = Some(shard_info);
        if let Kind::Coordinated(c) = &self.kind {
            let first = workload.prepare(0);
            let plan = fingerprint(&serde_json::json!([
                info.configuration_fingerprint,
                info.prompt_salt,
                info.prompt_sizing.slope,
                info.prompt_sizing.intercept,
                fingerprint(&serde_json::Value::String(String::from_utf8_lossy(&first.body).into_owned())),
            ]));
            if let Ok(mut p) = c.plan.lock() {
                *p = plan;
            }
        }
    }

    /// The level's start, as agreed with the other shards: the level clock's zero is the agreed
    /// instant itself (usually a few tens of milliseconds ahead; the level waits for it once it
    /// is set up, see `schedule::run_level`), not the moment this process woke up.
    pub async fn start_level(&self, level: &str) -> Result<LevelStart, String> {
        match &self.kind {
            Kind::Solo => {
                // Taken together, so that `started + start_offset` places every request.
                let (started, at) = (Stamp::now(), Instant::now());
                Ok(LevelStart { started, at, shard: LevelShard::whole() })
            }
            Kind::StartAt(s) => {
                let behind = SystemTime::now().duration_since(s.at).unwrap_or_default();
                if behind > START_AT_TOLERANCE {
                    return Err(format!(
                        "shard {}: --start-at passed {} before this shard was ready (prompt sizing and connection warming come first); give the shards more lead time",
                        s.part.index,
                        humantime::format_duration(Duration::from_millis(behind.as_millis() as u64))
                    ));
                }
                let at = clock::to_monotonic(s.at);
                Ok(LevelStart { started: Stamp(s.at), at, shard: LevelShard { part: s.part, ..LevelShard::whole() } })
            }
            Kind::Coordinated(c) => match self.start_coordinated(c, level).await {
                Ok(start) => Ok(start),
                Err(e) => Err(c.fail(e).await),
            },
        }
    }

    async fn start_coordinated(&self, c: &Coordinated, level: &str) -> Result<LevelStart, String> {
        if let Some(failure) = c.link.failed() {
            return Err(failure);
        }
        // Registered before saying ready: shard 0's warm-up can end as soon as the level starts.
        let warm_up = if c.part.index == 0 {
            let (tx, rx) = oneshot::channel();
            let (link, level) = (c.link.clone(), level.to_string());
            tokio::spawn(async move {
                if rx.await.is_ok() {
                    let _ = link.send(&Msg::WarmUpDone { level }).await;
                }
            });
            WarmUpSync::Lead(tx)
        } else {
            WarmUpSync::Follow(c.link.follow(level))
        };
        let plan = c.plan.lock().map(|p| p.clone()).unwrap_or_default();
        c.link
            .send(&Msg::Ready {
                level: level.to_string(),
                plan,
                round_trip_ns: c.offset.round_trip_ns,
                uncertainty_ns: c.offset.uncertainty_ns,
            })
            .await?;
        let what = format!("the start of level {level}");
        let at_unix_ns = match c.link.next(&what, c.barrier_timeout + BARRIER_MARGIN).await? {
            Msg::Start { level: l, at_unix_ns } if l == level => at_unix_ns,
            other => return Err(format!("the coordinator sent {} instead of {what}", kind(&other))),
        };
        let wall = clock::to_local_wall(at_unix_ns, Some(c.offset));
        // The coordinator never picks an instant further ahead than its slack allows: one that
        // is would hold this shard (and skew the run) for no reason.
        let ahead = wall.duration_since(SystemTime::now()).unwrap_or_default();
        if ahead > clock::MAX_START_LEAD {
            return Err(format!(
                "shard {}: the coordinator set the start of level {level} {:.3} s ahead, more than the {} a start instant may lie ahead; refusing it",
                c.part.index,
                ahead.as_secs_f64(),
                humantime::format_duration(clock::MAX_START_LEAD)
            ));
        }
        let at = clock::to_monotonic(wall);
        let now = Instant::now();
        if at < now {
            eprintln!(
                "warning: shard {}: the start of level {level} arrived {:.3} ms after the agreed instant; this shard starts late (its lag shows in the records)",
                c.part.index,
                (now - at).as_secs_f64() * 1e3
            );
        }
        Ok(LevelStart { started: Stamp(wall), at, shard: LevelShard { part: c.part, warm_up } })
    }

    /// After a level's records are all in the local records file: send them to the coordinator.
    /// An interrupted level (Ctrl-C, SIGTERM, or an abort from the coordinator) ends the run on
    /// every shard.
    pub async fn finish_level(&self, level: &str, records: &RecordSink, interrupted: bool) -> Result<(), String> {
        let Kind::Coordinated(c) = &self.kind else { return Ok(()) };
        let sent = async {
            if let Some(failure) = c.link.failed() {
                return Err(failure);
            }
            if interrupted {
                c.interrupted.store(true, Ordering::Relaxed);
                let reason = format!("shard {} was interrupted (Ctrl-C or SIGTERM) during level {level}", c.part.index);
                let _ = c.link.send(&Msg::Failed { reason: reason.clone() }).await;
                return Err(format!("{reason}; the other shards are stopped too"));
            }
            records.sync().await?;
            let path = records.path().to_path_buf();
            let from = c.sent.load(Ordering::Relaxed);
            let (len, lines, sha256) = count_lines(path.clone(), from).await?;
            c.link.send_records(level, path, from, len - from, lines, sha256).await?;
            let limit = Duration::from_secs(60) + Duration::from_secs((len - from) / 1_000_000);
            match c.link.next("records receipt", limit).await? {
                Msg::RecordsOk { level: l } if l == level => {}
                other => {
                    return Err(format!(
                        "the coordinator sent {} instead of a receipt for level {level}",
                        kind(&other)
                    ));
                }
            }
            c.sent.store(len, Ordering::Relaxed);
            Ok(())
        };
        match sent.await {
            Ok(()) => Ok(()),
            Err(e) => Err(c.fail(e).await),
        }
    }

    /// The end of the run: every shard finished (and shard 0 merged), or the reason it failed.
    pub async fn finish(&self) -> Result<(), String> {
        let Kind::Coordinated(c) = &self.kind else { return Ok(()) };
        let done = async {
            c.link.send(&Msg::Finished).await?;
            // Every shard finishing is a barrier; the merge after it is bounded by liveness alone.
            let mut limit = c.barrier_timeout + BARRIER_MARGIN;
            loop {
                match c.link.next("end of the run", limit).await? {
                    Msg::Merging => limit = LIVENESS_ONLY,
                    Msg::Done { merged } => return Ok(protocol::printable(&merged)),
                    other => {
                        return Err(format!("the coordinator sent {} instead of the end of the run", kind(&other)));
                    }
                }
            }
        };
        let merged = match done.await {
            Ok(merged) => merged,
            Err(e) => return Err(c.fail(e).await),
        };
        c.link.mark_done();
        if let Some(coordinator) = c.coordinator.lock().await.take() {
            coordinator.finish(Duration::from_secs(60)).await?;
        }
        println!("shards: {merged}");
        Ok(())
    }
}

impl Coordinated {
    /// Tell the coordinator this shard stopped (unless the run already failed), and on shard 0,
    /// let the coordinator finish telling the others before this process ends.
    async fn fail(&self, e: String) -> String {
        if self.link.failed().is_none() {
            self.link.send_flushed(&Msg::Failed { reason: e.clone() }, LAST_WORD).await;
        }
        if let Some(coordinator) = self.coordinator.lock().await.take() {
            if let Err(verdict) = coordinator.finish(Duration::from_secs(3)).await {
                if !self.interrupted.load(Ordering::Relaxed) && verdict != e {
                    return format!("{e} (coordinator: {verdict})");
                }
            }
        }
        e
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

/// `anvil-<UTC time>-<4 hex>`, the run ids' format.
fn run_id(at: SystemTime, tag: u16) -> String {
    let iso = Stamp(at).iso().replace(['-', ':'], "");
    format!("anvil-{}Z-{tag:04x}", iso.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_the_shard() {
        let solo = Shard { kind: Kind::Solo };
        assert_eq!(solo.file_name("anvil-x-c4", "json"), "anvil-x-c4.json");
        let info = ShardInfo {
            index: 2,
            count: 4,
            sync: "start_at".into(),
            clock_offset_ms: None,
            clock_offset_uncertainty_ms: None,
            host: "h".into(),
            coordinator: None,
        };
        let part = Part { index: 2, count: 4 };
        let sharded = Shard {
            kind: Kind::StartAt(Box::new(StartAt { part, at: SystemTime::now(), run_id: "r".into(), salt: 1, info })),
        };
        assert_eq!(sharded.file_name("anvil-x-c4", "json"), "anvil-x-c4.shard2of4.json");
        assert_eq!(sharded.file_name("r", "records.ndjson"), records_file_name("r", 2, 4));
        assert_eq!(sharded.share(10), 2);
    }

    #[test]
    fn run_ids_look_like_the_runs_own() {
        let id = run_id(SystemTime::UNIX_EPOCH + Duration::from_secs(1_777_636_800), 0xab);
        assert_eq!(id, "anvil-20260501T120000Z-00ab");
        assert!(is_run_id(&id) && is_run_id(&run_id(SystemTime::now(), 0xffff)));
        for bad in [
            "../../x",
            "/etc/anvil",
            "anvil-20260501T120000Z-00ab/../../x",
            "anvil-20260501T120000Z-00AB",
            "anvil-20260501T1200000-00ab",
            "anvil-2026050lT120000Z-00ab",
            "",
            "anvil-20260501T120000Z-00a\n",
        ] {
            assert!(!is_run_id(bad), "{bad:?}");
        }
    }
}
