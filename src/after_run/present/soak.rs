//! Long runs: the snapshot windows of each level (`<level>.timeseries.ndjson`) as time series
//! — throughput, TTFT and TPOT p50/p99, requests in flight, failures and schedule lag — and the
//! artifact's drift table (the first windows against the last).

use super::doc::{Block, Cell, Figure, LegendEntry, Section, Swatch, Table, Tone};
use super::facts::{level_label, opt, pct};
use super::svg::{Chart, LIMIT, Mark, PALETTE, Series};
use crate::after_run::gather::{LevelFile, Run};
use crate::results::aggregate::snapshots::Window;

pub fn section(run: &Run, id: &str) -> Option<Section> {
    let with_windows: Vec<(usize, &LevelFile)> =
        run.levels.iter().enumerate().filter(|(_, l)| !l.windows.is_empty() || l.artifact.drift.is_some()).collect();
    if with_windows.is_empty() {
        return None;
    }
    let mut s = Section::new(id, "Over time (snapshot windows)");
    for (i, l) in with_windows {
        if run.levels.len() > 1 {
            s.push(Block::Heading(level_label(&l.artifact)));
        }
        let w = &l.windows;
        if !w.is_empty() {
            let span = w.last().map_or(0.0, |x| x.end_s);
            s.push(Block::Note(format!(
                "{} windows over {:.0} s. Window percentiles come from HDR histograms (three significant digits); the exact percentiles are the headline's.",
                w.len(),
                span
            )));
            s.push(Block::Figures(figures(w, &format!("{id}-{i}"))));
        }
        if let Some(d) = &l.artifact.drift {
            let mut t = Table::new(&["drift", "first", "last", "change"], 1);
            for (name, c) in d.rows() {
                let tone = match c.change_pct {
                    Some(v) if v.abs() >= 10.0 => Tone::Bad,
                    _ => Tone::Plain,
                };
                t.row(vec![
                    Cell::from(name),
                    Cell::from(opt(c.first)),
                    Cell::from(opt(c.last)),
                    Cell::toned(pct(c.change_pct), tone),
                ]);
            }
            s.push(Block::Table(t));
            s.push(Block::Note(format!(
                "Drift compares the mean of the per-window values at the start with that at the end ({}, {} windows each side); changes of 10 % or more are marked.",
                d.basis.replace('_', " "),
                d.windows_compared
            )));
        }
    }
    Some(s)
}

type Get = fn(&Window) -> Option<f64>;
/// One line of a window plot: label, value, colour, mark.
type Line = (&'static str, Get, &'static str, Mark);

fn figures(w: &[Window], id: &str) -> Vec<Figure> {
    let specs: [(&str, &str, &str, Vec<Line>); 5] = [
        (
            "throughput",
            "Throughput per window",
            "output tok/s",
            vec![("output tok/s", |x| Some(x.throughput_tok_s), PALETTE[0], Mark::LineDots)],
        ),
        (
            "ttft",
            "TTFT per window",
            "TTFT (ms)",
            vec![
                ("p50", |x| x.ttft_p50_ms, PALETTE[0], Mark::LineDots),
                ("p99", |x| x.ttft_p99_ms, PALETTE[1], Mark::LineDots),
            ],
        ),
        (
            "tpot",
            "TPOT per window",
            "TPOT (ms)",
            vec![
                ("p50", |x| x.tpot_p50_ms, PALETTE[0], Mark::LineDots),
                ("p99", |x| x.tpot_p99_ms, PALETTE[1], Mark::LineDots),
            ],
        ),
        (
            "load",
            "In flight and failures per window",
            "requests",
            vec![
                ("in flight at the window's end", |x| Some(x.in_flight as f64), PALETTE[0], Mark::LineDots),
                ("completed in the window", |x| Some(x.completed as f64), PALETTE[2], Mark::LineDots),
                ("failed in the window", |x| Some(x.failed as f64), LIMIT, Mark::LineDots),
            ],
        ),
        (
            "lag",
            "Schedule lag per window",
            "schedule lag p99 (ms)",
            vec![("p99", |x| x.schedule_lag_p99_ms, PALETTE[4], Mark::LineDots)],
        ),
    ];
    let mut out = Vec::new();
    for (slug, title, y, series) in specs {
        let mut chart = Chart::new("time (s from the level start, window end)", y);
        chart.x_from_zero = true;
        let mut legend = Vec::new();
        for (label, get, color, mark) in series {
            let points: Vec<(f64, f64)> = w.iter().filter_map(|x| Some((x.end_s, get(x)?))).collect();
            if points.is_empty() {
                continue;
            }
            legend.push(LegendEntry { label: label.to_string(), color, shape: Swatch::Solid });
            chart.series.push(Series::new(label, color, mark, points));
        }
        let Some(svg) = chart.render() else { continue };
        let caption = match slug {
            "load" => {
                let errors: u64 = w.iter().map(|x| x.failed).sum();
                let mut kinds: Vec<String> = Vec::new();
                for x in w {
                    for k in x.errors.keys() {
                        if !kinds.contains(k) {
                            kinds.push(k.clone());
                        }
                    }
                }
                if errors == 0 {
                    "No request failed in any window.".to_string()
                } else {
                    format!("{errors} failures in all ({}).", kinds.join(", "))
                }
            }
            "lag" => "How late requests were sent against the arrival schedule (open loop).".to_string(),
            _ => String::new(),
        };
        out.push(Figure {
            id: format!("plot-{id}-window-{slug}"),
            title: title.to_string(),
            caption,
            points: chart.points(),
            svg,
            legend: if legend.len() > 1 { legend } else { Vec::new() },
        });
    }
    out
}
