//! Scale (10,000 concurrent streams), memory against run length, and start-up cost.

use super::*;
// ---------------------------------------------------------------------------------------------
// 3. Scale: 10,000 concurrent streams

#[derive(Debug, Serialize)]
pub(super) struct Scale {
    pub(super) load: Load,
    pub(super) status: String,
    pub(super) completed: u64,
    pub(super) failed: u64,
    pub(super) error_counts: Value,
    pub(super) first_error: Option<String>,
    pub(super) stderr_tail: String,
    pub(super) peak_rss_mib: f64,
    pub(super) baseline_peak_rss_mib: f64,
    /// The most streams the simulator held open at once during the run.
    pub(super) streams_at_once: u64,
    /// (peak RSS − peak RSS of the same run at concurrency 1) / `streams_at_once`.
    pub(super) rss_per_stream_kib: f64,
    pub(super) cpu_s: f64,
    pub(super) process_wall_s: f64,
    /// The simulator's count of streams that reached `[DONE]`.
    pub(super) server_completed: u64,
    /// The floor reader with the same load, for comparison: what the HTTP stack alone costs.
    pub(super) floor: Beside,
    /// oha with the same load, when it is installed. It opens its connections as its requests
    /// start, where the client and the floor reader open them all first.
    pub(super) oha: Option<Beside>,
}

/// Another reader's run of the same load, beside the client's.
#[derive(Debug, Serialize)]
pub(super) struct Beside {
    pub(super) status: String,
    /// The simulator's count of streams that reached `[DONE]` during the run.
    pub(super) completed: u64,
    pub(super) peak_rss_mib: f64,
    pub(super) baseline_peak_rss_mib: f64,
    pub(super) streams_at_once: u64,
    pub(super) rss_per_stream_kib: f64,
    pub(super) cpu_s: f64,
    /// The client's `rss_per_stream_kib` ÷ this one's, when this run completed every request
    /// and both held at least 95 % of the streams open at once.
    pub(super) rss_per_stream_ratio: Option<f64>,
}

/// Peak RSS above the same reader's concurrency-1 peak, per stream the simulator held open at
/// once: a reader that opens its connections as its requests start may end its first streams
/// before its last begin.
fn per_stream(peak_kib: u64, base_kib: u64, at_once: u64) -> f64 {
    (peak_kib as f64 - base_kib as f64) / at_once.max(1) as f64
}

/// Whether a run held (nearly) every stream of `load` open at once: ratios compare only those.
fn all_at_once(load: &Load, at_once: u64) -> bool {
    at_once * 100 >= load.requests * 95
}

impl Beside {
    /// `client` is the client's run: its KiB per stream and its streams held at once.
    fn of(base: &FloorRun, run: &FloorRun, load: &Load, client: (f64, u64)) -> Beside {
        let rss_per_stream_kib = per_stream(run.exit.max_rss_kib, base.exit.max_rss_kib, run.server.peak_streams);
        let comparable = run.exit.ok()
            && run.server.requests_completed == load.requests
            && all_at_once(load, run.server.peak_streams)
            && all_at_once(load, client.1)
            && rss_per_stream_kib > 0.0;
        Beside {
            status: run.exit.status(),
            completed: run.server.requests_completed,
            peak_rss_mib: run.exit.max_rss_kib as f64 / 1024.0,
            baseline_peak_rss_mib: base.exit.max_rss_kib as f64 / 1024.0,
            streams_at_once: run.server.peak_streams,
            rss_per_stream_kib,
            cpu_s: run.exit.cpu_s(),
            rss_per_stream_ratio: comparable.then(|| client.0 / rss_per_stream_kib),
        }
    }
}

