//! Closed loop: `concurrency` workers, each sending its next request as soon as its last one
//! ends. Request indices come from one shared atomic counter, so request `i` is the same request
//! whichever worker sends it. An optional token bucket (`max_rate`) caps request starts across
//! workers.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::{Quota, RateLimiter};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Dispatch, Issued, LevelPlan, RunControl, prepare};
use crate::record::Outcome;
use crate::worker::Client;
use crate::workload::Workload;

#[allow(clippy::too_many_arguments)]
pub async fn run_closed(
    plan: LevelPlan,
    concurrency: u32,
    max_rate: Option<f64>,
    workload: Arc<Workload>,
    client: Client,
    tx: mpsc::Sender<Outcome>,
    control: &RunControl,
    level_start: Instant,
) -> Issued {
    let next_index = Arc::new(AtomicU64::new(0));
    let issued = Issued { planned_arrivals: None, planned_window: plan.duration };
    if plan.warm_up_first && !control.stop_issuing.is_cancelled() {
        let index = next_index.fetch_add(1, Ordering::Relaxed);
        let request = prepare(&workload, index).await;
        let outcome = client.execute(&request, Dispatch::closed(level_start), &control.cut_in_flight).await;
        if tx.send(outcome).await.is_err() {
            return issued;
        }
    }
    // A token bucket of one: starts are spaced by 1/max_rate at most, shared by all workers
    // without a lock (governor's state is a single atomic).
    let limiter = max_rate.map(|rate| {
        let period = Duration::from_secs_f64(1.0 / rate);
        Arc::new(RateLimiter::direct(Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))))
    });
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        let (workload, client, tx, next_index, limiter) =
            (workload.clone(), client.clone(), tx.clone(), next_index.clone(), limiter.clone());
        // Child tokens per worker: polling them never contends with the other workers.
        let stop = control.stop_issuing.child_token();
        let cut = control.cut_in_flight.child_token();
        workers.spawn(async move {
            loop {
                if stop.is_cancelled() {
                    break;
                }
                let index = next_index.fetch_add(1, Ordering::Relaxed);
                if plan.requests.is_some_and(|n| index >= n) {
                    break;
                }
                if let Some(limiter) = &limiter {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = limiter.until_ready() => {}
                    }
                }
                let request = prepare(&workload, index).await;
                let outcome = client.execute(&request, Dispatch::closed(level_start), &cut).await;
                if tx.send(outcome).await.is_err() {
                    break; // the aggregator is gone; nothing more can be recorded
                }
            }
        });
    }
    drop(tx);
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined {
            // A worker panicking is a bug; say so loudly rather than losing it silently.
            tracing::error!("worker task failed: {e}");
        }
    }
    issued
}
