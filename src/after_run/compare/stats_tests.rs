//! Tests of `compare::stats`. Expected values marked "SciPy" were computed with SciPy 1.17.1:
//! `scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method=M)` (statistic, pvalue) and
//! `scipy.stats.norm.sf(z)`.

use super::*;
use rand::RngExt;

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs().max(f64::MIN_POSITIVE)
}

#[track_caller]
fn assert_close(got: f64, want: f64, rel: f64) {
    assert!(close(got, want, rel), "got {got:e}, want {want:e} (relative tolerance {rel:e})");
}

#[test]
fn normal_tail_matches_scipy() {
    // SciPy: norm.sf(z).
    let cases = [
        (-3.0, 0.998_650_101_968_369_9),
        (0.0, 0.5),
        (0.5, 0.308_537_538_725_986_9),
        (1.0, 0.158_655_253_931_457_07),
        (1.959_963_984_540_054, 0.025),
        (2.4, 0.008_197_535_924_596_131),
        (3.0, 0.001_349_898_031_630_093_3),
        (3.7, 0.000_107_799_733_477_388_23),
        (5.0, 2.866_515_718_791_933e-7),
        (8.0, 6.220_960_574_271_74e-16),
        (12.0, 1.776_482_112_077_653e-33),
        (20.0, 2.753_624_118_606_155_6e-89),
    ];
    for (z, want) in cases {
        assert_close(normal_sf(z), want, 1e-12);
    }
}

/// SciPy's own example data (the `wilcoxon` docs), with ties in `y`. (3.14 is a measurement,
/// not π.)
const TIES_X: [f64; 9] = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
#[allow(clippy::approx_constant)]
const TIES_Y: [f64; 9] = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29];
const HEAVY_X: [f64; 15] = [3., 3., 4., 5., 5., 5., 6., 7., 7., 8., 9., 9., 9., 10., 12.];
const HEAVY_Y: [f64; 16] = [4., 5., 5., 6., 6., 7., 8., 8., 9., 10., 10., 11., 12., 12., 13., 14.];

#[test]
fn mann_whitney_matches_scipy() {
    let separated_x: Vec<f64> = (10..20).map(f64::from).collect();
    let separated_y: Vec<f64> = (0..10).map(f64::from).collect();
    // (x, y, method asked, method used, SciPy statistic, SciPy p-value)
    type Case<'a> = (&'a [f64], &'a [f64], UMethod, UMethod, f64, f64);
    let cases: [Case; 9] = [
        (&TIES_X, &TIES_Y, UMethod::Auto, UMethod::Asymptotic, 58.0, 0.132_919_458_185_318_92),
        (
            &[19., 22., 16., 29., 24.],
            &[20., 11., 17., 12.],
            UMethod::Auto,
            UMethod::Exact,
            17.0,
            0.111_111_111_111_111_1,
        ),
        (
            &[19., 22., 16., 29., 24.],
            &[20., 11., 17., 12.],
            UMethod::Asymptotic,
            UMethod::Asymptotic,
            17.0,
            0.111_346_886_533_140_41,
        ),
        (&separated_x, &separated_y, UMethod::Auto, UMethod::Asymptotic, 100.0, 0.000_182_671_791_109_550_02),
        (&separated_x, &separated_y, UMethod::Exact, UMethod::Exact, 100.0, 1.082_508_822_446_903e-5),
        (&HEAVY_X, &HEAVY_Y, UMethod::Auto, UMethod::Asymptotic, 77.0, 0.091_250_843_217_000_7),
        (&[1., 2., 3., 4., 5.], &[1., 2., 3., 4., 5.], UMethod::Auto, UMethod::Asymptotic, 12.5, 1.0),
        (&[5.5], &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10.], UMethod::Auto, UMethod::Exact, 5.0, 1.0),
        (&[5.5], &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10.], UMethod::Asymptotic, UMethod::Asymptotic, 5.0, 1.0),
    ];
    for (x, y, asked, used, u, p) in cases {
        let r = mann_whitney_u(x, y, asked).expect("a result");
        assert_eq!(r.method, used, "{x:?} vs {y:?}");
        assert_eq!(r.u, u, "{x:?} vs {y:?}");
        assert_close(r.p_value, p, 1e-9);
        // The test is symmetric: swapping the samples gives U₂ and the same p.
        let swapped = mann_whitney_u(y, x, asked).expect("a result");
        assert_eq!(swapped.u, (x.len() * y.len()) as f64 - u);
        assert_close(swapped.p_value, p, 1e-12);
    }
}

