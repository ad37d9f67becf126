//! Pacing: who sends which request when.
//!
//! Closed loop: `concurrency` workers, each sending its next request as soon as its last one
//! ends. Request indices come from one shared atomic counter, so request `i` is the same request
//! whichever worker sends it. A level ends when `requests` have been issued, when `duration` has
//! passed (in-flight requests still finish), or when the run is stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::worker::{Client, Outcome};
use crate::workload::{PreparedRequest, Workload};

/// One load level of a closed-loop run.
#[derive(Debug, Clone, Copy)]
pub struct ClosedLoop {
    pub concurrency: u32,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    /// Send request 0 alone first, then release every worker at once (shared-prefix bursts:
    /// the first request warms the prefix the others will hit together).
    pub warm_up_first: bool,
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

/// Run one level; every outcome goes to `tx`. Returns when all workers have finished (their
/// senders dropped with them).
pub async fn run_closed(
    plan: ClosedLoop,
    workload: Arc<Workload>,
    client: Client,
    tx: mpsc::Sender<Outcome>,
    cancel: CancellationToken,
    level_start: Instant,
) {
    let next_index = Arc::new(AtomicU64::new(0));
    let stop_issuing_at = plan.duration.map(|d| level_start + d);
    if plan.warm_up_first && !cancel.is_cancelled() {
        let index = next_index.fetch_add(1, Ordering::Relaxed);
        let request = prepare(&workload, index).await;
        let outcome = client.execute(&request, level_start, &cancel).await;
        if tx.send(outcome).await.is_err() {
            return;
        }
    }
    let mut workers = JoinSet::new();
    for _ in 0..plan.concurrency {
        let (workload, client, tx, next_index) = (workload.clone(), client.clone(), tx.clone(), next_index.clone());
        // A child token per worker: polling it never contends with the other workers.
        let cancel = cancel.child_token();
        workers.spawn(async move {
            loop {
                if cancel.is_cancelled() || stop_issuing_at.is_some_and(|t| Instant::now() >= t) {
                    break;
                }
                let index = next_index.fetch_add(1, Ordering::Relaxed);
                if plan.requests.is_some_and(|n| index >= n) {
                    break;
                }
                let request = prepare(&workload, index).await;
                let outcome = client.execute(&request, level_start, &cancel).await;
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
}
