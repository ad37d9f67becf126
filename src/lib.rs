//! anvil-load: a load generator for OpenAI-compatible LLM inference servers.
//!
//! `src/` reads like the pipeline: a folder per stage, each module one line below, in order. A
//! module imports only from its own stage or an earlier one, and no two modules import each other
//! (`tests/layout.rs` checks both, and that this list, the declarations, each stage's own list and
//! the Layout of `docs/development.md` name the same modules in the same order).
//!
//! The ground floor, words every stage uses:
//! - `contract`: the contract's vocabulary: error kinds, metrics, statistics, totals, SLO objectives.
//! - `numbers`: numbers as people read them: one unit per column, integers as integers, separators, ticks.
//! - `redact`: what may be written: URLs without credentials, server strings sanitized, never a secret.
//! - `sys`: the few system calls (file limits, CPU time, input files); `unsafe` is denied elsewhere.
//! - `text`: the words synthetic prompts are made of, the built-in token estimate, numbers as people write them.
//! - `mock`: the simulator, a crate of its own (`anvil_sim`), under the name it has always had here.
//!
//! `plan/`, the plan: what to send, and when:
//! - `scenario`: TOML (or flags) → one validated, typed plan; the checker and every rule.
//! - `search`: the capacity search: which level to run next.
//! - `session`: conversations, the plan side: shape, turns, history, turn canaries.
//! - `trace`: trace files (timestamps and sizes) replayed as arrivals.
//!
//! `request/`, the request side: requests paced, built, sent, timed, checked and recorded:
//! - `cache_reset`: the server's prefix cache reset before each level (vLLM, SGLang, llama.cpp), on every replica.
//! - `openai`: wire formats of the six APIs: requests, SSE streams, usage.
//! - `record`: what a request produced and how it is kept: outcomes, records file, the run's description.
//! - `schedule`: pacing (closed and open loop, sessions, traces) and the workers it drives.
//! - `server_metrics`: the server's own `/metrics`, scraped around and through each level.
//! - `worker`: one request sent, streamed and timed to the byte; failures classified.
//! - `workload`: the prompts a request carries (synthetic text sized by calibration, datasets, traces, conversations) and their canaries, checked against its answer.
//!
//! `results/`, the results side: one summary per level, and its renderers:
//! - `aggregate`: one task owning every sample: collects, then `finish_level` makes one typed summary.
//! - `artifact`: the `anvil-serving.benchmark/v1` artifact: a pure mapping of the summary.
//! - `console`: what the user sees during and after a run: progress, warnings, level summary, sweep table.
//! - `knee`: where a sweep's latency starts to outgrow its throughput, one rule for the console and the report.
//! - `live`: the client's live metrics during a run: one registry, read by `/metrics`, remote write and OTLP.
//!
//! `after_run/`, after a run: records and artifacts read back:
//! - `compare`: `anvil-load compare`: levels matched, tested and gated.
//! - `export`: `anvil-load export`: per-request records as a Parquet or CSV table.
//! - `gather`: result files read back typed and grouped into runs (artifacts, sweeps, searches, time series).
//! - `present`: `anvil-load report`: one document as HTML or Markdown.
//! - `rebuild`: records files back into artifacts: `summarize` and `merge`, through one checked reader.
//!
//! `distributed/`, one run over many processes or hosts:
//! - `deploy`: `anvil-load deploy`: manifests that run the shards on a cluster.
//! - `shard`: sharded runs: options, coordinator, authenticated link, clocks, the run's seam to the others.
//!
//! The program:
//! - `app`: `run()`: the whole program, top to bottom.
//! - `cli`: command-line types (clap).

#![deny(unsafe_code)]

// The ground floor.
pub mod contract;
pub mod numbers;
pub mod redact;
pub mod sys;
pub mod text;
pub use anvil_sim as mock;

// The stages, in pipeline order (one to a group, so that rustfmt keeps the order).
pub mod plan;

pub mod request;

pub mod results;

pub mod after_run;

pub mod distributed;

// The program.
pub mod app;
pub mod cli;
