//! Open loop: one dispatcher walks the arrival schedule with absolute deadlines
//! (`wait_until(start + offset)`, never accumulated relative sleeps), so a late wake-up delays
//! one arrival, not every later one. Each request is prepared before its deadline, keeps its
//! intended time, and runs in its own task. With `max_in_flight`, an arrival that finds every
//! slot taken either waits for one (`queue`; the wait is measured and arrivals stay in order) or
//! is dropped (`drop`; counted and listed, never silent). A shard walks the same schedule and
//! dispatches only the arrivals of its part, at their planned offsets, with its share of the cap.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::arrivals::Arrivals;
use super::pacer::Pacer;
use super::part::Part;
use super::{Dispatch, Issued, LevelPacing, LevelPlan, RunControl, prepare};
use crate::plan::scenario::Overload;
use crate::request::record::{Dropped, Outcome};
use crate::request::workload::{PreparedRequest, Workload};

/// Run the schedule. `issue` sends one request and returns its outcome; it is the worker's
/// `execute` in a run and a stub in tests.
#[allow(clippy::too_many_arguments)]
pub async fn run_open<F, Fut>(
    plan: LevelPlan,
    part: Part,
    workload: Arc<Workload>,
    issue: F,
    pacer: &impl Pacer,
    tx: mpsc::Sender<Outcome>,
    control: &RunControl,
    level_start: Instant,
) -> Issued
where
    F: Fn(PreparedRequest, Dispatch, CancellationToken) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let LevelPacing::Open { rate, arrival, ramp, max_in_flight, overload } = plan.pacing else {
        return Issued::default();
    };
    let trace_rows = workload.trace_rows(plan.requests, plan.duration);
    let n = match (trace_rows, plan.requests, plan.duration) {
        (Some(rows), ..) => rows,
        (None, Some(r), Some(d)) => r.min(Arrivals::count_within(rate, ramp, d)),
        (None, Some(r), None) => r,
        (None, None, Some(d)) => Arrivals::count_within(rate, ramp, d),
        (None, None, None) => 0,
    };
    // A trace's rows keep their own times; every other schedule is drawn.
    let mut process = Arrivals::new(arrival, rate, ramp, plan.seed, n);
    let offsets = (0..n).map_while(|i| match trace_rows {
        Some(_) => workload.trace_offset(i),
        None => process.next(),
    });
    let slots = max_in_flight.map(|m| Arc::new(Semaphore::new(part.share(u64::from(m)) as usize)));
    let tasks = TaskTracker::new();
    let stop = &control.stop_issuing;
    let mut last_offset = None;
    let mut blocked = Blocked::default();
    for (index, offset) in offsets.enumerate() {
        let index = index as u64;
        last_offset = Some(offset);
        if !part.owns(index) {
            continue;
        }
        // Built before the deadline: prompt building never makes an arrival late.
        let request = prepare(&workload, index).await;
        let intended = level_start + offset;
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = pacer.wait_until(intended) => {}
        }
        let permit = match (&slots, overload) {
            (None, _) => None,
            (Some(slots), Overload::Drop) => match Arc::clone(slots).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    let dropped = Dropped {
                        index,
                        planned_context_tokens: request.planned_context_tokens,
                        intended_offset: offset,
                    };
                    if tx.send(Outcome::Dropped(dropped)).await.is_err() {
                        break;
                    }
                    continue;
                }
            },
            (Some(slots), Overload::Queue) => {
                let began = Instant::now();
                let permit = tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    permit = Arc::clone(slots).acquire_owned() => permit.ok(),
                };
                blocked.push(began, Instant::now());
                permit
            }
        };
        let dispatch = Dispatch { level_start, intended: Some(intended), queue_wait: blocked.since(intended) };
        let (issue, tx, cut) = (issue.clone(), tx.clone(), control.cut_in_flight.child_token());
        tasks.spawn(async move {
            let outcome = issue(request, dispatch, cut).await;
            drop(permit);
            let _ = tx.send(outcome).await;
        });
    }
    drop(tx);
    tasks.close();
    tasks.wait().await;
    let planned_window = match trace_rows {
        // A trace's window ends one mean gap after its last row, like a drawn schedule's.
        Some(_) => last_offset.map(|last| last + Duration::from_secs_f64(1.0 / rate)),
        None => (n > 0).then(|| process.horizon()),
    };
    // Every shard's window is the whole schedule's.
    Issued { planned_arrivals: Some(part.count_below(n)), planned_window }
}

