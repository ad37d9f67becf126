//! What a load level's pacing knew: what the scheduler issued beyond the outcomes, and each
//! request's dispatch (intended time, queue wait). The level's pacing itself is the scenario's
//! `LevelPacing`, re-exported here because the records file keeps it on each level's line.

use std::time::Duration;

use tokio::time::Instant;

pub use crate::plan::scenario::LevelPacing;

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

/// What the pacing knows that the outcomes do not.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Issued {
    /// Arrivals in the schedule (open loop).
    pub planned_arrivals: Option<u64>,
    /// The planned issuing window: where the schedule ends (open loop) or `duration`.
    pub planned_window: Option<Duration>,
}
