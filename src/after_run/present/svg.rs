//! Plots as inline SVG. plotters (its SVG backend, no font files) draws the frame: axes, ticks,
//! grid and axis titles. The data go on top in the chart's own coordinates, written here so
//! every data element carries `class="data"` (and rules `class="rule"`): the page styles them
//! and its test counts them. Nothing is embedded or fetched; text is SVG `<text>` in the page's
//! sans-serif.

use std::fmt::Write as _;

use plotters::coord::ranged1d::{BoldPoints, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Okabe–Ito colours: distinguishable with the common colour-vision deficiencies.
pub const PALETTE: [&str; 7] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"];
/// Objectives and other limits.
pub const LIMIT: &str = "#B00020";
/// Marked points (knee, capacity).
pub const MARK: &str = "#555555";

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A polyline through the points, in order.
    Line,
    /// A polyline with a dot on every point (few points, each a level).
    LineDots,
    /// A dot per point.
    Dots,
    /// A cross per point (failures).
    Crosses,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub color: &'static str,
    pub mark: Mark,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, color: &'static str, mark: Mark, points: Vec<(f64, f64)>) -> Self {
        let points = points.into_iter().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        Series { label: label.into(), color, mark, dashed: false, points }
    }

    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
}

/// A labelled straight line across the plot: a horizontal one at a y value (an objective) or a
/// vertical one at an x value (the knee, the capacity point).
#[derive(Debug, Clone)]
pub struct Rule {
    pub label: String,
    pub value: f64,
    pub color: &'static str,
}

#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub h_rules: Vec<Rule>,
    pub v_rules: Vec<Rule>,
    /// Fixed y range (a CDF's 0–100 %); otherwise from zero to the data's maximum.
    pub y_range: Option<(f64, f64)>,
    /// Start the x axis at zero rather than at the smallest value.
    pub x_from_zero: bool,
}

pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 340;

impl Chart {
    pub fn new(x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Chart { x_label: x_label.into(), y_label: y_label.into(), ..Chart::default() }
    }

    /// Data points drawn.
    pub fn points(&self) -> usize {
        self.series.iter().map(|s| s.points.len()).sum()
    }

    /// The SVG element, or `None` when there is nothing to draw.
    pub fn render(&self) -> Option<String> {
        if self.points() == 0 {
            return None;
        }
        let (x0, x1) = self.x_bounds();
        let (y0, y1) = self.y_bounds();
        let mut svg = String::new();
        let frame = {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
            self.frame(&root, (x0, x1), (y0, y1))
        };
        let frame = frame.ok()?;
        let mut data = String::new();
        for (i, s) in self.series.iter().enumerate() {
            draw_series(&mut data, &frame, i, s);
        }
        for r in &self.h_rules {
            let (a, b) = (frame.px(x0, r.value), frame.px(x1, r.value));
            rule(&mut data, r, a, b, (b.0 - 4.0, b.1 - 5.0), "end");
        }
        for r in &self.v_rules {
            let (a, b) = (frame.px(r.value, y0), frame.px(r.value, y1));
            rule(&mut data, r, a, b, (b.0 + 4.0, b.1 + 14.0), "start");
        }
        // Inline in HTML the SVG needs no namespace, and the page sizes it.
        let svg = svg
            .replacen(&format!("width=\"{WIDTH}\" height=\"{HEIGHT}\" "), "class=\"plot\" role=\"img\" ", 1)
            .replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
        let end = svg.rfind("</svg>")?;
        Some(format!("{}{data}{}", &svg[..end], &svg[end..]))
    }

