//! The table of a run's levels (a sweep, or a capacity search's probes) and the sweep file that
//! holds the same rows for scripts: `RUN_ID-sweep.json` (`anvil-load.sweep/v1`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::contract::{Metric, Stat};
use crate::numbers::{self, TimeUnit};
use crate::results::aggregate::summary::LevelSummary;

/// The sweep file's schema name.
pub const SWEEP_SCHEMA: &str = "anvil-load.sweep/v1";

/// One row of the sweep summary.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub load_mode: &'static str,
    /// Closed loop: the concurrency; open loop: the in-flight cap (0 when uncapped).
    pub concurrency: u32,
    pub rate: Option<f64>,
    pub achieved_rate: Option<f64>,
    pub goodput_rps: Option<f64>,
    pub slo_passed: Option<bool>,
    pub valid: bool,
    pub run_id: String,
    pub artifact: String,
    pub requests: u64,
    pub failed: u64,
    pub request_throughput_rps: Option<f64>,
    pub output_throughput_tok_s: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub performance_eligible: bool,
}

impl SweepRow {
    pub fn from_summary(a: &LevelSummary, path: &std::path::Path) -> Self {
        let d = &a.distributions;
        SweepRow {
            load_mode: a.load.load_mode,
            concurrency: a.load.concurrency,
            rate: a.load.rate,
            achieved_rate: a.load.achieved_rate,
            goodput_rps: a.rates.goodput.and_then(|g| g.rps),
            slo_passed: a.slo.as_ref().map(|r| r.passed),
            valid: a.load.validity.valid,
            run_id: a.level_id.clone(),
            artifact: path.display().to_string(),
            requests: a.requests,
            failed: a.failed,
            request_throughput_rps: a.rates.request_throughput_rps,
            output_throughput_tok_s: a.rates.throughput_tok_s,
            ttft_p50_ms: d.stat(Metric::Ttft, Stat::P50),
            ttft_p99_ms: d.stat(Metric::Ttft, Stat::P99),
            tpot_p50_ms: d.stat(Metric::Tpot, Stat::P50),
            tpot_p99_ms: d.stat(Metric::Tpot, Stat::P99),
            e2e_p50_ms: d.stat(Metric::E2e, Stat::P50),
            e2e_p99_ms: d.stat(Metric::E2e, Stat::P99),
            performance_eligible: a.performance_eligible,
        }
    }
}

/// Write the sweep file `{stem}-sweep.json` into `dir`: the run's id and one row per level, in
/// the order they ran (a one-process run, a shard's part, a merge: one shape).
pub fn write_sweep<'a>(
    dir: &Path,
    stem: &str,
    run_id: &str,
    levels: impl IntoIterator<Item = (&'a LevelSummary, &'a Path)>,
) -> Result<PathBuf, String> {
    let rows: Vec<SweepRow> = levels.into_iter().map(|(a, p)| SweepRow::from_summary(a, p)).collect();
    let name = format!("{stem}-sweep.json");
    let document = serde_json::json!({ "schema": SWEEP_SCHEMA, "run_id": run_id, "levels": rows });
    crate::results::artifact::write_json_atomic(dir, &name, &document)
        .map_err(|e| format!("cannot write {name} to {}: {e}", dir.display()))
}

/// One row per level; every time column in one unit chosen from its own range and named in the
/// header, rates with a few significant digits, counts with thousands separators.
pub fn sweep_table(rows: &[SweepRow]) -> String {
    let mut s = String::new();
    let open = rows.iter().any(|r| r.rate.is_some());
    let slo = rows.iter().any(|r| r.slo_passed.is_some());
    let column = |get: fn(&SweepRow) -> Option<f64>| TimeUnit::for_column(rows.iter().filter_map(get));
    let units =
        [column(|r| r.ttft_p50_ms), column(|r| r.ttft_p99_ms), column(|r| r.tpot_p50_ms), column(|r| r.tpot_p99_ms)];
    let heads = ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"];
    let heads: Vec<String> = heads.iter().zip(units).map(|(h, u)| format!("{h} ({})", u.suffix())).collect();
    let _ = write!(
        s,
        "\n{:>11}{:>10}{:>14}{:>15}{:>15}{:>15}{:>15}{:>9}",
        if open { "rate" } else { "concurrency" },
        "req/s",
        "output tok/s",
        heads[0],
        heads[1],
        heads[2],
        heads[3],
        "failed",
    );
    if slo {
        let _ = write!(s, "{:>8}", "SLOs");
    }
    let _ = writeln!(s, "{:>8}", "valid");
    let cell = |unit: TimeUnit, v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| unit.number(v));
    // Nothing measured (every request failed or was excluded) is no figure, not a zero.
    let measured = |r: &SweepRow| r.request_throughput_rps.is_some_and(|v| v > 0.0);
    let rate = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::rate);
    for r in rows {
        let rate = |v: Option<f64>| if measured(r) { rate(v) } else { "–".to_string() };
        let level = match r.rate {
            Some(rate) => numbers::significant(rate, 6),
            None => numbers::thousands(u64::from(r.concurrency)),
        };
        let _ = write!(
            s,
            "{:>11}{:>10}{:>14}{:>15}{:>15}{:>15}{:>15}{:>9}",
            level,
            rate(r.request_throughput_rps),
            rate(r.output_throughput_tok_s),
            cell(units[0], r.ttft_p50_ms),
            cell(units[1], r.ttft_p99_ms),
            cell(units[2], r.tpot_p50_ms),
            cell(units[3], r.tpot_p99_ms),
            numbers::thousands(r.failed),
        );
        if slo {
            let verdict = match r.slo_passed {
                Some(true) => "met",
                Some(false) => "missed",
                None => "–",
            };
            let _ = write!(s, "{verdict:>8}");
        }
        let _ = writeln!(s, "{:>8}", if r.valid { "yes" } else { "NO" });
    }
    s
}

/// The capacity search, probe by probe, in the order it probed (`--verbose`; the answer box says
/// what it found).
pub fn search_table(search: &crate::plan::search::CapacitySearch) -> String {
    let mut s = String::new();
    let by = search_by(search);
    let _ = writeln!(s, "\ncapacity search by {by}, probe by probe:");
    let _ = writeln!(s, "{:>6}{:>12}{:>10}{:>14}", "step", by, "SLOs", "goodput/s");
    for (i, p) in search.probes.iter().enumerate() {
        let goodput = p.goodput_rps.map_or_else(|| "–".to_string(), numbers::rate);
        let _ = writeln!(
            s,
            "{:>6}{:>12}{:>10}{:>14}",
            i + 1,
            numbers::significant(p.level, 6),
            if p.passed { "met" } else { "missed" },
            goodput
        );
    }
    s
}

/// What a search varies, as the console names it.
pub fn search_by(search: &crate::plan::search::CapacitySearch) -> &'static str {
    match search.by {
        crate::plan::scenario::SearchBy::Concurrency => "concurrency",
        crate::plan::scenario::SearchBy::Rate => "rate",
    }
}
