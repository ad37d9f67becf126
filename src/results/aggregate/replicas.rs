//! Several replicas (`target.base_urls`): one row per replica of the level — requests sent to it,
//! failures, TTFT and TPOT p50/p99 (nearest rank over exact samples), output throughput — and
//! the warning when replicas differ.
//!
//! The rows are tallied in the one pass `finish_level` makes over the level's records, each
//! record naming its replica (`replica`), so the live run, `summarize` and `merge` agree.
//!
//! Replicas differ (`replicas_differ`) when, between two replicas with at least
//! `MIN_SAMPLES` eligible samples each, one's TTFT p50 or TPOT p50 is more than `RATIO` times
//! the other's; or when, between two replicas with at least `MIN_SAMPLES` requests each, one's
//! failure rate is `FAILURE_POINTS` percentage points above the other's or more.

use serde::Serialize;

use super::warnings::Warning;
use crate::contract::nearest_rank;
use crate::request::record::{FailureRecord, RequestTiming};

/// Samples (or requests) each of two replicas needs before they are compared.
pub const MIN_SAMPLES: usize = 20;
/// One replica's p50 more than this many times another's: they differ.
pub const RATIO: f64 = 1.5;
/// One replica's failure rate this many percentage points above another's: they differ.
pub const FAILURE_POINTS: f64 = 10.0;

/// One replica's row of the level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaSummary {
    pub index: u32,
    /// As the run description lists it: without credentials, `[redacted]` when asked.
    pub url: String,
    /// Requests sent to it: completed and failed, every phase.
    pub requests: u64,
    pub failures: u64,
    pub ttft_ms: Percentiles,
    pub tpot_ms: Percentiles,
    /// Output tokens of its completed requests over the level's wall clock; null without one.
    pub output_tokens_per_s: Option<f64>,
}

/// p50 and p99 (nearest rank) of one replica's performance-eligible samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Percentiles {
    pub samples: usize,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

impl Percentiles {
    pub(super) fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let at = |p| (!values.is_empty()).then(|| nearest_rank(&values, p));
        Percentiles { samples: values.len(), p50: at(50), p99: at(99) }
    }
}

/// What the records of one replica hold, as the pass over the level's records goes.
#[derive(Debug, Default, Clone)]
struct Tallied {
    completed: u64,
    failed: u64,
    output_tokens: u64,
    ttft: Vec<f64>,
    tpot: Vec<f64>,
}

/// The rows being tallied, one per replica of the run.
#[derive(Debug)]
pub struct Tally {
    replicas: Vec<Tallied>,
}

impl Tally {
    pub fn new(replicas: usize) -> Self {
        Tally { replicas: vec![Tallied::default(); replicas] }
    }

    fn of(&mut self, replica: Option<u32>) -> Option<&mut Tallied> {
        self.replicas.get_mut(replica? as usize)
    }

    /// A completed request, after the level's final rules were applied to it.
    pub fn request(&mut self, r: &RequestTiming) {
        let Some(t) = self.of(r.replay.replica) else { return };
        t.completed += 1;
        t.output_tokens += r.output_tokens;
        if r.performance_eligible {
            t.ttft.extend(r.ttft_ms);
            t.tpot.extend(r.tpot_ms);
        }
    }

    /// A failed request.
    pub fn failure(&mut self, f: &FailureRecord) {
        if let Some(t) = self.of(f.replay.replica) {
            t.failed += 1;
        }
    }

    /// The rows, named by `urls` (the run description's), over a level of `wall_clock_ms`.
    pub fn finish(self, urls: &[String], wall_clock_ms: f64) -> Vec<ReplicaSummary> {
        self.replicas
            .into_iter()
            .enumerate()
            .map(|(i, t)| ReplicaSummary {
                index: i as u32,
                url: urls.get(i).cloned().unwrap_or_default(),
                requests: t.completed + t.failed,
                failures: t.failed,
                ttft_ms: Percentiles::of(t.ttft),
                tpot_ms: Percentiles::of(t.tpot),
                output_tokens_per_s: (wall_clock_ms > 0.0).then(|| t.output_tokens as f64 / (wall_clock_ms / 1000.0)),
            })
            .collect()
    }
}

