//! The client's own `/metrics` (`--metrics-listen`), scraped while the real binary runs against
//! the simulator and after it (`--metrics-linger`): every exported family is there, and the
//! final figures equal the artifact's and the simulator's own counts. Bad values and a port in
//! use refuse the run with exit code 2 before anything is sent.

mod common;
#[path = "common/live_run.rs"]
mod live_run;

use std::collections::BTreeMap;
use std::time::Duration;

use anvil_load::contract::Metric;
use anvil_load::mock::{MockServer, Profile};
use anvil_load::request::server_metrics::parse;
use anvil_load::results::live::names;
use common::{anvil, artifacts, check_artifact, run, text};
use live_run::LiveRun;
use serde_json::Value;

async fn scrape(url: &str) -> String {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let response = client.get(url).send().await.expect("/metrics answers");
    assert!(response.status().is_success(), "{}", response.status());
    response.text().await.unwrap()
}

/// Every sample, by its key (`name{labels sorted}`).
fn samples(body: &str) -> BTreeMap<String, f64> {
    let parsed = parse(body.as_bytes()).expect("the project's own parser reads it");
    assert_eq!(parsed.skipped_lines, 0, "every line is well formed:\n{body}");
    parsed.series.iter().map(|s| (s.key(), s.value)).collect()
}

/// The sum over every series of `name` whose labels include `with`.
fn total(body: &str, name: &str, with: &[(&str, &str)]) -> f64 {
    let parsed = parse(body.as_bytes()).unwrap();
    let matching = parsed
        .series
        .iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v)));
    matching.map(|s| s.value).sum()
}

