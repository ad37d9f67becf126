//! The state of one streaming response: what arrived, when, and what it adds up to.
//!
//! Fed one timestamp per read (`observe`), so every event decoded from the same read shares the
//! instant its bytes became available. Nothing here allocates per chunk: visible text is copied
//! into one growing capture, bounded at `CAPTURE_CHARS` (kept only for the word-count check),
//! and the canary is checked by a streaming scan that holds no text.
//!
//! The response ends at `data: [DONE]` (`response.completed` and `message_stop` in the
//! Responses and Messages APIs): whatever follows it is not read as SSE at all (a proxy
//! may append a footer). Embeddings and rerank answers do not stream: their body is kept
//! (bounded) and read once it has ended, which is then their first output and their end. A response that has sent its finish reason and its usage is complete
//! as well when a line that is no SSE field follows (a footer where `[DONE]` should be).

use std::sync::Arc;
use std::time::Duration;

use super::chunks::ChunkClock;
use super::tool_calls::ToolCalls;
use crate::contract::ErrorKind;
use crate::plan::scenario::Api;
use crate::plan::scenario::tools_rules::ToolSet;
use crate::request::openai::{
    ChunkError, ChunkShape, PoolingAnswer, SseDecoder, SseError, StreamEvent, ToolPiece, Usage, parse_answer,
    parse_event_of,
};
use crate::request::record::checks::{UsageBounds, UsageImplausible};
use crate::request::record::{TokenSource, ToolCallRecord};
use crate::request::workload::CanaryScan;

/// Visible content kept per response for the word-count check (the reference contract's cap).
pub const CAPTURE_CHARS: usize = 8192;
/// Longest `finish_reason` kept from the wire (it is sanitized further when recorded).
const FINISH_REASON_BYTES: usize = 256;
/// Largest embeddings or rerank answer read (a batch of 1024 vectors of 4096 floats fits).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

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

/// Why decoding a read stopped early.
enum Stop {
    Fault(StreamFault),
    /// `[DONE]` arrived: the rest of the read is not part of the response.
    Done,
}

impl From<SseError> for Stop {
    fn from(e: SseError) -> Self {
        Stop::Fault(e.into())
    }
}

impl From<StreamFault> for Stop {
    fn from(f: StreamFault) -> Self {
        Stop::Fault(f)
    }
}

/// Output tokens, where the number came from, and the server's count when it was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputTokens {
    pub tokens: u64,
    pub source: TokenSource,
    /// `usage.completion_tokens` when it was implausible (see `record::usage_plausible`).
    pub usage_set_aside: Option<u64>,
}

#[derive(Debug, Default)]
pub struct StreamState {
    decoder: SseDecoder,
    pub first_output: Option<Duration>,
    pub first_content: Option<Duration>,
    /// `[DONE]` arrived (or the response ended at a footer after its finish reason and usage).
    pub done: Option<Duration>,
    /// The last event that carried progress: text, a finish reason, usage or `[DONE]`.
    /// Comments, role-only chunks and chunks without choices are not progress.
    pub last_progress: Option<Duration>,
    pub content_chunks: u32,
    pub reasoning_chunks: u32,
    pub usage: Usage,
    /// Any usage object arrived.
    usage_seen: bool,
    pub finish_reason: Option<String>,
    /// Visible content, up to `CAPTURE_CHARS` characters (kept only when asked for).
    pub capture: Option<String>,
    pub visible_chars: usize,
    canary: Option<CanaryScan>,
    /// Conversations: the whole visible answer and reasoning text (kept only when asked for).
    pub answer: Option<(String, String)>,
    /// Gaps between output chunks and, when the engine reports them, tokens per chunk.
    pub chunk_clock: ChunkClock,
    /// Which API's events these are.
    api: Api,
    /// Embeddings and rerank: the answer's bytes so far.
    body: Vec<u8>,
    /// The last text chunk, against which the next payload is compared first.
    shape: ChunkShape,
    /// The most usage this request can report (unbounded but for `MAX_PLAUSIBLE_TOKENS` unless
    /// set).
    bounds: UsageBounds,
    /// The first usage report that could not describe the request, as it arrived.
    usage_problem: Option<UsageImplausible>,
    /// The last `completion_tokens` reported: a cumulative count never goes down.
    last_completion: Option<u64>,
    /// Characters the capture keeps when not `CAPTURE_CHARS` (0: `CAPTURE_CHARS`).
    capture_cap: usize,
    /// The run's tool set, when it offers one: each call is judged against it.
    offered_tools: Option<Arc<ToolSet>>,
    /// The response's tool calls, from their first piece.
    tool_calls: Option<Box<ToolCalls>>,
}

