//! Property tests (a bounded fuzz run in CI) for the streaming parser: whatever bytes arrive, in
//! whatever pieces, it never panics, never loses a well-formed event, and splits nothing
//! differently because of where the reads happened to end.

use std::time::Duration;

use anvil_load::request::worker::StreamState;
use proptest::prelude::*;

/// Feed `bytes` in reads ending at `cuts` (offsets, any order), then end the stream.
fn feed(bytes: &[u8], cuts: &[usize]) -> Result<StreamState, String> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut state = StreamState::new(true);
    let mut from = 0;
    for (i, &to) in cuts.iter().chain(std::iter::once(&bytes.len())).enumerate() {
        if to > from {
            state.observe(&bytes[from..to], Duration::from_micros(i as u64)).map_err(|e| e.message)?;
            from = to;
        }
    }
    state.finish(Duration::from_secs(1)).map_err(|e| e.message)?;
    Ok(state)
}

/// A well-formed stream built from arbitrary text pieces (escaped by serde_json).
fn stream(pieces: &[(bool, String)], crlf: bool) -> Vec<u8> {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut out = format!("data: {{\"choices\":[{{\"delta\":{{\"role\":\"assistant\",\"content\":null}}}}]}}{nl}{nl}");
    for (reasoning, text) in pieces {
        let key = if *reasoning { "reasoning_content" } else { "content" };
        let delta = serde_json::json!({ "choices": [{ "delta": { key: text } }] });
        out.push_str(&format!("data: {delta}{nl}{nl}"));
    }
    out.push_str(&format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{}}}}}{nl}{nl}data: [DONE]{nl}{nl}",
        pieces.len()
    ));
    out.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), cuts in proptest::collection::vec(any::<usize>(), 0..16)) {
        let _ = feed(&bytes, &cuts);
    }

    #[test]
    fn sse_shaped_garbage_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("data: ".to_string()),
                Just("data: [DONE]".to_string()),
                Just(": ping".to_string()),
                Just("event: error".to_string()),
                Just("".to_string()),
                "data: \\{[a-z\":,\\[\\]{} 0-9]{0,40}",
                ".{0,20}",
            ],
            0..40,
        ),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let bytes = lines.join("\n").into_bytes();
        let _ = feed(&bytes, &cuts);
    }

    #[test]
    fn read_boundaries_never_change_what_is_decoded(
        pieces in proptest::collection::vec((any::<bool>(), "\\PC{1,12}"), 1..30),
        crlf in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..32),
    ) {
        let bytes = stream(&pieces, crlf);
        let whole = feed(&bytes, &[]).expect("a well-formed stream parses");
        let split = feed(&bytes, &cuts).expect("a well-formed stream parses in any pieces");
        let reasoning = pieces.iter().filter(|(r, _)| *r).count() as u32;
        prop_assert_eq!(whole.reasoning_chunks, reasoning);
        prop_assert_eq!(whole.content_chunks, pieces.len() as u32 - reasoning);
        prop_assert_eq!((split.content_chunks, split.reasoning_chunks), (whole.content_chunks, whole.reasoning_chunks));
        prop_assert_eq!(&split.capture, &whole.capture);
        prop_assert!(split.done.is_some());
        prop_assert_eq!(split.output_tokens(), whole.output_tokens());
    }
}
