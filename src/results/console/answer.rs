//! The answer a run of several levels (a sweep, a capacity search) opens with: the capacity and
//! the level to run at, with every objective marked ✓/✗ as k6 marks thresholds; for a sweep
//! without objectives, the best valid level by throughput; and the knee, where latency starts to
//! outgrow throughput (`results::knee`, the report's rule too). Then, after the table, each kind
//! of warning once.

use std::fmt::Write as _;

use serde::Serialize;

use crate::contract::{Metric, Stat};
use crate::numbers::{self, TimeUnit};
use crate::plan::search::CapacitySearch;
use crate::results::aggregate::summary::LevelSummary;
use crate::results::aggregate::warning_groups;
use crate::results::knee::knee_among;

use super::level::{boxed, objective_mark, validity};

/// What the run answers, and how it was chosen.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// How the level to run at is chosen: `search` (a capacity search's best), `slo` (the highest
    /// level meeting every objective with a valid measurement), `throughput` (no objectives: the
    /// valid level with the most throughput).
    pub basis: &'static str,
    /// `concurrency` or `rate`.
    pub by: &'static str,
    /// The highest level meeting every objective (search or SLO basis), as its number.
    pub capacity: Option<f64>,
    /// The level to run at (its label, `c=8`, and its index in the run's levels); none when no
    /// level qualifies.
    pub level: Option<String>,
    #[serde(skip)]
    pub at: Option<usize>,
    /// The knee: the level past which latency (E2E p50) grows faster than output throughput, by
    /// the rule of `results::knee` over the valid levels; none on a curve without one.
    pub knee: Option<String>,
    /// The knee's index, and the highest valid level it is measured against.
    #[serde(skip)]
    knee_at: Option<(usize, usize)>,
    /// Why a capacity search ended.
    pub search_finished: Option<&'static str>,
}

/// Whether a level's figures stand: measured, valid, not interrupted.
fn usable(a: &LevelSummary) -> bool {
    validity(a) == "valid"
}

/// The run's answer from its levels (in the order they ran) and its search, if any.
pub fn answer(levels: &[&LevelSummary], search: Option<&CapacitySearch>) -> Answer {
    let open = levels.iter().any(|a| a.load.rate.is_some());
    let by = match search {
        Some(s) => super::sweep::search_by(s),
        None if open => "rate",
        None => "concurrency",
    };
    // The levels by load, lowest first (a search probes out of order).
    let mut order: Vec<usize> = (0..levels.len()).collect();
    order.sort_by(|&i, &j| levels[i].pacing.level().total_cmp(&levels[j].pacing.level()));
    let highest = |pass: &dyn Fn(&LevelSummary) -> bool| order.iter().rev().copied().find(|&i| pass(levels[i]));
    let (basis, at, capacity) = if let Some(s) = search {
        let at = s.best.and_then(|best| highest(&|a| a.pacing.level() == best));
        ("search", at, s.best)
    } else if levels.iter().any(|a| a.slo.is_some()) {
        let at = highest(&|a| usable(a) && a.slo.as_ref().is_some_and(|r| r.passed));
        ("slo", at, at.map(|i| levels[i].pacing.level()))
    } else {
        let throughput = |a: &LevelSummary| match &a.unstreamed {
            Some(u) => u.input_throughput_tok_s,
            None => a.rates.throughput_tok_s,
        };
        let best = order
            .iter()
            .copied()
            .filter(|&i| usable(levels[i]))
            .filter_map(|i| throughput(levels[i]).map(|t| (i, t)))
            // The lowest level of equal throughput: more load buys nothing there.
            .fold(None::<(usize, f64)>, |best, (i, t)| match best {
                Some((_, b)) if b >= t => best,
                _ => Some((i, t)),
            });
        ("throughput", best.map(|(i, _)| i), None)
    };
    let knee_at = knee_at(levels, &order);
    Answer {
        basis,
        by,
        capacity,
        level: at.map(|i| levels[i].pacing.label()),
        at,
        knee: knee_at.map(|(k, _)| levels[k].pacing.label()),
        knee_at,
        search_finished: search.map(|s| s.finished.unwrap_or("done")),
    }
}

