//! The real binary against a hostile server (`common::hostile`): streams that never produce
//! output, never end, or go on after `[DONE]`; secrets echoed in every field; redirects; absurd
//! `Retry-After` values; implausible usage; pooled connections closed under the client; a
//! server that does not speak HTTP/2. Every run must end without a panic, within its
//! configured timeouts (each run is bounded and killed if it is not), account for every request
//! in an artifact that `check_artifact` accepts, and write no secret anywhere.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::hostile::{
    Hostile, Reply, Request, Step, content_chunk, done, event, finish_chunk, json_answer, models_answer, role_chunk,
    sse_head, stream_body, usage_chunk,
};
use common::{anvil, artifacts, check_artifact, text};
use serde_json::{Value, json};

const SECOND: Duration = Duration::from_secs(1);

/// What one bounded run of the binary left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    out: tempfile::TempDir,
    elapsed: Duration,
}

impl Run {
    fn artifacts(&self) -> Vec<Value> {
        artifacts(self.out.path()).iter().map(|p| check_artifact(p)).collect()
    }
    fn one(&self) -> Value {
        let mut all = self.artifacts();
        assert_eq!(all.len(), 1, "one artifact expected\n{}", self.stderr);
        all.remove(0)
    }
}

/// A scenario for `requests` requests at `concurrency`, with extra lines for `[run]`,
/// `[workload]` and `[client]`.
fn scenario(dir: &Path, requests: u64, concurrency: u32, run: &str, workload: &str, client: &str) -> PathBuf {
    let connect = if client.contains("connect_timeout") { "" } else { "connect_timeout = \"2s\"\n" };
    let text = format!(
        "[target]\nmodel = \"m\"\n\n[run]\nrequests = {requests}\nseed = 5\n{run}\n\n[load]\nconcurrency = {concurrency}\n\n\
         [workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 16\n{workload}\n\n\
         [client]\n{connect}{client}\n"
    );
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Run the binary against `base_url` (killed if it outlives `limit`), its records kept in the
/// output directory so that every file it writes can be searched.
async fn run_bounded(
    scenario_text: impl FnOnce(&Path) -> PathBuf,
    base_url: &str,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Run {
    let out = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let path = scenario_text(logs.path());
    let mut cmd: Command = anvil();
    cmd.arg(&path)
        .arg("--base-url")
        .arg(base_url)
        .arg("--out")
        .arg(out.path())
        .arg("--records")
        .arg(out.path().join("records.ndjson"))
        .arg("--quiet")
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(logs.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(logs.path().join("stderr")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("the binary starts");
    let code = tokio::task::spawn_blocking(move || {
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return Ok(status.code());
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                return Err(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    let elapsed = started.elapsed();
    let stdout = text(&std::fs::read(logs.path().join("stdout")).unwrap());
    let stderr = text(&std::fs::read(logs.path().join("stderr")).unwrap());
    let code = code.unwrap_or_else(|()| panic!("the run did not end within {limit:?}\nstderr:\n{stderr}"));
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    Run { code, stdout, stderr, out, elapsed }
}

/// Every request the server saw is accounted for (the artifacts' attempts, retries and
/// stale-connection sends included), every artifact and the records file pass the contract
/// checks, and no secret is in stdout, stderr or any file written.
fn assert_sound(run: &Run, server: &Hostile, secrets: &[&str]) {
    common::check_records(&run.out.path().join("records.ndjson"));
    let mut requests = 0;
    let mut sends = 0;
    for a in run.artifacts() {
        requests += a["requests"].as_u64().unwrap();
        for r in a["request_timings"].as_array().unwrap().iter().chain(a["failures"].as_array().unwrap()) {
            sends += 1 + r["retries"].as_u64().unwrap() + r["stale_connection_retries"].as_u64().unwrap();
        }
    }
    let seen = server.streamed();
    assert!(seen >= requests && seen <= sends, "server saw {seen} requests; artifacts have {requests} ({sends} sends)");
    for secret in secrets {
        assert!(
            !run.stdout.contains(secret) && !run.stderr.contains(secret),
            "{secret:?} on the console:\n{}\n{}",
            run.stdout,
            run.stderr
        );
        for file in files(run.out.path()) {
            let bytes = std::fs::read(&file).unwrap();
            if let Some(at) = bytes.windows(secret.len()).position(|w| w == secret.as_bytes()) {
                let around = text(&bytes[at.saturating_sub(1500)..(at + 100).min(bytes.len())]);
                panic!("{secret:?} written to {}: …{around}…", file.display());
            }
        }
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(files(&path)) } else { out.push(path) }
    }
    out
}

fn failures(a: &Value) -> &Vec<Value> {
    a["failures"].as_array().unwrap()
}

fn kinds(a: &Value) -> Vec<String> {
    failures(a).iter().map(|f| f["error_kind"].as_str().unwrap().to_string()).collect()
}

/// `/models` lists the model; generation requests get `f`.
fn serve(f: impl Fn(&Request) -> Vec<Step> + Send + Sync + 'static) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |r: &Request| {
        if r.is_generation() {
            Reply::close(f(r))
        } else {
            Reply::close(vec![Step::Send(models_answer(&["m"], false))])
        }
    }
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_and_empty_chunks_do_not_defuse_the_first_output_deadline() {
    let server = Hostile::start(serve(|r| {
        if r.number % 2 == 0 {
            vec![
                Step::Send(sse_head()),
                Step::Repeat { bytes: b": keep-alive\n\n".to_vec(), every: SECOND / 20, total: SECOND * 30 },
            ]
        } else {
            vec![
                Step::Send(cat(&[sse_head(), role_chunk()])),
                Step::Flood { bytes: event(&json!({"choices": []})), total: SECOND * 30 },
            ]
        }
    }))
    .await;
    let client = "first_byte_timeout = \"1s\"\nidle_timeout = \"300ms\"\nrequest_timeout = \"30s\"";
    let run = run_bounded(
        |d| scenario(d, 4, 2, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    assert_eq!(run.code, Some(1), "no request succeeded: {}", run.stderr);
    let a = run.one();
    assert_eq!(kinds(&a), vec!["first_byte_timeout"; 4]);
    for f in failures(&a) {
        let ms = f["elapsed_ms"].as_f64().unwrap();
        assert!((1000.0..4000.0).contains(&ms), "timed out after {ms} ms, not at the 1 s deadline");
    }
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_only_first_chunk_keeps_the_first_output_deadline() {
    // The first output comes 1 s after a role-only chunk: late by the 500 ms idle timeout, on
    // time by the 2 s first-output deadline, which is the one that applies.
    let server = Hostile::start(serve(|r| {
        let late = vec![Step::Send(cat(&[sse_head(), role_chunk()])), Step::Sleep(SECOND)];
        if r.number == 0 {
            [late, vec![Step::Send(stream_body(4))]].concat()
        } else {
            vec![Step::Send(cat(&[sse_head(), role_chunk()])), Step::Sleep(SECOND * 30)]
        }
    }))
    .await;
    let client = "first_byte_timeout = \"2s\"\nidle_timeout = \"500ms\"\nrequest_timeout = \"30s\"";
    let run = run_bounded(
        |d| scenario(d, 2, 1, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(a["completed"], 1, "{}", serde_json::to_string_pretty(&a["failures"]).unwrap());
    assert_eq!(kinds(&a), vec!["first_byte_timeout"]);
    let ms = failures(&a)[0]["elapsed_ms"].as_f64().unwrap();
    assert!(ms >= 2000.0, "the first-output deadline is 2 s, not the idle timeout: failed after {ms} ms");
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_counts_progress_not_bytes() {
    let server = Hostile::start(serve(|_| {
        vec![
            Step::Send(cat(&[sse_head(), role_chunk(), content_chunk("hi")])),
            Step::Repeat {
                bytes: cat(&[b": ping\n\n".to_vec(), event(&json!({"choices": []}))]),
                every: SECOND / 20,
                total: SECOND * 30,
            },
        ]
    }))
    .await;
    let client = "first_byte_timeout = \"5s\"\nidle_timeout = \"500ms\"\nrequest_timeout = \"30s\"";
    let run = run_bounded(
        |d| scenario(d, 2, 2, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(kinds(&a), vec!["idle_timeout"; 2]);
    for f in failures(&a) {
        let ms = f["elapsed_ms"].as_f64().unwrap();
        assert!((500.0..3000.0).contains(&ms), "idle timeout after {ms} ms");
        assert_eq!(f["content_chunks"], 1);
    }
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_done_do_not_keep_a_request_open() {
    let server = Hostile::start(serve(|_| {
        vec![
            Step::Send(cat(&[sse_head(), stream_body(4)])),
            Step::Repeat { bytes: b"data: junk that is no JSON\n\n".to_vec(), every: SECOND / 50, total: SECOND * 30 },
        ]
    }))
    .await;
    let client = "first_byte_timeout = \"5s\"\nidle_timeout = \"5s\"\nrequest_timeout = \"30s\"";
    let run = run_bounded(
        |d| scenario(d, 3, 1, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let a = run.one();
    assert_eq!(a["completed"], 3);
    for r in a["request_timings"].as_array().unwrap() {
        assert!(r["e2e_ms"].as_f64().unwrap() < 1000.0, "complete at [DONE]: {}", r["e2e_ms"]);
    }
    // Three requests, each released 1 s after its [DONE] at the latest, not after 30 s of junk.
    assert!(run.elapsed < SECOND * 20, "the run took {:?}", run.elapsed);
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_footer_after_a_complete_response_is_not_malformed() {
    let server = Hostile::start(serve(|r| {
        let body = if r.number % 2 == 0 {
            cat(&[stream_body(4), b"<!-- served by edge-proxy -->\n\n".to_vec()])
        } else {
            // Finish and usage, then a footer where [DONE] should be.
            cat(&[
                role_chunk(),
                content_chunk("a"),
                content_chunk(" b"),
                finish_chunk("stop"),
                usage_chunk(10, 2),
                b"X-Proxy: edge\n".to_vec(),
            ])
        };
        vec![Step::Send(cat(&[sse_head(), body]))]
    }))
    .await;
    let run = run_bounded(
        |d| scenario(d, 4, 2, "", "canaries = false", "first_byte_timeout = \"5s\"\nidle_timeout = \"5s\""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!((a["completed"].as_u64(), kinds(&a)), (Some(4), Vec::<String>::new()));
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_never_ends_meets_the_request_timeout() {
    let server = Hostile::start(serve(|_| {
        vec![
            Step::Send(cat(&[sse_head(), role_chunk()])),
            Step::Repeat { bytes: content_chunk(" word"), every: SECOND / 100, total: SECOND * 30 },
        ]
    }))
    .await;
    let client = "first_byte_timeout = \"5s\"\nidle_timeout = \"1s\"\nrequest_timeout = \"2s\"";
    let run = run_bounded(
        |d| scenario(d, 2, 2, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(kinds(&a), vec!["request_timeout"; 2]);
    for f in failures(&a) {
        let ms = f["elapsed_ms"].as_f64().unwrap();
        assert!((2000.0..5000.0).contains(&ms), "request timeout after {ms} ms");
        assert!(f["content_chunks"].as_u64().unwrap() > 10);
    }
    assert_sound(&run, &server, &[]);
}

fn too_many_requests(retry_after: &'static [&'static str]) -> impl Fn(&Request) -> Reply + Send + Sync {
    serve(move |r| {
        let value = retry_after[r.number as usize % retry_after.len()];
        let body = json!({"error": {"message": "slow down", "type": "rate_limit"}});
        vec![Step::Send(json_answer("429 Too Many Requests", &format!("retry-after: {value}\r\n"), &body, false))]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_retry_after_values_never_panic() {
    const VALUES: &[&str] =
        &["1e20", "1.7e308", "inf", "-1", "NaN", "99999999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT"];
    // Retries off: the value is read and ignored.
    let server = Hostile::start(too_many_requests(VALUES)).await;
    let run = run_bounded(
        |d| scenario(d, 7, 2, "", "canaries = false", ""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    assert_eq!(kinds(&run.one()), vec!["http_429"; 7]);
    assert_sound(&run, &server, &[]);

    // Retries on, unusable values: the backoff applies.
    const GARBAGE: &[&str] = &["inf", "-1", "NaN", "Wed, 21 Oct 2015 07:28:00 GMT"];
    let server = Hostile::start(too_many_requests(GARBAGE)).await;
    let client = "retries = 1\nretry_on = [\"http_429\"]\nretry_backoff = \"10ms\"";
    let run = run_bounded(
        |d| scenario(d, 4, 2, "", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(kinds(&a), vec!["http_429"; 4]);
    assert!(failures(&a).iter().all(|f| f["retries"] == 1 && f["retried_errors"] == json!(["http_429"])));
    assert_eq!(server.streamed(), 8);
    assert_sound(&run, &server, &[]);

    // Retries on, `Retry-After: 1e20`: the wait is capped, and the run's end cuts it.
    let server = Hostile::start(too_many_requests(&["1e20"])).await;
    let client = "retries = 1\nretry_on = [\"http_429\"]";
    let run = run_bounded(
        |d| scenario(d, 1_000, 2, "duration = \"1s\"\ngrace = \"1s\"", "canaries = false", client),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(kinds(&a), vec!["http_429"; 2]);
    assert!(run.elapsed < SECOND * 20, "the capped wait was cut: {:?}", run.elapsed);
    assert_sound(&run, &server, &[]);
}

const API_KEY: &str = "sk-hostile-4242-secret";
const URL_PASSWORD: &str = "pw-hostile-777";
const URL_USER: &str = "alice-hostile";
const QUERY_TOKEN: &str = "qs-hostile-999";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_echoed_in_every_field_are_never_written() {
    let server = Hostile::start(|r: &Request| {
        if !r.is_generation() {
            // Model ids that echo the secrets beside the scenario's own (a list without it stops the
            // run: tests/meet_server.rs holds that message to the same rule).
            let ids = ["m".to_string(), format!("m-{API_KEY}"), format!("{URL_PASSWORD}-{QUERY_TOKEN}"), "x".repeat(5000)];
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            return Reply::close(vec![Step::Send(models_answer(&ids, false))]);
        }
        let huge = "t".repeat(10_000);
        let body = match r.number % 9 {
            0 => cat(&[sse_head(), role_chunk(), content_chunk("a"), finish_chunk(API_KEY), usage_chunk(10, 1), done()]),
            1 => cat(&[sse_head(), role_chunk(), content_chunk("a"), finish_chunk(&huge), usage_chunk(10, 1), done()]),
            2 => cat(&[
                sse_head(),
                role_chunk(),
                event(&json!({"error": {"type": API_KEY, "code": API_KEY, "message": format!("bad key {API_KEY}")}})),
            ]),
            3 => cat(&[sse_head(), event(&json!({"error": {"type": huge, "code": 123, "message": huge}}))]),
            4 => json_answer(
                "401 Unauthorized",
                "",
                &json!({"error": {"message": format!("Incorrect API key provided: {API_KEY}"), "type": "invalid_request_error", "code": API_KEY}}),
                false,
            ),
            5 => json_answer(
                "400 Bad Request",
                "",
                &json!({"object": "error", "message": format!("user {URL_USER} password {URL_PASSWORD}"), "type": URL_PASSWORD, "code": 400}),
                false,
            ),
            6 => json_answer(
                "307 Temporary Redirect",
                &format!("location: http://{URL_USER}:{URL_PASSWORD}@elsewhere.invalid/v1?key={API_KEY}\r\n"),
                &json!({}),
                false,
            ),
            7 => cat(&[sse_head(), role_chunk(), content_chunk(API_KEY), finish_chunk(QUERY_TOKEN), usage_chunk(10, 1), done()]),
            _ => cat(&[sse_head(), role_chunk(), content_chunk("a"), finish_chunk(&format!("\u{7}stop\r\n{huge}")), done()]),
        };
        Reply::close(vec![Step::Send(body)])
    })
    .await;
    let url = format!("http://{URL_USER}:{URL_PASSWORD}@{}/v1?api_key={QUERY_TOKEN}", server.addr());
    let run = run_bounded(
        |d| {
            let mut text = std::fs::read_to_string(scenario(d, 18, 3, "", "canaries = false", "")).unwrap();
            text = text.replace("model = \"m\"", "model = \"m\"\napi_key_env = \"ANVIL_HOSTILE_KEY\"");
            std::fs::write(d.join("scenario.toml"), text).unwrap();
            d.join("scenario.toml")
        },
        &url,
        &["--tokenizer", "estimate"],
        &[("ANVIL_HOSTILE_KEY", API_KEY)],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(a["requests"], 18);
    assert_eq!(a["base_url"], format!("http://{}/v1?api_key=[redacted]", server.addr()));
    for f in failures(&a) {
        assert!(f["message"].as_str().unwrap().chars().count() <= 201, "{f}");
        if let Some(t) = f["server_error_type"].as_str() {
            assert!(t.chars().count() <= 65, "server_error_type of {} characters", t.chars().count());
        }
    }
    for r in a["request_timings"].as_array().unwrap() {
        if let Some(reason) = r["finish_reason"].as_str() {
            assert!(reason.chars().count() <= 65 && !reason.chars().any(char::is_control), "{reason:?}");
        }
    }
    assert!(kinds(&a).contains(&"redirect".to_string()));
    assert_sound(&run, &server, &[API_KEY, URL_PASSWORD, URL_USER, QUERY_TOKEN]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_recorded_not_followed() {
    let server = Hostile::start(serve(|r| {
        let status = ["301 Moved Permanently", "302 Found", "307 Temporary Redirect", "308 Permanent Redirect"]
            [r.number as usize % 4];
        let location =
            "location: http://user:pw-redirect-1@elsewhere.invalid:9/v1/chat/completions?token=tok-redirect-2\r\n";
        vec![Step::Send(json_answer(status, location, &json!({}), false))]
    }))
    .await;
    let run = run_bounded(
        |d| scenario(d, 8, 2, "", "canaries = false", ""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(kinds(&a), vec!["redirect"; 8]);
    let mut statuses: Vec<u64> = failures(&a).iter().map(|f| f["http_status"].as_u64().unwrap()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, vec![301, 301, 302, 302, 307, 307, 308, 308]);
    for f in failures(&a) {
        let m = f["message"].as_str().unwrap();
        assert!(m.contains("http://elsewhere.invalid:9/v1/chat/completions?token=[redacted]"), "{m}");
    }
    assert_sound(&run, &server, &["pw-redirect-1", "tok-redirect-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_huge_usage_are_recorded_with_both_counts() {
    let server = Hostile::start(serve(|r| {
        let mut body = cat(&[sse_head(), role_chunk()]);
        for _ in 0..16 {
            body.extend(content_chunk(" w"));
        }
        // A count far below what streamed is set aside; one no request could produce (a
        // million tokens for a 16-token budget and a prompt of a few hundred bytes) is rejected.
        let usage = if r.number % 2 == 0 { usage_chunk(100, 0) } else { usage_chunk(1_000_000, 1_000_000) };
        body.extend(cat(&[finish_chunk("length"), usage, done()]));
        vec![Step::Send(body)]
    }))
    .await;
    let run = run_bounded(
        |d| scenario(d, 4, 2, "", "canaries = false", ""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!(a["completed"], 4);
    let mut set_aside = 0;
    for r in a["request_timings"].as_array().unwrap() {
        if r.get("usage_completion_tokens").is_some() {
            set_aside += 1;
            assert_eq!((&r["usage_completion_tokens"], &r["output_tokens"]), (&json!(0), &json!(16)));
            assert_eq!(r["output_token_source"], "chunk_count");
        } else {
            assert_eq!((&r["output_tokens"], &r["output_token_source"]), (&json!(16), &json!("chunk_count")));
            assert_eq!(
                (&r["exclusion_reason"], &r["usage_implausible"]["field"]),
                (&json!("usage_implausible"), &json!("completion_tokens"))
            );
            assert!(r["prompt_tokens"].is_null());
        }
    }
    assert_eq!(set_aside, 2);
    let codes: Vec<&str> = a["warnings"].as_array().unwrap().iter().filter_map(|w| w["code"].as_str()).collect();
    assert!(codes.contains(&"usage_undercounted") && codes.contains(&"usage_rejected"), "{codes:?}");
    assert!(!codes.contains(&"no_usage_reported"), "usage was reported, only not believed: {codes:?}");
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_are_checked_over_the_whole_response() {
    let server = Hostile::start(serve(|r| {
        let marker = r.canary().unwrap_or_default();
        let (head, tail) = marker.split_at(marker.len().min(5));
        let mut body = cat(&[sse_head(), role_chunk(), content_chunk(head), content_chunk(tail)]);
        // Another request's marker: this run's seed and the next index.
        let index: u64 = marker.rsplit('_').next().and_then(|i| i.parse().ok()).unwrap_or(0);
        let other = format!(" ANVIL_REQ_5_{:05} x", (index + 1) % 3);
        for i in 0..600 {
            // 12,000 visible characters, and for every third request another request's marker
            // beyond the 8,192-character capture.
            let text = if r.number % 3 == 2 && i == 500 { other.as_str() } else { " the river ran north" };
            body.extend(content_chunk(text));
        }
        body.extend(cat(&[finish_chunk("stop"), usage_chunk(300, 603), done()]));
        vec![Step::Send(body)]
    }))
    .await;
    let run = run_bounded(
        |d| scenario(d, 3, 1, "", "canaries = true", ""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    let canaries: Vec<&Value> = a["request_timings"].as_array().unwrap().iter().map(|r| &r["request_canary"]).collect();
    assert_eq!(canaries.iter().filter(|c| c["passed"] == true).count(), 2, "{canaries:?}");
    let failed: Vec<&&Value> = canaries.iter().filter(|c| c["passed"] == false).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (&failed[0]["failure_reason"], &failed[0]["foreign_marker_count"]),
        (&json!("foreign_marker"), &json!(1))
    );
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibration_probes_accept_a_streamed_answer_and_say_what_arrived() {
    // A server that answers `stream: false` with an event stream (usage included).
    let server = Hostile::start(serve(|r| {
        if r.streamed() {
            vec![Step::Send(cat(&[sse_head(), stream_body(4)]))]
        } else {
            let tokens = (r.prompt_chars() / 4) as u64;
            vec![Step::Send(cat(&[
                sse_head(),
                role_chunk(),
                content_chunk("x"),
                finish_chunk("length"),
                usage_chunk(tokens, 1),
                done(),
            ]))]
        }
    }))
    .await;
    let run =
        run_bounded(|d| scenario(d, 2, 1, "", "canaries = false", ""), &server.base_url(), &[], &[], SECOND * 60).await;
    let a = run.one();
    let sizing = &a["prompt_sizing"];
    assert_eq!(sizing["fallback_reason"], Value::Null, "{sizing}");
    let probes = sizing["probes"].as_array().unwrap();
    assert!(probes.len() >= 2 && probes.iter().all(|p| p["server_prompt_tokens"].is_u64()), "{sizing}");
    assert_eq!(server.unstreamed(), probes.len() as u64);
    assert_sound(&run, &server, &[]);

    // A server whose probe answers are an HTML page: the fallback says what arrived.
    let server = Hostile::start(serve(|r| {
        if r.streamed() {
            vec![Step::Send(cat(&[sse_head(), stream_body(4)]))]
        } else {
            let page = "<html><body>gateway says hello</body></html>";
            vec![Step::Send(
                format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}", page.len())
                    .into_bytes(),
            )]
        }
    }))
    .await;
    let run =
        run_bounded(|d| scenario(d, 2, 1, "", "canaries = false", ""), &server.base_url(), &[], &[], SECOND * 60).await;
    let a = run.one();
    let error = a["prompt_sizing"]["probes"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("text/html") && error.contains("neither JSON nor an event stream"), "{error}");
    assert!(a["prompt_sizing"]["fallback_reason"].is_string());
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_against_an_http1_only_server_is_refused_before_anything_is_sent() {
    let server = Hostile::start(serve(|_| vec![Step::Send(cat(&[sse_head(), stream_body(4)]))])).await;
    let run = run_bounded(
        |d| scenario(d, 4, 2, "", "canaries = false", "http2 = true"),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("http2 = false"), "{}", run.stderr);
    assert_eq!((server.streamed(), server.unstreamed()), (0, 0));
    assert!(artifacts(run.out.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_models_endpoint_is_reported_as_hanging() {
    let server = Hostile::start(|r: &Request| {
        if r.is_generation() {
            Reply::close(vec![Step::Send(cat(&[sse_head(), stream_body(4)]))])
        } else {
            Reply::close(vec![Step::Sleep(SECOND * 50)])
        }
    })
    .await;
    let run = run_bounded(
        |d| scenario(d, 2, 1, "", "canaries = false", "connect_timeout = \"1s\""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("did not answer within 6s"), "{}", run.stderr);
    assert!(!run.stderr.contains("cannot reach"), "{}", run.stderr);
    assert_eq!(server.streamed(), 0);
}

/// A server that answers once per connection with keep-alive headers, then closes the
/// connection on its next request without a byte of answer: llama.cpp's behaviour, made
/// deterministic.
fn one_answer_per_connection(r: &Request) -> Reply {
    if r.on_connection > 0 {
        return Reply::hang_up();
    }
    if !r.is_generation() {
        return Reply::keep_alive(vec![Step::Send(models_answer(&["m"], true))]);
    }
    let body = stream_body(4);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n",
        body.len()
    );
    Reply::keep_alive(vec![Step::Send(cat(&[head.into_bytes(), body]))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_under_the_pool_are_retried_on_fresh_ones() {
    let server = Hostile::start(one_answer_per_connection).await;
    let run = run_bounded(
        |d| scenario(d, 12, 3, "", "canaries = false", ""),
        &server.base_url(),
        &["--tokenizer", "estimate"],
        &[],
        SECOND * 40,
    )
    .await;
    let a = run.one();
    assert_eq!((a["completed"].as_u64(), kinds(&a)), (Some(12), Vec::<String>::new()));
    let stale: u64 =
        a["request_timings"].as_array().unwrap().iter().map(|r| r["stale_connection_retries"].as_u64().unwrap()).sum();
    assert!(stale > 0, "the pooled connections were closed under the client");
    assert_sound(&run, &server, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_connection_retry_never_takes_another_pooled_connection() {
    // The property is only exercised when the first attempt lands on a warmed connection. The
    // pool takes a connection back only once hyper has seen it ready for another request (on a
    // task of its own), so on a loaded machine a request can still find the pool empty and open
    // a connection of its own, which says nothing about the retry: such a round is run again,
    // a bounded number of times.
    for round in 1..=5 {
        match stale_retry_round().await {
            Some(()) => return,
            None => eprintln!("round {round}: the request opened its own connection; again"),
        }
    }
    panic!("in five rounds the request never landed on a warmed connection");
}

/// One round: `None` when the request did not land on a warmed connection.
async fn stale_retry_round() -> Option<()> {
    use anvil_load::plan::scenario::{Overrides, Scenario};
    use anvil_load::request::record::{Dispatch, Outcome};
    use anvil_load::request::worker::Client;
    use anvil_load::request::workload::PreparedRequest;

    let server = Hostile::start(one_answer_per_connection).await;
    let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
    let s = Scenario::from_toml(Path::new("t.toml"), text, &Overrides::default()).unwrap();
    let base = server.base_url();
    let client = Client::new(&format!("{base}/chat/completions"), None, s.client.clone(), 4).unwrap();
    // Pooled connections, each of which the server will close on its next request. Asked for
    // three; a small answer can put its connection back in the pool before the last connect
    // finishes, which hands that request the same connection, so two is the least the retry
    // below needs (another pooled connection it must not take).
    client.warm_connections(&format!("{base}/models"), 3).await;
    let warm = server.connections();
    assert!((2..=3).contains(&warm), "{warm} connections warmed");
    // A connection goes back to the pool just after its body was read; let all three get there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let req = PreparedRequest {
        index: 0,
        planned_context_tokens: 128,
        prompt_target_tokens: 128,
        canary: None,
        response_words: None,
        body: bytes::Bytes::from_static(b"{\"stream\":true}"),
        exchange: None,
        structured: None,
        replay: None,
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let outcome = client.execute(&req, Dispatch::closed(tokio::time::Instant::now()), &cancel).await;
    let Outcome::Completed(c) = outcome else { panic!("the request failed: {outcome:?}") };
    if c.stale_connection_retries == 0 {
        // Answered on a connection of its own (the server saw one more), or on a warmed one that
        // had answered nothing yet (a warm-up request that opened it took another's answer):
        // neither says anything about the retry.
        let seen = server.connections();
        assert!(seen == warm || seen == warm + 1, "{seen} connections after {warm} warmed");
        return None;
    }
    assert_eq!(c.stale_connection_retries, 1);
    assert_eq!(server.connections(), warm + 1, "the retry opened a connection of its own");
    Some(())
}

#[test]
fn request_timeout_defaults_to_the_first_output_deadline_plus_a_second_per_token() {
    use anvil_load::plan::scenario::{Overrides, Scenario};
    let load = |client: &str| {
        let text = format!(
            "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 256\n[client]\n{client}\n"
        );
        Scenario::from_toml(Path::new("t.toml"), &text, &Overrides::default())
    };
    let s = load("").unwrap();
    assert_eq!(s.client.request, Duration::from_secs(600 + 256));
    // Not written when derived, so the fingerprint of a scenario without it is unchanged.
    assert!(serde_json::to_value(&s).unwrap()["client"].get("request_timeout").is_none());
    let s = load("first_byte_timeout = \"1m\"\nrequest_timeout = \"90s\"").unwrap();
    assert_eq!(s.client.request, Duration::from_secs(90));
    assert_eq!(serde_json::to_value(&s).unwrap()["client"]["request_timeout"], "1m 30s");
    let e = load("request_timeout = \"0s\"").unwrap_err().to_string();
    assert!(e.contains("client.request_timeout"), "{e}");
}
