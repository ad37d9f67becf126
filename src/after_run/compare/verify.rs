//! The values `compare` shows must be the ones it tests. It shows an artifact's own `metrics`
//! (its percentiles, throughputs) and tests the per-request records the artifact carries; an
//! artifact whose summaries were edited, or whose records were cut, would show one thing and
//! test another. So before anything is compared, every value `compare` shows is recomputed from
//! the artifact's records by the definitions `summarise` uses — nearest-rank percentiles over
//! the eligible requests, sample counts, the wall clock (from the level start to the end of its
//! last request), output tokens and eligible requests over it — and an artifact that disagrees
//! is refused, naming the file, the key, both values and the fix.
//!
//! An artifact that carries no records at all (its `request_timings` left out) cannot be
//! checked: its values are shown and marked as not tested (see `run`), never gated on.

use super::metrics::{METRICS, Measure};
use crate::after_run::gather::LevelFile;
use crate::contract::{Metric, Stat, Total, metric_key, nearest_rank};
use crate::results::artifact::ArtifactFile;

/// Whether the artifact carries the records its summaries were computed from (an artifact of a
/// level where nothing completed carries none and needs none).
pub fn has_records(a: &ArtifactFile) -> bool {
    a.request_timings.count > 0 || (a.completed == 0 && a.failures.count == a.failed)
}

/// Every value `compare` shows of this level, recomputed from its records; `Err` names the first
/// disagreement.
pub fn check(level: &LevelFile) -> Result<(), String> {
    let a = &level.artifact;
    if !has_records(a) {
        return Ok(());
    }
    let refuse = |what: String| {
        Err(format!(
            "{}: {what}; its summaries disagree with its own records (edited or damaged), so the values shown would not be the ones tested — rebuild the artifact from its records file with anvil-load summarize, or compare other artifacts",
            level.path.display()
        ))
    };
    let wall = wall_clock_ms(a);
    if !close(a.wall_clock_ms, wall) {
        return refuse(format!(
            "wall_clock_ms states {}, but its records end at {wall} ms after the level start",
            a.wall_clock_ms
        ));
    }
    for spec in METRICS.iter() {
        match spec.measure {
            Measure::Percentile(metric, stat) => {
                let p = spec.measure.percentile();
                // Ascending, as kept.
                let values = a.values(metric);
                let stated_n = a.samples(metric);
                if values.len() as u64 != stated_n {
                    return refuse(format!(
                        "metrics.{} states {stated_n}, but its records hold {} eligible values",
                        metric_key(metric, Stat::Samples),
                        values.len()
                    ));
                }
                let recomputed = (!values.is_empty()).then(|| nearest_rank(values, p));
                let stated = a.stat(metric, stat);
                let agree = match (stated, recomputed) {
                    (Some(s), Some(r)) => close(s, r),
                    (None, None) => true,
                    _ => false,
                };
                if !agree {
                    return refuse(format!(
                        "metrics.{} states {}, but the nearest-rank p{p} of its {} eligible records is {}",
                        spec.key,
                        shown(stated),
                        values.len(),
                        shown(recomputed)
                    ));
                }
            }
            Measure::Total(total) => {
                let Some(stated) = a.value(total) else { continue };
                let wall_s = wall / 1000.0;
                let recomputed = match total {
                    // Every eligible request has an output count, in record order.
                    Total::ThroughputTokS => a.values(Metric::CompletionTokens).iter().sum::<f64>() / wall_s,
                    Total::RequestThroughputRps => a.eligible() as f64 / wall_s,
                    _ => continue,
                };
                if wall_s > 0.0 && !close(stated, recomputed) {
                    return refuse(format!(
                        "metrics.{} states {stated}, but its eligible records over its wall clock give {recomputed}",
                        spec.key
                    ));
                }
            }
        }
    }
    Ok(())
}

/// From the level start to the end of its last request, completed or failed (as `summarise`).
fn wall_clock_ms(a: &ArtifactFile) -> f64 {
    [a.request_timings.last_end_ms, a.failures.last_end_ms].into_iter().fold(0.0, f64::max)
}

/// Equal up to the last bits a recomputation in another order may change.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn shown(v: Option<f64>) -> String {
    v.map_or_else(|| "no value".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(edit: impl FnOnce(&mut serde_json::Value)) -> Result<(), String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/closed");
        let path = std::fs::read_dir(dir).unwrap().next().unwrap().unwrap().path();
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut v);
        // Read back as every artifact is, from a file.
        let dir = tempfile::tempdir().unwrap();
        let edited = dir.path().join("edited.json");
        std::fs::write(&edited, serde_json::to_vec(&v).unwrap()).unwrap();
        let artifact = ArtifactFile::read(&edited).unwrap();
        check(&LevelFile { path, artifact, windows: Vec::new() })
    }

    #[test]
    fn artifacts_as_written_agree_with_their_records() {
        level(|_| {}).unwrap();
    }

    #[test]
    fn edited_summaries_and_cut_records_are_refused() {
        let e = level(|v| v["metrics"]["ttft_p99_ms"] = serde_json::json!(1.0)).unwrap_err();
        assert!(e.contains("metrics.ttft_p99_ms states 1, but the nearest-rank p99"), "{e}");
        let e = level(|v| {
            let t = v["metrics"]["throughput_tok_s"].as_f64().unwrap();
            v["metrics"]["throughput_tok_s"] = serde_json::json!(t * 1.3);
        })
        .unwrap_err();
        assert!(e.contains("metrics.throughput_tok_s"), "{e}");
        let e =
            level(|v| v["wall_clock_ms"] = serde_json::json!(v["wall_clock_ms"].as_f64().unwrap() * 2.0)).unwrap_err();
        assert!(e.contains("wall_clock_ms"), "{e}");
        let e = level(|v| {
            v["request_timings"].as_array_mut().unwrap().pop();
        })
        .unwrap_err();
        assert!(e.contains("summarize"), "{e}");
        // Without records nothing can be checked (and nothing is tested).
        level(|v| v["request_timings"] = serde_json::json!([])).unwrap();
    }
}
