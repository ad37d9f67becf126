//! Sweeps and capacity searches: throughput against latency (TTFT and TPOT, p50 and p99,
//! against output tokens per second and requests per second) with the objectives drawn as
//! limits, goodput by level, the knee, and a search's probes and capacity point.

use super::answer::{self, opt_rate};
use super::doc::{Block, Cell, Figure, LegendEntry, Section, Swatch, Table, Tone};
use super::facts::{self, SweepPoint, num};
use super::svg::{Chart, LIMIT, MARK, Mark, PALETTE, Rule, Series};
use crate::after_run::gather::{Run, SearchTrace};
use crate::contract::{Metric, Stat, metric_key};
use crate::numbers::{self, TimeUnit};
use crate::results::artifact::ArtifactFile;

pub const KNEE_DEFINITION: &str = "The knee is where adding load stops buying throughput and starts buying latency: \
     with every valid level at (output tok/s, median end-to-end latency) in load order and both axes scaled to 0–1, it is the \
     level farthest below the straight line from the first level to the last (the Kneedle rule, Satopää et al. 2011). \
     Past it, latency grows faster than throughput: it is kept only when, from it to the last level, median latency \
     grew by a larger factor than throughput and by at least 10 %, so a linear sweep has none. No knee is marked with \
     fewer than three valid levels or when no level lies below that line.";

pub fn section(run: &Run, id: &str) -> Option<Section> {
    if run.levels.len() < 2 {
        return None;
    }
    let points = facts::sweep_points(&run.levels);
    let knee = facts::knee_of(&points);
    let capacity = run.search.as_ref().and_then(|s| s.best).and_then(|b| points.iter().position(|p| p.level == b));
    let first = &run.levels[0].artifact;
    let mut s = Section::new(id, "Throughput and latency");
    let mut summary = Vec::new();
    match knee {
        Some(k) => {
            let e2e = points[k].e2e_p50.map_or_else(|| "–".to_string(), numbers::duration_ms);
            summary.push(format!(
                "Knee at {}: {} output tok/s, {} req/s, median end-to-end {e2e}.",
                points[k].label,
                opt_rate(points[k].tok_s),
                opt_rate(points[k].req_s),
            ));
        }
        None => summary.push(
            "No knee: latency never grew faster than throughput across these levels (a linear sweep, or one that stopped short of saturation)."
                .into(),
        ),
    }
    if let Some(search) = &run.search {
        summary.push(capacity_sentence(search, &points, capacity));
        // Knee and capacity side by side: say which answers what.
        summary.extend(answer::knee_note(&points, knee, capacity).filter(|_| knee.is_some() && capacity.is_some()));
    }
    for line in summary {
        s.push(Block::Text(line));
    }
    let mut figures = Vec::new();
    for (x_name, x_slug, x_of) in [
        ("output throughput (tok/s)", "toks", (|p: &SweepPoint| p.tok_s) as fn(&SweepPoint) -> Option<f64>),
        ("request throughput (req/s)", "reqs", |p: &SweepPoint| p.req_s),
    ] {
        for (metric, name) in [(Metric::Ttft, "TTFT"), (Metric::Tpot, "TPOT")] {
            let fig = curve(first, &points, (x_name, x_slug, x_of), (metric, name), knee, capacity, id);
            figures.extend(fig);
        }
    }
    figures.extend(goodput(&points, capacity, run.search.is_some(), id));
    if let Some(search) = &run.search {
        figures.extend(probes(search, id));
    }
    s.push(Block::Figures(figures));
    s.push(Block::Table(table(&points, knee, capacity)));
    s.push(Block::Note(KNEE_DEFINITION.into()));
    if let Some(search) = &run.search {
        s.push(Block::Heading("Capacity search".into()));
        s.push(Block::Table(probe_table(search)));
    }
    Some(s)
}

fn capacity_sentence(search: &SearchTrace, points: &[SweepPoint], capacity: Option<usize>) -> String {
    let how = search.finished.as_deref().unwrap_or("finished");
    match (search.best, capacity) {
        (Some(_), Some(i)) => format!(
            "Capacity: {} is the highest {} that met every objective ({} output tok/s, goodput {} req/s); search stopped: {how}.",
            points[i].label,
            search.by,
            opt_rate(points[i].tok_s),
            opt_rate(points[i].goodput_rps)
        ),
        (Some(best), None) => format!("Capacity: {} {} met every objective ({how}).", search.by, num(best)),
        (None, _) => format!("Capacity: no {} probed met every objective ({how}).", search.by),
    }
}

type XOf = fn(&SweepPoint) -> Option<f64>;

