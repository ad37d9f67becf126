//! Server metrics scraped for real: the simulator's `/metrics` during a run of the binary, with
//! the scraper's counter deltas compared with the simulator's own counts and with the client's
//! artifact; a second client, a restart and broken endpoints as a person would meet them.

mod common;

use std::path::Path;
use std::time::Duration;

use anvil_load::mock::{MockServer, MockStatsSnapshot, Profile};
use anvil_load::request::server_metrics::{
    ClientTokens, Engine, LevelServerMetrics, Norm, SERVER_COUNTS_TOLERANCE, Scraper, file_name, server_counts_differ,
    warnings,
};
use common::{anvil, artifacts, check_artifact, run, scenario, text};
use serde_json::{Value, json};
use tokio::time::Instant;

fn profile(name: &str) -> Profile {
    Profile::named(name).expect("profile exists")
}

fn metrics_url(server: &MockServer) -> String {
    format!("http://{}/metrics", server.addr())
}

/// What the client counted, from an artifact's records.
fn client_tokens(a: &Value) -> ClientTokens {
    let records = a["request_timings"].as_array().expect("records");
    let cached: u64 = records.iter().filter_map(|r| r.get("cached_tokens").and_then(Value::as_u64)).sum();
    ClientTokens {
        prompt_tokens: a["metrics"]["prompt_tokens"].as_u64().expect("prompt tokens"),
        cached_tokens: Some(cached),
        completion_tokens: a["metrics"]["output_tokens"].as_u64().expect("output tokens"),
        without_usage: a["failed"].as_u64().expect("failed"),
    }
}

