//! One request, sent, streamed and timed.
//!
//! The clock starts immediately before the request is handed to the HTTP client and every read
//! of the body is stamped once, as soon as its bytes are available, before any parsing. Nothing
//! on this path blocks the runtime or takes a lock shared with other workers.

mod sanitize;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

pub use sanitize::sanitize_message;
pub use stream::{CAPTURE_CHARS, StreamFault, StreamState};

use crate::openai::parse_error_body;
use crate::record::{Completed, Dispatch, ErrorKind, Failed, Outcome};
use crate::scenario::{ApiKey, ClientSettings};
use crate::workload::{PreparedRequest, check_canary, check_controlled_output};

/// Error bodies are read up to this size; the rest is not needed to classify them.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// After `[DONE]`, how long to wait for the body to end so the connection can be reused.
const DRAIN_AFTER_DONE: Duration = Duration::from_secs(1);

/// The HTTP client for one run: a connection pool sized to the concurrency, no proxy (a proxy
/// would be measured along with the server), keep-alive, Nagle off.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: reqwest::Url,
    auth: Option<HeaderValue>,
    api_key: Option<ApiKey>,
    timeouts: ClientSettings,
    /// Requests in flight across all workers, for the snapshots.
    in_flight: Arc<AtomicU64>,
}

impl Client {
    pub fn new(
        endpoint_url: &str,
        api_key: Option<ApiKey>,
        timeouts: ClientSettings,
        pool_size: usize,
    ) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(endpoint_url)?;
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(timeouts.connect)
            .pool_max_idle_per_host(pool_size)
            .pool_idle_timeout(Duration::from_secs(90));
        if timeouts.http2 {
            // Cleartext HTTP/2 without an upgrade round trip: every stream shares one connection.
            builder = builder.http2_prior_knowledge();
        }
        let http = builder.build()?;
        let auth = match &api_key {
            Some(key) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", key.expose()))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Client { http, url, auth, api_key, timeouts, in_flight: Arc::default() })
    }

