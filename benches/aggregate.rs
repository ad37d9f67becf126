//! Cost of the aggregator per request and of the artifact's summaries: recording outcomes (the
//! live counters and histograms behind the channel), turning them into per-request records,
//! computing the `metrics` block, and one distribution summary over 10⁶ samples. Run with
//! `make bench`.

use std::hint::black_box;
use std::time::Duration;

use std::sync::Arc;

use anvil_load::plan::scenario::{Overrides, Scenario};
use anvil_load::request::record::CanaryCheck;
use anvil_load::request::record::timing::{Exclusions, RequestTiming};
use anvil_load::request::record::writer;
use anvil_load::request::record::{Completed, Outcome, TokenSource};
use anvil_load::request::record::{Issued, LevelPacing, RunInfo, SizingRecord, Stamp};
use anvil_load::request::workload::Sizer;
use anvil_load::results::aggregate::sample::Sample;
use anvil_load::results::aggregate::snapshots::Snapshots;
use anvil_load::results::aggregate::stats::Summary;
use anvil_load::results::aggregate::{AsWritten, Collected, LevelInput, LevelSink, Origin, collect, finish_level};
use anvil_load::results::console::Progress;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tokio::sync::mpsc;

/// Outcomes per recorded batch: the client's channel holds 4,096.
const BATCH: usize = 4096;

/// A completed 256-token request with a passed canary, its timings varied a little per index so
/// the histograms see spread values rather than one bucket.
fn completed(index: u64) -> Completed {
    let jitter = Duration::from_micros(index % 997);
    let first_output = Duration::from_millis(40) + jitter;
    Completed {
        index,
        planned_context_tokens: 64,
        prompt_target_tokens: 64,
        start_offset: Duration::from_millis(index),
        intended_offset: None,
        queue_wait: None,
        first_output,
        first_content: Some(first_output),
        end: first_output + Duration::from_millis(2550) + jitter,
        content_chunks: 256,
        reasoning_chunks: 0,
        prompt_tokens: Some(78),
        cached_tokens: None,
        output_tokens: 256,
        output_token_source: TokenSource::Usage,
        usage_completion_tokens: None,
        reasoning_tokens: None,
        finish_reason: Some("length".into()),
        visible_content_truncated: false,
        canary: Some(CanaryCheck {
            marker: format!("ANVIL_REQ_1_{index:05}"),
            marker_at_start: true,
            observed_marker_count: 1,
            foreign_marker_count: 0,
            capture_complete: true,
            passed: true,
            failure_reason: None,
            cross_session_marker_count: None,
            malformed_marker_count: 0,
            offending_marker: None,
        }),
        controlled_output: None,
        retries: 0,
        retried_errors: Vec::new(),
        stale_connection_retries: 0,
        replay: None,
        chunks: Box::default(),
        corrections: None,
        schema: None,
        tool_calls: None,
    }
}

fn record(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let progress = Progress::new(false, None, None, "bench");
    // Recording includes appending each record to the records file, as in a run.
    let dir = tempfile::tempdir().expect("temp dir");
    let (sink, _writer) = runtime
        .block_on(async { writer::open(&dir.path().join("bench.records.ndjson"), true, Default::default()) })
        .expect("records file");
    let outcomes: Vec<Outcome> = (0..BATCH as u64).map(|i| Outcome::Completed(completed(i))).collect();
    let mut group = c.benchmark_group("aggregate");
    group.throughput(Throughput::Elements(BATCH as u64));
    // The channel is filled and closed outside the timed part, so what is timed is the
    // aggregator receiving and recording each outcome, as in a run.
    group.bench_function("record_outcome", |b| {
        b.iter_batched(
            || {
                let (tx, rx) = mpsc::channel(BATCH);
                for outcome in &outcomes {
                    tx.try_send(outcome.clone()).expect("the channel holds a whole batch");
                }
                rx
            },
            |rx| -> Collected {
                runtime.block_on(async {
                    let level = LevelSink { records: &sink, level: "bench", rules: Exclusions::default(), live: None };
                    let snapshots = Snapshots::new(None, "bench", tokio::time::Instant::now(), Arc::default());
                    collect(rx, level, |live, window| progress.update(live, window), snapshots).await
                })
            },
            BatchSize::LargeInput,
        )
    });
    // The same with the run's live metrics fed (`--metrics-listen`): the registry's cost per
    // outcome is the difference.
    let registry = anvil_load::results::live::Registry::new();
    group.bench_function("record_outcome_live_metrics", |b| {
        b.iter_batched(
            || {
                let (tx, rx) = mpsc::channel(BATCH);
                for outcome in &outcomes {
                    tx.try_send(outcome.clone()).expect("the channel holds a whole batch");
                }
                rx
            },
            |rx| -> Collected {
                runtime.block_on(async {
                    let live = Some(registry.start_level("bench"));
                    let level = LevelSink { records: &sink, level: "bench", rules: Exclusions::default(), live };
                    let snapshots = Snapshots::new(None, "bench", tokio::time::Instant::now(), Arc::default());
                    collect(rx, level, |live, window| progress.update(live, window), snapshots).await
                })
            },
            BatchSize::LargeInput,
        )
    });
    let done: Vec<Completed> = (0..BATCH as u64).map(completed).collect();
    group.bench_function("request_timing", |b| {
        b.iter(|| {
            done.iter().map(|c| RequestTiming::from_completed(black_box(c), &Exclusions::default())).collect::<Vec<_>>()
        })
    });
    let samples: Vec<Sample> =
        done.iter().map(|c| Sample::from_record(&RequestTiming::from_completed(c, &Exclusions::default()))).collect();
    let scenario =
        Scenario::load(std::path::Path::new("scenarios/smoke.toml"), &Overrides::default()).expect("scenario");
    let sizing = SizingRecord::for_sizer("estimate", &Sizer::Estimate { overhead: 8.0 }, None);
    let info = RunInfo::new(&scenario, "bench", "http://127.0.0.1:1/v1", sizing, 0);
    // As a live level ends: its records stand as written, so nothing is read back.
    let records = dir.path().join("unread.records.ndjson");
    group.bench_function("summarise", |b| {
        b.iter_batched(
            || Collected {
                samples: samples.clone(),
                as_written: Some(AsWritten { rules: info.initial_rules(), ..AsWritten::default() }),
                ..Collected::default()
            },
            |collected| {
                let input = LevelInput {
                    info: &info,
                    level_id: "bench".into(),
                    pacing: LevelPacing::Closed { concurrency: 64, max_rate: None },
                    issued: Issued::default(),
                    started: Stamp::now(),
                    finished: Stamp::now(),
                    collected,
                    interrupted: false,
                    simulator: None,
                    server_metrics: None,
                    client: None,
                };
                finish_level(input, Origin::Run, &records).expect("nothing to read back")
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn summary(c: &mut Criterion) {
    // A million latencies in no particular order: a cheap deterministic shuffle of a spread of
    // values, so the sort does real work.
    let values: Vec<f64> =
        (0..1_000_000u64).map(|i| (i.wrapping_mul(2_654_435_761) % 1_000_003) as f64 / 7.0).collect();
    let mut group = c.benchmark_group("summary");
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(values.len() as u64));
    group.bench_function("of_1e6_samples", |b| {
        b.iter_batched(|| values.clone(), |v| Summary::of(black_box(v)), BatchSize::LargeInput)
    });
    group.finish();
}

criterion_group!(benches, record, summary);
criterion_main!(benches);
