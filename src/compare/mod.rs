//! `compare BASE NEW`: the statistics that decide whether a metric changed (`stats`),
//! benchstat-style rows that say so (`format`), which levels are compared with which
//! (`matching`), the `--max-regress` thresholds (`gate`) and the command itself (`run`).

pub mod format;
pub mod gate;
pub mod matching;
pub mod run;
pub mod stats;
