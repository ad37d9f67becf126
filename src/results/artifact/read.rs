//! Reading artifacts back, typed: the inverse of the mapping in `build`, for the commands that
//! take artifacts as input (reports, comparisons). The flat `metrics` map is read through the
//! contract's `metric_key` and `Total::key` here and nowhere else; consumers ask for a `Metric`
//! and a `Stat`, or a `Total`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::kept::{self, Completed, Failed, Keep};
use super::scan;
use crate::contract::{Metric, Stat, Total, metric_key};
use crate::request::server_metrics::LevelServerMetrics;
use crate::results::aggregate::slo::SloReport;

/// One level's artifact as written (the fields the readers use; unknown keys are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct ArtifactFile {
    pub schema: String,
    pub run_id: String,
    pub measurement_protocol: Option<String>,
    pub engine: Option<String>,
    pub gpu: Option<String>,
    pub model: String,
    pub api: String,
    pub started_at: String,
    pub base_url: Option<String>,
    pub tier: Option<String>,
    pub started_at_unix_ns: u64,
    pub finished_at_unix_ns: u64,
    pub configuration_fingerprint: String,
    pub load_mode: String,
    pub concurrency: u32,
    pub rate: Option<f64>,
    pub arrival: Option<String>,
    pub achieved_rate: Option<f64>,
    #[serde(default)]
    pub dropped_arrivals: u64,
    #[serde(default)]
    pub peak_in_flight: u64,
    pub validity: ValidityFile,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub interrupted: bool,
    pub performance_eligible: bool,
    pub wall_clock_ms: f64,
    pub request_canaries: bool,
    pub metrics: Map<String, Value>,
    #[serde(default)]
    pub error_counts: BTreeMap<String, u64>,
    #[serde(default)]
    pub warnings: Vec<WarningFile>,
    pub slo: Option<SloReport>,
    pub drift: Option<DriftFile>,
    #[serde(default)]
    pub snapshot_windows: usize,
    pub steady_state: Option<SteadyStateFile>,
    pub server_metrics: Option<LevelServerMetrics>,
    /// The per-request records, reduced as they are read (see `kept`): never part of the head
    /// document, which is all serde reads.
    #[serde(skip)]
    pub request_timings: Completed,
    #[serde(skip)]
    pub failures: Failed,
    pub scenario: Value,
    pub simulator: Option<Value>,
    pub client: ClientFile,
    /// Blocks the reports show as written. Named one by one: a catch-all (`flatten`) would make
    /// serde buffer the whole document, records included, before reading any of it.
    pub metric_population: Option<Value>,
    pub models: Option<Value>,
    pub cache_reset: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ValidityFile {
    pub valid: bool,
    #[serde(default)]
    pub reasons: Vec<String>,
    pub max_dispatch_lag_ms: f64,
    pub dispatch_lag_p99_ms: Option<f64>,
    pub schedule_lag_p99_ms: Option<f64>,
    pub queue_wait_p99_ms: Option<f64>,
    /// The client's own lateness (absent in artifacts written before it was measured).
    #[serde(default)]
    pub max_client_lateness_ms: Option<f64>,
    #[serde(default)]
    pub client_lateness_p50_ms: Option<f64>,
    #[serde(default)]
    pub client_lateness_p99_ms: Option<f64>,
    #[serde(default)]
    pub client_lateness_max_ms: Option<f64>,
    #[serde(default)]
    pub client_cpu_share: Option<f64>,
}

/// The `drift` block: the first windows of a long level against the last ones.
#[derive(Debug, Clone, Deserialize)]
pub struct DriftFile {
    pub basis: String,
    pub windows_compared: usize,
    pub ttft_p50_ms: ChangeFile,
    pub ttft_p99_ms: ChangeFile,
    pub tpot_p50_ms: ChangeFile,
    pub tpot_p99_ms: ChangeFile,
    pub throughput_tok_s: ChangeFile,
    /// Absent in artifacts written before drift left out warm-up, drain and partial windows.
    #[serde(default)]
    pub measurement_windows: Option<usize>,
    #[serde(default)]
    pub measurement_span_s: Option<[f64; 2]>,
    #[serde(default)]
    pub first_span_s: Option<[f64; 2]>,
    #[serde(default)]
    pub last_span_s: Option<[f64; 2]>,
    #[serde(default)]
    pub excluded_windows: Option<ExcludedWindowsFile>,
}

