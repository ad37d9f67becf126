//! The cheapest client that can take these responses: the same request bodies over the same
//! kind of pooled connections (hyper's pooled client, as the client's measured requests use it,
//! with the same read-buffer cap), body bytes read and counted, nothing parsed, timed or kept.

use super::*;

use bytes::Bytes;
use futures::StreamExt;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub body_bytes: u64,
    /// First send to last read.
    pub wall_s: f64,
    pub first_error: Option<String>,
    /// Per request, when asked (`timed`): for the timing-accuracy comparison.
    #[serde(default)]
    pub timings: Vec<Timing>,
}

/// One request as the floor reader saw it: started (wall clock), first read holding a content
/// delta, body end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timing {
    pub index: u64,
    pub start_unix_ns: u64,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: f64,
}

/// What marks a content delta in the simulator's chunks (`"delta":{"content":"…`); a role chunk
/// (`{"role":…,"content":null}`) and reasoning deltas do not match.
const CONTENT_DELTA: &[u8] = b"{\"content\":\"";

/// Filler for a prompt of about 64 tokens, like the client's synthetic prompts.
const FILLER: &str = "the river ran north past the old mill while the city slept under a quiet sky and \
                      every street held its breath as the night train rolled slowly across the long bridge \
                      toward the harbour where ships waited for the morning tide to carry them out";

/// `--floor URL CONCURRENCY REQUESTS MAX_TOKENS canaries|plain [timed]`
pub fn main(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let url = args.first()?.clone();
        let concurrency: usize = args.get(1)?.parse().ok()?;
        let requests: u64 = args.get(2)?.parse().ok()?;
        let max_tokens: u32 = args.get(3)?.parse().ok()?;
        let canaries = args.get(4)? == "canaries";
        let timed = args.get(5).is_some_and(|a| a == "timed");
        Some((url, concurrency, requests, max_tokens, canaries, timed))
    })();
    let Some((url, concurrency, requests, max_tokens, canaries, timed)) = parsed else {
        eprintln!("usage: --floor URL CONCURRENCY REQUESTS MAX_TOKENS canaries|plain [timed]");
        return ExitCode::from(2);
    };
    // The same runtime the client builds: multi-threaded, one worker per available CPU.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("floor: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(load(url, concurrency, requests, max_tokens, canaries, timed)) {
        Ok(report) => {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("floor: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn body(index: u64, max_tokens: u32, canaries: bool) -> Bytes {
    // The canary instruction makes the simulator do the same work as for the client.
    let task = if canaries {
        format!(" Begin your reply with ANVIL_REQ_{SEED}_{index:05} and then continue.")
    } else {
        String::new()
    };
    let prompt = format!("Request {index}. {FILLER}.{task}");
    let body = json!({
        "model": "bench",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

async fn load(
    base_url: String,
    concurrency: usize,
    requests: u64,
    max_tokens: u32,
    canaries: bool,
    timed: bool,
) -> Result<Report, String> {
    // The client's pool settings: Nagle off, one idle connection kept per worker, the same cap
    // on each connection's read buffer.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_max_idle_per_host(concurrency)
        .pool_idle_timeout(Duration::from_secs(90))
        .http1_max_buf_size(anvil_load::request::worker::READ_BUFFER_MAX);
    let http: Client<HttpConnector, Full<Bytes>> = builder.build(tcp);
    let url: http::Uri = format!("{base_url}/chat/completions").parse().map_err(|e| format!("base URL: {e}"))?;
    open_connections(&http, &base_url, concurrency).await?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // The wall clock at `started`, so that request starts compare with the server's arrivals.
    let started_unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, url, next) = (http.clone(), url.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let (mut completed, mut failed, mut bytes, mut first_error) = (0u64, 0u64, 0u64, None);
                let mut timings = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= requests {
                        break;
                    }
                    let mut first_content: Option<Duration> = None;
                    // The end of the previous read, so a marker split across two reads is found.
                    let mut tail: Vec<u8> = Vec::new();
                    let mut request = http::Request::new(Full::new(body(index, max_tokens, canaries)));
                    *request.method_mut() = http::Method::POST;
                    *request.uri_mut() = url.clone();
                    request.headers_mut().insert(CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    // As the client's clock: started as the request is handed to the pool.
                    let start = Instant::now();
                    let sent = http.request(request).await;
                    let result = match sent {
                        Ok(response) if response.status().is_success() => {
                            let mut body = BodyDataStream::new(response.into_body());
                            loop {
                                match body.next().await {
                                    Some(Ok(chunk)) if timed && first_content.is_none() => {
                                        let at = start.elapsed();
                                        bytes += chunk.len() as u64;
                                        tail.extend_from_slice(&chunk);
                                        if memchr::memmem::find(&tail, CONTENT_DELTA).is_some() {
                                            first_content = Some(at);
                                        }
                                        let keep = tail.len().saturating_sub(CONTENT_DELTA.len());
                                        tail.drain(..keep);
                                    }
                                    Some(Ok(chunk)) => bytes += chunk.len() as u64,
                                    None => break Ok(()),
                                    Some(Err(e)) => break Err(e.to_string()),
                                }
                            }
                        }
                        Ok(response) => Err(format!("HTTP {}", response.status())),
                        Err(e) => Err(e.to_string()),
                    };
                    if timed && result.is_ok() {
                        let ms = |d: Duration| d.as_secs_f64() * 1e3;
                        timings.push(Timing {
                            index,
                            start_unix_ns: started_unix_ns + start.duration_since(started).as_nanos() as u64,
                            ttft_ms: first_content.map(ms),
                            e2e_ms: ms(start.elapsed()),
                        });
                    }
                    match result {
                        Ok(()) => completed += 1,
                        Err(e) => {
                            failed += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (completed, failed, bytes, first_error, timings)
            })
        })
        .collect();
    let mut report = Report {
        requests,
        completed: 0,
        failed: 0,
        body_bytes: 0,
        wall_s: 0.0,
        first_error: None,
        timings: Vec::new(),
    };
    for worker in workers {
        match worker.await {
            Ok((completed, failed, bytes, error, timings)) => {
                report.timings.extend(timings);
                report.completed += completed;
                report.failed += failed;
                report.body_bytes += bytes;
                if report.first_error.is_none() {
                    report.first_error = error;
                }
            }
            Err(e) => report.first_error = Some(format!("worker panicked: {e}")),
        }
    }
    report.wall_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// As the client does before a level's clock starts: one connection per worker opened first, so
/// that no request's timings include a TCP handshake and both hold the same connections when
/// their memory peaks.
async fn open_connections(
    http: &Client<HttpConnector, Full<Bytes>>,
    base_url: &str,
    concurrency: usize,
) -> Result<(), String> {
    let models: http::Uri = format!("{base_url}/models").parse().map_err(|e| format!("base URL: {e}"))?;
    // All requests are handed to the pool before any answer arrives (`join_all` polls each once
    // first), so each opens its own connection; each body is read as soon as it comes.
    let opened = (0..concurrency).map(|_| {
        let mut request = http::Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = models.clone();
        async move {
            if let Ok(response) = http.request(request).await {
                let _ = response.into_body().collect().await;
            }
        }
    });
    futures::future::join_all(opened).await;
    Ok(())
}
