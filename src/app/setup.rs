//! Setting a run up: the target (and the embedded simulator), the preflight check, prompt
//! sizing, signals, run ids.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anvil_sim::MockServer;
use serde_json::Value;

use super::AppError;
use crate::cli::exit;
use crate::plan::scenario::{ClientSettings, Endpoint, Pacing, PromptSource, Scenario, SizingMode, with_query};
use crate::redact::redact_url;
use crate::request::record::{ProbeResult, SizingRecord};
use crate::request::schedule::RunControl;
use crate::request::worker::credentials::Credentials;
use crate::request::worker::{
    Client, client_certificate_refusal, error_chain, header_map, http_client, run_headers, tls_reason,
};
use crate::request::workload::sizing::{self, default_overhead, probe_sizes};
use crate::request::workload::{Sizer, Workload};
use crate::results::console;
use crate::sys;
use tokio_util::sync::CancellationToken;

/// The server under test for this run: a URL, and the simulator when it is embedded.
pub(super) struct RunTarget {
    pub base_url: String,
    pub simulator: Option<MockServer>,
}

impl RunTarget {
    pub async fn start(scenario: &Scenario) -> Result<Self, AppError> {
        match &scenario.target.endpoint {
            Endpoint::Remote { base_url } => {
                Ok(RunTarget { base_url: with_query(base_url, &scenario.target.query), simulator: None })
            }
            Endpoint::Simulator { profile, time_per_output_token_ms } => {
                let mut p = anvil_sim::Profile::named(profile)
                    .ok_or_else(|| AppError::BadInput(format!("unknown simulator profile {profile}")))?;
                if let Some(ms) = time_per_output_token_ms {
                    p.time_per_output_token = Duration::from_secs_f64(ms / 1000.0);
                }
                let server = MockServer::start(p)
                    .await
                    .map_err(|e| AppError::Aborted(format!("cannot start the embedded simulator: {e}")))?;
                eprintln!(
                    "no base_url given: running against the embedded simulator (profile {profile}) at {}\n\
                     these numbers describe the simulator, not a real engine; use --base-url URL to measure a server",
                    server.base_url()
                );
                Ok(RunTarget {
                    base_url: with_query(&server.base_url(), &scenario.target.query),
                    simulator: Some(server),
                })
            }
        }
    }

    pub fn simulator_counts(&self) -> Option<Value> {
        self.simulator.as_ref().and_then(|s| serde_json::to_value(s.stats()).ok())
    }

    /// At a level's start: the simulator's counters (the level's are those at its end minus
    /// these, `counts_delta`), and its peak started again from the requests in flight now, so
    /// that the level's `peak_active_requests` is its own.
    pub fn level_start_counts(&self) -> Option<Value> {
        let counts = self.simulator_counts();
        if let Some(server) = &self.simulator {
            server.reset_peak();
        }
        counts
    }

    pub async fn shutdown(self) {
        if let Some(server) = self.simulator {
            server.shutdown().await;
        }
    }
}

/// How long `/models` may take to answer once connected, beyond `client.connect_timeout`.
const PREFLIGHT_ANSWER: Duration = Duration::from_secs(5);

/// What the server's `/models` said, for `meet::choose_model`.
pub(super) enum Listing {
    /// The ids it lists, as the server wrote them (possibly none).
    Listed(Vec<String>),
    /// No list: why, in words already sanitized (`GET …/models answered 404 Not Found`).
    Unavailable(String),
}

