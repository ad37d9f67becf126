//! What a comparison found, as `--format json` prints it and the text and Markdown renderings
//! read it: per matched level, one row per metric (its change, its test, its gate), and the
//! run's breaches and untested gates.

use serde::Serialize;

use super::gate::{Breach, Threshold, Untested};
use super::matching::Difference;
use super::stats::Comparison;

/// One metric of one level.
#[derive(Debug, Clone, Serialize)]
pub struct MetricResult {
    pub metric: &'static str,
    /// Change in the worse direction, in percent (positive: a regression).
    pub regression_pct: Option<f64>,
    /// The `--max-regress` threshold for this metric, percent.
    pub threshold_pct: Option<f64>,
    pub breached: bool,
    /// Why the change was not tested (too few requests for a tail percentile, too few runs for
    /// a rank test to reach α, no records, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untested: Option<String>,
    /// Significant, but smaller than `--noise`: shown as noise, `significant` is false and no
    /// gate is breached (the test's p-value and interval are still here).
    pub within_noise: bool,
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// One matched level.
#[derive(Debug, Clone, Serialize)]
pub struct LevelResult {
    pub level: String,
    pub base_runs: Vec<String>,
    pub new_runs: Vec<String>,
    pub metrics: Vec<MetricResult>,
}

/// Everything `compare` found; `--format json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub schema: &'static str,
    pub base: String,
    pub new: String,
    pub alpha: f64,
    pub per_test_alpha: f64,
    /// `--noise`: the smallest change, in percent, that counts.
    pub noise_pct: f64,
    pub forced: bool,
    pub levels: Vec<LevelResult>,
    pub only_base: Vec<String>,
    pub only_new: Vec<String>,
    /// Settings that differ but do not make the sides incomparable (the server under test).
    pub ignored_differences: Vec<Difference>,
    /// Settings that differ and were compared anyway (`--force`).
    pub forced_differences: Vec<Difference>,
    /// The `--max-regress` thresholds given.
    pub thresholds: Vec<Threshold>,
    pub breaches: Vec<Breach>,
    /// Gates that could not be evaluated at a level, and why.
    pub untested_gates: Vec<Untested>,
    pub allow_untested: bool,
    pub exit_code: u8,
}

pub const SCHEMA: &str = "anvil-load.compare/v1";
