//! Secrets and the server's metrics, through the real binary: a hostile server that echoes the
//! run's secrets (the API key, the base URL's password and query token, the metrics URL's
//! `?token=`) in every place it can — metric names and labels, the backend header, `/models`
//! ids, finish reasons, error messages — gets none of them written anywhere: not in the
//! artifacts, the records, the server-metrics file, the artifacts `summarize` rebuilds, the
//! reports, stdout or stderr. A `/metrics` of 150,000 series is bounded per scrape and said so;
//! llama.cpp's cached-prompt counter reaches the server-metrics block as prefix-cache hits.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anvil_load::mock::{MockServer, Profile};
use common::hostile::{Hostile, Reply, Request, Step, content_chunk, done, finish_chunk, json_answer, models_answer};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::{Value, json};

const API_KEY: &str = "sk-secrets-5151-key";
/// Only letters, digits and `_`: it can stand in a metric's name.
const METRICS_TOKEN: &str = "mtok7734secret";
const BASE_TOKEN: &str = "btok-2288-secret";
const URL_PASSWORD: &str = "pw-4455-secret";
const BIDI: char = '\u{202E}';

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(files(&path)) } else { out.push(path) }
    }
    out
}

/// None of `needles` in `haystack` (named `what` in the failure).
fn assert_absent(what: &str, haystack: &[u8], needles: &[&str]) {
    for needle in needles {
        if let Some(at) = haystack.windows(needle.len()).position(|w| w == needle.as_bytes()) {
            let around = text(&haystack[at.saturating_sub(400)..(at + 100).min(haystack.len())]);
            panic!("{needle:?} written to {what}: …{around}…");
        }
    }
}

fn outputs_clean(label: &str, out: &Output, needles: &[&str]) {
    assert_absent(&format!("{label} stdout"), &out.stdout, needles);
    assert_absent(&format!("{label} stderr"), &out.stderr, needles);
    assert!(!text(&out.stderr).contains("panicked"), "{label}: a panic:\n{}", text(&out.stderr));
}

fn sse(extra_headers: &str, body: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n{extra_headers}\r\n"
    )
    .into_bytes();
    for part in body {
        out.extend_from_slice(part);
    }
    out
}

fn metrics_answer(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A `/metrics` that labels its series per API key, names one after the metrics URL's token,
/// quotes a URL with credentials and carries a bidi override.
fn echoing_metrics(scrape: u64) -> String {
    format!(
        "# TYPE gateway_requests_total counter\n\
         gateway_requests_total{{api_key=\"{API_KEY}\",route=\"/v1\"}} {scrape}\n\
         gateway_requests_total{{api_key=\"someone-else\",route=\"/v1\"}} 1\n\
         echo_{METRICS_TOKEN}_total {scrape}\n\
         gateway_upstream{{url=\"http://admin:{URL_PASSWORD}@10.0.0.9/v1?token={METRICS_TOKEN}\",note=\"a{BIDI}b\"}} 1\n\
         gateway_key_hint{{hint=\"{BASE_TOKEN}\"}} 2\n\
         vllm:num_requests_running 1\n\
         vllm:generation_tokens_total {}\n",
        scrape * 10
    )
}

/// The hostile server: `/models` lists the secrets instead of the model; `/metrics` echoes
/// them; every answer names a backend that is the API key and some echo them in their fields.
async fn echoing_server() -> Hostile {
    let scrapes = Arc::new(AtomicU64::new(0));
    Hostile::start(move |r: &Request| {
        if r.method == "GET" && r.target.starts_with("/metrics") {
            let n = scrapes.fetch_add(1, Ordering::Relaxed);
            return Reply::close(vec![Step::Send(metrics_answer(&echoing_metrics(n)))]);
        }
        if !r.is_generation() {
            // The scenario's own model among ids that echo secrets: the run goes on (a list without
            // it stops the run; that message is checked below).
            let ids = [
                "m".to_string(),
                format!("m-{API_KEY}"),
                format!("{BIDI}evil-model"),
                format!("echo-{METRICS_TOKEN}"),
                BASE_TOKEN.to_string(),
                "x".repeat(4000),
            ];
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            return Reply::close(vec![Step::Send(models_answer(&ids, false))]);
        }
        let backend = format!("x-backend: router-{API_KEY}-{METRICS_TOKEN}\r\n");
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 4}});
        let usage = format!("data: {usage}\n\n").into_bytes();
        let body = match r.number % 4 {
            // An error that quotes the metrics URL's token and the base URL's.
            3 => json_answer(
                "400 Bad Request",
                &backend,
                &json!({"error": {"message": format!("bad token {METRICS_TOKEN} or {BASE_TOKEN}"), "type": API_KEY}}),
                false,
            ),
            2 => sse(&backend, &[content_chunk("one two three four"), finish_chunk(API_KEY), usage, done()]),
            _ => sse(&backend, &[content_chunk("one two three four"), finish_chunk("stop"), usage, done()]),
        };
        Reply::close(vec![Step::Send(body)])
    })
    .await
}

