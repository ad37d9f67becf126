//! What the per-request response checks found: the canary (did this response belong to this
//! request?), the controlled output length (`response_words`) and whether the server's token
//! count can be believed. The canary and length checks themselves are in `workload::canary`;
//! these are their results, as the records keep them, and the typed tallies a level's warnings
//! are built from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the canary check found in one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryCheck {
    pub marker: String,
    /// The visible content (after leading whitespace) starts with this request's marker.
    pub marker_at_start: bool,
    /// Occurrences of this request's marker in the whole visible response.
    pub observed_marker_count: u32,
    /// Occurrences of another request's marker: a complete, well-formed marker of a request of
    /// this run (its seed, its shape, an index in range), i.e. cross-request contamination.
    pub foreign_marker_count: u32,
    /// The whole visible response was scanned (the stream reached `[DONE]`).
    pub capture_complete: bool,
    pub passed: bool,
    /// Why the check failed (absent when it passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<CanaryFailure>,
    /// Conversations: foreign markers that belong to another session (cross-session
    /// contamination); absent outside conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_session_marker_count: Option<u32>,
    /// Marker-like text that is no request's marker of this run: this request's own marker cut
    /// short (the output budget ended mid-marker) or garbled, another seed, an index out of
    /// range. Not contamination; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed_marker_count: u32,
    /// The first foreign or malformed marker as the response wrote it (bounded, sanitized), so
    /// the verdict can be checked; absent when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offending_marker: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What the scan of one response counted (see `workload::CanaryScan`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkerTally {
    pub marker_at_start: bool,
    /// This request's marker, whole.
    pub own: u32,
    /// Markers of other requests of this run.
    pub foreign: u32,
    /// Strict prefixes of this request's marker (cut short).
    pub truncated: u32,
    /// Any other marker-like text (garbled, another run's, out of range).
    pub garbled: u32,
    /// The first foreign, truncated or garbled marker, as written.
    pub offending: Option<String>,
    /// No visible content at all (only whitespace, or nothing): nothing to check.
    pub empty: bool,
}

impl CanaryCheck {
    /// The verdict from what the scan counted: passed only with the own marker at the start,
    /// exactly once, no foreign marker, and the whole response seen.
    pub fn from_counts(marker: &str, marker_at_start: bool, own: u32, foreign: u32, complete: bool) -> Self {
        CanaryCheck::from_tally(
            marker,
            &MarkerTally { marker_at_start, own, foreign, ..MarkerTally::default() },
            complete,
        )
    }

    /// The verdict from a scan's tally: a truncated or garbled marker fails the check with a
    /// reason of its own, after contamination and an incomplete capture and before the rest.
    pub fn from_tally(marker: &str, t: &MarkerTally, complete: bool) -> Self {
        let MarkerTally { marker_at_start, own, foreign, truncated, garbled, .. } = *t;
        let failure_reason = if foreign > 0 {
            Some(CanaryFailure::ForeignMarker)
        } else if !complete {
            Some(CanaryFailure::Incomplete)
        } else if t.empty {
            Some(CanaryFailure::NoContent)
        } else if garbled > 0 {
            Some(CanaryFailure::MarkerGarbled)
        } else if truncated > 0 {
            Some(CanaryFailure::MarkerTruncated)
        } else if own == 0 {
            Some(CanaryFailure::MarkerMissing)
        } else if !marker_at_start {
            Some(CanaryFailure::MarkerNotAtStart)
        } else if own > 1 {
            Some(CanaryFailure::MarkerRepeated)
        } else {
            None
        };
        CanaryCheck {
            marker: marker.to_string(),
            marker_at_start,
            observed_marker_count: own,
            foreign_marker_count: foreign,
            capture_complete: complete,
            passed: failure_reason.is_none(),
            failure_reason,
            cross_session_marker_count: None,
            malformed_marker_count: truncated.saturating_add(garbled),
            offending_marker: t.offending.clone(),
        }
    }
}

