//! Per-attempt bookkeeping shared by the success and failure paths: the request's identity,
//! its clock, and how a stream's state becomes an `Outcome`. Every server-supplied string is
//! sanitized here, once, on its way into a record.

use std::time::Duration;

use tokio::time::Instant;

use super::StreamState;
use crate::contract::ErrorKind;
use crate::redact::Secrets;
use crate::request::record::outcome::Corrections;
use crate::request::record::{Completed, Dispatch, Failed, Outcome, ReplayFacts};
use crate::request::workload::{PreparedRequest, check_controlled_output, structured};

pub(super) struct Attempt<'a> {
    index: u64,
    planned_context_tokens: u32,
    intended_offset: Option<Duration>,
    queue_wait: Option<Duration>,
    pub start: Instant,
    pub start_offset: Duration,
    pub stale_connection_retries: u32,
    secrets: &'a Secrets,
    /// Trace or conversation facts the records carry.
    replay: Option<&'a ReplayFacts>,
}

impl<'a> Attempt<'a> {
    pub fn new(req: &'a PreparedRequest, dispatch: Dispatch, secrets: &'a Secrets) -> Self {
        let start = Instant::now();
        let level_start = dispatch.level_start;
        Attempt {
            index: req.index,
            planned_context_tokens: req.planned_context_tokens,
            intended_offset: dispatch.intended.map(|i| i.saturating_duration_since(level_start)),
            queue_wait: dispatch.intended.map(|_| dispatch.queue_wait),
            start,
            start_offset: start.saturating_duration_since(level_start),
            stale_connection_retries: 0,
            secrets,
            replay: req.replay.as_deref(),
        }
    }

    fn failure(
        &self,
        kind: ErrorKind,
        http_status: Option<u16>,
        server_error_type: Option<String>,
        message: &str,
    ) -> Failed {
        Failed {
            index: self.index,
            planned_context_tokens: self.planned_context_tokens,
            start_offset: self.start_offset,
            intended_offset: self.intended_offset,
            queue_wait: self.queue_wait,
            kind,
            http_status,
            server_error_type: server_error_type.map(|t| self.secrets.field(&t)),
            message: self.secrets.message(message),
            elapsed: self.start.elapsed(),
            first_output: None,
            first_content: None,
            content_chunks: 0,
            reasoning_chunks: 0,
            stale_connection_retries: self.stale_connection_retries,
            retries: 0,
            retried_errors: Vec::new(),
            retry_after: None,
            replay: self.replay.map(|r| Box::new(r.clone())),
        }
    }

    pub fn fail(
        &self,
        kind: ErrorKind,
        http_status: Option<u16>,
        server_error_type: Option<String>,
        message: &str,
    ) -> Outcome {
        Outcome::Failed(self.failure(kind, http_status, server_error_type, message))
    }

    /// A failure with the server's `Retry-After`, for the retry policy.
    pub fn fail_retry_after(
        &self,
        kind: ErrorKind,
        http_status: u16,
        server_error_type: Option<String>,
        message: &str,
        retry_after: Option<Duration>,
    ) -> Outcome {
        Outcome::Failed(Failed { retry_after, ..self.failure(kind, Some(http_status), server_error_type, message) })
    }

    /// A failure after a 200 response started streaming, with the partial timings.
    pub fn fail_with_state(
        &self,
        kind: ErrorKind,
        state: &StreamState,
        at: Duration,
        server_error_type: Option<String>,
        message: &str,
    ) -> Outcome {
        Outcome::Failed(Failed {
            elapsed: at,
            first_output: state.first_output,
            first_content: state.first_content,
            content_chunks: state.content_chunks,
            reasoning_chunks: state.reasoning_chunks,
            ..self.failure(kind, Some(200), server_error_type, message)
        })
    }

    pub fn interrupted(&self, state: &StreamState) -> Outcome {
        let at = self.start.elapsed();
        let mut f = self.fail_with_state(
            ErrorKind::Interrupted,
            state,
            at,
            None,
            "the run was stopped while this request was in flight",
        );
        if let Outcome::Failed(f) = &mut f {
            f.http_status = None;
        }
        f
    }

