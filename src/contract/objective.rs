//! What an `[slo]` key names, read once when the scenario is validated: the objective the
//! summary checks a level against and goodput checks each request against.

use super::{Metric, Stat, Worse, metric_key};

/// What an `[slo]` key names: a statistic of a distribution under its `metrics` key
/// (`ttft_p99_ms`, `decode_tok_s_p50`), or `error_rate` (server-fault failures over attempted
/// requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    Distribution(Metric, Stat),
    ErrorRate,
}

impl Objective {
    /// The distributions an objective may name: the ones each request has its own value of, so
    /// goodput can check every request against the same threshold.
    pub const METRICS: [Metric; 9] = [
        Metric::Ttft,
        Metric::TimeToFirstOutput,
        Metric::Tpot,
        Metric::E2e,
        Metric::Generation,
        Metric::TtftFromIntended,
        Metric::E2eFromIntended,
        Metric::DecodeTokS,
        Metric::EffectivePrefillTokS,
    ];

    /// The statistics an objective may name.
    pub const STATS: [Stat; 7] = [Stat::Mean, Stat::P50, Stat::P75, Stat::P90, Stat::P95, Stat::P99, Stat::Max];

    /// The objective an `[slo]` key names, if it names one.
    pub fn parse(key: &str) -> Option<Objective> {
        if key == "error_rate" {
            return Some(Objective::ErrorRate);
        }
        Objective::METRICS.iter().find_map(|&m| {
            Objective::STATS
                .iter()
                .find_map(|&stat| (metric_key(m, stat) == key).then_some(Objective::Distribution(m, stat)))
        })
    }

    /// Its `[slo]` key, the `metrics` key it reads.
    pub fn key(self) -> String {
        match self {
            Objective::Distribution(m, stat) => metric_key(m, stat),
            Objective::ErrorRate => "error_rate".to_string(),
        }
    }

    /// Which way it gets worse: a latency or the error rate when it grows, a rate when it falls.
    pub fn worse(self) -> Worse {
        match self {
            // Every metric an objective may name has a direction (a test checks).
            Objective::Distribution(m, _) => m.worse().unwrap_or(Worse::WhenHigher),
            Objective::ErrorRate => Worse::WhenHigher,
        }
    }

    /// The per-request record field compared with the threshold for goodput (`ttft_ms`), if any.
    pub fn request_field(self) -> Option<String> {
        match self {
            Objective::Distribution(m, _) => Some(format!("{}{}", m.stem(), if m.ms_suffix() { "_ms" } else { "" })),
            Objective::ErrorRate => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives_read_back_from_their_keys() {
        assert_eq!(Objective::parse("error_rate"), Some(Objective::ErrorRate));
        assert_eq!(Objective::parse("ttft_p99_ms"), Some(Objective::Distribution(Metric::Ttft, Stat::P99)));
        assert_eq!(Objective::parse("ttft_p99"), None);
        assert_eq!(Objective::parse("ttft_p25_ms"), None);
        assert_eq!(Objective::parse("queue_wait_p99_ms"), None);
        for m in Objective::METRICS {
            assert!(m.worse().is_some(), "{m:?}");
            for stat in Objective::STATS {
                let o = Objective::Distribution(m, stat);
                assert_eq!(Objective::parse(&o.key()), Some(o));
            }
        }
        let rate = Objective::Distribution(Metric::DecodeTokS, Stat::P50);
        assert_eq!((rate.worse(), rate.request_field().as_deref()), (Worse::WhenLower, Some("decode_tok_s")));
        let ttft = Objective::Distribution(Metric::Ttft, Stat::P99);
        assert_eq!((ttft.worse(), ttft.request_field().as_deref()), (Worse::WhenHigher, Some("ttft_ms")));
        assert_eq!(Objective::ErrorRate.request_field(), None);
    }
}
