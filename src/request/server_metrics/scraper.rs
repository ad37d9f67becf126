//! The scraper of one run and its per-level tasks.
//!
//! A level is scraped at its start (before the first request), every interval, and at its end
//! (after the last request). Fetching is async on the run's runtime (a GET with a timeout and a
//! bounded body, on its own connection pool so it never takes a load connection); everything
//! else, parsing, normalising, writing `<level>.server-metrics.ndjson` and folding the summary,
//! happens on a dedicated thread per level, so a large exposition never delays a request's
//! timestamps. A failed scrape is recorded as such and the level goes on.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::file::LineWriter;
use super::names::{Engine, Norm, normalise};
use super::parse::parse;
use super::raw::{RAW_BUDGET_BYTES, raw_series};
use super::summary::{Accumulator, LevelServerMetrics, ScrapePoint};
use crate::contract::Stamp;
use crate::redact::Secrets;

/// One scrape may take this long, connecting included. A server too busy to answer its
/// metrics endpoint in 5 s is itself a finding, recorded as a failed scrape.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bodies above this are refused: vLLM's exposition is tens of kilobytes; megabytes mean many
/// LoRA adapters or models; beyond 16 MiB something is wrong.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Scrapes fetched but not yet folded, at most: an interval scrape waits for the writer
/// thread below this, so a server answering 16 MiB bodies faster than they can be parsed holds a
/// few bodies in memory, not a queue that grows for the whole level.
const MAX_BACKLOG: usize = 2;
/// The classic text format: OpenMetrics negotiation makes prometheus_client escape names with
/// colons (`vllm:…`) in samples but not in `# TYPE` lines (prometheus/client_python#1177).
const ACCEPT_TEXT: &str = "text/plain;version=0.0.4";

/// Scrapes one server's metrics endpoint, level after level.
#[derive(Clone)]
pub struct Scraper {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    url: String,
    display_url: String,
    interval: Duration,
    timeout: Duration,
    /// What a scrape's error, series names and label values must never carry.
    secrets: Secrets,
    /// The run's own headers (`target.headers`), when the metrics are beside the API.
    headers: reqwest::header::HeaderMap,
}

/// The scraper's HTTP client, with `tls` or the WebPKI roots, through `unix_socket` or TCP.
fn metrics_client(
    tls: Option<rustls::ClientConfig>,
    unix_socket: Option<&std::path::Path>,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(SCRAPE_TIMEOUT)
        .timeout(SCRAPE_TIMEOUT)
        .pool_max_idle_per_host(1);
    if let Some(mut config) = tls {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        builder = builder.use_preconfigured_tls(config);
    }
    if let Some(path) = unix_socket {
        builder = builder.unix_socket(path);
    }
    builder.build().map_err(|e| format!("cannot set up the metrics client: {e}"))
}

impl Scraper {
    /// `url` may hold credentials (used, never written, and withheld wherever the server echoes
    /// them); `redact` writes `[redacted]` instead of the URL, as `target.redact_base_url` does
    /// for the base URL.
    pub fn new(url: &str, interval: Duration, redact: bool) -> Result<Scraper, String> {
        let http = metrics_client(None, None)?;
        let display_url = if redact { "[redacted]".to_string() } else { super::display_url(url) };
        let secrets = Secrets::default().and_url(url);
        let inner = Inner {
            http,
            url: url.to_string(),
            display_url,
            interval,
            timeout: SCRAPE_TIMEOUT,
            secrets,
            headers: reqwest::header::HeaderMap::new(),
        };
        Ok(Scraper { inner: Arc::new(inner) })
    }

    /// Reach the server as the run does: TLS with `tls` (the run's `[target.tls]`) instead of
    /// the WebPKI roots, through `unix_socket` (`target.unix_socket`) instead of TCP.
    pub fn with_transport(
        self,
        tls: Option<rustls::ClientConfig>,
        unix_socket: Option<&std::path::Path>,
    ) -> Result<Scraper, String> {
        let http = metrics_client(tls, unix_socket)?;
        Ok(self.rebuilt(|inner| inner.http = http))
    }

    /// A shorter bound per scrape than [`SCRAPE_TIMEOUT`] (it stays the ceiling).
    pub fn with_timeout(self, timeout: Duration) -> Scraper {
        let timeout = timeout.min(SCRAPE_TIMEOUT);
        self.rebuilt(|inner| inner.timeout = timeout)
    }

    /// The run's other secrets (the API key, the base URL's credentials) withheld too: a
    /// server may echo any of them in its metrics.
    pub fn with_secrets(self, secrets: &Secrets) -> Scraper {
        let secrets = self.inner.secrets.and(secrets);
        self.rebuilt(|inner| inner.secrets = secrets)
    }

