//! The box a report opens with, before any warning or table: the answer the run was made for.
//! For one level its headline (request and output throughput, TTFT and TPOT p50/p99, goodput,
//! validity); for a sweep or a capacity search the capacity and the level to run at, with every
//! objective of `[slo]` marked met (✓) or missed (✗) as k6 marks its thresholds. When the knee
//! and the capacity name different levels, the box says which answers what.

use super::doc::Answer;
use super::facts::{self, SweepPoint, level_label};
use crate::after_run::gather::{Run, RunKind};
use crate::contract::{Metric, Stat, Total};
use crate::numbers::{TimeUnit, rate};
use crate::plan::scenario::Bound;
use crate::results::aggregate::slo::SloResult;
use crate::results::artifact::ArtifactFile;

/// The answer of one run.
pub fn answer(run: &Run) -> Answer {
    let valid = facts::valid(run);
    let mut a = match run.kind {
        RunKind::Single => single(&run.levels[0].artifact),
        RunKind::Sweep | RunKind::Search => levels(run),
    };
    a.ok = a.ok && valid;
    a.facts.push(("valid".into(), validity(run, valid)));
    let first = &run.levels[0].artifact;
    if first.simulated() {
        // The simulator stands in for a server; nothing measured here describes one.
        a.notes.push(
            "Measured against the embedded simulator: these numbers describe the simulator, not a server; give --base-url to measure one."
                .into(),
        );
    }
    a
}

fn validity(run: &Run, valid: bool) -> String {
    if valid {
        return if run.levels.len() > 1 { format!("yes, all {} levels", run.levels.len()) } else { "yes".into() };
    }
    let bad = run
        .levels
        .iter()
        .filter(|l| {
            let a = &l.artifact;
            !a.validity.valid || a.interrupted || a.completed == 0 || facts::eligible(a) == 0
        })
        .count();
    if run.levels.len() > 1 {
        format!("no: {bad} of {} levels (see below)", run.levels.len())
    } else {
        "no (see below)".into()
    }
}

/// One level: its throughput is the headline, latencies and goodput beside it.
fn single(a: &ArtifactFile) -> Answer {
    let req = a.value(Total::RequestThroughputRps);
    let tok = a.value(Total::ThroughputTokS);
    let value = match (req, tok) {
        (Some(r), Some(t)) => format!("{} req/s · {} output tok/s", rate(r), rate(t)),
        _ => "no throughput (nothing completed)".into(),
    };
    let objectives = objectives(a);
    Answer {
        label: format!("at {}", level_label(a)),
        value,
        detail: format!(
            "{} requests, {} failed",
            crate::numbers::thousands(a.requests),
            crate::numbers::thousands(a.failed)
        ),
        facts: level_facts(a, false),
        ok: objectives.iter().all(|(met, _)| *met),
        objectives,
        ..Answer::default()
    }
}

/// A sweep or a search: the level to run at.
fn levels(run: &Run) -> Answer {
    let points = facts::sweep_points(&run.levels);
    let knee = facts::knee_of(&points);
    let with_objectives = run.levels.iter().any(|l| l.artifact.slo.as_ref().is_some_and(|s| !s.criteria.is_empty()));
    let by = run.search.as_ref().map_or_else(|| axis(&run.levels[0].artifact).to_string(), |s| s.by.clone());
    // The capacity: a search's own answer, else the highest valid level that met every objective.
    let capacity = match &run.search {
        Some(search) => search.best.and_then(|b| points.iter().position(|p| p.level == b)),
        None if with_objectives => points.iter().rposition(|p| p.slo_passed == Some(true) && p.valid),
        None => None,
    };
    let mut a = if let Some(c) = capacity {
        let at = &run.levels[c].artifact;
        let how = run
            .search
            .as_ref()
            .and_then(|s| s.finished.clone())
            .map_or_else(String::new, |f| format!("; search stopped: {f}"));
        Answer {
            label: "capacity".into(),
            value: points[c].label.clone(),
            detail: format!("the highest {by} that met every objective: run at {}{how}", points[c].label),
            facts: level_facts(at, true),
            objectives: objectives(at),
            ok: true,
            ..Answer::default()
        }
    } else if with_objectives {
        // Nothing met them: the objectives of the lightest level show how far off it was.
        let lightest = &run.levels[0].artifact;
        Answer {
            label: "capacity".into(),
            value: "none".into(),
            detail: format!("no {by} tried met every objective; the lightest level, {}, is shown", points[0].label),
            facts: level_facts(lightest, true),
            objectives: objectives(lightest),
            ok: false,
            ..Answer::default()
        }
    } else {
        let peak = peak(&points);
        let at = &run.levels[peak].artifact;
        Answer {
            label: "peak throughput".into(),
            value: format!("{} · {} output tok/s", points[peak].label, opt_rate(points[peak].tok_s)),
            detail: "no objectives were set ([slo] in the scenario), so no level is a capacity; the level with the most output is shown".into(),
            facts: level_facts(at, true),
            ok: true,
            ..Answer::default()
        }
    };
    a.notes.extend(knee_note(&points, knee, capacity));
    a
}

