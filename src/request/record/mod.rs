//! What one request produced and how it is kept: the last step of the request side, and what
//! the results side reads.
//!
//! `outcome` is what a worker hands over (a completed measurement, a failure, a dropped arrival);
//! `timing` turns it into the per-request records of the artifact (`request_timings[]`,
//! `failures[]`, `dropped[]`) and decides phases and exclusions, once, from plain facts; `file`
//! keeps them in the append-only records file; `run_info` is the run's fixed description (the
//! file's first line); `level` is what a level's pacing knew; `shard` says which shard of a split
//! run it was; `checks` holds the canary and controlled-output results; `schema_check` the
//! structured-output check's; `integrity`
//! tallies what each level wrote and checks that a file
//! still holds it; `tool_calls` is what a response's tool calls were. Nothing here computes a summary.

pub mod checks;
pub mod client;
pub mod file;
pub mod gaps;
pub mod integrity;
pub mod level;
pub mod outcome;
pub mod replay;
pub mod run_info;
pub mod schema_check;
pub mod shard;
pub mod timing;
pub mod tool_calls;
pub mod writer;

pub use crate::contract::Stamp;
pub use checks::{CanaryCheck, CanaryFailure, ControlledOutput, UsageSetAside, canary_failure_counts, usage_plausible};
pub use client::ClientLoad;
pub use gaps::GapSketch;
pub use level::{Dispatch, Issued, LevelPacing};
pub use outcome::{Completed, Dropped, Failed, Outcome, TokenSource};
pub use replay::{MediaFacts, MediaProbe, ReplayFacts};
pub use run_info::{ProbeResult, RunInfo, SamplingParam, SamplingRecord, ServeFlagsRecord, SizingRecord, fingerprint};
pub use schema_check::SchemaCheck;
pub use shard::{ShardInfo, ShardPart, ShardsBlock};
pub use timing::{DroppedRecord, Exclusion, Exclusions, FailureRecord, Phase, RequestTiming};
pub use tool_calls::ToolCallRecord;
