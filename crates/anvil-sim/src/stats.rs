//! Server-side counters of the mock server, shared with whoever started it, so tests and the
//! demo can compare what the client measured with what the server actually did.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::faults::{COUNTER_NAMES, FAULT_COUNTERS, FaultKind};

/// Live counters. Every field is updated with relaxed atomics: each counter is meaningful on
/// its own and nothing orders one against another.
#[derive(Debug, Default)]
pub struct MockStats {
    pub(crate) requests_received: AtomicU64,
    pub(crate) requests_rejected: AtomicU64,
    pub(crate) requests_completed: AtomicU64,
    pub(crate) requests_disconnected: AtomicU64,
    pub(crate) active_requests: AtomicU64,
    /// The high-water mark of `active_requests` since the start or the last `reset_peak`.
    pub(crate) peak_active_requests: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) cached_tokens: AtomicU64,
    pub(crate) completion_tokens: AtomicU64,
    pub(crate) tokens_streamed: AtomicU64,
    pub(crate) chunks_streamed: AtomicU64,
    /// Media read from accepted requests (see `media`): images, audio clips, their tokens, their
    /// decoded bytes, bytes fetched by URL.
    pub(crate) media: [AtomicU64; 5],
    /// Injected faults, indexed like `faults::COUNTER_NAMES`.
    pub(crate) faults: [AtomicU64; FAULT_COUNTERS],
    /// The counters when the simulated restart happened: `GET /metrics` counts from there, as a
    /// restarted engine's counters start again from zero.
    restart_baseline: Mutex<Option<MockStatsSnapshot>>,
    /// The paths, queries and headers of the requests seen (bounded; see `seen`).
    pub(crate) seen: Mutex<super::seen::SeenRequests>,
    /// Bearer tokens seen, and the accepted set (see `auth`).
    pub(crate) tokens: super::auth::TokenRecord,
    /// Structured output: JSON answers served, and those broken on purpose (see `structured`).
    pub(crate) schema: super::structured::SchemaCounters,
    /// Requests per model, resets per endpoint (see `lora`).
    pub(crate) models: super::lora::ModelCounts,
    /// Tool calls made, broken on purpose, and tool results received (see `tool_call`).
    pub(crate) tools: super::tool_call::ToolStats,
}

