//! The metrics `compare` tests, in the order it prints them. Each is a statistic or a total of the
//! contract, so its name in the output is the artifact's own key and the direction that is worse
//! is the metric's own (latency up, throughput down). `--max-regress` names a percentile without
//! its unit (`ttft_p50`) and a throughput by a short name (`output_tok_s`, `request_rps`); the
//! output's key is accepted too.

use std::sync::LazyLock;

use crate::contract::{Metric, Stat, Total, Worse, metric_key};

/// What a compared number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A nearest-rank percentile of a per-request distribution.
    Percentile(Metric, Stat),
    /// One number per run.
    Total(Total),
}

impl Measure {
    /// The percentile compared: a percentile's own; a total is one number per run, and the runs
    /// are compared by their median.
    pub fn percentile(self) -> u32 {
        match self {
            // Every percentile listed is one (a test checks).
            Measure::Percentile(_, stat) => stat.percentile().unwrap_or(50),
            Measure::Total(_) => 50,
        }
    }
}

/// One compared metric: its name in `--max-regress`, its name in the output, what it is, and
/// which direction is worse.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    pub name: String,
    pub key: String,
    pub measure: Measure,
    pub higher_is_worse: bool,
}

impl MetricSpec {
    fn of(measure: Measure) -> MetricSpec {
        let (name, key, worse) = match measure {
            Measure::Percentile(m, stat) => (format!("{}_{}", m.stem(), stat.name()), metric_key(m, stat), m.worse()),
            Measure::Total(t) => (short_name(t).to_string(), t.key().to_string(), t.worse()),
        };
        MetricSpec { name, key, measure, higher_is_worse: worse == Some(Worse::WhenHigher) }
    }
}

/// What `compare` tests.
const MEASURES: [Measure; 8] = [
    Measure::Percentile(Metric::Ttft, Stat::P50),
    Measure::Percentile(Metric::Ttft, Stat::P99),
    Measure::Percentile(Metric::Tpot, Stat::P50),
    Measure::Percentile(Metric::Tpot, Stat::P99),
    Measure::Percentile(Metric::E2e, Stat::P50),
    Measure::Percentile(Metric::E2e, Stat::P99),
    Measure::Total(Total::ThroughputTokS),
    Measure::Total(Total::RequestThroughputRps),
];

/// The metrics `compare` tests, in the order it prints them.
pub static METRICS: LazyLock<[MetricSpec; MEASURES.len()]> = LazyLock::new(|| MEASURES.map(MetricSpec::of));

/// A throughput's name in `--max-regress`: what it measures, shorter than its key.
fn short_name(t: Total) -> &'static str {
    match t {
        Total::ThroughputTokS => "output_tok_s",
        Total::RequestThroughputRps => "request_rps",
        other => other.key(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keys_and_directions_come_from_the_contract() {
        let rows: Vec<(&str, &str, bool)> =
            METRICS.iter().map(|m| (m.name.as_str(), m.key.as_str(), m.higher_is_worse)).collect();
        assert_eq!(
            rows,
            [
                ("ttft_p50", "ttft_p50_ms", true),
                ("ttft_p99", "ttft_p99_ms", true),
                ("tpot_p50", "tpot_p50_ms", true),
                ("tpot_p99", "tpot_p99_ms", true),
                ("e2e_p50", "e2e_p50_ms", true),
                ("e2e_p99", "e2e_p99_ms", true),
                ("output_tok_s", "throughput_tok_s", false),
                ("request_rps", "request_throughput_rps", false),
            ]
        );
        for m in METRICS.iter() {
            match m.measure {
                Measure::Percentile(metric, stat) => assert!(stat.percentile().is_some() && metric.worse().is_some()),
                Measure::Total(t) => assert!(t.worse().is_some(), "{t:?}"),
            }
        }
    }
}
