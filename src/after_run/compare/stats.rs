//! The statistics of `compare`: is the new build's distribution different from the base's, and
//! by how much did a percentile move? Pure functions over raw per-request values.
//!
//! - [`mann_whitney_u`]: the two-sided Mann–Whitney U test (Wilcoxon rank-sum), with midranks
//!   and the tie correction of the variance, continuity-corrected normal approximation, or the
//!   exact null distribution for small samples without ties. It decides as SciPy's
//!   `mannwhitneyu(x, y, alternative="two-sided", method="auto")` does, and the tests pin its
//!   p-values to SciPy's.
//! - [`percentile_difference_ci`]: a seeded, deterministic percentile bootstrap of the
//!   difference `new − base` of one nearest-rank percentile (p50, p99, …).
//! - [`compare_samples`] combines them for one metric; [`compare_runs`] is the variant for
//!   several runs per side, where each run contributes one value (its percentile), so the
//!   between-run variance, not the within-run one, decides.
//!
//! A change is called significant, for the median, when the Mann–Whitney p-value is below α
//! (the test is about location, which is what a median change is); for any other percentile,
//! when the bootstrap interval of the difference excludes zero (a shift of the tail need not
//! move the ranks much, so the rank test would miss it).
//!
//! Every function takes its values in any order, and works on them sorted: values that already
//! are (as an artifact's kept values are when read back) are used where they lie, without a
//! copy, so comparing two runs of millions of requests costs no memory beyond their values.

use std::borrow::Cow;

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Beta, Distribution};
use serde::Serialize;

use crate::contract::nearest_rank_position;

/// How the p-value is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UMethod {
    /// Exact when the smaller sample has at most 8 values and there are no ties, as SciPy.
    Auto,
    /// The exact null distribution (ties are not allowed for; use only without them).
    Exact,
    /// Normal approximation with tie and continuity corrections.
    Asymptotic,
}

/// A Mann–Whitney U test result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MannWhitney {
    /// U of the first sample: the number of pairs (x, y) with x > y, ties counting one half.
    pub u: f64,
    pub n_x: usize,
    pub n_y: usize,
    /// Two-sided.
    pub p_value: f64,
    /// The method actually used.
    pub method: UMethod,
}

/// The two-sided Mann–Whitney U test of `x` against `y`; `None` when either is empty or holds a
/// NaN.
pub fn mann_whitney_u(x: &[f64], y: &[f64], method: UMethod) -> Option<MannWhitney> {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 || x.iter().chain(y).any(|v| v.is_nan()) {
        return None;
    }
    // Midranks of the pooled sample, and Σ(t³ − t) over tie groups: the two sorted samples are
    // walked together, one group of equal values at a time, in ascending order.
    let (xs, ys) = (sorted(x), sorted(y));
    let n = n1 + n2;
    let mut rank_sum_x = 0.0;
    let mut tie_term = 0.0;
    let (mut a, mut b) = (0, 0);
    while a < n1 || b < n2 {
        // The smaller of the two heads.
        let Some(v) = xs.get(a).into_iter().chain(ys.get(b)).copied().min_by(f64::total_cmp) else { break };
        let (from_x, from_y) = (a, b);
        while xs.get(a).is_some_and(|&u| u == v) {
            a += 1;
        }
        while ys.get(b).is_some_and(|&w| w == v) {
            b += 1;
        }
        let i = from_x + from_y;
        let j = a + b;
        let t = (j - i) as f64;
        let midrank = (i + 1 + j) as f64 / 2.0;
        rank_sum_x += midrank * (a - from_x) as f64;
        tie_term += t * t * t - t;
    }
    let (f1, f2) = (n1 as f64, n2 as f64);
    let u1 = rank_sum_x - f1 * (f1 + 1.0) / 2.0;
    let u2 = f1 * f2 - u1;
    let big_u = u1.max(u2);
    let ties = tie_term > 0.0;
    let method = match method {
        UMethod::Auto if n1.min(n2) <= 8 && !ties => UMethod::Exact,
        UMethod::Auto => UMethod::Asymptotic,
        other => other,
    };
    let exact = if method == UMethod::Exact { exact_upper_tail(n1, n2, big_u) } else { None };
    let (p, method) = match exact {
        Some(tail) => ((2.0 * tail).min(1.0), UMethod::Exact),
        None => {
            let nf = n as f64;
            let mu = f1 * f2 / 2.0;
            let var = f1 * f2 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
            let p = if var > 0.0 {
                let z = (big_u - mu - 0.5) / var.sqrt();
                (2.0 * normal_sf(z)).clamp(0.0, 1.0)
            } else {
                1.0
            };
            (p, UMethod::Asymptotic)
        }
    };
    Some(MannWhitney { u: u1, n_x: n1, n_y: n2, p_value: p, method })
}

