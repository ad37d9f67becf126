//! `anvil-load compare BASE NEW`: read both sides (see `gather`), match their levels (see
//! `matching`), test every metric of every matched level (see `stats`), print the result
//! benchstat-style (see `format`) or as Markdown or JSON, and decide the exit code against the
//! `--max-regress` thresholds (see `gate`). Before anything is compared, every value shown is
//! recomputed from the records the artifacts carry (see `verify`).
//!
//! Per level and metric: with one run per side, the raw per-request values of the two
//! artifacts are tested (Mann–Whitney U for the median, a bootstrap interval of the difference
//! for p99); with several runs per side, each run contributes its own percentile and the
//! between-run variance decides. Throughputs are one number per run, so with one run per side
//! they are shown but never called significant. The tests of one level share the family-wise
//! `--alpha` (Bonferroni): each is run at α ÷ (number of metrics).
//!
//! A metric whose test cannot decide — a tail with too few requests to pin it down, a rank test
//! whose most extreme outcome would still not be significant (one or a few runs per side), no
//! records, no values on one side, a base of zero — is shown as not tested, with why. A
//! `--max-regress` gate on it is reported as untested in every format and on stderr, and the
//! comparison exits 2 unless `--allow-untested`: a gate that could not fire never passes.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::gate::{self, Breach, Threshold, Untested};
use super::matching::{self, Difference, Pair};
use super::metrics::{METRICS, Measure, MetricSpec};
use super::result::{LevelResult, MetricResult, Outcome, SCHEMA};
use super::stats::{self, CompareOptions, Comparison, Decision};
use super::{render, verify};
use crate::after_run::gather::{Gathered, LevelFile, gather_keeping};
use crate::results::aggregate::stats::quantile_ci_ranks;
use crate::results::artifact::Keep;

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
    /// A significant change smaller than this, in percent, is reported as noise.
    pub noise_pct: f64,
    pub format: CompareFormat,
    /// Accept gates that could not be tested (exit 0 rather than 2; they are still reported).
    pub allow_untested: bool,
}

/// Exit codes, as the run's: 0 nothing beyond a threshold, 3 a significant regression beyond one,
/// 2 a gate that could not be tested (without `--allow-untested`).
const OK: u8 = 0;
const UNTESTED: u8 = 2;
const REGRESSED: u8 = 3;

/// Run the comparison and print it. `Err` is bad input or incomparable sides (exit 2).
pub fn compare(req: &Request) -> Result<u8, String> {
    let thresholds = gate::parse(&req.max_regress, req.noise_pct)?;
    // Distributions are compared, nothing is drawn: the timelines are not kept.
    let base = gather_keeping(std::slice::from_ref(&req.base), Keep::Numbers).map_err(|e| format!("BASE: {e}"))?;
    let new = gather_keeping(std::slice::from_ref(&req.new), Keep::Numbers).map_err(|e| format!("NEW: {e}"))?;
    for note in base.notes.iter().chain(&new.notes) {
        eprintln!("note: {note}");
    }
    let outcome = outcome(req, &base, &new, &thresholds)?;
    let text = match req.format {
        CompareFormat::Text => render::text(&outcome),
        CompareFormat::Md => render::markdown(&outcome),
        CompareFormat::Json => {
            serde_json::to_string_pretty(&outcome).map_err(|e| format!("cannot write JSON: {e}"))? + "\n"
        }
    };
    print!("{text}");
    for b in &outcome.breaches {
        eprintln!("regression: {}", b.message);
    }
    for u in &outcome.untested_gates {
        eprintln!("untested: {}", crate::after_run::present::escape::terminal(&u.message));
    }
    if outcome.exit_code == UNTESTED {
        eprintln!(
            "error: {} --max-regress gate(s) could not be tested, so this comparison cannot pass them; give each side enough requests (or runs), drop those gates, or pass --allow-untested to accept them untested",
            outcome.untested_gates.len()
        );
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
    for pair in &matched.pairs {
        for (side, levels) in [("BASE", &pair.base), ("NEW", &pair.new)] {
            for l in levels.iter() {
                verify::check(l).map_err(|e| format!("{side}: {e}"))?;
            }
        }
    }
    let per_test_alpha = req.alpha / METRICS.len() as f64;
    let opts = CompareOptions {
        alpha: per_test_alpha,
        bootstrap: stats::BootstrapOptions { confidence: 1.0 - per_test_alpha, ..stats::BootstrapOptions::default() },
    };
    let mut levels = Vec::new();
    let mut breaches = Vec::new();
    let mut untested_gates = Vec::new();
    for pair in &matched.pairs {
        let level = compare_level(pair, &opts, req.noise_pct, thresholds);
        for m in level.metrics.iter().filter(|m| m.breached) {
            breaches.push(Breach::new(&level.level, m.metric, m.regression_pct, m.threshold_pct));
        }
        untested_gates.extend(untested_gates_of(&level, thresholds));
        levels.push(level);
    }
    // A level only one side has is a level no gate was evaluated at.
    for (labels, side) in [(&matched.only_base, "BASE"), (&matched.only_new, "NEW")] {
        for label in labels {
            for t in thresholds {
                let reason = format!("only {side} has this level, so nothing was compared there");
                untested_gates.push(Untested::new(label, t, &spec_of(t).key, reason));
            }
        }
    }
    let exit_code = if !breaches.is_empty() {
        REGRESSED
    } else if !untested_gates.is_empty() && !req.allow_untested {
        UNTESTED
    } else {
        OK
    };
    Ok(Outcome {
        schema: SCHEMA,
        base: req.base.display().to_string(),
        new: req.new.display().to_string(),
        alpha: req.alpha,
        per_test_alpha,
        noise_pct: req.noise_pct,
        forced: req.force,
        levels,
        only_base: matched.only_base,
        only_new: matched.only_new,
        ignored_differences: ignored,
        forced_differences: if req.force { material } else { Vec::new() },
        thresholds: thresholds.to_vec(),
        breaches,
        untested_gates,
        allow_untested: req.allow_untested,
        exit_code,
    })
}

fn spec_of(t: &Threshold) -> &'static MetricSpec {
    METRICS.iter().find(|m| m.name == t.metric).unwrap_or(&METRICS[0])
}