/// Why a canary failed, most serious first: the first that applies is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryFailure {
    /// Another request's marker appeared: the server mixed up responses (or the model invented one).
    ForeignMarker,
    /// The response was not seen to its end.
    Incomplete,
    /// The whole response was seen and held no visible content: nothing to check (a reasoning
    /// model whose output budget ended inside its reasoning). No sign of mixed-up responses.
    NoContent,
    /// Marker-like text that is no marker of this run's requests (garbled, another seed, an
    /// index out of range): the model mangled a marker, no sign of mixed-up responses.
    MarkerGarbled,
    /// This request's marker cut short (a small model's output budget often ends mid-marker).
    MarkerTruncated,
    /// The response never contained its marker: the model did not follow the instruction.
    MarkerMissing,
    /// Its marker appeared, but not at the start of the visible content.
    MarkerNotAtStart,
    /// Its marker appeared more than once.
    MarkerRepeated,
}

impl CanaryFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            CanaryFailure::ForeignMarker => "foreign_marker",
            CanaryFailure::Incomplete => "incomplete",
            CanaryFailure::NoContent => "no_content",
            CanaryFailure::MarkerGarbled => "marker_garbled",
            CanaryFailure::MarkerTruncated => "marker_truncated",
            CanaryFailure::MarkerMissing => "marker_missing",
            CanaryFailure::MarkerNotAtStart => "marker_not_at_start",
            CanaryFailure::MarkerRepeated => "marker_repeated",
        }
    }
}

/// Failed canaries of a level counted by reason, for a warning that states the reasons that
/// actually occurred. A failed check recorded before reasons existed counts as `None`.
pub fn canary_failure_counts<'a>(
    checks: impl IntoIterator<Item = &'a CanaryCheck>,
) -> BTreeMap<Option<CanaryFailure>, u64> {
    let mut counts = BTreeMap::new();
    for c in checks.into_iter().filter(|c| !c.passed) {
        *counts.entry(c.failure_reason).or_insert(0) += 1;
    }
    counts
}

/// How a response measured up to `response_words`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlledOutput {
    pub requested_words: u32,
    /// Words of visible content (a leading canary marker excluded); null when the capture was
    /// incomplete, so the length cannot be known.
    pub observed_words: Option<u32>,
    pub exact: bool,
    /// Cut by the token budget (`finish_reason = "length"`) or by the capture cap.
    pub truncated: bool,
    pub observable: bool,
}

/// Whether a server's `usage.completion_tokens` can be believed, given the non-empty text
/// chunks that streamed. Every such chunk carries at least one token, except that a token
/// whose text is split between reasoning and content may show up in two chunks; a count below
/// half the chunks (0 with any chunk, in particular) is therefore not a count of this response.
pub fn usage_plausible(completion_tokens: u64, streamed_chunks: u64) -> bool {
    completion_tokens >= streamed_chunks.div_ceil(2)
}

/// No request reports more tokens than this (a context of four billion tokens): beyond it a
/// count is implausible whatever the request, and below it sums of counts cannot wrap.
pub const MAX_PLAUSIBLE_TOKENS: u64 = 1 << 32;
/// Prompt tokens a server may count beyond the request body's bytes: its chat template, a
/// default system prompt, special tokens. A token is at least one byte of text, and the body's
/// JSON holds every byte of the prompt.
pub const PROMPT_TEMPLATE_SLACK: u64 = 4096;

/// The most usage one request can plausibly report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageBounds {
    /// Prompt tokens: what the body could hold, plus a template.
    pub prompt: u64,
    /// Output tokens: the budget sent, plus a margin.
    pub output: u64,
}

impl Default for UsageBounds {
    fn default() -> Self {
        UsageBounds { prompt: MAX_PLAUSIBLE_TOKENS, output: MAX_PLAUSIBLE_TOKENS }
    }
}

impl UsageBounds {
    /// The bounds of a request of `body_bytes` bytes with output budget `budget` (`None`: no
    /// budget the client knows, e.g. `n_predict = -1` in `extra_body`). The output margin covers
    /// engines that count the end-of-turn token (llama.cpp: budget + 1) and a speculative
    /// draft's overshoot, not a count of another response.
    pub fn for_request(body_bytes: usize, budget: Option<u64>) -> Self {
        let prompt = (body_bytes as u64).saturating_add(PROMPT_TEMPLATE_SLACK);
        let output = budget.map_or(MAX_PLAUSIBLE_TOKENS, |b| b.saturating_add((b / 8).max(16)));
        UsageBounds { prompt: prompt.min(MAX_PLAUSIBLE_TOKENS), output: output.min(MAX_PLAUSIBLE_TOKENS) }
    }
}

