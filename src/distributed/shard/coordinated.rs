//! A shard of a coordinated run once it has joined: its two meetings with the other shards in
//! every level (the start instant the coordinator sets, then the hand-over of the level's
//! records) and the end of the run, each over its `Link` to the coordinator. A failure on the
//! way is told to the coordinator, which stops every other shard; on shard 0 the coordinator it
//! serves finishes telling them before this process ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::clock::{self, Offset};
use super::coordinator::Coordinator;
use super::join::kind;
use super::link::Link;
use super::protocol::{self, Msg};
use crate::request::record::ShardInfo;
use crate::request::record::writer::RecordSink;
use crate::request::schedule::{Part, WarmUpSync};

/// Waits whose only bound is the liveness of the peers (heartbeats; see `protocol`): the merge.
const LIVENESS_ONLY: Duration = Duration::from_secs(7 * 86_400);
/// A shard's own wait at a barrier outlasts the coordinator's by this, so the coordinator's
/// verdict (naming the late shard) arrives first.
const BARRIER_MARGIN: Duration = Duration::from_secs(60);

pub(super) struct Coordinated {
    pub part: Part,
    pub link: Arc<Link>,
    /// The coordinator this process serves (shard 0 only).
    pub coordinator: tokio::sync::Mutex<Option<Coordinator>>,
    pub offset: Offset,
    pub run_id: String,
    pub salt: u64,
    pub info: ShardInfo,
    /// The fingerprint of the plan every shard must share (see `Shard::attach`).
    pub plan: std::sync::Mutex<String>,
    pub barrier_timeout: Duration,
    /// Bytes of the records file already sent to the coordinator.
    pub sent: AtomicU64,
    pub interrupted: AtomicBool,
}

impl Coordinated {
    /// The level's start as the coordinator set it, on this host's wall clock and monotonic
    /// clock, and how its warm-up is shared.
    pub(super) async fn start(&self, level: &str) -> Result<(SystemTime, Instant, WarmUpSync), String> {
        match self.meet_at_start(level).await {
            Ok(start) => Ok(start),
            Err(e) => Err(self.fail(e).await),
        }
    }

    async fn meet_at_start(&self, level: &str) -> Result<(SystemTime, Instant, WarmUpSync), String> {
        if let Some(failure) = self.link.failed() {
            return Err(failure);
        }
        // Registered before saying ready: shard 0's warm-up can end as soon as the level starts.
        let warm_up = if self.part.index == 0 {
            let (tx, rx) = oneshot::channel();
            let (link, level) = (self.link.clone(), level.to_string());
            tokio::spawn(async move {
                if rx.await.is_ok() {
                    let _ = link.send(&Msg::WarmUpDone { level }).await;
                }
            });
            WarmUpSync::Lead(tx)
        } else {
            WarmUpSync::Follow(self.link.follow(level))
        };
        let plan = self.plan.lock().map(|p| p.clone()).unwrap_or_default();
        self.link
            .send(&Msg::Ready {
                level: level.to_string(),
                plan,
                round_trip_ns: self.offset.round_trip_ns,
                uncertainty_ns: self.offset.uncertainty_ns,
            })
            .await?;
        let what = format!("the start of level {level}");
        let at_unix_ns = match self.link.next(&what, self.barrier_timeout + BARRIER_MARGIN).await? {
            Msg::Start { level: l, at_unix_ns } if l == level => at_unix_ns,
            other => return Err(format!("the coordinator sent {} instead of {what}", kind(&other))),
        };
        let wall = clock::to_local_wall(at_unix_ns, Some(self.offset));
        // The coordinator never picks an instant further ahead than its slack allows: one that
        // is would hold this shard (and skew the run) for no reason.
        let ahead = wall.duration_since(SystemTime::now()).unwrap_or_default();
        if ahead > clock::MAX_START_LEAD {
            return Err(format!(
                "shard {}: the coordinator set the start of level {level} {:.3} s ahead, more than the {} a start instant may lie ahead; refusing it",
                self.part.index,
                ahead.as_secs_f64(),
                humantime::format_duration(clock::MAX_START_LEAD)
            ));
        }
        let at = clock::to_monotonic(wall);
        let now = Instant::now();
        if at < now {
            eprintln!(
                "warning: shard {}: the start of level {level} arrived {:.3} ms after the agreed instant; this shard starts late (its lag shows in the records)",
                self.part.index,
                (now - at).as_secs_f64() * 1e3
            );
        }
        Ok((wall, at, warm_up))
    }

    /// After a level's records are all in the local records file: send them to the coordinator.
    /// An interrupted level (Ctrl-C, SIGTERM, or an abort from the coordinator) ends the run on
    /// every shard.
    pub(super) async fn hand_over(&self, level: &str, records: &RecordSink, interrupted: bool) -> Result<(), String> {
        let sent = async {
            if let Some(failure) = self.link.failed() {
                return Err(failure);
            }
            if interrupted {
                self.interrupted.store(true, Ordering::Relaxed);
                let reason =
                    format!("shard {} was interrupted (Ctrl-C or SIGTERM) during level {level}", self.part.index);
                let _ = self.link.send(&Msg::Failed { reason: reason.clone() }).await;
                return Err(format!("{reason}; the other shards are stopped too"));
            }
            records.sync().await?;
            let path = records.path().to_path_buf();
            let from = self.sent.load(Ordering::Relaxed);
            let len = self.link.send_records(level, path, from).await?;
            let limit = Duration::from_secs(60) + Duration::from_secs(len.saturating_sub(from) / 1_000_000);
            match self.link.next("records receipt", limit).await? {
                Msg::RecordsOk { level: l } if l == level => {}
                other => {
                    return Err(format!(
                        "the coordinator sent {} instead of a receipt for level {level}",
                        kind(&other)
                    ));
                }
            }
            self.sent.store(len, Ordering::Relaxed);
            Ok(())
        };
        match sent.await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// The end of the run: every shard finished (and shard 0 merged), or the reason it failed.
    pub(super) async fn finish(&self) -> Result<super::RunEnd, String> {
        let done = async {
            self.link.send(&Msg::Finished).await?;
            // Every shard finishing is a barrier; the merge after it is bounded by liveness alone.
            let mut limit = self.barrier_timeout + BARRIER_MARGIN;
            loop {
                match self.link.next("end of the run", limit).await? {
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
            Err(e) => return Err(self.fail(e).await),
        };
        self.link.mark_done();
        // Shard 0 holds the merged levels themselves; the others, where they are.
        if let Some(coordinator) = self.coordinator.lock().await.take() {
            let merged = coordinator.finish(Duration::from_secs(60)).await?;
            return Ok(super::RunEnd::Merged(Box::new(merged)));
        }
        Ok(super::RunEnd::MergedElsewhere(merged))
    }

    /// Tell the coordinator this shard stopped (unless the run already failed), and on shard 0,
    /// let the coordinator finish telling the others before this process ends.
    async fn fail(&self, e: String) -> String {
        if self.link.failed().is_none() {
            self.link.last_word(&Msg::Failed { reason: e.clone() }).await;
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
