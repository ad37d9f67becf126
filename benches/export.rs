//! `anvil-load export`: bytes per request and records written per second, to Parquet and to CSV,
//! for N synthetic records built with the project's own record types (no server, no input
//! file), beside the same records as the records file's NDJSON (its size, and the time to
//! serialize them: the floor measured in the same run). Each request streams 128 tokens with
//! gaps drawn around a decode step, so its chunk-gap sketch holds a few dozen pairs, as a real
//! stream's does; one request in fifty fails.
//!
//! `cargo bench --locked --bench export` (part of `make bench`); `EXPORT_BENCH_RECORDS=N` sets N
//! (default 200,000). Prints one table; the numbers in docs/export.md come from it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anvil_load::after_run::export::columns::{Record, Row};
use anvil_load::after_run::export::{self, Format};
use anvil_load::contract::ErrorKind;
use anvil_load::request::record::gaps::ChunkFacts;
use anvil_load::request::record::replay::ReplayFacts;
use anvil_load::request::record::timing::{Exclusions, FailureRecord, Phase, RequestTiming};
use anvil_load::request::record::{CanaryCheck, Completed, TokenSource};

/// A deterministic generator (splitmix64): the same records on every run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Roughly normal around `mean` (the sum of four uniforms), never below 1.
    fn around(&mut self, mean: f64, spread: f64) -> f64 {
        let u: f64 = (0..4).map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64).sum::<f64>() / 4.0;
        (mean + (u - 0.5) * 2.0 * spread).max(1.0)
    }
}

fn completed(index: u64, mix: &mut Mix) -> RequestTiming {
    let tokens = 128u64;
    let ttft = Duration::from_micros(mix.around(45_000.0, 20_000.0) as u64);
    let mut gaps: Vec<u32> = (1..tokens).map(|_| mix.around(12_000.0, 3_000.0) as u32).collect();
    let generation = Duration::from_micros(gaps.iter().map(|&g| u64::from(g)).sum());
    let max_stall = Duration::from_micros(u64::from(gaps.iter().copied().max().unwrap_or(0)));
    let mut chunks = ChunkFacts { max_stall: Some(max_stall), ..ChunkFacts::default() };
    chunks.chunk_gaps.add_all_us(&mut gaps);
    let c = Completed {
        index,
        planned_context_tokens: 1024,
        prompt_target_tokens: 1024,
        start_offset: Duration::from_micros(index * 5_000 + mix.next() % 1000),
        intended_offset: None,
        queue_wait: None,
        first_output: ttft,
        first_content: Some(ttft),
        end: ttft + generation,
        content_chunks: tokens as u32,
        reasoning_chunks: 0,
        prompt_tokens: Some(1024 + mix.next() % 3),
        cached_tokens: Some(0),
        output_tokens: tokens,
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
        chunks: Box::new(chunks),
        corrections: None,
        schema: None,
        tool_calls: None,
    };
    RequestTiming::from_completed(&c, &Exclusions::default())
}

fn failed(index: u64, mix: &mut Mix) -> FailureRecord {
    FailureRecord {
        request_index: index,
        error_kind: ErrorKind::Http(503),
        http_status: Some(503),
        server_error_type: Some("overloaded".into()),
        message: "HTTP 503: the server is overloaded".into(),
        planned_context_tokens: 1024,
        start_offset_ms: (index * 5) as f64 + (mix.next() % 1000) as f64 / 1000.0,
        intended_offset_ms: None,
        schedule_lag_ms: None,
        queue_wait_ms: None,
        phase: Phase::Measure,
        elapsed_ms: mix.around(3.0, 1.0),
        time_to_first_output_ms: None,
        ttft_ms: None,
        content_chunks: 0,
        reasoning_chunks: 0,
        stale_connection_retries: 0,
        retries: 0,
        retried_errors: Vec::new(),
        replay: ReplayFacts::default(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no options.
    let n: u64 = std::env::var("EXPORT_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let mut mix = Mix(29);
    let mut done = Vec::new();
    let mut fails = Vec::new();
    for i in 0..n {
        if i % 50 == 49 { fails.push(failed(i, &mut mix)) } else { done.push(completed(i, &mut mix)) }
    }
    let rows = || {
        let level = "anvil-20260101T000000Z-ab12-c64";
        let row = move |record| Row { level, level_started_ns: 1_767_225_600_000_000_000, record };
        done.iter().map(move |t| row(Record::Completed(t))).chain(fails.iter().map(move |f| row(Record::Failed(f))))
    };

    println!("export of {n} synthetic records (128 tokens each, 1 in 50 failed), best of 3:");
    println!("{:<28} {:>14} {:>14} {:>14}", "format", "bytes/request", "records/s", "seconds");
    // The floor: the same records as the records file writes them (one JSON line each).
    let ndjson = best_of_3(|| {
        let mut out = Vec::with_capacity(n as usize * 1400);
        for t in &done {
            serde_json::to_writer(&mut out, t).expect("a record serializes");
            out.push(b'\n');
        }
        for f in &fails {
            serde_json::to_writer(&mut out, f).expect("a record serializes");
            out.push(b'\n');
        }
        out
    });
    report("ndjson (records file, floor)", n, &ndjson);
    for format in [Format::Parquet, Format::Csv] {
        let measured = best_of_3(|| export::to_bytes(format, rows()).expect("export to memory"));
        report(format.name(), n, &measured);
    }
}

fn best_of_3(mut write: impl FnMut() -> Vec<u8>) -> (usize, Duration) {
    let mut best = Duration::MAX;
    let mut bytes = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let out = black_box(write());
        best = best.min(start.elapsed());
        bytes = out.len();
    }
    (bytes, best)
}

fn report(name: &str, n: u64, &(bytes, took): &(usize, Duration)) {
    println!(
        "{name:<28} {:>14.1} {:>14.0} {:>14.3}",
        bytes as f64 / n as f64,
        n as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
}
