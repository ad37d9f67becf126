//! The client's live metrics during a run, and where they go.
//!
//! The aggregator feeds one registry as it collects (counts, tokens, in-flight, time
//! histograms by level and phase); a reading of it (`Snapshot`) is what every renderer writes:
//! `/metrics` for a scraper, Prometheus remote write and OTLP for a push. The names derive from
//! the contract's vocabulary once (`names`). The artifact stays the exact record; these are
//! the same counts, and histograms with fixed buckets for live views.

pub mod exposition;
pub mod names;
pub mod otlp;
pub mod push;
pub mod registry;
pub mod remote_write;
pub mod serve;
pub mod snapshot;

pub use registry::{LevelMetrics, Registry};