fn eligible(a: &Value) -> Vec<&Value> {
    a["request_timings"].as_array().unwrap().iter().filter(|r| r["performance_eligible"] == true).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_scrape_equals_the_artifact_and_the_simulator() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let before = server.stats();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "--model", "anvil-sim", "--tokenizer", "estimate"])
        .args(["-c", "4", "-n", "4000", "-d", "3s", "--input-tokens", "128", "--output-tokens", "24"])
        .args(["--set", "run.warmup=5", "--no-progress", "--metrics-listen", "127.0.0.1:0"])
        .args(["--metrics-linger", "5s", "--out"])
        .arg(dir.path().join("out"));
    let mut live = LiveRun::start(cmd);
    let url = live.metrics_url();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/metrics"), "{url}");

    // During the run: requests are counting, and the level is the one running.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = scrape(&url).await;
    assert!(total(&during, names::REQUESTS, &[]) > 0.0, "{during}");
    assert_eq!(total(&during, names::LEVEL, &[("level", "c4")]), 0.0);
    assert!(samples(&during).contains_key(&format!("{}{{level=\"c4\"}}", names::IN_FLIGHT)), "{during}");

    // After the run, while it lingers: the final counts.
    live.wait_for("artifact:", Duration::from_secs(60));
    let end = scrape(&url).await;
    let after = server.stats();
    for name in names::all() {
        assert!(end.contains(&format!("# TYPE {name} ")), "{name} is exported:\n{end}");
    }
    let path = artifacts(&dir.path().join("out"));
    assert_eq!(path.len(), 1);
    let a = check_artifact(&path[0]);

    let requests = total(&end, names::REQUESTS, &[]) as u64;
    assert_eq!(requests, a["requests"].as_u64().unwrap());
    assert_eq!(requests, after.requests_received - before.requests_received, "the simulator's own count");
    assert_eq!(total(&end, names::REQUESTS, &[("outcome", "completed")]) as u64, a["completed"].as_u64().unwrap());
    assert_eq!(total(&end, names::REQUESTS, &[("phase", "warmup")]), 5.0);
    assert_eq!(total(&end, names::ERRORS, &[]), 0.0);

    // Times: the measured phase's counts are the artifact's counts of each metric.
    let population = &a["metric_population"]["p99_samples_by_metric"];
    for (m, key) in [(Metric::Ttft, "ttft"), (Metric::E2e, "e2e"), (Metric::Tpot, "tpot")] {
        let count = total(&end, &format!("{}_count", names::histogram(m)), &[("phase", "measured")]);
        assert_eq!(count as u64, population[key].as_u64().unwrap(), "{key}");
        let inf = total(&end, &format!("{}_bucket", names::histogram(m)), &[("phase", "measured"), ("le", "+Inf")]);
        assert_eq!(inf, count, "{key}: +Inf is the count");
    }
    let e2e_sum = total(&end, &format!("{}_sum", names::histogram(Metric::E2e)), &[("phase", "measured")]);
    let e2e_ms: f64 = eligible(&a).iter().map(|r| r["e2e_ms"].as_f64().unwrap()).sum();
    assert!((e2e_sum - e2e_ms / 1000.0).abs() < 1e-6 * e2e_ms.max(1.0), "{e2e_sum} s vs {e2e_ms} ms");
    let gaps: u64 = eligible(&a)
        .iter()
        .filter_map(|r| r["chunk_gaps_us"].as_array())
        .flat_map(|g| g.iter().map(|pair| pair[1].as_u64().unwrap()))
        .sum();
    let itl = total(&end, &format!("{}_count", names::histogram(Metric::ItlChunk)), &[("phase", "measured")]);
    assert_eq!(itl as u64, gaps);
    assert!(gaps > 0);

    // Tokens: the records' sums, and the simulator's.
    let records = a["request_timings"].as_array().unwrap();
    let prompt: u64 = records.iter().map(|r| r["prompt_tokens"].as_u64().unwrap()).sum();
    let completion: u64 = records.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(total(&end, &names::token_counter(Metric::PromptTokens), &[]) as u64, prompt);
    assert_eq!(total(&end, &names::token_counter(Metric::CompletionTokens), &[]) as u64, completion);
    assert_eq!(completion, after.completion_tokens - before.completion_tokens);

    assert!(live.wait(Duration::from_secs(60)).success(), "{}", live.seen.join("\n"));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    assert!(client.get(&url).send().await.is_err(), "/metrics stops with the run");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_counted_by_kind_as_the_artifact_counts_them() {
    let server = MockServer::start(Profile::named("faults").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "--model", "anvil-sim", "--tokenizer", "estimate"])
        .args(["-c", "4", "-n", "80", "-d", "20s", "--input-tokens", "64", "--output-tokens", "16", "--no-progress"])
        .args(["--metrics-listen", "127.0.0.1:0", "--metrics-linger", "5s", "--out"])
        .arg(dir.path().join("out"));
    let mut live = LiveRun::start(cmd);
    let url = live.metrics_url();
    live.wait_for("artifact:", Duration::from_secs(60));
    let end = scrape(&url).await;
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let failed = a["failed"].as_u64().unwrap();
    assert!(failed > 0, "the faults profile fails some requests");
    assert_eq!(total(&end, names::REQUESTS, &[("outcome", "failed")]) as u64, failed);
    assert_eq!(total(&end, names::ERRORS, &[]) as u64, failed);
    for (kind, n) in a["error_counts"].as_object().unwrap() {
        assert_eq!(total(&end, names::ERRORS, &[("kind", kind)]) as u64, n.as_u64().unwrap(), "{kind}");
    }
    drop(live);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_and_a_port_in_use_exit_2_with_nothing_sent() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--metrics-listen", "nonsense"], "run.metrics_listen", "has no port"),
        (&["--metrics-listen", "example.com:9464"], "run.metrics_listen", "not an IP address"),
        (&["--metrics-linger", "10s"], "run.metrics_linger", "serves no /metrics"),
        (&["--metrics-listen", &taken], "run.metrics_listen", "address in use"),
    ];
    for (args, key, problem) in cases {
        let mut cmd = anvil();
        cmd.args(["--base-url", &server.base_url(), "--model", "anvil-sim", "-n", "4", "--out"])
            .arg(dir.path().join("out"))
            .args(args);
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(key) && stderr.contains(problem) && stderr.contains("fix:"), "{args:?}: {stderr}");
    }
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
    assert!(!dir.path().join("out").exists() || artifacts(&dir.path().join("out")).is_empty());
    server.shutdown().await;
}

/// The manual's table of families is the exporter's list, in its order.
#[test]
fn the_manual_lists_every_family() {
    let page = std::fs::read_to_string(common::manifest_dir().join("docs/observability.md")).unwrap();
    let listed: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `anvil_"))
        .map(|rest| format!("anvil_{}", rest.split('`').next().unwrap()))
        .collect();
    assert_eq!(listed, names::all());
}
