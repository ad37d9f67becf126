//! The conversation runner under tokio's paused clock, with a stub server: slots held through
//! think time, the in-flight cap, turns in order and never start-to-start, open-loop arrivals
//! with intended times, and a failed turn ending its conversation.

use std::sync::Mutex;
use std::sync::atomic::AtomicI64;

use super::*;
use crate::contract::ErrorKind;
use crate::plan::scenario::{Arrival, Overload, Overrides, Scenario};
use crate::request::record::{Failed, LevelPacing};
use crate::request::schedule::pacer::TokioPacer;
use crate::request::schedule::test_support::outcome;
use crate::request::workload::Sizer;

fn workload(extra_load: &str, sessions: &str) -> Arc<Workload> {
    let text = format!(
        "[target]\nmodel = \"m\"\n[load]\n{extra_load}\n[workload]\nmax_context_tokens = 8192\nmax_tokens = 16\ntokenizer = \"estimate\"\n[workload.sessions]\n{sessions}\n"
    );
    let s = Scenario::from_toml(std::path::Path::new("t.toml"), &text, &Overrides::default()).unwrap();
    Arc::new(Workload::new(&s, 1, Sizer::Estimate { overhead: 8.0 }))
}

/// (session, turn, sent at, intended, held until)
type Sent = (String, u32, Duration, Option<Duration>, Duration);

struct Run {
    sent: Vec<Sent>,
    peak: i64,
    outcomes: Vec<Outcome>,
    issued: Issued,
}

async fn run(w: Arc<Workload>, pacing: LevelPacing, hold: Duration, fail_turn: Option<u32>) -> Run {
    let start = Instant::now();
    let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let now = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let issue = {
        let (log, now, peak) = (log.clone(), now.clone(), peak.clone());
        move |req: PreparedRequest, d: Dispatch, _cut: CancellationToken| {
            let (log, now, peak) = (log.clone(), now.clone(), peak.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                let sent = Instant::now() - d.level_start;
                tokio::time::sleep(hold).await;
                now.fetch_sub(1, Ordering::SeqCst);
                let facts = req.replay.clone().unwrap();
                let turn = facts.turn.unwrap();
                log.lock().unwrap().push((
                    facts.session.clone().unwrap(),
                    turn,
                    sent,
                    d.intended.map(|i| i - d.level_start),
                    Instant::now() - d.level_start,
                ));
                if fail_turn == Some(turn) {
                    return Outcome::Failed(Failed {
                        index: req.index,
                        planned_context_tokens: 1,
                        start_offset: sent,
                        intended_offset: None,
                        queue_wait: None,
                        kind: ErrorKind::Http(500),
                        http_status: Some(500),
                        server_error_type: None,
                        message: String::new(),
                        elapsed: hold,
                        first_output: None,
                        first_content: None,
                        content_chunks: 0,
                        reasoning_chunks: 0,
                        stale_connection_retries: 0,
                        retries: 0,
                        retried_errors: Vec::new(),
                        retry_after: None,
                        replay: req.replay.clone(),
                    });
                }
                let mut o = outcome(req.index);
                if let Outcome::Completed(c) = &mut o {
                    c.replay = req.replay.clone();
                }
                o
            }
        }
    };
    let plan =
        LevelPlan { pacing, requests: None, duration: None, grace: Duration::ZERO, seed: 3, warm_up_first: false };
    let (tx, mut rx) = mpsc::channel(1024);
    let collector = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(o) = rx.recv().await {
            out.push(o);
        }
        out
    });
    let issued = run_sessions(plan, w, issue, &TokioPacer, tx, &RunControl::default(), start).await;
    let outcomes = collector.await.unwrap();
    let sent = log.lock().unwrap().clone();
    Run { sent, peak: peak.load(Ordering::SeqCst), outcomes, issued }
}

const CONVERSATIONS: &str =
    "conversations = 6\nturns = 3\nfirst_tokens = 200\nuser_tokens = 50\nthink_time = \"100ms\"";

