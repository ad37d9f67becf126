//! Per-request checks of what came back: the canary marker (did this response belong to this
//! request?) and the controlled output length (`response_words`).
//!
//! The canary is checked over the whole visible response by a streaming scan (`CanaryScan`): it
//! looks at each byte of each delta once, carries at most an unfinished marker's state between
//! deltas, and holds no text, so a response of any length is checked in constant memory. The
//! length check needs the words themselves and works on the bounded capture.

use memchr::memchr;

use crate::record::{CanaryCheck, ControlledOutput};

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
    /// Only whitespace has been seen so far.
    before_start: bool,
    /// Bytes of the prefix matched at the end of the text so far (0: none).
    partial: usize,
    /// The unfinished prefix began at the first visible character.
    partial_first: bool,
    run: Option<Run>,
    marker_at_start: bool,
    own: u32,
    foreign: u32,
}

impl CanaryScan {
    pub fn new(marker: &str) -> Self {
        CanaryScan {
            marker: marker.into(),
            before_start: true,
            partial: 0,
            partial_first: false,
            run: None,
            marker_at_start: false,
            own: 0,
            foreign: 0,
        }
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
                    run.own = run.own && marker.get(run.len) == Some(&b);
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
        if let Some(run) = self.run.take() {
            let own = run.own && run.len == self.marker.len();
            if own {
                self.own += 1;
            } else {
                self.foreign += 1;
            }
            if run.first {
                self.marker_at_start = own;
            }
        }
    }

    /// The verdict; `complete` says whether the whole response was fed.
    pub fn finish(mut self, complete: bool) -> CanaryCheck {
        self.close_run();
        CanaryCheck::from_counts(&self.marker, self.marker_at_start, self.own, self.foreign, complete)
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

    /// The check as it was before the streaming scan: on the whole text at once.
    fn oracle(marker: &str, visible: &str) -> (bool, u32, u32) {
        let (mut own, mut foreign, mut rest) = (0, 0, visible);
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
        let at_start = start.starts_with(marker) && !start[marker.len()..].bytes().next().is_some_and(is_marker_byte);
        (at_start, own, foreign)
    }

    fn scan_in_pieces(marker: &str, text: &str, cuts: &[usize]) -> CanaryCheck {
        let mut scan = CanaryScan::new(marker);
        let mut from = 0;
        for &cut in cuts {
            let cut = (from..=cut.min(text.len())).rev().find(|&c| text.is_char_boundary(c)).unwrap_or(from);
            scan.feed(&text[from..cut]);
            from = cut;
        }
        scan.feed(&text[from..]);
        scan.finish(true)
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
        ];
        for text in texts {
            let (at_start, own, foreign) = oracle(m, text);
            for step in 1..=text.len() {
                let cuts: Vec<usize> = (step..text.len()).step_by(step).collect();
                let c = scan_in_pieces(m, text, &cuts);
                assert_eq!(
                    (c.marker_at_start, c.observed_marker_count, c.foreign_marker_count),
                    (at_start, own, foreign),
                    "{text:?} in pieces of {step}"
                );
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
            (false, 1, Some(crate::record::CanaryFailure::ForeignMarker))
        );
    }

    proptest::proptest! {
        #[test]
        fn the_scan_agrees_with_the_whole_text_check(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "ANVIL_REQ_3_00001", "ANVIL_REQ_3_00002", "ANVIL_REQ_", "ANVIL", "A", "_", "1", " ", "\n", "é", "word",
            ]), 0..12),
            cuts in proptest::collection::vec(0usize..120, 0..8),
        ) {
            let text: String = pieces.concat();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let c = scan_in_pieces("ANVIL_REQ_3_00001", &text, &cuts);
            let want = oracle("ANVIL_REQ_3_00001", &text);
            proptest::prop_assert_eq!((c.marker_at_start, c.observed_marker_count, c.foreign_marker_count), want);
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
