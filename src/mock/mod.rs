//! The embedded simulated OpenAI-compatible server, used by the demo, the integration tests
//! and the benchmarks.

mod prefix_cache;
mod profile;
mod stats;
pub mod tokenize;

pub use profile::{PROFILE_NAMES, Profile, ReasoningField, UsagePlacement};
pub use stats::{MockStats, MockStatsSnapshot};
