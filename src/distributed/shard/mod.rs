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
//! `Shard` is the one seam between the run and the other shards: `plan` (validate, before
//! anything is sent), `join` (the run's id and prompt salt, and the records file it keeps), then
//! per level the names of its files and its share of the connections, `start_level` (the agreed
//! instant) and `hand_over` (its records, to the coordinator), and `finish`. A run alone is
//! `Shard` in its solo form, for which each step is what a lone process does: its own id and
//! salt, now, nothing to hand over; the run never asks which form it has. A coordinated shard's
//! side of each step is `coordinated`, the names its files take `names`.

pub mod args;
pub mod auth;
pub mod clock;
mod coordinated;
mod coordinator;
mod join;
mod link;
pub mod merge;
mod names;
mod peer;
mod protocol;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

pub use crate::request::record::ShardInfo;
pub use args::{ShardArgs, ShardSpec, Sync};

use crate::plan::scenario::Scenario;
use crate::request::record::writer::RecordSink;
use crate::request::record::{RunInfo, Stamp, fingerprint};
use crate::request::schedule::{LevelShard, Part, RunControl};
use crate::request::workload::Workload;
use coordinated::Coordinated;
use coordinator::Coordinator;
pub use join::is_run_id;
use join::{host_name, join_coordinator};

/// A `--start-at` instant may be this far behind when a shard is ready (it starts at once and
/// its lateness shows as dispatch lag); further behind is an error.
const START_AT_TOLERANCE: Duration = Duration::from_secs(1);

/// A validated sharding request (or none), before anything is sent.
#[derive(Debug, Clone)]
pub struct ShardPlan(Option<ShardSpec>);

/// Resolve the options against the scenario and the environment; errors are bad input.
pub fn plan(args: &ShardArgs, scenario: &Scenario) -> Result<ShardPlan, String> {
    args.resolve(scenario, &args::ProcessEnv).map(ShardPlan)
}

/// How a run ended, for what it prints: its own levels are the answer (a run alone), or the
/// merged ones are (shard 0 of a coordinated run, which merged them), or they are elsewhere.
pub enum RunEnd {
    Alone,
    /// A shard started at an instant: its part only; `anvil-load merge` makes the whole.
    Part,
    Merged(Box<merge::Merged>),
    /// Another shard merged the run; the line says where the results are.
    MergedElsewhere(String),
}

/// When a level starts, and this shard's part of it.
pub struct LevelStart {
    /// The wall-clock start (this host's clock).
    pub started: Stamp,
    /// The same instant on the monotonic clock: the level clock's zero.
    pub at: Instant,
    pub shard: LevelShard,
}

/// This process's place in the run: alone, or one shard of a split run.
pub struct Shard {
    kind: Kind,
}

enum Kind {
    /// A run alone, with its own id and prompt salt.
    Solo {
        run_id: String,
        salt: u64,
    },
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

impl ShardPlan {
    /// Join the run: for a coordinated run, serve the coordinator (shard 0), connect, get the
    /// run's id and prompt salt, and measure this host's clock against shard 0's.
    pub async fn join(self, scenario: &Scenario, out: &Path, control: &RunControl) -> Result<Shard, String> {
        let Some(spec) = self.0 else {
            let run_id = run_id(SystemTime::now(), rand::random());
            return Ok(Shard { kind: Kind::Solo { run_id, salt: rand::random() } });
        };
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
                            plan: std::sync::Mutex::default(),
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
    /// The run's id: the one the shards share, or a lone run's own.
    pub fn run_id(&self) -> &str {
        match &self.kind {
            Kind::Solo { run_id, .. } => run_id,
            Kind::StartAt(s) => &s.run_id,
            Kind::Coordinated(c) => &c.run_id,
        }
    }

    /// The run's prompt salt: the one the shards share, or a lone run's own.
    pub fn salt(&self) -> u64 {
        match &self.kind {
            Kind::Solo { salt, .. } => *salt,
            Kind::StartAt(s) => s.salt,
            Kind::Coordinated(c) => c.salt,
        }
    }

    fn is_sharded(&self) -> bool {
        !matches!(self.kind, Kind::Solo { .. })
    }

    /// The name of the records file the run keeps in its output directory: always for a shard
    /// (its records are its part of the merge), for a run alone when `keep` asks for it.
    pub fn kept_records(&self, keep: bool) -> Option<String> {
        (keep || self.is_sharded()).then(|| self.file_name(self.run_id(), "records.ndjson"))
    }

    fn part(&self) -> Part {
        match &self.kind {
            Kind::Solo { .. } => Part::WHOLE,
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
            p => names::stem(stem, p.index, p.count),
        }
    }

    /// `{stem}.{ext}`, with the shard in the stem.
    pub fn file_name(&self, stem: &str, ext: &str) -> String {
        format!("{}.{ext}", self.stem(stem))
    }

    /// Mark the run's description with this shard, and fix the plan every shard must share.
    pub fn attach(&self, info: &mut RunInfo, workload: &Workload) {
        let shard_info = match &self.kind {
            Kind::Solo { .. } => return,
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
            Kind::Solo { .. } => {
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
            Kind::Coordinated(c) => {
                let (wall, at, warm_up) = c.start(level).await?;
                Ok(LevelStart { started: Stamp(wall), at, shard: LevelShard { part: c.part, warm_up } })
            }
        }
    }

    /// After a level's records are all in the local records file: hand them over to the
    /// coordinator (nothing to do for a run alone or started at an instant). An interrupted level
    /// ends a coordinated run on every shard.
    pub async fn hand_over(&self, level: &str, records: &RecordSink, interrupted: bool) -> Result<(), String> {
        match &self.kind {
            Kind::Coordinated(c) => c.hand_over(level, records, interrupted).await,
            Kind::Solo { .. } | Kind::StartAt(_) => Ok(()),
        }
    }

    /// The end of the run: every shard finished (and shard 0 merged), or the reason it failed.
    pub async fn finish(&self) -> Result<RunEnd, String> {
        match &self.kind {
            Kind::Coordinated(c) => c.finish().await,
            Kind::Solo { .. } => Ok(RunEnd::Alone),
            Kind::StartAt(_) => Ok(RunEnd::Part),
        }
    }

    /// This shard's index, when sharded (the `shard` label of its live metrics).
    pub fn index(&self) -> Option<u32> {
        self.is_sharded().then(|| self.part().index)
    }

    /// Whether this process measures only a part of the run (its own levels are not the answer).
    pub fn is_part(&self) -> bool {
        self.is_sharded()
    }
}

/// `anvil-<UTC time>-<4 hex>`, the run ids' format (`is_run_id`): sortable, and unique even for
/// runs started in the same second.
fn run_id(at: SystemTime, tag: u16) -> String {
    let iso = Stamp(at).iso().replace(['-', ':'], "");
    format!("anvil-{}Z-{tag:04x}", iso.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_the_shard() {
        let solo = Shard { kind: Kind::Solo { run_id: "r".into(), salt: 1 } };
        assert_eq!(solo.file_name("anvil-x-c4", "json"), "anvil-x-c4.json");
        assert_eq!(solo.kept_records(false), None);
        assert_eq!(solo.kept_records(true).as_deref(), Some("r.records.ndjson"));
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
        assert_eq!(sharded.file_name("r", "records.ndjson"), names::records_file_name("r", 2, 4));
        assert_eq!(sharded.share(10), 2);
        // A shard keeps its records whatever the scenario says: they are its part of the merge.
        assert_eq!(sharded.kept_records(false), Some(names::records_file_name("r", 2, 4)));
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
