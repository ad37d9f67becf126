use serde_json::json;

use super::*;
use crate::results::live::snapshot::Family;

/// A completed request's record, as the records file holds one.
fn record(index: u64, phase: &str, exclusion: Option<&str>) -> RequestTiming {
    let r = json!({
        "request_index": index, "planned_context_tokens": 512, "prompt_target_tokens": 500,
        "prompt_tokens": 510, "cached_tokens": null, "output_tokens": 40, "output_token_source": "usage",
        "content_chunks": 40, "reasoning_chunks": 0, "start_offset_ms": 1.0, "intended_offset_ms": 0.5,
        "schedule_lag_ms": 0.5, "queue_wait_ms": null, "time_to_first_output_ms": 20.0, "ttft_ms": 20.0,
        "e2e_ms": 400.0, "generation_ms": 380.0, "visible_generation_ms": 380.0, "tpot_ms": 9.74,
        "mean_time_per_output_token_ms": 9.74, "mean_inter_token_latency_ms": 9.74, "decode_tok_s": 102.6,
        "effective_prefill_tok_s": 25500.0, "finish_reason": "length", "visible_content_truncated": false,
        "request_canary": null, "ttft_from_intended_ms": 20.5, "e2e_from_intended_ms": 400.5,
        "phase": phase, "prompt_sizing_error_pct": 2.0, "controlled_output": null,
        "performance_eligible": exclusion.is_none(), "exclusion_reason": exclusion,
        "stale_connection_retries": 0, "retries": 0, "retried_errors": [],
        "chunk_gaps_us": [[9000, 30], [12000, 9]],
    });
    serde_json::from_value(r).expect("a record")
}

fn failure(kind: &str) -> FailureRecord {
    let f = json!({
        "request_index": 9, "error_kind": kind, "http_status": 503, "server_error_type": null,
        "message": "busy", "planned_context_tokens": 512, "start_offset_ms": 3.0, "intended_offset_ms": 1.0,
        "schedule_lag_ms": 2.0, "queue_wait_ms": null, "phase": "measure", "elapsed_ms": 5.0,
        "time_to_first_output_ms": null, "ttft_ms": null, "content_chunks": 0, "reasoning_chunks": 0,
        "stale_connection_retries": 0, "retries": 0, "retried_errors": [],
    });
    serde_json::from_value(f).expect("a failure record")
}

fn family<'a>(s: &'a Snapshot, name: &str) -> &'a Family {
    s.families.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("{name} in {s:?}"))
}

fn number(f: &Family, labels: &[(&str, &str)]) -> f64 {
    let series =
        f.series.iter().find(|s| labels.iter().all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v)));
    match series.map(|s| &s.value) {
        Some(Value::Number(v)) => *v,
        other => panic!("{labels:?} of {}: {other:?}", f.name),
    }
}

fn histogram(f: &Family, labels: &[(&str, &str)]) -> Buckets {
    let series =
        f.series.iter().find(|s| labels.iter().all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v)));
    match series.map(|s| &s.value) {
        Some(Value::Histogram(b)) => b.clone(),
        other => panic!("{labels:?} of {}: {other:?}", f.name),
    }
}

#[test]
fn every_name_is_a_family_of_the_reading_in_order() {
    let r = Registry::new();
    r.start_level("c1");
    let names: Vec<String> = r.snapshot().families.iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, names::all());
}

