//! The building blocks of `compare BASE NEW`: the statistics that decide whether a metric
//! changed (`stats`), and benchstat-style rows that say so (`format`).

pub mod format;
pub mod stats;