    fn x_bounds(&self) -> (f64, f64) {
        let xs =
            self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).chain(self.v_rules.iter().map(|r| r.value));
        let (lo, hi) = min_max(xs);
        let lo = if self.x_from_zero { lo.min(0.0) } else { lo };
        pad(lo, hi, self.x_from_zero)
    }

    fn y_bounds(&self) -> (f64, f64) {
        if let Some(r) = self.y_range {
            return r;
        }
        let ys =
            self.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(self.h_rules.iter().map(|r| r.value));
        let (lo, hi) = min_max(ys);
        pad(lo.min(0.0), hi, true)
    }

    fn frame(
        &self,
        root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
        (x0, x1): (f64, f64),
        (y0, y1): (f64, f64),
    ) -> Result<Frame, String> {
        let e = |e: &dyn std::fmt::Display| format!("plot: {e}");
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(root)
            .margin_top(14)
            .margin_right(22)
            .margin_left(8)
            .margin_bottom(6)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|x| e(&x))?;
        // Every label of an axis at once, with the digits that tell neighbours apart
        // (`4.2 4.25 4.3`, never `4.25 4.25 4.25`), at the very points plotters labels.
        let (x_ticks, y_ticks) = (Ticks::new(x0..x1, X_LABELS), Ticks::new(y0..y1, Y_LABELS));
        let x_label = |v: &f64| x_ticks.label(*v);
        let y_label = |v: &f64| y_ticks.label(*v);
        chart
            .configure_mesh()
            .light_line_style(RGBColor(242, 242, 242))
            .bold_line_style(RGBColor(222, 222, 222))
            .axis_style(RGBColor(140, 140, 140))
            .label_style(("sans-serif", 15).into_font().color(&RGBColor(60, 60, 60)))
            .axis_desc_style(("sans-serif", 16).into_font().color(&RGBColor(40, 40, 40)))
            .x_labels(X_LABELS)
            .y_labels(Y_LABELS)
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .draw()
            .map_err(|x| e(&x))?;
        let (a, b) = (chart.backend_coord(&(x0, y0)), chart.backend_coord(&(x1, y1)));
        root.present().map_err(|x| e(&x))?;
        Ok(Frame {
            x: (x0, x1),
            y: (y0, y1),
            from: (f64::from(a.0), f64::from(a.1)),
            to: (f64::from(b.0), f64::from(b.1)),
        })
    }
}

/// Data coordinates to pixels, from the corners plotters placed.
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
    from: (f64, f64),
    to: (f64, f64),
}

impl Frame {
    fn px(&self, x: f64, y: f64) -> (f64, f64) {
        let fx = (x - self.x.0) / (self.x.1 - self.x.0);
        let fy = (y - self.y.0) / (self.y.1 - self.y.0);
        let fx = fx.clamp(0.0, 1.0);
        let fy = fy.clamp(0.0, 1.0);
        (self.from.0 + fx * (self.to.0 - self.from.0), self.from.1 + fy * (self.to.1 - self.from.1))
    }
}

fn draw_series(out: &mut String, frame: &Frame, index: usize, s: &Series) {
    let pixels: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| frame.px(x, y)).collect();
    let dash = if s.dashed { " stroke-dasharray=\"7 4\"" } else { "" };
    if matches!(s.mark, Mark::Line | Mark::LineDots) {
        let mut points = String::new();
        for (x, y) in &pixels {
            let _ = write!(points, "{x:.1},{y:.1} ");
        }
        let _ = writeln!(
            out,
            "<polyline class=\"data\" data-series=\"{index}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\" stroke-linejoin=\"round\"{dash} points=\"{}\"/>",
            s.color,
            points.trim_end()
        );
    }
    match s.mark {
        Mark::LineDots => {
            for (x, y) in &pixels {
                let _ = writeln!(
                    out,
                    "<circle class=\"data\" data-series=\"{index}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{}\" stroke=\"white\" stroke-width=\"1.2\"/>",
                    s.color
                );
            }
        }
        Mark::Dots => {
            for (x, y) in &pixels {
                let _ = writeln!(
                    out,
                    "<circle class=\"data\" data-series=\"{index}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.6\" fill=\"{}\" fill-opacity=\"0.55\"/>",
                    s.color
                );
            }
        }
        Mark::Crosses => {
            for (x, y) in &pixels {
                let _ = writeln!(
                    out,
                    "<path class=\"data\" data-series=\"{index}\" d=\"M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}\" stroke=\"{}\" stroke-width=\"2.2\"/>",
                    x - 4.5,
                    y - 4.5,
                    x + 4.5,
                    y + 4.5,
                    x - 4.5,
                    y + 4.5,
                    x + 4.5,
                    y - 4.5,
                    s.color
                );
            }
        }
        Mark::Line => {}
    }
}

fn rule(out: &mut String, r: &Rule, a: (f64, f64), b: (f64, f64), text_at: (f64, f64), anchor: &str) {
    let _ = writeln!(
        out,
        "<line class=\"rule\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"1.6\" stroke-dasharray=\"6 4\"/>",
        a.0, a.1, b.0, b.1, r.color
    );
    let _ = writeln!(
        out,
        "<text class=\"rule-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-family=\"sans-serif\" font-size=\"13\" fill=\"{}\">{}</text>",
        text_at.0,
        text_at.1,
        r.color,
        super::html::escape(&r.label)
    );
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// A little room around the data; a range of one value gets a width.
fn pad(lo: f64, hi: f64, keep_lo: bool) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    if span <= 0.0 {
        let w = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        return (if keep_lo { lo } else { lo - w }, hi + w);
    }
    (if keep_lo { lo } else { lo - span * 0.03 }, hi + span * 0.06)
}

