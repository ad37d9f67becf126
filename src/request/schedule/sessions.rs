//! Conversations: each turn waits for the previous turn's answer and the user's think time
//! (never start-to-start), and a conversation holds its place through its think time.
//!
//! Closed (`load.sessions = N`): N slots, each running one conversation after another, so N
//! conversations are open at any time and at most N requests are in flight; `load.in_flight = M`
//! caps the requests in flight across them (a turn waits for a free request slot). Conversation
//! numbers come from one counter, so conversation `c` is the same whichever slot runs it. Open
//! (`mode = "open"`): one dispatcher starts conversation `c` at arrival `c` of the schedule (with
//! absolute deadlines, its first request built before its deadline); every turn then carries an
//! intended time (the arrival, or the previous answer's end plus the think time), so the schedule
//! lag and the validity check see the client's lateness; `max_in_flight` caps requests.
//!
//! Agent sessions: an answer that calls a tool is followed by a tool turn, sent the tool's
//! latency after the answer ended (`workload::agent`); the next planned user turn follows the
//! last tool turn's answer.
//!
//! A failed turn ends its conversation (its history would be wrong); the turns not sent are
//! counted as undispatched. Every turn's request is built before the think time is waited.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::arrivals::Arrivals;
use super::pacer::Pacer;
use super::{Dispatch, Issued, LevelPacing, LevelPlan, RunControl};
use crate::request::record::Outcome;
use crate::request::workload::{Conversation, PreparedRequest, Workload};

/// What every conversation of a level shares.
struct Shared<F> {
    workload: Arc<Workload>,
    issue: F,
    tx: mpsc::Sender<Outcome>,
    next_conversation: AtomicU64,
    next_request: AtomicU64,
    conversations: Option<u64>,
    requests: Option<u64>,
    /// Requests in flight across conversations (`in_flight` / `max_in_flight`).
    slots: Option<Arc<Semaphore>>,
    stop: CancellationToken,
    cut: CancellationToken,
    level_start: Instant,
    /// Turns carry intended times (open loop).
    scheduled: bool,
}

/// Run one level of conversations.
pub async fn run_sessions<F, Fut>(
    plan: LevelPlan,
    workload: Arc<Workload>,
    issue: F,
    pacer: &impl Pacer,
    tx: mpsc::Sender<Outcome>,
    control: &RunControl,
    level_start: Instant,
) -> Issued
where
    F: Fn(PreparedRequest, Dispatch, CancellationToken) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let Some(spec) = workload.session_spec() else { return Issued::default() };
    let (conversations, in_flight) = (spec.conversations, spec.in_flight);
    let (slots, scheduled, arrivals) = match plan.pacing {
        LevelPacing::Closed { .. } => (in_flight, false, None),
        LevelPacing::Open { rate, arrival, ramp, max_in_flight, .. } => {
            let n = conversations
                .or(plan.duration.map(|d| Arrivals::count_within(rate, ramp, d)))
                .or(plan.requests)
                .unwrap_or(0);
            (max_in_flight, true, Some((Arrivals::new(arrival, rate, ramp, plan.seed, n), n)))
        }
    };
    let planned = arrivals.as_ref().map(|(_, n)| *n).or(conversations).map(|k| workload.planned_turns(k));
    let shared = Arc::new(Shared {
        workload: workload.clone(),
        issue,
        tx,
        next_conversation: AtomicU64::new(0),
        next_request: AtomicU64::new(0),
        conversations,
        requests: plan.requests,
        slots: slots.map(|m| Arc::new(Semaphore::new(m as usize))),
        stop: control.stop_issuing.clone(),
        cut: control.cut_in_flight.clone(),
        level_start,
        scheduled,
    });
    let mut planned_window = plan.duration;
    match (plan.pacing, arrivals) {
        (LevelPacing::Open { .. }, Some((mut arrivals, _))) => {
            let tasks = TaskTracker::new();
            for (c, offset) in arrivals.by_ref().enumerate() {
                let Some(mut conv) = workload.conversation(c as u64) else { break };
                // Built before the deadline: prompt building never makes an arrival late.
                let Some(first) = next_turn(&shared, &mut conv, 0) else { break };
                let intended = level_start + offset;
                tokio::select! {
                    biased;
                    () = shared.stop.cancelled() => break,
                    () = pacer.wait_until(intended) => {}
                }
                let shared = shared.clone();
                tasks.spawn(async move { converse(&shared, conv, first, Some(intended)).await });
            }
            planned_window = Some(arrivals.horizon());
            tasks.close();
            tasks.wait().await;
        }
        (LevelPacing::Closed { concurrency, .. }, _) => {
            let mut slots = JoinSet::new();
            for _ in 0..concurrency {
                let shared = shared.clone();
                slots.spawn(async move {
                    loop {
                        let c = shared.next_conversation.fetch_add(1, Ordering::Relaxed);
                        if shared.stop.is_cancelled() || shared.conversations.is_some_and(|k| c >= k) {
                            break;
                        }
                        let Some(mut conv) = shared.workload.conversation(c) else { break };
                        let Some(first) = next_turn(&shared, &mut conv, 0) else { break };
                        converse(&shared, conv, first, None).await;
                    }
                });
            }
            while let Some(joined) = slots.join_next().await {
                if let Err(e) = joined {
                    tracing::error!("conversation slot failed: {e}");
                }
            }
        }
        _ => {}
    }
    Issued { planned_arrivals: planned.map(|p| plan.requests.map_or(p, |r| r.min(p))), planned_window }
}

