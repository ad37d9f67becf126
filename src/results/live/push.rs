//! The pusher: one task that reads the live metrics every `run.push_interval` and POSTs them to
//! `run.remote_write` (Prometheus remote write) and `run.otlp` (OTLP/HTTP), then once more after
//! the last request so the end state arrives, then remote write's stale markers so a graph ends
//! where the run did.
//!
//! A push never stops or slows the run: it runs on its own task, off the hot path; each POST
//! has a timeout and reads at most `MAX_RESPONSE_BYTES` of the answer; a failure is counted,
//! warned about once per endpoint (the status or the kind, the URL without credentials), and
//! the next push carries the same cumulative counts a little later, so only the final push is
//! retried (once, on a 5xx, a 429 or a failed connection, as the remote write spec asks of a
//! sender). A URL's `user:password@` becomes basic auth; `run.push_token_env` a bearer token.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::snapshot::Snapshot;
use super::{otlp, remote_write};
use crate::plan::scenario::push_rules::PushSettings;

/// Each POST, connection included, ends within this.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// What is read of an answer (an error text at most), so the connection can be reused.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Before the final push's one retry.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Where the pusher reads the live metrics: the run's registry, or any reading in a test.
pub trait Readings: Send + Sync {
    fn snapshot(&self) -> Snapshot;
}

impl<F: Fn() -> Snapshot + Send + Sync> Readings for F {
    fn snapshot(&self) -> Snapshot {
        self()
    }
}

/// The run's registry, which the aggregator feeds: what a run pushes.
impl Readings for super::Registry {
    fn snapshot(&self) -> Snapshot {
        super::Registry::snapshot(self)
    }
}

/// What the pushes to one endpoint came to.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointReport {
    /// `remote write` or `OTLP`.
    pub protocol: &'static str,
    /// Without credentials or query values.
    pub url: String,
    pub ok: u64,
    pub failed: u64,
    /// The last failure: an HTTP status or what went wrong (`timed out after 5s`).
    pub last_error: Option<String>,
    /// Whether the final push (the run's end state) arrived.
    pub final_ok: bool,
}

impl EndpointReport {
    /// The console's line about it, when something failed.
    pub fn warning(&self) -> Option<String> {
        if self.failed == 0 {
            return None;
        }
        let last = self.last_error.as_deref().unwrap_or("unknown");
        let end = if self.final_ok { "" } else { "; the run's end state did not arrive" };
        Some(format!(
            "{} of {} {} pushes to {} failed (last: {last}){end}",
            self.failed,
            self.ok + self.failed,
            self.protocol,
            self.url
        ))
    }
}

/// The running pusher; `finish` makes the final push and ends the task.
pub struct Pusher {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<EndpointReport>>,
}

impl Pusher {
    /// Start pushing every `settings.interval`, the first push one interval from now.
    pub fn start(settings: &PushSettings, readings: Arc<dyn Readings>, source: otlp::Source) -> Result<Pusher, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(PUSH_TIMEOUT)
            .timeout(PUSH_TIMEOUT)
            .pool_max_idle_per_host(1)
            .build()
            .map_err(|e| format!("cannot set up the push client: {e}"))?;
        let token = settings.token.as_ref().map(|t| t.expose().to_string());
        let endpoint = |protocol, url: &String| Endpoint::new(protocol, url, token.clone());
        let mut pushing = Pushing {
            http,
            readings,
            source,
            remote_write: settings.remote_write.as_ref().map(|u| endpoint(REMOTE_WRITE, u)),
            otlp: settings.otlp.as_ref().map(|u| endpoint(OTLP, u)),
            last_unix_ms: i64::MIN,
            last_written: None,
        };
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let interval = settings.interval;
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    biased;
                    () = stopped.cancelled() => break,
                    _ = ticks.tick() => {
                        // A push still under way when the run ends gives way to the final one.
                        tokio::select! {
                            biased;
                            () = stopped.cancelled() => break,
                            () = pushing.push(false) => {}
                        }
                    }
                }
            }
            pushing.push(true).await;
            pushing.end_series().await;
            pushing.reports()
        });
        Ok(Pusher { stop, task })
    }

    /// The final push (after the last request) and the stale markers, then what every
    /// endpoint's pushes came to. Bounded: at most two attempts and the stale markers, each
    /// within `PUSH_TIMEOUT`.
    pub async fn finish(self) -> Vec<EndpointReport> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

const REMOTE_WRITE: &str = "remote write";
const OTLP: &str = "OTLP";

struct Endpoint {
    url: String,
    token: Option<String>,
    report: EndpointReport,
    warned: bool,
}

impl Endpoint {
    fn new(protocol: &'static str, url: &str, token: Option<String>) -> Endpoint {
        let report = EndpointReport {
            protocol,
            url: crate::redact::redact_url(url),
            ok: 0,
            failed: 0,
            last_error: None,
            final_ok: false,
        };
        Endpoint { url: url.to_string(), token, report, warned: false }
    }