#[test]
fn mann_whitney_refuses_empty_and_nan_and_scales_to_large_samples() {
    assert!(mann_whitney_u(&[], &[1.0], UMethod::Auto).is_none());
    assert!(mann_whitney_u(&[f64::NAN], &[1.0], UMethod::Auto).is_none());
    // 5,000 vs 8 without ties: exact, and the counts fit.
    let big: Vec<f64> = (0..5000).map(|i| f64::from(i) + 0.5).collect();
    let small: Vec<f64> = (0..8).map(|i| f64::from(i) * 700.0).collect();
    let r = mann_whitney_u(&small, &big, UMethod::Auto).expect("result");
    assert_eq!(r.method, UMethod::Exact);
    assert!(r.p_value > 0.05 && r.p_value <= 1.0, "{r:?}");
    // A shift of a fifth of a standard deviation in 2,000 values per side is detected.
    let base: Vec<f64> = (0..2000).map(|i| f64::from(i % 100)).collect();
    let new: Vec<f64> = base.iter().map(|v| v + 6.0).collect();
    let r = mann_whitney_u(&new, &base, UMethod::Auto).expect("result");
    assert!(r.p_value < 1e-6, "{r:?}");
}

#[test]
fn percentiles_are_nearest_rank() {
    let v = [5.0, 1.0, 4.0, 2.0, 3.0];
    assert_eq!(percentile(&v, 50), Some(3.0));
    assert_eq!(percentile(&v, 99), Some(5.0));
    assert_eq!(percentile(&v, 1), Some(1.0));
    let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    assert_eq!(percentile(&hundred, 99), Some(99.0));
    assert_eq!(percentile(&[], 50), None);
}

/// Deterministic pseudo-latencies: a skewed distribution with a long tail.
fn latencies(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let u: f64 = rng.random_range(0.0..1.0);
            scale * (100.0 + 20.0 * (-(1.0 - u).ln()))
        })
        .collect()
}

#[test]
fn the_bootstrap_is_deterministic_and_covers_a_known_shift() {
    let base = latencies(400, 1, 1.0);
    let new: Vec<f64> = latencies(400, 2, 1.0).iter().map(|v| v + 10.0).collect();
    let opts = BootstrapOptions { resamples: 500, ..BootstrapOptions::default() };
    let a = percentile_difference_ci(&base, &new, 50, &opts).expect("ci");
    let b = percentile_difference_ci(&base, &new, 50, &opts).expect("ci");
    assert_eq!(a, b, "same inputs, same seed, same interval");
    assert!(a.low <= 10.0 && 10.0 <= a.high && a.excludes_zero(), "{a:?}");
    assert!(a.low <= a.estimate && a.estimate <= a.high, "{a:?}");
    let other_seed = percentile_difference_ci(&base, &new, 50, &BootstrapOptions { seed: 9, ..opts }).expect("ci");
    assert_ne!(a, other_seed);
    // More data, a narrower interval.
    let wide = percentile_difference_ci(&base[..50], &new[..50], 50, &opts).expect("ci");
    assert!(wide.high - wide.low > a.high - a.low);
    assert!(percentile_difference_ci(&[], &new, 50, &opts).is_none());
    assert!(percentile_difference_ci(&base, &new, 50, &BootstrapOptions { confidence: 1.0, ..opts }).is_none());
}

