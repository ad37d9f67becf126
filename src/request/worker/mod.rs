//! One request, sent, streamed and timed.
//!
//! The clock starts immediately before the request is handed to the HTTP client and every read
//! of the body is stamped once, as soon as its bytes are available, before any parsing. Nothing
//! on this path blocks the runtime or takes a lock shared with other workers.
//!
//! # Deadlines
//!
//! Each request runs against one deadline at a time, the earliest that applies, and a failure
//! is labelled by the clock that actually ran out:
//!
//! - `client.first_byte_timeout` (`first_byte_timeout`): from the start until the first output
//!   (a non-empty reasoning or content delta). Response headers, SSE comments, role-only chunks
//!   and chunks without choices do not stop it.
//! - `client.idle_timeout` (`idle_timeout`): after the first output, the longest time without
//!   progress: an event with text, a finish reason, usage, or `[DONE]`. Bytes that carry no
//!   progress (keep-alive comments, empty chunks) do not reset it.
//! - `client.request_timeout` (`request_timeout`): the whole request, from the start to `[DONE]`.
//! - After `[DONE]` the request is complete; the body gets `DRAIN_AFTER_DONE` from `[DONE]` to end
//!   so the connection can be reused, and is then dropped whatever still arrives.
//!
//! Deadlines are checked after every read as well as by the timer, so a server that floods
//! bytes without progress cannot keep the timer from ever being polled.

mod attempt;
mod chunks;
pub mod credentials;
mod errors;
mod headers;
mod limits;
mod next;
mod probe;
pub mod replicas;
mod stream;
mod tls;
mod tool_calls;
mod transport;
mod warm;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::Full;
use next::{Next, Waits};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

pub use errors::{ClientError, MAX_RETRY_WAIT, error_chain};
pub use headers::{header_map, run_headers, sends_bearer};
pub use limits::RequestLimits;
pub use stream::{CAPTURE_CHARS, OutputTokens, StreamFault, StreamState};
pub use tls::{client_certificate_refusal, client_config as tls_client_config, tls_reason};
pub use transport::READ_BUFFER_MAX;

use crate::contract::ErrorKind;
use crate::plan::scenario::{Api, ApiKey, ClientSettings};
use crate::redact::Secrets;
use crate::request::openai::parse_error_body;
use crate::request::record::{Dispatch, Outcome};
use crate::request::workload::PreparedRequest;
use attempt::Attempt;
use credentials::Credentials;
use errors::{
    backoff_wait, compressed, is_context_overflow, is_stale_connection, redirect_message, retry_after, send_error_kind,
};
use transport::Http;

/// Error bodies are read up to this size; the rest is not needed to classify them.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// After `[DONE]`, how long the body may take to end (so the connection can be reused).
pub const DRAIN_AFTER_DONE: Duration = Duration::from_secs(1);
/// What a deadline too far to represent becomes.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The HTTP client for one run: a connection pool sized to the concurrency, no proxy (a proxy
/// would be measured along with the server), no redirects (a redirect would measure another
/// server under this one's name), keep-alive, Nagle off (see `transport`).
#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
    /// A pool that keeps no connection, for the one send repeated after a pooled connection
    /// turned out closed: the pool may hold more connections the server closed the same way.
    /// Built on first use.
    fresh: Arc<OnceLock<Http>>,
    /// Each replica's endpoint (one for a plain run) and the chooser (see `replicas`).
    replicas: Arc<replicas::Replicas>,
    /// The key (fixed, or a command's current token) and the headers it goes in.
    auth: Credentials,
    /// Headers of the API beyond the key (`anthropic-version`); the key's own headers
    /// (`x-api-key` too for the Messages API) are `auth`'s, marked sensitive.
    api_headers: Vec<(HeaderName, HeaderValue)>,
    /// The run's own headers (`target.headers`, the azure key), values marked sensitive.
    run_headers: Vec<(HeaderName, HeaderValue)>,
    /// Which API's answers these are.
    api: Api,
    secrets: Secrets,
    timeouts: ClientSettings,
    /// Requests in flight across all workers, for the snapshots.
    in_flight: Arc<AtomicU64>,
    /// What each request may produce, to judge its answer by (see `limits`).
    limits: RequestLimits,
    /// `[target.tls]`'s configuration, built once (see `tls`); `None`: the WebPKI roots.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `[workload.tools]`: the tool set each call is judged against.
    tools: Option<Arc<crate::plan::scenario::tools_rules::ToolSet>>,
}

