//! Media on the hot path: CPU per request of the client with one 1024×1024 JPEG per request
//! against text-only requests of the same prompt and output length (`[workload.media]` encodes
//! before the level; a request only splices shared bytes into its body).
//!
//! Each side runs twice, with `N` requests and with one, and the row is the marginal CPU per
//! request, `(CPU(N) − CPU(1)) / (N − 1)`: the fixed costs (start-up, the media pool's encoding,
//! the artifact) cancel out. The total CPU of the `N` run is reported too, and the marginal CPU
//! split into user and system (kernel) time: the bytes of an inline image cross the socket in
//! the kernel, which any client pays. A third side sends the same image by URL
//! (`delivery = "http"`): the body then carries a URL and the server fetches the file from the
//! client's file server (whose serving is in the client's CPU). Target: media ÷ text at most 1.2.

use std::io;
use std::time::Duration;

use serde::Serialize;

use super::{Bench, ChildExit, instant};

/// Requests in flight.
const CONCURRENCY: u32 = 16;
/// Output tokens of every request, both sides.
const OUTPUT_TOKENS: u32 = 64;
/// Accepted ratio of CPU per request, media ÷ text.
pub const TARGET_RATIO: f64 = 1.2;

#[derive(Debug, Serialize)]
pub struct Side {
    pub requests: u64,
    pub completed_n: u64,
    pub cpu_s_n: f64,
    pub cpu_s_one: f64,
    /// `(CPU(N) − CPU(1)) / (N − 1)`, microseconds.
    pub marginal_cpu_us_per_request: f64,
    /// CPU(N) / N, microseconds.
    pub total_cpu_us_per_request: f64,
    /// The marginal CPU's user part, microseconds per request.
    pub marginal_user_us_per_request: f64,
    /// The marginal CPU's system (kernel) part, microseconds per request.
    pub marginal_sys_us_per_request: f64,
    /// Mean request body, bytes (media requests' `body_bytes`; 0 when not recorded).
    pub body_bytes_per_request: f64,
    pub peak_rss_mib: f64,
}

/// What each request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Jpeg,
    JpegByUrl,
}

#[derive(Debug, Serialize)]
pub struct MediaRow {
    pub text: Side,
    pub jpeg_1024: Side,
    /// The same image by URL (`delivery = "http"`).
    pub jpeg_1024_http: Side,
    /// Marginal CPU per request, media ÷ text.
    pub ratio: f64,
    /// Marginal CPU per request, media by URL ÷ text.
    pub ratio_http: f64,
    pub met: bool,
}

fn scenario(requests: u64, kind: Kind) -> String {
    let mut s = format!(
        "[target]\nmodel = \"bench\"\n\n[run]\nrequests = {requests}\nseed = 1\n\n[load]\nconcurrency = {CONCURRENCY}\n\n\
         [workload]\ncontext_tokens = 256\nmax_context_tokens = 16384\nmax_tokens = {OUTPUT_TOKENS}\ncanaries = true\n"
    );
    if kind != Kind::Text {
        s.push_str("\n[workload.media]\npool = 16\n");
        if kind == Kind::JpegByUrl {
            s.push_str("delivery = \"http\"\n");
        }
        s.push_str("\n[workload.media.images]\ncount = 1\nsize = \"1024x1024\"\nformat = \"jpeg\"\n");
    }
    s
}

fn cpu(exit: &ChildExit) -> f64 {
    exit.user_s + exit.sys_s
}

fn one(bench: &Bench, requests: u64, kind: Kind) -> io::Result<(ChildExit, u64, f64)> {
    let server = bench.start(instant())?;
    let dir = bench.run_dir(&format!("media-{kind:?}-{requests}"))?;
    let file = dir.join("scenario.toml");
    std::fs::write(&file, scenario(requests, kind))?;
    let out = dir.join("out");
    let args: Vec<std::ffi::OsString> = vec![
        file.into(),
        "--base-url".into(),
        server.base_url().into(),
        "--out".into(),
        out.clone().into(),
        "--no-progress".into(),
        "--tokenizer".into(),
        "estimate".into(),
    ];
    let (exit, _) =
        bench.measure(&server, std::path::Path::new(super::CLIENT), &args, &dir, Duration::from_secs(600))?;
    let artifact = super::read_artifact(&out);
    let bodies: Vec<f64> = artifact.request_timings.iter().filter_map(|r| r["media"]["body_bytes"].as_f64()).collect();
    let body = if bodies.is_empty() { 0.0 } else { bodies.iter().sum::<f64>() / bodies.len() as f64 };
    bench.stop(server);
    Ok((exit, artifact.completed, body))
}

fn side(bench: &Bench, requests: u64, kind: Kind) -> io::Result<Side> {
    let (n, completed_n, body) = one(bench, requests, kind)?;
    let (single, _, _) = one(bench, 1, kind)?;
    let per = |a: f64, b: f64| (a - b) / (requests - 1) as f64 * 1e6;
    let marginal = per(cpu(&n), cpu(&single));
    Ok(Side {
        marginal_user_us_per_request: per(n.user_s, single.user_s),
        marginal_sys_us_per_request: per(n.sys_s, single.sys_s),
        body_bytes_per_request: body,
        requests,
        completed_n,
        cpu_s_n: cpu(&n),
        cpu_s_one: cpu(&single),
        marginal_cpu_us_per_request: marginal,
        total_cpu_us_per_request: cpu(&n) / requests as f64 * 1e6,
        peak_rss_mib: n.max_rss_kib as f64 / 1024.0,
    })
}

/// The row: text first, then media, each at `requests`.
pub fn media_row(bench: &Bench, quick: bool) -> io::Result<MediaRow> {
    let requests = if quick { 400 } else { 4000 };
    let text = side(bench, requests, Kind::Text)?;
    let jpeg_1024 = side(bench, requests, Kind::Jpeg)?;
    let jpeg_1024_http = side(bench, requests, Kind::JpegByUrl)?;
    let ratio = jpeg_1024.marginal_cpu_us_per_request / text.marginal_cpu_us_per_request;
    let ratio_http = jpeg_1024_http.marginal_cpu_us_per_request / text.marginal_cpu_us_per_request;
    Ok(MediaRow { met: ratio <= TARGET_RATIO, text, jpeg_1024, jpeg_1024_http, ratio, ratio_http })
}

pub fn print_media(row: &MediaRow) {
    println!(
        "== Media: CPU per request, one 1024x1024 JPEG against text only (c={CONCURRENCY}, {OUTPUT_TOKENS} output tokens) =="
    );
    for (name, s) in
        [("text only", &row.text), ("1x 1024x1024 JPEG", &row.jpeg_1024), ("same, by URL", &row.jpeg_1024_http)]
    {
        println!(
            "{name:<18} {} requests ({} completed): marginal {:.1} µs/request (user {:.1}, sys {:.1}; body {:.0} B), total {:.1} µs/request (CPU {:.2} s; one request {:.2} s), peak RSS {:.1} MiB",
            s.requests,
            s.completed_n,
            s.marginal_cpu_us_per_request,
            s.marginal_user_us_per_request,
            s.marginal_sys_us_per_request,
            s.body_bytes_per_request,
            s.total_cpu_us_per_request,
            s.cpu_s_n,
            s.cpu_s_one,
            s.peak_rss_mib
        );
    }
    println!(
        "media ÷ text, marginal CPU per request: {:.2}x (target ≤ {TARGET_RATIO}x: {}); by URL ÷ text: {:.2}x",
        row.ratio,
        if row.met { "met" } else { "NOT MET" },
        row.ratio_http
    );
    println!();
}
