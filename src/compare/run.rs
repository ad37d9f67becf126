//! `anvil-load compare BASE NEW`: read both sides (see `gather`), match their levels (see
//! `matching`), test every metric of every matched level (see `stats`), print the result
//! benchstat-style (see `format`) or as Markdown or JSON, and decide the exit code against the
//! `--max-regress` thresholds (see `gate`).
//!
//! Per level and metric: with one run per side, the raw per-request values of the two
//! artifacts are tested (Mann–Whitney U for the median, a bootstrap interval of the difference
//! for p99); with several runs per side, each run contributes its own percentile and the
//! between-run variance decides. Throughputs are one number per run, so with one run per side
//! they are shown but never called significant. The tests of one level share the family-wise
//! `--alpha` (Bonferroni): each is run at α ÷ (number of metrics).

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::format;
use super::gate::{self, Breach, Threshold};
use super::matching::{self, Difference, Pair};
use super::stats::{self, CompareOptions, Comparison, Decision};
use crate::aggregate::summary::{Metric, Stat};
use crate::artifact::Total;
use crate::gather::{Gathered, LevelFile, gather};

/// How `compare` prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    Text,
    Md,
    Json,
}

/// What `compare` is asked to do.
#[derive(Debug, Clone)]
pub struct Request {
    pub base: PathBuf,
    pub new: PathBuf,
    pub max_regress: Vec<String>,
    pub force: bool,
    pub alpha: f64,
    pub format: CompareFormat,
}

/// What a compared number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A nearest-rank percentile of a per-request distribution.
    Percentile(Metric, Stat, u32),
    /// One number per run.
    Total(Total),
}

/// One compared metric: its name in `--max-regress`, its name in the output, what it is, and
/// which direction is worse.
#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    pub name: &'static str,
    pub key: &'static str,
    pub measure: Measure,
    pub higher_is_worse: bool,
}

/// The metrics `compare` tests, in the order it prints them.
pub const METRICS: [MetricSpec; 8] = [
    spec("ttft_p50", "ttft_p50_ms", Measure::Percentile(Metric::Ttft, Stat::P50, 50), true),
    spec("ttft_p99", "ttft_p99_ms", Measure::Percentile(Metric::Ttft, Stat::P99, 99), true),
    spec("tpot_p50", "tpot_p50_ms", Measure::Percentile(Metric::Tpot, Stat::P50, 50), true),
    spec("tpot_p99", "tpot_p99_ms", Measure::Percentile(Metric::Tpot, Stat::P99, 99), true),
    spec("e2e_p50", "e2e_p50_ms", Measure::Percentile(Metric::E2e, Stat::P50, 50), true),
    spec("e2e_p99", "e2e_p99_ms", Measure::Percentile(Metric::E2e, Stat::P99, 99), true),
    spec("output_tok_s", "throughput_tok_s", Measure::Total(Total::ThroughputTokS), false),
    spec("request_rps", "request_throughput_rps", Measure::Total(Total::RequestThroughputRps), false),
];

const fn spec(name: &'static str, key: &'static str, measure: Measure, higher_is_worse: bool) -> MetricSpec {
    MetricSpec { name, key, measure, higher_is_worse }
}

/// One metric of one level.
#[derive(Debug, Clone, Serialize)]
pub struct MetricResult {
    pub metric: &'static str,
    /// Change in the worse direction, in percent (positive: a regression).
    pub regression_pct: Option<f64>,
    /// The `--max-regress` threshold for this metric, percent.
    pub threshold_pct: Option<f64>,
    pub breached: bool,
    /// Why the change was not tested (too few requests for a tail percentile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untested: Option<String>,
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
    pub forced: bool,
    pub levels: Vec<LevelResult>,
    pub only_base: Vec<String>,
    pub only_new: Vec<String>,
    /// Settings that differ but do not make the sides incomparable (the server under test).
    pub ignored_differences: Vec<Difference>,
    /// Settings that differ and were compared anyway (`--force`).
    pub forced_differences: Vec<Difference>,
    pub breaches: Vec<Breach>,
    pub exit_code: u8,
}

