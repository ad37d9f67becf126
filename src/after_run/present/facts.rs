//! The numbers a report states, taken from the artifacts through `ArtifactFile` (nothing is
//! recomputed that the artifact already states; percentile intervals come from the records it
//! carries): provenance, verdict, headline rows with their CI95, sweep points, objectives.

pub use crate::after_run::gather::level_label;
use crate::after_run::gather::{LevelFile, Run};
use crate::contract::{Metric, Stat, Total, metric_key};
use crate::results::aggregate::stats::quantile_ci;
use crate::results::aggregate::warning_groups::{grouped, importance};
use crate::results::artifact::ArtifactFile;
use crate::results::knee::knee_among;

use super::doc::WarningLine;

/// A number as people read it: three significant digits, thousands separators, integers
/// without a point, never a raw float (see [`crate::numbers::significant`]).
pub fn num(v: f64) -> String {
    crate::numbers::significant(v, 3)
}

pub fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), num)
}

pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:+.1} %"))
}

/// What the run measured and with what: the facts a reader needs to trust or reproduce it.
pub fn provenance(run: &Run) -> Vec<(String, String)> {
    let a = &run.levels[0].artifact;
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| rows.push((k.to_string(), v));
    let target = if a.simulated() {
        "the embedded simulator, not a real engine".to_string()
    } else {
        format!("a real server at {}", a.base_url.as_deref().unwrap_or("an unrecorded address"))
    };
    put("target", target);
    put("engine", a.engine.clone().unwrap_or_else(|| "not labelled".into()));
    put("model", a.model.clone());
    put("GPU", a.gpu.clone().unwrap_or_else(|| "not labelled".into()));
    put("API", a.api.clone());
    put("client", format!("{} {}", a.client.name, a.client.version));
    let mut prints: Vec<&str> = run.levels.iter().map(|l| l.artifact.configuration_fingerprint.as_str()).collect();
    prints.sort_unstable();
    prints.dedup();
    put("configuration fingerprint", prints.join(", "));
    put("run", run.run_id.clone());
    put("started", a.started_at.clone());
    if let Some(p) = &a.measurement_protocol {
        put("protocol", p.clone());
    }
    if let Some(t) = &a.tier {
        put("tier", t.clone());
    }
    let load = match (a.rate, &a.arrival) {
        (Some(_), arrival) => format!("open loop, {} arrivals", arrival.as_deref().unwrap_or("planned")),
        (None, _) => "closed loop (fixed concurrency)".to_string(),
    };
    put("load", load);
    let labels: Vec<String> = run.levels.iter().map(|l| level_label(&l.artifact)).collect();
    put("levels", labels.join(", "));
    let requests: Vec<String> = run.levels.iter().map(|l| l.artifact.requests.to_string()).collect();
    put("requests per level", requests.join(", "));
    rows
}

/// Every level valid, not interrupted, and something in its distributions (a level whose
/// every request failed or was excluded has no number that could describe the server).
pub fn valid(run: &Run) -> bool {
    run.levels.iter().all(|l| {
        let a = &l.artifact;
        a.validity.valid && !a.interrupted && a.completed > 0 && eligible(a) > 0
    })
}

