//! `compare BASE NEW`: the metrics it tests, named and judged in the contract's words
//! (`metrics`), the statistics that decide whether a metric changed (`stats`), benchstat-style
//! rows that say so (`format`), which levels are compared with which (`matching`), the
//! `--max-regress` thresholds (`gate`), the check that the values shown are the artifacts'
//! records' own (`verify`), what was found (`result`), the result as text or Markdown (`render`)
//! and the command itself (`run`).

pub mod format;
pub mod gate;
pub mod matching;
pub mod metrics;
mod render;
pub mod result;
pub mod run;
pub mod stats;
pub mod verify;