/// reqwest with the settings of the measured requests' client (see `transport`), for the requests
/// around a run (the server check before it, server metrics); `pool_idle` connections per host are
/// kept for reuse (0: none).
pub fn http_client(settings: &ClientSettings, pool_idle: usize) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .connect_timeout(settings.connect)
        .pool_max_idle_per_host(pool_idle)
        .pool_idle_timeout(Duration::from_secs(90));
    if settings.http2 {
        // Cleartext HTTP/2 without an upgrade round trip: every stream shares one connection.
        builder = builder.http2_prior_knowledge();
    }
    if let Some(tls) = &settings.tls {
        // reqwest takes the configuration as it is: ALPN offered as its own would be.
        let mut config = tls::client_config(tls)?;
        config.alpn_protocols =
            if settings.http2 { vec![b"h2".to_vec()] } else { vec![b"h2".to_vec(), b"http/1.1".to_vec()] };
        builder = builder.use_preconfigured_tls(config);
    }
    if let Some(path) = &settings.unix_socket {
        builder = builder.unix_socket(path.as_path());
    }
    builder.build().map_err(|e| e.without_url().to_string())
}

/// The URI a request to `url` is sent to. Parsed as a URL first: the URI parser alone accepts
/// what no server could be asked for. Credentials in the URL are not sent (HTTP/2 would carry them
/// in `:authority`; the key goes in its header), and the pool's key is the same with or without
/// them.
fn request_uri(url: &str) -> Result<Uri, ClientError> {
    let mut url = reqwest::Url::parse(url).map_err(|e| ClientError::Url(e.to_string()))?;
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.as_str().parse().map_err(|e: http::uri::InvalidUri| ClientError::Url(e.to_string()))
}

/// `start + d`, or far in the future when that cannot be represented.
fn deadline(start: Instant, d: Duration) -> Instant {
    start.checked_add(d).unwrap_or_else(|| start + FAR_FUTURE)
}

/// The clock a deadline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    FirstOutput,
    Idle,
    Request,
    /// After `[DONE]`: not a failure.
    Drain,
}

impl Clock {
    /// The failure when this clock runs out; `None` for the drain after `[DONE]`.
    fn failure(self) -> Option<(ErrorKind, &'static str)> {
        match self {
            Clock::FirstOutput => Some((
                ErrorKind::FirstByteTimeout,
                "no output (reasoning or content text) within client.first_byte_timeout",
            )),
            Clock::Idle => {
                Some((ErrorKind::IdleTimeout, "no progress for longer than client.idle_timeout after the first output"))
            }
            Clock::Request => Some((ErrorKind::RequestTimeout, "the request took longer than client.request_timeout")),
            Clock::Drain => None,
        }
    }
}

impl Client {
    pub fn new(
        endpoint_url: &str,
        api_key: Option<ApiKey>,
        timeouts: ClientSettings,
        pool_size: usize,
    ) -> Result<Self, ClientError> {
        let uri = request_uri(endpoint_url)?;
        let tls = match &timeouts.tls {
            Some(settings) => Some(Arc::new(tls::client_config(settings).map_err(ClientError::Tls)?)),
            None => None,
        };
        let http = Http::new(&timeouts, pool_size, uri.scheme_str() == Some("https"), tls.as_deref());
        let auth = match &api_key {
            Some(key) => Credentials::fixed(key.expose()).ok_or(ClientError::Header { key: "target.api_key_env" })?,
            None => Credentials::default(),
        };
        let secrets = Secrets::new(api_key.as_ref().map(ApiKey::expose), endpoint_url);
        Ok(Client {
            http,
            fresh: Arc::default(),
            replicas: Arc::new(replicas::Replicas::new(vec![uri], crate::plan::scenario::Balance::default())),
            auth,
            api_headers: Vec::new(),
            run_headers: Vec::new(),
            api: Api::Chat,
            secrets,
            timeouts,
            in_flight: Arc::default(),
            limits: RequestLimits::default(),
            tls,
            tools: None,
        })
    }