/// One of a row's distributions.
type Of = fn(&ReplicaSummary) -> &Percentiles;

fn ttft(r: &ReplicaSummary) -> &Percentiles {
    &r.ttft_ms
}

fn tpot(r: &ReplicaSummary) -> &Percentiles {
    &r.tpot_ms
}

/// The `replicas_differ` warning, when the rows differ by the module's rule.
pub fn differ(rows: &[ReplicaSummary]) -> Option<Warning> {
    let mut found = Vec::new();
    for (name, p50) in [("TTFT", ttft as Of), ("TPOT", tpot as Of)] {
        let known: Vec<(u32, f64)> = rows
            .iter()
            .filter(|r| p50(r).samples >= MIN_SAMPLES)
            .filter_map(|r| p50(r).p50.filter(|v| *v > 0.0).map(|v| (r.index, v)))
            .collect();
        let low = known.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
        let high = known.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some((lo, l)), Some((hi, h))) = (low, high) {
            if h > RATIO * l {
                found.push(format!(
                    "{name} p50 {h:.1} ms on replica {hi} against {l:.1} ms on replica {lo} ({:.1}x)",
                    h / l
                ));
            }
        }
    }
    let rates: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.requests as usize >= MIN_SAMPLES)
        .map(|r| (r.index, r.failures as f64 / r.requests as f64 * 100.0))
        .collect();
    let low = rates.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
    let high = rates.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((lo, l)), Some((hi, h))) = (low, high) {
        if h - l >= FAILURE_POINTS {
            found.push(format!("{h:.0}% of requests failed on replica {hi} against {l:.0}% on replica {lo}"));
        }
    }
    (!found.is_empty()).then_some(Warning::ReplicasDiffer { differences: found })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u32, requests: u64, failures: u64, ttft_p50: f64, tpot_p50: f64, samples: usize) -> ReplicaSummary {
        let p = |v: f64| Percentiles { samples, p50: Some(v), p99: Some(v) };
        ReplicaSummary {
            index,
            url: format!("http://r{index}/v1"),
            requests,
            failures,
            ttft_ms: p(ttft_p50),
            tpot_ms: p(tpot_p50),
            output_tokens_per_s: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank_over_the_samples() {
        let p = Percentiles::of((1..=100).rev().map(f64::from).collect());
        assert_eq!((p.samples, p.p50, p.p99), (100, Some(50.0), Some(99.0)));
        assert_eq!(Percentiles::of(Vec::new()), Percentiles { samples: 0, p50: None, p99: None });
    }

    #[test]
    fn alike_replicas_raise_nothing() {
        assert_eq!(differ(&[row(0, 40, 0, 100.0, 10.0, 40), row(1, 40, 1, 140.0, 14.0, 40)]), None);
    }

    #[test]
    fn a_slow_replica_is_named_with_its_figures() {
        let Some(Warning::ReplicasDiffer { differences }) =
            differ(&[row(0, 40, 0, 100.0, 10.0, 40), row(1, 40, 0, 100.0, 16.0, 40)])
        else {
            panic!("no warning")
        };
        assert_eq!(differences, ["TPOT p50 16.0 ms on replica 1 against 10.0 ms on replica 0 (1.6x)"]);
    }

    #[test]
    fn too_few_samples_are_not_compared() {
        assert_eq!(differ(&[row(0, 10, 0, 100.0, 10.0, 10), row(1, 10, 5, 900.0, 90.0, 10)]), None);
    }

    #[test]
    fn failure_rates_ten_points_apart_differ() {
        let w = differ(&[row(0, 40, 0, 100.0, 10.0, 40), row(1, 40, 4, 100.0, 10.0, 36)]);
        let Some(Warning::ReplicasDiffer { differences }) = w else { panic!("no warning") };
        assert_eq!(differences, ["10% of requests failed on replica 1 against 0% on replica 0"]);
    }
}