fn curve(
    first: &ArtifactFile,
    points: &[SweepPoint],
    (x_name, x_slug, x_of): (&str, &str, XOf),
    (metric, name): (Metric, &str),
    knee: Option<usize>,
    capacity: Option<usize>,
    id: &str,
) -> Option<Figure> {
    type YOf = fn(&SweepPoint) -> Option<f64>;
    let (p50, p99): (YOf, YOf) = match metric {
        Metric::Ttft => (|p| p.ttft_p50, |p| p.ttft_p99),
        _ => (|p| p.tpot_p50, |p| p.tpot_p99),
    };
    let limits = [Stat::P50, Stat::P99].map(|stat| facts::objective(first, metric, stat));
    // One unit for the axis, from its largest value (a level's p99 or an objective).
    let unit = TimeUnit::for_column(points.iter().filter_map(p99).chain(limits.iter().flatten().copied()));
    let mut chart = Chart::new(x_name, format!("{name} ({})", unit.suffix()));
    chart.x_from_zero = true;
    let mut legend = Vec::new();
    let lines = [(Stat::P50, p50, PALETTE[0], "p50", limits[0]), (Stat::P99, p99, PALETTE[1], "p99", limits[1])];
    for (stat, y_of, color, label, limit) in lines {
        let xy: Vec<(f64, f64)> = points.iter().filter_map(|p| Some((x_of(p)?, unit.from_ms(y_of(p)?)))).collect();
        legend.push(LegendEntry { label: format!("{name} {label}"), color, shape: Swatch::Solid });
        chart.series.push(Series::new(format!("{name} {label}"), color, Mark::LineDots, xy));
        if let Some(limit) = limit {
            let key = metric_key(metric, stat);
            chart.h_rules.push(Rule {
                label: format!("objective {key} ≤ {}", unit.show(limit)),
                value: unit.from_ms(limit),
                color: LIMIT,
            });
            legend.push(LegendEntry { label: format!("objective {key}"), color: LIMIT, shape: Swatch::Dashed });
        }
    }
    marks(&mut chart, &mut legend, points, knee, capacity, x_of);
    let svg = chart.render()?;
    Some(Figure {
        id: format!("plot-{id}-{}-{x_slug}", name.to_lowercase()),
        title: format!("{name} against {}", x_name.split(" (").next().unwrap_or(x_name)),
        caption: format!("One point per level, in load order ({}).", label_range(points)),
        points: chart.points(),
        svg,
        legend,
    })
}

/// The knee and the capacity point as vertical lines at their x.
fn marks(
    chart: &mut Chart,
    legend: &mut Vec<LegendEntry>,
    points: &[SweepPoint],
    knee: Option<usize>,
    capacity: Option<usize>,
    x_of: XOf,
) {
    if let Some(x) = knee.and_then(|k| x_of(&points[k])) {
        let label = format!("knee {}", points[knee.unwrap_or(0)].label);
        chart.v_rules.push(Rule { label: label.clone(), value: x, color: MARK });
        legend.push(LegendEntry { label, color: MARK, shape: Swatch::Dashed });
    }
    if let Some(x) = capacity.and_then(|c| x_of(&points[c])) {
        let label = format!("capacity {}", points[capacity.unwrap_or(0)].label);
        chart.v_rules.push(Rule { label: label.clone(), value: x, color: PALETTE[2] });
        legend.push(LegendEntry { label, color: PALETTE[2], shape: Swatch::Dashed });
    }
}

fn label_range(points: &[SweepPoint]) -> String {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) => format!("{} to {}", a.label, b.label),
        _ => String::new(),
    }
}

/// Request throughput and goodput by level.
fn goodput(points: &[SweepPoint], capacity: Option<usize>, search: bool, id: &str) -> Option<Figure> {
    let mut chart = Chart::new("load level (concurrency or req/s)", "requests per second");
    chart.x_from_zero = true;
    let mut legend = Vec::new();
    let req: Vec<(f64, f64)> = points.iter().filter_map(|p| Some((p.level, p.req_s?))).collect();
    legend.push(LegendEntry { label: "request throughput".into(), color: PALETTE[0], shape: Swatch::Solid });
    chart.series.push(Series::new("request throughput", PALETTE[0], Mark::LineDots, req));
    let good: Vec<(f64, f64)> = points.iter().filter_map(|p| Some((p.level, p.goodput_rps?))).collect();
    let has_goodput = !good.is_empty();
    if has_goodput {
        legend.push(LegendEntry {
            label: "goodput (meeting every objective)".into(),
            color: PALETTE[2],
            shape: Swatch::Solid,
        });
        chart.series.push(Series::new("goodput", PALETTE[2], Mark::LineDots, good));
    }
    if let Some(c) = capacity.filter(|_| search) {
        let label = format!("capacity {}", points[c].label);
        chart.v_rules.push(Rule { label: label.clone(), value: points[c].level, color: PALETTE[2] });
        legend.push(LegendEntry { label, color: PALETTE[2], shape: Swatch::Dashed });
    }
    let svg = chart.render()?;
    Some(Figure {
        id: format!("plot-{id}-goodput"),
        title: if has_goodput { "Throughput and goodput by level".into() } else { "Throughput by level".into() },
        caption: if has_goodput {
            "Goodput counts the requests that met every per-request objective, per second of the measurement window."
                .into()
        } else {
            "No objectives were set, so there is no goodput.".into()
        },
        points: chart.points(),
        svg,
        legend,
    })
}

