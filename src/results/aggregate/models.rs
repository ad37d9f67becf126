//! Several models (`target.models`): one row per model of the level — requests that named it,
//! failures, TTFT and TPOT p50/p99 (nearest rank over exact samples), output throughput — and,
//! when the run resets the server's cache before each level (`load.reset_cache`), whether the
//! level's first request found anything cached (`cache_not_reset`).
//!
//! Both are tallied in the one pass `finish_level` makes over the level's records, each record
//! naming its model (`model`), so the live run, `summarize` and `merge` agree.

use serde::Serialize;

use super::replicas::Percentiles;
use super::warnings::Warning;
use crate::request::record::{FailureRecord, RequestTiming};

/// One model's row of the level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSummary {
    /// The name the requests sent in `model`.
    pub name: String,
    /// Requests that named it: completed and failed, every phase.
    pub requests: u64,
    pub failures: u64,
    pub ttft_ms: Percentiles,
    pub tpot_ms: Percentiles,
    /// Output tokens of its completed requests over the level's wall clock; null without one.
    pub output_tokens_per_s: Option<f64>,
}

/// What the records of one model hold, as the pass over the level's records goes.
#[derive(Debug, Default, Clone)]
struct Tallied {
    completed: u64,
    failed: u64,
    output_tokens: u64,
    ttft: Vec<f64>,
    tpot: Vec<f64>,
}

/// The rows being tallied (one per model of the mix), and the level's first request.
#[derive(Debug, Default)]
pub struct Tally {
    names: Vec<String>,
    models: Vec<Tallied>,
    /// With a cache reset: the earliest-started request (start offset, index, cached tokens).
    first: Option<(f64, u64, Option<u64>)>,
    reset: bool,
}

impl Tally {
    /// Rows for `names` (none: no per-model table); `reset`: check the first request's cache.
    pub fn new(names: &[String], reset: bool) -> Self {
        Tally { names: names.to_vec(), models: vec![Tallied::default(); names.len()], first: None, reset }
    }

    /// Whether the pass has anything to tally.
    pub fn wanted(&self) -> bool {
        self.names.len() > 1 || self.reset
    }

    fn of(&mut self, model: Option<&str>) -> Option<&mut Tallied> {
        let i = self.names.iter().position(|n| Some(n.as_str()) == model)?;
        self.models.get_mut(i)
    }

    /// A completed request, after the level's final rules were applied to it.
    pub fn request(&mut self, r: &RequestTiming) {
        if self.reset && self.first.is_none_or(|(at, _, _)| r.start_offset_ms < at) {
            self.first = Some((r.start_offset_ms, r.request_index, r.cached_tokens));
        }
        let Some(t) = self.of(r.replay.model.as_deref()) else { return };
        t.completed += 1;
        t.output_tokens += r.output_tokens;
        if r.performance_eligible {
            t.ttft.extend(r.ttft_ms);
            t.tpot.extend(r.tpot_ms);
        }
    }

    /// A failed request.
    pub fn failure(&mut self, f: &FailureRecord) {
        if let Some(t) = self.of(f.replay.model.as_deref()) {
            t.failed += 1;
        }
    }

    /// The rows (none with one model) over a level of `wall_clock_ms`, and the warning when
    /// the level's first request found cached tokens after the reset.
    pub fn finish(self, wall_clock_ms: f64) -> (Option<Vec<ModelSummary>>, Option<Warning>) {
        let warning = match self.first {
            Some((_, index, Some(cached))) if cached > 0 => {
                Some(Warning::CacheNotReset { index, cached_tokens: cached })
            }
            _ => None,
        };
        if self.names.len() < 2 {
            return (None, warning);
        }
        let rows = self
            .names
            .into_iter()
            .zip(self.models)
            .map(|(name, t)| ModelSummary {
                name,
                requests: t.completed + t.failed,
                failures: t.failed,
                ttft_ms: Percentiles::of(t.ttft),
                tpot_ms: Percentiles::of(t.tpot),
                output_tokens_per_s: (wall_clock_ms > 0.0).then(|| t.output_tokens as f64 / (wall_clock_ms / 1000.0)),
            })
            .collect();
        (Some(rows), warning)
    }
}