/// Why a usage count cannot describe its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageProblem {
    /// More than the request could produce: prompt tokens beyond what was sent, output beyond
    /// the budget, cached tokens beyond the prompt, reasoning tokens beyond the output.
    AboveBound,
    /// A cumulative count (usage on every chunk, then the final usage) went down.
    WentBackwards,
    /// A JSON number that is no count: negative, fractional, or beyond 64 bits.
    NotACount,
}

/// The evidence a request's usage was rejected on (`exclusion_reason: "usage_implausible"`):
/// the first offending count. Such a record keeps none of the server's counts (prompt and
/// cached tokens null, output tokens counted from chunks), so nothing implausible is summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageImplausible {
    /// The usage field, in chat's names: `prompt_tokens`, `cached_tokens`, `completion_tokens`,
    /// `reasoning_tokens`.
    pub field: String,
    /// The number the server sent.
    pub value: serde_json::Number,
    /// The bound it broke: the most it could be (`above_bound`) or the count before it
    /// (`went_backwards`); absent for `not_a_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    pub problem: UsageProblem,
}

impl UsageImplausible {
    pub fn above(field: &str, value: u64, limit: u64) -> Self {
        UsageImplausible {
            field: field.into(),
            value: value.into(),
            limit: Some(limit),
            problem: UsageProblem::AboveBound,
        }
    }
    pub fn backwards(field: &str, value: u64, before: u64) -> Self {
        UsageImplausible {
            field: field.into(),
            value: value.into(),
            limit: Some(before),
            problem: UsageProblem::WentBackwards,
        }
    }
    pub fn not_a_count(field: &str, value: f64) -> Self {
        UsageImplausible {
            field: field.into(),
            // JSON holds no infinity or NaN, so the number always converts; 0 stands in otherwise.
            value: serde_json::Number::from_f64(value).unwrap_or_else(|| 0.into()),
            limit: None,
            problem: UsageProblem::NotACount,
        }
    }
}

/// Requests of a level whose reported completion count was set aside (see `usage_plausible`),
/// for one warning: how many, and the first one as an example.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSetAside {
    pub requests: u64,
    /// `(request_index, reported completion_tokens, streamed chunks)` of the first such request.
    pub example: Option<(u64, u64, u64)>,
}

impl UsageSetAside {
    /// Count one completed request (its `usage_completion_tokens` and chunk counts).
    pub fn add(&mut self, request_index: u64, usage_completion_tokens: Option<u64>, streamed_chunks: u64) {
        if let Some(reported) = usage_completion_tokens {
            self.requests += 1;
            self.example.get_or_insert((request_index, reported, streamed_chunks));
        }
    }