/// Requests of a level in its distributions: the artifact's own count, else its eligible
/// records.
pub fn eligible(a: &ArtifactFile) -> u64 {
    a.metric_population
        .as_ref()
        .and_then(|p| p.get("performance_eligible_requests"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| a.eligible())
}

/// `kind n, kind n` of a count map.
fn counted<K: std::fmt::Display>(counts: impl IntoIterator<Item = (K, u64)>) -> String {
    counts.into_iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// What a level left out of its distributions, with the reasons: `3 failed (http_500 3), 15
/// excluded (canary_failed 15)`; empty when nothing was.
pub fn left_out(a: &ArtifactFile) -> String {
    let excluded = &a.request_timings.excluded;
    let mut parts = Vec::new();
    if a.failed > 0 {
        let kinds = counted(a.error_counts.iter().map(|(k, &n)| (k, n)));
        parts.push(if kinds.is_empty() {
            format!("{} failed", a.failed)
        } else {
            format!("{} failed ({kinds})", a.failed)
        });
    }
    let n: u64 = excluded.values().sum();
    if n > 0 {
        parts.push(format!("{n} excluded ({})", counted(excluded.iter().map(|(k, &n)| (k, n)))));
    }
    parts.join(", ")
}

/// Why the run (or some level of it) is not valid, one line each.
pub fn invalid_reasons(run: &Run) -> Vec<String> {
    let several = run.levels.len() > 1;
    let mut out = Vec::new();
    for l in &run.levels {
        let a = &l.artifact;
        let at = if several { format!("{}: ", level_label(a)) } else { String::new() };
        for r in &a.validity.reasons {
            out.push(format!("{at}{r}"));
        }
        if !a.validity.valid && a.validity.reasons.is_empty() {
            out.push(format!("{at}failed its validity check"));
        }
        if a.interrupted {
            out.push(format!("{at}interrupted before it finished"));
        }
        if a.completed == 0 {
            out.push(format!("{at}no request completed"));
        } else if eligible(a) == 0 {
            out.push(format!(
                "{at}no request is in the distributions ({}): no figure describes the target",
                left_out(a)
            ));
        }
    }
    out
}

/// The methodology warnings, one line per kind with the levels it applies to (`every level`
/// when all of them), most important first, each text once (see
/// [`crate::results::aggregate::warning_groups`]).
pub fn warnings(run: &Run) -> Vec<WarningLine> {
    // A level can raise one kind twice with different texts (two reasons a load was invalid):
    // the second of a kind is its own line, so grouping across levels never drops one.
    let mut raised: Vec<(String, String, &str, &str)> = Vec::new();
    for l in &run.levels {
        let label = level_label(&l.artifact);
        for (i, w) in l.artifact.warnings.iter().enumerate() {
            let nth = l.artifact.warnings[..i].iter().filter(|x| x.code == w.code).count();
            let key = if nth == 0 { w.code.clone() } else { format!("{}\u{0}{nth}", w.code) };
            raised.push((label.clone(), key, w.code.as_str(), w.message.as_str()));
        }
    }
    let triples = raised.iter().map(|(label, key, _, message)| (label.as_str(), key.as_str(), *message));
    let mut lines = grouped(triples, run.levels.len())
        .into_iter()
        .map(|g| {
            let applies = if run.levels.len() < 2 {
                String::new()
            } else if g.every_level {
                "every level".to_string()
            } else {
                g.levels.join(", ")
            };
            // Where the levels' texts differ (their figures), the first stands for all: say whose.
            let differ = raised.iter().any(|(_, key, _, message)| *key == g.code && *message != g.message);
            let message = if differ { format!("{} (figures of {})", g.message, g.levels[0]) } else { g.message };
            let code = g.code.split('\u{0}').next().unwrap_or_default().to_string();
            WarningLine { code, applies, message }
        })
        .collect::<Vec<_>>();
    // The second of a kind was ordered under its key: order it by its kind again (stable).
    lines.sort_by_key(|w| importance(&w.code));
    lines
}

/// One distribution of the headline table.
#[derive(Debug, Clone)]
pub struct HeadlineRow {
    pub label: &'static str,
    pub metric: Metric,
    pub samples: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p50_ci: Option<(f64, f64)>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p99_ci: Option<(f64, f64)>,
    pub max: Option<f64>,
}

/// The distributions a person looks at first; open-loop and reasoning rows only where they
/// mean something.
pub fn headline_metrics(a: &ArtifactFile) -> Vec<(&'static str, Metric)> {
    let mut rows = vec![("TTFT (ms)", Metric::Ttft)];
    let reasoning = a.request_timings.reasoning;
    if reasoning {
        rows.push(("time to first output (ms)", Metric::TimeToFirstOutput));
    }
    rows.extend([("TPOT (ms)", Metric::Tpot), ("end-to-end (ms)", Metric::E2e)]);
    if a.rate.is_some() {
        rows.extend([
            ("TTFT from intended start (ms)", Metric::TtftFromIntended),
            ("end-to-end from intended start (ms)", Metric::E2eFromIntended),
            ("schedule lag (ms)", Metric::ScheduleLag),
        ]);
    }
    rows.extend([("output tokens", Metric::CompletionTokens), ("prompt tokens", Metric::PromptTokens)]);
    rows
}

pub fn headline(a: &ArtifactFile) -> Vec<HeadlineRow> {
    headline_metrics(a)
        .into_iter()
        .map(|(label, metric)| {
            // Intervals from the records, only when they are exactly the distribution's sample.
            // Ascending, as kept.
            let values = a.values(metric);
            let whole = values.len() as u64 == a.samples(metric) && !values.is_empty();
            let ci = |p: u32| if whole { quantile_ci(values, p, 0.95) } else { None };
            HeadlineRow {
                label,
                metric,
                samples: a.samples(metric),
                mean: a.stat(metric, Stat::Mean),
                p50: a.stat(metric, Stat::P50),
                p50_ci: ci(50),
                p90: a.stat(metric, Stat::P90),
                p99: a.stat(metric, Stat::P99),
                p99_ci: ci(99),
                max: a.stat(metric, Stat::Max),
            }
        })
        .collect()
}

pub fn ci(c: Option<(f64, f64)>) -> String {
    c.map_or_else(|| "–".to_string(), |(lo, hi)| format!("{} – {}", num(lo), num(hi)))
}

/// One level of a sweep, as the curves plot it.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    pub level: f64,
    pub label: String,
    pub tok_s: Option<f64>,
    pub req_s: Option<f64>,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    pub tpot_p50: Option<f64>,
    pub tpot_p99: Option<f64>,
    pub e2e_p50: Option<f64>,
    pub goodput_rps: Option<f64>,
    pub slo_passed: Option<bool>,
    pub valid: bool,
    pub requests: u64,
    pub failed: u64,
}

pub fn sweep_points(levels: &[LevelFile]) -> Vec<SweepPoint> {
    levels
        .iter()
        .map(|l| {
            let a = &l.artifact;
            SweepPoint {
                level: a.level(),
                label: level_label(a),
                tok_s: a.value(Total::ThroughputTokS),
                req_s: a.value(Total::RequestThroughputRps),
                ttft_p50: a.stat(Metric::Ttft, Stat::P50),
                ttft_p99: a.stat(Metric::Ttft, Stat::P99),
                tpot_p50: a.stat(Metric::Tpot, Stat::P50),
                tpot_p99: a.stat(Metric::Tpot, Stat::P99),
                e2e_p50: a.stat(Metric::E2e, Stat::P50),
                goodput_rps: a.value(Total::GoodputRps),
                slo_passed: a.slo.as_ref().map(|s| s.passed),
                valid: a.validity.valid,
                requests: a.requests,
                failed: a.failed,
            }
        })
        .collect()
}

/// The knee among the points: [`knee_among`] on (output tok/s, E2E p50) of the valid levels,
/// the rule the console's answer box uses.
pub fn knee_of(points: &[SweepPoint]) -> Option<usize> {
    let xy: Vec<Option<(f64, f64)>> =
        points.iter().map(|p| p.valid.then_some(()).and_then(|_| Some((p.tok_s?, p.e2e_p50?)))).collect();
    knee_among(&xy)
}

/// An objective that applies to a plotted statistic: its threshold.
pub fn objective(a: &ArtifactFile, metric: Metric, stat: Stat) -> Option<f64> {
    let key = metric_key(metric, stat);
    a.slo.as_ref()?.criteria.iter().find(|c| c.key == key).map(|c| c.threshold)
}

/// Canary counts: with canaries, (samples, passed, responses holding another request's marker).
pub fn canaries(a: &ArtifactFile) -> Option<(u64, u64, u64)> {
    if !a.request_canaries {
        return None;
    }
    let samples = a.value(Total::RequestCanarySamples).unwrap_or(0.0) as u64;
    let passed = a.value(Total::RequestCanaryPassed).unwrap_or(0.0) as u64;
    let foreign = a.request_timings.foreign_canaries;
    Some((samples, passed, foreign))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_digits_and_integers_whole() {
        assert_eq!(num(812.345), "812");
        assert_eq!(num(12_345.6), "12,346");
        assert_eq!(num(0.045_21), "0.0452");
        assert_eq!(num(32.0), "32");
        assert_eq!(num(f64::NAN), "–");
        assert_eq!(pct(Some(4.04)), "+4.0 %");
    }

    #[test]
    fn two_warnings_of_one_kind_at_one_level_both_stay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/open");
        let mut g = crate::after_run::gather::gather(&[dir]).unwrap();
        let a = &mut g.runs[0].levels[0].artifact;
        let mut w = a.warnings.first().cloned().expect("the fixture warns");
        a.warnings.clear();
        for text in ["client saturated", "arrivals queued"] {
            w.code = "invalid_load".into();
            w.message = text.into();
            a.warnings.push(w.clone());
        }
        let lines = warnings(&g.runs[0]);
        let texts: Vec<(&str, &str)> = lines.iter().map(|l| (l.code.as_str(), l.message.as_str())).collect();
        assert_eq!(texts, [("invalid_load", "client saturated"), ("invalid_load", "arrivals queued")]);
    }

    #[test]
    fn headline_rows_state_the_artifact_and_bracket_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/open");
        let g = crate::after_run::gather::gather(&[dir]).unwrap();
        let a = &g.runs[0].levels[0].artifact;
        let rows = headline(a);
        assert!(rows.iter().any(|r| r.metric == Metric::ScheduleLag));
        for r in &rows {
            assert_eq!(r.p50, a.stat(r.metric, Stat::P50));
            if let (Some(p50), Some((lo, hi))) = (r.p50, r.p50_ci) {
                assert!(lo <= p50 && p50 <= hi, "{}: {lo} {p50} {hi}", r.label);
            }
        }
        assert!(rows[0].p50_ci.is_some(), "a median interval needs only a handful of requests");
    }
}