    /// Send these headers with every scrape (their values are sensitive: never shown).
    pub fn with_headers(self, headers: reqwest::header::HeaderMap) -> Scraper {
        self.rebuilt(|inner| inner.headers = headers)
    }

    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> Scraper {
        let inner = &self.inner;
        let mut next = Inner {
            http: inner.http.clone(),
            url: inner.url.clone(),
            display_url: inner.display_url.clone(),
            interval: inner.interval,
            timeout: inner.timeout,
            secrets: inner.secrets.clone(),
            headers: inner.headers.clone(),
        };
        change(&mut next);
        Scraper { inner: Arc::new(next) }
    }

    /// The URL as written into files and messages.
    pub fn display_url(&self) -> &str {
        &self.inner.display_url
    }

    /// Before the level's clock starts: take the start scrape (bounded by the scrape timeout)
    /// and set up the level's writer. `file` is `<out>/<level>.server-metrics.ndjson`; `None`
    /// keeps the summary only.
    pub async fn prepare(&self, level: &str, file: Option<PathBuf>) -> PreparedLevel {
        let (tx, rx) = mpsc::channel();
        let backlog = Arc::new(Backlog::default());
        let writer = {
            let (level, url, interval_ms, secrets, backlog) = (
                level.to_string(),
                self.inner.display_url.clone(),
                self.inner.interval.as_secs_f64() * 1000.0,
                self.inner.secrets.clone(),
                Arc::clone(&backlog),
            );
            std::thread::Builder::new()
                .name("server-metrics".into())
                .spawn(move || write_level(&level, file, &url, interval_ms, &secrets, &backlog, &rx))
        };
        let start = self.inner.fetch(ScrapePoint::Start).await;
        backlog.send(&tx, start);
        PreparedLevel { inner: Arc::clone(&self.inner), tx, writer: writer.ok(), backlog }
    }
}

/// Scrapes sent to the writer thread and not yet folded.
#[derive(Debug, Default)]
struct Backlog {
    pending: AtomicUsize,
    /// Signalled by the writer after each scrape it folded.
    folded: tokio::sync::Notify,
}

impl Backlog {
    fn send(&self, tx: &mpsc::Sender<Message>, fetched: Fetched) -> bool {
        self.pending.fetch_add(1, Ordering::AcqRel);
        tx.send(Message::Scrape(fetched)).is_ok()
    }

    fn folded(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        self.folded.notify_one();
    }

    /// Until fewer than [`MAX_BACKLOG`] scrapes wait for the writer.
    async fn room(&self) {
        while self.pending.load(Ordering::Acquire) >= MAX_BACKLOG {
            self.folded.notified().await;
        }
    }
}

/// A level whose start scrape is taken; [`PreparedLevel::start`] it with the level's clock.
pub struct PreparedLevel {
    inner: Arc<Inner>,
    tx: mpsc::Sender<Message>,
    /// `None` when the thread could not be started: scrapes are then not folded (an honest,
    /// empty summary with the reason).
    writer: Option<std::thread::JoinHandle<LevelServerMetrics>>,
    backlog: Arc<Backlog>,
}

impl PreparedLevel {
    /// The level's clock has started at `level_start` (the instant its `t = 0`): scrape every
    /// interval from there. Scrape times in the file are relative to it.
    pub fn start(self, level_start: Instant) -> LevelScraper {
        let _ = self.tx.send(Message::Origin(level_start));
        let stop = CancellationToken::new();
        let task = {
            let (inner, tx, stop) = (Arc::clone(&self.inner), self.tx.clone(), stop.clone());
            // Without a writer nothing is folded: the backlog would never drain.
            let backlog = self.writer.is_some().then(|| Arc::clone(&self.backlog));
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval_at(level_start + inner.interval, inner.interval);
                // A slow scrape delays the next one instead of causing a burst.
                ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        _ = ticks.tick() => {}
                    }
                    let Some(backlog) = &backlog else { continue };
                    // A writer still folding earlier scrapes delays this one, as a slow scrape
                    // does.
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = backlog.room() => {}
                    }
                    // A scrape cut by the end of the level is superseded by the end scrape.
                    let fetched = tokio::select! {
                        () = stop.cancelled() => break,
                        fetched = inner.fetch(ScrapePoint::Interval) => fetched,
                    };
                    if !backlog.send(&tx, fetched) {
                        break;
                    }
                }
            })
        };
        LevelScraper {
            inner: self.inner,
            tx: Some(self.tx),
            writer: self.writer,
            backlog: self.backlog,
            stop,
            task: Some(task),
        }
    }
}