impl StreamState {
    pub fn new(keep_capture: bool) -> Self {
        StreamState { capture: keep_capture.then(String::new), ..Default::default() }
    }

    /// Keep up to `chars` characters of visible content (structured output's check).
    pub fn with_capture_cap(mut self, chars: usize) -> Self {
        self.capture = Some(String::new());
        self.capture_cap = chars;
        self
    }

    /// The capture holds the whole visible content.
    pub fn capture_whole(&self) -> bool {
        self.visible_chars <= self.cap()
    }

    fn cap(&self) -> usize {
        if self.capture_cap == 0 { CAPTURE_CHARS } else { self.capture_cap }
    }

    /// Also scan the whole visible response for canary markers, against `marker`.
    pub fn with_canary(mut self, marker: &str) -> Self {
        self.canary = Some(CanaryScan::new(marker));
        self
    }

    /// Markers with an index at or above `limit` (the run's requests per level) are no
    /// request's: a marker that names one is garbled, not contamination.
    pub fn with_canary_index_limit(mut self, limit: Option<u64>) -> Self {
        self.canary = self.canary.map(|scan| scan.with_index_limit(limit));
        self
    }

    /// Judge the server's usage against what this request can produce.
    pub fn with_bounds(mut self, bounds: UsageBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Judge tool calls against `set` (runs that offer tools).
    pub fn with_tools(mut self, set: Option<Arc<ToolSet>>) -> Self {
        self.offered_tools = set;
        self
    }

    /// The response's tool calls, judged (once): `None` when the run offered no tools and none
    /// came. `usage_tokens` is the server's output count, which covers the arguments when the
    /// response streamed nothing else.
    pub fn tool_call_record(&mut self, usage_tokens: Option<u64>) -> Option<ToolCallRecord> {
        let calls = self.tool_calls.take();
        if calls.is_none() && self.offered_tools.is_none() {
            return None;
        }
        let only_tools = self.visible_chars == 0 && self.reasoning_chunks == 0;
        Some(calls.unwrap_or_default().finish(self.offered_tools.as_ref(), only_tools, usage_tokens))
    }

    /// The tool calls so far as the model made them (agent sessions feed them back).
    pub fn called_tools(&self) -> Vec<super::tool_calls::CalledTool> {
        self.tool_calls.as_ref().map(|c| c.called()).unwrap_or_default()
    }

    /// Pieces of tool calls: output like text (the first one starts the output and the visible
    /// clock, see tools.md); `true` when one carried a name or an argument fragment.
    fn tool_pieces(&mut self, pieces: &[ToolPiece<'_>], at: Duration) -> bool {
        let calls = self.tool_calls.get_or_insert_with(Box::default);
        let mut output = false;
        for p in pieces {
            calls.piece(p, at);
            output |= p.name.as_deref().is_some_and(|n| !n.is_empty())
                || p.arguments.as_deref().is_some_and(|a| !a.is_empty());
        }
        if output {
            self.first_output.get_or_insert(at);
            self.first_content.get_or_insert(at);
            self.content_chunks = self.content_chunks.saturating_add(1);
        }
        output
    }

    /// Read `api`'s events (chat's by default).
    pub fn for_api(mut self, api: Api) -> Self {
        self.api = api;
        self
    }

    /// Why no output arrived in time, in the words of its API (embeddings and rerank answers
    /// arrive whole: their first output is the whole answer).
    pub fn first_output_timeout_message(&self) -> &'static str {
        if self.api.streams_text() {
            "no output (reasoning or content text) within client.first_byte_timeout"
        } else {
            "no complete answer within client.first_byte_timeout"
        }
    }

    /// Why a response without its last event failed, in the words of its API.
    pub fn missing_end_message(&self) -> &'static str {
        match self.api {
            Api::Chat | Api::Completions => "the stream ended without data: [DONE]",
            Api::Responses => "the stream ended without response.completed",
            Api::Messages => "the stream ended without message_stop",
            Api::Embeddings | Api::Rerank => "the answer ended early",
        }
    }

