//! Capacity search: the highest load level that meets every SLO.
//!
//! Doubling from `min` until a level fails (or `max` passes), then bisection between the highest
//! passing and the lowest failing level, until they are one step apart (1 for concurrency, 2 % of
//! the level for rates) or the step budget is spent. Pure bookkeeping: the caller runs each level
//! and reports whether it passed, so the algorithm is tested without a server.

use serde::Serialize;

use crate::plan::scenario::{Search, SearchBy};

/// Relative resolution of a rate search.
const RATE_RESOLUTION: f64 = 0.02;

/// One probed level.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub level: f64,
    pub passed: bool,
    /// Requests meeting every per-request objective, per second.
    pub goodput_rps: Option<f64>,
    pub artifact: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CapacitySearch {
    pub by: SearchBy,
    pub min: f64,
    pub max: f64,
    pub max_steps: u32,
    pub probes: Vec<Probe>,
    /// The highest passing level; `None` if even `min` failed.
    pub best: Option<f64>,
    /// Why the search ended.
    pub finished: Option<&'static str>,
}

impl CapacitySearch {
    pub fn new(s: Search) -> Self {
        CapacitySearch {
            by: s.by,
            min: s.min,
            max: s.max,
            max_steps: s.max_steps,
            probes: Vec::new(),
            best: None,
            finished: None,
        }
    }

    fn lowest_failing(&self) -> Option<f64> {
        self.probes.iter().filter(|p| !p.passed).map(|p| p.level).reduce(f64::min)
    }

    fn round(&self, level: f64) -> f64 {
        match self.by {
            SearchBy::Concurrency => level.round(),
            SearchBy::Rate => (level * 1000.0).round() / 1000.0,
        }
    }

    fn close_enough(&self, lo: f64, hi: f64) -> bool {
        match self.by {
            SearchBy::Concurrency => hi - lo <= 1.0,
            SearchBy::Rate => (hi - lo) <= lo * RATE_RESOLUTION,
        }
    }

    /// The next level to probe, or `None` when the search is over (then `finished` says why).
    /// A concurrency is a whole number within the search's bounds (`round`); `Pacing::at` makes
    /// it the level's pacing.
    pub fn next_level(&mut self) -> Option<f64> {
        if self.finished.is_some() {
            return None;
        }
        let level = match (self.best, self.lowest_failing()) {
            (None, None) => self.min,
            (None, Some(_)) => {
                self.finished = Some("the lowest level failed its objectives");
                return None;
            }
            (Some(lo), None) if lo >= self.max => {
                self.finished = Some("the highest level allowed passed");
                return None;
            }
            (Some(lo), None) => (lo * 2.0).min(self.max),
            (Some(lo), Some(hi)) if self.close_enough(lo, hi) => {
                self.finished = Some("bracketed to the resolution");
                return None;
            }
            (Some(lo), Some(hi)) => (lo + hi) / 2.0,
        };
        let level = self.round(level);
        if self.probes.iter().any(|p| p.level == level) {
            self.finished = Some("bracketed to the resolution");
            return None;
        }
        if self.probes.len() as u32 >= self.max_steps {
            self.finished = Some("step budget spent");
            return None;
        }
        Some(level)
    }

    pub fn record(&mut self, probe: Probe) {
        if probe.passed && self.best.is_none_or(|b| probe.level > b) {
            self.best = Some(probe.level);
        }
        self.probes.push(probe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(by: SearchBy, min: f64, max: f64, steps: u32, knee: f64) -> CapacitySearch {
        let mut s = CapacitySearch::new(Search { by, min, max, max_steps: steps });
        while let Some(level) = s.next_level() {
            s.record(Probe { level, passed: level <= knee, goodput_rps: None, artifact: None });
        }
        s
    }

    #[test]
    fn finds_an_integer_knee_exactly() {
        for knee in [1.0, 5.0, 37.0, 100.0, 1023.0] {
            let s = run(SearchBy::Concurrency, 1.0, 1024.0, 24, knee);
            assert_eq!(s.best, Some(knee), "{:?}", s.probes.iter().map(|p| p.level).collect::<Vec<_>>());
        }
    }

    #[test]
    fn finds_a_rate_knee_within_the_resolution() {
        let s = run(SearchBy::Rate, 1.0, 5000.0, 30, 777.0);
        let best = s.best.unwrap();
        assert!((777.0 * (1.0 - 2.0 * RATE_RESOLUTION)..=777.0).contains(&best), "{best}");
    }

    #[test]
    fn respects_bounds_and_budget() {
        let all_pass = run(SearchBy::Concurrency, 1.0, 64.0, 24, f64::INFINITY);
        assert_eq!((all_pass.best, all_pass.finished), (Some(64.0), Some("the highest level allowed passed")));
        let none_pass = run(SearchBy::Concurrency, 4.0, 64.0, 24, 2.0);
        assert_eq!((none_pass.best, none_pass.probes.len()), (None, 1));
        let short = run(SearchBy::Concurrency, 1.0, 1024.0, 5, 300.0);
        assert_eq!(short.probes.len(), 5);
        assert_eq!(short.finished, Some("step budget spent"));
    }
}
