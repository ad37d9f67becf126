//! Two or more runs in one report (`report BASE NEW [MORE…]`): what each run answers, side by
//! side; the latency distributions of every run on one axis per metric (TTFT, TPOT, end-to-end);
//! and per level the runs share, each later run against the first (BASE) in percent, coloured by
//! better or worse. Each run's own sections follow.
//!
//! Runs are told apart by where they were found: the path given on the command line that holds
//! them (its last component: `results/h100-vllm` → `h100-vllm`), with the run id added when one
//! path holds several runs or two paths end alike. The first path's first run is BASE.

use std::path::PathBuf;

use super::answer;
use super::doc::{Block, Cell, Figure, Section, Table, Tone};
use super::run::{add_line, cdf_series};
use super::svg::{Chart, PALETTE};
use crate::after_run::gather::{Gathered, LevelFile, Run, level_label};
use crate::contract::{Metric, Stat, Total};
use crate::numbers::TimeUnit;

/// A name per run, from the path it was found under (see the module's note).
pub fn names(g: &Gathered, paths: &[PathBuf]) -> Vec<String> {
    let base = |r: &Run| {
        paths
            .get(r.source)
            .map(|p| {
                let name = p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
                name.strip_suffix(".json").map(str::to_string).unwrap_or(name)
            })
            .unwrap_or_else(|| r.run_id.clone())
    };
    let first: Vec<String> = g.runs.iter().map(base).collect();
    g.runs
        .iter()
        .zip(&first)
        .map(|(r, name)| {
            let shared = first.iter().filter(|n| *n == name).count() > 1;
            if shared && *name != r.run_id { format!("{name} ({})", r.run_id) } else { name.clone() }
        })
        .collect()
}

/// The sections that open a report of several runs.
pub fn sections(g: &Gathered, names: &[String]) -> Vec<Section> {
    let mut s = Section::new("runs", "Runs side by side");
    s.push(Block::Table(answers(g, names)));
    s.push(Block::Note(format!(
        "BASE is {}, the first path given; every other run is compared with it. Runs are named by the path they were found under.",
        names[0]
    )));
    let base = &g.runs[0];
    for (run, name) in g.runs.iter().zip(names).skip(1) {
        let (table, matched) = deltas(base, run);
        if matched == 0 {
            s.push(Block::Note(format!(
                "{name} shares no level with {}: no level to compare (levels are matched by concurrency or rate).",
                names[0]
            )));
            continue;
        }
        s.push(Block::Heading(format!("{name} against {} (BASE)", names[0])));
        s.push(Block::Table(table));
    }
    s.push(Block::Note(
        "Differences in percent of BASE: green where NEW is better (more throughput, less latency), red where worse. They are not significance-tested here; anvil-load compare BASE NEW tests them and can gate on them."
            .into(),
    ));
    let mut sections = vec![s];
    let figures = cdfs(g, names);
    if !figures.is_empty() {
        let mut f = Section::new("runs-distributions", "Latency distributions of the runs");
        f.push(Block::Figures(figures));
        sections.push(f);
    }
    sections
}

/// One row per run: what it is and what it answers.
fn answers(g: &Gathered, names: &[String]) -> Table {
    // Text throughout: no column is right-aligned.
    let mut t = Table::new(&["run", "", "levels", "answer", "run id"], 5);
    for (i, (run, name)) in g.runs.iter().zip(names).enumerate() {
        let a = answer::answer(run);
        let levels: Vec<String> = run.levels.iter().map(|l| level_label(&l.artifact)).collect();
        t.row(vec![
            Cell::from(name.clone()),
            Cell::from(if i == 0 { "BASE" } else { "NEW" }),
            Cell::from(levels.join(", ")),
            Cell::toned(format!("{} {}", a.label, a.value), if a.ok { Tone::Plain } else { Tone::Bad }),
            Cell::from(run.run_id.clone()),
        ]);
    }
    t
}

/// What a delta column reads, and whether more is better.
struct Column {
    name: &'static str,
    of: fn(&LevelFile) -> Option<f64>,
    higher_is_better: bool,
}

