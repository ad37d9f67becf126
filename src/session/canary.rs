//! A conversation turn's canary: `ANVIL_REQ_<seed>_S<conversation>_T<turn>`. The session part
//! (everything before `_T`) lets an answer's foreign markers be told apart: another turn of the
//! same conversation, or another conversation altogether (cross-session contamination, what a
//! KV-cache or prefix-sharing bug between sessions looks like).

/// Prefix of every canary marker (the same as for single requests).
pub const PREFIX: &str = "ANVIL_REQ_";

/// The marker of turn `turn` (from 1) of conversation `conversation`.
pub fn turn_marker(seed: u64, conversation: u64, turn: u32) -> String {
    format!("{PREFIX}{seed}_S{conversation:05}_T{turn}")
}

/// The session a marker belongs to: the text before its turn (`_T…`), or the whole marker for
/// markers of single requests (each its own session).
pub fn session_of(marker: &str) -> &str {
    match (marker.find("_S"), marker.rfind("_T")) {
        (Some(s), Some(t)) if t > s => &marker[..t],
        _ => marker,
    }
}

/// Markers in `text` that belong to a session other than `own`'s.
pub fn cross_session_markers(own: &str, text: &str) -> u32 {
    let mine = session_of(own);
    let mut count = 0;
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let tail = &rest[at..];
        let len =
            PREFIX.len() + tail[PREFIX.len()..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
        let marker = &tail[..len];
        if marker != own && session_of(marker) != mine {
            count += 1;
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
        assert_eq!(cross_session_markers(&own, &text), 3);
        // A longer conversation number is another conversation.
        assert_eq!(cross_session_markers(&own, &turn_marker(1, 20, 3)), 1);
    }
}
