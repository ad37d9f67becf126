//! The sections every run gets: overview (verdict, warnings, provenance), headline tables,
//! latency distributions, TTFT per request over time, and per level the canaries, failures,
//! steady state and the server's own metrics.

use super::answer;
use super::doc::{Block, Cell, Figure, LegendEntry, Section, Swatch, Table, Tone};
use super::facts::{self, level_label, num};
use super::svg::{self, Chart, Mark, PALETTE, Series};
use crate::after_run::gather::{LevelFile, Run, RunKind};
use crate::contract::{Metric, Total};
use crate::numbers;
use crate::results::artifact::ArtifactFile;

/// Points a scatter plot draws at most (failures always drawn).
const MAX_DOTS: usize = 5000;
/// Points per CDF line.
const CDF_POINTS: usize = 600;

pub const PERCENTILE_METHOD: &str = "Percentiles are nearest-rank over every eligible request: the value at rank ⌈p·n/100⌉ \
     of the sorted sample, no interpolation and no histogram. CI95 is the distribution-free order-statistic interval \
     [x(l), x(u)] that covers the true percentile with at least 95 % probability (binomial); \"–\" where the sample is \
     too small for one (a p99 needs a few hundred requests).";

pub fn overview(run: &Run, id: &str, title: &str) -> Section {
    let mut s = Section::new(id, title);
    // The answer first, before the verdict, the warnings and everything else.
    s.push(Block::Answer(answer::answer(run)));
    let reasons = facts::invalid_reasons(run);
    let target = if run.levels[0].artifact.simulated() { "the simulator" } else { "the server" };
    if !facts::valid(run) || !reasons.is_empty() {
        let text = format!("Not valid: the numbers do not describe {target} under the planned load (see why below).");
        s.push(Block::Verdict { ok: false, text });
        s.push(Block::List(reasons));
    }
    let mut status: Vec<(String, String)> = Vec::new();
    for l in &run.levels {
        let a = &l.artifact;
        let eligible = if a.performance_eligible {
            "every request succeeded and is in the distributions".to_string()
        } else {
            // Failed and excluded requests alike, with their reasons: a level can lose every
            // request to its canaries without a single failure.
            let out = a.requests.saturating_sub(facts::eligible(a));
            let why = facts::left_out(a);
            let why = if why.is_empty() { String::new() } else { format!(": {why}") };
            format!("{out} of {} requests failed or were left out of the distributions{why}", a.requests)
        };
        let slo = match &a.slo {
            Some(slo) if !slo.criteria.is_empty() => {
                let missed: Vec<String> = slo
                    .criteria
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| {
                        let (observed, limit) = answer::observed_and_limit(c);
                        format!("{} (observed {observed}, limit {limit})", c.key)
                    })
                    .collect();
                if missed.is_empty() {
                    "; every objective met".to_string()
                } else {
                    format!("; missed {}", missed.join(", "))
                }
            }
            _ => String::new(),
        };
        status.push((level_label(a), format!("{eligible}{slo}")));
    }
    s.push(Block::List(status_lines(status)));
    let warnings = facts::warnings(run);
    if !warnings.is_empty() {
        let kinds = if warnings.len() == 1 { "1 kind".to_string() } else { format!("{} kinds", warnings.len()) };
        s.push(Block::Heading(format!("Methodology warnings ({kinds})")));
        s.push(Block::WarningGroups(warnings));
    }
    s.push(Block::Heading("Provenance".into()));
    s.push(Block::Facts(facts::provenance(run)));
    s
}

/// Per level `label: status`, levels saying the same thing on one line (`every level: …` when
/// all do), in the order first seen.
fn status_lines(status: Vec<(String, String)>) -> Vec<String> {
    if status.len() == 1 {
        return status.into_iter().map(|(_, t)| t).collect();
    }
    let mut groups: Vec<(Vec<String>, String)> = Vec::new();
    for (label, text) in &status {
        match groups.iter_mut().find(|(_, t)| t == text) {
            Some((labels, _)) => labels.push(label.clone()),
            None => groups.push((vec![label.clone()], text.clone())),
        }
    }
    if groups.len() == 1 {
        return vec![format!("every level: {}", groups[0].1)];
    }
    groups.into_iter().map(|(labels, text)| format!("{}: {text}", labels.join(", "))).collect()
}