/// Before any load: is the server there, does it speak the protocol the run will use, and which
/// models does it list? Unreachable, a hung `/models` and an HTTP/2 run against an HTTP/1.1-only
/// server are fatal (the last with exit code 2: a setting to change); a missing or unreadable
/// list is returned as such (not every server implements `/models`), and `meet::choose_model`
/// decides. Nothing here prints a credential or echoes more than a bounded, sanitized piece of
/// what the server said.
/// The run's key goes with it (a 401 refreshes a command's token once and asks again).
pub(super) async fn preflight(base_url: &str, scenario: &Scenario, key: &Credentials) -> Result<Listing, AppError> {
    let settings = &scenario.client;
    let url = crate::plan::scenario::url_rules::endpoint(base_url, "/models");
    let shown = redact_url(base_url);
    let shown_url = redact_url(&url);
    let secrets = scenario.secrets().and_url(base_url);
    let limit = settings.connect.saturating_add(PREFLIGHT_ANSWER);
    // The run's own headers (a gateway's tenant or key header guards /models too).
    let headers = header_map(&run_headers(&scenario.target).map_err(|e| AppError::BadInput(e.to_string()))?);
    if settings.tls.as_ref().is_some_and(|t| t.insecure_skip_verify) {
        eprintln!(
            "warning: target.tls.insecure_skip_verify = true: the server's certificate is not checked, so anyone on the path to {shown} can pose as it; use target.tls.ca_file instead outside a lab"
        );
    }
    let get = |http2: bool| {
        let (url, headers) = (url.clone(), headers.clone());
        async move {
            let client = http_client(&ClientSettings { http2, ..settings.clone() }, 0)
                .map_err(|e| AppError::Aborted(format!("cannot build the HTTP client: {e}")))?;
            let mut headers = headers;
            key.apply(&mut headers);
            Ok::<_, AppError>(tokio::time::timeout(limit, client.get(&url).headers(headers).send()).await)
        }
    };
    let token = key.generation();
    let mut answer = match get(settings.http2).await? {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) if e.is_connect() && settings.unix_socket.is_some() => {
            let socket = settings.unix_socket.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
            return Err(AppError::Aborted(format!(
                "cannot reach the server at {shown} through the Unix socket {socket} ({}); is it running? check target.unix_socket",
                secrets.message(&error_chain(&e.without_url()))
            )));
        }
        Ok(Err(e)) if e.is_connect() => return Err(unreachable(&shown, &e)),
        failed if settings.http2 => {
            // Prior-knowledge HTTP/2 against a server that only speaks HTTP/1.1 fails ("frame
            // with invalid size") or hangs; every request of the run would do the same.
            let h2_problem = match failed {
                Ok(Err(e)) => secrets.message(&error_chain(&e.without_url())),
                _ => format!("no answer within {}", console::fmt_duration(limit)),
            };
            return Err(match get(false).await? {
                Ok(Ok(resp)) => AppError::BadInput(format!(
                    "client.http2 = true, but the server at {shown} does not speak HTTP/2 (GET /models over HTTP/2: {h2_problem}; over HTTP/1.1 it answered {}); set http2 = false in [client] or remove the key",
                    resp.status()
                )),
                Ok(Err(e)) if e.is_connect() => unreachable(&shown, &e),
                Err(_) => hung(&shown, &shown_url, limit),
                Ok(Err(_)) => AppError::Aborted(format!(
                    "GET {shown_url} over HTTP/2 failed ({h2_problem}), and over HTTP/1.1 too; is the server running, and does it speak HTTP/2? check --base-url, target.base_url and client.http2"
                )),
            });
        }
        Err(_) => return Err(hung(&shown, &shown_url, limit)),
        Ok(Err(e)) if e.is_timeout() => return Err(hung(&shown, &shown_url, limit)),
        Ok(Err(e)) => {
            return Ok(Listing::Unavailable(format!(
                "GET {shown_url} failed ({})",
                secrets.message(&error_chain(&e.without_url()))
            )));
        }
    };
    if answer.status() == reqwest::StatusCode::UNAUTHORIZED && key.refresh_after_401(token).await {
        if let Ok(Ok(again)) = get(settings.http2).await? {
            answer = again;
        }
    }
    let status = answer.status();
    if status.is_redirection() {
        let location =
            answer.headers().get(reqwest::header::LOCATION).map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
        let location = secrets.message(&location.unwrap_or_else(|| "nowhere".into()));
        eprintln!(
            "warning: GET {shown_url} answered {status}, a redirect to {location}; redirects are not followed, so every request will fail as `redirect`: set base_url to the address that serves the API"
        );
        return Ok(Listing::Unavailable(format!("GET {shown_url} answered {status}")));
    }
    if !status.is_success() {
        // A gateway that wants a client certificate says so in a page, not in the handshake.
        if settings.tls.is_some() || base_url.starts_with("https:") {
            let body = tokio::time::timeout(limit, bounded_body(answer)).await.ok().flatten().unwrap_or_default();
            if let Some(reason) = client_certificate_refusal(status.as_u16(), &body) {
                return Err(AppError::Aborted(format!("cannot reach the server at {shown}: {reason}")));
            }
        }
        return Ok(Listing::Unavailable(format!("GET {shown_url} answered {status}")));
    }
    let body = match tokio::time::timeout(limit, bounded_body(answer)).await {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(Listing::Unavailable(format!("GET {shown_url}: the answer could not be read"))),
        Err(_) => return Err(hung(&shown, &shown_url, limit)),
    };
    Ok(listed_ids(&body)
        .map(Listing::Listed)
        .unwrap_or_else(|| Listing::Unavailable(format!("GET {shown_url}: the answer is not a list of models"))))
}

