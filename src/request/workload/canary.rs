//! Per-request checks of what came back: the canary marker (did this response belong to this
//! request?) and the controlled output length (`response_words`).
//!
//! The canary is checked over the whole visible response by a streaming scan (`CanaryScan`): it
//! looks at each byte of each delta once, carries at most an unfinished marker's state between
//! deltas, and holds no text but a marker that is not this request's (at most `MAX_MARKER`
//! bytes, kept to classify it and as evidence), so a response of any length is checked in
//! constant memory. The length check needs the words themselves and works on the bounded
//! capture.
//!
//! A marker that is not this request's is *foreign* (contamination) only when it is a complete,
//! well-formed marker of another request of this run: the run's seed, the shape of this run's
//! markers, and an index below the run's request count when it has one. This request's marker
//! cut short is *truncated*; anything else marker-like (a garbled marker, another run's, an
//! index no request has) is *garbled*. Neither is a sign that responses were mixed up.

use memchr::memchr;

use crate::plan::session::canary::{canonical_number, parse_turn_marker};
use crate::request::record::checks::MarkerTally;
use crate::request::record::{CanaryCheck, ControlledOutput};

/// Prefix of every canary marker; any occurrence in a response is counted.
pub const CANARY_PREFIX: &str = "ANVIL_REQ_";

/// `ANVIL_REQ_<seed>_<index:05>`.
pub fn canary_marker(seed: u64, index: u64) -> String {
    format!("{CANARY_PREFIX}{seed}_{index:05}")
}

/// Bytes that continue a marker after its prefix: a marker is the prefix plus the longest run
/// of `[A-Za-z0-9_]`, so `..._0001` never matches inside `..._00012`.
fn is_marker_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Length of the marker starting at `text` (which starts with the prefix).
fn marker_len(text: &str) -> usize {
    CANARY_PREFIX.len() + text[CANARY_PREFIX.len()..].bytes().take_while(|&b| is_marker_byte(b)).count()
}

/// The longest marker the tool makes: the prefix, a 20-digit seed, `_S`, a 20-digit
/// conversation, `_T` and a 10-digit turn. A longer run is garbled, and only its length is kept.
pub const MAX_MARKER: usize = 64;

/// `(seed, index)` of a request marker `ANVIL_REQ_<seed>_<index:05>`, when `marker` has exactly
/// that shape.
pub fn parse_request_marker(marker: &str) -> Option<(&str, u64)> {
    let rest = marker.strip_prefix(CANARY_PREFIX)?;
    let (seed, index) = rest.split_once('_')?;
    canonical_number(seed, 1)?;
    Some((seed, canonical_number(index, 5)?))
}

/// Is `other` (not this request's marker) a complete, well-formed marker of another request of
/// this run? `own` gives the run's seed and the shape of its markers; `index_limit` is the run's
/// request count per level, when it has one.
fn is_marker_of_this_run(own: &str, other: &str, index_limit: Option<u64>) -> bool {
    if let Some((seed, _)) = parse_request_marker(own) {
        return parse_request_marker(other).is_some_and(|(s, i)| s == seed && index_limit.is_none_or(|n| i < n));
    }
    if let Some((seed, conversation, turn)) = parse_turn_marker(own) {
        // A later turn of the same conversation has not been sent yet.
        return parse_turn_marker(other).is_some_and(|(s, c, t)| s == seed && (c != conversation || t < turn));
    }
    false
}

/// A marker being read: its length so far and whether it still equals the request's own.
#[derive(Debug, Clone, Copy)]
struct Run {
    len: usize,
    own: bool,
    /// It began at the first visible character of the response.
    first: bool,
}

/// The streaming canary scan of one response. Feed it every visible delta in order, then
/// `finish`. The prefix has no proper suffix that is also its prefix, so an unfinished prefix
/// at the end of a delta is fully described by how many of its bytes matched.
#[derive(Debug, Clone)]
pub struct CanaryScan {
    marker: Box<str>,
    /// Requests per level of this run, when it counts them: a higher index is no request's.
    index_limit: Option<u64>,
    /// The marker being read, once it is not this request's (up to `MAX_MARKER` bytes; empty
    /// while it still matches, so this request's own marker costs no copy).
    text: Vec<u8>,
    /// Only whitespace has been seen so far.
    before_start: bool,
    /// Bytes of the prefix matched at the end of the text so far (0: none).
    partial: usize,
    /// The unfinished prefix began at the first visible character.
    partial_first: bool,
    run: Option<Run>,
    tally: MarkerTally,
}