    /// Keep the whole answer (content and reasoning), for a conversation's history.
    pub fn keep_answer(&mut self) {
        self.answer = Some((String::new(), String::new()));
    }

    /// Bytes of one read, all stamped `at` (time since the request started).
    pub fn observe(&mut self, bytes: &[u8], at: Duration) -> Result<(), StreamFault> {
        if self.done.is_some() {
            return Ok(()); // anything after [DONE] is not part of the response
        }
        if !self.api.streams_text() {
            return self.keep_answer_bytes(bytes);
        }
        let mut decoder = std::mem::take(&mut self.decoder);
        let result = decoder.feed(bytes, |data| self.on_event(data, at));
        self.decoder = decoder;
        self.settle(result)
    }

    /// The body ended; an unterminated last event still counts.
    pub fn finish(&mut self, at: Duration) -> Result<(), StreamFault> {
        if self.done.is_some() {
            return Ok(());
        }
        if !self.api.streams_text() {
            return self.read_answer(at);
        }
        let mut decoder = std::mem::take(&mut self.decoder);
        let result = decoder.finish(|data| self.on_event(data, at));
        self.decoder = decoder;
        self.settle(result)
    }

    fn settle(&mut self, result: Result<(), Stop>) -> Result<(), StreamFault> {
        match result {
            Ok(()) | Err(Stop::Done) => Ok(()),
            // A footer where `[DONE]` should be, after a response that said everything else: the
            // response ended at its last event.
            Err(Stop::Fault(f)) if f.kind == ErrorKind::MalformedSse && self.finished_but_for_done() => {
                self.done = self.last_progress;
                Ok(())
            }
            Err(Stop::Fault(f)) => Err(f),
        }
    }

    /// The finish reason and the usage both arrived.
    fn finished_but_for_done(&self) -> bool {
        self.finish_reason.is_some() && self.usage_seen && self.last_progress.is_some()
    }

    /// Embeddings and rerank: one more piece of the answer.
    fn keep_answer_bytes(&mut self, bytes: &[u8]) -> Result<(), StreamFault> {
        if self.body.len() + bytes.len() > MAX_ANSWER_BYTES {
            return Err(StreamFault {
                kind: ErrorKind::InvalidJson,
                server_error_type: None,
                message: format!("the answer exceeded {MAX_ANSWER_BYTES} bytes"),
            });
        }
        self.body.extend_from_slice(bytes);
        Ok(())
    }

    /// Embeddings and rerank: the whole answer arrived at `at`, which is its first output too.
    fn read_answer(&mut self, at: Duration) -> Result<(), StreamFault> {
        let body = std::mem::take(&mut self.body);
        let answer = parse_answer(self.api, &body).map_err(|e| match e {
            // The answer is no stream chunk: say what it is.
            ChunkError::InvalidUtf8 => StreamFault {
                kind: ErrorKind::InvalidUtf8,
                server_error_type: None,
                message: "the answer is not valid UTF-8".into(),
            },
            other => StreamFault::from(other),
        })?;
        match answer {
            PoolingAnswer::Ok { usage, .. } => {
                self.merge_usage(usage);
                self.first_output = Some(at);
                self.last_progress = Some(at);
                self.done = Some(at);
                Ok(())
            }
            PoolingAnswer::Error { kind, message } => {
                Err(StreamFault { kind: ErrorKind::ServerErrorEvent, server_error_type: kind, message })
            }
        }
    }

