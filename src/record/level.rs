//! What a load level was and what its pacing knew: the level's pacing as recorded, what the
//! scheduler issued beyond the outcomes, and each request's dispatch (intended time, queue wait).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::scenario::{Arrival, Overload};

/// When a request was meant to go and how long it waited for a slot; the worker adds when it
/// actually went.
#[derive(Debug, Clone, Copy)]
pub struct Dispatch {
    pub level_start: Instant,
    /// The schedule's time for this request (open loop); `None` in a closed loop.
    pub intended: Option<Instant>,
    /// Time spent waiting for an in-flight slot (`overload = "queue"`).
    pub queue_wait: Duration,
}

impl Dispatch {
    pub fn closed(level_start: Instant) -> Self {
        Dispatch { level_start, intended: None, queue_wait: Duration::ZERO }
    }
}

/// One load level as the scenario sets it: a concurrency stays an integer from the command line
/// to the scheduler; a rate is requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    Concurrency(u32),
    Rate(f64),
}

impl Level {
    /// The level as a number (for the capacity search's arithmetic and its trace).
    pub fn value(self) -> f64 {
        match self {
            Level::Concurrency(c) => f64::from(c),
            Level::Rate(r) => r,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Level::Concurrency(c) => write!(f, "{c}"),
            Level::Rate(r) => write!(f, "{r}"),
        }
    }
}

/// How one level was paced.
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
}

/// What the pacing knows that the outcomes do not.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Issued {
    /// Arrivals in the schedule (open loop).
    pub planned_arrivals: Option<u64>,
    /// The planned issuing window: where the schedule ends (open loop) or `duration`.
    pub planned_window: Option<Duration>,
}
