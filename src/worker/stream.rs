//! The state of one streaming response: what arrived, when, and what it adds up to.
//!
//! Fed one timestamp per read (`observe`), so every event decoded from the same read shares the
//! instant its bytes became available. Nothing here allocates per chunk: visible text is copied
//! into one growing capture, bounded at `CAPTURE_CHARS`.

use std::time::Duration;

use crate::openai::{ChunkError, SseDecoder, SseError, StreamEvent, Usage, parse_event};

use crate::record::{ErrorKind, TokenSource};

/// Visible content kept per response for canary checks (the reference contract's cap).
pub const CAPTURE_CHARS: usize = 8192;

/// Why a stream could not be read to its end.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFault {
    pub kind: ErrorKind,
    pub server_error_type: Option<String>,
    pub message: String,
}

impl From<SseError> for StreamFault {
    fn from(e: SseError) -> Self {
        StreamFault { kind: ErrorKind::MalformedSse, server_error_type: None, message: e.to_string() }
    }
}

impl From<ChunkError> for StreamFault {
    fn from(e: ChunkError) -> Self {
        let kind = match e {
            ChunkError::InvalidUtf8 => ErrorKind::InvalidUtf8,
            ChunkError::InvalidJson(_) => ErrorKind::InvalidJson,
        };
        StreamFault { kind, server_error_type: None, message: e.to_string() }
    }
}

#[derive(Debug, Default)]
pub struct StreamState {
    decoder: SseDecoder,
    pub first_output: Option<Duration>,
    pub first_content: Option<Duration>,
    pub done: Option<Duration>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub usage: Usage,
    pub finish_reason: Option<String>,
    /// Visible content, up to `CAPTURE_CHARS` characters (kept only when asked for).
    pub capture: Option<String>,
    pub visible_chars: usize,
    /// Conversations: the whole visible answer and reasoning text (kept only when asked for).
    pub answer: Option<(String, String)>,
}

impl StreamState {
    pub fn new(keep_capture: bool) -> Self {
        StreamState { capture: keep_capture.then(String::new), ..Default::default() }
    }

    /// Keep the whole answer (content and reasoning), for a conversation's history.
    pub fn keep_answer(&mut self) {
        self.answer = Some((String::new(), String::new()));
    }

    /// Bytes of one read, all stamped `at` (time since the request started).
    pub fn observe(&mut self, bytes: &[u8], at: Duration) -> Result<(), StreamFault> {
        let mut decoder = std::mem::take(&mut self.decoder);
        let result = decoder.feed(bytes, |data| self.on_event(data, at));
        self.decoder = decoder;
        result
    }

    /// The body ended; an unterminated last event still counts.
    pub fn finish(&mut self, at: Duration) -> Result<(), StreamFault> {
        let mut decoder = std::mem::take(&mut self.decoder);
        let result = decoder.finish(|data| self.on_event(data, at));
        self.decoder = decoder;
        result
    }

    fn on_event(&mut self, data: &[u8], at: Duration) -> Result<(), StreamFault> {
        if self.done.is_some() {
            return Ok(()); // anything after [DONE] is not part of the response
        }
        match parse_event(data)? {
            StreamEvent::Done => self.done = Some(at),
            StreamEvent::Error { kind, message } => {
                return Err(StreamFault { kind: ErrorKind::ServerErrorEvent, server_error_type: kind, message });
            }
            StreamEvent::Chunk { delta, finish_reason, usage } => {
                // Role-only and empty deltas are not output: they never start a clock.
                if let Some(text) = delta.reasoning.as_deref().filter(|r| !r.is_empty()) {
                    self.reasoning_chunks += 1;
                    self.first_output.get_or_insert(at);
                    if let Some((_, reasoning)) = &mut self.answer {
                        reasoning.push_str(text);
                    }
                }
                if let Some(text) = delta.content.as_deref().filter(|c| !c.is_empty()) {
                    self.content_chunks += 1;
                    self.first_output.get_or_insert(at);
                    self.first_content.get_or_insert(at);
                    self.capture_text(text);
                    if let Some((content, _)) = &mut self.answer {
                        content.push_str(text);
                    }
                }
                if let Some(reason) = finish_reason {
                    self.finish_reason = Some(reason.into_owned());
                }
                if let Some(u) = usage {
                    // Engines differ in which chunk carries usage; the last report wins field by field.
                    self.usage.prompt_tokens = u.prompt_tokens.or(self.usage.prompt_tokens);
                    self.usage.completion_tokens = u.completion_tokens.or(self.usage.completion_tokens);
                    self.usage.cached_tokens = u.cached_tokens.or(self.usage.cached_tokens);
                }
            }
        }
        Ok(())
    }

    fn capture_text(&mut self, text: &str) {
        let room = CAPTURE_CHARS.saturating_sub(self.visible_chars);
        let chars = text.chars().count();
        if let Some(capture) = &mut self.capture {
            if chars <= room {
                capture.push_str(text);
            } else if room > 0 {
                let cut = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
                capture.push_str(&text[..cut]);
            }
        }
        self.visible_chars += chars;
    }

    pub fn visible_truncated(&self) -> bool {
        self.visible_chars > CAPTURE_CHARS
    }

    /// Output tokens and where the number came from.
    pub fn output_tokens(&self) -> (u64, TokenSource) {
        match self.usage.completion_tokens {
            Some(n) => (n, TokenSource::Usage),
            None => (u64::from(self.content_chunks + self.reasoning_chunks), TokenSource::ChunkCount),
        }
    }

    pub fn buffered(&self) -> usize {
        self.decoder.buffered()
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(s.output_tokens(), (12, TokenSource::Usage));
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
        assert_eq!(s.output_tokens(), (u64::from(s.content_chunks), TokenSource::ChunkCount));
        assert!(s.capture.as_deref().unwrap().starts_with("Hello there!"));
    }

    #[test]
    fn llamacpp_completions_usage_on_finish_chunk() {
        let s = feed_fixture("llamacpp-completions.sse");
        assert_eq!(s.content_chunks, 8);
        assert_eq!(s.output_tokens(), (8, TokenSource::Usage));
        assert_eq!((s.usage.prompt_tokens, s.usage.cached_tokens), (Some(5), Some(0)));
        assert_eq!(s.capture.as_deref(), Some(" Paris.\n\nThe United States has"));
    }

    #[test]
    fn reasoning_then_content_and_capture_cap() {
        let mut s = StreamState::new(true);
        s.observe(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", MS).unwrap();
        s.observe(b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n", MS * 2).unwrap();
        let big =
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "é".repeat(CAPTURE_CHARS));
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
}