    /// Send one request and stream it to the end. Never panics on what the server sends;
    /// `cancel` ends an in-flight request as `Interrupted`, keeping what was observed.
    /// Requests in flight right now.
    pub fn in_flight(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.in_flight)
    }

    pub async fn execute(&self, req: &PreparedRequest, dispatch: Dispatch, cancel: &CancellationToken) -> Outcome {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let outcome = self.execute_with_retries(req, dispatch, cancel).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        outcome
    }

    async fn execute_with_retries(
        &self,
        req: &PreparedRequest,
        dispatch: Dispatch,
        cancel: &CancellationToken,
    ) -> Outcome {
        let policy = &self.timeouts.retry;
        let mut retried: Vec<ErrorKind> = Vec::new();
        loop {
            let outcome = self.attempt(req, dispatch, cancel).await;
            let retry = match &outcome {
                // Only failures before any output: a retry after tokens streamed would make the
                // server generate twice and the record describe neither attempt.
                Outcome::Failed(f) if (retried.len() as u32) < policy.max_retries && f.first_output.is_none() => {
                    policy.on.contains(&f.kind).then(|| {
                        f.retry_after.unwrap_or_else(|| policy.backoff * 2u32.saturating_pow(retried.len() as u32))
                    })
                }
                _ => None,
            };
            let Some(wait) = retry else { return with_retries(outcome, retried) };
            let Outcome::Failed(f) = &outcome else { return with_retries(outcome, retried) };
            retried.push(f.kind);
            tokio::select! {
                () = cancel.cancelled() => return with_retries(outcome, retried),
                () = tokio::time::sleep(wait.min(MAX_RETRY_WAIT)) => {}
            }
        }
    }

    /// One attempt: send, stream, time.
    async fn attempt(&self, req: &PreparedRequest, dispatch: Dispatch, cancel: &CancellationToken) -> Outcome {
        let level_start = dispatch.level_start;
        let mut a = Attempt::new(req, dispatch, self.api_key.as_ref().map(ApiKey::expose));
        // Registered once per request, then polled by every wait below.
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let response = loop {
            let mut builder =
                self.http.post(self.url.clone()).header(CONTENT_TYPE, "application/json").body(req.body.clone());
            if let Some(auth) = &self.auth {
                builder = builder.header(AUTHORIZATION, auth.clone());
            }
            if let Some(exchange) = &req.exchange {
                for (name, value) in &exchange.headers {
                    builder = builder.header(name.as_str(), value.as_str());
                }
            }
            // The clock starts here, as the request is handed to the pool.
            a.start = Instant::now();
            a.start_offset = a.start.saturating_duration_since(level_start);
            match wait(&mut cancelled, a.start + self.timeouts.first_byte, builder.send()).await {
                Wait::Cancelled => return a.interrupted(&StreamState::default()),
                Wait::TimedOut => {
                    return a.fail(
                        ErrorKind::FirstByteTimeout,
                        None,
                        None,
                        "no response headers within client.first_byte_timeout",
                    );
                }
                Wait::Ready(Ok(response)) => break response,
                // A pooled connection the server already closed (llama.cpp closes after every
                // stream while saying keep-alive): reconnect once, untimed, and say so.
                Wait::Ready(Err(e)) if a.stale_connection_retries == 0 && is_stale_connection(&e) => {
                    a.stale_connection_retries += 1;
                }
                Wait::Ready(Err(e)) => return a.fail(send_error_kind(&e), None, None, &error_chain(&e)),
            }
        };
        if let Some(exchange) = &req.exchange {
            exchange.set_headers(read_headers(response.headers(), &exchange.read_headers));
        }
        if !response.status().is_success() {
            return self.http_failure(&a, response).await;
        }
        let mut state = StreamState::new(req.canary.is_some() || req.response_words.is_some());
        if req.exchange.as_ref().is_some_and(|e| e.keep_answer) {
            state.keep_answer();
        }
        let mut body = response.bytes_stream();
        // One timer per request, armed at the earliest deadline that can apply and otherwise left
        // alone: a read only moves `due`, and when the timer fires early it is re-armed from
        // there. Reads therefore never touch the timer wheel.
        let mut due = a.start + self.timeouts.first_byte;
        let mut armed = due;
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        loop {
            let next = tokio::select! {
                // Data first: when a read is ready, neither the cancellation nor the timer is polled.
                biased;
                item = body.next() => Some(item),
                () = cancelled.as_mut() => return a.interrupted(&state),
                () = &mut timer => None,
            };
            // One timestamp per read, taken before any parsing.
            let now = Instant::now();
            let at = now.saturating_duration_since(a.start);
            let Some(item) = next else {
                if now < due {
                    armed = due;
                    timer.as_mut().reset(armed);
                    continue;
                }
                if state.done.is_some() {
                    break; // body never ended after [DONE]: fine
                }
                let (kind, what) = if state.first_output.is_none() && state.buffered() == 0 {
                    (ErrorKind::FirstByteTimeout, "no streamed output within client.first_byte_timeout")
                } else {
                    (ErrorKind::IdleTimeout, "the stream went silent for longer than client.idle_timeout")
                };
                return a.fail_with_state(kind, &state, at, None, what);
            };
            match item {
                None => {
                    if let Err(fault) = state.finish(at) {
                        return a.fail_with_state(fault.kind, &state, at, fault.server_error_type, &fault.message);
                    }
                    break;
                }
                // A close after [DONE] is not a failure: the response was complete.
                Some(Err(_)) if state.done.is_some() => break,
                Some(Err(e)) => {
                    return a.fail_with_state(ErrorKind::StreamBroken, &state, at, None, &error_chain(&e));
                }
                Some(Ok(bytes)) => {
                    if let Err(fault) = state.observe(&bytes, at) {
                        return a.fail_with_state(fault.kind, &state, at, fault.server_error_type, &fault.message);
                    }
                    due = now + if state.done.is_some() { DRAIN_AFTER_DONE } else { self.timeouts.idle };
                    // Only a deadline earlier than the armed one needs the timer moved now.
                    if due < armed {
                        armed = due;
                        timer.as_mut().reset(armed);
                    }
                }
            }
        }
        a.complete(req, state)
    }

    /// Open `n` connections before a level's clock starts, so no measured request pays for a TCP
    /// handshake its neighbours did not: `n` concurrent `GET` requests (to the server's `/models`),
    /// whose connections stay in the pool. Failures are ignored; a request that finds no idle
    /// connection simply opens one, as it would have anyway.
    pub async fn warm_connections(&self, url: &str, n: usize) {
        let get = |_| {
            let mut builder = self.http.get(url);
            if let Some(auth) = &self.auth {
                builder = builder.header(AUTHORIZATION, auth.clone());
            }
            async move {
                if let Ok(Ok(response)) =
                    tokio::time::timeout(self.timeouts.connect + Duration::from_secs(5), builder.send()).await
                {
                    // Reading the body to its end returns the connection to the pool.
                    let _ = tokio::time::timeout(Duration::from_secs(5), response.bytes()).await;
                }
            }
        };
        futures::future::join_all((0..n).map(get)).await;
    }

    /// Send a non-streamed calibration probe; the server's `usage.prompt_tokens`, or why not.
    pub async fn probe(&self, body: bytes::Bytes) -> Result<u64, String> {
        let secret = self.api_key.as_ref().map(ApiKey::expose);
        let mut retried = false;
        let response = loop {
            let mut builder =
                self.http.post(self.url.clone()).header(CONTENT_TYPE, "application/json").body(body.clone());
            if let Some(auth) = &self.auth {
                builder = builder.header(AUTHORIZATION, auth.clone());
            }
            match tokio::time::timeout(self.timeouts.first_byte, builder.send()).await {
                Err(_) => return Err("no answer within client.first_byte_timeout".to_string()),
                Ok(Ok(r)) => break r,
                Ok(Err(e)) if !retried && is_stale_connection(&e) => retried = true,
                Ok(Err(e)) => return Err(sanitize_message(&error_chain(&e), secret)),
            }
        };
        let status = response.status();
        let bytes = match tokio::time::timeout(self.timeouts.idle, response.bytes()).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(sanitize_message(&error_chain(&e), secret)),
            Err(_) => return Err("the answer stalled beyond client.idle_timeout".to_string()),
        };
        if !status.is_success() {
            let (_, message) = parse_error_body(&bytes);
            return Err(sanitize_message(
                &format!("HTTP {}: {}", status.as_u16(), message.unwrap_or_default()),
                secret,
            ));
        }
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("usage")?.get("prompt_tokens")?.as_u64())
            .ok_or_else(|| "the answer carried no usage.prompt_tokens".to_string())
    }

    async fn http_failure(&self, a: &Attempt<'_>, response: reqwest::Response) -> Outcome {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        let deadline = Instant::now() + self.timeouts.idle;
        while let Ok(Some(Ok(bytes))) = timeout_at(deadline, stream.next()).await {
            body.extend_from_slice(&bytes[..bytes.len().min(ERROR_BODY_LIMIT - body.len())]);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
        let (server_type, message) = parse_error_body(&body);
        let message = message.unwrap_or_else(|| format!("HTTP {status}"));
        let kind = if status == 400 && is_context_overflow(server_type.as_deref(), &message) {
            ErrorKind::ContextLengthExceeded
        } else {
            ErrorKind::Http(status)
        };
        let mut outcome = a.fail(kind, Some(status), server_type, &message);
        if let Outcome::Failed(f) = &mut outcome {
            f.retry_after = retry_after;
        }
        outcome
    }
}