/// A `/models` answer longer than this is not read (a list of thousands of models is a few
/// hundred kilobytes).
const MODELS_BODY_MAX: usize = 4 << 20;

/// The body, unless it fails or exceeds [`MODELS_BODY_MAX`].
async fn bounded_body(mut answer: reqwest::Response) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.ok()? {
        if body.len() + chunk.len() > MODELS_BODY_MAX {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body)
}

/// The ids of an OpenAI-style `{"data": [{"id": …}, …]}`; `None` when it is not one.
fn listed_ids(body: &[u8]) -> Option<Vec<String>> {
    let answer = serde_json::from_slice::<Value>(body).ok()?;
    let data = answer.get("data")?.as_array()?;
    Some(data.iter().filter_map(|m| m.get("id").and_then(Value::as_str)).map(str::to_string).collect())
}

fn unreachable(shown: &str, e: &reqwest::Error) -> AppError {
    if let Some(reason) = tls_reason(e) {
        return AppError::Aborted(format!("cannot reach the server at {shown}: {reason}"));
    }
    AppError::Aborted(format!(
        "cannot reach the server at {shown} ({}); is it running? check --base-url or target.base_url",
        if e.is_timeout() { "connecting timed out" } else { "connection failed" }
    ))
}

fn hung(shown: &str, shown_url: &str, limit: Duration) -> AppError {
    AppError::Aborted(format!(
        "the server at {shown} accepted the connection, but GET {shown_url} did not answer within {} (client.connect_timeout + {}); it may be stuck or overloaded. Check the server; if its /models is merely slow, raise client.connect_timeout",
        console::fmt_duration(limit),
        console::fmt_duration(PREFLIGHT_ANSWER)
    ))
}

/// Where the run's records go, once known: named by any exit without an artifact.
pub(super) type RecordsNote = Arc<std::sync::OnceLock<(PathBuf, PathBuf)>>;

/// Ctrl-C or SIGTERM, counted. The first stops issuing and gives in-flight requests `grace`;
/// the second (as `timeout` sends one after the other) cuts them at once, and the artifacts are
/// still written from what was measured; only a third quits at once, naming the records file
/// and the command that rebuilds the artifacts from it.
pub(super) fn watch_signals(control: RunControl, grace: Duration, records: RecordsNote) {
    tokio::spawn(async move {
        let mut signals = StopSignals::new();
        signals.next().await;
        eprintln!(
            "\nstopping: no new requests; in-flight requests get {} to finish (signal again to cut them now)",
            console::fmt_duration(grace)
        );
        control.stop_issuing.cancel();
        let cut = control.cut_in_flight.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            cut.cancel();
        });
        signals.next().await;
        eprintln!(
            "cutting in-flight requests now; the artifacts are still written (signal again to quit without them)"
        );
        control.cut_in_flight.cancel();
        signals.next().await;
        match records.get() {
            Some((path, out)) => eprintln!(
                "quitting now, without writing the artifacts; the records so far are in {}; rebuild the artifacts with: anvil-load summarize {} --out {}",
                path.display(),
                path.display(),
                out.display()
            ),
            None => eprintln!("quitting now: nothing was measured yet"),
        }
        std::process::exit(i32::from(exit::ABORTED));
    });
}