    /// The outcome of a response that ended. `budget` is the output budget the request was
    /// sent, when known.
    pub fn complete(&self, req: &PreparedRequest, mut state: StreamState, budget: Option<u64>) -> Outcome {
        let Some(end) = state.done else {
            let at = self.start.elapsed();
            return self.fail_with_state(ErrorKind::MissingDone, &state, at, None, state.missing_end_message());
        };
        let Some(first_output) = state.first_output else {
            return self.fail_with_state(
                ErrorKind::EmptyResponse,
                &state,
                end,
                None,
                "the response carried no reasoning or content text",
            );
        };
        let truncated = state.visible_truncated();
        let mut canary = state.canary_check();
        // The offending marker is server text: bounded and withheld if it holds a secret.
        if let Some(c) = canary.as_mut() {
            c.offending_marker = c.offending_marker.take().map(|m| self.secrets.field(&m));
        }
        let controlled_output = match (req.response_words, &state.capture) {
            (Some(words), Some(capture)) => {
                Some(check_controlled_output(words, capture, !truncated, state.finish_reason.as_deref()))
            }
            _ => None,
        };
        if let (Some(exchange), Some((content, reasoning))) = (&req.exchange, state.answer.take()) {
            exchange.set_answer(content, reasoning);
        }
        if let Some(exchange) = &req.exchange {
            exchange.set_calls(state.called_tools());
        }
        // Usage the request could not have produced describes no response: none of it is kept
        // (prompt and cached tokens unknown, output counted from the chunks) and the record is
        // excluded, so nothing implausible is ever summed.
        let usage_implausible = state.usage_verdict();
        let (output, usage) = match usage_implausible {
            Some(_) => (state.chunk_tokens(), crate::request::openai::Usage::default()),
            None => (state.output_tokens(), state.usage),
        };
        let tool_calls = state.tool_call_record(usage.completion_tokens).map(Box::new);
        let mut chunk_facts = std::mem::take(&mut state.chunk_clock).facts();
        if usage_implausible.is_some() {
            chunk_facts.per_chunk = None;
        }
        // An answer that reached its budget was cut by it, whatever the server calls its end
        // (llama.cpp's Responses API says `completed`, never `incomplete`): the record says
        // `length`, as every API's truncation does, and keeps the server's word beside it.
        let mut finish_reason = state.finish_reason.as_deref().map(|r| self.secrets.field(r));
        let mut reported_finish_reason = None;
        if finish_reason.as_deref() == Some("stop") && budget.is_some_and(|b| output.tokens >= b) {
            reported_finish_reason = finish_reason.replace("length".to_string());
        }
        // Structured output: the answer against its schema, now that it has ended.
        let schema = req.structured.as_ref().map(|expect| {
            Box::new(structured::check(
                expect,
                state.capture.as_deref(),
                state.capture_whole(),
                finish_reason.as_deref(),
            ))
        });
        let corrections = (usage_implausible.is_some() || reported_finish_reason.is_some())
            .then(|| Box::new(Corrections { usage_implausible, reported_finish_reason }));
        Outcome::Completed(Completed {
            index: self.index,
            planned_context_tokens: self.planned_context_tokens,
            prompt_target_tokens: req.prompt_target_tokens,
            start_offset: self.start_offset,
            intended_offset: self.intended_offset,
            queue_wait: self.queue_wait,
            first_output,
            first_content: state.first_content,
            end,
            content_chunks: state.content_chunks,
            reasoning_chunks: state.reasoning_chunks,
            prompt_tokens: usage.prompt_tokens,
            cached_tokens: usage.cached_tokens,
            output_tokens: output.tokens,
            output_token_source: output.source,
            usage_completion_tokens: output.usage_set_aside,
            reasoning_tokens: usage.reasoning_tokens,
            finish_reason,
            visible_content_truncated: truncated,
            canary,
            controlled_output,
            retries: 0,
            retried_errors: Vec::new(),
            stale_connection_retries: self.stale_connection_retries,
            replay: self.replay.map(|r| Box::new(r.clone())),
            chunks: Box::new(chunk_facts),
            corrections,
            schema,
            tool_calls,
        })
    }
}