/// A point-in-time copy of [`MockStats`] (also the body of `GET /mock/stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockStatsSnapshot {
    /// Every POST to a generation endpoint, rejected ones included.
    pub requests_received: u64,
    /// Generation requests answered with a 4xx/5xx status.
    pub requests_rejected: u64,
    /// Streams that reached `[DONE]`, and non-streamed bodies that were sent.
    pub requests_completed: u64,
    /// Accepted requests whose client went away before the end.
    pub requests_disconnected: u64,
    /// Generation requests currently in flight (a gauge).
    pub active_requests: u64,
    /// The most generation requests in flight at once since the simulator started or its peak
    /// was last reset (`MockServer::reset_peak`): how many streams a load really held open
    /// together.
    #[serde(default)]
    pub peak_active_requests: u64,
    /// Sum of `prompt_tokens` over accepted requests.
    pub prompt_tokens: u64,
    /// Sum of `cached_tokens` over accepted requests.
    pub cached_tokens: u64,
    /// Sum of the `completion_tokens` reported in usage by completed requests.
    pub completion_tokens: u64,
    /// Tokens actually sent in reasoning or content deltas.
    pub tokens_streamed: u64,
    /// Delta chunks that carried reasoning or content.
    pub chunks_streamed: u64,
    /// Injected faults by kind; every kind is present, zero included. The kinds, and which
    /// other counters each one touches, are documented in the `faults` module.
    #[serde(default)]
    pub faults_injected: BTreeMap<String, u64>,
    /// Answers that carried another request's marker: `contamination_swapped` plus
    /// `contamination_merged`.
    #[serde(default)]
    pub contaminated_responses: u64,
    /// Every distinct bearer token seen (at most `auth::MAX_TOKENS_SEEN`), with how many
    /// requests carried it. Never serialized: a token must not reach a file.
    #[serde(skip)]
    pub bearer_tokens: BTreeMap<String, u64>,
    /// API requests (`/v1/models` included) answered 401 because their token was not accepted
    /// (`MockServer::accept_only_tokens`); the generation requests among them are also in
    /// `requests_received` and `requests_rejected`. Absent when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub auth_refused: u64,
    /// Answers to requests that asked for JSON (a `json_schema` or `json_object` format, in
    /// any spelling). Absent when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub structured_answers: u64,
    /// Of those, the ones broken on purpose (`faults.schema_invalid_rate`), by how:
    /// `required` (a required property left out) or `not_json` (cut short). Absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schema_broken: BTreeMap<String, u64>,
    /// Accepted generation requests per model name they named. Absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests_by_model: BTreeMap<String, u64>,
    /// Cache resets per endpoint: `vllm` (`/reset_prefix_cache`), `sglang` (`/flush_cache`),
    /// `llamacpp` (one per slot erased). Absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cache_resets: BTreeMap<String, u64>,
    /// Tool calls answered, their arguments broken on purpose, tool results received (absent
    /// while all are zero).
    #[serde(default, skip_serializing_if = "super::tool_call::ToolCallCounts::is_zero")]
    pub tool_calls: super::tool_call::ToolCallCounts,
    /// Images read from accepted requests (see `media`).
    #[serde(default)]
    pub media_images: u64,
    /// Audio clips read from accepted requests.
    #[serde(default)]
    pub media_audio: u64,
    /// Prompt tokens the media counted for (included in `prompt_tokens`).
    #[serde(default)]
    pub media_tokens: u64,
    /// Decoded bytes of the media files.
    #[serde(default)]
    pub media_bytes: u64,
    /// Bytes of media fetched by URL (`http://`), as an engine fetches them.
    #[serde(default)]
    pub media_fetched_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl MockStats {
    /// Fresh counters, all zero.
    pub fn new() -> MockStats {
        MockStats::default()
    }

    /// Reads every counter. Counters are read one after another, so a snapshot taken while
    /// requests run may mix instants; it is exact once the server is idle.
    pub fn snapshot(&self) -> MockStatsSnapshot {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MockStatsSnapshot {
            requests_received: get(&self.requests_received),
            requests_rejected: get(&self.requests_rejected),
            requests_completed: get(&self.requests_completed),
            requests_disconnected: get(&self.requests_disconnected),
            active_requests: get(&self.active_requests),
            peak_active_requests: get(&self.peak_active_requests),
            prompt_tokens: get(&self.prompt_tokens),
            cached_tokens: get(&self.cached_tokens),
            completion_tokens: get(&self.completion_tokens),
            tokens_streamed: get(&self.tokens_streamed),
            chunks_streamed: get(&self.chunks_streamed),
            faults_injected: COUNTER_NAMES
                .iter()
                .zip(&self.faults)
                .map(|(name, counter)| ((*name).to_owned(), get(counter)))
                .collect(),
            contaminated_responses: get(&self.faults[FaultKind::ContaminationSwapped.counter()])
                + get(&self.faults[FaultKind::ContaminationMerged.counter()]),
            bearer_tokens: self.tokens.seen(),
            auth_refused: get(&self.tokens.refused),
            structured_answers: self.schema.read().0,
            schema_broken: self.schema.read().1,
            requests_by_model: self.models.by_model(),
            cache_resets: self.models.resets(),
            tool_calls: self.tools.snapshot(),
            media_images: get(&self.media[0]),
            media_audio: get(&self.media[1]),
            media_tokens: get(&self.media[2]),
            media_bytes: get(&self.media[3]),
            media_fetched_bytes: get(&self.media[4]),
        }
    }

    /// The paths, queries and headers seen so far.
    pub fn seen(&self) -> super::seen::SeenRequests {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Counts one injected fault; `counter` indexes `faults::COUNTER_NAMES`.
    pub(crate) fn count_fault(&self, counter: usize) {
        if let Some(counter) = self.faults.get(counter) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts the media of one accepted request.
    pub(crate) fn count_media(&self, m: &super::media::MediaCount) {
        for (counter, value) in self.media.iter().zip([m.images, m.audio, m.tokens, m.bytes, m.fetched]) {
            MockStats::add(counter, value);
        }
    }

    pub(crate) fn add(counter: &AtomicU64, value: u64) {
        if value != 0 {
            counter.fetch_add(value, Ordering::Relaxed);
        }
    }

    /// The server restarts now: `GET /metrics` counts from here on.
    pub(crate) fn mark_restart(&self) {
        let now = self.snapshot();
        if let Ok(mut baseline) = self.restart_baseline.lock() {
            *baseline = Some(now);
        }
    }

    /// What a server process started at the last restart (or at the start) would have counted:
    /// the counters minus those at the restart. Gauges are as they are.
    pub(crate) fn since_restart(&self) -> MockStatsSnapshot {
        let now = self.snapshot();
        let Some(base) = self.restart_baseline.lock().ok().and_then(|b| b.clone()) else { return now };
        MockStatsSnapshot {
            requests_received: now.requests_received.saturating_sub(base.requests_received),
            requests_rejected: now.requests_rejected.saturating_sub(base.requests_rejected),
            requests_completed: now.requests_completed.saturating_sub(base.requests_completed),
            requests_disconnected: now.requests_disconnected.saturating_sub(base.requests_disconnected),
            prompt_tokens: now.prompt_tokens.saturating_sub(base.prompt_tokens),
            cached_tokens: now.cached_tokens.saturating_sub(base.cached_tokens),
            completion_tokens: now.completion_tokens.saturating_sub(base.completion_tokens),
            tokens_streamed: now.tokens_streamed.saturating_sub(base.tokens_streamed),
            chunks_streamed: now.chunks_streamed.saturating_sub(base.chunks_streamed),
            ..now
        }
    }

    pub(crate) fn active(&self) -> u64 {
        self.active_requests.load(Ordering::Relaxed)
    }

    /// One more request in flight; raises the peak when it is one.
    pub(crate) fn request_started(&self) {
        let now = self.active_requests.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_active_requests.fetch_max(now, Ordering::Relaxed);
    }

    /// Starts a new peak from the requests in flight now.
    pub(crate) fn reset_peak(&self) {
        self.peak_active_requests.store(self.active(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reflects_counters() {
        let stats = MockStats::new();
        MockStats::add(&stats.requests_received, 3);
        MockStats::add(&stats.tokens_streamed, 40);
        MockStats::add(&stats.active_requests, 2);
        let snap = stats.snapshot();
        assert_eq!(snap.requests_received, 3);
        assert_eq!(snap.tokens_streamed, 40);
        assert_eq!(snap.active_requests, 2);
        assert_eq!(snap.requests_completed, 0);
        assert_eq!(snap.faults_injected.len(), COUNTER_NAMES.len());
        assert!(snap.faults_injected.values().all(|n| *n == 0));
        stats.count_fault(FaultKind::ContaminationMerged.counter());
        stats.count_fault(FaultKind::ContaminationSwapped.counter());
        stats.count_fault(super::super::faults::RESTART);
        let snap = stats.snapshot();
        assert_eq!(snap.faults_injected["contamination_merged"], 1);
        assert_eq!(snap.faults_injected["restart"], 1);
        assert_eq!(snap.contaminated_responses, 2);
        let json = serde_json::to_value(&snap).expect("serialize");
        assert_eq!(json["tokens_streamed"], 40);
        assert_eq!(json["faults_injected"]["restart"], 1);
    }

    #[test]
    fn counts_since_restart_start_again_from_zero() {
        let stats = MockStats::new();
        MockStats::add(&stats.prompt_tokens, 100);
        MockStats::add(&stats.active_requests, 2);
        assert_eq!(stats.since_restart().prompt_tokens, 100);
        stats.mark_restart();
        MockStats::add(&stats.prompt_tokens, 30);
        let since = stats.since_restart();
        assert_eq!((since.prompt_tokens, since.active_requests), (30, 2));
        assert_eq!(stats.snapshot().prompt_tokens, 130, "the simulator's own totals are untouched");
    }
}
