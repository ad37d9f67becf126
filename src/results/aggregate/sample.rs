//! The compact sample store: what the exact summaries need of each request, and nothing more, so
//! memory stays bounded however long a run lasts (the full records go to disk).
//!
//! A completed request takes `size_of::<Sample>()` = 120 bytes, a failed one
//! `size_of::<FailureSample>()` = 56 bytes (tested below). Every derived value (generation,
//! TPOT, decode and prefill rates, …) is recomputed from the stored milliseconds with the same
//! functions that fill the records, so a summary equals what a reader recomputes from them.

use crate::contract::ErrorKind;
use crate::request::record::TokenSource;
use crate::request::record::timing::{Exclusion, ExclusionFacts, FailureRecord, RequestTiming, derive};

/// "Not reported" for the token fields (64-bit, like the records: a server may report any count).
const NONE_U64: u64 = u64::MAX;

/// What a completed request contributes to summaries.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub index: u64,
    pub start_offset_ms: f64,
    /// NaN in a closed loop.
    intended_offset_ms: f64,
    /// NaN in a closed loop.
    queue_wait_ms: f64,
    ttfo_ms: f64,
    /// NaN when the response had no visible content.
    ttft_ms: f64,
    e2e_ms: f64,
    output_tokens: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    pub prompt_target_tokens: u32,
    pub planned_context_tokens: u32,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    /// NaN below two output chunks.
    max_stall_ms: f64,
    /// Per-chunk counts: the tokens streamed (`NONE_U64` without them).
    streamed_tokens: u64,
    /// Per-chunk counts: the first output chunk's tokens (`u32::MAX` without them).
    first_chunk_tokens: u32,
    flags: u16,
    /// Set when the level is finalised.
    pub exclusion: Option<Exclusion>,
}

const HAS_CANARY: u16 = 1;
const CANARY_PASSED: u16 = 1 << 1;
const HAS_CONTROLLED: u16 = 1 << 2;
const CONTROLLED_EXACT: u16 = 1 << 3;
const CONTROLLED_OBSERVABLE: u16 = 1 << 4;
const CONTROLLED_TRUNCATED: u16 = 1 << 5;
const TOKENS_FROM_CHUNKS: u16 = 1 << 6;
const CANARY_FOREIGN: u16 = 1 << 7;
const USAGE_SET_ASIDE: u16 = 1 << 8;
/// The server's usage was rejected (see `RequestTiming::facts`).
const USAGE_IMPLAUSIBLE: u16 = 1 << 9;
/// The canary found a cut-off or garbled marker.
const CANARY_MALFORMED: u16 = 1 << 10;
/// `finish_reason = "stop"`: the server says the answer ended on its own.
const FINISH_STOP: u16 = 1 << 11;
/// The server said `stop` at the budget, and the record says `length`.
const FINISH_CORRECTED: u16 = 1 << 12;
/// The request carried its own output length (a trace row, a conversation turn) ...
const HAS_PLANNED_OUTPUT: u16 = 1 << 13;
/// ... and its output stayed below it.
const BELOW_PLANNED_OUTPUT: u16 = 1 << 14;
/// The canary had no visible content to check.
const CANARY_NO_CONTENT: u16 = 1 << 15;
/// The answer broke its structured-output schema (see `SchemaCheck::invalid`). Every bit is
/// taken, so this one shares `CONTROLLED_EXACT`'s: it means this only without
/// `HAS_CONTROLLED`, and a request never has both (validation refuses `response_words` with
/// structured output).
const SCHEMA_INVALID: u16 = CONTROLLED_EXACT;

fn opt_u64(v: Option<u64>) -> u64 {
    // u64::MAX itself is not a count any server reports; it reads back as "not reported".
    v.unwrap_or(NONE_U64)
}

fn get_u64(v: u64) -> Option<u64> {
    (v != NONE_U64).then_some(v)
}