/// P(U ≥ `u`) under the null hypothesis, without ties, from the exact distribution; `None` when
/// the counts would not fit (the caller then uses the normal approximation).
fn exact_upper_tail(n1: usize, n2: usize, u: f64) -> Option<f64> {
    let (m, n) = (n1.min(n2), n1.max(n2));
    // Memory and time grow with m·n (and time with m again); beyond this the normal
    // approximation is exact to many digits anyway.
    if m.saturating_mul(n) > 1_000_000 {
        return None;
    }
    // Arrangements with each U are the coefficients of the Gaussian binomial [m+n choose m]_q =
    // Π_{i=1..m} (1 − q^(n+i)) / (1 − q^i), built one factor at a time; every partial product
    // is itself a Gaussian binomial, so coefficients stay non-negative integers.
    let degree = m * n;
    let mut c = vec![0u128; degree + 1];
    c[0] = 1;
    for i in 1..=m {
        // ÷ (1 − q^i): running sums with stride i (truncated at the final degree, which is
        // exact because the next step only reads lower coefficients).
        for k in i..=degree {
            c[k] = c[k].checked_add(c[k - i])?;
        }
        // × (1 − q^(n+i)).
        for k in (n + i..=degree).rev() {
            c[k] = c[k].checked_sub(c[k - n - i])?;
        }
    }
    let total: u128 = c.iter().try_fold(0u128, |acc, &v| acc.checked_add(v))?;
    let from = u.ceil().max(0.0) as usize;
    let tail: u128 = c.iter().skip(from).sum();
    Some(tail as f64 / total as f64)
}

/// The smallest two-sided p-value [`mann_whitney_u`] can give with samples of `n_x` and `n_y`
/// values: that of two completely separated samples. When it is not below α, no outcome of the
/// test is significant, whatever the data (one run per side gives 1; three give 0.1).
pub fn smallest_p(n_x: usize, n_y: usize) -> f64 {
    let x: Vec<f64> = (0..n_x).map(|i| i as f64).collect();
    let y: Vec<f64> = (n_x..n_x + n_y).map(|i| i as f64).collect();
    mann_whitney_u(&x, &y, UMethod::Auto).map_or(1.0, |m| m.p_value)
}

/// The standard normal survival function, P(Z > z), to about 1e-13 relative even deep in the
/// tails (where p-values of large samples live).
pub fn normal_sf(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// erfc(x): the everywhere-positive series of erf below 2.5, the continued fraction above.
fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    let inv_sqrt_pi = 1.0 / std::f64::consts::PI.sqrt();
    if x < 2.5 {
        // erf(x) = 2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3·…·(2n+1)): no cancellation.
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        while term > sum * 1e-17 {
            n += 1.0;
            term *= 2.0 * x * x / (2.0 * n + 1.0);
            sum += term;
        }
        return 1.0 - 2.0 * inv_sqrt_pi * (-x * x).exp() * sum;
    }
    if x > 27.3 {
        return 0.0; // below the smallest subnormal
    }
    // erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))), by modified Lentz.
    let tiny = 1e-300;
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for k in 1..500 {
        let a = f64::from(k) / 2.0;
        d = x + a * d;
        d = if d.abs() < tiny { tiny } else { d };
        c = x + a / c;
        c = if c.abs() < tiny { tiny } else { c };
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    inv_sqrt_pi * (-x * x).exp() / f
}

/// The nearest-rank percentile of unsorted values (reorders them); the same definition as the
/// artifact's percentiles.
fn percentile_in_place(values: &mut [f64], p: u32) -> f64 {
    let rank = nearest_rank_position(p, values.len() as u64) as usize;
    let (_, v, _) = values.select_nth_unstable_by(rank - 1, f64::total_cmp);
    *v
}

/// Nearest-rank percentile `p` (1–100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: u32) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    if is_sorted(values) {
        return Some(values[nearest_rank_position(p, values.len() as u64) as usize - 1]);
    }
    Some(percentile_in_place(&mut values.to_vec(), p))
}