/// Windows drift left out, by why.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExcludedWindowsFile {
    pub warmup: usize,
    pub drain: usize,
    pub partial: usize,
}

impl DriftFile {
    /// The rows in the order people read them, with their names and whether a rise is worse
    /// (latency) or better (throughput).
    pub fn rows(&self) -> [(&'static str, &ChangeFile, bool); 5] {
        [
            ("TTFT p50 (ms)", &self.ttft_p50_ms, true),
            ("TTFT p99 (ms)", &self.ttft_p99_ms, true),
            ("TPOT p50 (ms)", &self.tpot_p50_ms, true),
            ("TPOT p99 (ms)", &self.tpot_p99_ms, true),
            ("output tok/s", &self.throughput_tok_s, false),
        ]
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChangeFile {
    pub first: Option<f64>,
    pub last: Option<f64>,
    pub change_pct: Option<f64>,
}

/// The `steady_state` block: the part of the level where the planned load was on.
#[derive(Debug, Clone, Deserialize)]
pub struct SteadyStateFile {
    pub basis: String,
    pub start_ms: f64,
    pub end_ms: f64,
    pub share_of_level: f64,
    pub requests: usize,
    pub throughput_tok_s: f64,
    pub completion_rate_rps: f64,
    pub ttft_ms: Option<DistributionFile>,
    pub tpot_ms: Option<DistributionFile>,
    pub e2e_ms: Option<DistributionFile>,
}

/// A distribution written as a block (`steady_state.ttft_ms`).
#[derive(Debug, Clone, Deserialize)]
pub struct DistributionFile {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub samples: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WarningFile {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ClientFile {
    pub name: String,
    pub version: String,
}

impl ArtifactFile {
    /// Read and check one artifact file, as a stream (see `scan`): memory holds
    /// the kept values, never the file.
    pub fn read(path: &Path) -> Result<ArtifactFile, String> {
        Self::read_keeping(path, Keep::Timeline)
    }

    /// [`read`](Self::read), keeping of each record what `keep` says.
    pub fn read_keeping(path: &Path, keep: Keep) -> Result<ArtifactFile, String> {
        let cannot_read = |e: &dyn std::fmt::Display| format!("{}: cannot read it ({e})", path.display());
        let not_one =
            |e: &dyn std::fmt::Display| format!("{}: not an anvil-serving.benchmark/v1 artifact ({e})", path.display());
        let file = crate::sys::open_input(path).map_err(|e| cannot_read(&e))?;
        let (mut completed, mut failed) = (Completed::default(), Failed::default());
        let head = scan::scan(file, &["request_timings", "failures"], |list, bytes, whole| {
            Ok(if list == 0 {
                scan::one(bytes, whole)?.map(|(r, used)| {
                    completed.push(&r, keep);
                    used
                })
            } else {
                scan::one(bytes, whole)?.map(|(f, used)| {
                    failed.push(&f, keep);
                    used
                })
            })
        })
        .map_err(|e| match e {
            scan::ScanError::Io(e) => cannot_read(&e),
            e @ scan::ScanError::Syntax(_) => not_one(&e),
        })?;
        // The head's own line and column would point into a document that is not the file.
        let mut file: ArtifactFile = serde_json::from_slice(&head).map_err(|e| {
            let e = e.to_string();
            not_one(&e.rsplit_once(" at line ").map_or(e.as_str(), |(what, _)| what))
        })?;
        completed.finish(&mut failed);
        (file.request_timings, file.failures) = (completed, failed);
        if file.schema != super::SCHEMA {
            return Err(format!("{}: schema is {:?}, not {}", path.display(), file.schema, super::SCHEMA));
        }
        Ok(file)
    }

    /// One statistic of a distribution, as the artifact states it.
    pub fn stat(&self, metric: Metric, stat: Stat) -> Option<f64> {
        self.metrics.get(&metric_key(metric, stat)).and_then(Value::as_f64)
    }

    /// Samples behind a distribution.
    pub fn samples(&self, metric: Metric) -> u64 {
        self.metrics.get(&metric_key(metric, Stat::Samples)).and_then(Value::as_u64).unwrap_or(0)
    }

    /// A total or rate of the `metrics` block that is not a distribution.
    pub fn value(&self, key: Total) -> Option<f64> {
        self.metrics.get(key.key()).and_then(Value::as_f64)
    }

    /// The level: its concurrency (closed loop) or its rate (open loop).
    pub fn level(&self) -> f64 {
        self.rate.unwrap_or(f64::from(self.concurrency))
    }

    /// Performance-eligible requests among the records (what the distributions are over).
    pub fn eligible(&self) -> u64 {
        self.request_timings.eligible
    }

    /// The per-request values behind a distribution, ascending: the eligible requests' values
    /// (by the same definition `summarise` uses), and for the schedule lag every request sent,
    /// failed ones included, as the artifact counts them. Only the `kept::KEPT` metrics and the
    /// schedule lag are read back; any other gives nothing.
    pub fn values(&self, metric: Metric) -> &[f64] {
        if metric == Metric::ScheduleLag {
            return &self.request_timings.schedule_lag;
        }
        debug_assert!(kept::position(metric).is_some(), "{metric:?} is not kept when an artifact is read");
        kept::position(metric).map_or(&[], |i| &self.request_timings.values[i])
    }

    /// Whether the target was the embedded simulator (its counters are in the artifact).
    pub fn simulated(&self) -> bool {
        self.simulator.as_ref().is_some_and(|v| !v.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_artifacts_read_back_typed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/closed");
        for entry in std::fs::read_dir(dir).unwrap() {
            let a = ArtifactFile::read(&entry.unwrap().path()).unwrap();
            assert_eq!(a.request_timings.count, a.completed);
            assert_eq!(a.failures.count, a.failed);
            let ttft = a.values(Metric::Ttft);
            assert!(ttft.is_sorted_by(|x, y| x.total_cmp(y).is_le()), "kept values are read back sorted");
            assert_eq!(a.samples(Metric::Ttft), ttft.len() as u64);
            assert_eq!(a.stat(Metric::Ttft, Stat::Max), ttft.last().copied());
            assert_eq!(a.stat(Metric::Ttft, Stat::P50), Some(crate::contract::nearest_rank(ttft, 50)));
            assert!(a.value(Total::ThroughputTokS).is_some());
            assert!(a.slo.is_some() && a.level() > 0.0);
            // The values behind every kept distribution give back its summary.
            for m in super::kept::KEPT.into_iter().chain([Metric::ScheduleLag]) {
                let v = a.values(m);
                assert_eq!(v.len() as u64, a.samples(m), "{m:?}");
                if !v.is_empty() {
                    assert_eq!(a.stat(m, Stat::P99), Some(crate::contract::nearest_rank(v, 99)), "{m:?}");
                }
            }
            assert!(a.simulated());
        }
    }

    #[test]
    fn open_loop_lags_count_every_request_sent() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/open");
        for entry in std::fs::read_dir(dir).unwrap() {
            let a = ArtifactFile::read(&entry.unwrap().path()).unwrap();
            for m in [Metric::ScheduleLag, Metric::TtftFromIntended, Metric::E2eFromIntended, Metric::Ttft] {
                let v = a.values(m);
                assert!(!v.is_empty(), "{m:?}");
                assert_eq!(v.len() as u64, a.samples(m), "{m:?}");
                assert_eq!(a.stat(m, Stat::Max), v.last().copied(), "{m:?}");
                assert_eq!(a.stat(m, Stat::Min), v.first().copied(), "{m:?}");
            }
        }
    }

    #[test]
    fn something_else_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(&path, "{\"schema\": \"other\"}").unwrap();
        assert!(ArtifactFile::read(&path).unwrap_err().contains("x.json"));
    }
}