/// A level being scraped; [`LevelScraper::finish`] it once its last request has ended.
pub struct LevelScraper {
    inner: Arc<Inner>,
    tx: Option<mpsc::Sender<Message>>,
    writer: Option<std::thread::JoinHandle<LevelServerMetrics>>,
    backlog: Arc<Backlog>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl LevelScraper {
    /// Stop the interval scrapes, take the end scrape, and return the level's summary once
    /// its file is flushed. Bounded by the scrape timeout plus the time to fold what is queued.
    pub async fn finish(mut self) -> LevelServerMetrics {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let end = self.inner.fetch(ScrapePoint::End).await;
        if let Some(tx) = self.tx.take() {
            self.backlog.send(&tx, end);
        }
        let interval_ms = self.inner.interval.as_secs_f64() * 1000.0;
        let fallback = |reason: &str| {
            let mut m = Accumulator::new().finish(self.inner.display_url.clone(), interval_ms);
            m.file_error = Some(reason.to_string());
            m
        };
        let Some(writer) = self.writer.take() else { return fallback("the server-metrics thread could not start") };
        match tokio::task::spawn_blocking(move || writer.join()).await {
            Ok(Ok(summary)) => summary,
            _ => fallback("the server-metrics thread failed"),
        }
    }
}

impl Drop for LevelScraper {
    fn drop(&mut self) {
        // An abandoned level (an error path) must not leave its interval task scraping.
        self.stop.cancel();
    }
}

enum Message {
    /// The level's `t = 0`; scrapes before it are held back.
    Origin(Instant),
    Scrape(Fetched),
}

struct Fetched {
    phase: ScrapePoint,
    sent: Instant,
    unix_ns: u64,
    latency: Duration,
    result: Result<Bytes, String>,
}

impl Inner {
    async fn fetch(&self, phase: ScrapePoint) -> Fetched {
        let unix_ns = Stamp::now().unix_ns();
        let sent = Instant::now();
        let result = match tokio::time::timeout(self.timeout, self.get()).await {
            Ok(result) => result,
            Err(_) => Err(format!("timed out after {}", humantime::format_duration(self.timeout))),
        };
        Fetched { phase, sent, unix_ns, latency: sent.elapsed(), result }
    }

    async fn get(&self) -> Result<Bytes, String> {
        let mut response = self
            .http
            .get(&self.url)
            .headers(self.headers.clone())
            .header(reqwest::header::ACCEPT, ACCEPT_TEXT)
            .send()
            .await
            .map_err(|e| describe(&e, &self.secrets))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "HTTP {status} (is the endpoint on? SGLang needs --enable-metrics, llama.cpp --metrics)"
            ));
        }
        if response.content_length().is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            return Err(format!("the body is larger than {} MiB", MAX_BODY_BYTES >> 20));
        }
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e, &self.secrets))? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(format!("the body is larger than {} MiB", MAX_BODY_BYTES >> 20));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }
}

/// A reqwest error in one bounded line, without the URL (which may hold credentials), through
/// the run's sanitizer.
fn describe(e: &reqwest::Error, secrets: &Secrets) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "the body could not be read"
    } else {
        "the request failed"
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let text = if causes.is_empty() { kind.to_string() } else { format!("{kind}: {}", causes.join(": ")) };
    secrets.message(&text)
}

/// One line of `<level>.server-metrics.ndjson`.
#[derive(Serialize)]
struct ScrapeLine<'a> {
    level: &'a str,
    phase: ScrapePoint,
    /// Seconds from the level's start to the request (negative for the start scrape).
    t_s: f64,
    unix_ns: u64,
    latency_ms: f64,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    engine: Option<Engine>,
    #[serde(skip_serializing_if = "is_zero")]
    skipped_lines: usize,
    /// Series of the scrape not in `raw`: beyond the bound per scrape, or all of them once the
    /// level's file reached its budget.
    #[serde(skip_serializing_if = "is_zero")]
    raw_left_out: usize,
    /// The normalised set; absent metrics are left out.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    normalized: std::collections::BTreeMap<Norm, f64>,
    /// The series, `name{labels}` → value (NaN and infinities as null), sanitized and bounded
    /// (see `raw`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    raw: std::collections::BTreeMap<String, f64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The writer thread: fold every scrape of the level in order, write it, return the summary.