pub const SCHEMA: &str = "anvil-load.compare/v1";

/// Exit codes, as the run's: 0 nothing beyond a threshold, 3 a significant regression beyond one.
const OK: u8 = 0;
const REGRESSED: u8 = 3;

/// Run the comparison and print it. `Err` is bad input or incomparable sides (exit 2).
pub fn compare(req: &Request) -> Result<u8, String> {
    let thresholds = gate::parse(&req.max_regress)?;
    let base = gather(std::slice::from_ref(&req.base)).map_err(|e| format!("BASE: {e}"))?;
    let new = gather(std::slice::from_ref(&req.new)).map_err(|e| format!("NEW: {e}"))?;
    for note in base.notes.iter().chain(&new.notes) {
        eprintln!("note: {note}");
    }
    let outcome = outcome(req, &base, &new, &thresholds)?;
    let text = match req.format {
        CompareFormat::Text => text(&outcome),
        CompareFormat::Md => markdown(&outcome),
        CompareFormat::Json => {
            serde_json::to_string_pretty(&outcome).map_err(|e| format!("cannot write JSON: {e}"))? + "\n"
        }
    };
    print!("{text}");
    for b in &outcome.breaches {
        eprintln!("regression: {}", b.message);
    }
    Ok(outcome.exit_code)
}

/// The comparison of two gathered sides.
pub fn outcome(req: &Request, base: &Gathered, new: &Gathered, thresholds: &[Threshold]) -> Result<Outcome, String> {
    let base_levels: Vec<&LevelFile> = base.levels().collect();
    let new_levels: Vec<&LevelFile> = new.levels().collect();
    let (b0, n0) = (&base_levels[0].artifact, &new_levels[0].artifact);
    let all = matching::differences(&b0.scenario, &n0.scenario);
    let (ignored, material): (Vec<Difference>, Vec<Difference>) = all.into_iter().partition(|d| d.ignored);
    let matched = matching::match_levels(&base_levels, &new_levels, req.force);
    if matched.pairs.is_empty() {
        return Err(not_comparable(req, &material, &matched));
    }
    let per_test_alpha = req.alpha / METRICS.len() as f64;
    let opts = CompareOptions {
        alpha: per_test_alpha,
        bootstrap: stats::BootstrapOptions { confidence: 1.0 - per_test_alpha, ..stats::BootstrapOptions::default() },
    };
    let mut levels = Vec::new();
    let mut breaches = Vec::new();
    for pair in &matched.pairs {
        let level = compare_level(pair, &opts, thresholds);
        for m in level.metrics.iter().filter(|m| m.breached) {
            breaches.push(Breach::new(&level.level, m.metric, m.regression_pct, m.threshold_pct));
        }
        levels.push(level);
    }
    let exit_code = if breaches.is_empty() { OK } else { REGRESSED };
    Ok(Outcome {
        schema: SCHEMA,
        base: req.base.display().to_string(),
        new: req.new.display().to_string(),
        alpha: req.alpha,
        per_test_alpha,
        forced: req.force,
        levels,
        only_base: matched.only_base,
        only_new: matched.only_new,
        ignored_differences: ignored,
        forced_differences: if req.force { material } else { Vec::new() },
        breaches,
        exit_code,
    })
}

fn not_comparable(req: &Request, material: &[Difference], matched: &matching::Matching<'_>) -> String {
    let mut msg = format!("{} and {} are not comparable: ", req.base.display(), req.new.display());
    if !material.is_empty() && !req.force {
        let shown: Vec<String> =
            material.iter().take(8).map(|d| format!("{} ({} in BASE, {} in NEW)", d.setting, d.base, d.new)).collect();
        let more = material.len().saturating_sub(8);
        let _ = write!(
            msg,
            "their configurations differ in {}{}; compare runs of the same scenario (only the server under test may differ), or pass --force to match levels by load mode and level alone",
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        );
    } else {
        let _ = write!(
            msg,
            "no level is in both (BASE has {}; NEW has {}); compare runs at the same concurrency or rate",
            list(&matched.only_base),
            list(&matched.only_new)
        );
    }
    msg
}

