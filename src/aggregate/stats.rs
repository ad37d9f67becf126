//! Distribution summaries over exact samples, defined exactly as the artifact's
//! `timing_methodology.distributions` says: mean, sample standard deviation, normal-approximation
//! 95 % confidence interval of the mean, min, nearest-rank p25…p99, max.

use serde::Serialize;

/// Percentiles every summary reports.
pub const PERCENTILES: [u32; 6] = [25, 50, 75, 90, 95, 99];

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

/// Nearest-rank percentile of sorted values: the value at rank ⌈p/100 · n⌉ (1-based), so every
/// reported percentile is an observed sample. `sorted` must be non-empty.
pub fn nearest_rank(sorted: &[f64], p: u32) -> f64 {
    let n = sorted.len();
    // Integer arithmetic avoids float rounding at exact ranks (p99 of 100 samples is rank 99).
    let rank = (u64::from(p) * n as u64).div_ceil(100).max(1) as usize;
    sorted[rank.min(n) - 1]
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

    pub fn percentile(&self, p: u32) -> Option<f64> {
        PERCENTILES.iter().position(|&q| q == p).map(|i| self.percentiles[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nearest_rank_matches_the_definition() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 99.0);
        assert_eq!(nearest_rank(&v, 50), 50.0);
        let six = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        // ⌈0.25·6⌉ = 2, ⌈0.5·6⌉ = 3, ⌈0.75·6⌉ = 5, ⌈0.9·6⌉ = 6.
        assert_eq!([25, 50, 75, 90, 99].map(|p| nearest_rank(&six, p)), [2.0, 3.0, 5.0, 6.0, 6.0]);
        assert_eq!(nearest_rank(&[7.0], 1), 7.0);
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
        assert_eq!(s.percentile(25), Some(1752.577299997938));
        assert_eq!(s.percentile(50), Some(8953.168000000005));
        assert_eq!(s.percentile(75), Some(9974.789100000635));
        assert_eq!(s.percentile(90), Some(10017.000400002871));
    }

    #[test]
    fn single_sample_has_zero_spread() {
        let s = Summary::of(vec![3.5]).unwrap();
        assert_eq!((s.stddev, s.mean_ci95_low, s.mean_ci95_high, s.percentile(99)), (0.0, 3.5, 3.5, Some(3.5)));
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
