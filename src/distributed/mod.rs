//! One run over many processes or hosts.
//!
//! - `deploy`: `anvil-load deploy`: manifests that run the shards on a cluster.
//! - `shard`: sharded runs: options, coordinator, authenticated link, clocks, the run's seam to the others.

pub mod deploy;
pub mod shard;