const COLUMNS: [Column; 8] = [
    Column { name: "req/s", of: |l| l.artifact.value(Total::RequestThroughputRps), higher_is_better: true },
    Column { name: "output tok/s", of: |l| l.artifact.value(Total::ThroughputTokS), higher_is_better: true },
    Column { name: "TTFT p50", of: |l| l.artifact.stat(Metric::Ttft, Stat::P50), higher_is_better: false },
    Column { name: "TTFT p99", of: |l| l.artifact.stat(Metric::Ttft, Stat::P99), higher_is_better: false },
    Column { name: "TPOT p50", of: |l| l.artifact.stat(Metric::Tpot, Stat::P50), higher_is_better: false },
    Column { name: "TPOT p99", of: |l| l.artifact.stat(Metric::Tpot, Stat::P99), higher_is_better: false },
    Column { name: "E2E p50", of: |l| l.artifact.stat(Metric::E2e, Stat::P50), higher_is_better: false },
    Column { name: "E2E p99", of: |l| l.artifact.stat(Metric::E2e, Stat::P99), higher_is_better: false },
];

/// Below this change (in %) a difference is shown but not coloured: run-to-run noise.
const NOISE_PCT: f64 = 1.0;

/// NEW against BASE at every level both have: the table and how many levels matched.
fn deltas(base: &Run, new: &Run) -> (Table, usize) {
    let mut head = vec!["level"];
    head.extend(COLUMNS.iter().map(|c| c.name));
    let mut t = Table::new(&head, 1);
    let mut matched = 0;
    for b in &base.levels {
        let label = level_label(&b.artifact);
        let Some(n) = new.levels.iter().find(|n| level_label(&n.artifact) == label) else { continue };
        matched += 1;
        let mut row = vec![Cell::from(label)];
        for c in &COLUMNS {
            row.push(match ((c.of)(b), (c.of)(n)) {
                (Some(x), Some(y)) if x > 0.0 && x.is_finite() && y.is_finite() => {
                    let pct = (y - x) / x * 100.0;
                    let better = if c.higher_is_better { pct > 0.0 } else { pct < 0.0 };
                    let tone = if pct.abs() < NOISE_PCT {
                        Tone::Plain
                    } else if better {
                        Tone::Good
                    } else {
                        Tone::Bad
                    };
                    // Under a twentieth of a percent is no change, not `-0.0 %`.
                    let text = if pct.abs() < 0.05 { "0.0 %".to_string() } else { format!("{pct:+.1} %") };
                    Cell::toned(text, tone)
                }
                _ => Cell::from("–"),
            });
        }
        t.row(row);
    }
    (t, matched)
}

/// One CDF per metric, every run's levels on it: coloured by run when each run is one level,
/// else by level with BASE solid and the other runs dashed.
fn cdfs(g: &Gathered, names: &[String]) -> Vec<Figure> {
    let single = g.runs.iter().all(|r| r.levels.len() == 1);
    let mut labels: Vec<(f64, String)> = g.levels().map(|l| (l.artifact.level(), level_label(&l.artifact))).collect();
    labels.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    labels.dedup_by(|a, b| a.1 == b.1);
    let mut out = Vec::new();
    for (metric, name, slug) in
        [(Metric::Ttft, "TTFT", "ttft"), (Metric::Tpot, "TPOT", "tpot"), (Metric::E2e, "End-to-end latency", "e2e")]
    {
        let unit = TimeUnit::for_column(g.levels().flat_map(|l| l.artifact.values(metric).iter().copied()));
        let mut chart = Chart::new(format!("{name} ({})", unit.suffix()), "requests at or below (%)");
        chart.y_range = Some((0.0, 100.0));
        let mut legend = Vec::new();
        for (r, (run, run_name)) in g.runs.iter().zip(names).enumerate() {
            for l in &run.levels {
                let label = level_label(&l.artifact);
                let index = if single { r } else { labels.iter().position(|(_, x)| *x == label).unwrap_or(0) };
                let color = PALETTE[index % PALETTE.len()];
                let series_name = if single { run_name.clone() } else { format!("{run_name} {label}") };
                let mut series = cdf_series(&l.artifact, metric, unit, series_name, color);
                if !single && r > 0 {
                    series = series.dashed();
                }
                add_line(&mut chart, &mut legend, series);
            }
        }
        let Some(svg) = chart.render() else { continue };
        out.push(Figure {
            id: format!("plot-runs-{slug}-cdf"),
            title: format!("{name}: every run"),
            caption: if single {
                "One line per run, from its records.".into()
            } else {
                "One line per run and level: the colour is the level, BASE solid, the other runs dashed.".into()
            },
            points: chart.points(),
            svg,
            legend,
        });
    }
    out
}
