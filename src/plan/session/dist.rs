//! Distributions of a conversation's shape: turns, token counts, think times. Each is constant,
//! uniform, normal or lognormal, the last two clamped to bounds; draws are plain `f64`s that the
//! caller rounds to tokens or reads as seconds.

use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, LogNormal, Normal};
use serde::Serialize;

/// A distribution over non-negative numbers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Dist {
    Constant {
        value: f64,
    },
    /// Every value in `[lo, hi]` equally likely (integers: every integer).
    Uniform {
        lo: f64,
        hi: f64,
    },
    /// Normal with this mean and standard deviation, clamped to `[min, max]`.
    Normal {
        mean: f64,
        sd: f64,
        min: f64,
        max: f64,
    },
    /// Lognormal with this mean and standard deviation (of the values themselves, not of their
    /// logarithm), clamped to `[min, max]`.
    Lognormal {
        mean: f64,
        sd: f64,
        min: f64,
        max: f64,
    },
}

impl Dist {
    pub fn constant(value: f64) -> Self {
        Dist::Constant { value }
    }

    pub fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        match *self {
            Dist::Constant { value } => value,
            Dist::Uniform { lo, hi } if hi > lo => rng.random_range(lo..=hi),
            Dist::Uniform { lo, .. } => lo,
            Dist::Normal { mean, sd, min, max } => {
                let v = Normal::new(mean, sd).map_or(mean, |n| n.sample(rng));
                v.clamp(min, max)
            }
            Dist::Lognormal { mean, sd, min, max } => {
                // The log's parameters that give this mean and sd.
                let sigma2 = (1.0 + (sd / mean).powi(2)).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                let v = LogNormal::new(mu, sigma2.sqrt()).map_or(mean, |d| d.sample(rng));
                v.clamp(min, max)
            }
        }
    }

    /// A whole number of at least `floor`: uniform draws over integers, others rounded.
    pub fn sample_count(&self, rng: &mut Xoshiro256PlusPlus, floor: u32) -> u32 {
        let v = match *self {
            Dist::Uniform { lo, hi } if hi > lo => rng.random_range(lo.round() as u64..=hi.round() as u64) as f64,
            _ => self.sample(rng).round(),
        };
        (v.max(f64::from(floor)).min(f64::from(u32::MAX))) as u32
    }

    /// The largest value a draw can take.
    pub fn max(&self) -> f64 {
        match *self {
            Dist::Constant { value } => value,
            Dist::Uniform { hi, .. } => hi,
            Dist::Normal { max, .. } | Dist::Lognormal { max, .. } => max,
        }
    }

    /// The smallest value a draw can take.
    pub fn min(&self) -> f64 {
        match *self {
            Dist::Constant { value } => value,
            Dist::Uniform { lo, .. } => lo,
            Dist::Normal { min, .. } | Dist::Lognormal { min, .. } => min,
        }
    }

    /// For people: `4`, `uniform 2–6`, `normal 512 ± 128 in [64, 2048]`.
    pub fn describe(&self, unit: &str) -> String {
        match *self {
            Dist::Constant { value } => format!("{value}{unit}"),
            Dist::Uniform { lo, hi } => format!("uniform {lo}–{hi}{unit}"),
            Dist::Normal { mean, sd, min, max } => format!("normal {mean} ± {sd}{unit} in [{min}, {max}]"),
            Dist::Lognormal { mean, sd, min, max } => format!("lognormal {mean} ± {sd}{unit} in [{min}, {max}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn draws(d: Dist, n: usize) -> Vec<f64> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
        (0..n).map(|_| d.sample(&mut rng)).collect()
    }

    fn mean_sd(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt())
    }

    #[test]
    fn lognormal_has_the_mean_and_sd_it_was_given() {
        let v = draws(Dist::Lognormal { mean: 1000.0, sd: 500.0, min: 0.0, max: f64::MAX }, 40_000);
        let (m, sd) = mean_sd(&v);
        assert!((m / 1000.0 - 1.0).abs() < 0.02 && (sd / 500.0 - 1.0).abs() < 0.06, "{m} {sd}");
        assert!(v.iter().all(|&x| x > 0.0));
    }

    #[test]
    fn bounds_hold_and_counts_are_whole() {
        let v = draws(Dist::Normal { mean: 10.0, sd: 8.0, min: 2.0, max: 14.0 }, 5000);
        assert!(v.iter().all(|&x| (2.0..=14.0).contains(&x)));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let u = Dist::Uniform { lo: 2.0, hi: 5.0 };
        let mut seen = [0; 6];
        for _ in 0..4000 {
            seen[u.sample_count(&mut rng, 1) as usize] += 1;
        }
        assert!(seen[2..=5].iter().all(|&n| n > 800) && seen[0] + seen[1] == 0, "{seen:?}");
        assert_eq!(Dist::constant(0.0).sample_count(&mut rng, 1), 1, "the floor holds");
    }
}
