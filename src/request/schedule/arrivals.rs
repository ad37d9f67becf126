//! Open-loop arrival schedules as data: a pure function of (arrival kind, rate, ramp, seed, n)
//! giving each arrival's absolute offset from the level start.
//!
//! A unit-rate process is drawn first — gaps of mean 1: all 1 (constant), exponential (Poisson)
//! or gamma of shape `burstiness` and scale `1/burstiness` — then mapped to time through the
//! cumulative rate `Λ(t)` (`t = S / rate`, or the inverse of a linear ramp). Gaps are drawn in
//! blocks of `BLOCK` and each block is rescaled to sum to its length exactly: the process keeps
//! its shape (a rescaled block of exponential gaps is the spacing of uniform points, i.e. a
//! Poisson process conditioned on its count), while the realised rate over any block equals the
//! planned rate, so "achieved rate" measures the client, not sampling noise. Memory stays
//! bounded by one block however long the run.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Exp1, Gamma};

use crate::plan::scenario::Arrival;

/// Gaps drawn and normalised together.
pub const BLOCK: usize = 4096;

/// Iterator over arrival offsets.
pub struct Arrivals {
    arrival: Arrival,
    rate: f64,
    ramp: Option<Duration>,
    rng: Xoshiro256PlusPlus,
    n: u64,
    k: u64,
    /// Position on the unit-rate clock of the next arrival.
    s: f64,
    gaps: Vec<f64>,
    next_gap: usize,
}

impl Arrivals {
    pub fn new(arrival: Arrival, rate: f64, ramp: Option<Duration>, seed: u64, n: u64) -> Self {
        Arrivals {
            arrival,
            rate,
            ramp,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xA441_7A15),
            n,
            k: 0,
            s: 0.0,
            gaps: Vec::new(),
            next_gap: 0,
        }
    }

    /// Where the schedule's window ends so far: the instant the next arrival would come, one gap
    /// after the last one drawn. Once all `n` arrivals are drawn this is exactly the time `n`
    /// arrivals take at the planned rate (the gaps are rescaled to their count), so "achieved
    /// rate" over it is the planned rate when every arrival was sent on time.
    pub fn horizon(&self) -> Duration {
        Duration::from_secs_f64(inverse_cumulative(self.rate, self.ramp, self.s))
    }

    /// Number of arrivals that fit in `duration` at this rate and ramp (at least 1).
    pub fn count_within(rate: f64, ramp: Option<Duration>, duration: Duration) -> u64 {
        cumulative(rate, ramp, duration.as_secs_f64()).round().max(1.0) as u64
    }

    fn refill(&mut self) {
        let left = (self.n - self.k).min(BLOCK as u64) as usize;
        self.gaps.clear();
        match self.arrival {
            // A trace's times come from the trace (`Workload::trace_offset`), never from here.
            Arrival::Constant | Arrival::Trace { .. } => self.gaps.resize(left, 1.0),
            Arrival::Poisson => self.gaps.extend((0..left).map(|_| -> f64 { Exp1.sample(&mut self.rng) })),
            Arrival::Gamma { burstiness } => match Gamma::new(burstiness, 1.0 / burstiness) {
                Ok(g) => self.gaps.extend((0..left).map(|_| g.sample(&mut self.rng))),
                // Validation keeps burstiness positive; a constant schedule is the safe reading.
                Err(_) => self.gaps.resize(left, 1.0),
            },
        }
        let sum: f64 = self.gaps.iter().sum();
        if sum > 0.0 {
            let scale = left as f64 / sum;
            self.gaps.iter_mut().for_each(|g| *g *= scale);
        }
        self.next_gap = 0;
    }
}

impl Iterator for Arrivals {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.k >= self.n {
            return None;
        }
        let offset = Duration::from_secs_f64(inverse_cumulative(self.rate, self.ramp, self.s));
        if self.next_gap >= self.gaps.len() {
            self.refill();
        }
        self.s += self.gaps.get(self.next_gap).copied().unwrap_or(1.0);
        self.next_gap += 1;
        self.k += 1;
        Some(offset)
    }
}