#[test]
fn same_distribution_pairs_are_flagged_about_once_in_twenty() {
    // At 95 % a pair of samples of one distribution is flagged one time in twenty by design;
    // the percentile bootstrap of a tail percentile must not do much worse (it is known to
    // under-cover for small samples). 20 seeded pairs: 1 expected, 4 would be a defect.
    let opts = BootstrapOptions { resamples: 200, ..BootstrapOptions::default() };
    for p in [50, 90, 99] {
        let flagged = (0..20)
            .filter(|&i| {
                let (a, b) = (latencies(100, 1000 + 2 * i, 1.0), latencies(100, 1001 + 2 * i, 1.0));
                percentile_difference_ci(&a, &b, p, &opts).expect("ci").excludes_zero()
            })
            .count();
        assert!(flagged <= 3, "p{p}: {flagged} of 20 same-distribution pairs flagged");
    }
}

#[test]
fn a_slower_build_is_flagged_and_the_same_build_is_not() {
    let bootstrap = BootstrapOptions { resamples: 500, ..BootstrapOptions::default() };
    let opts = CompareOptions { bootstrap, ..CompareOptions::default() };
    let base = latencies(300, 11, 1.0);
    let same = latencies(300, 12, 1.0);
    let slower = latencies(300, 13, 1.2);
    for p in [50, 99] {
        let c = compare_samples(&base, &same, p, &opts).expect("comparison");
        assert!(!c.significant, "p{p}: {c:?}");
        let c = compare_samples(&base, &slower, p, &opts).expect("comparison");
        assert!(c.significant, "p{p}: {c:?}");
        assert!(c.change_pct.expect("change") > 5.0, "p{p}: {c:?}");
        assert_eq!(c.decision, if p == 50 { Decision::RankTest } else { Decision::BootstrapCi });
        assert_eq!((c.n_base, c.n_new), (300, 300));
    }
}

#[test]
fn between_runs_the_run_to_run_spread_decides() {
    let opts = CompareOptions::default();
    // Five runs per side whose medians wander by ±5 % from run to run.
    let runs = |seed: u64, scale: f64| -> Vec<Vec<f64>> {
        (0..5).map(|i| latencies(200, seed + i, scale * (0.95 + 0.025 * i as f64))).collect()
    };
    let (base, same, slower) = (runs(100, 1.0), runs(200, 1.0), runs(300, 1.3));
    fn refs(v: &[Vec<f64>]) -> Vec<&[f64]> {
        v.iter().map(Vec::as_slice).collect()
    }
    let c = compare_runs(&refs(&base), &refs(&same), 50, &opts).expect("comparison");
    assert!(!c.significant, "{c:?}");
    assert_eq!((c.n_base, c.n_new), (5, 5));
    let c = compare_runs(&refs(&base), &refs(&slower), 50, &opts).expect("comparison");
    assert!(c.significant, "{c:?}");
    // SciPy: 5 vs 5 completely separated, exact: p = 2 / C(10, 5) = 0.00793650793650793.
    assert_close(c.mann_whitney.as_ref().expect("test").p_value, 2.0 / 252.0, 1e-12);
    let c = compare_runs(&refs(&base), &refs(&slower), 99, &opts).expect("comparison");
    assert_eq!(c.percentile, 99);
    assert!(c.significant, "{c:?}");
    // Three runs per side can never reach p < 0.05.
    let c = compare_runs(&refs(&base)[..3], &refs(&slower)[..3], 50, &opts).expect("comparison");
    assert!(!c.significant && close(c.mann_whitney.expect("test").p_value, 0.1, 1e-12));
    assert!(compare_runs(&[], &refs(&slower), 50, &opts).is_none());
}

