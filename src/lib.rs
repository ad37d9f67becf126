//! anvil-load: a load generator for OpenAI-compatible LLM inference servers.
//!
//! The modules in pipeline order, one line each, grouped by stage; a module imports only from its
//! own stage or an earlier one (`tests/layout.rs` checks it, and that this list, the declarations
//! below and the Layout of `docs/development.md` name the same modules in the same order).
//!
//! The ground floor: words every stage uses:
//! - `contract`: the contract's vocabulary: error kinds, metrics, statistics, totals, SLO objectives.
//! - `redact`: credentials and query values out of every URL the tool writes.
//! - `sys`: the few system calls (file limits, CPU time, input files); `unsafe` is denied elsewhere.
//! - `mock`: the simulator, a crate of its own (`anvil_sim`), under the name it has always had here.
//!
//! The plan: what to send, and when:
//! - `scenario`: TOML (or flags) → one validated, typed plan; the checker and every rule.
//! - `search`: the capacity search: which level to run next.
//! - `session`: conversations, the plan side: shape, turns, history, turn canaries.
//! - `trace`: trace files (timestamps and sizes) replayed as arrivals.
//! - `workload`: prompts: synthetic text sized by calibration, datasets, canaries.
//!
//! The request side: one streamed request, timed:
//! - `openai`: wire formats of the six APIs: requests, SSE streams, usage.
//! - `server_metrics`: the server's own `/metrics`, scraped around and through each level.
//! - `worker`: one request sent, streamed and timed to the byte; failures classified.
//!
//! The results side: records → one summary per level → renderers:
//! - `aggregate`: one task owning every sample: collects, then `finish_level` makes one typed summary.
//! - `artifact`: the `anvil-serving.benchmark/v1` artifact: a pure mapping of the summary.
//! - `console`: what the user sees during and after a run: progress, warnings, level summary, sweep table.
//! - `record`: what one request produced and how it is kept: outcomes, records file, the run's description.
//!
//! Running a level:
//! - `schedule`: pacing (closed and open loop, sessions, traces) and the workers it drives.
//!
//! After a run: records and artifacts read back:
//! - `compare`: `anvil-load compare`: levels matched, tested and gated.
//! - `gather`: result files read back typed and grouped into runs (artifacts, sweeps, searches, time series).
//! - `present`: `anvil-load report`: one document as HTML or Markdown.
//! - `rebuild`: records files back into artifacts: `summarize` and `merge`, through one checked reader.
//!
//! One run over many processes or hosts:
//! - `deploy`: `anvil-load deploy`: manifests that run the shards on a cluster.
//! - `shard`: sharded runs: options, coordinator, authenticated link, clocks, the run's seam to the others.
//!
//! The program:
//! - `app`: `run()`: the whole program, top to bottom.
//! - `cli`: command-line types (clap).

#![deny(unsafe_code)]

// The ground floor: words every stage uses.
pub mod contract;
pub mod redact;
pub mod sys;
pub use anvil_sim as mock;

// The plan: what to send, and when.
pub mod scenario;
pub mod search;
pub mod session;
pub mod trace;
pub mod workload;

// The request side: one streamed request, timed.
pub mod openai;
pub mod server_metrics;
pub mod worker;

// The results side: records → one summary per level → renderers.
pub mod aggregate;
pub mod artifact;
pub mod console;
pub mod record;

// Running a level.
pub mod schedule;

// After a run: records and artifacts read back.
pub mod compare;
pub mod gather;
pub mod present;
pub mod rebuild;

// One run over many processes or hosts.
pub mod deploy;
pub mod shard;

// The program.
pub mod app;
pub mod cli;
