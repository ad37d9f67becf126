//! The validated `[load]`: how requests are paced, level by level. `Pacing` is the scenario's
//! list of levels with what they share; `LevelPacing` is one level of it, the form the scheduler
//! runs and the records keep; `Pacing::levels` and `Pacing::at` turn the first into the second.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bounds::{humantime_serde, humantime_serde_opt};

/// How requests are paced, level by level.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub pacing: Pacing,
    /// Capacity search instead of a fixed list of levels.
    pub search: Option<Search>,
    /// Dispatch lag p99 above this marks a run invalid.
    #[serde(with = "humantime_serde")]
    pub max_dispatch_lag: Duration,
    /// Client lateness p99 above this marks a level invalid.
    #[serde(with = "humantime_serde")]
    pub max_client_lateness: Duration,
    /// The cache reset called before each level (`load.reset_cache`); absent when none, so
    /// earlier configurations keep their fingerprint.
    #[serde(skip_serializing_if = "super::CacheReset::is_none")]
    pub reset_cache: super::CacheReset,
}

/// How the levels of a run are paced: the scenario's list of levels with what they share.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Pacing {
    /// Fixed concurrency: each worker sends its next request when its last one ends.
    Closed {
        levels: Vec<u32>,
        /// A ceiling on request starts per second across workers.
        max_rate: Option<f64>,
    },
    /// Arrivals on a schedule, independent of the server.
    Open {
        rates: Vec<f64>,
        arrival: Arrival,
        #[serde(with = "humantime_serde_opt")]
        ramp: Option<Duration>,
        max_in_flight: Option<u32>,
        overload: Overload,
    },
}

impl Pacing {
    pub fn mode(&self) -> &'static str {
        match self {
            Pacing::Closed { .. } => "closed",
            Pacing::Open { .. } => "open",
        }
    }

    /// Each configured level's pacing, in order. A concurrency stays the integer the scenario
    /// (or `--concurrency`) gave, from here to the scheduler.
    pub fn levels(&self) -> Vec<LevelPacing> {
        match self {
            Pacing::Closed { levels, max_rate } => {
                levels.iter().map(|&concurrency| LevelPacing::Closed { concurrency, max_rate: *max_rate }).collect()
            }
            Pacing::Open { rates, .. } => rates.iter().map(|&rate| self.at(rate)).collect(),
        }
    }

    /// The pacing of a level a capacity search chose: `level` requests in flight in a closed
    /// loop (a whole number: the search rounds every concurrency it probes), or per second in
    /// an open one.
    pub fn at(&self, level: f64) -> LevelPacing {
        match *self {
            Pacing::Closed { max_rate, .. } => {
                debug_assert!(level >= 1.0 && level.fract() == 0.0, "a concurrency of {level}");
                LevelPacing::Closed { concurrency: level as u32, max_rate }
            }
            Pacing::Open { arrival, ramp, max_in_flight, overload, .. } => {
                LevelPacing::Open { rate: level, arrival, ramp, max_in_flight, overload }
            }
        }
    }
}

/// The arrival process of an open loop.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// Evenly spaced.
    Constant,
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps of shape `burstiness` (coefficient of variation 1/√burstiness).
    Gamma { burstiness: f64 },
    /// A trace's own times, multiplied by `time_scale` (`[workload.trace]`).
    Trace { time_scale: f64 },
}

impl Arrival {
    pub fn name(&self) -> &'static str {
        match self {
            Arrival::Constant => "constant",
            Arrival::Poisson => "poisson",
            Arrival::Gamma { .. } => "gamma",
            Arrival::Trace { .. } => "trace",
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overload {
    /// Arrivals beyond `max_in_flight` wait for a slot; the wait is measured.
    Queue,
    /// Arrivals beyond `max_in_flight` are not sent; they are counted and listed.
    Drop,
}

/// Find the highest level meeting every SLO.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Search {
    pub by: SearchBy,
    pub min: f64,
    pub max: f64,
    pub max_steps: u32,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBy {
    Concurrency,
    Rate,
}

/// How one level is paced: what the scheduler runs, and what the records file keeps of it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LevelPacing {
    Closed { concurrency: u32, max_rate: Option<f64> },
    Open { rate: f64, arrival: Arrival, ramp: Option<Duration>, max_in_flight: Option<u32>, overload: Overload },
}

impl LevelPacing {
    /// The level's number: its concurrency or its rate.
    pub fn level(&self) -> f64 {
        match self {
            LevelPacing::Closed { concurrency, .. } => f64::from(*concurrency),
            LevelPacing::Open { rate, .. } => *rate,
        }
    }

    /// What the level's id adds to the run id when a run has several levels: `c4`, `r2.5`.
    pub fn id_suffix(&self) -> String {
        match self {
            LevelPacing::Closed { concurrency, .. } => format!("c{concurrency}"),
            LevelPacing::Open { rate, .. } => format!("r{rate}"),
        }
    }

    /// The level for people: `c=4`, `2.5 req/s`.
    pub fn label(&self) -> String {
        match self {
            LevelPacing::Closed { concurrency, .. } => format!("c={concurrency}"),
            LevelPacing::Open { rate, .. } => format!("{rate} req/s"),
        }
    }

    /// Connections worth opening before the level's clock starts: one per worker of a closed
    /// loop; for an open loop its in-flight cap, or 64 without one, and at most 256 (arrivals
    /// beyond them open their own).
    pub fn warm_connections(&self) -> usize {
        match self {
            LevelPacing::Closed { concurrency, .. } => *concurrency as usize,
            LevelPacing::Open { max_in_flight, .. } => max_in_flight.map_or(64, |m| m as usize).min(256),
        }
    }
}
