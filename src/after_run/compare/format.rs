//! benchstat-style rows: `metric  base  new  delta`, where the delta is the change with its
//! evidence, `+4.04% (p=0.002 n=200+200)`, or `~` when the change is not significant.

use super::stats::{Comparison, Decision};

/// One formatted row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub metric: String,
    pub base: String,
    pub new: String,
    pub delta: String,
}

/// The row of one metric, e.g. `ttft_p50_ms`.
pub fn row(metric: &str, c: &Comparison) -> Row {
    let n = format!("n={}+{}", c.n_base, c.n_new);
    let evidence = match c.decision {
        Decision::RankTest => match &c.mann_whitney {
            Some(m) => format!("({} {n})", fmt_p(m.p_value)),
            None => format!("({n})"),
        },
        Decision::BootstrapCi => match &c.difference_ci {
            Some(ci) if c.base != 0.0 => format!(
                "({}% CI {:+.2}% to {:+.2}%, {n})",
                fmt_confidence(ci.confidence),
                ci.low / c.base.abs() * 100.0,
                ci.high / c.base.abs() * 100.0
            ),
            _ => format!("({n})"),
        },
    };
    let delta = match (c.significant, c.change_pct) {
        (true, Some(pct)) => format!("{pct:+.2}% {evidence}"),
        (true, None) => format!("{:+} {evidence}", fmt_value(c.new - c.base)),
        (false, _) => format!("~ {evidence}"),
    };
    Row { metric: metric.to_string(), base: fmt_value(c.base), new: fmt_value(c.new), delta }
}

/// Rows under a `metric  base  new  delta` header, columns aligned.
pub fn table(rows: &[Row]) -> String {
    let header = Row { metric: "metric".into(), base: "base".into(), new: "new".into(), delta: "delta".into() };
    let all: Vec<&Row> = std::iter::once(&header).chain(rows).collect();
    let width = |f: fn(&Row) -> &str| all.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let (wm, wb, wn) = (width(|r| &r.metric), width(|r| &r.base), width(|r| &r.new));
    let mut out = String::new();
    for r in all {
        out.push_str(&format!("{:<wm$}  {:>wb$}  {:>wn$}  {}\n", r.metric, r.base, r.new, r.delta));
    }
    out
}

/// `95`, `99.4`, `99.99`: as few decimals as tell the level apart from 100 %.
fn fmt_confidence(confidence: f64) -> String {
    let pct = confidence * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        return format!("{pct:.0}");
    }
    for decimals in 1..6 {
        let s = format!("{pct:.decimals$}");
        if s.parse::<f64>().is_ok_and(|v| v < 100.0) {
            return s;
        }
    }
    format!("{pct}")
}

/// `p=0.002`, `p=0.412`, `p<0.001`.
fn fmt_p(p: f64) -> String {
    if p < 0.001 { "p<0.001".to_string() } else { format!("p={p:.3}") }
}

/// Four significant digits, without exponent for the magnitudes of latencies and rates.
fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let magnitude = if v == 0.0 { 0 } else { v.abs().log10().floor() as i32 };
    let decimals = (3 - magnitude).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::after_run::compare::stats::{DifferenceCi, MannWhitney, UMethod};

    fn comparison(decision: Decision, significant: bool) -> Comparison {
        Comparison {
            percentile: if decision == Decision::RankTest { 50 } else { 99 },
            base: 812.345,
            new: 845.1,
            change_pct: Some((845.1 - 812.345) / 812.345 * 100.0),
            mann_whitney: Some(MannWhitney {
                u: 1.0,
                n_x: 200,
                n_y: 200,
                p_value: if significant { 0.0021 } else { 0.412 },
                method: UMethod::Asymptotic,
            }),
            difference_ci: Some(DifferenceCi { estimate: 32.8, low: 12.0, high: 50.0, confidence: 0.95 }),
            n_base: 200,
            n_new: 200,
            significant,
            decision,
        }
    }

    #[test]
    fn rows_read_like_benchstat() {
        let r = row("ttft_p50_ms", &comparison(Decision::RankTest, true));
        assert_eq!((r.base.as_str(), r.new.as_str()), ("812.3", "845.1"));
        assert_eq!(r.delta, "+4.03% (p=0.002 n=200+200)");
        let r = row("ttft_p50_ms", &comparison(Decision::RankTest, false));
        assert_eq!(r.delta, "~ (p=0.412 n=200+200)");
        let r = row("ttft_p99_ms", &comparison(Decision::BootstrapCi, true));
        assert_eq!(r.delta, "+4.03% (95% CI +1.48% to +6.16%, n=200+200)");
        let mut tiny = comparison(Decision::RankTest, true);
        tiny.mann_whitney.as_mut().expect("test").p_value = 1e-9;
        assert_eq!(row("x", &tiny).delta, "+4.03% (p<0.001 n=200+200)");
    }

    #[test]
    fn confidence_levels_never_read_as_100_percent() {
        assert_eq!(fmt_confidence(0.95), "95");
        assert_eq!(fmt_confidence(1.0 - 0.05 / 8.0), "99.4");
        assert_eq!(fmt_confidence(1.0 - 0.001 / 8.0), "99.99");
    }

    #[test]
    fn values_keep_four_significant_digits() {
        assert_eq!(fmt_value(0.045_21), "0.04521");
        assert_eq!(fmt_value(12_345.6), "12346");
        assert_eq!(fmt_value(1.5), "1.500");
        assert_eq!(fmt_value(0.0), "0.000");
    }

    #[test]
    fn tables_align_their_columns() {
        let rows = [
            row("ttft_p50_ms", &comparison(Decision::RankTest, true)),
            row("e2e_p99_ms", &comparison(Decision::BootstrapCi, false)),
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("metric        base    new  delta"), "{t}");
        assert!(lines[2].contains("~ (95% CI"), "{t}");
        let delta_col = lines[0].find("delta").expect("header");
        assert!(lines.iter().skip(1).all(|l| l[delta_col..].starts_with(['+', '~'])), "{t}");
    }
}
