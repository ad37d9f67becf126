//! Per-request checks of what came back: the canary marker (did this response belong to this
//! request?) and the controlled output length (`response_words`).

use crate::record::{CanaryCheck, ControlledOutput};

/// Prefix of every canary marker; any occurrence in a response is counted.
pub const CANARY_PREFIX: &str = "ANVIL_REQ_";

/// `ANVIL_REQ_<seed>_<index:05>`.
pub fn canary_marker(seed: u64, index: u64) -> String {
    format!("{CANARY_PREFIX}{seed}_{index:05}")
}

/// Length of the marker starting at `text` (which starts with the prefix): the prefix plus the
/// longest run of `[A-Za-z0-9_]`, so `..._0001` never matches inside `..._00012`.
fn marker_len(text: &str) -> usize {
    CANARY_PREFIX.len()
        + text[CANARY_PREFIX.len()..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count()
}

/// Check a response's visible content against its marker. Fails closed on an incomplete capture.
pub fn check_canary(marker: &str, visible: &str, capture_complete: bool) -> CanaryCheck {
    let mut own = 0u32;
    let mut foreign = 0u32;
    let mut rest = visible;
    while let Some(at) = rest.find(CANARY_PREFIX) {
        let tail = &rest[at..];
        let len = marker_len(tail);
        if &tail[..len] == marker {
            own += 1;
        } else {
            foreign += 1;
        }
        rest = &tail[len..];
    }
    let start = visible.trim_start();
    let marker_at_start = start.starts_with(marker)
        && !start[marker.len()..].bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    CanaryCheck {
        marker: marker.to_string(),
        marker_at_start,
        observed_marker_count: own,
        foreign_marker_count: foreign,
        capture_complete,
        passed: marker_at_start && own == 1 && foreign == 0 && capture_complete,
        cross_session_marker_count: None,
    }
}

/// Check the visible content against the requested word count.
pub fn check_controlled_output(
    requested: u32,
    visible: &str,
    capture_complete: bool,
    finish_reason: Option<&str>,
) -> ControlledOutput {
    let body = visible.trim_start();
    let body = if body.starts_with(CANARY_PREFIX) { &body[marker_len(body)..] } else { body };
    let words = body.split_whitespace().count() as u32;
    let truncated = !capture_complete || finish_reason == Some("length");
    ControlledOutput {
        requested_words: requested,
        observed_words: capture_complete.then_some(words),
        exact: capture_complete && words == requested,
        truncated,
        observable: capture_complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_passes_only_on_a_clean_response() {
        let m = "ANVIL_REQ_1717_00001";
        assert!(check_canary(m, "ANVIL_REQ_1717_00001 The text is about rivers.", true).passed);
        assert!(check_canary(m, "\n ANVIL_REQ_1717_00001 ok", true).passed);
        let late = check_canary(m, "Sure! ANVIL_REQ_1717_00001", true);
        assert!(!late.marker_at_start && !late.passed && late.observed_marker_count == 1);
        let swapped = check_canary(m, "ANVIL_REQ_1717_00002 text", true);
        assert_eq!(
            (swapped.marker_at_start, swapped.observed_marker_count, swapped.foreign_marker_count),
            (false, 0, 1)
        );
        let merged = check_canary(m, "ANVIL_REQ_1717_00001 text ANVIL_REQ_1717_00007 more", true);
        assert_eq!((merged.observed_marker_count, merged.foreign_marker_count, merged.passed), (1, 1, false));
        let twice = check_canary(m, "ANVIL_REQ_1717_00001 ANVIL_REQ_1717_00001", true);
        assert_eq!((twice.observed_marker_count, twice.passed), (2, false));
        // A longer marker that merely starts with ours is foreign.
        let longer = check_canary(m, "ANVIL_REQ_1717_000012 x", true);
        assert_eq!((longer.marker_at_start, longer.observed_marker_count, longer.foreign_marker_count), (false, 0, 1));
        assert!(!check_canary(m, "ANVIL_REQ_1717_00001 cut", false).passed);
    }

    #[test]
    fn controlled_output_counts_words_after_the_marker() {
        let c = check_controlled_output(3, "ANVIL_REQ_1_00002 one two three", true, Some("stop"));
        assert_eq!((c.observed_words, c.exact, c.truncated), (Some(3), true, false));
        let long = check_controlled_output(3, "one two three four", true, Some("stop"));
        assert_eq!((long.observed_words, long.exact), (Some(4), false));
        let cut = check_controlled_output(3, "one two three", true, Some("length"));
        assert!(cut.exact && cut.truncated);
        let unknown = check_controlled_output(3, "one two", false, None);
        assert_eq!((unknown.observed_words, unknown.observable, unknown.exact), (None, false, false));
    }
}
