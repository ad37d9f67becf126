//! Long runs: the snapshot windows of each level (`<level>.timeseries.ndjson`) as time series
//! — throughput, TTFT and TPOT p50/p99, requests in flight, failures and schedule lag — and the
//! artifact's drift table (the first full measurement windows against the last; warm-up and
//! drain windows marked on the plots and left out).

use super::doc::{Block, Cell, Figure, LegendEntry, Section, Swatch, Table, Tone};
use super::facts::{level_label, opt, pct};
use super::svg::{Chart, LIMIT, MARK, Mark, PALETTE, Rule, Series};
use crate::after_run::gather::{LevelFile, Run};
use crate::results::aggregate::snapshots::Window;
use crate::results::artifact::read::DriftFile;

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
        let drift = l.artifact.drift.as_ref();
        if !w.is_empty() {
            let span = w.last().map_or(0.0, |x| x.end_s);
            s.push(Block::Note(format!(
                "{} windows over {:.0} s. Window percentiles come from HDR histograms (three significant digits); the exact percentiles are the headline's.{}",
                w.len(),
                span,
                if drift.and_then(|d| d.measurement_span_s).is_some() {
                    " Grey points are windows outside the measurement (warm-up before the first dashed rule, drain after the last): drift leaves them out."
                } else {
                    ""
                }
            )));
            s.push(Block::Figures(figures(w, drift.and_then(|d| d.measurement_span_s), &format!("{id}-{i}"))));
        }
        if let Some(d) = drift {
            for b in drift_blocks(d) {
                s.push(b);
            }
        }
    }
    Some(s)
}

/// The drift table and what it compared, or why there is no drift to report.
fn drift_blocks(d: &DriftFile) -> Vec<Block> {
    let left_out = d.excluded_windows.as_ref().map_or_else(String::new, |x| {
        format!(" Left out: {} warm-up, {} drain and {} partial windows.", x.warmup, x.drain, x.partial)
    });
    if d.basis == "none" {
        return vec![Block::Note(format!(
            "No drift to report: fewer than two full-length windows lie inside the measurement ({} found).{left_out}",
            d.measurement_windows.unwrap_or(0)
        ))];
    }
    let mut t = Table::new(&["drift", "first", "last", "change"], 1);
    for (name, c, rise_is_worse) in d.rows() {
        // Coloured by what the change means, not its sign: latency up and throughput down are
        // worse, the other way better.
        let tone = match c.change_pct {
            Some(v) if v.abs() >= 10.0 && (v > 0.0) == rise_is_worse => Tone::Bad,
            Some(v) if v.abs() >= 10.0 => Tone::Good,
            _ => Tone::Plain,
        };
        t.row(vec![
            Cell::from(name),
            Cell::from(opt(c.first)),
            Cell::from(opt(c.last)),
            Cell::toned(pct(c.change_pct), tone),
        ]);
    }
    let spans = match (d.first_span_s, d.last_span_s) {
        (Some(a), Some(b)) => format!("windows {:.0}–{:.0} s against {:.0}–{:.0} s", a[0], a[1], b[0], b[1]),
        _ => d.basis.replace('_', " "),
    };
    vec![
        Block::Table(t),
        Block::Note(format!(
            "Drift compares the mean of the per-window values over full-length measurement windows only: {spans} ({} windows each side).{left_out} Changes of 10 % or more are marked by what they mean: worse (latency up, throughput down) or better.",
            d.windows_compared
        )),
    ]
}

type Get = fn(&Window) -> Option<f64>;
/// One line of a window plot: label, value, colour, mark.
type Line = (&'static str, Get, &'static str, Mark);

/// Plots of the windows; with a measurement span, the windows outside it are grey points and
/// dashed grey rules mark where the measurement starts and ends.
fn figures(w: &[Window], measured: Option<[f64; 2]>, id: &str) -> Vec<Figure> {
    // The span's bounds are the first and last measurement windows' own start and end, written
    // from the same values as the time series: equal up to rounding.
    let inside = |x: &Window| measured.is_none_or(|[a, b]| x.start_s >= a - 1e-6 && x.end_s <= b + 1e-6);
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
            let points: Vec<(f64, f64)> =
                w.iter().filter(|x| inside(x)).filter_map(|x| Some((x.end_s, get(x)?))).collect();
            let outside: Vec<(f64, f64)> =
                w.iter().filter(|x| !inside(x)).filter_map(|x| Some((x.end_s, get(x)?))).collect();
            if points.is_empty() && outside.is_empty() {
                continue;
            }
            legend.push(LegendEntry { label: label.to_string(), color, shape: Swatch::Solid });
            chart.series.push(Series::new(label, color, mark, points));
            if !outside.is_empty() {
                chart.series.push(Series::new(format!("{label} (outside the measurement)"), MARK, Mark::Dots, outside));
            }
        }
        if let Some([a, b]) = measured.filter(|_| w.iter().any(|x| !inside(x))) {
            if w.iter().any(|x| x.end_s <= a + 1e-6) {
                chart.v_rules.push(Rule { label: "warm-up ends".into(), value: a, color: MARK });
            }
            if w.iter().any(|x| x.end_s > b + 1e-6) {
                chart.v_rules.push(Rule { label: "drain".into(), value: b, color: MARK });
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn drift(ttft_pct: f64, throughput_pct: f64) -> DriftFile {
        let change = |pct: f64| serde_json::json!({"first": 100.0, "last": 100.0 + pct, "change_pct": pct});
        serde_json::from_value(serde_json::json!({
            "basis": "first_vs_last_10pct_windows", "windows_compared": 1,
            "ttft_p50_ms": change(ttft_pct), "ttft_p99_ms": change(0.0), "tpot_p50_ms": change(0.0),
            "tpot_p99_ms": change(0.0), "throughput_tok_s": change(throughput_pct),
            "first_span_s": [60.0, 120.0], "last_span_s": [3540.0, 3600.0]
        }))
        .unwrap()
    }

    fn tones(d: &DriftFile) -> (Tone, Tone) {
        let Block::Table(t) = &drift_blocks(d)[0] else { panic!("no drift table") };
        (t.rows[0][3].tone, t.rows[4][3].tone)
    }

    #[test]
    fn a_change_is_coloured_by_whether_it_is_worse_not_by_its_sign() {
        // Throughput up and latency down: better, both.
        assert_eq!(tones(&drift(-20.0, 108.6)), (Tone::Good, Tone::Good));
        // Throughput down and latency up: worse, both.
        assert_eq!(tones(&drift(20.0, -15.0)), (Tone::Bad, Tone::Bad));
        assert_eq!(tones(&drift(5.0, -5.0)), (Tone::Plain, Tone::Plain));
    }
}