/// The named response headers that are present, as text.
fn read_headers(headers: &reqwest::header::HeaderMap, names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|name| {
            let value = headers.get(name.as_str())?.to_str().ok()?;
            Some((name.clone(), value.to_string()))
        })
        .collect()
}

/// Longest wait before a retry, whatever `Retry-After` says.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// Record the retries an outcome took (its timings are the final attempt's).
fn with_retries(mut outcome: Outcome, retried: Vec<ErrorKind>) -> Outcome {
    match &mut outcome {
        Outcome::Completed(c) => {
            c.retries = retried.len() as u32;
            c.retried_errors = retried;
        }
        Outcome::Failed(f) => {
            f.retries = retried.len() as u32;
            f.retried_errors = retried;
        }
        Outcome::Dropped(_) => {}
    }
    outcome
}

enum Wait<T> {
    Ready(T),
    TimedOut,
    Cancelled,
}

/// `fut` until `deadline`, unless the run is stopped first.
async fn wait<F: std::future::Future>(
    cancelled: &mut std::pin::Pin<&mut WaitForCancellationFuture<'_>>,
    deadline: Instant,
    fut: F,
) -> Wait<F::Output> {
    tokio::select! {
        biased;
        () = cancelled.as_mut() => Wait::Cancelled,
        r = timeout_at(deadline, fut) => match r {
            Ok(v) => Wait::Ready(v),
            Err(_) => Wait::TimedOut,
        },
    }
}