impl CanaryScan {
    pub fn new(marker: &str) -> Self {
        CanaryScan {
            marker: marker.into(),
            index_limit: None,
            text: Vec::new(),
            before_start: true,
            partial: 0,
            partial_first: false,
            run: None,
            tally: MarkerTally::default(),
        }
    }

    /// Markers with an index at or above `limit` (the run's requests per level) are no
    /// request's of this run.
    pub fn with_index_limit(mut self, limit: Option<u64>) -> Self {
        self.index_limit = limit;
        self
    }

    /// One delta of visible text.
    pub fn feed(&mut self, text: &str) {
        let bytes = text.as_bytes();
        // Where the response's first visible character is, when it is in this delta.
        let mut first_at = None;
        if self.before_start {
            match text.char_indices().find(|(_, c)| !c.is_whitespace()) {
                None => return, // whitespace holds no marker, and no marker can be in progress
                Some((i, _)) => {
                    self.before_start = false;
                    first_at = Some(i);
                }
            }
        }
        let prefix = CANARY_PREFIX.as_bytes();
        let mut i = 0;
        loop {
            if let Some(run) = &mut self.run {
                let marker = self.marker.as_bytes();
                while let Some(&b) = bytes.get(i).filter(|&&b| is_marker_byte(b)) {
                    if run.own && marker.get(run.len) != Some(&b) {
                        // No longer this request's marker: what matched so far is its start.
                        run.own = false;
                        self.text.clear();
                        self.text.extend_from_slice(&marker[..run.len]);
                    }
                    if !run.own && self.text.len() <= MAX_MARKER {
                        self.text.push(b);
                    }
                    run.len += 1;
                    i += 1;
                }
                if i == bytes.len() {
                    return; // the marker may go on in the next delta
                }
                self.close_run();
            }
            if self.partial > 0 {
                let need = &prefix[self.partial..];
                let avail = &bytes[i..];
                let n = need.len().min(avail.len());
                if avail[..n] == need[..n] {
                    if n < need.len() {
                        self.partial += n;
                        return;
                    }
                    i += n;
                    self.open_run(self.partial_first);
                    continue;
                }
                // Not a marker after all; the bytes compared hold no `A`, so searching on from
                // `i` misses nothing.
                self.partial = 0;
            }
            let Some(k) = memchr(prefix[0], &bytes[i..]) else { return };
            let at = i + k;
            let rest = &bytes[at..];
            let first = first_at == Some(at);
            if rest.starts_with(prefix) {
                i = at + prefix.len();
                self.open_run(first);
            } else if rest.len() < prefix.len() && prefix.starts_with(rest) {
                self.partial = rest.len();
                self.partial_first = first;
                return;
            } else {
                i = at + 1;
            }
        }
    }

    fn open_run(&mut self, first: bool) {
        self.partial = 0;
        self.run = Some(Run { len: CANARY_PREFIX.len(), own: true, first });
    }

    fn close_run(&mut self) {
        let Some(run) = self.run.take() else { return };
        let t = &mut self.tally;
        let own = run.own && run.len == self.marker.len();
        if run.first {
            t.marker_at_start = own;
        }
        if own {
            t.own += 1;
            return;
        }
        // `run.own` still set: a strict prefix of this request's marker, i.e. cut short.
        let (count, text) = if run.own {
            (&mut t.truncated, self.marker[..run.len].to_string())
        } else if run.len > MAX_MARKER {
            (&mut t.garbled, format!("{}… ({} characters)", CANARY_PREFIX, run.len))
        } else {
            let text = String::from_utf8_lossy(&self.text).into_owned();
            let count = if is_marker_of_this_run(&self.marker, &text, self.index_limit) {
                &mut t.foreign
            } else {
                &mut t.garbled
            };
            (count, text)
        };
        *count = count.saturating_add(1);
        t.offending.get_or_insert(text);
    }

    /// The verdict; `complete` says whether the whole response was fed.
    pub fn finish(mut self, complete: bool) -> CanaryCheck {
        self.close_run();
        self.tally.empty = self.before_start;
        CanaryCheck::from_tally(&self.marker, &self.tally, complete)
    }
}