fn list(labels: &[String]) -> String {
    if labels.is_empty() { "none".into() } else { labels.join(", ") }
}

fn compare_level(pair: &Pair<'_>, opts: &CompareOptions, thresholds: &[Threshold]) -> LevelResult {
    let run_name = |l: &&LevelFile| l.artifact.run_id.clone();
    let mut metrics = Vec::new();
    for spec in METRICS {
        let Some(mut comparison) = compare_metric(spec.measure, &pair.base, &pair.new, opts) else { continue };
        let untested = too_few_for_the_tail(&comparison, opts);
        if untested.is_some() {
            comparison.significant = false;
        }
        let regression_pct = comparison.change_pct.map(|c| if spec.higher_is_worse { c } else { -c });
        let threshold_pct = thresholds.iter().find(|t| t.metric == spec.name).map(|t| t.pct);
        let breached = comparison.significant && matches!((regression_pct, threshold_pct), (Some(r), Some(t)) if r > t);
        metrics.push(MetricResult { metric: spec.key, regression_pct, threshold_pct, breached, untested, comparison });
    }
    LevelResult {
        level: pair.label.clone(),
        base_runs: pair.base.iter().map(run_name).collect(),
        new_runs: pair.new.iter().map(run_name).collect(),
        metrics,
    }
}

/// A tail percentile is tested only when each sample pins it down: its distribution-free
/// interval exists at the test's confidence (a p99 at 99.4 % needs 574 requests). Below that the
/// percentile rests on the last few requests, and a bootstrap of them is overconfident: one
/// stalled stream in 200 moves a p99 by a quarter, build or no build.
fn too_few_for_the_tail(c: &Comparison, opts: &CompareOptions) -> Option<String> {
    if c.decision != Decision::BootstrapCi {
        return None;
    }
    let confidence = opts.bootstrap.confidence;
    let needed = (1..=1_000_000).find(|&n| stats::quantile_ci_ranks(n, c.percentile, confidence).is_some())?;
    (c.n_base < needed || c.n_new < needed).then(|| {
        format!("not tested: a p{} needs {needed} requests per side, n={}+{}", c.percentile, c.n_base, c.n_new)
    })
}

/// One metric across the two sides' runs at one level.
fn compare_metric(
    measure: Measure,
    base: &[&LevelFile],
    new: &[&LevelFile],
    opts: &CompareOptions,
) -> Option<Comparison> {
    match measure {
        Measure::Percentile(metric, stat, p) => {
            let runs =
                |side: &[&LevelFile]| -> Vec<Vec<f64>> { side.iter().map(|l| l.artifact.values(metric)).collect() };
            let (b, n) = (runs(base), runs(new));
            let mut c = if b.len() == 1 && n.len() == 1 {
                stats::compare_samples(&b[0], &n[0], p, opts)
            } else {
                let (b, n): (Vec<&[f64]>, Vec<&[f64]>) =
                    (b.iter().map(Vec::as_slice).collect(), n.iter().map(Vec::as_slice).collect());
                stats::compare_runs(&b, &n, p, opts)
            };
            if b.len() == 1 && n.len() == 1 {
                // The artifact states the percentile; the records give it back (same
                // nearest-rank rule), and where they are missing the stated value is shown
                // without a test.
                let (sb, sn) = (base[0].artifact.stat(metric, stat), new[0].artifact.stat(metric, stat));
                match (&mut c, sb, sn) {
                    (Some(c), Some(sb), Some(sn)) => {
                        c.base = sb;
                        c.new = sn;
                    }
                    (None, Some(sb), Some(sn)) => c = Some(untested(p, sb, sn)),
                    _ => {}
                }
            }
            c
        }
        Measure::Total(total) => {
            let runs = |side: &[&LevelFile]| -> Option<Vec<[f64; 1]>> {
                side.iter().map(|l| l.artifact.value(total).map(|v| [v])).collect()
            };
            let (b, n) = (runs(base)?, runs(new)?);
            let (b, n): (Vec<&[f64]>, Vec<&[f64]>) =
                (b.iter().map(|v| v.as_slice()).collect(), n.iter().map(|v| v.as_slice()).collect());
            stats::compare_runs(&b, &n, 50, opts)
        }
    }
}

