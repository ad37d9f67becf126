//! Timing accuracy: the client's TTFT, time to first output and TPOT against the
//! simulator's own record of when it wrote each chunk.

use super::*;
// ---------------------------------------------------------------------------------------------
// 2. Timing accuracy against the simulator's ground truth

/// Nearest-rank percentiles of a set of errors (the artifact's definition).
#[derive(Debug, Serialize)]
pub(super) struct Dist {
    pub(super) samples: usize,
    pub(super) min: f64,
    pub(super) p50: f64,
    pub(super) p99: f64,
    pub(super) max: f64,
    pub(super) mean: f64,
}

impl Dist {
    pub(super) fn of(mut values: Vec<f64>) -> Option<Dist> {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: usize| values[(p * n).div_ceil(100).clamp(1, n) - 1];
        Some(Dist {
            samples: n,
            min: values[0],
            p50: rank(50),
            p99: rank(99),
            max: values[n - 1],
            mean: values.iter().sum::<f64>() / n as f64,
        })
    }
}

#[derive(Debug, Serialize)]
pub(super) struct Accuracy {
    pub(super) load: Load,
    pub(super) status: String,
    pub(super) completed: u64,
    pub(super) failed: u64,
    /// Client records matched to a ground-truth record by canary marker.
    pub(super) joined: usize,
    /// Client − server, ms. Positive: the client's clock starts before the request is sent and
    /// stops after the bytes crossed loopback, the server's runs from arrival to hand-over.
    pub(super) ttft_error_ms: Option<Dist>,
    pub(super) time_to_first_output_error_ms: Option<Dist>,
    /// The TTFT error of requests sent on an already open connection (each worker's first
    /// request also opens its connection, which the client times and the server does not see).
    pub(super) ttft_error_warm_ms: Option<Dist>,
    /// Client request start → server arrival (the handler starting), on the wall clock: the
    /// request's side of the TTFT error (pool, connect, write, the server's accept queue).
    pub(super) request_delivery_ms: Option<Dist>,
    /// TTFT error minus request delivery: server hand-over of the first content chunk → the
    /// client's stamp of the read that carried it.
    pub(super) ttft_response_side_error_ms: Option<Dist>,
    /// The same for the first output (reasoning) chunk.
    pub(super) ttfo_response_side_error_ms: Option<Dist>,
    /// (client TPOT − server TPOT) / server TPOT · 100.
    pub(super) tpot_error_pct: Option<Dist>,
    /// The same over requests sent on an already open connection.
    pub(super) tpot_error_warm_pct: Option<Dist>,
    /// The server's own TTFT, for scale (ms).
    pub(super) server_ttft_ms: Option<Dist>,
    /// Client e2e − server e2e (arrival to its last event), ms.
    pub(super) e2e_error_ms: Option<Dist>,
    /// The floor reader's TTFT error (its first read holding a content delta) and e2e error,
    /// measured against a fresh simulator with the same load: the error any client on this
    /// machine pays, which the client's errors are read against.
    pub(super) floor_ttft_error_ms: Option<Dist>,
    pub(super) floor_e2e_error_ms: Option<Dist>,
    /// Simulator CPU ÷ wall time over the run: near 100 % the simulator itself lags.
    pub(super) server_busy: f64,
    pub(super) client_cpu_s: f64,
    pub(super) peak_rss_mib: f64,
    pub(super) first_error: Option<String>,
}

/// Server-side timings of one response, from its chunk offsets.
pub(super) struct Truth {
    pub(super) arrival_unix_ns: u64,
    pub(super) first_output_ms: f64,
    pub(super) first_content_ms: Option<f64>,
    pub(super) tpot_ms: Option<f64>,
    /// Arrival to the last event's hand-over.
    pub(super) e2e_ms: f64,
}

impl Truth {
    pub(super) fn of(record: &GroundTruthRecord) -> Option<Truth> {
        let ms = |ns: u64| ns as f64 / 1e6;
        let output: Vec<_> =
            record.chunks.iter().filter(|c| matches!(c.kind, ChunkKind::Reasoning | ChunkKind::Content)).collect();
        let first = output.first()?;
        let last = output.last()?;
        let tokens: u32 = output.iter().map(|c| c.tokens).sum();
        Some(Truth {
            arrival_unix_ns: record.arrival_unix_ns,
            first_output_ms: ms(first.offset_ns),
            first_content_ms: output.iter().find(|c| c.kind == ChunkKind::Content).map(|c| ms(c.offset_ns)),
            tpot_ms: (tokens > 1).then(|| ms(last.offset_ns - first.offset_ns) / f64::from(tokens - 1)),
            e2e_ms: record.chunks.last().map_or(0.0, |c| ms(c.offset_ns)),
        })
    }
}

/// Errors of one level, one entry per joined request.
#[derive(Default)]
pub(super) struct Errors {
    pub(super) ttft: Vec<f64>,
    pub(super) ttfo: Vec<f64>,
    pub(super) ttft_warm: Vec<f64>,
    pub(super) delivery: Vec<f64>,
    pub(super) response_side: Vec<f64>,
    pub(super) ttfo_response_side: Vec<f64>,
    pub(super) tpot: Vec<f64>,
    pub(super) tpot_warm: Vec<f64>,
    pub(super) server_ttft: Vec<f64>,
    pub(super) e2e: Vec<f64>,
}

