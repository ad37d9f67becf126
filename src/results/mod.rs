//! The results side: one summary per level, and its renderers.
//!
//! - `aggregate`: one task owning every sample: collects, then `finish_level` makes one typed summary.
//! - `artifact`: the `anvil-serving.benchmark/v1` artifact: a pure mapping of the summary.
//! - `console`: what the user sees during and after a run: progress, warnings, level summary, sweep table.
//! - `knee`: where a sweep's latency starts to outgrow its throughput, one rule for the console and the report.
//! - `live`: the client's live metrics during a run: one registry, read by `/metrics`, remote write and OTLP.

pub mod aggregate;
pub mod artifact;
pub mod console;
pub mod knee;
pub mod live;