/// Per-request bookkeeping shared by the success and failure paths.
struct Attempt<'a> {
    index: u64,
    planned_context_tokens: u32,
    intended_offset: Option<Duration>,
    queue_wait: Option<Duration>,
    start: Instant,
    start_offset: Duration,
    stale_connection_retries: u32,
    secret: Option<&'a str>,
    replay: Option<&'a crate::record::ReplayFacts>,
}

impl<'a> Attempt<'a> {
    fn new(req: &'a PreparedRequest, dispatch: Dispatch, secret: Option<&'a str>) -> Self {
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
            secret,
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
            server_error_type,
            message: sanitize_message(message, self.secret),
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

    fn fail(
        &self,
        kind: ErrorKind,
        http_status: Option<u16>,
        server_error_type: Option<String>,
        message: &str,
    ) -> Outcome {
        Outcome::Failed(self.failure(kind, http_status, server_error_type, message))
    }

    /// A failure after a 200 response started streaming, with the partial timings.
    fn fail_with_state(
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

    fn interrupted(&self, state: &StreamState) -> Outcome {
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

    fn complete(&self, req: &PreparedRequest, mut state: StreamState) -> Outcome {
        let Some(end) = state.done else {
            let at = self.start.elapsed();
            return self.fail_with_state(
                ErrorKind::MissingDone,
                &state,
                at,
                None,
                "the stream ended without data: [DONE]",
            );
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
        let canary = match (&req.canary, &state.capture) {
            (Some(marker), Some(capture)) => Some(check_canary(marker, capture, !truncated)),
            _ => None,
        };
        let controlled_output = match (req.response_words, &state.capture) {
            (Some(words), Some(capture)) => {
                Some(check_controlled_output(words, capture, !truncated, state.finish_reason.as_deref()))
            }
            _ => None,
        };
        if let (Some(exchange), Some((content, reasoning))) = (&req.exchange, state.answer.take()) {
            exchange.set_answer(content, reasoning);
        }
        let (output_tokens, output_token_source) = state.output_tokens();
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
            prompt_tokens: state.usage.prompt_tokens,
            cached_tokens: state.usage.cached_tokens,
            output_tokens,
            output_token_source,
            finish_reason: state.finish_reason,
            visible_content_truncated: truncated,
            canary,
            controlled_output,
            retries: 0,
            retried_errors: Vec::new(),
            stale_connection_retries: self.stale_connection_retries,
            replay: self.replay.map(|r| Box::new(r.clone())),
        })
    }
}

/// A send that failed on an already-open connection that was closed under us.
fn is_stale_connection(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() || e.is_builder() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            if matches!(io.kind(), K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted | K::UnexpectedEof) {
                return true;
            }
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        source = err.source();
    }
    false
}

fn send_error_kind(e: &reqwest::Error) -> ErrorKind {
    if e.is_connect() {
        if e.is_timeout() { ErrorKind::ConnectTimeout } else { ErrorKind::ConnectFailed }
    } else if e.is_timeout() {
        ErrorKind::FirstByteTimeout
    } else if e.is_request() {
        ErrorKind::StreamBroken
    } else {
        ErrorKind::RequestFailed
    }
}

/// The error and its causes on one line (reqwest's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A 400 that says the prompt does not fit (OpenAI, vLLM, SGLang and llama.cpp wordings).
fn is_context_overflow(server_type: Option<&str>, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    matches!(server_type, Some("context_length_exceeded" | "exceed_context_size_error"))
        || m.contains("maximum context length")
        || m.contains("context length")
        || m.contains("context size")
        || m.contains("context window")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_overflow_wordings() {
        assert!(is_context_overflow(Some("exceed_context_size_error"), "request exceeds the available context size"));
        assert!(is_context_overflow(Some("BadRequestError"), "This model's maximum context length is 4096 tokens."));
        assert!(!is_context_overflow(Some("invalid_request_error"), "temperature must be positive"));
    }
}