/// The headline table of one level, the method note, and its rates.
pub fn headline(a: &ArtifactFile) -> Vec<Block> {
    if facts::eligible(a) == 0 {
        // Nothing is in the distributions: say so, and state no figure that is not there.
        return vec![
            Block::Note(format!(
                "No request is in the distributions ({}): there is no latency or throughput figure for this level.",
                facts::left_out(a)
            )),
            Block::Facts(vec![(
                "requests".to_string(),
                format!("{} attempted, {} completed, {} failed", a.requests, a.completed, a.failed),
            )]),
        ];
    }
    let mut t = Table::new(&["distribution", "samples", "mean", "p50", "p50 CI95", "p90", "p99", "p99 CI95", "max"], 1);
    for r in facts::headline(a) {
        if r.samples == 0 {
            continue;
        }
        t.row(headline_row(&r));
    }
    let mut rates = vec![
        ("requests".to_string(), format!("{} attempted, {} completed, {} failed", a.requests, a.completed, a.failed)),
        ("output throughput".to_string(), format!("{} tok/s", opt_rate(a.value(Total::ThroughputTokS)))),
        ("request throughput".to_string(), format!("{} req/s", opt_rate(a.value(Total::RequestThroughputRps)))),
        ("wall clock".to_string(), numbers::duration_ms(a.wall_clock_ms)),
    ];
    if let Some(g) = a.value(Total::GoodputRps) {
        rates.push(("goodput (requests meeting every objective)".into(), format!("{} req/s", numbers::rate(g))));
    }
    if let (Some(rate), Some(achieved)) = (a.rate, a.achieved_rate) {
        rates.push((
            "arrival rate".into(),
            format!("planned {} req/s, achieved {} req/s", numbers::rate(rate), numbers::rate(achieved)),
        ));
    }
    rates.push(("peak in flight".into(), a.peak_in_flight.to_string()));
    vec![Block::Table(t), Block::Note(PERCENTILE_METHOD.into()), Block::Facts(rates)]
}

fn opt_rate(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), numbers::rate)
}

/// One distribution's row: a latency in one unit for the whole row, chosen from its largest
/// value and named in the label (`TTFT (s)`); token counts as counts.
fn headline_row(r: &facts::HeadlineRow) -> Vec<Cell> {
    let ms = r.label.ends_with("(ms)");
    let (label, show): (String, Box<dyn Fn(f64) -> String>) = if ms {
        let values = [r.mean, r.p50, r.p90, r.p99, r.max].into_iter().flatten();
        let ci = [r.p50_ci, r.p99_ci].into_iter().flatten().flat_map(|(lo, hi)| [lo, hi]);
        let unit = numbers::TimeUnit::for_column(values.chain(ci));
        let label = format!("{}({})", r.label.trim_end_matches("(ms)"), unit.suffix());
        (label, Box::new(move |v| unit.number(v)))
    } else {
        (r.label.to_string(), Box::new(numbers::count))
    };
    let opt = |v: Option<f64>| v.map_or_else(|| "–".to_string(), &show);
    let ci =
        |c: Option<(f64, f64)>| c.map_or_else(|| "–".to_string(), |(lo, hi)| format!("{} – {}", show(lo), show(hi)));
    vec![
        Cell::from(label),
        Cell::from(numbers::thousands(r.samples)),
        Cell::from(opt(r.mean)),
        Cell::from(opt(r.p50)),
        Cell::from(ci(r.p50_ci)),
        Cell::from(opt(r.p90)),
        Cell::from(opt(r.p99)),
        Cell::from(ci(r.p99_ci)),
        Cell::from(opt(r.max)),
    ]
}

