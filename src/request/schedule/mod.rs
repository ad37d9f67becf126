//! Pacing: who sends which request when, for one load level.
//!
//! Closed loop (`closed`): a fixed number of workers, each sending its next request when its last
//! one ends. Conversations (`sessions`) run their turns in order, with think time, in either mode. Open loop (`open`): one dispatcher walks an arrival schedule (`arrivals`) with
//! absolute deadlines, keeps each request's intended time, and applies the in-flight cap. Both
//! stop issuing when the level's request count or duration is reached or the run is stopped;
//! requests still in flight get the grace period, then are cut and recorded as interrupted.
//! A sharded run sends only its `part` of the same global plan (see `part`). Beside every level,
//! `lateness` measures how late the client's own runtime wakes its tasks.

pub mod arrivals;
mod closed;
pub mod lateness;
mod open;
pub mod pacer;
pub mod part;
mod sessions;
#[cfg(test)]
mod test_support;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use pacer::Pacer;

use crate::request::record::Outcome;
use crate::request::record::{Dispatch, Issued, LevelPacing};
use crate::request::worker::Client;
use crate::request::workload::{PreparedRequest, Workload};

pub use closed::run_closed;
pub use open::run_open;
pub use part::{LevelShard, Part, WarmUpSync};
pub use sessions::run_sessions;

/// The two ways a run stops: no new requests (the level's end, or Ctrl-C), and in-flight
/// requests cut (after the grace period).
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    pub stop_issuing: CancellationToken,
    pub cut_in_flight: CancellationToken,
}

/// One level of a run.
#[derive(Debug, Clone, Copy)]
pub struct LevelPlan {
    pub pacing: LevelPacing,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    pub grace: Duration,
    pub seed: u64,
    /// Send request 0 alone first, then release everything (shared-prefix bursts).
    pub warm_up_first: bool,
}

/// Run one level, or this shard's part of it; every outcome goes to `tx`. Returns when every
/// request has ended (the senders are dropped with the tasks, which is how the aggregator learns
/// it is done).
pub async fn run_level(
    plan: LevelPlan,
    shard: LevelShard,
    workload: Arc<Workload>,
    client: Client,
    tx: mpsc::Sender<Outcome>,
    control: &RunControl,
    level_start: Instant,
) -> Issued {
    // The level's own tokens: stopping or cutting it never touches the run's.
    let level = RunControl {
        stop_issuing: control.stop_issuing.child_token(),
        cut_in_flight: control.cut_in_flight.child_token(),
    };
    // An open loop's schedule holds only arrivals intended before the duration's end: a
    // dispatcher running late there still sends them (their lateness is measured as schedule lag
    // and judged by the validity check) until the grace ends, so `undispatched_arrivals` counts
    // only what a stop prevented, not the client's own lateness.
    let schedule_bounded = matches!(plan.pacing, LevelPacing::Open { .. }) && workload.session_spec().is_none();
    let deadline = plan.duration.map(|d| {
        let level = level.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(level_start + d).await;
            if !schedule_bounded {
                level.stop_issuing.cancel();
            }
            tokio::time::sleep(plan.grace).await;
            level.stop_issuing.cancel();
            level.cut_in_flight.cancel();
        })
    });
    let issue = move |request: PreparedRequest, dispatch: Dispatch, cut: CancellationToken| {
        let client = client.clone();
        async move { client.execute(&request, dispatch, &cut).await }
    };
    // A level may start at an instant agreed ahead of time (shards): everything is set up by
    // now, so the first requests go as close to it as the timer allows.
    let ahead = level_start > Instant::now();
    let conversations = workload.session_spec().is_some();
    let precise = match plan.pacing {
        LevelPacing::Open { .. } => true,
        LevelPacing::Closed { .. } => ahead || conversations,
    };
    let pacer = precise
        .then(|| {
            pacer::PrecisePacer::new()
                .inspect_err(|e| tracing::warn!("no precise timer thread ({e}); tokio's millisecond timer paces"))
                .ok()
        })
        .flatten();
    if ahead {
        let wait = async {
            match &pacer {
                Some(p) => p.wait_until(level_start).await,
                None => pacer::TokioPacer.wait_until(level_start).await,
            }
        };
        tokio::select! {
            () = level.stop_issuing.cancelled() => {}
            () = wait => {}
        }
    }
    let issued = match (plan.pacing, &pacer) {
        // Conversations pace their own turns, closed or open (never sharded: refused up front).
        _ if conversations => match &pacer {
            Some(pacer) => run_sessions(plan, workload, issue, pacer, tx, &level, level_start).await,
            None => run_sessions(plan, workload, issue, &pacer::TokioPacer, tx, &level, level_start).await,
        },
        (LevelPacing::Closed { .. }, _) => run_closed(plan, shard, workload, issue, tx, &level, level_start).await,
        (LevelPacing::Open { .. }, Some(pacer)) => {
            run_open(plan, shard.part, workload, issue, pacer, tx, &level, level_start).await
        }
        (LevelPacing::Open { .. }, None) => {
            run_open(plan, shard.part, workload, issue, &pacer::TokioPacer, tx, &level, level_start).await
        }
    };
    if let Some(timer) = deadline {
        timer.abort();
    }
    issued
}

/// Build request `index`; large prompts are built on the blocking pool so that no runtime thread
/// (and no other request's timestamps) waits for them.
pub async fn prepare(workload: &Arc<Workload>, index: u64) -> PreparedRequest {
    if !workload.is_large(index) {
        return workload.prepare(index);
    }
    let w = Arc::clone(workload);
    match tokio::task::spawn_blocking(move || w.prepare(index)).await {
        Ok(request) => request,
        // Only a panic in prompt building lands here; build inline so the request is not lost.
        Err(_) => workload.prepare(index),
    }
}