/// The time the dispatcher spent blocked on a full cap, span by span. An arrival's queue wait is
/// the blocked time between its deadline and its dispatch: the wait for its own slot and for the
/// slots of the arrivals queued before it, which held the dispatcher. The rest of its lateness (a
/// late wake-up, a prompt that took longer to build than the gap before it) is the client's own,
/// and stays dispatch lag.
#[derive(Default)]
struct Blocked {
    /// (began, ended, blocked time before `began`), oldest first.
    spans: VecDeque<(Instant, Instant, Duration)>,
    total: Duration,
}

impl Blocked {
    fn push(&mut self, began: Instant, ended: Instant) {
        if ended > began {
            self.spans.push_back((began, ended, self.total));
            self.total += ended - began;
        }
    }

    /// Blocked time after `t`. Deadlines come in order, so spans that ended by `t` are done with.
    fn since(&mut self, t: Instant) -> Duration {
        while self.spans.front().is_some_and(|&(_, ended, _)| ended <= t) {
            self.spans.pop_front();
        }
        match self.spans.front() {
            None => Duration::ZERO,
            Some(&(began, _, before)) => self.total - before - t.saturating_duration_since(began),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::plan::scenario::Arrival;
    use crate::request::schedule::test_support::{outcome, workload};

    type Log = Arc<Mutex<Vec<(u64, Duration, Option<Duration>, Duration)>>>;

    /// Run a schedule with a stub that records (index, dispatch time, intended offset, queue
    /// wait) and holds each request for `hold`.
    async fn dispatch(pacing: LevelPacing, part: Part, n: u64, hold: Duration) -> (Log, Vec<Outcome>) {
        dispatch_with(pacing, part, n, hold, &super::super::pacer::TokioPacer).await
    }

    async fn dispatch_with(
        pacing: LevelPacing,
        part: Part,
        n: u64,
        hold: Duration,
        pacer: &impl Pacer,
    ) -> (Log, Vec<Outcome>) {
        let start = Instant::now();
        let log: Log = Arc::default();
        let issue = {
            let log = log.clone();
            move |req: PreparedRequest, d: Dispatch, _cut: CancellationToken| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push((
                        req.index,
                        Instant::now() - d.level_start,
                        d.intended.map(|i| i - d.level_start),
                        d.queue_wait,
                    ));
                    tokio::time::sleep(hold).await;
                    outcome(req.index)
                }
            }
        };
        let plan = LevelPlan {
            pacing,
            requests: Some(n),
            duration: None,
            grace: Duration::ZERO,
            seed: 9,
            warm_up_first: false,
        };
        let (tx, mut rx) = mpsc::channel(1024);
        let collector = tokio::spawn(async move {
            let mut out = Vec::new();
            while let Some(o) = rx.recv().await {
                out.push(o);
            }
            out
        });
        run_open(plan, part, workload(), issue, pacer, tx, &RunControl::default(), start).await;
        (log, collector.await.unwrap())
    }

    fn open(arrival: Arrival, max_in_flight: Option<u32>, overload: Overload) -> LevelPacing {
        LevelPacing::Open { rate: 100.0, arrival, ramp: None, max_in_flight, overload }
    }