fn untested(p: u32, base: f64, new: f64) -> Comparison {
    Comparison {
        percentile: p,
        base,
        new,
        change_pct: (base != 0.0).then(|| (new - base) / base.abs() * 100.0),
        mann_whitney: None,
        difference_ci: None,
        n_base: 0,
        n_new: 0,
        significant: false,
        decision: Decision::RankTest,
    }
}

fn header(o: &Outcome) -> Vec<String> {
    let mut lines = vec![
        format!("base: {}", o.base),
        format!("new:  {}", o.new),
        format!(
            "significance: α={} per level, Bonferroni over {} metrics (each test at α={:.4}); ~ means no significant change",
            o.alpha,
            METRICS.len(),
            o.per_test_alpha
        ),
    ];
    if !o.ignored_differences.is_empty() {
        let d: Vec<String> =
            o.ignored_differences.iter().map(|d| format!("{} ({} → {})", d.setting, d.base, d.new)).collect();
        lines.push(format!("server under test differs: {}", d.join(", ")));
    }
    if !o.forced_differences.is_empty() {
        let d: Vec<String> =
            o.forced_differences.iter().map(|d| format!("{} ({} → {})", d.setting, d.base, d.new)).collect();
        lines.push(format!("compared with --force despite: {}", d.join(", ")));
    }
    if !o.only_base.is_empty() {
        lines.push(format!("only in base (not compared): {}", o.only_base.join(", ")));
    }
    if !o.only_new.is_empty() {
        lines.push(format!("only in new (not compared): {}", o.only_new.join(", ")));
    }
    lines
}

fn level_heading(l: &LevelResult) -> String {
    let runs = |r: &[String]| if r.len() == 1 { r[0].clone() } else { format!("{} runs", r.len()) };
    format!("{}: {} vs {}", l.level, runs(&l.base_runs), runs(&l.new_runs))
}

fn rows(l: &LevelResult) -> Vec<format::Row> {
    l.metrics
        .iter()
        .map(|m| {
            let mut row = format::row(m.metric, &m.comparison);
            if let Some(why) = &m.untested {
                row.delta = format!("~ ({why})");
            }
            row
        })
        .collect()
}

fn verdict(o: &Outcome) -> String {
    if o.breaches.is_empty() {
        "no significant regression beyond a --max-regress threshold".to_string()
    } else {
        format!("{} significant regression(s) beyond a --max-regress threshold", o.breaches.len())
    }
}

fn text(o: &Outcome) -> String {
    let mut out = header(o).join("\n") + "\n";
    for l in &o.levels {
        let _ = write!(out, "\n{}\n{}", level_heading(l), format::table(&rows(l)));
    }
    let _ = writeln!(out, "\n{}", verdict(o));
    for b in &o.breaches {
        let _ = writeln!(out, "  {}", b.message);
    }
    out
}

fn markdown(o: &Outcome) -> String {
    let mut out = String::from("## anvil-load compare\n\n");
    for line in header(o) {
        let _ = writeln!(out, "- {}", md(&line));
    }
    for l in &o.levels {
        let _ =
            write!(out, "\n### {}\n\n| metric | base | new | delta |\n|---|---:|---:|---|\n", md(&level_heading(l)));
        for r in rows(l) {
            let _ = writeln!(out, "| {} | {} | {} | {} |", md(&r.metric), r.base, r.new, md(&r.delta));
        }
    }
    let mark = if o.breaches.is_empty() { "✅" } else { "❌" };
    let _ = writeln!(out, "\n{mark} **{}**", verdict(o));
    for b in &o.breaches {
        let _ = writeln!(out, "- {}", md(&b.message));
    }
    out
}

