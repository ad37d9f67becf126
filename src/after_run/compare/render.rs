//! `compare`'s result for people: a benchstat-style text table, or the same as GitHub-flavoured
//! Markdown for a pull request or a CI summary. Both say the same things: what was compared,
//! every metric's row, the verdict, the breaches, and every gate that could not be tested. Every
//! string from the inputs (paths, run ids, scenario values) goes through one escaping function
//! per format (`present::escape`): a run id cannot start a heading, and ✅ is shown only when
//! every gate given was tested and none was breached.

use std::fmt::Write as _;

use super::format;
use super::metrics::METRICS;
use super::result::{LevelResult, Outcome};
use super::stats;
use crate::after_run::present::escape;

fn header(o: &Outcome) -> Vec<String> {
    let mut lines = vec![
        format!("base: {}", o.base),
        format!("new:  {}", o.new),
        format!(
            "significance: α={} per level, Bonferroni over {} metrics (each test at α={:.4}); ~ means no significant change, or one under the {}% --noise",
            o.alpha,
            METRICS.len(),
            o.per_test_alpha,
            o.noise_pct
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
            } else if m.within_noise {
                // The change and its evidence as a significant one would show them.
                let shown = format::row(m.metric, &stats::Comparison { significant: true, ..m.comparison.clone() });
                row.delta = format!("~ within noise: {}", shown.delta);
            }
            row
        })
        .collect()
}

/// How the verdict is marked in Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Every gate given was tested and none was breached.
    Passed,
    Breached,
    /// Some gate could not be tested (and none was breached).
    Untested,
    /// No gate was given.
    Ungated,
}

fn verdict(o: &Outcome) -> (Mark, String) {
    let untested = o.untested_gates.len();
    if !o.breaches.is_empty() {
        let mut v = format!("{} significant regression(s) beyond a --max-regress threshold", o.breaches.len());
        if untested > 0 {
            let _ = write!(v, "; {untested} gate(s) could not be tested");
        }
        (Mark::Breached, v)
    } else if untested > 0 {
        let v = if o.allow_untested {
            format!(
                "no significant regression beyond a --max-regress threshold among the gates tested; {untested} gate(s) could not be tested (accepted with --allow-untested)"
            )
        } else {
            format!("no verdict: {untested} --max-regress gate(s) could not be tested")
        };
        (Mark::Untested, v)
    } else if o.thresholds.is_empty() {
        (Mark::Ungated, "no --max-regress threshold given: nothing was gated".to_string())
    } else {
        (Mark::Passed, "no significant regression beyond a --max-regress threshold".to_string())
    }
}

pub fn text(o: &Outcome) -> String {
    let t = escape::terminal;
    let mut out = String::new();
    for line in header(o) {
        let _ = writeln!(out, "{}", t(&line));
    }
    for l in &o.levels {
        let rows: Vec<format::Row> = rows(l)
            .into_iter()
            .map(|r| format::Row { metric: t(&r.metric), base: t(&r.base), new: t(&r.new), delta: t(&r.delta) })
            .collect();
        let _ = write!(out, "\n{}\n{}", t(&level_heading(l)), format::table(&rows));
    }
    let _ = writeln!(out, "\n{}", verdict(o).1);
    for b in &o.breaches {
        let _ = writeln!(out, "  {}", t(&b.message));
    }
    if !o.untested_gates.is_empty() {
        let _ = writeln!(out, "untested gates:");
        for u in &o.untested_gates {
            let _ = writeln!(out, "  {}", t(&u.message));
        }
    }
    out
}

pub fn markdown(o: &Outcome) -> String {
    let md = escape::markdown;
    let mut out = String::from("## anvil-load compare\n\n");
    for line in header(o) {
        let _ = writeln!(out, "- {}", md(&line));
    }
    for l in &o.levels {
        let _ =
            write!(out, "\n### {}\n\n| metric | base | new | delta |\n|---|---:|---:|---|\n", md(&level_heading(l)));
        for r in rows(l) {
            let _ = writeln!(out, "| {} | {} | {} | {} |", md(&r.metric), md(&r.base), md(&r.new), md(&r.delta));
        }
    }
    let (mark, text) = verdict(o);
    let mark = match mark {
        Mark::Passed => "✅",
        Mark::Breached => "❌",
        Mark::Untested => "⚠️",
        Mark::Ungated => "ℹ️",
    };
    let _ = writeln!(out, "\n{mark} **{}**", md(&text));
    for b in &o.breaches {
        let _ = writeln!(out, "- {}", md(&b.message));
    }
    if !o.untested_gates.is_empty() {
        let _ = writeln!(out, "\n**Untested gates**\n");
        for u in &o.untested_gates {
            let _ = writeln!(out, "- {}", md(&u.message));
        }
    }
    out
}