    #[tokio::test(start_paused = true)]
    async fn constant_and_poisson_dispatch_exactly_at_their_offsets() {
        for arrival in [Arrival::Constant, Arrival::Poisson] {
            let (log, outcomes) =
                dispatch(open(arrival, None, Overload::Queue), Part::WHOLE, 200, Duration::from_millis(3)).await;
            let planned: Vec<Duration> = Arrivals::new(arrival, 100.0, None, 9, 200).collect();
            let log = log.lock().unwrap();
            assert_eq!(log.len(), 200);
            assert_eq!(outcomes.len(), 200);
            for (index, sent, intended, _) in log.iter() {
                let want = planned[*index as usize];
                assert_eq!(*intended, Some(want), "{arrival:?} #{index}");
                // Paused time removes every source of lateness but one: tokio's timer wheel
                // fires on whole milliseconds, so a deadline is met at the next tick at the
                // latest. Constant arrivals at 100 req/s fall on ticks and are exact.
                let tick =
                    if arrival == Arrival::Constant { Duration::from_nanos(1) } else { Duration::from_millis(1) };
                assert!(*sent >= want && *sent - want < tick, "{arrival:?} #{index}: sent {sent:?}, planned {want:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_delays_dispatch_and_measures_the_wait() {
        // 100 req/s but each request holds its single slot for 25 ms: arrivals queue.
        let (log, outcomes) =
            dispatch(open(Arrival::Constant, Some(1), Overload::Queue), Part::WHOLE, 20, Duration::from_millis(25))
                .await;
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 20);
        let last = log.iter().find(|(i, ..)| *i == 19).unwrap();
        assert!(last.1 > last.2.unwrap() + Duration::from_millis(200), "late by the queue: {last:?}");
        // All of that lateness was the queue: the wait is the dispatch minus the deadline.
        assert_eq!(last.3, last.1 - last.2.unwrap(), "{last:?}");
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Completed(_))), "nothing is dropped in queue mode");
    }

    #[test]
    fn queue_wait_is_the_blocked_time_after_the_deadline() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut blocked = Blocked::default();
        blocked.push(at(10), at(20));
        blocked.push(at(25), at(25));
        blocked.push(at(30), at(45));
        assert_eq!(blocked.since(at(5)), Duration::from_millis(25), "both spans after the deadline");
        assert_eq!(blocked.since(at(15)), Duration::from_millis(20), "half of the first span");
        assert_eq!(blocked.since(at(22)), Duration::from_millis(15), "the second span whole");
        assert_eq!(blocked.since(at(40)), Duration::from_millis(5));
        assert_eq!(blocked.since(at(45)), Duration::ZERO);
        assert!(blocked.spans.is_empty(), "spans that ended are dropped");
    }

    /// Wakes every arrival 30 ms after its deadline, as a busy runtime might.
    struct LatePacer;

    impl Pacer for LatePacer {
        fn wait_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send {
            tokio::time::sleep_until(deadline + Duration::from_millis(30))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_dispatcher_is_dispatch_lag_not_queue_wait() {
        // A cap that is never reached: nothing waits for a slot, however late the wake-ups.
        let (log, _) = dispatch_with(
            open(Arrival::Constant, Some(64), Overload::Queue),
            Part::WHOLE,
            20,
            Duration::ZERO,
            &LatePacer,
        )
        .await;
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 20);
        for (index, sent, intended, queue_wait) in log.iter() {
            assert!(*sent >= intended.unwrap() + Duration::from_millis(30), "#{index} was late");
            assert_eq!(*queue_wait, Duration::ZERO, "#{index}: the dispatcher's lateness counted as queue wait");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_slot_drops_arrivals_and_says_which() {
        let (log, outcomes) =
            dispatch(open(Arrival::Constant, Some(1), Overload::Drop), Part::WHOLE, 20, Duration::from_millis(25))
                .await;
        let sent = log.lock().unwrap().len();
        let dropped: Vec<u64> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Dropped(d) => Some(d.index),
                _ => None,
            })
            .collect();
        assert!(!dropped.is_empty());
        assert_eq!(sent + dropped.len(), 20, "every arrival is sent or dropped");
        // Slots free every 25 ms, arrivals every 10 ms: about two in three are dropped.
        assert!((11..=15).contains(&dropped.len()), "{dropped:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn shards_dispatch_their_arrivals_at_the_single_schedule_offsets() {
        let pacing = open(Arrival::Poisson, Some(7), Overload::Queue);
        let (whole, _) = dispatch(pacing, Part::WHOLE, 90, Duration::from_millis(2)).await;
        let mut whole: Vec<(u64, Option<Duration>)> =
            whole.lock().unwrap().iter().map(|(i, _, o, _)| (*i, *o)).collect();
        whole.sort_unstable();
        let mut union = Vec::new();
        for index in 0..4 {
            let part = Part { index, count: 4 };
            let (log, outcomes) = dispatch(pacing, part, 90, Duration::from_millis(2)).await;
            let log = log.lock().unwrap();
            assert_eq!(log.len() as u64, part.count_below(90));
            assert_eq!(outcomes.len(), log.len());
            assert!(log.iter().all(|(i, ..)| part.owns(*i)), "shard {index} sent another shard's arrival");
            union.extend(log.iter().map(|(i, _, o, _)| (*i, *o)));
        }
        union.sort_unstable();
        assert_eq!(union, whole, "the shards' arrivals are the single schedule's, at its offsets");
    }
}
