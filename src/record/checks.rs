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
    /// Occurrences of any other `ANVIL_REQ_` marker (cross-request contamination).
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
}

impl CanaryCheck {
    /// The verdict from what the scan counted: passed only with the own marker at the start,
    /// exactly once, no foreign marker, and the whole response seen.
    pub fn from_counts(marker: &str, marker_at_start: bool, own: u32, foreign: u32, complete: bool) -> Self {
        let failure_reason = if foreign > 0 {
            Some(CanaryFailure::ForeignMarker)
        } else if !complete {
            Some(CanaryFailure::Incomplete)
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