/// The knee among the levels by load (output tok/s, E2E p50 of the usable ones), and the highest
/// usable level, which the growth past the knee is measured to.
fn knee_at(levels: &[&LevelSummary], order: &[usize]) -> Option<(usize, usize)> {
    let point = |i: usize| {
        let a = levels[i];
        let tok_s = a.rates.throughput_tok_s?;
        let e2e = a.distributions.stat(Metric::E2e, Stat::P50)?;
        usable(a).then_some((tok_s, e2e))
    };
    let points: Vec<Option<(f64, f64)>> = order.iter().map(|&i| point(i)).collect();
    let k = knee_among(&points)?;
    let last = (0..points.len()).rev().find(|&j| points[j].is_some())?;
    Some((order[k], order[last]))
}

/// `c=8 · 192 req/s · 6,124 output tok/s · TTFT p50 30.6 ms · p99 59.8 ms`.
fn headline(a: &LevelSummary) -> String {
    let mut parts = vec![super::level::name(a)];
    parts.push(format!("{} req/s", a.rates.request_throughput_rps.map_or_else(|| "–".to_string(), numbers::rate)));
    if let Some(g) = a.rates.goodput.and_then(|g| g.rps) {
        parts.push(format!("goodput {} req/s", numbers::rate(g)));
    }
    let (metric, name) = match &a.unstreamed {
        Some(u) => {
            parts.push(format!(
                "{} input tok/s",
                u.input_throughput_tok_s.map_or_else(|| "–".to_string(), numbers::rate)
            ));
            (Metric::E2e, "E2E")
        }
        None => {
            parts.push(format!(
                "{} output tok/s",
                a.rates.throughput_tok_s.map_or_else(|| "–".to_string(), numbers::rate)
            ));
            (Metric::Ttft, "TTFT")
        }
    };
    let (p50, p99) = (a.distributions.stat(metric, Stat::P50), a.distributions.stat(metric, Stat::P99));
    let unit = TimeUnit::for_column([p50, p99].into_iter().flatten());
    let show = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| unit.show(v));
    parts.push(format!("{name} p50 {} · p99 {}", show(p50), show(p99)));
    parts.join(" · ")
}