/// `Λ(t)`: expected arrivals by time `t` (seconds).
fn cumulative(rate: f64, ramp: Option<Duration>, t: f64) -> f64 {
    match ramp.map(|r| r.as_secs_f64()).filter(|&r| r > 0.0) {
        Some(r) if t < r => rate * t * t / (2.0 * r),
        Some(r) => rate * r / 2.0 + rate * (t - r),
        None => rate * t,
    }
}

/// `Λ⁻¹(s)`: the time by which `s` arrivals are expected.
fn inverse_cumulative(rate: f64, ramp: Option<Duration>, s: f64) -> f64 {
    match ramp.map(|r| r.as_secs_f64()).filter(|&r| r > 0.0) {
        Some(r) if s < rate * r / 2.0 => (2.0 * s * r / rate).sqrt(),
        Some(r) => r + (s - rate * r / 2.0) / rate,
        None => s / rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(arrival: Arrival, n: u64) -> Vec<f64> {
        let offsets: Vec<f64> = Arrivals::new(arrival, 200.0, None, 42, n).map(|d| d.as_secs_f64()).collect();
        offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced_from_zero() {
        let offsets: Vec<Duration> = Arrivals::new(Arrival::Constant, 200.0, None, 1, 5).collect();
        let ms: Vec<f64> = offsets.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        for (k, v) in ms.iter().enumerate() {
            assert!((v - 5.0 * k as f64).abs() < 1e-6, "{ms:?}");
        }
    }

    #[test]
    fn schedules_are_pure_functions_of_their_inputs() {
        let a: Vec<Duration> = Arrivals::new(Arrival::Poisson, 50.0, None, 7, 300).collect();
        assert_eq!(a, Arrivals::new(Arrival::Poisson, 50.0, None, 7, 300).collect::<Vec<_>>());
        assert_ne!(a, Arrivals::new(Arrival::Poisson, 50.0, None, 8, 300).collect::<Vec<_>>());
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() {
        let mut g = gaps(Arrival::Poisson, 10_001);
        assert_eq!(g.len(), 10_000);
        let mean = 1.0 / 200.0;
        g.sort_by(f64::total_cmp);
        let n = g.len() as f64;
        let d = g
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let cdf = 1.0 - (-x / mean).exp();
                (cdf - i as f64 / n).abs().max(((i + 1) as f64 / n - cdf).abs())
            })
            .fold(0.0, f64::max);
        // Critical value at α = 0.01: 1.628 / √n.
        let critical = 1.628 / n.sqrt();
        assert!(d < critical, "KS statistic {d} ≥ {critical}");
    }

    #[test]
    fn gamma_burstiness_sets_the_coefficient_of_variation() {
        for burstiness in [0.5, 4.0] {
            let g = gaps(Arrival::Gamma { burstiness }, 10_001);
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            let sd = (g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (g.len() - 1) as f64).sqrt();
            let planned = 1.0 / f64::sqrt(burstiness);
            assert!(
                ((sd / mean) / planned - 1.0).abs() < 0.05,
                "burstiness {burstiness}: CV {} vs {planned}",
                sd / mean
            );
        }
    }

    #[test]
    fn the_realised_rate_is_the_planned_rate() {
        for arrival in [Arrival::Constant, Arrival::Poisson, Arrival::Gamma { burstiness: 0.5 }] {
            let n = Arrivals::count_within(200.0, None, Duration::from_secs(10));
            assert_eq!(n, 2000);
            let last = Arrivals::new(arrival, 200.0, None, 3, n).last().unwrap().as_secs_f64();
            // n arrivals span n − 1 mean gaps (minus the last block's final gap).
            assert!(last < 10.0 && last > 9.9, "{arrival:?}: last arrival at {last}");
        }
    }

    #[test]
    fn a_ramp_starts_slowly_and_reaches_the_rate() {
        let ramp = Some(Duration::from_secs(10));
        let n = Arrivals::count_within(100.0, ramp, Duration::from_secs(20));
        assert_eq!(n, 1500); // 500 during the ramp, 1000 after it
        let offsets: Vec<f64> = Arrivals::new(Arrival::Constant, 100.0, ramp, 1, n).map(|d| d.as_secs_f64()).collect();
        let first_second = offsets.iter().filter(|&&t| t < 1.0).count();
        let last_second = offsets.iter().filter(|&&t| t >= 19.0).count();
        assert!(first_second <= 6, "{first_second}");
        assert!((99..=101).contains(&last_second), "{last_second}");
    }
}