/// What the load levels are: concurrency or an arrival rate.
fn axis(a: &ArtifactFile) -> &'static str {
    if a.rate.is_some() { "rate" } else { "concurrency" }
}

fn peak(points: &[SweepPoint]) -> usize {
    points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.valid)
        .max_by(|a, b| a.1.tok_s.unwrap_or(0.0).total_cmp(&b.1.tok_s.unwrap_or(0.0)))
        .map_or(points.len() - 1, |(i, _)| i)
}

/// The knee beside the capacity: which one answers what, so the two never read as a contradiction.
pub fn knee_note(points: &[SweepPoint], knee: Option<usize>, capacity: Option<usize>) -> Option<String> {
    let k = knee?;
    let knee_label = &points[k].label;
    Some(match capacity {
        Some(c) if c > k => format!(
            "The knee, {knee_label}, is where latency starts to outgrow throughput; the capacity, {}, is the answer to the objectives: past the knee each added request costs more latency, but every objective still holds up to {}.",
            points[c].label, points[c].label
        ),
        Some(c) if c < k => format!(
            "The capacity, {}, is the answer to the objectives; the knee, {knee_label}, is where latency starts to outgrow throughput: the objectives bind before the server saturates.",
            points[c].label
        ),
        Some(_) => format!("The capacity is also the knee: past {knee_label} latency grows faster than throughput."),
        None => format!("Knee at {knee_label}: past it, latency grows faster than throughput."),
    })
}

pub fn opt_rate(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), rate)
}

/// The figures of a level, each in the unit its size calls for.
fn level_facts(a: &ArtifactFile, with_rates: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if with_rates {
        out.push(("request throughput".into(), format!("{} req/s", opt_rate(a.value(Total::RequestThroughputRps)))));
        out.push(("output throughput".into(), format!("{} tok/s", opt_rate(a.value(Total::ThroughputTokS)))));
    }
    for (name, metric) in [("TTFT", Metric::Ttft), ("TPOT", Metric::Tpot)] {
        if let Some(pair) = p50_p99(a, metric) {
            out.push((format!("{name} p50 / p99"), pair));
        }
    }
    if let Some(g) = a.value(Total::GoodputRps) {
        out.push(("goodput".into(), format!("{} req/s", rate(g))));
    }
    out
}

/// `5.88 / 8.61 ms`: one unit for both, from the larger.
pub fn p50_p99(a: &ArtifactFile, metric: Metric) -> Option<String> {
    let p50 = a.stat(metric, Stat::P50)?;
    let p99 = a.stat(metric, Stat::P99).unwrap_or(p50);
    let unit = TimeUnit::for_column([p50, p99]);
    Some(format!("{} / {} {}", unit.number(p50), unit.number(p99), unit.suffix()))
}

/// Every objective of a level, met or missed, with what was observed against the limit.
fn objectives(a: &ArtifactFile) -> Vec<(bool, String)> {
    let Some(slo) = &a.slo else { return Vec::new() };
    slo.criteria.iter().map(|c| (c.passed, objective_text(c))).collect()
}

/// An objective's observed value and limit in one unit, the observed value's, so the limit reads
/// beside it: `(346 ms, 2,000 ms)`, `(0.02, 0.01)`.
pub fn observed_and_limit(c: &SloResult) -> (String, String) {
    let observed = c.observed.unwrap_or(f64::NAN);
    if c.key.ends_with("_ms") {
        let unit = TimeUnit::for_column([if observed.is_finite() { observed } else { c.threshold }]);
        (unit.show(observed), unit.show(c.threshold))
    } else {
        (crate::numbers::significant(observed, 3), crate::numbers::significant(c.threshold, 3))
    }
}

fn objective_text(c: &SloResult) -> String {
    let sign = match c.bound {
        Bound::AtMost => "≤",
        Bound::AtLeast => "≥",
    };
    let (observed, limit) = observed_and_limit(c);
    format!("{}: {observed} {sign} {limit}", c.key)
}
