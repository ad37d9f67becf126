//! How the client itself fared during a level: how late its runtime woke a task that asked to be
//! woken on time, and how much CPU the process used. A late runtime stamps reads late, so this is
//! the client's share of every latency it reports; the validity check reads it.

use serde::{Deserialize, Serialize};

/// The level's lateness probe and CPU use, as kept in the records file's `level_end` line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientLoad {
    /// Wake-ups the probe measured (one per `probe_interval_ms`).
    pub probes: u64,
    pub probe_interval_ms: f64,
    /// How late the probe was polled after its deadline: p50, p99 and max over the level, from an
    /// HDR histogram of microseconds (3 significant digits; memory stays bounded in soaks).
    pub lateness_p50_ms: f64,
    pub lateness_p99_ms: f64,
    pub lateness_max_ms: f64,
    /// CPU time (user + system) the whole process used during the level: with the embedded
    /// simulator this includes the server.
    pub cpu_ms: f64,
    pub wall_ms: f64,
    /// Cores the process may run on.
    pub cores: u32,
}

impl ClientLoad {
    /// CPU used as a share of the cores available over the level (0–1).
    pub fn cpu_share(&self) -> Option<f64> {
        let capacity = self.wall_ms * f64::from(self.cores.max(1));
        (capacity > 0.0).then(|| (self.cpu_ms / capacity).clamp(0.0, 1.0))
    }

    /// The worst of several shards' figures (a merged level is as late as its latest shard).
    pub fn worst(loads: impl IntoIterator<Item = ClientLoad>) -> Option<ClientLoad> {
        loads.into_iter().max_by(|a, b| a.lateness_p99_ms.total_cmp(&b.lateness_p99_ms))
    }
}
