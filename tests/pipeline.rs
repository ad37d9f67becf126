//! The whole pipeline through the real binary: scenario → simulator → artifact, checked against
//! the reference contract and against the simulator's own counts.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, read_json, run, scenario, text};
use serde_json::Value;

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_v4_reproduces_the_reference_configuration() {
    let server = MockServer::start(fast()).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("capacity-v4.toml")).arg("--base-url").arg(server.base_url()).arg("--out").arg(out.path());
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));

    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1);
    let a = check_artifact(&paths[0]);
    let reference = read_json(&common::manifest_dir().join("tests/fixtures/reference-artifact.json"));
    for key in [
        "schema",
        "measurement_protocol",
        "concurrency",
        "requests",
        "context_tokens",
        "context_seed",
        "context_distribution",
        "max_context_tokens",
        "max_tokens",
        "prompt_cache_mode",
        "request_canaries",
        "shared_prefix_tokens",
        "sampling",
        "serve_flags",
    ] {
        assert_eq!(a[key], reference[key], "configuration field {key}");
    }
    let m = &a["metrics"];
    assert_eq!(m["request_canary_passed"], 6);
    assert!(m["reasoning_chunks"].as_u64().unwrap() > 0);
    // The simulator saw the six measured requests plus the calibration probes, and nothing else.
    let stats = server.stats();
    let probes = a["prompt_sizing"]["probes"].as_array().unwrap();
    assert!(probes.len() >= 2, "calibration is the default");
    let probe_prompt_tokens: u64 = probes.iter().map(|p| p["server_prompt_tokens"].as_u64().unwrap()).sum();
    assert_eq!(a["completed"], 6);
    assert_eq!(stats.requests_received, 6 + probes.len() as u64);
    assert_eq!(stats.requests_completed, 6 + probes.len() as u64);
    assert_eq!(m["prompt_tokens"].as_u64().unwrap() + probe_prompt_tokens, stats.prompt_tokens);
    assert_eq!(
        m["output_tokens"].as_u64().unwrap() + probes.len() as u64,
        stats.completion_tokens,
        "one token per probe"
    );
    // Calibrated sizing: the server's counts are within 1 % of the 65,536-token plan.
    assert!(m["prompt_sizing_error_pct_max"].as_f64().unwrap() < 1.0, "{}", m["prompt_sizing_error_pct_max"]);
    // redact_base_url = true in the scenario.
    assert_eq!(a["base_url"], "[redacted]");
    // No labels in the scenario: the keys are there, empty, for the user's own (--set target.engine=…).
    assert!(a["engine"].is_null() && a["gpu"].is_null(), "{} {}", a["engine"], a["gpu"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_simulator_runs_when_no_base_url_is_given() {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml")).arg("--out").arg(out.path()).arg("--requests").arg("12");
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    assert!(text(&result.stderr).contains("embedded simulator"), "banner missing: {}", text(&result.stderr));
    let a = check_artifact(&artifacts(out.path())[0]);
    assert_eq!(a["engine"], "anvil-simulator/fast");
    assert_eq!(a["requests"], 12);
    // The simulator's own counters travel in the artifact and agree with the client's.
    assert_eq!(a["simulator"]["requests_received"], 12);
    assert_eq!(a["simulator"]["requests_completed"], a["completed"]);
    assert_eq!(a["simulator"]["completion_tokens"], a["metrics"]["output_tokens"]);
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "simulated_target"));
    // The artifact path is the last thing printed.
    let stdout = text(&result.stdout);
    assert!(stdout.trim_end().lines().last().unwrap().starts_with("artifact: "), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_simulator_serves_a_separate_run() {
    let mut child = anvil()
        .args(["mock", "--listen", "127.0.0.1:0", "--profile", "fast"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("mock starts");
    let stderr = child.stderr.take().unwrap();
    let banner = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stderr).read_line(&mut line).map(|_| line)
    });
    let banner = tokio::time::timeout(Duration::from_secs(30), banner).await.expect("banner in time").unwrap().unwrap();
    let base_url =
        banner.split_whitespace().find(|w| w.starts_with("http://")).expect("banner has the URL").to_string();

    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml")).arg("--base-url").arg(&base_url).arg("--out").arg(out.path());
    let result = run(cmd).await;
    let stats: Value = serde_json::from_slice(
        &reqwest::get(format!("{}/mock/stats", base_url.trim_end_matches("/v1"))).await.unwrap().bytes().await.unwrap(),
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(out.path())[0]);
    assert_eq!(a["requests"], 20);
    let probes = a["prompt_sizing"]["probes"].as_array().unwrap().len() as u64;
    assert_eq!(stats["requests_received"].as_u64(), Some(20 + probes));
    assert_eq!(stats["requests_completed"].as_u64(), Some(a["completed"].as_u64().unwrap() + probes));
    assert_eq!(a["base_url"], base_url.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_sweep_writes_one_artifact_per_level_and_a_summary() {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("sweep.toml")).arg("--out").arg(out.path()).arg("--requests").arg("16");
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 4);
    let mut levels: Vec<u64> = paths.iter().map(|p| check_artifact(p)["concurrency"].as_u64().unwrap()).collect();
    levels.sort_unstable();
    assert_eq!(levels, [1, 2, 4, 8]);
    let summary = std::fs::read_dir(out.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-sweep.json"))
        .expect("sweep summary written");
    let summary = read_json(&summary);
    let rows = summary["levels"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        assert_eq!(row["requests"], 16);
        assert!(row["ttft_p99_ms"].as_f64().unwrap() >= row["ttft_p50_ms"].as_f64().unwrap());
    }
    let stdout = text(&result.stdout);
    assert!(stdout.contains("concurrency") && stdout.contains("TTFT p99"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_overrides_reach_the_artifact() {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml"))
        .args(["--requests", "5", "--concurrency", "2", "--max-tokens", "64", "--seed", "99", "--model", "other"])
        .arg("--out")
        .arg(out.path());
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(out.path())[0]);
    assert_eq!((a["requests"].as_u64(), a["concurrency"].as_u64()), (Some(5), Some(2)));
    assert_eq!((a["max_tokens"].as_u64(), a["context_seed"].as_u64()), (Some(64), Some(99)));
    assert_eq!(a["model"], "other");
    // Records appear in the order requests ended; find request 0 by its index.
    let first = a["request_timings"].as_array().unwrap().iter().find(|r| r["request_index"] == 0).unwrap();
    assert_eq!(first["request_canary"]["marker"], "ANVIL_REQ_99_00000");
    for r in a["request_timings"].as_array().unwrap() {
        assert!(r["output_tokens"].as_u64().unwrap() <= 64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_become_failure_records_not_crashes() {
    // Contexts above the simulator's 262,144-token window: every request is refused with the
    // OpenAI-style 400, recorded as a failure, and the run exits 1 (nothing succeeded).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("too-long.toml");
    std::fs::write(
        &file,
        "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n[run]\nrequests = 3\n[workload]\ncontext_tokens = 300000\nmax_context_tokens = 400000\nmax_tokens = 16\n",
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(1), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(0), Some(3)));
    for f in a["failures"].as_array().unwrap() {
        assert_eq!(f["error_kind"], "context_length_exceeded");
        assert_eq!(f["http_status"], 400);
        assert!(!f["message"].as_str().unwrap().contains("reference text"));
    }
    assert_eq!(a["error_counts"]["context_length_exceeded"], 3);
    assert_eq!(a["performance_eligible"], false);
    assert!(text(&result.stderr).contains("requests failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_quirks_are_handled_for_chat_and_completions() {
    // Connection closed after every stream, one token per chunk, an end-of-turn token counted
    // but never streamed, usage on the finish chunk for completions.
    for api in ["chat", "completions"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("llamacpp.toml");
        std::fs::write(
            &file,
            format!(
                "[target]\nmodel = \"m\"\napi = \"{api}\"\nsimulator = \"llamacpp\"\n[run]\nrequests = 16\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 512\nmax_context_tokens = 8192\nmax_tokens = 64\n"
            ),
        )
        .unwrap();
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path());
        let result = run(cmd).await;
        assert!(result.status.success(), "{api}: {}", text(&result.stderr));
        let a = check_artifact(&artifacts(dir.path())[0]);
        assert_eq!(a["completed"], 16, "{api}: {}", serde_json::to_string_pretty(&a["failures"]).unwrap());
        assert_eq!(a["metrics"]["request_canary_passed"], 16, "{api}");
        assert_eq!(a["metrics"]["output_token_sources"]["usage"], 16, "{api}");
        assert_eq!(a["simulator"]["requests_received"], 16, "{api}: the client must not resend requests");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_is_sent_but_never_written() {
    let secret = "sk-anvil-test-1f2e3d4c5b6a";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keyed.toml");
    std::fs::write(
        &file,
        "[target]\nmodel = \"m\"\nsimulator = \"fast\"\napi_key_env = \"ANVIL_TEST_SECRET\"\n[run]\nrequests = 4\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 32\n",
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out")).env("ANVIL_TEST_SECRET", secret);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let path = &artifacts(&dir.path().join("out"))[0];
    let raw = std::fs::read_to_string(path).unwrap();
    check_artifact(path);
    assert!(!raw.contains(secret), "the API key leaked into the artifact");
    assert!(raw.contains("ANVIL_TEST_SECRET"), "the variable's name is recorded");
    assert!(!text(&result.stdout).contains(secret) && !text(&result.stderr).contains(secret));
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_writes_an_interrupted_artifact_and_exits_1() {
    let out = tempfile::tempdir().unwrap();
    // The realistic profile makes each 65k-context request take seconds: the signal lands mid-run.
    // A one-second grace: the request in flight is cut and recorded as interrupted.
    let toml =
        std::fs::read_to_string(scenario("capacity-v4.toml")).unwrap().replace("[run]\n", "[run]\ngrace = \"1s\"\n");
    let file = out.path().join("capacity-v4-short-grace.toml");
    std::fs::write(&file, toml).unwrap();
    let child = anvil()
        .arg(&file)
        .arg("--out")
        .arg(out.path().join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    // Not a fixed wait from the start (on a busy machine the signal could land during sizing):
    // from the sizing line, whose probes (max_tokens 1) end well before the level's first
    // request, which takes some 10 s, ends.
    let mut child = child;
    let stderr = child.stderr.take().expect("stderr");
    let (said_tx, said_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("sizing prompts") {
                let _ = said_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    said_rx.recv_timeout(Duration::from_secs(60)).expect("the run sizes its prompts");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    assert!(status.success());
    let output =
        tokio::time::timeout(Duration::from_secs(30), tokio::task::spawn_blocking(move || child.wait_with_output()))
            .await
            .expect("exits soon after the signal")
            .unwrap()
            .unwrap();
    let stderr = reader.join().expect("stderr read");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let a = check_artifact(&artifacts(&out.path().join("out"))[0]);
    assert_eq!(a["interrupted"], true);
    assert!(a["requests"].as_u64().unwrap() < 6);
    assert_eq!(a["error_counts"]["interrupted"], 1, "the in-flight request is recorded as interrupted");
    assert_eq!(a["performance_eligible"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h2.toml");
    std::fs::write(
        &file,
        "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n[run]\nrequests = 40\n[load]\nconcurrency = 8\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 32\n[client]\nhttp2 = true\n",
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(40), Some(0)));
    assert_eq!(a["scenario"]["client"]["http2"], true);
}