/// The answer box of a run of several levels.
pub fn run_answer(levels: &[&LevelSummary], answer: &Answer, title: &str) -> String {
    let mut lines = Vec::new();
    let by = answer.by;
    let label = |level: f64| match by {
        "rate" => format!("{} req/s", numbers::significant(level, 6)),
        _ => format!("c={}", numbers::significant(level, 6)),
    };
    match (answer.basis, answer.at) {
        ("search", _) => {
            let finished = answer.search_finished.unwrap_or("done");
            match answer.capacity {
                Some(best) => lines.push(format!(
                    "capacity {}: the highest {by} meeting every SLO (search {finished}, {} probes)",
                    label(best),
                    levels.len()
                )),
                None => {
                    lines.push(format!("no {by} probed met every SLO (search {finished}, {} probes)", levels.len()))
                }
            }
        }
        ("slo", Some(i)) => lines.push(format!(
            "capacity {}: the highest {by} meeting every SLO with a valid measurement",
            levels[i].pacing.label()
        )),
        ("throughput", Some(_)) => {}
        ("throughput", None) => {
            lines.push(format!("no level has a valid measurement ({} levels): nothing to answer with", levels.len()));
        }
        _ => lines.push(format!("no level met every SLO with a valid measurement ({} levels)", levels.len())),
    }
    match answer.at {
        Some(i) => {
            let verb = if answer.basis == "throughput" { "best throughput" } else { "run at" };
            lines.push(format!("{verb}: {} · {}", headline(levels[i]), validity(levels[i])));
            if let Some(slo) = &levels[i].slo {
                lines.extend(slo.criteria.iter().map(|c| format!("  {}", objective_mark(c))));
            }
        }
        None => {
            // Nothing passed: what the lowest level missed says how far off the objectives are.
            if let Some(lowest) = levels.iter().min_by(|a, b| a.pacing.level().total_cmp(&b.pacing.level())) {
                if let Some(slo) = &lowest.slo {
                    let missed = slo.criteria.iter().filter(|c| !c.passed).map(objective_mark);
                    lines.extend(missed.map(|m| format!("  at {}: {m}", lowest.pacing.label())));
                }
            }
        }
    }
    // The next level up that missed: what broke there.
    if let (Some(i), true) = (answer.at, answer.basis != "throughput") {
        let next = levels
            .iter()
            .filter(|a| a.pacing.level() > levels[i].pacing.level())
            .min_by(|a, b| a.pacing.level().total_cmp(&b.pacing.level()));
        // An unusable level is named below; one that missed says what it missed.
        if let Some((next, slo)) = next.and_then(|n| n.slo.as_ref().map(|slo| (n, slo))).filter(|(_, s)| !s.passed) {
            let missed: Vec<String> = slo.criteria.iter().filter(|c| !c.passed).map(objective_mark).collect();
            lines.push(format!("  at {}: {}", next.pacing.label(), missed.join(" · ")));
        }
    }
    match answer.knee_at {
        Some((i, j)) => {
            let (a, b) = (levels[i], levels[j]);
            let change = |new: Option<f64>, old: Option<f64>| match (new, old) {
                (Some(n), Some(o)) if o > 0.0 => format!("{:+.0}%", (n / o - 1.0) * 100.0),
                _ => "–".to_string(),
            };
            lines.push(format!(
                "knee at {}: from there to {}, E2E p50 {} for {} output tok/s",
                a.pacing.label(),
                b.pacing.label(),
                change(b.distributions.stat(Metric::E2e, Stat::P50), a.distributions.stat(Metric::E2e, Stat::P50)),
                change(b.rates.throughput_tok_s, a.rates.throughput_tok_s)
            ));
        }
        // Said only where there was a curve to look at: three valid levels or more.
        None if answer.basis == "throughput" && levels.iter().filter(|a| usable(a)).count() > 2 => {
            lines.push("no knee: latency never grew faster than throughput across the valid levels".to_string());
        }
        None => {}
    }
    let invalid: Vec<String> =
        levels.iter().filter(|a| !usable(a)).map(|a| format!("{} ({})", a.pacing.label(), validity(a))).collect();
    if !invalid.is_empty() {
        lines.push(format!("not counted: {}", invalid.join(", ")));
    }
    if answer.basis == "throughput" {
        lines.push("no [slo] objectives: add them (e.g. ttft_p99_ms) for a capacity answer".to_string());
    }
    boxed(title, &lines)
}

/// Each kind of warning once, most important first, with the levels it applies to (`at every
/// level` when all); the full text of its first occurrence.
pub fn grouped_warnings(levels: &[&LevelSummary]) -> String {
    let labels: Vec<String> = levels.iter().map(|a| a.pacing.label()).collect();
    let raised: Vec<(String, &'static str, String)> = levels
        .iter()
        .zip(&labels)
        .flat_map(|(a, label)| a.warnings.iter().map(move |w| (label.clone(), w.code(), w.message())))
        .collect();
    let groups = warning_groups::grouped(raised.iter().map(|(l, c, m)| (l.as_str(), *c, m.as_str())), levels.len());
    let mut s = String::new();
    for g in groups {
        let scope = if g.every_level { "at every level".to_string() } else { format!("at {}", g.levels.join(", ")) };
        let _ = writeln!(s, "warning: {} ({scope})", g.message);
    }
    s
}
