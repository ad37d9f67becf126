//! What the per-request response checks found: the canary (did this response belong to this
//! request?) and the controlled output length (`response_words`). The checks themselves are in
//! `workload::canary`; these are their results, as the records keep them.

use serde::{Deserialize, Serialize};

/// What the canary check found in one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryCheck {
    pub marker: String,
    /// The visible content (after leading whitespace) starts with this request's marker.
    pub marker_at_start: bool,
    /// Occurrences of this request's marker.
    pub observed_marker_count: u32,
    /// Occurrences of any other `ANVIL_REQ_` marker (cross-request contamination).
    pub foreign_marker_count: u32,
    /// The whole visible response was captured (not cut by the capture cap or a broken stream).
    pub capture_complete: bool,
    pub passed: bool,
    /// Conversations: foreign markers that belong to another session (cross-session
    /// contamination); absent outside conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_session_marker_count: Option<u32>,
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