    /// Judge answers by what each request may produce: its output budget, its body's size, the
    /// run's request count (see `RequestLimits`).
    pub fn with_limits(mut self, limits: RequestLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Judge each response's tool calls against `tools` (runs with `[workload.tools]`).
    pub fn with_tools(mut self, tools: Option<Arc<crate::plan::scenario::tools_rules::ToolSet>>) -> Self {
        self.tools = tools;
        self
    }

    /// Speak `api`: read its answers, and for the Messages API send the key as `x-api-key`
    /// too (Anthropic-style servers read that header, OpenAI-compatible ones the bearer token)
    /// and the `anthropic-version` header when the scenario sets one.
    pub fn for_api(mut self, api: Api, anthropic_version: Option<&str>) -> Result<Self, ClientError> {
        self.api = api;
        self.api_headers.clear();
        if api == Api::Messages {
            self.auth = self.auth.also_as(HeaderName::from_static("x-api-key"));
            if let Some(version) = anthropic_version {
                let v = HeaderValue::from_str(version)
                    .map_err(|_| ClientError::Header { key: "target.anthropic_version" })?;
                self.api_headers.push((HeaderName::from_static("anthropic-version"), v));
            }
        }
        Ok(self)
    }

    /// Send these headers with every request (see `headers::run_headers`).
    pub fn with_headers(mut self, headers: Vec<(HeaderName, HeaderValue)>) -> Self {
        self.run_headers = headers;
        self
    }

    /// Spread requests over several replicas' endpoints (`target.base_urls`, the first being
    /// this client's own) by `balance`; the pool serves them all (it keeps connections per host).
    pub fn with_replicas(
        mut self,
        endpoint_urls: &[String],
        balance: crate::plan::scenario::Balance,
    ) -> Result<Self, ClientError> {
        let uris = endpoint_urls.iter().map(|u| request_uri(u)).collect::<Result<Vec<_>, _>>()?;
        if !uris.is_empty() {
            for url in endpoint_urls {
                self.secrets = self.secrets.and_url(url);
            }
            self.replicas = Arc::new(replicas::Replicas::new(uris, balance));
        }
        Ok(self)
    }

    /// The run's other secrets (the metrics URL's credentials, say) withheld from everything
    /// this client records too.
    pub fn with_secrets(mut self, secrets: &Secrets) -> Self {
        self.secrets = self.secrets.and(secrets);
        self
    }

    /// Send the key `credentials` hold (a command's rotating token) instead of a fixed one.
    pub fn with_credentials(mut self, credentials: &Credentials) -> Self {
        self.auth = self.auth.with_source(credentials);
        self
    }

    /// The key the requests carry, and how often its command ran.
    pub fn credentials(&self) -> &Credentials {
        &self.auth
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.in_flight)
    }

    /// The pool for a send repeated after a stale pooled connection: never a pooled one.
    fn fresh(&self) -> &Http {
        self.fresh.get_or_init(|| Http::new(&self.timeouts, 0, matches!(self.http, Http::Tls(_)), self.tls.as_deref()))
    }

    /// A request to the endpoint (or `uri`), with the run's credentials.
    fn request(&self, method: Method, uri: Uri, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        self.auth.apply(headers);
        for (name, value) in self.api_headers.iter().chain(&self.run_headers) {
            headers.append(name.clone(), value.clone());
        }
        request
    }

    /// A POST of `body` to the (first replica's) endpoint.
    fn post(&self, body: Bytes) -> Request<Full<Bytes>> {
        self.post_to(0, body)
    }

    /// A POST of `body` to replica `replica`'s endpoint.
    fn post_to(&self, replica: usize, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = self.request(Method::POST, self.replicas.uri(replica).clone(), body);
        request.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        request
    }

    /// Send one request and stream it to the end. Never panics on what the server sends;
    /// `cancel` ends an in-flight request as `Interrupted`, keeping what was observed.
    pub async fn execute(&self, req: &PreparedRequest, dispatch: Dispatch, cancel: &CancellationToken) -> Outcome {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let replica = self.replicas.pick(req.replay.as_ref().and_then(|r| r.session.as_deref()));
        self.replicas.started(replica);
        let mut outcome = self.execute_with_retries(req, replica, dispatch, cancel).await;
        self.replicas.ended(replica);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.replicas.len() > 1 {
            replicas::tag(&mut outcome, replica);
        }
        outcome
    }

