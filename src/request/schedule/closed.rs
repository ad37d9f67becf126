//! Closed loop: `concurrency` workers, each sending its next request as soon as its last one
//! ends. Request indices come from one shared atomic counter, so request `i` is the same request
//! whichever worker sends it. An optional token bucket (`max_rate`) caps request starts across
//! workers. A shard runs its share of the workers and sends the indices of its part (the
//! counter counts the part's requests; `Part::nth` gives their global indices).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::future::Future;

use governor::{Quota, RateLimiter};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::part::{LevelShard, WarmUpSync};
use super::{Dispatch, Issued, LevelPacing, LevelPlan, RunControl, prepare};
use crate::request::record::Outcome;
use crate::request::workload::{PreparedRequest, Workload};

/// Run the workers. `issue` sends one request and returns its outcome; it is the worker's
/// `execute` in a run and a stub in tests.
pub async fn run_closed<F, Fut>(
    plan: LevelPlan,
    shard: LevelShard,
    workload: Arc<Workload>,
    issue: F,
    tx: mpsc::Sender<Outcome>,
    control: &RunControl,
    level_start: Instant,
) -> Issued
where
    F: Fn(PreparedRequest, Dispatch, CancellationToken) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let LevelPacing::Closed { concurrency, max_rate } = plan.pacing else {
        return Issued::default();
    };
    let part = shard.part;
    // Counts this part's requests; `part.nth(k)` is the k-th one's global index.
    let next_k = Arc::new(AtomicU64::new(0));
    let issued = Issued { planned_arrivals: None, planned_window: plan.duration };
    if plan.warm_up_first && !control.stop_issuing.is_cancelled() {
        match shard.warm_up {
            // Request 0 is shard 0's.
            WarmUpSync::Local | WarmUpSync::Lead(_) if !part.owns(0) => {}
            WarmUpSync::Local | WarmUpSync::Lead(_) => {
                let index = part.nth(next_k.fetch_add(1, Ordering::Relaxed));
                let request = prepare(&workload, index).await;
                let outcome = issue(request, Dispatch::closed(level_start), control.cut_in_flight.clone()).await;
                if tx.send(outcome).await.is_err() {
                    return issued;
                }
                if let WarmUpSync::Lead(ended) = shard.warm_up {
                    let _ = ended.send(());
                }
            }
            WarmUpSync::Follow(ended) => {
                tokio::select! {
                    () = control.stop_issuing.cancelled() => return issued,
                    _ = ended => {}
                }
            }
        }
    }
    // A token bucket of one: starts are spaced by 1/max_rate at most, shared by all workers
    // without a lock (governor's state is a single atomic). A shard's bucket holds its share.
    let limiter = max_rate.map(|rate| rate / f64::from(part.count)).map(|rate| {
        let period = Duration::from_secs_f64(1.0 / rate);
        Arc::new(RateLimiter::direct(Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))))
    });
    let mut workers = JoinSet::new();
    for _ in 0..part.share(u64::from(concurrency)) {
        let (workload, issue, tx, next_k, limiter) =
            (workload.clone(), issue.clone(), tx.clone(), next_k.clone(), limiter.clone());
        // Child tokens per worker: polling them never contends with the other workers.
        let stop = control.stop_issuing.child_token();
        let cut = control.cut_in_flight.child_token();
        workers.spawn(async move {
            loop {
                if stop.is_cancelled() {
                    break;
                }
                let index = part.nth(next_k.fetch_add(1, Ordering::Relaxed));
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
                let outcome = issue(request, Dispatch::closed(level_start), cut.clone()).await;
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::request::schedule::test_support::{outcome, workload};

    /// A closed loop with a stub request that takes `hold`: returns (index, start) of every
    /// request sent, the most requests seen in flight at once, and the outcomes received.
    async fn run(
        concurrency: u32,
        requests: u64,
        hold: Duration,
        warm_up_first: bool,
        shard: LevelShard,
    ) -> (Vec<(u64, Duration)>, usize, usize) {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let issue = {
            let (sent, now, peak) = (sent.clone(), now.clone(), peak.clone());
            move |req: PreparedRequest, _d: Dispatch, _cut: CancellationToken| {
                let (sent, now, peak) = (sent.clone(), now.clone(), peak.clone());
                async move {
                    sent.lock().unwrap().push((req.index, start.elapsed()));
                    let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(in_flight, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    outcome(req.index)
                }
            }
        };
        let plan = LevelPlan {
            pacing: LevelPacing::Closed { concurrency, max_rate: None },
            requests: Some(requests),
            duration: None,
            grace: Duration::ZERO,
            seed: 9,
            warm_up_first,
        };
        let (tx, mut rx) = mpsc::channel(1024);
        let received = tokio::spawn(async move {
            let mut n = 0;
            while rx.recv().await.is_some() {
                n += 1;
            }
            n
        });
        run_closed(plan, shard, workload(), issue, tx, &RunControl::default(), start).await;
        let mut sent = sent.lock().unwrap().clone();
        sent.sort_unstable_by_key(|s| s.0);
        (sent, peak.load(Ordering::SeqCst), received.await.unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn every_index_is_sent_once_with_at_most_concurrency_in_flight() {
        let (sent, peak, received) = run(3, 10, Duration::from_millis(10), false, LevelShard::whole()).await;
        assert_eq!(sent.iter().map(|s| s.0).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
        assert_eq!((peak, received), (3, 10));
        // Three workers, ten requests of 10 ms: four waves.
        assert_eq!(sent.iter().map(|s| s.1).max(), Some(Duration::from_millis(30)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_sends_its_warm_up_request_alone_first() {
        let (sent, peak, received) = run(4, 9, Duration::from_millis(10), true, LevelShard::whole()).await;
        assert_eq!(sent.iter().map(|s| s.0).collect::<Vec<_>>(), (0..9).collect::<Vec<_>>());
        assert_eq!((peak, received), (4, 9));
        assert_eq!(sent[0].1, Duration::ZERO);
        assert!(sent[1..].iter().all(|s| s.1 >= Duration::from_millis(10)), "{sent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn shards_split_indices_and_workers_and_wait_for_shard_0s_warm_up() {
        use crate::request::schedule::{Part, WarmUpSync};
        use tokio::sync::oneshot;
        // Shard 0's warm-up end is relayed to the others, as the coordinator does.
        let (lead, ended) = oneshot::channel();
        let (relays, follows): (Vec<_>, Vec<_>) = (1..4).map(|_| oneshot::channel::<()>()).unzip();
        tokio::spawn(async move {
            if ended.await.is_ok() {
                relays.into_iter().for_each(|r| {
                    let _ = r.send(());
                });
            }
        });
        let mut syncs = vec![WarmUpSync::Lead(lead)];
        syncs.extend(follows.into_iter().map(WarmUpSync::Follow));
        let hold = Duration::from_millis(10);
        let runs = syncs.into_iter().enumerate().map(|(index, warm_up)| {
            let shard = LevelShard { part: Part { index: index as u32, count: 4 }, warm_up };
            run(6, 23, hold, true, shard)
        });
        let results = futures::future::join_all(runs).await;
        let mut union = Vec::new();
        for (index, (sent, peak, received)) in results.iter().enumerate() {
            let part = Part { index: index as u32, count: 4 };
            assert_eq!(*peak as u64, part.share(6), "shard {index}'s share of concurrency 6");
            assert_eq!(*received, sent.len());
            assert!(sent.iter().all(|(i, _)| part.owns(*i)), "shard {index}: {sent:?}");
            if index > 0 {
                assert!(sent.iter().all(|(_, at)| *at >= hold), "shard {index} started before the warm-up ended");
            }
            union.extend(sent.iter().map(|(i, _)| *i));
        }
        union.sort_unstable();
        assert_eq!(union, (0..23).collect::<Vec<_>>(), "every index once");
        assert_eq!(results[0].0[0], (0, Duration::ZERO), "shard 0 sends the warm-up first");
    }
}
