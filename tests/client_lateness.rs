//! The client's own lateness, measured in every mode: a closed loop (which has no dispatch lag to
//! check) records the probe's figures in `validity`, a level past `load.max_client_lateness` is
//! invalid with a reason that says what to do, `--strict` exits 3, and `summarize` gives the same
//! verdict from the records alone.

mod common;

use std::path::{Path, PathBuf};

use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

fn scenario(dir: &Path, lateness: &str) -> PathBuf {
    let path = dir.join("closed.toml");
    // A second of closed-loop load: enough probes (one per 5 ms) for the p99 to be judged.
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n[run]\nduration = \"1s\"\ngrace = \"5s\"\nsnapshot_interval = \"0s\"\n\
             [load]\nconcurrency = 4\n{lateness}\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 8192\nmax_tokens = 16\n\
             tokenizer = \"estimate\"\ncanaries = false\n"
        ),
    )
    .unwrap();
    path
}

async fn level(dir: &Path, lateness: &str, args: &[&str]) -> (std::process::Output, Value, PathBuf) {
    let out = dir.join("out");
    let mut cmd = anvil();
    cmd.arg(scenario(dir, lateness)).arg("--out").arg(&out).arg("--quiet").args(args);
    let result = run(cmd).await;
    let path = artifacts(&out).into_iter().next().unwrap_or_else(|| panic!("no artifact: {}", text(&result.stderr)));
    (result, check_artifact(&path), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_records_how_late_the_client_was() {
    let dir = tempfile::tempdir().unwrap();
    // A threshold no run can meet (the timer's resolution alone is a millisecond).
    let records = dir.path().join("run.records.ndjson");
    let kept = records.to_str().unwrap();
    let (result, a, _) = level(dir.path(), "max_client_lateness = \"1us\"", &["--strict", "--records", kept]).await;
    let stderr = text(&result.stderr);
    let v = &a["validity"];
    assert_eq!(v["max_client_lateness_ms"], 0.001, "{v}");
    let p50 = v["client_lateness_p50_ms"].as_f64().expect("measured in a closed loop");
    let p99 = v["client_lateness_p99_ms"].as_f64().unwrap();
    let max = v["client_lateness_max_ms"].as_f64().unwrap();
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{v}");
    assert_eq!(v["client_probe_interval_ms"], 5.0);
    let share = v["client_cpu_share"].as_f64().unwrap();
    assert!(share > 0.0 && share <= 1.0, "{v}");
    assert_eq!(v["valid"], false, "{v}");
    let reason = v["reasons"][0].as_str().unwrap();
    assert!(reason.starts_with("client overloaded"), "{reason}");
    assert!(reason.contains("load.max_client_lateness") && reason.contains("shard the load"), "{reason}");
    assert!(
        a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "invalid_load"),
        "the console and the artifact say it: {}",
        a["warnings"]
    );
    assert_eq!(result.status.code(), Some(3), "--strict fails an invalid level: {stderr}");
    assert!(stderr.contains("client overloaded"), "{stderr}");

    // The verdict is the records' own: summarize rebuilds it exactly.
    let rebuilt = dir.path().join("rebuilt");
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&rebuilt).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let b = check_artifact(&artifacts(&rebuilt)[0]);
    assert_eq!(b["validity"], a["validity"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lenient_threshold_keeps_the_level_valid() {
    let dir = tempfile::tempdir().unwrap();
    // An hour: nothing on this machine is that late, so the figures are recorded and not judged.
    let (result, a, _) = level(dir.path(), "max_client_lateness = \"1h\"", &["--strict"]).await;
    let v = &a["validity"];
    assert_eq!(v["valid"], true, "{v}");
    assert!(v["client_lateness_p99_ms"].as_f64().is_some(), "{v}");
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
}

#[test]
fn a_threshold_that_is_not_a_duration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = anvil().arg("validate").arg(scenario(dir.path(), "max_client_lateness = \"soon\"")).output().unwrap();
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("load.max_client_lateness"), "{stderr}");
}
