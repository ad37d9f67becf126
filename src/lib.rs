//! anvil-load: a load generator for OpenAI-compatible LLM inference servers.
//!
//! The pipeline, one module per stage: `scenario` (TOML → validated plan) → `workload`
//! (prompts, canaries) → `schedule` (pacing) → `worker` (one streamed request, timed) →
//! `aggregate` (one task owning every sample) → `artifact` (the JSON contract) → `report`
//! (console). `openai` holds the wire format; `mock` is the simulator (the `anvil_sim` crate); `app`
//! is `run()`, the whole program; `cli` parses arguments; `shard` splits one run over several
//! processes or hosts, and `deploy` prints what runs them on a cluster. After a run, `gather` reads
//! results back (artifacts, sweep summaries, search traces, time series), `present` writes them
//! as a report and `compare` tests two sets of them against each other.

#![deny(unsafe_code)]

/// The simulator, a crate of its own (`anvil_sim`), under the name it has always had here.
pub use anvil_sim as mock;

pub mod aggregate;
pub mod app;
pub mod artifact;
pub mod cli;
pub mod compare;
pub mod contract;
pub mod deploy;
pub mod gather;
pub mod openai;
pub mod present;
pub mod rebuild;
pub mod record;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod search;
pub mod server_metrics;
pub mod session;
pub mod shard;
pub mod sys;
pub mod trace;
pub mod worker;
pub mod workload;
