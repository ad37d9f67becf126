//! Distribution summaries over exact samples, defined exactly as the artifact's
//! `timing_methodology.distributions` says: mean, sample standard deviation, normal-approximation
//! 95 % confidence interval of the mean, min, nearest-rank p25…p99 (the rule is the contract's:
//! `contract::nearest_rank`), max. The distribution-free interval of a percentile
//! ([`quantile_ci`]), which `compare` and `console` use, is here too.

use serde::Serialize;

use crate::contract::{Stat, nearest_rank};

/// Percentiles every summary reports: the contract's percentile statistics, in order.
pub const PERCENTILES: [u32; 6] = {
    let mut out = [0; 6];
    let mut i = 0;
    while i < out.len() {
        if let Some(p) = Stat::PERCENTILES[i].percentile() {
            out[i] = p;
        }
        i += 1;
    }
    out
};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub samples: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for a single sample.
    pub stddev: f64,
    pub mean_ci95_low: f64,
    pub mean_ci95_high: f64,
    pub min: f64,
    pub max: f64,
    /// Nearest-rank values for `PERCENTILES`, in that order.
    pub percentiles: [f64; 6],
}

/// The distribution-free interval `[x(l), x(u)]` (1-based order statistics of `sorted`) that
/// covers percentile `p` with at least `confidence`: `l` the largest rank with
/// P(B < l) ≤ α/2 and `u` the smallest with P(B ≥ u) ≤ α/2, B ~ Binomial(n, p/100) the count of
/// values below the true percentile. `None` when the sample is too small for the confidence
/// (e.g. p99 needs at least 300 values for 95 %).
pub fn quantile_ci(sorted: &[f64], p: u32, confidence: f64) -> Option<(f64, f64)> {
    let (l, u) = quantile_ci_ranks(sorted.len(), p, confidence)?;
    Some((sorted[l - 1], sorted[u - 1]))
}

/// The 1-based ranks of [`quantile_ci`].
pub fn quantile_ci_ranks(n: usize, p: u32, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 || p == 0 || p >= 100 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let q = f64::from(p) / 100.0;
    let half = (1.0 - confidence) / 2.0;
    // log pmf(k) = log C(n, k) + k log q + (n − k) log(1 − q), summed from each end so both
    // tails stay accurate.
    let (lq, lr) = (q.ln(), (1.0 - q).ln());
    let nf = n as f64;
    let mut log_c = vec![0.0; n + 1];
    for k in 1..=n {
        log_c[k] = log_c[k - 1] + (nf - k as f64 + 1.0).ln() - (k as f64).ln();
    }
    let pmf = |k: usize| (log_c[k] + k as f64 * lq + (nf - k as f64) * lr).exp();
    // l: P(B ≤ l − 1) ≤ α/2.
    let mut below = 0.0;
    let mut l = 0;
    for k in 1..=n {
        below += pmf(k - 1);
        if below > half {
            break;
        }
        l = k;
    }
    // u: P(B ≥ u) ≤ α/2.
    let mut above = 0.0;
    let mut u = 0;
    for k in (1..=n).rev() {
        above += pmf(k);
        if above > half {
            break;
        }
        u = k;
    }
    (l >= 1 && u >= 1 && l < u).then_some((l, u))
}

