//! Summaries over hand-made records: turn grouping, cache effectiveness, durations, goodput,
//! backends and contamination.

use std::time::Duration;

use super::*;
use crate::contract::{ErrorKind, Metric, Objective, Stat};
use crate::plan::scenario::{Bound, SloCriterion};
use crate::request::record::timing::Exclusions;
use crate::request::record::{CanaryCheck, CanaryFailure, Completed, Failed, ReplayFacts, TokenSource};

struct R {
    session: &'static str,
    turn: u32,
    start: u64,
    ttft: u64,
    e2e: u64,
    cached: u64,
    expected: u32,
    backend: &'static str,
    cross: u32,
}

fn record(r: R) -> RequestTiming {
    let ms = Duration::from_millis;
    let c = Completed {
        index: 0,
        planned_context_tokens: 1000,
        prompt_target_tokens: 1000,
        start_offset: ms(r.start),
        intended_offset: None,
        queue_wait: None,
        first_output: ms(r.ttft),
        first_content: Some(ms(r.ttft)),
        end: ms(r.e2e),
        content_chunks: 10,
        reasoning_chunks: 0,
        prompt_tokens: Some(1000),
        cached_tokens: Some(r.cached),
        output_tokens: 11,
        output_token_source: TokenSource::Usage,
        usage_completion_tokens: None,
        reasoning_tokens: None,
        finish_reason: Some("length".into()),
        visible_content_truncated: false,
        canary: Some(CanaryCheck {
            marker: "m".into(),
            marker_at_start: r.cross == 0,
            observed_marker_count: 1,
            foreign_marker_count: r.cross,
            capture_complete: true,
            passed: r.cross == 0,
            failure_reason: (r.cross > 0).then_some(CanaryFailure::ForeignMarker),
            cross_session_marker_count: Some(r.cross),
            malformed_marker_count: 0,
            offending_marker: None,
        }),
        controlled_output: None,
        retries: 0,
        retried_errors: Vec::new(),
        stale_connection_retries: 0,
        chunks: Box::default(),
        corrections: None,
        schema: None,
        tool_calls: None,
        replay: Some(Box::new(ReplayFacts {
            session: Some(r.session.into()),
            turn: Some(r.turn),
            expected_cached_tokens: Some(r.expected),
            backend: (!r.backend.is_empty()).then(|| r.backend.to_string()),
            ..ReplayFacts::default()
        })),
    };
    RequestTiming::from_completed(&c, &Exclusions::default())
}

fn r(session: &'static str, turn: u32, start: u64, ttft: u64, e2e: u64, cached: u64, expected: u32) -> R {
    R { session, turn, start, ttft, e2e, cached, expected, backend: "", cross: 0 }
}

fn failure(session: &str, turn: u32, start: u64) -> FailureRecord {
    let f = Failed {
        index: 9,
        planned_context_tokens: 10,
        start_offset: Duration::from_millis(start),
        intended_offset: None,
        queue_wait: None,
        kind: ErrorKind::Http(500),
        http_status: Some(500),
        server_error_type: None,
        message: "x".into(),
        elapsed: Duration::from_millis(5),
        first_output: None,
        first_content: None,
        content_chunks: 0,
        reasoning_chunks: 0,
        stale_connection_retries: 0,
        retries: 0,
        retried_errors: Vec::new(),
        retry_after: None,
        replay: Some(Box::new(ReplayFacts {
            session: Some(session.into()),
            turn: Some(turn),
            backend: Some("b1".into()),
            ..ReplayFacts::default()
        })),
    };
    FailureRecord::from_failed(&f, &Exclusions::default())
}

#[test]
fn turns_cache_and_sessions() {
    let records = vec![
        record(r("a", 1, 0, 300, 400, 0, 0)),
        record(r("a", 2, 500, 20, 120, 990, 1000)),
        record(r("a", 3, 700, 30, 100, 1900, 2000)),
        record(r("b", 1, 10, 280, 390, 0, 0)),
        record(r("b", 2, 450, 40, 140, 1000, 1000)),
    ];
    let s = summarise(&records, &[], &Slo::default()).unwrap();
    assert_eq!(s.by_turn.iter().map(|t| (t.turn, t.completed)).collect::<Vec<_>>(), vec![(1, 2), (2, 2), (3, 1)]);
    let t1 = s.by_turn[0].ttft_ms.clone().unwrap();
    let t2 = s.by_turn[1].ttft_ms.clone().unwrap();
    assert_eq!((t1.stat(Stat::P50), t1.max, t1.mean), (280.0, 300.0, 290.0));
    assert!(t2.max < t1.stat(Stat::P50), "later turns are warm");
    assert_eq!(s.by_turn[1].cache.ratio, Some(1990.0 / 2000.0));
    assert_eq!(s.by_turn[0].cache.ratio, None, "nothing expected of first turns");
    assert_eq!((s.cache.expected_cached_tokens, s.cache.cached_tokens), (4000, 3890));
    assert_eq!(s.totals.sessions, 2);
    // Session a: 0 → 700 + 100; session b: 10 → 450 + 140.
    let d = s.totals.duration_ms.clone().unwrap();
    assert_eq!((d.stat(Stat::P50), d.max), (580.0, 800.0));
    assert_eq!((s.totals.turns.as_ref().unwrap().max, s.totals.without_failures), (3.0, 2));
    assert!(s.goodput.is_none() && s.backends.is_empty() && s.sessions_on_one_backend.is_none());
    assert!(summarise(&[], &[], &Slo::default()).is_none());
}

#[test]
fn goodput_needs_every_turn_to_pass() {
    let slo = Slo {
        criteria: vec![SloCriterion {
            objective: Objective::Distribution(Metric::Ttft, Stat::P99),
            threshold: 100.0,
            bound: Bound::AtMost,
        }],
    };
    let records = vec![
        record(r("a", 1, 0, 50, 60, 0, 0)),
        record(r("a", 2, 100, 60, 70, 0, 0)),
        record(r("b", 1, 0, 50, 60, 0, 0)),
        record(r("b", 2, 100, 160, 170, 0, 0)),
        record(r("c", 1, 0, 50, 60, 0, 0)),
    ];
    let failures = vec![failure("c", 2, 100)];
    let g = summarise(&records, &failures, &slo).unwrap().goodput.unwrap();
    assert_eq!((g.sessions, g.good_sessions), (3, 1));
}

#[test]
fn backends_and_contamination() {
    let mut a = r("a", 1, 0, 10, 20, 0, 0);
    a.backend = "b1";
    let mut a2 = r("a", 2, 30, 10, 20, 0, 0);
    a2.backend = "b1";
    let mut b = r("b", 1, 0, 10, 20, 0, 0);
    b.backend = "b2";
    b.cross = 1;
    let records = vec![record(a), record(a2), record(b)];
    let failures = vec![failure("b", 2, 40)];
    let s = summarise(&records, &failures, &Slo::default()).unwrap();
    assert_eq!(
        s.backends.iter().map(|b| (b.backend.as_str(), b.completed, b.failed)).collect::<Vec<_>>(),
        vec![("b1", 2, 1), ("b2", 1, 0)]
    );
    assert_eq!(s.sessions_on_one_backend, Some((1, 2)), "session b moved from b2 to b1");
    assert_eq!(s.cross_session_contaminated, 1);
    assert_eq!(s.by_turn[1].failed, 1);
    assert_eq!(s.totals.without_failures, 1);
}