/// Scrape `server` every 100 ms around one run of the smoke scenario against it, with `during`
/// running beside the binary. Returns the summary, the artifact, and the simulator's counts
/// before and after.
async fn scraped_run<F: std::future::Future<Output = ()>>(
    server: &MockServer,
    dir: &Path,
    during: F,
) -> (LevelServerMetrics, Value, MockStatsSnapshot, MockStatsSnapshot) {
    let scraper = Scraper::new(&metrics_url(server), Duration::from_millis(100), false).expect("client");
    let before = server.stats();
    let prepared = scraper.prepare("level", Some(dir.join(file_name("level")))).await;
    let level = prepared.start(Instant::now());
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml"))
        .args(["--base-url", &server.base_url(), "--tokenizer", "estimate", "--requests", "24"])
        .arg("--out")
        .arg(dir.join("out"));
    let (result, ()) = tokio::join!(run(cmd), during);
    assert!(result.status.success(), "{}", text(&result.stderr));
    let after = server.stats();
    let summary = level.finish().await;
    let paths = artifacts(&dir.join("out"));
    assert_eq!(paths.len(), 1);
    (summary, check_artifact(&paths[0]), before, after)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the scrape file exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

async fn extra_requests(base_url: String, n: usize) {
    let http = reqwest::Client::new();
    for i in 0..n {
        let body = json!({
            "model": "anvil-sim",
            "messages": [{"role": "user", "content": format!("another team's request number {i}")}],
            "max_tokens": 32,
        });
        let response = http
            .post(format!("{base_url}/chat/completions"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("sent");
        assert!(response.status().is_success());
        let _ = response.bytes().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_deltas_equal_the_simulators_own_counts() {
    let server = MockServer::start(profile("fast")).await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, a, before, after) = scraped_run(&server, dir.path(), async {}).await;

    assert!(m.complete && m.failed_scrapes == 0 && m.counter_resets == 0, "{m:#?}");
    assert!(m.scrapes >= 2);
    assert_eq!(m.engine, Some(Engine::Vllm));
    let delta = |f: fn(&MockStatsSnapshot) -> u64| (f(&after) - f(&before)) as f64;
    assert_eq!(m.counter(Norm::PromptTokens), Some(delta(|s| s.prompt_tokens)));
    assert_eq!(m.counter(Norm::GenerationTokens), Some(delta(|s| s.completion_tokens)));
    assert_eq!(m.counter(Norm::RequestsSucceeded), Some(delta(|s| s.requests_completed)));
    assert_eq!(m.counter(Norm::PrefixCacheQueries), Some(delta(|s| s.prompt_tokens)));
    assert_eq!(m.counter(Norm::PrefixCacheHits), Some(delta(|s| s.cached_tokens)));
    assert_eq!(m.counter(Norm::Preemptions), Some(0.0));
    assert_eq!(m.counter(Norm::RequestsSucceeded), Some(24.0));
    // The client's artifact agrees with the server, so there is nothing to warn about.
    let client = client_tokens(&a);
    assert_eq!(m.counter(Norm::PromptTokens), Some(client.prompt_tokens as f64));
    assert_eq!(m.counter(Norm::GenerationTokens), Some(client.completion_tokens as f64));
    assert!(warnings(&m, Some(&client)).is_empty(), "{:?}", warnings(&m, Some(&client)));
    let running = &m.gauges[&Norm::Running];
    assert_eq!((running.last, running.samples), (0.0, m.scrapes));
    assert!(m.missing.contains(&Norm::KvCacheUsage), "the simulator has no KV-cache gauge");

    let file = dir.path().join(file_name("level"));
    assert_eq!(m.file.as_deref(), Some("level.server-metrics.ndjson"));
    let lines = lines(&file);
    assert_eq!(lines.len() as u32, m.scrapes);
    assert_eq!(lines[0]["phase"], "start");
    assert!(lines[0]["t_s"].as_f64().expect("t") <= 0.0);
    assert_eq!(lines.last().expect("end")["phase"], "end");
    for line in &lines {
        assert_eq!(line["ok"], true, "{line}");
        assert_eq!(line["engine"], "vllm");
        assert!(line["raw"]["vllm:prompt_tokens_total{engine=\"0\",model_name=\"anvil-sim\"}"].is_number(), "{line}");
        assert!(line["normalized"]["running"].is_number(), "{line}");
    }
    let end_raw = &lines.last().expect("end")["raw"];
    assert_eq!(
        end_raw["vllm:generation_tokens_total{engine=\"0\",model_name=\"anvil-sim\"}"].as_f64(),
        Some(after.completion_tokens as f64)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_sending_load_triggers_server_counts_differ() {
    let server = MockServer::start(profile("fast")).await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, a, before, after) = scraped_run(&server, dir.path(), extra_requests(server.base_url(), 8)).await;
    assert!(m.complete);
    // The scraper still sees exactly what the server did, the extra requests included...
    assert_eq!(m.counter(Norm::GenerationTokens), Some((after.completion_tokens - before.completion_tokens) as f64));
    assert_eq!(m.counter(Norm::RequestsSucceeded), Some(24.0 + 8.0));
    // ...which is more than the client asked for.
    let client = client_tokens(&a);
    let differ = server_counts_differ(&m, &client, SERVER_COUNTS_TOLERANCE);
    assert!(differ.iter().any(|d| d.counter == "generation_tokens" && d.server > d.client), "{differ:?}");
    let w = warnings(&m, Some(&client));
    assert!(w.iter().any(|w| w.code() == "server_counts_differ"), "{w:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_names_count_evaluated_prompt_tokens() {
    let server = MockServer::start(profile("llamacpp")).await.expect("simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, a, before, after) = scraped_run(&server, dir.path(), async {}).await;
    assert_eq!(m.engine, Some(Engine::Llamacpp));
    let evaluated = (after.prompt_tokens - after.cached_tokens) - (before.prompt_tokens - before.cached_tokens);
    assert_eq!(m.counter(Norm::PromptTokensComputed), Some(evaluated as f64));
    assert_eq!(m.counter(Norm::PromptTokens), None);
    assert_eq!(m.counter(Norm::GenerationTokens), Some((after.completion_tokens - before.completion_tokens) as f64));
    let client = client_tokens(&a);
    assert!(server_counts_differ(&m, &client, SERVER_COUNTS_TOLERANCE).is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_is_a_counter_reset_and_down_time_failed_scrapes() {
    let mut p = profile("fast");
    p.faults.restart_after_requests = Some(4);
    p.faults.restart_downtime_ms = 500;
    let server = MockServer::start(p).await.expect("simulator");
    let scraper = Scraper::new(&metrics_url(&server), Duration::from_millis(100), false).expect("client");
    let level = scraper.prepare("restart", None).await.start(Instant::now());
    extra_requests(server.base_url(), 3).await;
    // Scrapes see the three requests before the fourth restarts the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    extra_requests(server.base_url(), 1).await;
    // Down for 500 ms (scrapes fail), then up again, counting from zero.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    extra_requests(server.base_url(), 1).await;
    let m = level.finish().await;
    assert!(m.complete, "{m:#?}");
    assert!(m.counter_resets >= 1, "{m:#?}");
    assert!(m.failed_scrapes >= 1, "the port was closed for 500 ms: {m:#?}");
    assert_eq!(m.file, None);
    // Counted from the reset: never more than the server did.
    let stats = server.stats();
    assert!(m.counter(Norm::RequestsSucceeded).expect("counted") <= stats.requests_completed as f64);
    let codes: Vec<&str> = warnings(&m, None).iter().map(|w| w.code()).collect();
    assert!(codes.contains(&"server_counter_reset") && codes.contains(&"server_metrics_scrape_failed"), "{codes:?}");
    server.shutdown().await;
}

/// A metrics endpoint that misbehaves in one way per path.
async fn broken_endpoint() -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::get;
    let big = "x".repeat(1 << 20);
    let app = axum::Router::new()
        .route("/html", get(|| async { "<html><body>It works!</body></html>" }))
        .route("/missing", get(|| async { (axum::http::StatusCode::NOT_FOUND, "404 page not found") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late 1\n"
            }),
        )
        .route("/huge", get(move || async move { big.repeat(17) }))
        .route(
            "/json",
            get(|| async { axum::Json(json!([{"gpuMemUsage": 1, "kvCacheStats": {"usedNumBlocks": 3}}])) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_endpoints_are_failed_scrapes_never_failed_runs() {
    let (base, task) = broken_endpoint().await;
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, expected) in [
        ("html", "not in the format"),
        ("missing", "HTTP 404"),
        ("slow", "timed out after 300ms"),
        ("huge", "larger than 16 MiB"),
        ("json", "JSON"),
    ] {
        let scraper = Scraper::new(&format!("{base}/{path}"), Duration::from_millis(100), false)
            .expect("client")
            .with_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let level = scraper.prepare(path, Some(dir.path().join(file_name(path)))).await.start(Instant::now());
        tokio::time::sleep(Duration::from_millis(150)).await;
        let m = level.finish().await;
        assert!(started.elapsed() < Duration::from_secs(5), "{path}: bounded, took {:?}", started.elapsed());
        assert!(m.scrapes >= 2 && m.failed_scrapes == m.scrapes, "{path}: {m:#?}");
        let error = m.first_error.clone().expect("an error");
        assert!(error.starts_with("start scrape: ") && error.contains(expected), "{path}: {error}");
        let codes: Vec<&str> = warnings(&m, None).iter().map(|w| w.code()).collect();
        assert_eq!(codes, ["server_metrics_scrape_failed", "server_metrics_incomplete"], "{path}");
        let lines = lines(&dir.path().join(file_name(path)));
        assert!(lines.iter().all(|l| l["ok"] == false && l["error"].is_string()), "{path}");
    }
    // Unreachable: nothing listens there any more.
    task.abort();
    let _ = task.await;
    let scraper = Scraper::new(&format!("{base}/gone"), Duration::from_millis(100), false).expect("client");
    let m = scraper.prepare("gone", None).await.start(Instant::now()).finish().await;
    assert_eq!(m.failed_scrapes, m.scrapes);
    assert!(m.first_error.expect("error").contains("connection failed"));
}