    /// The last event of a stream without `[DONE]`: its finish reason and usage, then the end.
    fn end(&mut self, finish_reason: Option<&str>, usage: Option<Usage>, at: Duration) -> Stop {
        // The Responses API ends a turn of function calls `completed`: in chat's words, a
        // `tool_calls` end.
        let finish_reason = match finish_reason {
            Some("stop") if self.tool_calls.is_some() => Some("tool_calls"),
            other => other,
        };
        if let Some(reason) = finish_reason {
            self.finish_reason = Some(prefix_at_char(reason, FINISH_REASON_BYTES).to_owned());
        }
        if let Some(u) = usage {
            self.merge_usage(u);
        }
        self.done = Some(at);
        self.last_progress = Some(at);
        Stop::Done
    }

    fn on_event(&mut self, data: &[u8], at: Duration) -> Result<(), Stop> {
        match parse_event_of(self.api, data, &mut self.shape).map_err(StreamFault::from)? {
            StreamEvent::Done => {
                self.done = Some(at);
                self.last_progress = Some(at);
                return Err(Stop::Done);
            }
            StreamEvent::Error { kind, message } => {
                return Err(Stop::Fault(StreamFault {
                    kind: ErrorKind::ServerErrorEvent,
                    server_error_type: kind,
                    message,
                }));
            }
            StreamEvent::End { finish_reason, usage } => return Err(self.end(finish_reason.as_deref(), usage, at)),
            StreamEvent::Failed { incomplete, kind, message } => {
                let kind_of = if incomplete { ErrorKind::ResponseIncomplete } else { ErrorKind::ResponseFailed };
                return Err(Stop::Fault(StreamFault { kind: kind_of, server_error_type: kind, message }));
            }
            StreamEvent::Chunk { delta, finish_reason, usage } => {
                // Role-only and empty deltas are not output: they never start a clock.
                let mut progress = false;
                let mut output_chunk = false;
                if let Some(text) = delta.reasoning.as_deref().filter(|r| !r.is_empty()) {
                    self.reasoning_chunks = self.reasoning_chunks.saturating_add(1);
                    self.first_output.get_or_insert(at);
                    if let Some((_, reasoning)) = &mut self.answer {
                        reasoning.push_str(text);
                    }
                    progress = true;
                    output_chunk = true;
                }
                if let Some(text) = delta.content.as_deref().filter(|c| !c.is_empty()) {
                    self.content_chunks = self.content_chunks.saturating_add(1);
                    self.first_output.get_or_insert(at);
                    self.first_content.get_or_insert(at);
                    self.capture_text(text);
                    if let Some(scan) = &mut self.canary {
                        scan.feed(text);
                    }
                    if let Some((content, _)) = &mut self.answer {
                        content.push_str(text);
                    }
                    progress = true;
                    output_chunk = true;
                }
                if !delta.tools.is_empty() && self.tool_pieces(&delta.tools, at) {
                    progress = true;
                    output_chunk = true;
                }
                if let Some(reason) = finish_reason {
                    let reason = prefix_at_char(&reason, FINISH_REASON_BYTES);
                    if self.finish_reason.as_deref() != Some(reason) {
                        self.finish_reason = Some(reason.to_owned());
                    }
                    progress = true;
                }
                if output_chunk {
                    self.chunk_clock.chunk(at, usage.as_ref().and_then(|u| u.completion_tokens));
                }
                if let Some(u) = usage {
                    self.merge_usage(u);
                    progress = true;
                }
                if progress {
                    self.last_progress = Some(at);
                }
            }
        }
        Ok(())
    }

    fn capture_text(&mut self, text: &str) {
        let room = self.cap().saturating_sub(self.visible_chars);
        let chars = text.chars().count();
        if let Some(capture) = &mut self.capture {
            if chars <= room {
                capture.push_str(text);
            } else if room > 0 {
                let cut = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
                capture.push_str(&text[..cut]);
            }
        }
        self.visible_chars = self.visible_chars.saturating_add(chars);
    }

    pub fn visible_truncated(&self) -> bool {
        self.visible_chars > CAPTURE_CHARS
    }

    /// The canary verdict over the whole visible response, when canaries are on.
    pub fn canary_check(&mut self) -> Option<crate::request::record::CanaryCheck> {
        let complete = self.done.is_some();
        self.canary.take().map(|scan| scan.finish(complete))
    }

    pub fn buffered(&self) -> usize {
        self.decoder.buffered() + self.body.len()
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix_at_char(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let cut = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..cut]
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod api_tests;
mod usage;