fn sessions_scenario(dir: &Path, metrics_url: &str) -> PathBuf {
    let path = dir.join("secrets.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi_key_env = \"ANVIL_SECRETS_KEY\"\nmetrics_url = \"{metrics_url}\"\n\
             [run]\nseed = 3\nmetrics_interval = \"100ms\"\n\
             [load]\nsessions = 2\n\
             [workload]\nmax_context_tokens = 4096\nmax_tokens = 16\ncanaries = false\n\
             [workload.sessions]\nconversations = 4\nturns = 2\nfirst_tokens = 300\nuser_tokens = 50\noutput_tokens = 4\n\
             backend_header = \"x-backend\"\n\
             [client]\nconnect_timeout = \"2s\"\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_echoed_by_the_server_and_its_metrics_are_written_nowhere() {
    let server = echoing_server().await;
    let logs = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let metrics_url = format!("http://{}/metrics?token={METRICS_TOKEN}", server.addr());
    let base_url = format!("http://admin:{URL_PASSWORD}@{}/v1?api_key={BASE_TOKEN}", server.addr());
    let scenario = sessions_scenario(logs.path(), &metrics_url);
    let secrets = [API_KEY, METRICS_TOKEN, BASE_TOKEN, URL_PASSWORD, "\u{202E}"];

    // Validation prints the plan: the metrics URL without its token.
    let mut cmd = anvil();
    cmd.arg("validate").arg(&scenario).env("ANVIL_SECRETS_KEY", API_KEY);
    let validated = run(cmd).await;
    assert!(validated.status.success(), "{}", text(&validated.stderr));
    assert!(text(&validated.stdout).contains("token=[redacted]"), "{}", text(&validated.stdout));
    outputs_clean("validate", &validated, &secrets);

    let records = out.path().join("records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .args(["--base-url", &base_url, "--tokenizer", "estimate", "--out"])
        .arg(out.path())
        .arg("--records")
        .arg(&records)
        .env("ANVIL_SECRETS_KEY", API_KEY);
    let measured = run(cmd).await;
    assert_eq!(measured.status.code(), Some(0), "{}", text(&measured.stderr));
    outputs_clean("the run", &measured, &secrets);
    check_records(&records);

    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1, "{paths:?}");
    let a = check_artifact(&paths[0]);
    assert_eq!(a["base_url"], format!("http://{}/v1?api_key=[redacted]", server.addr()));
    let m = &a["server_metrics"];
    assert_eq!(m["url"], format!("http://{}/metrics?token=[redacted]", server.addr()));
    assert_eq!(a["scenario"]["target"]["metrics"]["endpoint"]["url"], m["url"], "{}", a["scenario"]["target"]);
    // A model the list does not hold stops the run, naming the ids as the sanitizer leaves them.
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .args(["--base-url", &base_url, "--model", "absent", "--out"])
        .arg(out.path().join("refused"))
        .env("ANVIL_SECRETS_KEY", API_KEY);
    let refused = run(cmd).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    outputs_clean("the refused run", &refused, &secrets);
    let message = text(&refused.stderr);
    assert!(message.contains("\"m\"") && message.contains("withheld") && message.contains(" evil-"), "{message}");
    // Backends were recorded, each through the sanitizer.
    let backends: Vec<&str> = a["request_timings"]
        .as_array()
        .unwrap()
        .iter()
        .chain(a["failures"].as_array().unwrap())
        .filter_map(|r| r["backend"].as_str())
        .collect();
    assert!(!backends.is_empty(), "no backend recorded");
    assert!(backends.iter().all(|b| b.contains("withheld")), "{backends:?}");

    // The scrape file keeps the series, with the secrets replaced where they stood.
    let scrapes = out.path().join(m["file"].as_str().expect("a scrape file"));
    let lines: Vec<Value> =
        std::fs::read_to_string(&scrapes).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() >= 2, "{lines:?}");
    let raw = lines.last().unwrap()["raw"].as_object().expect("raw series");
    assert!(raw.contains_key(r#"gateway_requests_total{api_key="[redacted]",route="/v1"}"#), "{raw:?}");
    assert!(raw.contains_key(r#"gateway_requests_total{api_key="someone-else",route="/v1"}"#), "{raw:?}");
    assert!(raw.contains_key("echo_[redacted]_total"), "{raw:?}");
    assert_eq!(m["counters"]["generation_tokens"].as_f64().map(|v| v > 0.0), Some(true), "{m}");

    // Artifacts rebuilt from the records, and both reports.
    let rebuilt = out.path().join("rebuilt");
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(&rebuilt);
    let summarized = run(cmd).await;
    assert!(summarized.status.success(), "{}", text(&summarized.stderr));
    outputs_clean("summarize", &summarized, &secrets);
    for path in artifacts(&rebuilt) {
        check_artifact(&path);
    }
    for format in ["html", "md"] {
        let mut cmd = anvil();
        cmd.arg("report")
            .arg(&paths[0])
            .arg("--format")
            .arg(format)
            .arg("--out")
            .arg(out.path().join(format!("report.{format}")));
        let reported = run(cmd).await;
        assert!(reported.status.success(), "{}", text(&reported.stderr));
        outputs_clean("report", &reported, &secrets);
    }

    let written = files(out.path());
    assert!(written.len() >= 6, "{written:?}");
    for file in written {
        assert_absent(&file.display().to_string(), &std::fs::read(&file).unwrap(), &secrets);
    }
}

/// The metrics URL's token never reaches the console, even when the URL is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_metrics_url_is_named_without_its_token() {
    let logs = tempfile::tempdir().unwrap();
    for url in [format!("http://h:99999/metrics?token={METRICS_TOKEN}"), format!("ftp://h/metrics?k={METRICS_TOKEN}")] {
        let scenario = sessions_scenario(logs.path(), &url);
        let mut cmd = anvil();
        cmd.arg("validate").arg(&scenario).env("ANVIL_SECRETS_KEY", API_KEY);
        let refused = run(cmd).await;
        assert_eq!(refused.status.code(), Some(2), "{url}: {}", text(&refused.stderr));
        assert!(text(&refused.stderr).contains("target.metrics_url"), "{}", text(&refused.stderr));
        outputs_clean("validate", &refused, &[METRICS_TOKEN]);
    }
}

/// Series in the 150,000-series exposition: far more than any engine's.
const HUGE: usize = 150_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_150000_series_metrics_endpoint_is_bounded_per_scrape_and_said() {
    let scrapes = Arc::new(AtomicU64::new(0));
    let bodies: Arc<Vec<String>> = Arc::new(
        (0..2)
            .map(|k| {
                let mut body = String::with_capacity(HUGE * 40);
                body.push_str("# TYPE noise gauge\n");
                for i in 0..HUGE {
                    body.push_str(&format!("noise{{shard=\"{}\",i=\"{i}\"}} 1\n", i % 7));
                }
                body.push_str(&format!("vllm:generation_tokens_total {}\n", 100 + 50 * k));
                body
            })
            .collect(),
    );
    let server = {
        let (scrapes, bodies) = (scrapes.clone(), bodies.clone());
        Hostile::start(move |r: &Request| {
            if r.method == "GET" && r.target.starts_with("/metrics") {
                let n = scrapes.fetch_add(1, Ordering::Relaxed).min(1) as usize;
                return Reply::close(vec![Step::Send(metrics_answer(&bodies[n]))]);
            }
            if !r.is_generation() {
                return Reply::close(vec![Step::Send(models_answer(&["m"], false))]);
            }
            let usage = json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 4}});
            Reply::close(vec![Step::Send(sse(
                "",
                &[
                    content_chunk("one two three four"),
                    finish_chunk("stop"),
                    format!("data: {usage}\n\n").into_bytes(),
                    done(),
                ],
            ))])
        })
        .await
    };
    let logs = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = logs.path().join("huge.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\nmetrics_url = \"http://{}/metrics\"\n[run]\nrequests = 4\nseed = 1\nmetrics_interval = \"10m\"\n\
             [load]\nconcurrency = 2\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\ncanaries = false\n",
            server.addr()
        ),
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg(&path).args(["--base-url", &server.base_url(), "--tokenizer", "estimate", "--out"]).arg(out.path());
    let measured = run(cmd).await;
    assert_eq!(measured.status.code(), Some(0), "{}", text(&measured.stderr));
    let a = check_artifact(&artifacts(out.path())[0]);
    let m = &a["server_metrics"];
    // Every series was read: the counter's increase is exact.
    assert_eq!(m["counters"]["generation_tokens"], 50.0, "{m}");
    let kept = anvil_load::request::server_metrics::MAX_RAW_SERIES;
    assert_eq!(m["raw_series_left_out"].as_u64(), Some((HUGE + 1 - kept) as u64), "{m}");
    let said = a["warnings"].as_array().unwrap().iter().find(|w| w["code"] == "server_metrics_series_left_out");
    let said = said.expect("the cap is said in warnings[]")["message"].as_str().unwrap().to_string();
    assert!(said.contains(&format!("{} series per scrape beyond the {kept} kept", HUGE + 1 - kept)), "{said}");
    assert!(text(&measured.stderr).contains("more series than the scrape file keeps"), "{}", text(&measured.stderr));
    let file = out.path().join(m["file"].as_str().unwrap());
    let bytes = std::fs::metadata(&file).unwrap().len();
    let lines: Vec<Value> =
        std::fs::read_to_string(&file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "start and end scrapes");
    for line in &lines {
        let raw = line["raw"].as_object().unwrap();
        assert_eq!(raw.len(), kept);
        assert_eq!(line["raw_left_out"].as_u64(), Some((HUGE + 1 - kept) as u64));
        // The engine's series is kept first, whatever sorts before it.
        assert!(raw.contains_key("vllm:generation_tokens_total"), "the known engine's series first");
    }
    // Two lines of at most the series kept: some hundreds of kilobytes, not the 4 MB exposed.
    eprintln!("two scrapes of {} bytes each wrote {bytes} bytes", bodies[0].len());
    assert!(bytes < 2 * 300 * 1024, "{bytes} bytes for two scrapes");
    assert!(bodies[0].len() > 4_000_000, "the exposition is {} bytes", bodies[0].len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_cached_prompt_tokens_are_the_prefix_cache_hits() {
    let server = MockServer::start(Profile::named("llamacpp").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama.toml");
    std::fs::write(
        &path,
        "[target]\nmodel = \"anvil-sim\"\nmetrics = true\n[run]\nrequests = 12\nseed = 2\nmetrics_interval = \"200ms\"\n\
         [load]\nconcurrency = 2\n[workload]\ncontext_tokens = 512\nmax_context_tokens = 8192\nmax_tokens = 16\n\
         prompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 256\n",
    )
    .unwrap();
    let before = server.stats();
    let mut cmd = anvil();
    cmd.arg(&path)
        .args(["--base-url", &server.base_url(), "--tokenizer", "estimate", "--out"])
        .arg(dir.path().join("out"));
    let measured = run(cmd).await;
    assert!(measured.status.success(), "{}", text(&measured.stderr));
    let after = server.stats();
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let m = &a["server_metrics"];
    assert_eq!(m["engine"], "llamacpp");
    let counter = |name: &str| m["counters"][name].as_f64().map(|v| v as u64);
    let cached = after.cached_tokens - before.cached_tokens;
    let prompt = after.prompt_tokens - before.prompt_tokens;
    assert!(cached > 0, "the shared prefix was cached");
    assert_eq!(counter("prefix_cache_hits"), Some(cached), "{m}");
    assert_eq!(counter("prefix_cache_queries"), Some(prompt), "{m}");
    assert_eq!(counter("prompt_tokens_computed"), Some(prompt - cached), "{m}");
    let rate = m["prefix_cache_hit_rate"].as_f64().expect("a hit rate");
    assert!((rate - cached as f64 / prompt as f64).abs() < 1e-9, "{rate}");
    let missing: Vec<&str> = m["missing"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!missing.contains(&"prefix_cache_hits") && !missing.contains(&"prefix_cache_queries"), "{missing:?}");
    // The report says the hit rate and no longer lists the cache counters as not exported.
    let report = dir.path().join("report.md");
    let mut cmd = anvil();
    cmd.arg("report").arg(artifacts(&dir.path().join("out"))[0].clone()).args(["--format", "md", "--out"]).arg(&report);
    let reported = run(cmd).await;
    assert!(reported.status.success(), "{}", text(&reported.stderr));
    // Read as text: whatever escaping the Markdown gives names, without its backslashes.
    let md = std::fs::read_to_string(&report).unwrap().replace('\\', "");
    assert!(md.contains("prefix-cache hit rate"), "{md}");
    for line in md.lines().filter(|l| l.contains("not exported")) {
        assert!(!line.contains("prefix_cache_hits") && !line.contains("prefix_cache_queries"), "{line}");
    }
    server.shutdown().await;
}