#[test]
fn the_smallest_p_of_few_values_is_the_exact_one() {
    // SciPy: two completely separated samples, exact: 2 / C(n_x + n_y, n_x).
    assert_close(smallest_p(1, 1), 1.0, 1e-12);
    assert_close(smallest_p(3, 3), 0.1, 1e-12);
    assert_close(smallest_p(5, 5), 0.007_936_507_936_507_936, 1e-12);
    assert_close(smallest_p(6, 6), 2.0 / 924.0, 1e-12);
    assert!(smallest_p(200, 200) < 1e-50);
    assert_eq!(smallest_p(0, 3), 1.0);
}

/// The Beta shortcut draws a resample's percentile with the naive bootstrap's distribution: over
/// 20,000 resamples of a skewed sample, the drawn p50 and p99 take each value as often as
/// building every resample and selecting in it does (within sampling error).
#[test]
fn the_order_statistic_shortcut_is_the_naive_bootstrap() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let mut sample: Vec<f64> =
        (0..200).map(|_| (-(1.0 - rng.random_range(0.0..1.0_f64)).ln() * 10.0).round()).collect();
    sample.sort_by(f64::total_cmp);
    for p in [50, 99] {
        let draw = OrderStatistic::new(&sample, p).expect("a sample");
        let rounds = 20_000;
        let (mut fast, mut naive) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        let mut resample = vec![0.0; sample.len()];
        for _ in 0..rounds {
            fast.push(draw.resampled(&mut rng));
            for slot in resample.iter_mut() {
                *slot = sample[rng.random_range(0..sample.len())];
            }
            naive.push(percentile(&resample, p).expect("values"));
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let spread = |v: &[f64]| {
            let m = mean(v);
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        let (mf, mn, sd) = (mean(&fast), mean(&naive), spread(&naive));
        assert!((mf - mn).abs() < 0.05 * sd.max(1.0), "p{p}: mean {mf} against {mn} (sd {sd})");
        assert!((spread(&fast) - sd).abs() < 0.05 * sd.max(1.0), "p{p}: sd {} against {sd}", spread(&fast));
        for q in [5, 50, 95] {
            let (a, b) = (percentile(&fast, q).unwrap(), percentile(&naive, q).unwrap());
            assert!((a - b).abs() <= sd * 0.25, "p{p} q{q}: {a} against {b}");
        }
    }
}

#[test]
fn sorted_and_shuffled_values_give_the_same_bits() {
    // Ties within and across the samples, both zeros, and values the walk meets from either side.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let mut x: Vec<f64> = (0..400).map(|_| f64::from(rng.random_range(0..60u32)) / 4.0).collect();
    let mut y: Vec<f64> = (0..300).map(|_| f64::from(rng.random_range(0..80u32)) / 4.0).collect();
    x.extend([0.0, -0.0, 0.25]);
    y.extend([-0.0, 0.0]);
    let (mut xs, mut ys) = (x.clone(), y.clone());
    xs.sort_unstable_by(f64::total_cmp);
    ys.sort_unstable_by(f64::total_cmp);
    assert!(is_sorted(&xs) && !is_sorted(&x));
    for method in [UMethod::Auto, UMethod::Asymptotic] {
        assert_eq!(mann_whitney_u(&x, &y, method), mann_whitney_u(&xs, &ys, method));
    }
    for p in [1, 50, 90, 99, 100] {
        assert_eq!(percentile(&x, p).map(f64::to_bits), percentile(&xs, p).map(f64::to_bits));
        let opts = BootstrapOptions { resamples: 200, confidence: 0.95, seed: 3 };
        assert_eq!(percentile_difference_ci(&x, &y, p, &opts), percentile_difference_ci(&xs, &ys, p, &opts));
    }
    // The U statistic by its definition: pairs (x, y) with x > y, ties counting one half.
    let pairs: f64 = x
        .iter()
        .flat_map(|&a| {
            y.iter().map(move |&b| {
                if a > b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                }
            })
        })
        .sum();
    assert_eq!(mann_whitney_u(&x, &y, UMethod::Asymptotic).unwrap().u, pairs);
}
