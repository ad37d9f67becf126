//! Reading artifacts back, typed: the inverse of the mapping in `build`, for the commands that
//! take artifacts as input (reports, comparisons). The flat `metrics` map is read through
//! `metric_key` here and nowhere else; consumers ask for a `Metric` and a `Stat`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::metric_key;
use crate::aggregate::slo::SloReport;
use crate::aggregate::summary::{Metric, Stat};
use crate::record::{FailureRecord, RequestTiming};

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
    pub drift: Option<Value>,
    #[serde(default)]
    pub request_timings: Vec<RequestTiming>,
    #[serde(default)]
    pub failures: Vec<FailureRecord>,
    pub scenario: Value,
    pub simulator: Option<Value>,
    pub client: ClientFile,
    /// Blocks other commands add (server metrics, shards), kept as written.
    #[serde(flatten)]
    pub other: Map<String, Value>,
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
    /// Read and check one artifact file.
    pub fn read(path: &Path) -> Result<ArtifactFile, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
        let file: ArtifactFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not an anvil-serving.benchmark/v1 artifact ({e})", path.display()))?;
        if file.schema != super::SCHEMA {
            return Err(format!("{}: schema is {:?}, not {}", path.display(), file.schema, super::SCHEMA));
        }
        Ok(file)
    }

    /// One statistic of a distribution, as the artifact states it.
    pub fn stat(&self, metric: Metric, stat: Stat) -> Option<f64> {
        self.metrics.get(&metric_key(metric, stat.name())).and_then(Value::as_f64)
    }

    /// Samples behind a distribution.
    pub fn samples(&self, metric: Metric) -> u64 {
        self.metrics.get(&metric_key(metric, "samples")).and_then(Value::as_u64).unwrap_or(0)
    }

    /// A total or rate of the `metrics` block that is not a distribution.
    pub fn value(&self, key: Total) -> Option<f64> {
        self.metrics.get(key.key()).and_then(Value::as_f64)
    }

    /// The level: its concurrency (closed loop) or its rate (open loop).
    pub fn level(&self) -> f64 {
        self.rate.unwrap_or(f64::from(self.concurrency))
    }

    /// The performance-eligible request records (what the distributions are over).
    pub fn eligible(&self) -> impl Iterator<Item = &RequestTiming> {
        self.request_timings.iter().filter(|r| r.performance_eligible)
    }
}

/// Totals and rates of the `metrics` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    OutputTokens,
    PromptTokens,
    ThroughputTokS,
    RequestThroughputRps,
    WindowThroughputTokS,
    GoodputRps,
    PrefixCacheHitAvg,
    RequestCanarySamples,
    RequestCanaryPassed,
}

impl Total {
    pub fn key(self) -> &'static str {
        match self {
            Total::OutputTokens => "output_tokens",
            Total::PromptTokens => "prompt_tokens",
            Total::ThroughputTokS => "throughput_tok_s",
            Total::RequestThroughputRps => "request_throughput_rps",
            Total::WindowThroughputTokS => "window_throughput_tok_s",
            Total::GoodputRps => "goodput_rps",
            Total::PrefixCacheHitAvg => "prefix_cache_hit_avg",
            Total::RequestCanarySamples => "request_canary_samples",
            Total::RequestCanaryPassed => "request_canary_passed",
        }
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
            assert_eq!(a.request_timings.len() as u64, a.completed);
            assert_eq!(a.failures.len() as u64, a.failed);
            let ttft: Vec<f64> = {
                let mut v: Vec<f64> = a.eligible().filter_map(|r| r.ttft_ms).collect();
                v.sort_by(f64::total_cmp);
                v
            };
            assert_eq!(a.samples(Metric::Ttft), ttft.len() as u64);
            assert_eq!(a.stat(Metric::Ttft, Stat::Max), ttft.last().copied());
            assert_eq!(a.stat(Metric::Ttft, Stat::P50), Some(crate::aggregate::stats::nearest_rank(&ttft, 50)));
            assert!(a.value(Total::ThroughputTokS).is_some());
            assert!(a.slo.is_some() && a.level() > 0.0);
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