/// CDFs of TTFT, TPOT and end-to-end latency (one line per level), then TTFT per request over
/// time for every level.
pub fn distributions(run: &Run, id: &str) -> Option<Section> {
    let mut figures = Vec::new();
    for (metric, name, slug) in
        [(Metric::Ttft, "TTFT", "ttft"), (Metric::Tpot, "TPOT", "tpot"), (Metric::E2e, "End-to-end latency", "e2e")]
    {
        // One unit for the axis, from the slowest request of any level.
        let unit =
            numbers::TimeUnit::for_column(run.levels.iter().flat_map(|l| l.artifact.values(metric).iter().copied()));
        let mut chart = Chart::new(format!("{name} ({})", unit.suffix()), "requests at or below (%)");
        chart.y_range = Some((0.0, 100.0));
        let mut legend = Vec::new();
        let mut requests = 0;
        for (i, l) in run.levels.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mut series = cdf_series(&l.artifact, metric, unit, level_label(&l.artifact), color);
            requests += l.artifact.values(metric).len();
            // A second round of colours is told apart by its dashes.
            if i >= PALETTE.len() {
                series = series.dashed();
            }
            add_line(&mut chart, &mut legend, series);
        }
        let Some(svg) = chart.render() else { continue };
        figures.push(Figure {
            id: format!("plot-{id}-{slug}-cdf"),
            title: format!("{name}: cumulative distribution"),
            caption: format!(
                "Share of the {requests} eligible requests whose {name} is at or below each value (exact values from the records{}).",
                if run.levels.len() > 1 { "; one line per level" } else { "" }
            ),
            points: chart.points(),
            svg,
            legend: if run.levels.len() > 1 { legend } else { Vec::new() },
        });
    }
    let timelines: Vec<Figure> =
        run.levels.iter().enumerate().filter_map(|(i, l)| timeline(l, &format!("{id}-{i}"))).collect();
    if figures.is_empty() && timelines.is_empty() {
        return None;
    }
    let mut s = Section::new(id, "Latency distributions");
    if !figures.is_empty() {
        s.push(Block::Figures(figures));
    }
    if !timelines.is_empty() {
        s.push(Block::Heading("TTFT per request over time".into()));
        s.push(Block::Figures(timelines));
    }
    Some(s)
}

/// A line on the chart with its legend entry (solid or dashed, as drawn); nothing when empty.
pub fn add_line(chart: &mut Chart, legend: &mut Vec<LegendEntry>, series: Series) {
    if series.points.is_empty() {
        return;
    }
    let shape = if series.dashed { Swatch::Dashed } else { Swatch::Solid };
    legend.push(LegendEntry { label: series.label.clone(), color: series.color, shape });
    chart.series.push(series);
}

/// The CDF of one level's `metric`, in `unit`, as a line.
pub fn cdf_series(
    a: &ArtifactFile,
    metric: Metric,
    unit: numbers::TimeUnit,
    label: String,
    color: &'static str,
) -> Series {
    // Ascending already, and a unit is a positive factor.
    let values: Vec<f64> = a.values(metric).iter().map(|&v| unit.from_ms(v)).collect();
    Series::new(label, color, Mark::Line, svg::cdf_points(&values, CDF_POINTS))
}