/// The request of turn `k`, numbered in the level; `None` once the level's request count is
/// reached.
fn next_turn<F>(shared: &Shared<F>, conv: &mut Conversation, k: usize) -> Option<PreparedRequest> {
    let index = shared.next_request.fetch_add(1, Ordering::Relaxed);
    if shared.requests.is_some_and(|n| index >= n) {
        return None;
    }
    shared.workload.turn_request(conv, k, index)
}

/// One conversation, from its first (already built) turn to its last.
async fn converse<F, Fut>(shared: &Shared<F>, mut conv: Conversation, first: PreparedRequest, arrival: Option<Instant>)
where
    F: Fn(PreparedRequest, Dispatch, CancellationToken) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let mut request = first;
    let mut ready = arrival;
    let mut k = 0;
    loop {
        // A late wake-up (of the task, or from the think time) is dispatch lag; only the wait
        // for a slot, from here, is queue wait.
        let waiting_from = Instant::now();
        let permit = match &shared.slots {
            None => None,
            Some(slots) => tokio::select! {
                biased;
                () = shared.stop.cancelled() => return,
                permit = Arc::clone(slots).acquire_owned() => permit.ok(),
            },
        };
        let dispatch = Dispatch {
            level_start: shared.level_start,
            intended: ready.filter(|_| shared.scheduled),
            queue_wait: match (shared.scheduled, &shared.slots, ready) {
                (true, Some(_), Some(at)) => Instant::now().saturating_duration_since(at.max(waiting_from)),
                _ => Duration::ZERO,
            },
        };
        let mut outcome = (shared.issue)(request.clone(), dispatch, shared.cut.child_token()).await;
        let ended = Instant::now();
        drop(permit);
        let go_on = shared.workload.finish_turn(&mut conv, &request, &mut outcome);
        if shared.tx.send(outcome).await.is_err() || !go_on {
            return;
        }
        // Agent sessions: a tool turn of the same user turn, after the tool's latency (slept
        // here, between requests: in no request's timings).
        if let Some(latency) = conv.agent.take_latency() {
            let Some(next) = next_turn(shared, &mut conv, k) else { return };
            let wake = ended + latency;
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => return,
                () = tokio::time::sleep_until(wake) => {}
            }
            request = next;
            ready = Some(wake);
            continue;
        }
        k += 1;
        let Some(turn) = conv.plan.turns.get(k).copied() else { return };
        // The next turn is built now, then waits for the user's think time from the answer's end.
        let Some(next) = next_turn(shared, &mut conv, k) else { return };
        let wake = ended + turn.think;
        tokio::select! {
            biased;
            () = shared.stop.cancelled() => return,
            () = tokio::time::sleep_until(wake) => {}
        }
        request = next;
        ready = Some(wake);
    }
}

#[cfg(test)]
mod tests;
