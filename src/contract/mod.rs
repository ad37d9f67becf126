//! The contract's words, each defined once: the names the committed JSON Schemas (`contract/`)
//! and the scenario's `[slo]` keys fix.
//!
//! - [`ErrorKind`]: the failure classes (`error_counts`, `failures[].error_kind`, `client.retry_on`).
//! - [`Metric`] and [`Stat`], joined by [`metric_key`]: every distribution's statistics in the
//!   artifact's flat `metrics` map (`ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`), and what a
//!   percentile is ([`nearest_rank`]).
//! - [`Total`]: every other key of that map (totals, rates, counts).
//! - [`Objective`]: what an `[slo]` key names, read once when the scenario is validated.
//! - [`Worse`]: which way a number gets worse, for objectives' bounds and `compare`'s verdicts.
//! - [`Stamp`]: a wall-clock instant as the artifact and the records write it.
//!
//! This module imports nothing from the rest of the crate: the scenario, the worker, the records,
//! the summary, the artifact and the commands that read artifacts all take their words from here,
//! so a new metric is one variant here plus the code that measures it.

mod error_kind;
mod metric;
mod objective;
mod stamp;
mod total;

pub use error_kind::ErrorKind;
pub use metric::{Metric, Stat, metric_key, nearest_rank, nearest_rank_position};
pub use objective::Objective;
pub use stamp::Stamp;
pub use total::Total;

/// Which way a number gets worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worse {
    /// Latencies, lags, stalls, the error rate.
    WhenHigher,
    /// Throughputs and other rates.
    WhenLower,
}

#[cfg(test)]
mod tests {
    /// The artifact's committed JSON Schema, which every word here must match.
    pub fn committed_schema() -> serde_json::Value {
        serde_json::from_str(include_str!("../../contract/anvil-serving.benchmark.v1.schema.json")).unwrap()
    }

    /// The alternatives of a schema pattern such as `^(a|b|c)$` or `_(a|b)(_ms)?$`.
    pub fn alternatives(pattern: &str) -> Vec<&str> {
        let open = pattern.find('(').unwrap() + 1;
        let close = open + pattern[open..].find(')').unwrap();
        pattern[open..close].split('|').collect()
    }
}