/// SIGINT and SIGTERM, listened to from the first moment on: a signal that arrives while the
/// previous one is being handled is counted, not lost.
struct StopSignals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            StopSignals { streams: signal(SignalKind::interrupt()).ok().zip(signal(SignalKind::terminate()).ok()) }
        }
        #[cfg(not(unix))]
        {
            StopSignals {}
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some((int, term)) = &mut self.streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Decide how prompts are sized: the built-in estimate, a fit to the server's counts for a few
/// probe requests, or a local tokenizer (with one probe pair for the template overhead). When
/// prompts open with their own system message, one more probe measures that shape; when
/// conversations have later turns, one more measures what a turn adds. `None` when `stop` fired
/// (Ctrl-C): no probe is sent after it, and the one in flight is abandoned.
pub(super) async fn size_prompts(
    scenario: &Scenario,
    client: &Client,
    salt: u64,
    stop: &CancellationToken,
) -> Option<(Sizer, SizingRecord)> {
    let default = default_overhead(scenario.target.api);
    let (initial, mode, path) = match &scenario.workload.sizing {
        SizingMode::Estimate => {
            let sizer = Sizer::Estimate { overhead: default };
            let record = SizingRecord::for_sizer("estimate", &sizer, None);
            return Some((sizer, record));
        }
        SizingMode::Calibrate => (Sizer::Estimate { overhead: default }, "calibrate", None),
        SizingMode::Tokenizer { path, tokenizer } => (
            Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead: default },
            "tokenizer",
            Some(path.display().to_string()),
        ),
    };
    if !scenario.target.api.has_probes() {
        // Probes are short chat or completions requests, which this API does not send:
        // validation allows only the estimate or a local tokenizer with the built-in allowance.
        let record = SizingRecord::for_sizer(mode, &initial, path);
        return Some((initial, record));
    }
    let w = &scenario.workload;
    let largest = match &w.prompts {
        PromptSource::Synthetic { context } => context.largest(),
        PromptSource::Dataset(_) => w.max_context_tokens.saturating_sub(w.max_tokens) / 2,
        PromptSource::Trace(t) => t.stats.input_tokens.max,
        PromptSource::Sessions(s) => s.first_tokens.max().max(1024.0) as u32,
    };
    let mut sizes = probe_sizes(largest, w.max_context_tokens);
    if mode == "tokenizer" {
        // The tokenizer counts text exactly; two probes only measure the template overhead.
        sizes = vec![sizes[0], sizes[sizes.len() - 1]];
    }
    let probe_workload = Workload::new(scenario, salt, initial.clone());
    let system_probe = probe_workload.has_system_conversations();
    let turn_probe = probe_workload.has_later_turns();
    eprintln!(
        "sizing prompts: {} probe requests (max_tokens 1) to fit the server's token count",
        sizes.len() + usize::from(system_probe) + usize::from(turn_probe)
    );
    let mut probes = Vec::with_capacity(sizes.len());
    let mid_words = sizes[sizes.len() / 2];
    let first_words = sizes[0];
    for (k, words) in sizes.into_iter().enumerate() {
        let (body, predicted_text_tokens) = probe_workload.probe(k as u64, words);
        let result = probe_unless_stopped(client, body, stop).await?;
        probes.push(ProbeResult {
            predicted_text_tokens,
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    let (sizer, mut record) = sizing::fit_from_probes(&initial, mode, path, probes, default);
    if system_probe {
        let k = record.probes.len() as u64;
        let (body, system, user) = probe_workload.system_probe(k, mid_words);
        let result = probe_unless_stopped(client, body, stop).await?;
        // Counted with the fitted sizer: what is left is the template of that shape.
        let text = sizer.text_tokens(&system) + sizer.text_tokens(&user);
        record.system_message_overhead =
            result.as_ref().ok().map(|&served| served as f64 - text).filter(|o| plausible_overhead(*o, text));
        record.system_probe = Some(ProbeResult {
            predicted_text_tokens: initial.text_tokens(&system) + initial.text_tokens(&user),
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    if turn_probe {
        // Plain probe 0 again, an answer and a new user message: what the turn adds beyond their
        // text, against probe 0's own count.
        let k = record.probes.len() as u64 + u64::from(system_probe);
        let (body, answer, user) = probe_workload.turn_probe(0, first_words, k);
        let result = probe_unless_stopped(client, body, stop).await?;
        let first = record.probes.first().and_then(|p| p.server_prompt_tokens);
        let text = sizer.text_tokens(&answer) + sizer.text_tokens(&user);
        record.turn_overhead = match (&result, first, &record.fallback_reason) {
            (Ok(served), Some(first), None) => {
                Some(*served as f64 - first as f64 - text).filter(|o| plausible_overhead(*o, text))
            }
            _ => None,
        };
        record.turn_probe = Some(ProbeResult {
            predicted_text_tokens: initial.text_tokens(&answer) + initial.text_tokens(&user),
            server_prompt_tokens: result.as_ref().ok().copied(),
            error: result.err(),
        });
    }
    record.media_tokens = super::media_probes::probe(&probe_workload, &record, first_words, client, stop).await?;
    Some((sizer, record))
}

/// A template's overhead measured beside `text` tokens of a probe's messages: a few dozen tokens,
/// never a large share of the text. A count from a broken server is left out (the prompts are
/// then sized as without the probe) rather than sizing every prompt of its shape.
fn plausible_overhead(overhead: f64, text: f64) -> bool {
    overhead.is_finite() && overhead.abs() <= 0.5 * text.abs() + 64.0
}

/// One probe, unless the run is being stopped: `None` when `stop` fired before or during it.
pub(super) async fn probe_unless_stopped(
    client: &Client,
    body: bytes::Bytes,
    stop: &CancellationToken,
) -> Option<Result<u64, String>> {
    if stop.is_cancelled() {
        return None;
    }
    tokio::select! {
        biased;
        () = stop.cancelled() => None,
        result = client.probe(body) => Some(result),
    }
}

/// Simulator readings that are not running totals: a gauge, and a high-water mark that
/// `RunTarget::level_start_counts` resets per level. Taken as they are at the level's end.
const NOT_COUNTERS: &[&str] = &["active_requests", "peak_active_requests"];

/// The simulator's counters for one level: running totals minus their value before it (in
/// nested tables too, as `faults_injected`); gauges and peaks as they are at the level's end.
pub(super) fn counts_delta(after: &Value, before: Option<&Value>) -> Value {
    let (Value::Object(after), Some(Value::Object(before))) = (after, before) else {
        return after.clone();
    };
    let mut out = after.clone();
    for (key, value) in out.iter_mut() {
        if NOT_COUNTERS.contains(&key.as_str()) {
            continue;
        }
        match (value.as_u64(), before.get(key)) {
            (Some(a), Some(b)) => {
                if let Some(b) = b.as_u64() {
                    *value = Value::from(a.saturating_sub(b));
                }
            }
            (None, Some(b)) if value.is_object() => *value = counts_delta(value, Some(b)),
            _ => {}
        }
    }
    Value::Object(out)
}

/// Descriptors a run holds besides its connections: standard streams, the runtime's own (epoll,
/// event and timer descriptors), the records file, an artifact or summary being written, two
/// snapshot files, a listening socket, a DNS lookup, with headroom.
pub(super) const FILES_AND_HEADROOM: u64 = 64;

/// What one run needs from the open-file limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DescriptorNeed {
    /// Connections open at once at the largest level.
    pub connections: u64,
    /// The embedded simulator holds the other end of every connection in this process.
    pub embedded: bool,
    /// The setting that decides `connections`, for the message.
    pub setting: &'static str,
}

impl DescriptorNeed {
    /// The largest level's connections (closed loop: its concurrency; open loop: the in-flight
    /// cap, or without one the connections the pool keeps, one per request per second).
    pub fn for_scenario(s: &Scenario) -> Self {
        let (connections, setting) = match (&s.load.pacing, s.load.search) {
            (_, Some(search)) => (search.max, "load.search_max"),
            (Pacing::Closed { levels, .. }, None) => {
                (levels.iter().copied().max().map_or(1.0, f64::from), "load.concurrency (--concurrency)")
            }
            (Pacing::Open { max_in_flight: Some(m), .. }, None) => (f64::from(*m), "load.max_in_flight"),
            (Pacing::Open { rates, .. }, None) => (
                rates.iter().copied().fold(1.0, f64::max),
                "load.rate (--rate), or cap the connections with load.max_in_flight",
            ),
        };
        DescriptorNeed {
            connections: (connections.ceil() as u64).clamp(1, 100_000),
            embedded: matches!(s.target.endpoint, Endpoint::Simulator { .. }),
            setting,
        }
    }

    pub fn total(&self) -> u64 {
        self.connections.saturating_mul(if self.embedded { 2 } else { 1 }).saturating_add(FILES_AND_HEADROOM)
    }
}

/// Each in-flight request holds a socket (two with the embedded simulator): raise the open-file
/// limit to what the run needs (up to the hard limit). When that is not enough the run is
/// refused before anything is sent, rather than failing connections mid-run and then being
/// unable to write its artifact ("Too many open files"). Refusing, not capping: a capped
/// concurrency would measure a different load than the one asked for.
pub(super) fn ensure_file_limit(need: &DescriptorNeed) -> Result<(), AppError> {
    let needed = need.total();
    let Some(limit) = sys::raise_file_limit(needed) else { return Ok(()) };
    if limit.soft >= needed {
        if limit.soft_before < needed {
            tracing::info!("raised the open-file limit from {} to {}", limit.soft_before, limit.soft);
        }
        return Ok(());
    }
    Err(AppError::BadInput(format!(
        "{}: this run holds up to {} connections{} plus up to {FILES_AND_HEADROOM} files, {needed} descriptors, but the open-file limit is {} (hard limit {}) and cannot be raised further\n  fix: raise the limit (`ulimit -n {needed}`; above the hard limit, as root or in /etc/security/limits.conf), or lower {}",
        need.setting,
        need.connections,
        if need.embedded { " (twice: the embedded simulator holds the other end)" } else { "" },
        limit.soft,
        limit.hard,
        need.setting,
    )))
}