fn is_sorted(values: &[f64]) -> bool {
    values.is_sorted_by(|a, b| a.total_cmp(b).is_le())
}

/// `values` in ascending order: where they lie when they already are, else a sorted copy.
fn sorted(values: &[f64]) -> Cow<'_, [f64]> {
    if is_sorted(values) {
        return Cow::Borrowed(values);
    }
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    Cow::Owned(v)
}

/// Bootstrap settings. The cost is one sort of each sample, then one Beta draw per resample and
/// sample (see [`percentile_difference_ci`]): independent of the sample sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BootstrapOptions {
    pub resamples: u32,
    pub confidence: f64,
    pub seed: u64,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        BootstrapOptions { resamples: 2000, confidence: 0.95, seed: 0x5eed }
    }
}

/// A confidence interval of `new − base` for one statistic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DifferenceCi {
    /// The statistic of `new` minus that of `base`, on the original samples.
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    pub confidence: f64,
}

impl DifferenceCi {
    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// Percentile bootstrap of `percentile(new, p) − percentile(base, p)`: both samples resampled
/// with replacement `resamples` times from one seeded generator, so the same inputs and seed
/// always give the same interval. `None` when a sample is empty or the options are unusable.
///
/// No resample is built. A resample of `n` values draws the indices `⌊n·Uᵢ⌋` into the sorted
/// sample (`Uᵢ` uniform on [0, 1)); the map from `Uᵢ` to the value is non-decreasing, so the
/// resample's `k`-th smallest value is the sorted sample at `⌊n·U₍ₖ₎⌋`, where `U₍ₖ₎`, the
/// `k`-th smallest of `n` uniforms, is Beta(k, n − k + 1) distributed. One Beta draw per
/// resample therefore gives its nearest-rank percentile with exactly the distribution of the
/// naive bootstrap, at a cost independent of `n` (200,000 values: one sort instead of 2,000
/// resamples of 200,000 draws and a selection each).
pub fn percentile_difference_ci(base: &[f64], new: &[f64], p: u32, opts: &BootstrapOptions) -> Option<DifferenceCi> {
    bootstrap_difference(base, new, opts, p)
}

fn bootstrap_difference(base: &[f64], new: &[f64], opts: &BootstrapOptions, p: u32) -> Option<DifferenceCi> {
    if base.is_empty() || new.is_empty() || opts.resamples < 10 || !(opts.confidence > 0.0 && opts.confidence < 1.0) {
        return None;
    }
    let (base, new) = (sorted(base), sorted(new));
    let (base_draw, new_draw) = (OrderStatistic::new(&base, p)?, OrderStatistic::new(&new, p)?);
    let estimate = new_draw.value() - base_draw.value();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(opts.seed);
    let mut diffs: Vec<f64> =
        (0..opts.resamples).map(|_| new_draw.resampled(&mut rng) - base_draw.resampled(&mut rng)).collect();
    diffs.sort_by(f64::total_cmp);
    let alpha = 1.0 - opts.confidence;
    let k = diffs.len();
    let lo = ((alpha / 2.0 * k as f64).floor() as usize).min(k - 1);
    let hi = (((1.0 - alpha / 2.0) * k as f64).ceil() as usize).clamp(1, k) - 1;
    Some(DifferenceCi { estimate, low: diffs[lo], high: diffs[hi], confidence: opts.confidence })
}

/// The nearest-rank percentile `p` of a sorted sample, and its value in a bootstrap resample.
struct OrderStatistic<'a> {
    sorted: &'a [f64],
    /// The rank `k` (1-based) of the percentile in a sample of this size.
    rank: usize,
    /// `U₍ₖ₎` of `n` uniforms.
    beta: Beta<f64>,
}