#[tokio::test(start_paused = true)]
async fn slots_hold_conversations_through_think_time() {
    let w = workload("sessions = 3", CONVERSATIONS);
    let r = run(w, LevelPacing::Closed { concurrency: 3, max_rate: None }, Duration::from_millis(50), None).await;
    assert_eq!(r.sent.len(), 18, "6 conversations × 3 turns");
    assert_eq!(r.outcomes.len(), 18);
    assert_eq!(r.issued.planned_arrivals, Some(18));
    assert_eq!(r.peak, 3, "three conversations, so at most three requests");
    // Turns of a conversation in order, each sent exactly its think time after the previous
    // answer ended (never start-to-start).
    let mut by_session: std::collections::BTreeMap<&str, Vec<&Sent>> = Default::default();
    for s in &r.sent {
        by_session.entry(&s.0).or_default().push(s);
    }
    assert_eq!(by_session.len(), 6);
    for turns in by_session.values() {
        assert_eq!(turns.iter().map(|t| t.1).collect::<Vec<_>>(), vec![1, 2, 3]);
        for pair in turns.windows(2) {
            assert_eq!(pair[1].2, pair[0].4 + Duration::from_millis(100), "{pair:?}");
        }
        assert!(turns.iter().all(|t| t.3.is_none()), "closed turns carry no intended time");
    }
    // A slot runs its conversation to the end before the next: 2 conversations per slot of
    // 3 × 50 ms + 2 × 100 ms each.
    let last = r.sent.iter().map(|s| s.4).max().unwrap();
    assert_eq!(last, Duration::from_millis(700));
}

#[tokio::test(start_paused = true)]
async fn in_flight_caps_requests_across_conversations() {
    let w = workload("sessions = 4\nin_flight = 1", CONVERSATIONS);
    let r = run(w, LevelPacing::Closed { concurrency: 4, max_rate: None }, Duration::from_millis(50), None).await;
    assert_eq!((r.sent.len(), r.peak), (18, 1));
}

#[tokio::test(start_paused = true)]
async fn open_arrivals_start_conversations_on_schedule() {
    let w = workload("mode = \"open\"\nrate = 10\narrival = \"constant\"", CONVERSATIONS);
    let pacing = LevelPacing::Open {
        rate: 10.0,
        arrival: Arrival::Constant,
        ramp: None,
        max_in_flight: None,
        overload: Overload::Queue,
    };
    let r = run(w, pacing, Duration::from_millis(50), None).await;
    assert_eq!(r.sent.len(), 18);
    for s in r.sent.iter().filter(|s| s.1 == 1) {
        let intended = s.3.unwrap();
        assert_eq!(s.2, intended, "first turns at their arrival");
        assert_eq!(intended.as_millis() % 100, 0);
    }
    // Later turns: intended = previous end + think time.
    for s in r.sent.iter().filter(|s| s.1 > 1) {
        let previous = r.sent.iter().find(|p| p.0 == s.0 && p.1 == s.1 - 1).unwrap();
        assert_eq!(s.3, Some(previous.4 + Duration::from_millis(100)));
    }
    // Conversations overlap (each lasts 350 ms, one starts every 100 ms); requests less so.
    let span = |sid: &str| {
        let turns: Vec<&Sent> = r.sent.iter().filter(|s| s.0 == sid).collect();
        (turns.iter().map(|t| t.2).min().unwrap(), turns.iter().map(|t| t.4).max().unwrap())
    };
    let at = Duration::from_millis(320);
    let open = r.sent.iter().filter(|s| s.1 == 1).filter(|s| span(&s.0).0 <= at && span(&s.0).1 > at).count();
    assert_eq!(open, 4);
    assert!(r.peak < 4, "requests in flight: {}", r.peak);
}

#[tokio::test(start_paused = true)]
async fn a_failed_turn_ends_its_conversation() {
    let w = workload("sessions = 2", CONVERSATIONS);
    let r = run(w, LevelPacing::Closed { concurrency: 2, max_rate: None }, Duration::from_millis(10), Some(2)).await;
    // Turn 2 fails in every conversation: turns 1 and 2 sent, turn 3 never.
    assert_eq!(r.sent.len(), 12);
    assert!(r.sent.iter().all(|s| s.1 <= 2));
    assert_eq!(r.issued.planned_arrivals, Some(18), "the unsent turns are counted as planned");
    assert_eq!(r.outcomes.iter().filter(|o| matches!(o, Outcome::Failed(_))).count(), 6);
}