/// Labels on the x and y axes, at most.
const X_LABELS: usize = 8;
const Y_LABELS: usize = 6;

/// The labels of one axis, worked out together by [`crate::numbers::tick_labels`].
struct Ticks {
    values: Vec<f64>,
    labels: Vec<String>,
}

impl Ticks {
    fn new(range: std::ops::Range<f64>, count: usize) -> Self {
        let values = RangedCoordf64::from(range).key_points(BoldPoints(count));
        let labels = crate::numbers::tick_labels(&values);
        Ticks { values, labels }
    }

    /// The label worked out for the key point nearest `v` (plotters asks about those points).
    fn label(&self, v: f64) -> String {
        let nearest = self.values.iter().enumerate().min_by(|a, b| (a.1 - v).abs().total_cmp(&(b.1 - v).abs()));
        match nearest {
            Some((i, &at)) if (at - v).abs() <= f64::EPSILON * at.abs().max(1.0) * 16.0 => self.labels[i].clone(),
            _ => tick(v),
        }
    }
}

/// One tick label on its own: three significant digits, no trailing zeros.
pub fn tick(v: f64) -> String {
    crate::numbers::significant(v, 3)
}

/// At most `max` points of a sorted sample's CDF: evenly spaced ranks, the first and last kept.
/// `(value, percent of requests at or below it)`.
pub fn cdf_points(sorted: &[f64], max: usize) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let count = n.min(max.max(2));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(count + 1);
    out.push((sorted[0], 0.0));
    for k in 0..count {
        let rank = if count == 1 { n } else { 1 + (k * (n - 1)) / (count - 1) };
        out.push((sorted[rank - 1], rank as f64 / n as f64 * 100.0));
    }
    out.dedup_by(|a, b| a == b);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_carry_their_data_points_and_no_namespace() {
        let mut c = Chart::new("x", "y");
        c.series.push(Series::new("a", PALETTE[0], Mark::LineDots, vec![(1.0, 2.0), (2.0, 3.0), (3.0, 2.5)]));
        c.series.push(Series::new("b", PALETTE[1], Mark::Crosses, vec![(1.5, 1.0)]));
        c.h_rules.push(Rule { label: "SLO <5>".into(), value: 4.0, color: LIMIT });
        c.v_rules.push(Rule { label: "knee".into(), value: 2.0, color: MARK });
        let svg = c.render().unwrap();
        assert!(svg.starts_with("<svg class=\"plot\""), "{}", &svg[..80]);
        assert!(!svg.contains("http"), "{svg}");
        assert_eq!(svg.matches("<circle class=\"data\"").count(), 3);
        assert_eq!(svg.matches("<polyline class=\"data\"").count(), 1);
        assert_eq!(svg.matches("<path class=\"data\"").count(), 1);
        assert_eq!(svg.matches("class=\"rule\"").count(), 2);
        assert!(svg.contains("SLO &lt;5&gt;"));
        assert!(svg.trim_end().ends_with("</svg>"));
        // Every data pixel is inside the drawing.
        for cap in svg.split("cx=\"").skip(1) {
            let x: f64 = cap.split('"').next().unwrap().parse().unwrap();
            assert!((0.0..=f64::from(WIDTH)).contains(&x));
        }
        assert!(Chart::new("x", "y").render().is_none());
    }

    #[test]
    fn cdfs_keep_the_ends_and_thin_the_middle() {
        let v: Vec<f64> = (1..=10_000).map(f64::from).collect();
        let p = cdf_points(&v, 500);
        assert!(p.len() <= 502);
        assert_eq!(p.first(), Some(&(1.0, 0.0)));
        assert_eq!(p.last(), Some(&(10_000.0, 100.0)));
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let small = cdf_points(&[3.0, 1.0 + 2.0, 5.0], 500);
        assert_eq!(small.last(), Some(&(5.0, 100.0)));
    }

    #[test]
    fn neighbouring_ticks_never_read_the_same() {
        let t = Ticks::new(4.2..4.3, X_LABELS);
        let labels: Vec<String> = t.values.iter().map(|&v| t.label(v)).collect();
        assert!(labels.len() >= 3, "{labels:?}");
        assert!(labels.windows(2).all(|w| w[0] != w[1]), "{labels:?}");
        let t = Ticks::new(0.0..12_000.0, Y_LABELS);
        assert!(t.values.iter().all(|&v| !t.label(v).contains('.')), "{:?}", t.labels);
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1500.0), "1,500");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(2.0), "2");
        assert_eq!(tick(0.125), "0.125");
    }
}
