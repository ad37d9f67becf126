//! The stream state over the recorded byte streams of the APIs beyond chat (tests/fixtures/apis),
//! fed in reads of 97 bytes, 1 ms apart.

use std::time::Duration;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn feed(api: Api, name: &str) -> (StreamState, Result<(), StreamFault>) {
    let bytes = std::fs::read(format!("{}/tests/fixtures/apis/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut s = StreamState::new(true).for_api(api);
    for (i, piece) in bytes.chunks(97).enumerate() {
        if let Err(f) = s.observe(piece, MS * (i as u32 + 1)) {
            return (s, Err(f));
        }
    }
    let r = s.finish(MS * 1000);
    (s, r)
}

#[test]
fn responses_text_is_complete_at_response_completed() {
    let (s, r) = feed(Api::Responses, "responses-text.sse");
    r.unwrap();
    assert!(s.done.is_some() && s.done < Some(MS * 1000), "ended by its last event, not the close");
    assert_eq!((s.content_chunks, s.reasoning_chunks), (10, 0));
    assert_eq!(s.capture.as_deref(), Some("Hi there! How can I assist you today?"));
    assert_eq!(s.finish_reason.as_deref(), Some("stop"));
    assert_eq!((s.output_tokens().tokens, s.output_tokens().source), (11, TokenSource::Usage));
    assert_eq!((s.usage.prompt_tokens, s.usage.cached_tokens), (Some(37), Some(0)));
    // Lifecycle events (created, in_progress, item added) do not start the clock.
    assert!(s.first_output > Some(MS * 4), "{:?}", s.first_output);
}

#[test]
fn responses_reasoning_starts_the_first_output_clock() {
    let (s, r) = feed(Api::Responses, "responses-reasoning.sse");
    r.unwrap();
    assert_eq!((s.reasoning_chunks, s.content_chunks), (7, 4));
    assert!(s.first_output < s.first_content);
    assert_eq!((s.usage.reasoning_tokens, s.usage.cached_tokens), (Some(7), Some(64)));
}

#[test]
fn responses_failures_have_their_kinds() {
    let (_, r) = feed(Api::Responses, "responses-failed.sse");
    let f = r.unwrap_err();
    assert_eq!((f.kind, f.server_error_type.as_deref()), (ErrorKind::ResponseFailed, Some("server_error")));
    let (_, r) = feed(Api::Responses, "responses-error.sse");
    let f = r.unwrap_err();
    assert_eq!((f.kind, f.server_error_type.as_deref()), (ErrorKind::ServerErrorEvent, Some("rate_limit_exceeded")));
    // Cut by max_output_tokens: a complete answer, as chat's `length`.
    let (s, r) = feed(Api::Responses, "responses-incomplete.sse");
    r.unwrap();
    assert_eq!((s.finish_reason.as_deref(), s.output_tokens().tokens), (Some("length"), 3));
    assert!(s.done.is_some());
}

#[test]
fn messages_streams() {
    let (s, r) = feed(Api::Messages, "messages-text.sse");
    r.unwrap();
    assert_eq!((s.content_chunks, s.finish_reason.as_deref()), (7, Some("stop")));
    assert_eq!((s.usage.prompt_tokens, s.output_tokens().tokens), (Some(25), 15));
    let (s, r) = feed(Api::Messages, "messages-thinking.sse");
    r.unwrap();
    assert_eq!((s.reasoning_chunks, s.content_chunks), (2, 2), "the signature delta is not text");
    assert!(s.first_output < s.first_content);
    assert_eq!(
        (s.usage.prompt_tokens, s.usage.cached_tokens, s.finish_reason.as_deref()),
        (Some(2088), Some(2048), Some("length"))
    );
    let (_, r) = feed(Api::Messages, "messages-error.sse");
    let f = r.unwrap_err();
    assert_eq!((f.kind, f.server_error_type.as_deref()), (ErrorKind::ServerErrorEvent, Some("overloaded_error")));
}

#[test]
fn a_missing_last_event_leaves_the_response_open() {
    let bytes = std::fs::read(format!("{}/tests/fixtures/apis/messages-text.sse", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let cut = bytes.len() - "event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n".len();
    let mut s = StreamState::new(false).for_api(Api::Messages);
    s.observe(&bytes[..cut], MS).unwrap();
    s.finish(MS * 2).unwrap();
    assert_eq!(s.done, None);
    assert_eq!(s.missing_end_message(), "the stream ended without message_stop");
}

#[test]
fn embeddings_and_rerank_answers_arrive_whole() {
    for (api, name, tokens) in [(Api::Embeddings, "embeddings.json", 16), (Api::Rerank, "rerank.json", 56)] {
        let (s, r) = feed(api, name);
        r.unwrap();
        // Read once the body ended: its first output and its end are the same instant.
        assert_eq!((s.first_output, s.done, s.first_content), (Some(MS * 1000), Some(MS * 1000), None));
        assert_eq!((s.usage.prompt_tokens, s.output_tokens().tokens), (Some(tokens), 0));
        assert_eq!(s.output_tokens().source, TokenSource::Usage);
    }
    let mut s = StreamState::new(false).for_api(Api::Embeddings);
    s.observe(b"{\"data\": [", MS).unwrap();
    assert_eq!(s.finish(MS * 2).unwrap_err().kind, ErrorKind::InvalidJson);
}

#[test]
fn vllm_continuous_usage_counts_the_last_report() {
    let (s, r) = feed(Api::Chat, "vllm-chat-continuous-usage.sse");
    r.unwrap();
    assert_eq!((s.content_chunks, s.finish_reason.as_deref()), (8, Some("stop")));
    assert_eq!((s.usage.prompt_tokens, s.output_tokens().tokens), (Some(17), 16));
}
