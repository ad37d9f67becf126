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

/// One part as the merged artifact lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardPart {
    pub index: u32,
    pub host: String,
    pub records: String,
    pub clock_offset_ms: Option<f64>,
    pub clock_offset_uncertainty_ms: Option<f64>,
    /// Requests and failures this shard recorded in the level.
    pub requests: u64,
    pub failed: u64,
    /// The shard's level ended cleanly.
    pub complete: bool,
    /// The shard's own validity verdict for the level (its dispatch lag, its drops).
    pub valid: Option<bool>,
    pub validity_reasons: Vec<String>,
}

/// The merged artifact's `shards` block.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardsBlock {
    pub count: u32,
    /// Some shard is missing, or did not finish the level: the numbers cover the others.
    pub partial: bool,
    pub missing: Vec<u32>,
    pub sync: String,
    pub parts: Vec<ShardPart>,
}