    async fn execute_with_retries(
        &self,
        req: &PreparedRequest,
        replica: usize,
        dispatch: Dispatch,
        cancel: &CancellationToken,
    ) -> Outcome {
        let policy = &self.timeouts.retry;
        let mut retried: Vec<ErrorKind> = Vec::new();
        let mut reauthorised = false;
        loop {
            let token = self.auth.generation();
            let outcome = self.attempt(req, replica, dispatch, cancel).await;
            // A 401 before any output: once, a fresh token from the key command, and again.
            if !reauthorised && self.auth.after_401(&outcome, token).await {
                reauthorised = true;
                continue;
            }
            let retry = match &outcome {
                // Only failures before any output: a retry after tokens streamed would make the
                // server generate twice and the record describe neither attempt.
                Outcome::Failed(f) if (retried.len() as u32) < policy.max_retries && f.first_output.is_none() => policy
                    .on
                    .contains(&f.kind)
                    .then(|| f.retry_after.unwrap_or_else(|| backoff_wait(policy.backoff, retried.len() as u32))),
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

    /// The deadline that applies now, and its clock.
    fn next_deadline(&self, start: Instant, state: &StreamState) -> (Instant, Clock) {
        if let Some(done) = state.done {
            return (deadline(start, done.saturating_add(DRAIN_AFTER_DONE)), Clock::Drain);
        }
        match state.last_progress.filter(|_| state.first_output.is_some()) {
            None => self.earliest(start, deadline(start, self.timeouts.first_byte), Clock::FirstOutput),
            Some(progress) => {
                self.earliest(start, deadline(start, progress.saturating_add(self.timeouts.idle)), Clock::Idle)
            }
        }
    }

    /// `(due, clock)`, or the whole request's deadline when that comes first.
    fn earliest(&self, start: Instant, due: Instant, clock: Clock) -> (Instant, Clock) {
        let request = deadline(start, self.timeouts.request);
        if request < due { (request, Clock::Request) } else { (due, clock) }
    }

    /// One attempt: send, stream, time.
    async fn attempt(
        &self,
        req: &PreparedRequest,
        replica: usize,
        dispatch: Dispatch,
        cancel: &CancellationToken,
    ) -> Outcome {
        let level_start = dispatch.level_start;
        let mut a = Attempt::new(req, dispatch, &self.secrets);
        // Registered once per request, then polled by every wait below.
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let response = loop {
            let http = if a.stale_connection_retries == 0 { &self.http } else { self.fresh() };
            let mut request = self.post_to(replica, req.body.clone());
            if let Some(exchange) = &req.exchange {
                if let Err(what) = add_headers(request.headers_mut(), &exchange.headers) {
                    return a.fail(ErrorKind::RequestFailed, None, None, &what);
                }
            }
            // The clock starts here, as the request is handed to the pool.
            a.start = Instant::now();
            a.start_offset = a.start.saturating_duration_since(level_start);
            let (due, clock) = self.earliest(a.start, deadline(a.start, self.timeouts.first_byte), Clock::FirstOutput);
            match wait(&mut cancelled, due, http.send(request)).await {
                Wait::Cancelled => return a.interrupted(&StreamState::default()),
                Wait::TimedOut => {
                    let (kind, what) = match clock {
                        Clock::Request => {
                            (ErrorKind::RequestTimeout, "no response headers within client.request_timeout")
                        }
                        _ => (ErrorKind::FirstByteTimeout, "no response headers within client.first_byte_timeout"),
                    };
                    return a.fail(kind, None, None, what);
                }
                Wait::Ready(Ok(response)) => break response,
                // A pooled connection the server already closed (llama.cpp closes after every
                // stream while saying keep-alive): send again, untimed, on a new connection,
                // since the pool may hold more connections closed the same way.
                Wait::Ready(Err(e)) if a.stale_connection_retries == 0 && is_stale_connection(&e) => {
                    a.stale_connection_retries += 1;
                }
                Wait::Ready(Err(e)) => return a.fail(send_error_kind(&e), None, None, &error_chain(&e)),
            }
        };
        if let Some(exchange) = &req.exchange {
            exchange.set_headers(read_headers(response.headers(), &exchange.read_headers));
        }
        let status = response.status();
        if status.is_redirection() {
            return a.fail(
                ErrorKind::Redirect,
                Some(status.as_u16()),
                None,
                &redirect_message(status.as_u16(), response.headers()),
            );
        }
        if !status.is_success() {
            return self.http_failure(&a, response).await;
        }
        if let Some(what) = compressed(response.headers()) {
            let kind = if self.api.streams_text() { ErrorKind::MalformedSse } else { ErrorKind::InvalidJson };
            return a.fail(kind, Some(status.as_u16()), None, &what);
        }
        let mut state = StreamState::new(req.response_words.is_some())
            .for_api(self.api)
            .with_bounds(self.limits.bounds(req))
            .with_tools(self.tools.clone());
        if let Some(marker) = &req.canary {
            state = state.with_canary(marker).with_canary_index_limit(self.limits.canary_index_limit);
        }
        if req.exchange.as_ref().is_some_and(|e| e.keep_answer) {
            state.keep_answer();
        }
        if req.structured.is_some() {
            state = state.with_capture_cap(crate::request::workload::structured::SCHEMA_CAPTURE_CHARS);
        }
        let mut body = transport::body(response);
        // One timer per request, armed at the earliest deadline that can apply and otherwise left
        // alone: a read only moves `due`, and when the timer fires early it is re-armed from
        // there. Reads therefore never touch the timer wheel unless a deadline comes closer.
        let (mut due, mut clock) = self.next_deadline(a.start, &state);
        let mut armed = due;
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        let waits = Waits::new();
        loop {
            // Data first: when a read is ready, neither the stop signal nor the timer is polled.
            let next = match waits.next(&mut body, cancelled.as_mut(), timer.as_mut()).await {
                Next::Read(item) => Some(item),
                Next::Stopped => return a.interrupted(&state),
                Next::Timer => None,
            };
            // One timestamp per read, taken before any parsing.
            let now = Instant::now();
            let at = now.saturating_duration_since(a.start);
            let Some(item) = next else {
                if now < due {
                    armed = due;
                    timer.as_mut().reset(armed);
                    waits.timer_moved();
                    continue;
                }
                // The body never ended after [DONE]: the response was complete.
                let Some((kind, what)) = clock.failure() else { break };
                return a.fail_with_state(kind, &state, at, None, clock_message(clock, &state, what));
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
                    (due, clock) = self.next_deadline(a.start, &state);
                    // Checked here too: a server that never pauses would keep the timer from
                    // ever being polled.
                    if now >= due {
                        let Some((kind, what)) = clock.failure() else { break };
                        return a.fail_with_state(kind, &state, at, None, clock_message(clock, &state, what));
                    }
                    // Only a deadline earlier than the armed one needs the timer moved now.
                    if due < armed {
                        armed = due;
                        timer.as_mut().reset(armed);
                        waits.timer_moved();
                    }
                }
            }
        }
        a.complete(req, state, self.limits.budget(req))
    }

    async fn http_failure(&self, a: &Attempt<'_>, response: transport::Response) -> Outcome {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let mut body = Vec::new();
        let mut stream = transport::body(response);
        let until = deadline(Instant::now(), self.timeouts.idle).min(deadline(a.start, self.timeouts.request));
        while let Ok(Some(Ok(bytes))) = timeout_at(until, stream.next()).await {
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
        a.fail_retry_after(kind, status, server_type, &message, retry_after)
    }
}

/// The failure message of a clock that ran out, in the words of the answer's API.
fn clock_message(clock: Clock, state: &StreamState, what: &'static str) -> &'static str {
    if clock == Clock::FirstOutput { state.first_output_timeout_message() } else { what }
}

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

/// Add a request's own headers (a replayed exchange's), or say which one cannot be sent.
fn add_headers(headers: &mut HeaderMap, extra: &[(String, String)]) -> Result<(), String> {
    for (name, value) in extra {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid request header name {name:?}"))?;
        let value = HeaderValue::from_str(value).map_err(|_| format!("invalid value of request header {name}"))?;
        headers.append(name, value);
    }
    Ok(())
}

/// The named response headers that are present, as text.
fn read_headers(headers: &HeaderMap, names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|name| {
            let value = headers.get(name.as_str())?.to_str().ok()?;
            Some((name.clone(), value.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_uris_carry_no_credentials() {
        let uri = request_uri("http://user:secret@127.0.0.1:8000/v1/chat/completions?x=1").unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:8000/v1/chat/completions?x=1");
        assert_eq!(uri.authority(), request_uri("http://127.0.0.1:8000/v1/models").unwrap().authority());
        assert!(request_uri("not a url").is_err());
    }
}
