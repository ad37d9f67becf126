//! Pacing: who sends which request when, for one load level.
//!
//! Closed loop (`closed`): a fixed number of workers, each sending its next request when its last
//! one ends. Open loop (`open`): one dispatcher walks an arrival schedule (`arrivals`) with
//! absolute deadlines, keeps each request's intended time, and applies the in-flight cap. Both
//! stop issuing when the level's request count or duration is reached or the run is stopped;
//! requests still in flight get the grace period, then are cut and recorded as interrupted.

pub mod arrivals;
mod closed;
mod open;
pub mod pacer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::scenario::{Arrival, Overload};
use crate::worker::{Client, Outcome};
use crate::workload::{PreparedRequest, Workload};

pub use closed::run_closed;
pub use open::run_open;

/// The two ways a run stops: no new requests (the level's end, or Ctrl-C), and in-flight
/// requests cut (after the grace period).
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    pub stop_issuing: CancellationToken,
    pub cut_in_flight: CancellationToken,
}

/// When a request was meant to go and how long it waited for a slot; the worker adds when it
/// actually went.
#[derive(Debug, Clone, Copy)]
pub struct Dispatch {
    pub level_start: Instant,
    /// The schedule's time for this request (open loop); `None` in a closed loop.
    pub intended: Option<Instant>,
    /// Time spent waiting for an in-flight slot (`overload = "queue"`).
    pub queue_wait: Duration,
}

impl Dispatch {
    pub fn closed(level_start: Instant) -> Self {
        Dispatch { level_start, intended: None, queue_wait: Duration::ZERO }
    }
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

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LevelPacing {
    Closed { concurrency: u32, max_rate: Option<f64> },
    Open { rate: f64, arrival: Arrival, ramp: Option<Duration>, max_in_flight: Option<u32>, overload: Overload },
}

impl LevelPacing {
    /// The level's number: its concurrency or its rate.
    pub fn level(&self) -> f64 {
        match self {
            LevelPacing::Closed { concurrency, .. } => f64::from(*concurrency),
            LevelPacing::Open { rate, .. } => *rate,
        }
    }
}

/// What the pacing knows that the outcomes do not.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Issued {
    /// Arrivals in the schedule (open loop).
    pub planned_arrivals: Option<u64>,
    /// The planned issuing window: where the schedule ends (open loop) or `duration`.
    pub planned_window: Option<Duration>,
}

/// Run one level; every outcome goes to `tx`. Returns when every request has ended (the
/// senders are dropped with the tasks, which is how the aggregator learns it is done).
pub async fn run_level(
    plan: LevelPlan,
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
    let deadline = plan.duration.map(|d| {
        let level = level.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(level_start + d).await;
            level.stop_issuing.cancel();
            tokio::time::sleep(plan.grace).await;
            level.cut_in_flight.cancel();
        })
    });
    let issued = match plan.pacing {
        LevelPacing::Closed { concurrency, max_rate } => {
            run_closed(plan, concurrency, max_rate, workload, client, tx, &level, level_start).await
        }
        LevelPacing::Open { .. } => {
            let issue = move |request: PreparedRequest, dispatch: Dispatch, cut: CancellationToken| {
                let client = client.clone();
                async move { client.execute(&request, dispatch, &cut).await }
            };
            match pacer::PrecisePacer::new() {
                Ok(pacer) => run_open(plan, workload, issue, &pacer, tx, &level, level_start).await,
                Err(e) => {
                    tracing::warn!("no precise timer thread ({e}); arrivals use tokio's millisecond timer");
                    run_open(plan, workload, issue, &pacer::TokioPacer, tx, &level, level_start).await
                }
            }
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
