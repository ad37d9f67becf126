//! The exported names, each derived once from the contract's vocabulary (`Metric::stem`), and
//! the labels they carry. The dashboard in `deploy/grafana/` and the tests read this list.
//!
//! Cardinality is bounded by the run's own configuration: `level` takes one value per level of
//! the run (a sweep's or a search's levels), `phase` two (`warmup`, `measured`), `outcome`
//! three, `kind` one per `ErrorKind`, `shard` one per process.

use crate::contract::Metric;

/// Requests that ended, by `level`, `phase` and `outcome` (`completed`, `failed`, `dropped`).
pub const REQUESTS: &str = "anvil_requests_total";
/// Failed requests by `level` and error `kind` (the artifact's error kinds).
pub const ERRORS: &str = "anvil_request_errors_total";
/// Requests sent and not yet ended, by `level`.
pub const IN_FLIGHT: &str = "anvil_requests_in_flight";
/// The level running now: its index in the run's order (a gauge, with `level` as a label).
pub const LEVEL: &str = "anvil_level";
/// The client's own lateness (a probe task's timer overshoot), seconds.
pub const LATENESS: &str = "anvil_client_lateness_seconds";

/// Token counters of completed requests, by `level`: `anvil_prompt_tokens_total`,
/// `anvil_completion_tokens_total`.
pub const TOKEN_COUNTERS: [Metric; 2] = [Metric::PromptTokens, Metric::CompletionTokens];

/// Per-request times exported as histograms in seconds, by `level` and `phase`.
pub const HISTOGRAMS: [Metric; 7] = [
    Metric::Ttft,
    Metric::TimeToFirstOutput,
    Metric::Tpot,
    Metric::ItlChunk,
    Metric::E2e,
    Metric::ScheduleLag,
    Metric::QueueWait,
];

/// Bucket bounds of every time histogram, seconds: 1 ms to 10 min, about ×2 apart with the
/// common SLO thresholds (50, 100, 200, 500 ms, 1, 2, 5 s) among them.
pub const BUCKETS_SECONDS: [f64; 20] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
    600.0,
];

/// The name of a counter of tokens (`anvil_prompt_tokens_total`).
pub fn token_counter(m: Metric) -> String {
    format!("anvil_{}_total", m.stem())
}

/// The name of a time histogram (`anvil_ttft_seconds`).
pub fn histogram(m: Metric) -> String {
    format!("anvil_{}_seconds", m.stem())
}

/// Every family name the client exports (histograms without their suffixes).
pub fn all() -> Vec<String> {
    let mut names: Vec<String> = [REQUESTS, ERRORS, IN_FLIGHT, LEVEL, LATENESS].map(String::from).to_vec();
    names.extend(TOKEN_COUNTERS.map(token_counter));
    names.extend(HISTOGRAMS.map(histogram));
    names
}