impl Errors {
    pub(super) fn add(&mut self, record: &Value, truth: &Truth, level_start_unix_ns: u64, concurrency: u32) {
        let warm = record["request_index"].as_u64().is_some_and(|i| i >= u64::from(concurrency));
        // Both instants on the wall clock; the difference of two u64 nanosecond counts first, so
        // no precision is lost to the size of the epoch.
        let delivery = record["start_offset_ms"]
            .as_f64()
            .filter(|_| level_start_unix_ns > 0)
            .map(|offset| (i128::from(truth.arrival_unix_ns) - i128::from(level_start_unix_ns)) as f64 / 1e6 - offset);
        if let Some(d) = delivery {
            self.delivery.push(d);
        }
        if let Some(client) = record["time_to_first_output_ms"].as_f64() {
            let error = client - truth.first_output_ms;
            self.ttfo.push(error);
            if let Some(d) = delivery {
                self.ttfo_response_side.push(error - d);
            }
        }
        if let (Some(client), Some(server)) = (record["ttft_ms"].as_f64(), truth.first_content_ms) {
            let error = client - server;
            self.ttft.push(error);
            self.server_ttft.push(server);
            if warm {
                self.ttft_warm.push(error);
            }
            if let Some(d) = delivery {
                self.response_side.push(error - d);
            }
        }
        if let Some(client) = record["e2e_ms"].as_f64() {
            self.e2e.push(client - truth.e2e_ms);
        }
        if let (Some(client), Some(server)) = (record["tpot_ms"].as_f64(), truth.tpot_ms) {
            let error = (client - server) / server * 100.0;
            self.tpot.push(error);
            if warm {
                self.tpot_warm.push(error);
            }
        }
    }
}

pub(super) fn accuracy(bench: &Bench, quick: bool) -> io::Result<Vec<Accuracy>> {
    // 64 output tokens at 10 ms (8 reasoning, then 56 content); prefill at 2,000 tokens/s puts
    // the first token some 40 ms after arrival for the ~80-token prompts.
    let profile = Profile {
        name: "bench-accuracy".into(),
        prefill_tok_s: Some(2_000.0),
        time_per_output_token: Duration::from_millis(10),
        reasoning_tokens: (8, 8),
        content_tokens: (56, 56),
        record_ground_truth: true,
        ..instant()
    };
    let levels: &[(u32, u64)] = if quick {
        &[(1, 10), (100, 200), (256, 256), (1000, 1000)]
    } else {
        &[(1, 30), (100, 300), (256, 768), (1000, 3000)]
    };
    let mut out = Vec::new();
    for &(concurrency, requests) in levels {
        let load = Load { regime: "accuracy-10ms", concurrency, requests, max_tokens: 64, canaries: true };
        eprintln!("accuracy: {} ({} requests)", load.tag(), load.requests);
        // A fresh server per level: markers repeat across levels (same seed).
        let server = bench.start(profile.clone())?;
        let run = bench.client(&server, &load, Duration::from_secs(180))?;
        let truth: HashMap<String, Truth> =
            server.ground_truth().iter().filter_map(|r| Some((r.marker.clone()?, Truth::of(r)?))).collect();
        bench.stop(server);
        let mut errors = Errors::default();
        let mut joined = 0;
        for record in &run.artifact.request_timings {
            if let Some(t) = record["request_canary"]["marker"].as_str().and_then(|m| truth.get(m)) {
                joined += 1;
                errors.add(record, t, run.artifact.started_at_unix_ns, concurrency);
            }
        }
        let wall_s = run.artifact.wall_clock_ms / 1000.0;
        let (floor_ttft, floor_e2e) = floor_errors(bench, &profile, &load)?;
        out.push(Accuracy {
            status: run.exit.status(),
            completed: run.artifact.completed,
            failed: run.artifact.failed,
            joined,
            ttft_error_ms: Dist::of(errors.ttft),
            time_to_first_output_error_ms: Dist::of(errors.ttfo),
            ttft_error_warm_ms: Dist::of(errors.ttft_warm),
            request_delivery_ms: Dist::of(errors.delivery),
            ttft_response_side_error_ms: Dist::of(errors.response_side),
            ttfo_response_side_error_ms: Dist::of(errors.ttfo_response_side),
            tpot_error_pct: Dist::of(errors.tpot),
            tpot_error_warm_pct: Dist::of(errors.tpot_warm),
            server_ttft_ms: Dist::of(errors.server_ttft),
            e2e_error_ms: Dist::of(errors.e2e),
            floor_ttft_error_ms: Dist::of(floor_ttft),
            floor_e2e_error_ms: Dist::of(floor_e2e),
            server_busy: if wall_s > 0.0 { run.server.cpu_s / wall_s } else { f64::NAN },
            client_cpu_s: run.exit.cpu_s(),
            peak_rss_mib: run.exit.max_rss_kib as f64 / 1024.0,
            first_error: run.artifact.first_failure.clone(),
            load,
        });
    }
    Ok(out)
}

/// The floor reader's TTFT and e2e errors for `load`, against a fresh simulator of `profile`.
fn floor_errors(bench: &Bench, profile: &Profile, load: &Load) -> io::Result<(Vec<f64>, Vec<f64>)> {
    let server = bench.start(profile.clone())?;
    let run = bench.floor_timed(&server, load, Duration::from_secs(180))?;
    let truth: HashMap<String, Truth> =
        server.ground_truth().iter().filter_map(|r| Some((r.marker.clone()?, Truth::of(r)?))).collect();
    bench.stop(server);
    let (mut ttft, mut e2e) = (Vec::new(), Vec::new());
    for t in run.report.iter().flat_map(|r| &r.timings) {
        let Some(truth) = truth.get(&format!("ANVIL_REQ_{SEED}_{:05}", t.index)) else { continue };
        if let Some(client) = t.ttft_ms {
            ttft.push(client - truth.first_content_ms.unwrap_or(f64::NAN));
        }
        e2e.push(t.e2e_ms - truth.e2e_ms);
    }
    Ok((ttft, e2e))
}