impl<'a> OrderStatistic<'a> {
    fn new(sorted: &'a [f64], p: u32) -> Option<Self> {
        let n = sorted.len();
        let rank = nearest_rank_position(p, n as u64) as usize;
        let beta = Beta::new(rank as f64, (n - rank + 1) as f64).ok()?;
        Some(OrderStatistic { sorted, rank, beta })
    }

    fn value(&self) -> f64 {
        self.sorted[self.rank - 1]
    }

    fn resampled(&self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        let n = self.sorted.len();
        let u: f64 = self.beta.sample(rng);
        self.sorted[((n as f64 * u) as usize).min(n - 1)]
    }
}

/// Settings of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CompareOptions {
    /// Significance level of the Mann–Whitney test.
    pub alpha: f64,
    pub bootstrap: BootstrapOptions,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions { alpha: 0.05, bootstrap: BootstrapOptions::default() }
    }
}

/// Which evidence decided [`Comparison::significant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The median: Mann–Whitney p < α.
    RankTest,
    /// Another percentile: the bootstrap interval of the difference excludes zero.
    BootstrapCi,
}

/// One metric's percentile, base against new.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub percentile: u32,
    pub base: f64,
    pub new: f64,
    /// (new − base) ÷ base × 100; `None` when base is zero.
    pub change_pct: Option<f64>,
    pub mann_whitney: Option<MannWhitney>,
    pub difference_ci: Option<DifferenceCi>,
    /// Values per side (requests, or runs for [`compare_runs`]).
    pub n_base: usize,
    pub n_new: usize,
    pub significant: bool,
    pub decision: Decision,
}

/// Compare percentile `p` of two samples of raw per-request values. `None` when either is
/// empty.
pub fn compare_samples(base: &[f64], new: &[f64], p: u32, opts: &CompareOptions) -> Option<Comparison> {
    let (b, n) = (percentile(base, p)?, percentile(new, p)?);
    let mann_whitney = mann_whitney_u(new, base, UMethod::Auto);
    let difference_ci = percentile_difference_ci(base, new, p, &opts.bootstrap);
    Some(decide(p, b, n, mann_whitney, difference_ci, base.len(), new.len(), opts))
}

/// Compare with several runs per side: each run is summarised by its percentile `p`, and the
/// runs' values are the samples (the side's value is their median; the interval comes from
/// resampling runs). Honest about few runs: with k runs per side the smallest possible
/// two-sided p is 2 ÷ C(2k, k), so 3 runs per side can never reach p < 0.05 (0.1 at best),
/// and the median of the runs is then called significant only with 4 or more per side.
pub fn compare_runs(base: &[&[f64]], new: &[&[f64]], p: u32, opts: &CompareOptions) -> Option<Comparison> {
    let per_run = |runs: &[&[f64]]| -> Option<Vec<f64>> { runs.iter().map(|r| percentile(r, p)).collect() };
    let (base_runs, new_runs) = (per_run(base)?, per_run(new)?);
    let (b, n) = (percentile(&base_runs, 50)?, percentile(&new_runs, 50)?);
    let mann_whitney = mann_whitney_u(&new_runs, &base_runs, UMethod::Auto);
    let difference_ci = bootstrap_difference(&base_runs, &new_runs, &opts.bootstrap, 50);
    let mut c = decide(50, b, n, mann_whitney, difference_ci, base_runs.len(), new_runs.len(), opts);
    c.percentile = p;
    Some(c)
}

#[allow(clippy::too_many_arguments)]
fn decide(
    p: u32,
    base: f64,
    new: f64,
    mann_whitney: Option<MannWhitney>,
    difference_ci: Option<DifferenceCi>,
    n_base: usize,
    n_new: usize,
    opts: &CompareOptions,
) -> Comparison {
    let (decision, significant) = if p == 50 {
        (Decision::RankTest, mann_whitney.as_ref().is_some_and(|m| m.p_value < opts.alpha))
    } else {
        (Decision::BootstrapCi, difference_ci.as_ref().is_some_and(DifferenceCi::excludes_zero))
    };
    let change_pct = (base != 0.0).then(|| (new - base) / base.abs() * 100.0);
    Comparison {
        percentile: p,
        base,
        new,
        change_pct,
        mann_whitney,
        difference_ci,
        n_base,
        n_new,
        significant,
        decision,
    }
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