/// TTFT of every request against when it was sent, failures marked by kind.
pub fn timeline(level: &LevelFile, id: &str) -> Option<Figure> {
    let a = &level.artifact;
    // One unit for the TTFT axis, from the slowest first token drawn.
    let (kept, failed) = (&a.request_timings, &a.failures);
    let unit = numbers::TimeUnit::for_column(
        kept.ttft_points.iter().map(|p| p.ttft_ms).chain(failed.points.iter().filter_map(|f| f.ttft_ms)),
    );
    let mut eligible: Vec<(f64, f64)> = Vec::new();
    let mut excluded: Vec<(f64, f64)> = Vec::new();
    for r in &kept.ttft_points {
        let p = (r.start_offset_ms / 1000.0, unit.from_ms(r.ttft_ms));
        if r.eligible { eligible.push(p) } else { excluded.push(p) }
    }
    let total = eligible.len() + excluded.len();
    let thinned = total > MAX_DOTS;
    if thinned {
        let keep = |v: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
            let step = total.div_ceil(MAX_DOTS);
            v.into_iter().step_by(step).collect()
        };
        eligible = keep(eligible);
        excluded = keep(excluded);
    }
    let mut chart = Chart::new("sent at (s from the level start)", format!("TTFT ({})", unit.suffix()));
    chart.x_from_zero = true;
    let mut legend = Vec::new();
    if !eligible.is_empty() {
        legend.push(LegendEntry { label: "TTFT".into(), color: PALETTE[0], shape: Swatch::Solid });
        chart.series.push(Series::new("TTFT", PALETTE[0], Mark::Dots, eligible));
    }
    if !excluded.is_empty() {
        legend.push(LegendEntry {
            label: "left out (warm-up, cool-down, failed canary)".into(),
            color: "#9a9a9a",
            shape: Swatch::Solid,
        });
        chart.series.push(Series::new("left out", "#9a9a9a", Mark::Dots, excluded));
    }
    let mut kinds: Vec<(&str, u32)> = failed.kinds.iter().zip(0..).map(|(k, i)| (k.as_str(), i)).collect();
    kinds.sort();
    for (i, (kind, index)) in kinds.iter().enumerate() {
        let color = PALETTE[(i + 1) % PALETTE.len()];
        let points: Vec<(f64, f64)> = failed
            .points
            .iter()
            .filter(|f| f.kind == *index)
            .map(|f| (f.start_offset_ms / 1000.0, unit.from_ms(f.ttft_ms.unwrap_or(0.0))))
            .collect();
        legend.push(LegendEntry { label: format!("failed: {kind} ({})", points.len()), color, shape: Swatch::Cross });
        chart.series.push(Series::new(kind.to_string(), color, Mark::Crosses, points));
    }
    let svg = chart.render()?;
    let mut caption = format!("{} completed requests", total);
    if thinned {
        caption.push_str(&format!(" (every {}th drawn)", total.div_ceil(MAX_DOTS)));
    }
    if failed.count == 0 {
        caption.push_str("; no failures.");
    } else {
        caption.push_str(&format!(
            "; {} failures drawn as crosses at the time they were sent, at their TTFT when output had begun, else on the time axis.",
            failed.count
        ));
    }
    Some(Figure {
        id: format!("plot-{id}-timeline"),
        title: format!("TTFT per request over time, {}", level_label(a)),
        caption,
        points: chart.points(),
        svg,
        legend,
    })
}