fn get_f64(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

impl Sample {
    pub fn from_record(r: &RequestTiming) -> Self {
        let mut flags = 0;
        if let Some(c) = &r.request_canary {
            flags |= HAS_CANARY;
            if c.passed {
                flags |= CANARY_PASSED;
            }
            if c.foreign_marker_count > 0 {
                flags |= CANARY_FOREIGN;
            }
            if c.malformed_marker_count > 0 {
                flags |= CANARY_MALFORMED;
            }
            if c.failure_reason == Some(crate::request::record::CanaryFailure::NoContent) {
                flags |= CANARY_NO_CONTENT;
            }
        }
        if r.facts().usage_implausible {
            flags |= USAGE_IMPLAUSIBLE;
        }
        if r.facts().schema_invalid && r.controlled_output.is_none() {
            flags |= SCHEMA_INVALID;
        }
        if r.finish_reason.as_deref() == Some("stop") {
            flags |= FINISH_STOP;
        }
        if r.reported_finish_reason.is_some() {
            flags |= FINISH_CORRECTED;
        }
        if let Some(planned) = r.replay.planned_output_tokens {
            flags |= HAS_PLANNED_OUTPUT;
            if r.output_tokens < u64::from(planned) {
                flags |= BELOW_PLANNED_OUTPUT;
            }
        }
        if let Some(o) = &r.controlled_output {
            flags |= HAS_CONTROLLED;
            for (set, bit) in [
                (o.exact, CONTROLLED_EXACT),
                (o.observable, CONTROLLED_OBSERVABLE),
                (o.truncated, CONTROLLED_TRUNCATED),
            ] {
                if set {
                    flags |= bit;
                }
            }
        }
        if r.output_token_source == TokenSource::ChunkCount {
            flags |= TOKENS_FROM_CHUNKS;
        }
        if r.usage_completion_tokens.is_some() {
            flags |= USAGE_SET_ASIDE;
        }
        Sample {
            index: r.request_index,
            start_offset_ms: r.start_offset_ms,
            intended_offset_ms: r.intended_offset_ms.unwrap_or(f64::NAN),
            queue_wait_ms: r.queue_wait_ms.unwrap_or(f64::NAN),
            ttfo_ms: r.time_to_first_output_ms,
            ttft_ms: r.ttft_ms.unwrap_or(f64::NAN),
            e2e_ms: r.e2e_ms,
            output_tokens: r.output_tokens,
            prompt_tokens: opt_u64(r.prompt_tokens),
            cached_tokens: opt_u64(r.cached_tokens),
            prompt_target_tokens: r.prompt_target_tokens,
            planned_context_tokens: r.planned_context_tokens,
            content_chunks: r.content_chunks,
            reasoning_chunks: r.reasoning_chunks,
            max_stall_ms: r.max_stall_ms.unwrap_or(f64::NAN),
            streamed_tokens: opt_u64(r.streamed_tokens),
            first_chunk_tokens: r.first_chunk_tokens.unwrap_or(u32::MAX),
            flags,
            exclusion: r.exclusion_reason,
        }
    }

    pub fn facts(&self) -> ExclusionFacts {
        ExclusionFacts {
            index: self.index,
            start_offset_ms: self.start_offset_ms,
            canary_failed: self.canary_failed(),
            schema_invalid: self.flags & HAS_CONTROLLED == 0 && self.flags & SCHEMA_INVALID != 0,
            usage_implausible: self.usage_implausible(),
            controlled_miss: self.controlled_miss(),
        }
    }

    pub fn eligible(&self) -> bool {
        self.exclusion.is_none()
    }
    pub fn canary(&self) -> Option<bool> {
        (self.flags & HAS_CANARY != 0).then_some(self.flags & CANARY_PASSED != 0)
    }
    pub fn canary_failed(&self) -> bool {
        self.canary() == Some(false)
    }
    /// The response held another request's canary marker (cross-request contamination).
    pub fn canary_foreign(&self) -> bool {
        self.flags & CANARY_FOREIGN != 0
    }
    /// The response held a cut-off or garbled canary marker (not contamination).
    pub fn canary_malformed(&self) -> bool {
        self.flags & CANARY_MALFORMED != 0
    }
    /// The canary failed for want of any visible content to check.
    pub fn canary_no_content(&self) -> bool {
        self.flags & CANARY_NO_CONTENT != 0
    }
    /// The output budget ran out before any visible content: tokens came, all of them
    /// reasoning, and the server did not say the answer stopped on its own.
    pub fn budget_spent_in_reasoning(&self) -> bool {
        self.ttft_ms().is_none() && self.output_tokens() > 0 && self.flags & FINISH_STOP == 0
    }
    /// The server's usage was rejected: no count of it is kept.
    pub fn usage_implausible(&self) -> bool {
        self.flags & USAGE_IMPLAUSIBLE != 0
    }
    /// The server said `stop` at the output budget; the record says `length`.
    pub fn finish_corrected(&self) -> bool {
        self.flags & FINISH_CORRECTED != 0
    }
    /// The answer ended on its own (`stop`) before its output budget: the request's own planned
    /// length, else `max_tokens`.
    pub fn stopped_before_budget(&self, max_tokens: u32) -> bool {
        let below = if self.flags & HAS_PLANNED_OUTPUT != 0 {
            self.flags & BELOW_PLANNED_OUTPUT != 0
        } else {
            self.output_tokens < u64::from(max_tokens)
        };
        self.flags & FINISH_STOP != 0 && below
    }
    /// `(exact, observable, truncated)` of the `response_words` check, when there was one.
    pub fn controlled(&self) -> Option<(bool, bool, bool)> {
        (self.flags & HAS_CONTROLLED != 0).then_some((
            self.flags & CONTROLLED_EXACT != 0,
            self.flags & CONTROLLED_OBSERVABLE != 0,
            self.flags & CONTROLLED_TRUNCATED != 0,
        ))
    }
    /// Off the requested length or truncated: what the strict policy excludes.
    pub fn controlled_miss(&self) -> bool {
        self.controlled().is_some_and(|(exact, _, truncated)| !exact || truncated)
    }
    /// The server reported usage, but a count far below what streamed, so chunks were counted.
    pub fn usage_set_aside(&self) -> bool {
        self.flags & USAGE_SET_ASIDE != 0
    }
    pub fn token_source(&self) -> TokenSource {
        if self.flags & TOKENS_FROM_CHUNKS != 0 { TokenSource::ChunkCount } else { TokenSource::Usage }
    }

    pub fn output_tokens(&self) -> u64 {
        self.output_tokens
    }
    pub fn prompt_tokens(&self) -> Option<u64> {
        get_u64(self.prompt_tokens)
    }
    pub fn cached_tokens(&self) -> Option<u64> {
        get_u64(self.cached_tokens)
    }
    pub fn ttfo_ms(&self) -> f64 {
        self.ttfo_ms
    }
    pub fn ttft_ms(&self) -> Option<f64> {
        get_f64(self.ttft_ms)
    }
    pub fn e2e_ms(&self) -> f64 {
        self.e2e_ms
    }
    pub fn generation_ms(&self) -> f64 {
        derive::generation_ms(self.ttfo_ms, self.e2e_ms)
    }
    pub fn tpot_ms(&self) -> Option<f64> {
        derive::tpot_ms(self.generation_ms(), self.output_tokens())
    }
    pub fn decode_tok_s(&self) -> Option<f64> {
        derive::decode_tok_s(self.generation_ms(), self.output_tokens())
    }
    pub fn effective_prefill_tok_s(&self) -> Option<f64> {
        derive::effective_prefill_tok_s(self.prompt_tokens(), self.ttfo_ms)
    }
    pub fn schedule_lag_ms(&self) -> Option<f64> {
        derive::schedule_lag_ms(self.start_offset_ms, get_f64(self.intended_offset_ms))
    }
    pub fn queue_wait_ms(&self) -> Option<f64> {
        get_f64(self.queue_wait_ms)
    }
    pub fn intended_offset_ms(&self) -> Option<f64> {
        get_f64(self.intended_offset_ms)
    }
    pub fn ttft_from_intended_ms(&self) -> Option<f64> {
        self.schedule_lag_ms().and_then(|lag| self.ttft_ms().map(|t| t + lag))
    }
    pub fn e2e_from_intended_ms(&self) -> Option<f64> {
        self.schedule_lag_ms().map(|lag| self.e2e_ms + lag)
    }
    pub fn sizing_error_pct(&self) -> Option<f64> {
        derive::sizing_error_pct(self.prompt_tokens(), self.prompt_target_tokens)
    }
    pub fn max_stall_ms(&self) -> Option<f64> {
        get_f64(self.max_stall_ms)
    }
    /// Per-chunk counts: the tokens streamed.
    pub fn streamed_tokens(&self) -> Option<u64> {
        get_u64(self.streamed_tokens)
    }
    pub fn first_chunk_tokens(&self) -> Option<u32> {
        (self.first_chunk_tokens != u32::MAX).then_some(self.first_chunk_tokens)
    }
    pub fn output_chunks(&self) -> u64 {
        u64::from(self.content_chunks) + u64::from(self.reasoning_chunks)
    }
    pub fn tokens_per_chunk(&self) -> Option<f64> {
        derive::tokens_per_chunk(self.streamed_tokens().unwrap_or(self.output_tokens), self.output_chunks())
    }
    pub fn tpot_corrected_ms(&self) -> Option<f64> {
        derive::tpot_corrected_ms(self.generation_ms(), self.streamed_tokens(), self.first_chunk_tokens())
    }
}

/// What a failed request contributes: its kind, and its place on the clocks.
#[derive(Debug, Clone, Copy)]
pub struct FailureSample {
    pub index: u64,
    pub start_offset_ms: f64,
    pub elapsed_ms: f64,
    /// NaN in a closed loop.
    intended_offset_ms: f64,
    queue_wait_ms: f64,
    pub kind: ErrorKind,
    pub planned_context_tokens: u32,
    /// The server answered (any HTTP status).
    pub responded: bool,
}

impl FailureSample {
    pub fn from_record(f: &FailureRecord) -> Self {
        FailureSample {
            index: f.request_index,
            start_offset_ms: f.start_offset_ms,
            elapsed_ms: f.elapsed_ms,
            intended_offset_ms: f.intended_offset_ms.unwrap_or(f64::NAN),
            queue_wait_ms: f.queue_wait_ms.unwrap_or(f64::NAN),
            kind: f.error_kind,
            planned_context_tokens: f.planned_context_tokens,
            responded: f.http_status.is_some(),
        }
    }
    pub fn schedule_lag_ms(&self) -> Option<f64> {
        derive::schedule_lag_ms(self.start_offset_ms, get_f64(self.intended_offset_ms))
    }
    pub fn queue_wait_ms(&self) -> Option<f64> {
        get_f64(self.queue_wait_ms)
    }
    pub fn intended_offset_ms(&self) -> Option<f64> {
        get_f64(self.intended_offset_ms)
    }
}

/// A sum of counts that cannot wrap: eligible records hold no count beyond
/// `MAX_PLAUSIBLE_TOKENS`, and whatever a records file holds, a total stops at `u64::MAX`.
pub fn total(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_as_compact_as_documented() {
        assert_eq!(std::mem::size_of::<Sample>(), 120);
        assert_eq!(std::mem::size_of::<FailureSample>(), 56);
    }

    #[test]
    fn token_counts_beyond_u32_survive_the_store() {
        let big = u64::from(u32::MAX) * 3 + 7;
        let mut r: RequestTiming =
            serde_json::from_str(include_str!("../../../tests/fixtures/request-timing.json")).unwrap();
        r.output_tokens = big;
        r.prompt_tokens = Some(big + 1);
        r.cached_tokens = Some(big);
        let s = Sample::from_record(&r);
        assert_eq!((s.output_tokens(), s.prompt_tokens(), s.cached_tokens()), (big, Some(big + 1), Some(big)));
    }
}