fn write_level(
    level: &str,
    file: Option<PathBuf>,
    url: &str,
    interval_ms: f64,
    secrets: &Secrets,
    backlog: &Backlog,
    rx: &mpsc::Receiver<Message>,
) -> LevelServerMetrics {
    let mut acc = Accumulator::new();
    let mut out = LineWriter::new(file);
    let mut written = Written::default();
    let mut fold_one = |at: Instant, fetched: Fetched, acc: &mut Accumulator, out: &mut LineWriter| {
        fold(level, at, fetched, secrets, acc, out, &mut written);
        backlog.folded();
    };
    let mut origin: Option<Instant> = None;
    let mut held: Vec<Fetched> = Vec::new();
    for message in rx {
        match message {
            Message::Origin(at) => {
                origin = Some(at);
                for fetched in held.drain(..) {
                    fold_one(at, fetched, &mut acc, &mut out);
                }
            }
            Message::Scrape(fetched) => match origin {
                Some(at) => fold_one(at, fetched, &mut acc, &mut out),
                None => held.push(fetched),
            },
        }
    }
    // Never started: times are relative to the first scrape.
    if let Some(at) = held.first().map(|f| f.sent) {
        for fetched in std::mem::take(&mut held) {
            fold_one(at, fetched, &mut acc, &mut out);
        }
    }
    let mut summary = acc.finish(url.to_string(), interval_ms);
    summary.raw_series_left_out = written.most_left_out as u64;
    summary.raw_scrapes_over_budget = written.over_budget;
    out.flush();
    summary.file = out.written_name();
    summary.file_error = out.error;
    summary.gpu = summary.gpu.take().map(|g| g.sanitized(secrets));
    summary
}

/// What the level's lines left out of `raw`, for its summary.
#[derive(Debug, Default)]
struct Written {
    /// The most series one scrape left out of its line (beyond the bound per scrape).
    most_left_out: usize,
    /// Scrapes written without `raw` once the file reached its budget.
    over_budget: u32,
}

fn fold(
    level: &str,
    origin: Instant,
    fetched: Fetched,
    secrets: &Secrets,
    acc: &mut Accumulator,
    out: &mut LineWriter,
    written: &mut Written,
) {
    let t_s = if fetched.sent >= origin {
        (fetched.sent - origin).as_secs_f64()
    } else {
        -(origin - fetched.sent).as_secs_f64()
    };
    let mut line = ScrapeLine {
        level,
        phase: fetched.phase,
        t_s,
        unix_ns: fetched.unix_ns,
        latency_ms: fetched.latency.as_secs_f64() * 1000.0,
        ok: false,
        error: None,
        engine: None,
        skipped_lines: 0,
        raw_left_out: 0,
        normalized: Default::default(),
        raw: Default::default(),
    };
    let parsed = match &fetched.result {
        Ok(body) => parse(body),
        Err(e) => Err(e.clone()),
    };
    match parsed {
        Ok(parsed) => {
            acc.ok(fetched.phase, t_s, &parsed.series, parsed.skipped_lines);
            let normalised = normalise(&parsed.series);
            line.ok = true;
            line.engine = normalised.engine;
            line.skipped_lines = parsed.skipped_lines;
            line.normalized = normalised.values;
            if out.bytes < RAW_BUDGET_BYTES {
                let raw = raw_series(&parsed.series, secrets);
                written.most_left_out = written.most_left_out.max(raw.left_out);
                line.raw = raw.series;
                line.raw_left_out = raw.left_out;
            } else {
                written.over_budget += 1;
                line.raw_left_out = parsed.series.len();
            }
            out.write(&line);
        }
        Err(error) => {
            acc.failed(fetched.phase, &error);
            line.error = Some(&error);
            out.write(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer behind on its folding holds the next interval scrape back until it catches up.
    #[tokio::test]
    async fn the_backlog_waits_for_the_writer() {
        let backlog = Arc::new(Backlog::default());
        let (tx, rx) = mpsc::channel();
        let fetched = || Fetched {
            phase: ScrapePoint::Interval,
            sent: Instant::now(),
            unix_ns: 0,
            latency: Duration::ZERO,
            result: Ok(Bytes::new()),
        };
        assert!(backlog.send(&tx, fetched()) && backlog.send(&tx, fetched()));
        let waiting = tokio::time::timeout(Duration::from_millis(50), backlog.room()).await;
        assert!(waiting.is_err(), "two scrapes queued: no room");
        let writer = {
            let backlog = Arc::clone(&backlog);
            std::thread::spawn(move || {
                let _ = rx.recv();
                backlog.folded();
            })
        };
        tokio::time::timeout(Duration::from_secs(5), backlog.room()).await.expect("room once one is folded");
        writer.join().expect("writer");
    }
}