/// Canaries, failures by kind, steady state and server metrics of one level.
pub fn checks(a: &ArtifactFile) -> Vec<Block> {
    let mut out = Vec::new();
    match facts::canaries(a) {
        Some((samples, passed, foreign)) => {
            let failed = samples.saturating_sub(passed);
            let tone = if failed == 0 { Tone::Good } else { Tone::Bad };
            let mut t = Table::new(&["canaries", "checked", "passed", "failed", "held another request's marker"], 1);
            t.row(vec![
                Cell::from("per-request markers"),
                Cell::from(samples.to_string()),
                Cell::toned(passed.to_string(), tone),
                Cell::toned(failed.to_string(), tone),
                Cell::toned(foreign.to_string(), if foreign == 0 { Tone::Plain } else { Tone::Bad }),
            ]);
            out.push(Block::Table(t));
        }
        None => {
            out.push(Block::Note("Canaries were off: responses were not checked for their request's marker.".into()))
        }
    }
    out.extend(super::models::blocks(a));
    if !a.error_counts.is_empty() {
        let mut t = Table::new(&["failure kind", "requests"], 1);
        for (kind, n) in &a.error_counts {
            t.row(vec![Cell::from(kind.as_str()), Cell::toned(n.to_string(), Tone::Bad)]);
        }
        out.push(Block::Table(t));
    }
    if let Some(st) = &a.steady_state {
        let d = |x: &Option<crate::results::artifact::read::DistributionFile>| {
            x.as_ref().map_or_else(|| "–".to_string(), |d| format!("{} / {}", num(d.p50), num(d.p99)))
        };
        out.push(Block::Facts(vec![
            (
                "steady state".into(),
                format!(
                    "{} to {} ({:.0} % of the level; {})",
                    numbers::duration_ms(st.start_ms),
                    numbers::duration_ms(st.end_ms),
                    st.share_of_level * 100.0,
                    st.basis.replace('_', " ")
                ),
            ),
            ("requests inside".into(), st.requests.to_string()),
            (
                "throughput inside".into(),
                format!("{} tok/s, {} req/s completed", num(st.throughput_tok_s), num(st.completion_rate_rps)),
            ),
            ("TTFT p50 / p99 inside (ms)".into(), d(&st.ttft_ms)),
            ("TPOT p50 / p99 inside (ms)".into(), d(&st.tpot_ms)),
            ("end-to-end p50 / p99 inside (ms)".into(), d(&st.e2e_ms)),
        ]));
    }
    if let Some(m) = &a.server_metrics {
        out.push(Block::Heading(format!(
            "The server's own metrics ({}, {} scrapes, {} failed{})",
            m.engine.map_or("unrecognised engine", |e| e.as_str()),
            m.scrapes,
            m.failed_scrapes,
            if m.complete { "" } else { "; counters do not cover the whole level" }
        )));
        if !m.counters.is_empty() {
            let mut t = Table::new(&["counter", "increase over the level"], 1);
            for (norm, v) in &m.counters {
                t.row(vec![Cell::from(norm.as_str()), Cell::from(num(*v))]);
            }
            out.push(Block::Table(t));
        }
        if !m.gauges.is_empty() {
            let mut t = Table::new(&["gauge", "min", "mean (time-weighted)", "max", "last", "samples"], 1);
            for (norm, g) in &m.gauges {
                t.row(vec![
                    Cell::from(norm.as_str()),
                    Cell::from(num(g.min)),
                    Cell::from(num(g.mean)),
                    Cell::from(num(g.max)),
                    Cell::from(num(g.last)),
                    Cell::from(g.samples.to_string()),
                ]);
            }
            out.push(Block::Table(t));
        }
        let mut notes = Vec::new();
        if let Some(rate) = m.prefix_cache_hit_rate {
            notes.push(format!("prefix-cache hit rate {}", num(rate)));
        }
        if let Some(rate) = m.spec_decode.as_ref().and_then(|s| s.acceptance_rate) {
            notes.push(format!("draft acceptance {}", num(rate)));
        }
        if m.counter_resets > 0 {
            notes.push(format!("{} counter resets (the server restarted)", m.counter_resets));
        }
        if !m.missing.is_empty() {
            let missing: Vec<&str> = m.missing.iter().map(|n| n.as_str()).collect();
            notes.push(format!("not exported: {}", missing.join(", ")));
        }
        if !notes.is_empty() {
            out.push(Block::Note(notes.join("; ")));
        }
    }
    out
}

/// The headline of every level with its checks: canaries, failures, steady state, server.
pub fn level_details(run: &Run, id: &str) -> Section {
    let several = run.levels.len() > 1;
    let mut s = Section::new(id, if several { "Levels in detail" } else { "Headline" });
    for l in &run.levels {
        let a = &l.artifact;
        if several {
            s.push(Block::Heading(format!("{} — {}", level_label(a), a.run_id)));
        }
        s.blocks.extend(headline(a));
        s.blocks.extend(checks(a));
    }
    s
}

/// How a run is named in headings.
pub fn run_title(run: &Run) -> String {
    let a = &run.levels[0].artifact;
    let kind = match run.kind {
        RunKind::Single => "run",
        RunKind::Sweep => "sweep",
        RunKind::Search => "capacity search",
    };
    format!("{} {kind} {}", a.model, run.run_id)
}