pub(super) fn scale_test(bench: &Bench, quick: bool) -> io::Result<Scale> {
    // Short answers at 100 ms per token: every stream stays open 1.6 s, longer than it takes
    // the simulator, on its one core, to accept 10,000 requests (some 20-40 µs each) and the
    // client to start them, so with one request per worker all of them are in flight together.
    // The simulator's count of streams held at once shows whether they were.
    let profile = Profile { content_tokens: (16, 16), ..paced(Duration::from_millis(100)) };
    let streams = if quick { 2_000 } else { 10_000 };
    let load = Load {
        regime: "scale-100ms",
        concurrency: streams,
        requests: u64::from(streams),
        max_tokens: 16,
        canaries: true,
    };
    let baseline = Load { concurrency: 1, requests: 3, ..load.clone() };
    eprintln!("scale: {} and its concurrency-1 baseline: client, floor reader, oha", load.tag());
    let server = bench.start(profile)?;
    let base = bench.client(&server, &baseline, Duration::from_secs(60))?;
    let run = bench.client(&server, &load, Duration::from_secs(300))?;
    let floor_base = bench.floor(&server, &baseline, Duration::from_secs(60))?;
    let floor = bench.floor(&server, &load, Duration::from_secs(300))?;
    let oha_runs = match bench.oha(&server, &baseline, Duration::from_secs(60))? {
        Some(base) => bench.oha(&server, &load, Duration::from_secs(300))?.map(|run| (base, run)),
        None => None,
    };
    bench.stop(server);
    let client =
        (per_stream(run.exit.max_rss_kib, base.exit.max_rss_kib, run.server.peak_streams), run.server.peak_streams);
    Ok(Scale {
        status: run.exit.status(),
        completed: run.artifact.completed,
        failed: run.artifact.failed,
        error_counts: run.artifact.error_counts.clone(),
        first_error: if run.artifact.found {
            run.artifact.first_failure.clone()
        } else {
            Some("no artifact written".into())
        },
        stderr_tail: run.exit.stderr_tail.clone(),
        peak_rss_mib: run.exit.max_rss_kib as f64 / 1024.0,
        baseline_peak_rss_mib: base.exit.max_rss_kib as f64 / 1024.0,
        streams_at_once: run.server.peak_streams,
        rss_per_stream_kib: client.0,
        cpu_s: run.exit.cpu_s(),
        process_wall_s: run.exit.process_wall_s,
        server_completed: run.server.requests_completed,
        floor: Beside::of(&floor_base, &floor, &load, client),
        oha: oha_runs.map(|(base, run)| Beside::of(&base, &run, &load, client)),
        load,
    })
}

/// Peak RSS at concurrency 256 against the number of requests: the client keeps every
/// request's record until the artifact is written, so its peak grows with the run's length as
/// well as with the streams in flight.
#[derive(Debug, Serialize)]
pub(super) struct Memory {
    pub(super) concurrency: u32,
    pub(super) short_run_requests: u64,
    pub(super) short_run_peak_rss_mib: f64,
    pub(super) long_run_requests: u64,
    pub(super) long_run_peak_rss_mib: f64,
    /// (long − short) / (long − short requests).
    pub(super) retained_kib_per_request: f64,
    pub(super) floor_peak_rss_mib: Option<f64>,
}

pub(super) fn memory(bench: &Bench, overhead: &[Comparison]) -> io::Result<Option<Memory>> {
    let Some(long) =
        overhead.iter().find(|o| o.load.regime == "zero-delay" && o.load.concurrency == 256 && o.load.canaries)
    else {
        return Ok(None);
    };
    let short = Load { requests: long.load.requests.min(2_000) / 2, ..long.load.clone() };
    eprintln!("memory: {} ({} requests)", short.tag(), short.requests);
    let server = bench.start(instant())?;
    let run = bench.client(&server, &short, Duration::from_secs(120))?;
    bench.stop(server);
    let short_mib = run.exit.max_rss_kib as f64 / 1024.0;
    let extra = long.load.requests.saturating_sub(short.requests);
    Ok(Some(Memory {
        concurrency: short.concurrency,
        short_run_requests: short.requests,
        short_run_peak_rss_mib: short_mib,
        long_run_requests: long.load.requests,
        long_run_peak_rss_mib: long.client.peak_rss_mib,
        retained_kib_per_request: if extra > 0 {
            (long.client.peak_rss_mib - short_mib) * 1024.0 / extra as f64
        } else {
            f64::NAN
        },
        floor_peak_rss_mib: long.floor.as_ref().map(|f| f.peak_rss_mib),
    }))
}

// ---------------------------------------------------------------------------------------------
// 4. Start-up

#[derive(Debug, Serialize)]
pub(super) struct Startup {
    /// CPU (user + sys) of whole one-request runs against the zero-delay profile, ms.
    pub(super) cpu_ms: Vec<f64>,
    pub(super) median_cpu_ms: f64,
    pub(super) median_process_wall_ms: f64,
    pub(super) peak_rss_mib: f64,
    /// The floor under every child's peak RSS (see `spawner`).
    pub(super) spawner_peak_rss_mib: f64,
    pub(super) status: String,
}

pub(super) fn startup(bench: &Bench) -> io::Result<Startup> {
    eprintln!("start-up: one-request runs");
    let server = bench.start(instant())?;
    let load = Load { regime: "startup", concurrency: 1, requests: 1, max_tokens: OVERHEAD_TOKENS, canaries: true };
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(bench.client(&server, &load, Duration::from_secs(30))?);
    }
    bench.stop(server);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cpu_ms: Vec<f64> = runs.iter().map(|r| r.exit.cpu_s() * 1e3).collect();
    Ok(Startup {
        median_cpu_ms: median(cpu_ms.clone()),
        cpu_ms,
        median_process_wall_ms: median(runs.iter().map(|r| r.exit.process_wall_s * 1e3).collect()),
        peak_rss_mib: runs.iter().map(|r| r.exit.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        spawner_peak_rss_mib: runs.iter().map(|r| r.exit.spawner_peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        status: runs.iter().find(|r| !r.exit.ok()).map_or_else(|| "exit 0".into(), |r| r.exit.status()),
    })
}