/// Markdown-safe text (table pipes and emphasis characters escaped).
fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '|' | '*' | '_' | '`' | '[' | ']' | '\\' | '<' | '>') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed closed-loop sweep, written `runs` times under run ids `run<k>-c<level>`.
    fn copies(runs: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize/closed");
        for entry in std::fs::read_dir(fixture).unwrap() {
            let mut a: serde_json::Value =
                serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
            let level = a["concurrency"].as_u64().unwrap();
            for k in 0..runs {
                a["run_id"] = serde_json::Value::from(format!("run{k}-c{level}"));
                std::fs::write(dir.path().join(format!("run{k}-c{level}.json")), a.to_string()).unwrap();
            }
        }
        dir
    }

    fn request(base: &std::path::Path, new: &std::path::Path) -> Request {
        Request {
            base: base.to_path_buf(),
            new: new.to_path_buf(),
            max_regress: Vec::new(),
            force: false,
            alpha: 0.05,
            format: CompareFormat::Json,
        }
    }

    #[test]
    fn several_runs_per_side_are_compared_by_their_runs() {
        let (base, new) = (copies(3), copies(2));
        let req = request(base.path(), new.path());
        let (b, n) =
            (gather(std::slice::from_ref(&req.base)).unwrap(), gather(std::slice::from_ref(&req.new)).unwrap());
        assert_eq!((b.runs.len(), n.runs.len()), (3, 2));
        let thresholds = gate::parse(&["ttft_p50=0".into()]).unwrap();
        let o = outcome(&req, &b, &n, &thresholds).unwrap();
        assert_eq!(o.levels.iter().map(|l| l.level.as_str()).collect::<Vec<_>>(), ["c=2", "c=6"]);
        for l in &o.levels {
            assert_eq!((l.base_runs.len(), l.new_runs.len()), (3, 2));
            for m in &l.metrics {
                // One value per run: identical runs, no change, nothing significant.
                assert_eq!((m.comparison.n_base, m.comparison.n_new), (3, 2), "{}", m.metric);
                assert!(!m.comparison.significant && !m.breached, "{}", m.metric);
                assert_eq!(m.comparison.change_pct, Some(0.0), "{}", m.metric);
            }
        }
        assert_eq!(o.exit_code, 0);
        assert!(text(&o).contains("c=2: 3 runs vs 2 runs"), "{}", text(&o));
    }

    #[test]
    fn tails_are_tested_once_both_samples_pin_them_down() {
        let opts = CompareOptions {
            alpha: 0.05 / 8.0,
            bootstrap: stats::BootstrapOptions { confidence: 1.0 - 0.05 / 8.0, ..Default::default() },
        };
        let mut c = untested(99, 1.0, 1.2);
        c.decision = Decision::BootstrapCi;
        (c.n_base, c.n_new) = (574, 573);
        let why = too_few_for_the_tail(&c, &opts).unwrap();
        assert_eq!(why, "not tested: a p99 needs 574 requests per side, n=574+573");
        c.n_new = 574;
        assert_eq!(too_few_for_the_tail(&c, &opts), None);
        // Medians are always tested (the rank test needs no tail).
        c.decision = Decision::RankTest;
        (c.n_base, c.n_new) = (5, 5);
        assert_eq!(too_few_for_the_tail(&c, &opts), None);
    }

    #[test]
    fn one_run_per_side_states_the_artifacts_percentiles() {
        let (base, new) = (copies(1), copies(1));
        let req = request(base.path(), new.path());
        let (b, n) =
            (gather(std::slice::from_ref(&req.base)).unwrap(), gather(std::slice::from_ref(&req.new)).unwrap());
        let o = outcome(&req, &b, &n, &[]).unwrap();
        let level = &b.runs[0].levels[0].artifact;
        let tpot = o.levels[0].metrics.iter().find(|m| m.metric == "tpot_p99_ms").unwrap();
        assert_eq!(Some(tpot.comparison.base), level.stat(Metric::Tpot, Stat::P99));
        assert_eq!(tpot.comparison.n_base as u64, level.samples(Metric::Tpot));
        assert!(markdown(&o).contains("| tpot\\_p99\\_ms |"), "{}", markdown(&o));
    }
}