#[test]
fn outcomes_phases_errors_tokens_and_histograms_are_counted() {
    let r = Registry::new();
    r.set_constant_labels(vec![("shard", "0".into())]);
    let in_flight = Arc::new(AtomicU64::new(3));
    r.watch_in_flight(Arc::clone(&in_flight));
    let level = r.start_level("r5");
    level.completed(&record(0, "warmup", Some("warmup")));
    level.completed(&record(1, "measure", None));
    level.completed(&record(2, "measure", Some("canary_failed")));
    level.failed(&failure("http_503"));
    level.failed(&failure("http_503"));
    level.dropped(Phase::Measure);
    let s = r.snapshot();
    assert_eq!(s.constant_labels, vec![("shard", "0".to_string())]);
    let requests = family(&s, names::REQUESTS);
    assert_eq!(number(requests, &[("phase", "warmup"), ("outcome", "completed")]), 1.0);
    assert_eq!(number(requests, &[("phase", "measured"), ("outcome", "completed")]), 2.0);
    assert_eq!(number(requests, &[("phase", "measured"), ("outcome", "failed")]), 2.0);
    assert_eq!(number(requests, &[("phase", "measured"), ("outcome", "dropped")]), 1.0);
    assert_eq!(number(family(&s, names::ERRORS), &[("kind", "http_503")]), 2.0);
    assert_eq!(number(family(&s, names::IN_FLIGHT), &[("level", "r5")]), 3.0);
    assert_eq!(number(family(&s, &names::token_counter(Metric::PromptTokens)), &[]), 3.0 * 510.0);
    assert_eq!(number(family(&s, &names::token_counter(Metric::CompletionTokens)), &[]), 3.0 * 40.0);

    // The canary failure stays out of the times; the warm-up request is in them, labelled.
    let ttft = family(&s, &names::histogram(Metric::Ttft));
    let measured = histogram(ttft, &[("phase", "measured")]);
    assert_eq!(measured.count, 1);
    assert!((measured.sum - 0.020).abs() < 1e-12, "{measured:?}");
    assert_eq!(measured.cumulative.iter().find(|(b, _)| *b == 0.025).map(|c| c.1), Some(1));
    assert_eq!(measured.cumulative.iter().find(|(b, _)| *b == 0.01).map(|c| c.1), Some(0));
    assert_eq!(histogram(ttft, &[("phase", "warmup")]).count, 1);
    // Every gap of the sketch counts; schedule lag counts every request sent.
    let itl = histogram(family(&s, &names::histogram(Metric::ItlChunk)), &[("phase", "measured")]);
    assert_eq!(itl.count, 39);
    assert_eq!(itl.cumulative.iter().find(|(b, _)| *b == 0.01).map(|c| c.1), Some(30));
    let lag = histogram(family(&s, &names::histogram(Metric::ScheduleLag)), &[("phase", "measured")]);
    assert_eq!(lag.count, 4);
    let wait = histogram(family(&s, &names::histogram(Metric::QueueWait)), &[("phase", "measured")]);
    assert_eq!(wait.count, 0, "closed-loop records carry no queue wait");

    in_flight.store(0, Ordering::Relaxed);
    assert_eq!(number(family(&r.snapshot(), names::IN_FLIGHT), &[("level", "r5")]), 0.0);
}

#[test]
fn a_level_run_again_counts_on_and_the_level_gauge_is_its_ordinal() {
    let r = Registry::new();
    r.start_level("c1").dropped(Phase::Measure);
    r.start_level("c2");
    let again = r.start_level("c1");
    again.dropped(Phase::Measure);
    let s = r.snapshot();
    assert_eq!(
        number(family(&s, names::REQUESTS), &[("level", "c1"), ("phase", "measured"), ("outcome", "dropped")]),
        2.0
    );
    let level = family(&s, names::LEVEL);
    assert_eq!(level.series.len(), 1);
    assert_eq!(number(level, &[("level", "c1")]), 2.0);
}

#[test]
fn buckets_are_cumulative_and_le_is_inclusive() {
    let mut h = Histogram::default();
    h.observe_n(0.1, 2);
    h.observe_n(1000.0, 1);
    h.observe_ms(Some(f64::NAN));
    let b = h.reading();
    assert_eq!(b.count, 3);
    assert_eq!(b.cumulative.iter().find(|(bound, _)| *bound == 0.1).map(|c| c.1), Some(2));
    assert_eq!(b.cumulative.last().map(|c| c.1), Some(2), "above the last bound is only in +Inf");
    assert!(b.cumulative.windows(2).all(|w| w[0].1 <= w[1].1));
}