    /// `Some` when at least one request's count was set aside.
    pub fn found(self) -> Option<Self> {
        (self.requests > 0).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_verdicts_name_the_first_reason() {
        let ok = CanaryCheck::from_counts("M", true, 1, 0, true);
        assert!(ok.passed && ok.failure_reason.is_none());
        let reason =
            |at, own, foreign, complete| CanaryCheck::from_counts("M", at, own, foreign, complete).failure_reason;
        assert_eq!(reason(true, 1, 1, true), Some(CanaryFailure::ForeignMarker));
        assert_eq!(reason(true, 1, 0, false), Some(CanaryFailure::Incomplete));
        assert_eq!(reason(false, 0, 0, true), Some(CanaryFailure::MarkerMissing));
        assert_eq!(reason(false, 1, 0, true), Some(CanaryFailure::MarkerNotAtStart));
        assert_eq!(reason(true, 2, 0, true), Some(CanaryFailure::MarkerRepeated));
        let all = [
            CanaryCheck::from_counts("M", false, 0, 0, true),
            ok.clone(),
            CanaryCheck::from_counts("M", false, 0, 0, true),
        ];
        assert_eq!(canary_failure_counts(&all), BTreeMap::from([(Some(CanaryFailure::MarkerMissing), 2)]));
    }

    #[test]
    fn a_response_without_visible_content_has_nothing_to_check() {
        let empty = CanaryCheck::from_tally("M", &MarkerTally { empty: true, ..MarkerTally::default() }, true);
        assert_eq!((empty.passed, empty.failure_reason), (false, Some(CanaryFailure::NoContent)));
        // Not seen to its end: that comes first.
        let cut = CanaryCheck::from_tally("M", &MarkerTally { empty: true, ..MarkerTally::default() }, false);
        assert_eq!(cut.failure_reason, Some(CanaryFailure::Incomplete));
    }

    #[test]
    fn malformed_markers_fail_with_reasons_of_their_own() {
        let tally = |truncated, garbled, foreign| MarkerTally {
            marker_at_start: true,
            own: 1,
            foreign,
            truncated,
            garbled,
            offending: Some("ANVIL_REQ_1_0000".into()),
            empty: false,
        };
        let c = CanaryCheck::from_tally("M", &tally(1, 0, 0), true);
        assert_eq!(
            (c.passed, c.failure_reason, c.malformed_marker_count),
            (false, Some(CanaryFailure::MarkerTruncated), 1)
        );
        assert_eq!(c.offending_marker.as_deref(), Some("ANVIL_REQ_1_0000"));
        assert_eq!(
            CanaryCheck::from_tally("M", &tally(1, 1, 0), true).failure_reason,
            Some(CanaryFailure::MarkerGarbled)
        );
        assert_eq!(
            CanaryCheck::from_tally("M", &tally(1, 1, 1), true).failure_reason,
            Some(CanaryFailure::ForeignMarker)
        );
        let json = serde_json::to_value(CanaryCheck::from_tally("M", &tally(0, 2, 0), true)).unwrap();
        assert_eq!(
            (&json["malformed_marker_count"], &json["failure_reason"]),
            (&serde_json::json!(2), &serde_json::json!("marker_garbled"))
        );
        let ok = serde_json::to_value(CanaryCheck::from_counts("M", true, 1, 0, true)).unwrap();
        assert!(ok.get("malformed_marker_count").is_none() && ok.get("offending_marker").is_none());
    }

    #[test]
    fn usage_bounds_follow_the_request() {
        let b = UsageBounds::for_request(2000, Some(16));
        assert_eq!((b.prompt, b.output), (2000 + PROMPT_TEMPLATE_SLACK, 32));
        assert_eq!(UsageBounds::for_request(10, Some(8192)).output, 8192 + 1024);
        assert_eq!(UsageBounds::for_request(usize::MAX, None), UsageBounds::default());
        let e = serde_json::to_value(UsageImplausible::above("prompt_tokens", u64::MAX, 4096)).unwrap();
        assert_eq!(
            e,
            serde_json::json!({"field": "prompt_tokens", "value": u64::MAX, "limit": 4096, "problem": "above_bound"})
        );
    }

    #[test]
    fn passed_canaries_serialize_as_before() {
        let json = serde_json::to_value(CanaryCheck::from_counts("M", true, 1, 0, true)).unwrap();
        assert!(json.get("failure_reason").is_none());
        let failed = serde_json::to_value(CanaryCheck::from_counts("M", false, 0, 0, true)).unwrap();
        assert_eq!(failed["failure_reason"], "marker_missing");
        let old: CanaryCheck = serde_json::from_str(
            r#"{"marker":"M","marker_at_start":false,"observed_marker_count":0,"foreign_marker_count":0,"capture_complete":true,"passed":false}"#,
        )
        .unwrap();
        assert_eq!(old.failure_reason, None);
    }

    #[test]
    fn zero_completion_tokens_with_streamed_chunks_is_implausible() {
        assert!(!usage_plausible(0, 16));
        assert!(!usage_plausible(0, 1));
        assert!(!usage_plausible(7, 16));
        assert!(usage_plausible(8, 16));
        assert!(usage_plausible(17, 16), "llama.cpp counts the end-of-turn token");
        assert!(usage_plausible(64, 16), "several tokens per chunk");
        assert!(usage_plausible(0, 0));
        let mut tally = UsageSetAside::default();
        tally.add(3, None, 16);
        assert_eq!(tally.found(), None);
        tally.add(4, Some(0), 16);
        tally.add(5, Some(1), 16);
        assert_eq!(tally.found(), Some(UsageSetAside { requests: 2, example: Some((4, 0, 16)) }));
    }
}