/// The probes of a search: which levels met the objectives, with the capacity point.
fn probes(search: &SearchTrace, id: &str) -> Option<Figure> {
    let mut chart = Chart::new(format!("{} probed", search.by), "goodput (req/s)");
    chart.x_from_zero = true;
    let met: Vec<(f64, f64)> =
        search.probes.iter().filter(|p| p.passed).map(|p| (p.level, p.goodput_rps.unwrap_or(0.0))).collect();
    let missed: Vec<(f64, f64)> =
        search.probes.iter().filter(|p| !p.passed).map(|p| (p.level, p.goodput_rps.unwrap_or(0.0))).collect();
    let legend = vec![
        LegendEntry { label: format!("met every objective ({})", met.len()), color: PALETTE[2], shape: Swatch::Solid },
        LegendEntry { label: format!("missed ({})", missed.len()), color: LIMIT, shape: Swatch::Cross },
    ];
    chart.series.push(Series::new("met", PALETTE[2], Mark::Dots, met));
    chart.series.push(Series::new("missed", LIMIT, Mark::Crosses, missed));
    if let Some(best) = search.best {
        chart.v_rules.push(Rule { label: format!("capacity {}", num(best)), value: best, color: PALETTE[2] });
    }
    let svg = chart.render()?;
    Some(Figure {
        id: format!("plot-{id}-probes"),
        title: "Capacity search probes".into(),
        caption: format!(
            "Each probe's goodput; the search doubled from {} and then bisected between the highest level that met every objective and the lowest that missed one, up to {}.",
            num(search.min),
            num(search.max)
        ),
        points: chart.points(),
        svg,
        legend,
    })
}

fn table(points: &[SweepPoint], knee: Option<usize>, capacity: Option<usize>) -> Table {
    // One time unit per latency column, from its largest value, named in its heading.
    type Of = fn(&SweepPoint) -> Option<f64>;
    let latencies: [(&str, Of); 4] = [
        ("TTFT p50", |p| p.ttft_p50),
        ("TTFT p99", |p| p.ttft_p99),
        ("TPOT p50", |p| p.tpot_p50),
        ("TPOT p99", |p| p.tpot_p99),
    ];
    let units: Vec<TimeUnit> =
        latencies.iter().map(|(_, of)| TimeUnit::for_column(points.iter().filter_map(of))).collect();
    let mut head: Vec<String> =
        ["level", "note", "requests", "failed", "req/s", "output tok/s"].iter().map(|h| h.to_string()).collect();
    head.extend(latencies.iter().zip(&units).map(|((name, _), u)| format!("{name} ({})", u.suffix())));
    head.extend(["goodput req/s", "objectives", "valid"].iter().map(|h| h.to_string()));
    let mut t = Table { head, rows: Vec::new(), numeric_from: 2 };
    for (i, p) in points.iter().enumerate() {
        let mut note = Vec::new();
        if knee == Some(i) {
            note.push("knee");
        }
        if capacity == Some(i) {
            note.push("capacity");
        }
        let tone = if note.is_empty() { Tone::Plain } else { Tone::Marked };
        let mut row = vec![
            Cell::from(p.label.clone()),
            Cell::toned(note.join(", "), tone),
            Cell::from(numbers::thousands(p.requests)),
            Cell::toned(numbers::thousands(p.failed), if p.failed > 0 { Tone::Bad } else { Tone::Plain }),
            Cell::from(opt_rate(p.req_s)),
            Cell::from(opt_rate(p.tok_s)),
        ];
        for ((_, of), unit) in latencies.iter().zip(&units) {
            row.push(Cell::from(of(p).map_or_else(|| "–".to_string(), |v| unit.number(v))));
        }
        row.extend([
            Cell::from(opt_rate(p.goodput_rps)),
            match p.slo_passed {
                Some(true) => Cell::toned("met", Tone::Good),
                Some(false) => Cell::toned("missed", Tone::Bad),
                None => Cell::from("–"),
            },
            if p.valid { Cell::toned("yes", Tone::Good) } else { Cell::toned("NO", Tone::Bad) },
        ]);
        t.row(row);
    }
    t
}

fn probe_table(search: &SearchTrace) -> Table {
    let mut t = Table::new(&["step", search.by.as_str(), "objectives", "goodput req/s"], 1);
    for (i, p) in search.probes.iter().enumerate() {
        let capacity = search.best == Some(p.level);
        t.row(vec![
            Cell::from((i + 1).to_string()),
            Cell::toned(num(p.level), if capacity { Tone::Marked } else { Tone::Plain }),
            if p.passed { Cell::toned("met", Tone::Good) } else { Cell::toned("missed", Tone::Bad) },
            Cell::from(opt_rate(p.goodput_rps)),
        ]);
    }
    t
}
