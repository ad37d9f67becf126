//! Which shard of a split run a records file (and the artifacts built from it) came from, and
//! how its clock relates to shard 0's. Absent from unsharded runs.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// This shard's index, 0-based.
    pub index: u32,
    /// Shards in the run.
    pub count: u32,
    /// How the shards agreed on start instants: `coordinator` or `start_at`.
    pub sync: String,
    /// Shard 0's wall clock minus this host's, in milliseconds (min-RTT ping midpoint); null
    /// without a coordinator, where the hosts' clocks are trusted as they are.
    pub clock_offset_ms: Option<f64>,
    /// The offset is exact within ± this (half the smallest ping round trip).
    pub clock_offset_uncertainty_ms: Option<f64>,
    /// The host this shard ran on.
    pub host: String,
    /// The coordinator's address, when there was one.
    pub coordinator: Option<String>,
}
