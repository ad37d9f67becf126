//! `--max-regress METRIC=PCT`: the thresholds a comparison gates on, the regressions that
//! break them, and the gates that could not be evaluated. A breach needs both: the change is
//! significant, and it is worse than the threshold in the metric's bad direction (latency up,
//! throughput down). A gate whose metric could not be tested at a level is neither passed nor
//! breached there: it is reported as untested.

use serde::Serialize;

use super::metrics::METRICS;

/// One `--max-regress` threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Threshold {
    /// The metric's name in `--max-regress` (`tpot_p50`).
    pub metric: &'static str,
    pub pct: f64,
}

/// A significant regression beyond its threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breach {
    pub level: String,
    pub metric: String,
    pub regression_pct: Option<f64>,
    pub threshold_pct: Option<f64>,
    pub message: String,
}

impl Breach {
    pub fn new(level: &str, metric: &str, regression_pct: Option<f64>, threshold_pct: Option<f64>) -> Self {
        let message = format!(
            "{metric} at {level}: {:.2}% worse, beyond the {}% allowed by --max-regress (significant)",
            regression_pct.unwrap_or(f64::NAN),
            threshold_pct.map_or_else(|| "?".into(), |t| t.to_string())
        );
        Breach { level: level.to_string(), metric: metric.to_string(), regression_pct, threshold_pct, message }
    }
}

/// A gate that could not be evaluated at a level: its metric was not tested there, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Untested {
    pub level: String,
    /// The metric's name in the output (`throughput_tok_s`).
    pub metric: String,
    /// The gate as `--max-regress` names it (`output_tok_s`).
    pub gate: String,
    pub threshold_pct: f64,
    pub reason: String,
    pub message: String,
}

impl Untested {
    pub fn new(level: &str, threshold: &Threshold, metric: &str, reason: String) -> Self {
        let message = format!(
            "{metric} at {level}: the gate --max-regress {}={}% could not be tested ({})",
            threshold.metric,
            threshold.pct,
            reason.trim_start_matches("not tested: ")
        );
        Untested {
            level: level.to_string(),
            metric: metric.to_string(),
            gate: threshold.metric.to_string(),
            threshold_pct: threshold.pct,
            reason,
            message,
        }
    }
}

/// Parse `METRIC=PCT` items (`tpot_p50=5%`, `ttft_p99_ms=10`); errors name the item and list
/// the metrics.
pub fn parse(items: &[String], noise_pct: f64) -> Result<Vec<Threshold>, String> {
    let mut out: Vec<Threshold> = Vec::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let names: Vec<&str> = METRICS.iter().map(|m| m.name.as_str()).collect();
        let Some((name, value)) = item.split_once('=') else {
            return Err(format!("--max-regress {item:?}: expected METRIC=PCT, e.g. tpot_p50=5%"));
        };
        let name = name.trim();
        let Some(spec) = METRICS.iter().find(|m| m.name == name || m.key == name) else {
            return Err(format!("--max-regress {item:?}: unknown metric {name:?}; use one of {}", names.join(", ")));
        };
        let number = value.trim().trim_end_matches('%').trim();
        let pct = match number.parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => p,
            _ => {
                return Err(format!(
                    "--max-regress {item:?}: {value:?} is not a percentage; give a number of percent at or above 0, e.g. {name}=5%"
                ));
            }
        };
        if pct < noise_pct {
            return Err(format!(
                "--max-regress {item:?}: {pct}% is below --noise {noise_pct}%, and a change that small counts as noise, so this gate could never fire; give at least {noise_pct}% or lower --noise (e.g. --noise {pct}%)"
            ));
        }
        if out.iter().any(|t| t.metric == spec.name) {
            return Err(format!("--max-regress {item:?}: {} has a threshold already; give one per metric", spec.name));
        }
        out.push(Threshold { metric: &spec.name, pct });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_with_or_without_percent_and_unit() {
        let t = parse(&["tpot_p50=5%".into(), "ttft_p99_ms=10".into(), " output_tok_s = 2.5 % ".into()], 1.0).unwrap();
        assert_eq!(
            t,
            [
                Threshold { metric: "tpot_p50", pct: 5.0 },
                Threshold { metric: "ttft_p99", pct: 10.0 },
                Threshold { metric: "output_tok_s", pct: 2.5 }
            ]
        );
    }

    #[test]
    fn bad_thresholds_name_the_item_and_the_fix() {
        let e = parse(&["tpot=5".into()], 0.0).unwrap_err();
        assert!(e.contains("\"tpot=5\"") && e.contains("tpot_p50"), "{e}");
        let e = parse(&["tpot_p50".into()], 0.0).unwrap_err();
        assert!(e.contains("METRIC=PCT"), "{e}");
        let e = parse(&["tpot_p50=-1".into()], 0.0).unwrap_err();
        assert!(e.contains("not a percentage"), "{e}");
        let e = parse(&["tpot_p50=1".into(), "tpot_p50_ms=2".into()], 0.0).unwrap_err();
        assert!(e.contains("already"), "{e}");
        // A gate under the noise could never fire.
        let e = parse(&["ttft_p50=0.5%".into()], 1.0).unwrap_err();
        assert!(e.contains("below --noise 1%") && e.contains("--noise 0.5%"), "{e}");
        assert!(parse(&["ttft_p50=0".into()], 0.0).is_ok());
    }
}