    /// One POST; `Err` says what went wrong, and whether trying again may help.
    async fn post(
        &self,
        http: &reqwest::Client,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(), (String, bool)> {
        // reqwest turns the URL's `user:password@` into basic auth and keeps it off the wire's URL.
        let mut request = http.post(&self.url).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut response = request.send().await.map_err(describe)?;
        // Read a bounded part of the answer so the connection goes back to the pool.
        let mut read = 0;
        while read < MAX_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            let retry = status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
            Err((format!("HTTP {}", status.as_u16()), retry))
        }
    }

    fn count(&mut self, result: Result<(), (String, bool)>, last: bool) {
        match result {
            Ok(()) => {
                self.report.ok += 1;
                self.report.final_ok = last;
            }
            Err((problem, _)) => {
                self.report.failed += 1;
                if !self.warned {
                    self.warned = true;
                    eprintln!(
                        "warning: a {} push to {} failed ({problem}); the run goes on, and the failures are counted",
                        self.report.protocol, self.report.url
                    );
                }
                self.report.last_error = Some(problem);
            }
        }
    }
}

/// What a failed request was, without its URL (which may carry a query value).
fn describe(e: reqwest::Error) -> (String, bool) {
    if e.is_timeout() {
        (format!("timed out after {}", humantime::format_duration(PUSH_TIMEOUT)), true)
    } else if e.is_connect() {
        ("connection failed".to_string(), true)
    } else {
        (format!("request failed: {}", e.without_url()), false)
    }
}

struct Pushing {
    http: reqwest::Client,
    readings: Arc<dyn Readings>,
    source: otlp::Source,
    remote_write: Option<Endpoint>,
    otlp: Option<Endpoint>,
    /// The last reading's time: a receiver refuses a sample at or before the one it holds.
    last_unix_ms: i64,
    /// The last remote write request, for its stale markers.
    last_written: Option<remote_write::WriteRequest>,
}

impl Pushing {
    /// One reading, to every endpoint at once.
    async fn push(&mut self, last: bool) {
        let mut reading = self.readings.snapshot();
        reading.taken_unix_ms = reading.taken_unix_ms.max(self.last_unix_ms.saturating_add(1));
        self.last_unix_ms = reading.taken_unix_ms;
        let rw_body = self.remote_write.as_ref().map(|_| {
            let written = remote_write::write_request(&reading);
            let body = remote_write::body(&written);
            self.last_written = Some(written);
            body
        });
        let otlp_body = self.otlp.as_ref().map(|_| otlp::body(&otlp::export_request(&reading, &self.source)));
        let http = &self.http;
        let rw = async {
            match (&self.remote_write, rw_body) {
                (Some(e), Some(body)) => Some(post_with_retry(e, http, &rw_headers(), body, last).await),
                _ => None,
            }
        };
        let ot = async {
            match (&self.otlp, otlp_body) {
                (Some(e), Some(body)) => {
                    Some(post_with_retry(e, http, &[("Content-Type", otlp::CONTENT_TYPE)], body, last).await)
                }
                _ => None,
            }
        };
        let (rw, ot) = tokio::join!(rw, ot);
        if let (Some(e), Some(r)) = (self.remote_write.as_mut(), rw) {
            e.count(r, last);
        }
        if let (Some(e), Some(r)) = (self.otlp.as_mut(), ot) {
            e.count(r, last);
        }
    }

    /// Remote write's stale markers for every series pushed: not counted as a push, and
    /// only after an end state that arrived (a marker alone would erase the last values).
    async fn end_series(&mut self) {
        let (Some(e), Some(last)) = (&self.remote_write, &self.last_written) else { return };
        if !e.report.final_ok {
            return;
        }
        let at = now_unix_ms().max(self.last_unix_ms.saturating_add(1));
        let body = remote_write::body(&remote_write::stale_markers(last, at));
        let _ = e.post(&self.http, &rw_headers(), body).await;
    }

    fn reports(self) -> Vec<EndpointReport> {
        self.remote_write.into_iter().chain(self.otlp).map(|e| e.report).collect()
    }
}

fn rw_headers() -> [(&'static str, &'static str); 3] {
    [
        ("Content-Type", remote_write::CONTENT_TYPE),
        ("Content-Encoding", remote_write::CONTENT_ENCODING),
        remote_write::VERSION_HEADER,
    ]
}

async fn post_with_retry(
    e: &Endpoint,
    http: &reqwest::Client,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    last: bool,
) -> Result<(), (String, bool)> {
    match e.post(http, headers, body.clone()).await {
        Err((_, true)) if last => {
            tokio::time::sleep(RETRY_AFTER).await;
            e.post(http, headers, body).await
        }
        other => other,
    }
}

/// The wall clock, milliseconds since the Unix epoch.
pub fn now_unix_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
