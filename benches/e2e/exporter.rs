//! The client's own `/metrics` on the hot path: CPU per chunk of the client at c=256, zero
//! delay (the simulator's instant profile), with `--metrics-listen` and a scraper reading
//! `/metrics` every second, against the same run without it. The registry takes one lock per
//! request's outcome, never per chunk, so the target is at most 2 % more CPU per chunk.
//!
//! The two sides alternate, twice each, and each side's figure is the smaller of its runs (the
//! machine's noise only ever adds).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::{Bench, CLIENT, Load, OVERHEAD_TOKENS, instant, read_artifact};

/// Accepted CPU per chunk, with `/metrics` ÷ without.
pub const TARGET_RATIO: f64 = 1.02;

#[derive(Debug, Serialize)]
pub struct ExporterRow {
    pub requests: u64,
    pub concurrency: u32,
    /// CPU per chunk of each run, microseconds, in the order they ran.
    pub without_us_per_chunk: Vec<f64>,
    pub with_us_per_chunk: Vec<f64>,
    /// Scrapes answered during the runs with `/metrics`.
    pub scrapes: u64,
    /// The smaller of each side's runs, with ÷ without.
    pub ratio: f64,
    pub met: bool,
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One GET of `/metrics`; whether a 200 came back.
fn scrape(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body);
    body.starts_with(b"HTTP/1.1 200") || body.starts_with(b"HTTP/1.0 200")
}

fn run(bench: &Bench, load: &Load, with_metrics: bool, scrapes: &AtomicU64) -> io::Result<f64> {
    let server = bench.start(instant())?;
    let (dir, mut args, out) = bench.client_args(&server, load, &format!("exporter-{}-{with_metrics}", load.tag()))?;
    let done = Arc::new(AtomicBool::new(false));
    let scraper = if with_metrics {
        let port = free_port()?;
        args.push("--metrics-listen".into());
        args.push(format!("127.0.0.1:{port}").into());
        let done = done.clone();
        Some(std::thread::spawn(move || {
            let mut answered = 0u64;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                answered += u64::from(scrape(port));
            }
            answered
        }))
    } else {
        None
    };
    let measured = bench.measure(&server, std::path::Path::new(CLIENT), &args, &dir, Duration::from_secs(300));
    done.store(true, Ordering::Relaxed);
    if let Some(t) = scraper {
        scrapes.fetch_add(t.join().unwrap_or(0), Ordering::Relaxed);
    }
    let (exit, server_side) = measured?;
    bench.stop(server);
    let artifact = read_artifact(&out);
    if !artifact.found || artifact.completed == 0 {
        return Err(io::Error::other(format!("the exporter row's run wrote no artifact: {}", exit.stderr_tail)));
    }
    Ok((exit.user_s + exit.sys_s) * 1e6 / server_side.chunks_streamed.max(1) as f64)
}

/// The row: without, with, without, with.
pub fn exporter_row(bench: &Bench, scale: u64) -> io::Result<ExporterRow> {
    let load = Load {
        regime: "zero-delay",
        concurrency: 256,
        requests: 20_000 / scale,
        max_tokens: OVERHEAD_TOKENS,
        canaries: true,
    };
    let scrapes = AtomicU64::new(0);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        eprintln!("exporter: {} without /metrics", load.tag());
        without.push(run(bench, &load, false, &scrapes)?);
        eprintln!("exporter: {} with /metrics scraped every second", load.tag());
        with.push(run(bench, &load, true, &scrapes)?);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let ratio = min(&with) / min(&without);
    Ok(ExporterRow {
        requests: load.requests,
        concurrency: load.concurrency,
        without_us_per_chunk: without,
        with_us_per_chunk: with,
        scrapes: scrapes.into_inner(),
        ratio,
        met: ratio <= TARGET_RATIO,
    })
}

pub fn print_exporter(row: &ExporterRow) {
    println!(
        "== /metrics: CPU per chunk with the client's exporter scraped every second, against without (c={}, {} requests, zero delay) ==",
        row.concurrency, row.requests
    );
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(", ");
    println!(
        "without: {} µs/chunk; with: {} µs/chunk ({} scrapes answered)",
        list(&row.without_us_per_chunk),
        list(&row.with_us_per_chunk),
        row.scrapes
    );
    println!(
        "with ÷ without, the smaller of each: {:.3}x (target ≤ {TARGET_RATIO}x: {})",
        row.ratio,
        if row.met { "met" } else { "NOT MET" }
    );
    println!();
}