/// Check a whole visible text against its marker (the scan, fed at once).
pub fn check_canary(marker: &str, visible: &str, complete: bool) -> CanaryCheck {
    let mut scan = CanaryScan::new(marker);
    scan.feed(visible);
    scan.finish(complete)
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

    use crate::request::record::CanaryFailure;

    #[test]
    fn whitespace_alone_is_no_content_to_check() {
        use crate::request::record::CanaryFailure;
        assert_eq!(check_canary("M", " \n ", true).failure_reason, Some(CanaryFailure::NoContent));
        assert_eq!(check_canary("M", "", true).failure_reason, Some(CanaryFailure::NoContent));
        assert_eq!(check_canary("M", "an answer", true).failure_reason, Some(CanaryFailure::MarkerMissing));
    }

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
        assert_eq!(swapped.offending_marker.as_deref(), Some("ANVIL_REQ_1717_00002"));
        let merged = check_canary(m, "ANVIL_REQ_1717_00001 text ANVIL_REQ_1717_00007 more", true);
        assert_eq!((merged.observed_marker_count, merged.foreign_marker_count, merged.passed), (1, 1, false));
        let twice = check_canary(m, "ANVIL_REQ_1717_00001 ANVIL_REQ_1717_00001", true);
        assert_eq!((twice.observed_marker_count, twice.passed), (2, false));
        // A longer marker that merely starts with ours is no marker the tool writes: garbled.
        let longer = check_canary(m, "ANVIL_REQ_1717_000012 x", true);
        assert_eq!((longer.marker_at_start, longer.observed_marker_count, longer.foreign_marker_count), (false, 0, 0));
        assert_eq!((longer.malformed_marker_count, longer.failure_reason), (1, Some(CanaryFailure::MarkerGarbled)));
        assert!(!check_canary(m, "ANVIL_REQ_1717_00001 cut", false).passed);
    }

    #[test]
    fn only_a_well_formed_marker_of_this_run_is_foreign() {
        let m = "ANVIL_REQ_306_00012";
        let verdict = |text: &str, limit: Option<u64>| {
            let mut scan = CanaryScan::new(m).with_index_limit(limit);
            scan.feed(text);
            let c = scan.finish(true);
            (c.foreign_marker_count, c.malformed_marker_count, c.failure_reason, c.offending_marker)
        };
        // The own marker cut by the output budget: truncated, not contamination.
        assert_eq!(
            verdict("Sure, the exact text ANVIL_REQ_306_000", Some(16)),
            (0, 1, Some(CanaryFailure::MarkerTruncated), Some("ANVIL_REQ_306_000".into()))
        );
        // Another request of this run: contamination.
        assert_eq!(verdict("ANVIL_REQ_306_00003 x", Some(16)).0, 1);
        // Another seed, an index no request has, a shape the tool never writes: garbled.
        for text in ["ANVIL_REQ_0_99999", "ANVIL_REQ_306_00016", "ANVIL_REQ_306_0003", "ANVIL_REQ_306_S00001_T1"] {
            let (foreign, malformed, reason, offending) = verdict(text, Some(16));
            assert_eq!((foreign, malformed, reason), (0, 1, Some(CanaryFailure::MarkerGarbled)), "{text}");
            assert_eq!(offending.as_deref(), Some(text));
        }
        // Without a request count, any index of the right shape and seed is a request's.
        assert_eq!(verdict("ANVIL_REQ_306_99999", None).0, 1);
        // A run of marker characters longer than any marker keeps only its length as evidence.
        let long = format!("ANVIL_REQ_{}", "x".repeat(500));
        let (_, malformed, _, offending) = verdict(&long, None);
        assert_eq!((malformed, offending.as_deref()), (1, Some("ANVIL_REQ_… (510 characters)")));
        // Session markers: another conversation's, or an earlier turn of this one.
        let own = "ANVIL_REQ_306_S00002_T3";
        let turn = |text: &str| {
            let c = check_canary(own, text, true);
            (c.foreign_marker_count, c.malformed_marker_count)
        };
        assert_eq!(turn("ANVIL_REQ_306_S00007_T1"), (1, 0));
        assert_eq!(turn("ANVIL_REQ_306_S00002_T2"), (1, 0));
        assert_eq!(turn("ANVIL_REQ_306_S00002_T4"), (0, 1), "a later turn of this conversation was not sent");
        assert_eq!(turn("ANVIL_REQ_306_S000"), (0, 1));
        assert_eq!(turn("ANVIL_REQ_306_00002"), (0, 1));
    }

    /// The check on the whole text at once, classifying each marker found.
    fn oracle(marker: &str, visible: &str) -> (bool, u32, u32, u32) {
        let (mut own, mut foreign, mut malformed, mut rest) = (0, 0, 0, visible);
        while let Some(at) = rest.find(CANARY_PREFIX) {
            let tail = &rest[at..];
            let len = marker_len(tail);
            let found = &tail[..len];
            if found == marker {
                own += 1;
            } else if !marker.starts_with(found) && is_marker_of_this_run(marker, found, Some(3)) {
                foreign += 1;
            } else {
                malformed += 1;
            }
            rest = &tail[len..];
        }
        let start = visible.trim_start();
        let at_start = start.starts_with(marker) && !start[marker.len()..].bytes().next().is_some_and(is_marker_byte);
        (at_start, own, foreign, malformed)
    }

    fn scan_in_pieces(marker: &str, text: &str, cuts: &[usize]) -> CanaryCheck {
        let mut scan = CanaryScan::new(marker).with_index_limit(Some(3));
        let mut from = 0;
        for &cut in cuts {
            let cut = (from..=cut.min(text.len())).rev().find(|&c| text.is_char_boundary(c)).unwrap_or(from);
            scan.feed(&text[from..cut]);
            from = cut;
        }
        scan.feed(&text[from..]);
        scan.finish(true)
    }

    fn counts(c: &CanaryCheck) -> (bool, u32, u32, u32) {
        (c.marker_at_start, c.observed_marker_count, c.foreign_marker_count, c.malformed_marker_count)
    }

    #[test]
    fn markers_split_across_deltas_are_found() {
        let m = "ANVIL_REQ_1717_00001";
        let texts = [
            "ANVIL_REQ_1717_00001 The text is about rivers.",
            "  \n ANVIL_REQ_1717_00001 ok ANVIL_REQ_1717_00002",
            "AANVIL_REQ_1717_00001 x",
            "ANVIL ANVIL_ ANVIL_REQ_1717_000012 ANVIL_REQ_1717_00001",
            "é ANVIL_REQ_1717_00001",
            "ANVIL_REQ_1717_0000",
            "ANVIL_REQ_",
            "ANVIL_REQ_1_ANVIL_REQ_1717_00001",
            "ANVIL_REQ_1717_00000 ANVIL_REQ_1717_00009 ANVIL_REQ_9_00001",
        ];
        for text in texts {
            let want = oracle(m, text);
            for step in 1..=text.len() {
                let cuts: Vec<usize> = (step..text.len()).step_by(step).collect();
                let c = scan_in_pieces(m, text, &cuts);
                assert_eq!(counts(&c), want, "{text:?} in pieces of {step}");
            }
        }
    }

    #[test]
    fn a_response_longer_than_any_capture_passes_on_its_own_marker() {
        let m = "ANVIL_REQ_7_00042";
        let mut scan = CanaryScan::new(m);
        scan.feed("ANVIL");
        scan.feed("_REQ_7_000");
        scan.feed("42 ");
        for _ in 0..20_000 {
            scan.feed(" the river ran north");
        }
        let c = scan.finish(true);
        assert!(c.passed, "{c:?}");
        let mut scan = CanaryScan::new(m);
        scan.feed("ANVIL_REQ_7_00042 ");
        for _ in 0..20_000 {
            scan.feed(" the river ran north");
        }
        scan.feed("ANVIL_REQ_7_00043");
        let c = scan.finish(true);
        assert_eq!(
            (c.passed, c.foreign_marker_count, c.failure_reason),
            (false, 1, Some(CanaryFailure::ForeignMarker))
        );
    }

    proptest::proptest! {
        #[test]
        fn the_scan_agrees_with_the_whole_text_check(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "ANVIL_REQ_3_00001", "ANVIL_REQ_3_00002", "ANVIL_REQ_3_00007", "ANVIL_REQ_", "ANVIL", "A", "_", "1",
                " ", "\n", "é", "word",
            ]), 0..12),
            cuts in proptest::collection::vec(0usize..120, 0..8),
        ) {
            let text: String = pieces.concat();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let c = scan_in_pieces("ANVIL_REQ_3_00001", &text, &cuts);
            let want = oracle("ANVIL_REQ_3_00001", &text);
            proptest::prop_assert_eq!(counts(&c), want);
        }
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
