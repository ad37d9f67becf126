//! A conversation turn's canary: `ANVIL_REQ_<seed>_S<conversation>_T<turn>`. The session part
//! (everything before `_T`) lets an answer's foreign markers be told apart: another turn of the
//! same conversation, or another conversation altogether (cross-session contamination, what a
//! KV-cache or prefix-sharing bug between sessions looks like).
//!
//! Only a complete, well-formed turn marker of this run (its seed) counts as another
//! conversation's: a turn marker cut short by the output budget (`…_S000`) or garbled names no
//! conversation, and a false alarm of mixed-up sessions is as bad as a missed one.

/// Prefix of every canary marker (the same as for single requests).
pub const PREFIX: &str = "ANVIL_REQ_";

/// The marker of turn `turn` (from 1) of conversation `conversation`.
pub fn turn_marker(seed: u64, conversation: u64, turn: u32) -> String {
    format!("{PREFIX}{seed}_S{conversation:05}_T{turn}")
}

/// `digits` as the tool writes a number zero-padded to `width`: at least `width` digits, and
/// no leading zero beyond the padding.
pub fn canonical_number(digits: &str, width: usize) -> Option<u64> {
    if digits.len() < width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (format!("{n:0width$}") == digits).then_some(n)
}

/// `(seed, conversation, turn)` of a turn marker, when `marker` has exactly the shape
/// `turn_marker` writes.
pub fn parse_turn_marker(marker: &str) -> Option<(&str, u64, u32)> {
    let rest = marker.strip_prefix(PREFIX)?;
    let (seed, rest) = rest.split_once("_S")?;
    let (conversation, turn) = rest.split_once("_T")?;
    canonical_number(seed, 1)?;
    let conversation = canonical_number(conversation, 5)?;
    let turn = u32::try_from(canonical_number(turn, 1)?).ok().filter(|&t| t >= 1)?;
    Some((seed, conversation, turn))
}

/// The session a marker belongs to: the text before its turn (`_T…`), or the whole marker for
/// markers of single requests (each its own session).
pub fn session_of(marker: &str) -> &str {
    match (marker.find("_S"), marker.rfind("_T")) {
        (Some(s), Some(t)) if t > s => &marker[..t],
        _ => marker,
    }
}

/// Markers in `text` that belong to a session other than `own`'s: well-formed turn markers of
/// this run (`own`'s seed) of another conversation.
pub fn cross_session_markers(own: &str, text: &str) -> u32 {
    let Some((seed, conversation, _)) = parse_turn_marker(own) else { return 0 };
    let mut count: u32 = 0;
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let tail = &rest[at..];
        let len =
            PREFIX.len() + tail[PREFIX.len()..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
        if parse_turn_marker(&tail[..len]).is_some_and(|(s, c, _)| s == seed && c != conversation) {
            count = count.saturating_add(1);
        }
        rest = &tail[len..];
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_their_session_and_turn() {
        let m = turn_marker(13, 7, 3);
        assert_eq!(m, "ANVIL_REQ_13_S00007_T3");
        assert_eq!(session_of(&m), "ANVIL_REQ_13_S00007");
        assert_eq!(session_of("ANVIL_REQ_13_00012"), "ANVIL_REQ_13_00012");
    }

    #[test]
    fn only_other_sessions_count() {
        let own = turn_marker(1, 2, 3);
        assert_eq!(cross_session_markers(&own, &format!("{own} fine")), 0);
        // An earlier turn of the same conversation is foreign but not another session's.
        assert_eq!(cross_session_markers(&own, &format!("{} text", turn_marker(1, 2, 1))), 0);
        let text = format!("{} x {} y ANVIL_REQ_0_99999", turn_marker(1, 9, 3), turn_marker(1, 20, 1));
        assert_eq!(cross_session_markers(&own, &text), 2, "a marker of no conversation of this run is none");
        // A longer conversation number is another conversation.
        assert_eq!(cross_session_markers(&own, &turn_marker(1, 20, 3)), 1);
        // A marker cut short, another seed's, or a garbled one names no other conversation.
        for text in ["ANVIL_REQ_1_S000", "ANVIL_REQ_1_S0000", "ANVIL_REQ_2_S00009_T1", "ANVIL_REQ_1_S00009_T0"] {
            assert_eq!(cross_session_markers(&own, text), 0, "{text}");
        }
        assert_eq!(parse_turn_marker(&turn_marker(306, 4, 12)), Some(("306", 4, 12)));
        assert_eq!(parse_turn_marker("ANVIL_REQ_306_S00004_T012"), None);
    }
}