/// The gates of one level that its comparison could not evaluate: the metric was not tested, it
/// has no row (no values on a side), or its change in percent is undefined (a base of zero).
fn untested_gates_of(level: &LevelResult, thresholds: &[Threshold]) -> Vec<Untested> {
    let mut out = Vec::new();
    for t in thresholds {
        let spec = spec_of(t);
        let reason = match level.metrics.iter().find(|m| m.metric == spec.key) {
            None => Some("no values for it on at least one side".to_string()),
            Some(m) if m.untested.is_some() => m.untested.clone(),
            Some(m) if m.regression_pct.is_none() => {
                Some("the base value is 0, so a change in percent is undefined".to_string())
            }
            Some(_) => None,
        };
        if let Some(reason) = reason {
            out.push(Untested::new(&level.level, t, &spec.key, reason));
        }
    }
    out
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

fn compare_level(pair: &Pair<'_>, opts: &CompareOptions, noise_pct: f64, thresholds: &[Threshold]) -> LevelResult {
    let run_name = |l: &&LevelFile| l.artifact.run_id.clone();
    let mut metrics = Vec::new();
    for spec in METRICS.iter() {
        let Some((mut comparison, not_tested)) = compare_metric(spec.measure, &pair.base, &pair.new, opts) else {
            continue;
        };
        let untested = not_tested
            .or_else(|| too_few_for_the_tail(&comparison, opts))
            .or_else(|| rank_test_cannot_decide(&comparison, opts, per_run(spec.measure, pair)));
        if untested.is_some() {
            comparison.significant = false;
        }
        // Statistically real but smaller than what counts: the machine, not the build.
        let within_noise = comparison.significant && comparison.change_pct.is_some_and(|c| c.abs() < noise_pct);
        if within_noise {
            comparison.significant = false;
        }
        let regression_pct = comparison.change_pct.map(|c| if spec.higher_is_worse { c } else { -c });
        let threshold_pct = thresholds.iter().find(|t| t.metric == spec.name).map(|t| t.pct);
        let breached = comparison.significant && matches!((regression_pct, threshold_pct), (Some(r), Some(t)) if r > t);
        metrics.push(MetricResult {
            metric: &spec.key,
            regression_pct,
            threshold_pct,
            breached,
            untested,
            within_noise,
            comparison,
        });
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
    let needed = (1..=1_000_000).find(|&n| quantile_ci_ranks(n, c.percentile, confidence).is_some())?;
    (c.n_base < needed || c.n_new < needed).then(|| {
        format!("not tested: a p{} needs {needed} requests per side, n={}+{}", c.percentile, c.n_base, c.n_new)
    })
}

/// Whether a metric's test runs over one value per run (throughputs; every metric with several
/// runs on a side) rather than over requests.
fn per_run(measure: Measure, pair: &Pair<'_>) -> bool {
    matches!(measure, Measure::Total(_)) || pair.base.len() > 1 || pair.new.len() > 1
}

/// A rank test decides only when its most extreme outcome would be significant: with one run
/// per side (a throughput) the smallest p is 1, with three 0.1 — never below α ÷ 8.
fn rank_test_cannot_decide(c: &Comparison, opts: &CompareOptions, per_run: bool) -> Option<String> {
    if c.decision != Decision::RankTest || stats::smallest_p(c.n_base, c.n_new) < opts.alpha {
        return None;
    }
    let unit = if per_run { "runs" } else { "requests" };
    let needed = (1..=64).find(|&k| stats::smallest_p(k, k) < opts.alpha);
    let need = needed.map_or_else(String::new, |k| format!("; it needs {k} {unit} per side"));
    Some(format!("not tested: with n={}+{} {unit} no outcome reaches p<{:.4}{need}", c.n_base, c.n_new, opts.alpha))
}

/// One metric across the two sides' runs at one level, and why it is not tested when the
/// values are known without the records behind them.
fn compare_metric(
    measure: Measure,
    base: &[&LevelFile],
    new: &[&LevelFile],
    opts: &CompareOptions,
) -> Option<(Comparison, Option<String>)> {
    let without_records = base.iter().chain(new).any(|l| !verify::has_records(&l.artifact));
    let no_records = || "not tested: an artifact carries no per-request records".to_string();
    match measure {
        Measure::Percentile(metric, stat) => {
            let p = measure.percentile();
            // The kept values are sorted: the tests read them where they lie.
            fn runs<'a>(side: &[&'a LevelFile], metric: crate::contract::Metric) -> Vec<&'a [f64]> {
                side.iter().map(|l| l.artifact.values(metric)).collect()
            }
            let (b, n) = (runs(base, metric), runs(new, metric));
            let mut c = if b.len() == 1 && n.len() == 1 {
                stats::compare_samples(b[0], n[0], p, opts)
            } else {
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
                    (None, Some(sb), Some(sn)) => return Some((untested(p, sb, sn), Some(no_records()))),
                    _ => {}
                }
            }
            c.map(|c| (c, without_records.then(no_records)))
        }
        Measure::Total(total) => {
            let runs = |side: &[&LevelFile]| -> Option<Vec<[f64; 1]>> {
                side.iter().map(|l| l.artifact.value(total).map(|v| [v])).collect()
            };
            let (b, n) = (runs(base)?, runs(new)?);
            let (b, n): (Vec<&[f64]>, Vec<&[f64]>) =
                (b.iter().map(|v| v.as_slice()).collect(), n.iter().map(|v| v.as_slice()).collect());
            // Without records a stated throughput could not be checked (see `verify`).
            stats::compare_runs(&b, &n, measure.percentile(), opts).map(|c| (c, without_records.then(no_records)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::after_run::gather::gather;
    use crate::contract::{Metric, Stat};

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
            noise_pct: 0.0,
            format: CompareFormat::Json,
            allow_untested: false,
        }
    }

    #[test]
    fn several_runs_per_side_are_compared_by_their_runs() {
        let (base, new) = (copies(3), copies(2));
        let req = request(base.path(), new.path());
        let (b, n) =
            (gather(std::slice::from_ref(&req.base)).unwrap(), gather(std::slice::from_ref(&req.new)).unwrap());
        assert_eq!((b.runs.len(), n.runs.len()), (3, 2));
        let thresholds = gate::parse(&["ttft_p50=0".into()], 0.0).unwrap();
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
        // Three runs against two can never reach p < α ÷ 8: the gate was not tested, and says so.
        assert_eq!(o.exit_code, 2);
        let gates: Vec<(&str, &str)> = o.untested_gates.iter().map(|u| (u.level.as_str(), u.metric.as_str())).collect();
        assert_eq!(gates, [("c=2", "ttft_p50_ms"), ("c=6", "ttft_p50_ms")]);
        assert!(
            o.untested_gates[0].reason.contains("n=3+2 runs") && o.untested_gates[0].reason.contains("6 runs per side")
        );
        let text = render::text(&o);
        assert!(text.contains("c=2: 3 runs vs 2 runs") && text.contains("no verdict"), "{text}");
        let allowed = outcome(&Request { allow_untested: true, ..req.clone() }, &b, &n, &thresholds).unwrap();
        assert_eq!((allowed.exit_code, allowed.untested_gates.len()), (0, 2));
        assert!(!render::markdown(&allowed).contains('✅'), "{}", render::markdown(&allowed));
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
        assert!(render::markdown(&o).contains("| tpot\\_p99\\_ms |"), "{}", render::markdown(&o));
    }
}
