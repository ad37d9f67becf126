//! `--format json`: one JSON document on stdout for scripts (`anvil-load.summary/v1`), while
//! everything meant for people goes to stderr. Small and stable: per level the headline figures
//! under the artifact's own keys and units, the verdicts and the artifact's path; the run's answer;
//! the other files written. Anything deeper is in the artifacts it names.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::contract::{Metric, Stat};
use crate::results::aggregate::summary::LevelSummary;

use super::answer::Answer;

/// The summary's schema name.
pub const SUMMARY_SCHEMA: &str = "anvil-load.summary/v1";

/// One level: its load, counts, headline figures (the artifact's `metrics` keys), verdicts,
/// warning codes and artifact.
fn level(a: &LevelSummary, artifact: &Path) -> Value {
    let d = &a.distributions;
    json!({
        "level": a.pacing.label(),
        "run_id": a.level_id,
        "load_mode": a.load.load_mode,
        "concurrency": a.load.concurrency,
        "rate": a.load.rate,
        "requests": a.requests,
        "completed": a.completed,
        "failed": a.failed,
        "interrupted": a.interrupted,
        "valid": a.load.validity.valid,
        "performance_eligible": a.performance_eligible,
        "metrics": {
            "request_throughput_rps": a.rates.request_throughput_rps,
            "throughput_tok_s": a.rates.throughput_tok_s,
            "goodput_rps": a.rates.goodput.and_then(|g| g.rps),
            "ttft_p50_ms": d.stat(Metric::Ttft, Stat::P50),
            "ttft_p99_ms": d.stat(Metric::Ttft, Stat::P99),
            "tpot_p50_ms": d.stat(Metric::Tpot, Stat::P50),
            "tpot_p99_ms": d.stat(Metric::Tpot, Stat::P99),
            "e2e_p50_ms": d.stat(Metric::E2e, Stat::P50),
            "e2e_p99_ms": d.stat(Metric::E2e, Stat::P99),
        },
        "slo": a.slo,
        "warnings": a.warnings.iter().map(|w| w.code()).collect::<Vec<_>>(),
        "artifact": artifact.display().to_string(),
    })
}

/// The whole run: `answer` is null for a single level (its one level is the answer).
pub fn summary(run_id: &str, levels: &[(&LevelSummary, &Path)], answer: Option<&Answer>, files: &[PathBuf]) -> Value {
    json!({
        "schema": SUMMARY_SCHEMA,
        "run_id": run_id,
        "levels": levels.iter().map(|(a, p)| level(a, p)).collect::<Vec<_>>(),
        "answer": answer,
        "files": files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}
