//! The client's `/metrics` read by the real thing: Debian's Prometheus (see
//! `common/prometheus.rs`) scrapes a 20 s open-loop run against the simulator every second,
//! and its PromQL answers (`sum(anvil_requests_total)`, the TTFT histogram's buckets and a
//! quantile of them) equal what the artifact's records give.

mod common;
#[path = "common/live_run.rs"]
mod live_run;
#[path = "common/prometheus.rs"]
mod prometheus;

use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use anvil_load::results::live::names;
use common::{anvil, artifacts, check_artifact};
use live_run::LiveRun;
use prometheus::{Prometheus, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_artifacts_counts() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = format!("127.0.0.1:{}", free_port());
    let prometheus = Prometheus::start(std::slice::from_ref(&target)).await;
    let before = server.stats();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "--model", "anvil-sim", "--tokenizer", "estimate"])
        .args(["-r", "20", "-d", "20s", "-n", "1000", "--input-tokens", "128", "--output-tokens", "48"])
        .args(["--no-progress", "--metrics-listen", &target, "--metrics-linger", "5s", "--out"])
        .arg(dir.path().join("out"));
    let mut live = LiveRun::start(cmd);
    live.metrics_url();

    // Prometheus sees the run while it goes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let early = prometheus.scalar("sum(anvil_requests_total)").await;
    assert!(early.is_some_and(|v| v > 0.0), "scraped during the run: {early:?}\n{}", prometheus.targets().await);

    live.wait_for("artifact:", Duration::from_secs(60));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let requests = a["requests"].as_u64().unwrap() as f64;
    assert_eq!(requests as u64, server.stats().requests_received - before.requests_received);
    // The linger's scrapes carry the final counts.
    let seen = prometheus.until("sum(anvil_requests_total)", requests, Duration::from_secs(6)).await;
    assert_eq!(seen, Some(requests), "{}", prometheus.targets().await);

    // TTFT's buckets, as the artifact's eligible records fill them.
    let ttft_s: Vec<f64> = a["request_timings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["performance_eligible"] == true)
        .filter_map(|r| r["ttft_ms"].as_f64())
        .map(|ms| ms / 1000.0)
        .collect();
    assert!(ttft_s.len() > 100, "{}", ttft_s.len());
    let buckets = prometheus.query("sum by (le) (anvil_ttft_seconds_bucket{phase=\"measured\"})").await;
    assert_eq!(buckets.len(), names::BUCKETS_SECONDS.len() + 1, "{buckets:?}");
    for (labels, value) in &buckets {
        let le: f64 = labels["le"].as_str().unwrap().parse().unwrap();
        let expected = ttft_s.iter().filter(|&&t| t <= le).count();
        assert_eq!(*value as usize, expected, "le {le}");
    }
    // A quantile of those buckets falls in the bucket that holds the artifact's exact one.
    let p50 = a["metrics"]["ttft_p50_ms"].as_f64().unwrap() / 1000.0;
    let estimate = prometheus
        .scalar("histogram_quantile(0.5, sum by (le) (anvil_ttft_seconds_bucket{phase=\"measured\"}))")
        .await
        .expect("a quantile");
    let upper = names::BUCKETS_SECONDS.iter().copied().find(|&b| b >= p50).unwrap_or(f64::INFINITY);
    let lower = names::BUCKETS_SECONDS.iter().copied().rev().find(|&b| b < p50).unwrap_or(0.0);
    assert!(lower <= estimate && estimate <= upper, "estimate {estimate} outside ({lower}, {upper}] around {p50}");

    assert!(live.wait(Duration::from_secs(30)).success(), "{}", live.seen.join("\n"));
    server.shutdown().await;
}
