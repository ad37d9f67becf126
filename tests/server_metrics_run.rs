//! Server metrics through the run itself: `target.metrics = true` scrapes the simulator's
//! `/metrics` around the level, and the artifact's `server_metrics` block agrees with the
//! simulator's own counts — or says `server_counts_differ` when another client added load.

mod common;

use std::path::Path;

use anvil_load::mock::{MockServer, MockStatsSnapshot, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::{Value, json};

fn scenario(dir: &Path, requests: u32) -> std::path::PathBuf {
    let path = dir.join("metrics.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"anvil-sim\"\nmetrics = true\n[run]\nrequests = {requests}\nseed = 4\nmetrics_interval = \"200ms\"\n\
             [load]\nconcurrency = 4\n[workload]\ncontext_tokens = 512\nmax_context_tokens = 8192\nmax_tokens = 32\n"
        ),
    )
    .unwrap();
    path
}

async fn run_against(server: &MockServer, dir: &Path, requests: u32) -> (Value, std::process::Output) {
    let mut cmd = anvil();
    cmd.arg(scenario(dir, requests)).args(["--base-url", &server.base_url(), "--out"]).arg(dir.join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    (check_artifact(&artifacts(&dir.join("out"))[0]), result)
}

fn warning_codes(a: &Value) -> Vec<String> {
    a["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_metrics_block_equals_the_simulators_own_counts() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let before: MockStatsSnapshot = server.stats();
    let (a, _) = run_against(&server, dir.path(), 24).await;
    let after = server.stats();
    let m = &a["server_metrics"];
    assert_eq!(m["engine"], "vllm");
    assert_eq!(m["complete"], true, "{m}");
    // Calibration probes came before the level's first scrape: the deltas are the level's.
    let probes = a["prompt_sizing"]["probes"].as_array().unwrap().len() as u64;
    // Prometheus values are floats.
    let counter = |name: &str| m["counters"][name].as_f64().map(|v| v as u64);
    assert_eq!(counter("requests_succeeded"), Some(24));
    assert_eq!(counter("requests_succeeded"), Some(after.requests_completed - before.requests_completed - probes));
    let records = a["request_timings"].as_array().unwrap();
    let prompt: u64 = records.iter().map(|r| r["prompt_tokens"].as_u64().unwrap()).sum();
    let generated: u64 = records.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(counter("prompt_tokens"), Some(prompt));
    assert_eq!(counter("generation_tokens"), Some(generated));
    assert!(!warning_codes(&a).contains(&"server_counts_differ".to_string()), "{:?}", warning_codes(&a));
    let file = dir.path().join("out").join(m["file"].as_str().unwrap());
    assert!(std::fs::read_to_string(file).unwrap().lines().count() >= 2);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_during_the_run_is_seen_by_the_server_and_said() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = server.base_url();
    let other_team = tokio::spawn(async move {
        let http = reqwest::Client::new();
        // Sent while the run is going: its level lasts well over a second at this size.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for i in 0..20 {
            let body = json!({"model": "anvil-sim", "max_tokens": 64,
                "messages": [{"role": "user", "content": format!("another team's request {i}")}]});
            let sent = http
                .post(format!("{base}/chat/completions"))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            if let Ok(response) = sent {
                let _ = response.bytes().await;
            }
        }
    });
    let (a, result) = run_against(&server, dir.path(), 400).await;
    other_team.await.unwrap();
    assert!(warning_codes(&a).contains(&"server_counts_differ".to_string()), "{:?}", warning_codes(&a));
    assert!(text(&result.stderr).contains("someone else is using the server"));
    server.shutdown().await;
}
