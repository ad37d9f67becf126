//! The stream reader against captured engine bytes and hand-made streams: usage, chunks, capture,
//! faults and bounds.

use super::*;

const MS: Duration = Duration::from_millis(1);

fn feed_fixture(name: &str) -> StreamState {
    let bytes = std::fs::read(format!("{}/tests/fixtures/sse/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut s = StreamState::new(true);
    // One read per 97 bytes, 1 ms apart: events split across reads must still be timed by
    // the read that completed them.
    for (i, piece) in bytes.chunks(97).enumerate() {
        s.observe(piece, MS * (i as u32 + 1)).unwrap();
    }
    s.finish(MS * 1000).unwrap();
    s
}

#[test]
fn llamacpp_chat_with_usage() {
    let s = feed_fixture("llamacpp-chat-usage.sse");
    assert!(s.done.is_some());
    assert_eq!(s.reasoning_chunks, 0);
    assert_eq!(s.content_chunks, 12);
    assert_eq!((s.output_tokens().tokens, s.output_tokens().source), (12, TokenSource::Usage));
    assert_eq!(s.finish_reason.as_deref(), Some("length"));
    // The role-only first chunk (bytes 0..~250) must not start the clock.
    assert!(s.first_content.unwrap() > MS * 2);
    assert_eq!(s.first_output, s.first_content);
    assert!(s.capture.as_deref().unwrap().starts_with("1. Red:"));
}

#[test]
fn llamacpp_chat_without_usage_falls_back_to_chunks() {
    let s = feed_fixture("llamacpp-chat-nousage-stop.sse");
    assert_eq!(s.usage, Usage::default());
    assert_eq!(s.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        (s.output_tokens().tokens, s.output_tokens().source),
        (u64::from(s.content_chunks), TokenSource::ChunkCount)
    );
    assert!(s.capture.as_deref().unwrap().starts_with("Hello there!"));
}

#[test]
fn llamacpp_completions_usage_on_finish_chunk() {
    let s = feed_fixture("llamacpp-completions.sse");
    assert_eq!(s.content_chunks, 8);
    assert_eq!((s.output_tokens().tokens, s.output_tokens().source), (8, TokenSource::Usage));
    assert_eq!((s.usage.prompt_tokens, s.usage.cached_tokens), (Some(5), Some(0)));
    assert_eq!(s.capture.as_deref(), Some(" Paris.\n\nThe United States has"));
}

/// vLLM with `stream_options.continuous_usage_stats` (shape from vLLM's OpenAI server: the
/// cumulative usage on every chunk, the role chunk at 0, an end-of-turn token counted on
/// the finish chunk but never streamed as text).
#[test]
fn vllm_continuous_usage_gives_tokens_per_chunk() {
    let s = feed_fixture("vllm-chat-continuous-usage.sse");
    assert_eq!(s.content_chunks, 8);
    assert_eq!((s.output_tokens().tokens, s.output_tokens().source), (16, TokenSource::Usage));
    let f = s.chunk_clock.facts();
    let p = f.per_chunk.expect("every content chunk carried a count");
    assert_eq!((p.first_chunk_tokens, p.streamed_tokens), (1, 15), "the finish chunk's token was not streamed");
    assert_eq!(f.chunk_gaps.gaps(), 7);
    assert_eq!(p.token_gaps.gaps(), 7);
    assert!(f.max_stall.is_some_and(|m| m <= MS * 1000));
}

#[test]
fn reasoning_then_content_and_capture_cap() {
    let mut s = StreamState::new(true);
    s.observe(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", MS).unwrap();
    s.observe(b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n", MS * 2).unwrap();
    let big = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "é".repeat(CAPTURE_CHARS));
    s.observe(big.as_bytes(), MS * 3).unwrap();
    s.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n", MS * 4).unwrap();
    assert_eq!((s.first_output, s.first_content, s.done), (Some(MS * 2), Some(MS * 3), Some(MS * 4)));
    assert!(s.visible_truncated());
    assert_eq!(s.capture.as_deref().unwrap().chars().count(), CAPTURE_CHARS);
}

#[test]
fn faults_are_classified() {
    let mut s = StreamState::new(false);
    let e = s.observe(b"data: {\"error\":{\"message\":\"oom\",\"type\":\"server_error\"}}\n\n", MS).unwrap_err();
    assert_eq!((e.kind, e.server_error_type.as_deref()), (ErrorKind::ServerErrorEvent, Some("server_error")));
    let e = StreamState::new(false).observe(b"data: {\"choices\":[\n\n", MS).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidJson);
    let e = StreamState::new(false).observe(b"garbage line\n\n", MS).unwrap_err();
    assert_eq!(e.kind, ErrorKind::MalformedSse);
}

const ROLE: &[u8] = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n";
const WORD: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"w\"}}]}\n\n";
const FINISH: &[u8] = b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
const USAGE: &[u8] = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n";

#[test]
fn only_events_with_progress_move_the_progress_clock() {
    let mut s = StreamState::new(false);
    s.observe(b": keep-alive\n\n", MS).unwrap();
    s.observe(ROLE, MS * 2).unwrap();
    s.observe(b"data: {\"choices\":[]}\n\n", MS * 3).unwrap();
    assert_eq!((s.first_output, s.last_progress), (None, None), "no output yet, whatever bytes came");
    s.observe(WORD, MS * 4).unwrap();
    s.observe(b": ping\n\ndata: {\"choices\":[]}\n\n", MS * 5).unwrap();
    assert_eq!((s.first_output, s.last_progress), (Some(MS * 4), Some(MS * 4)));
    s.observe(FINISH, MS * 6).unwrap();
    assert_eq!(s.last_progress, Some(MS * 6));
    s.observe(USAGE, MS * 7).unwrap();
    s.observe(b"data: [DONE]\n\n", MS * 8).unwrap();
    assert_eq!((s.last_progress, s.done), (Some(MS * 8), Some(MS * 8)));
}

#[test]
fn nothing_after_done_is_read() {
    let mut s = StreamState::new(false);
    let mut bytes = [WORD, b"data: [DONE]\n\n<html>proxy footer</html>\n\ndata: {\"choices\":[\n\n"].concat();
    s.observe(&bytes, MS).unwrap();
    bytes.clear();
    s.observe(b"more junk\n\n", MS * 2).unwrap();
    s.finish(MS * 3).unwrap();
    assert_eq!((s.done, s.content_chunks), (Some(MS), 1));
}

#[test]
fn a_footer_after_finish_and_usage_ends_the_response() {
    let mut s = StreamState::new(false);
    s.observe(&[ROLE, WORD, WORD, FINISH].concat(), MS).unwrap();
    s.observe(USAGE, MS * 2).unwrap();
    s.observe(b"X-Proxy: served by edge-7\n\n", MS * 3).unwrap();
    assert_eq!(s.done, Some(MS * 2), "complete at its last event");
    // Before the response said everything, the same line is corruption.
    let mut s = StreamState::new(false);
    s.observe(&[WORD, FINISH].concat(), MS).unwrap();
    assert_eq!(s.observe(b"X-Proxy: served by edge-7\n\n", MS * 2).unwrap_err().kind, ErrorKind::MalformedSse);
}

#[test]
fn an_implausible_usage_count_is_set_aside_and_kept() {
    let mut s = StreamState::new(false);
    for _ in 0..16 {
        s.observe(WORD, MS).unwrap();
    }
    s.observe(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":0}}\n\n", MS).unwrap();
    assert_eq!(
        s.output_tokens(),
        OutputTokens { tokens: 16, source: TokenSource::ChunkCount, usage_set_aside: Some(0) }
    );
    s.observe(b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":17}}\n\n", MS).unwrap();
    assert_eq!(s.output_tokens(), OutputTokens { tokens: 17, source: TokenSource::Usage, usage_set_aside: None });
}

#[test]
fn a_long_response_passes_its_canary_without_any_capture() {
    let marker = "ANVIL_REQ_9_00003";
    let mut s = StreamState::new(false).with_canary(marker);
    s.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"ANVIL_REQ\"}}]}\n\n", MS).unwrap();
    s.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"_9_00003\"}}]}\n\n", MS).unwrap();
    let filler = b"data: {\"choices\":[{\"delta\":{\"content\":\" the river ran north\"}}]}\n\n".repeat(2000);
    s.observe(&filler, MS * 2).unwrap();
    s.observe(b"data: [DONE]\n\n", MS * 3).unwrap();
    assert!(s.visible_truncated() && s.capture.is_none());
    let c = s.canary_check().unwrap();
    assert!(c.passed, "{c:?}");
}

#[test]
fn server_labels_are_bounded_on_arrival() {
    let mut s = StreamState::new(false);
    let huge = format!("data: {{\"choices\":[{{\"delta\":{{}},\"finish_reason\":\"{}\"}}]}}\n\n", "é".repeat(10_000));
    s.observe(huge.as_bytes(), MS).unwrap();
    assert!(s.finish_reason.as_deref().unwrap().len() <= FINISH_REASON_BYTES);
}
