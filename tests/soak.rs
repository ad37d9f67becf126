//! Long runs that survive anything and lose nothing: faults, contamination, kill -9 and
//! `summarize`, interval snapshots, secrets, disk space.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anvil_load::mock::{FaultProfile, MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, read_json, run, scenario, text};
use serde_json::Value;

fn fast() -> Profile {
    Profile::named("fast").unwrap()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n{body}\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 48\ntokenizer = \"estimate\"\n"
        ),
    )
    .unwrap();
    path
}

fn count(a: &Value, kind: &str) -> u64 {
    a["error_counts"][kind].as_u64().unwrap_or(0)
}

fn injected(stats: &anvil_load::mock::MockStatsSnapshot, kind: &str) -> u64 {
    stats.faults_injected.get(kind).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_never_stop_the_run_and_each_has_its_own_kind() {
    let faults = FaultProfile {
        reset_mid_stream: 0.05,
        http_500: 0.02,
        stall_before_first_byte: 0.005,
        stall_mid_stream: 0.005,
        malformed_sse: 0.01,
        restart_after_requests: Some(600),
        restart_downtime_ms: 200,
        fault_seed: 7,
        ..FaultProfile::default()
    };
    let server = MockServer::start(Profile { faults, ..fast() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "faults.toml",
        "[run]\nrequests = 1200\n[load]\nconcurrency = 8\n[client]\nfirst_byte_timeout = \"1s\"\nidle_timeout = \"500ms\"\nretries = 5\nretry_on = [\"connect_failed\"]\nretry_backoff = \"50ms\"",
    );
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    assert!(!text(&result.stderr).contains("panicked"));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let stats = server.stats();
    let (requests, completed, failed) =
        (a["requests"].as_u64().unwrap(), a["completed"].as_u64().unwrap(), a["failed"].as_u64().unwrap());
    assert_eq!(completed + failed, requests);
    assert_eq!(requests, 1200);
    // Every request reached the server once (refused connects retried, so never counted there),
    // and at most once more when its pooled connection was cut under it: the client sends such a
    // request again on a new connection, and says so in the record. A request the restart cut
    // just after the server read it is one of those (the restart itself allows for that race).
    let resent: u64 = ["request_timings", "failures"]
        .iter()
        .flat_map(|list| a[*list].as_array().unwrap())
        .map(|r| r["stale_connection_retries"].as_u64().unwrap())
        .sum();
    assert!(
        (1200..=1200 + resent).contains(&stats.requests_received),
        "the server received {} requests for 1,200 sent, {resent} of them sent again on a new connection",
        stats.requests_received
    );
    assert_eq!(injected(&stats, "restart"), 1);
    // Faults cut by the restart show up as broken streams instead of their own kind.
    let cut = injected(&stats, "restart_cut");
    let resets = injected(&stats, "reset_mid_stream");
    assert!(resets > 30, "the profile injects resets: {resets}");
    assert!(
        count(&a, "stream_broken") >= resets && count(&a, "stream_broken") <= resets + cut,
        "{}",
        a["error_counts"]
    );
    for (fault, kind) in [("http_500", "http_500"), ("malformed_sse", "malformed_sse")] {
        let (n, seen) = (injected(&stats, fault), count(&a, kind));
        assert!(
            n > 0 && seen <= n && seen + cut >= n,
            "{fault}: injected {n}, recorded {seen} ({})",
            a["error_counts"]
        );
    }
    let stalls = injected(&stats, "stall_before_first_byte") + injected(&stats, "stall_mid_stream");
    let timeouts = count(&a, "first_byte_timeout") + count(&a, "idle_timeout");
    assert!(timeouts <= stalls && timeouts + cut >= stalls, "stalls {stalls}, timeouts {timeouts}");
    // The failures are listed, sanitized, and the run's numbers exclude them.
    assert_eq!(a["failures"].as_array().unwrap().len() as u64, failed);
    assert!(a["failures"].as_array().unwrap().iter().all(|f| f["message"].as_str().unwrap().len() <= 210));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contaminated_answers_fail_their_canaries_and_stay_out_of_the_numbers() {
    let faults = FaultProfile {
        contamination_swapped: 0.01,
        contamination_merged: 0.01,
        fault_seed: 3,
        ..FaultProfile::default()
    };
    let server = MockServer::start(Profile { faults, ..fast() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "contamination.toml", "[run]\nrequests = 1000\n[load]\nconcurrency = 8");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let contaminated = server.stats().contaminated_responses;
    assert!(contaminated >= 5, "the profile contaminates about 2 %: {contaminated}");
    let failed: Vec<&Value> =
        a["request_timings"].as_array().unwrap().iter().filter(|r| r["request_canary"]["passed"] == false).collect();
    assert_eq!(failed.len() as u64, contaminated, "one failed canary per contaminated response");
    for r in &failed {
        let c = &r["request_canary"];
        assert!(c["marker_at_start"] == false || c["foreign_marker_count"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(
            (r["performance_eligible"].as_bool(), r["exclusion_reason"].as_str()),
            (Some(false), Some("canary_failed"))
        );
    }
    assert_eq!(a["metrics"]["ttft_samples"].as_u64().unwrap(), 1000 - contaminated);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_rebuilds_the_same_artifact_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.records.ndjson");
    let file =
        write(dir.path(), "clean.toml", "[run]\nrequests = 60\nwarmup = 5\ncooldown = 5\n[load]\nconcurrency = 4");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--records").arg(&records);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    check_records(&records);
    let clean = check_artifact(&artifacts(&dir.path().join("out"))[0]);

    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(dir.path().join("rebuilt"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let rebuilt = check_artifact(&artifacts(&dir.path().join("rebuilt"))[0]);
    for key in [
        "metrics",
        "metric_population",
        "request_timings",
        "failures",
        "context_distribution",
        "requests",
        "wall_clock_ms",
        "run_id",
    ] {
        assert_eq!(clean[key], rebuilt[key], "{key} differs after summarize");
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_only_requests_in_flight() {
    let server =
        MockServer::start(Profile { time_per_output_token: Duration::from_millis(2), ..fast() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("killed.records.ndjson");
    let file = write(dir.path(), "long.toml", "[run]\nrequests = 100000\n[load]\nconcurrency = 8");
    let mut child = anvil()
        .arg(&file)
        .arg("--base-url")
        .arg(server.base_url())
        .arg("--out")
        .arg(dir.path().join("out"))
        .arg("--records")
        .arg(&records)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    child.kill().unwrap(); // SIGKILL: no chance to flush anything
    let _ = child.wait();
    // Anything still streaming to the dead client ends on the server within moments.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let finished_by_server = server.stats().requests_completed;
    assert!(finished_by_server > 50, "the run got going: {finished_by_server}");

    // The records of a killed run hold at most a last line cut short, which readers skip.
    check_records(&records);
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(dir.path().join("rebuilt"));
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(1), "a killed level is rebuilt as interrupted: {}", text(&result.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("rebuilt"))[0]);
    assert_eq!(a["interrupted"], true);
    let recorded = a["completed"].as_u64().unwrap();
    // At most the 8 requests in flight when the process died are missing (and the probes, which
    // are not requests, are not counted by the level).
    assert!(
        recorded <= finished_by_server && recorded + 8 >= finished_by_server - probes(&a),
        "recorded {recorded}, server finished {finished_by_server}"
    );
    server.shutdown().await;
}

fn probes(a: &Value) -> u64 {
    a["prompt_sizing"]["probes"].as_array().map_or(0, |p| p.len() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_write_a_time_series_an_interval_log_and_status_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "snap.toml",
        "[run]\nduration = \"3500ms\"\nsnapshot_interval = \"1s\"\n[load]\nmode = \"open\"\nrate = 40",
    );
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    let run_id = a["run_id"].as_str().unwrap();
    let series = std::fs::read_to_string(out.join(format!("{run_id}.timeseries.ndjson"))).unwrap();
    let windows: Vec<Value> = series.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(windows.len() >= 3, "{} windows", windows.len());
    for w in &windows {
        for key in [
            "request_rate",
            "throughput_tok_s",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "tpot_p99_ms",
            "e2e_p99_ms",
            "errors",
            "in_flight",
            "cache_hit_rate",
        ] {
            assert!(w.get(key).is_some(), "window lacks {key}: {w}");
        }
    }
    assert_eq!(a["snapshot_windows"].as_u64(), Some(windows.len() as u64));
    assert!(a["drift"]["ttft_p99_ms"]["first"].as_f64().is_some(), "{}", a["drift"]);
    // The interval log reads back with the HdrHistogram parser.
    let hlog = std::fs::read(out.join(format!("{run_id}.hlog"))).unwrap();
    let intervals: Vec<_> = hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&hlog)
        .filter_map(|e| match e {
            Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(h)) => {
                Some(h.tag().map(|t| t.as_str().to_string()))
            }
            _ => None,
        })
        .collect();
    assert!(intervals.iter().filter(|t| t.as_deref() == Some("ttft")).count() >= 3, "{intervals:?}");
    // No terminal here: one status line per window goes to stderr.
    assert!(text(&result.stderr).matches("TTFT p50/p99").count() >= 3, "{}", text(&result.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_output_file_ever_holds_the_api_key() {
    let secret = "sk-anvil-soak-9a8b7c6d5e4f";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keyed.toml");
    std::fs::write(
        &file,
        "[target]\nmodel = \"m\"\nsimulator = \"faults\"\napi_key_env = \"ANVIL_SOAK_SECRET\"\n[run]\nduration = \"2500ms\"\nsnapshot_interval = \"1s\"\nrecords = true\n[load]\nmode = \"open\"\nrate = 50\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 32\n[client]\nfirst_byte_timeout = \"1s\"\nidle_timeout = \"500ms\"\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).env("ANVIL_SOAK_SECRET", secret);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    let kept: Vec<&PathBuf> = files.iter().filter(|p| p.to_string_lossy().ends_with(".records.ndjson")).collect();
    assert_eq!(kept.len(), 1, "{files:?}");
    check_records(kept[0]);
    for artifact in artifacts(&out) {
        check_artifact(&artifact);
    }
    assert!(files.iter().any(|p| p.to_string_lossy().ends_with(".hlog")), "{files:?}");
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(secret), "{} holds the API key", path.display());
    }
    assert!(!text(&result.stdout).contains(secret) && !text(&result.stderr).contains(secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_fit_on_disk_is_refused_before_it_starts() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "huge.toml", "[run]\nrequests = 1000000000000\n");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(2), "{}", text(&result.stderr));
    assert!(text(&result.stderr).contains("MB free"), "{}", text(&result.stderr));
    assert_eq!(server.stats().requests_received, 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_faults_scenario_finishes_quickly_and_accounts_for_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("faults.toml")).arg("--out").arg(dir.path());
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(dir.path())[0]);
    assert_eq!(a["requests"], 2000);
    // The restart makes "each request reached the server exactly once" unknowable to any client:
    // a request written on a connection the kernel accepted for the closing listener is lost
    // without the server seeing it (the client records it as a broken stream), and one the
    // server read on a connection the restart then cut may be sent again on a fresh one (the
    // server counts it as cut). Everything else must match exactly.
    let sim = &a["simulator"];
    let received = sim["requests_received"].as_u64().unwrap();
    let cut = sim["faults_injected"]["restart_cut"].as_u64().unwrap();
    let resets = sim["faults_injected"]["reset_mid_stream"].as_u64().unwrap();
    let lost_at_most = count(&a, "stream_broken").saturating_sub(resets);
    assert!(
        received <= 2000 + cut && received + lost_at_most >= 2000,
        "the simulator received {received} of 2000 (restart cut {cut}, broken streams beyond resets {lost_at_most})"
    );
    assert_eq!(sim["faults_injected"]["restart"], 1);
    assert!(a["failed"].as_u64().unwrap() > 50);
    let summary = read_json(&artifacts(dir.path())[0]);
    assert!(summary["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "requests_failed"));
}