impl Summary {
    /// Summarise the values (order does not matter); `None` for no values. NaNs are not expected
    /// (every input is a finite measurement) and sort last if present.
    pub fn of(mut values: Vec<f64>) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        // Values `total_cmp` calls equal are the same bits, so an unstable sort gives the same
        // order as a stable one, for less.
        values.sort_unstable_by(f64::total_cmp);
        let n = values.len();
        // Summed in ascending order, as an independent checker recomputing from the artifact does.
        let mean = values.iter().sum::<f64>() / n as f64;
        let stddev =
            if n > 1 { (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
        let half = if n > 1 { 1.96 * stddev / (n as f64).sqrt() } else { 0.0 };
        Some(Summary {
            samples: n,
            mean,
            stddev,
            mean_ci95_low: mean - half,
            mean_ci95_high: mean + half,
            min: values[0],
            max: values[n - 1],
            percentiles: PERCENTILES.map(|p| nearest_rank(&values, p)),
        })
    }

    /// One statistic, as the artifact names it (`Samples` as a number).
    pub fn stat(&self, stat: Stat) -> f64 {
        match stat {
            Stat::Mean => self.mean,
            Stat::Stddev => self.stddev,
            Stat::MeanCi95Low => self.mean_ci95_low,
            Stat::MeanCi95High => self.mean_ci95_high,
            Stat::Min => self.min,
            Stat::Max => self.max,
            Stat::Samples => self.samples as f64,
            Stat::P25 => self.percentiles[0],
            Stat::P50 => self.percentiles[1],
            Stat::P75 => self.percentiles[2],
            Stat::P90 => self.percentiles[3],
            Stat::P95 => self.percentiles[4],
            Stat::P99 => self.percentiles[5],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn order_statistic_ranks_match_scipys_binomial() {
        // SciPy 1.17.1: ranks from scipy.stats.binom.cdf / .sf at α/2 = 0.025 each side.
        assert_eq!(quantile_ci_ranks(10, 50, 0.95), Some((2, 9)));
        assert_eq!(quantile_ci_ranks(20, 50, 0.95), Some((6, 15)));
        assert_eq!(quantile_ci_ranks(100, 50, 0.95), Some((40, 61)));
        assert_eq!(quantile_ci_ranks(1000, 50, 0.95), Some((469, 532)));
        assert_eq!(quantile_ci_ranks(1000, 99, 0.95), Some((983, 997)));
        assert_eq!(quantile_ci_ranks(50, 90, 0.95), Some((41, 50)));
        assert_eq!(quantile_ci_ranks(100, 99, 0.95), None, "p99 needs more than 100 values");
        assert_eq!(quantile_ci_ranks(5, 50, 0.95), None);
        let sorted: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile_ci(&sorted, 50, 0.95), Some((2.0, 9.0)));
    }

    #[test]
    fn reference_ttft_summary() {
        // The reference artifact's six TTFTs and its published summary.
        let ttft = vec![
            1418.298299999151,
            10017.000400002871,
            8953.168000000005,
            9484.868100000313,
            1752.577299997938,
            9974.789100000635,
        ];
        let s = Summary::of(ttft).unwrap();
        assert!((s.mean - 6933.450200000152).abs() < 1e-9);
        assert!((s.stddev - 4161.859246027728).abs() < 1e-9);
        assert!((s.mean_ci95_low - 3603.26923220975).abs() < 1e-9);
        assert_eq!(Some(s.stat(Stat::P25)), Some(1752.577299997938));
        assert_eq!(Some(s.stat(Stat::P50)), Some(8953.168000000005));
        assert_eq!(Some(s.stat(Stat::P75)), Some(9974.789100000635));
        assert_eq!(Some(s.stat(Stat::P90)), Some(10017.000400002871));
    }

    #[test]
    fn single_sample_has_zero_spread() {
        let s = Summary::of(vec![3.5]).unwrap();
        assert_eq!((s.stddev, s.mean_ci95_low, s.mean_ci95_high, s.stat(Stat::P99)), (0.0, 3.5, 3.5, 3.5));
        assert!(Summary::of(vec![]).is_none());
    }

    proptest! {
        #[test]
        fn percentiles_are_ordered_samples(values in proptest::collection::vec(0.0f64..1e6, 1..300)) {
            let s = Summary::of(values.clone()).unwrap();
            prop_assert!(s.min <= s.percentiles[0]);
            for w in s.percentiles.windows(2) {
                prop_assert!(w[0] <= w[1]);
            }
            prop_assert!(s.percentiles[5] <= s.max);
            for p in s.percentiles {
                prop_assert!(values.contains(&p));
            }
            prop_assert!(s.mean >= s.min - 1e-9 && s.mean <= s.max + 1e-9);
        }
    }
}
