//! The records file as users reuse it: appended by several runs, cut by a kill, confused with
//! another file, or holding no level at all. `summarize` must give every level its own run's
//! labels, and nothing is sent when the file cannot be used.

mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, manifest_dir, run, text};

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn scenario(dir: &Path, protocol: &str) -> PathBuf {
    write(
        dir,
        &format!("{protocol}.toml"),
        &format!(
            "[target]\nmodel = \"m\"\n[run]\nrequests = 12\nseed = 5\nprotocol = \"{protocol}\"\n[load]\nconcurrency = 3\n\
             [workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 16\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_in_one_records_file_keep_their_own_labels() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("both.records.ndjson");
    for protocol in ["first", "second"] {
        let mut cmd = anvil();
        cmd.arg(scenario(dir.path(), protocol))
            .args(["--base-url", &server.base_url(), "--records"])
            .arg(&records)
            .arg("--out")
            .arg(dir.path().join(protocol));
        let result = run(cmd).await;
        assert!(result.status.success(), "{}", text(&result.stderr));
    }
    check_records(&records);
    let rebuilt = dir.path().join("rebuilt");
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(&rebuilt);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let mut protocols: Vec<String> = artifacts(&rebuilt)
        .iter()
        .map(|p| check_artifact(p)["measurement_protocol"].as_str().unwrap().to_string())
        .collect();
    protocols.sort();
    assert_eq!(protocols, ["first", "second"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_file_cut_by_a_kill_takes_the_next_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::fs::read_to_string(manifest_dir().join("tests/fixtures/summarize/open.records.ndjson")).unwrap();
    // The first 40 lines, then half of the 41st: what a kill mid-write leaves.
    let mut cut: String = fixture.lines().take(40).map(|l| format!("{l}\n")).collect();
    let next = fixture.lines().nth(40).unwrap();
    cut.push_str(&next[..next.len() / 2]);
    let records = write(dir.path(), "reused.records.ndjson", &cut);
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), "after-kill")).arg("--records").arg(&records).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    // The cut line is gone: the killed run's lines, then the new run's.
    check_records(&records);
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(dir.path().join("rebuilt"));
    let result = run(cmd).await;
    // The killed run's level never ended: it is rebuilt as interrupted (exit 1); the new run is whole.
    assert_eq!(result.status.code(), Some(1), "{}", text(&result.stderr));
    let rebuilt = artifacts(&dir.path().join("rebuilt"));
    assert_eq!(rebuilt.len(), 2);
    let complete: Vec<bool> = rebuilt.iter().map(|p| check_artifact(p)["interrupted"] == false).collect();
    assert_eq!(complete.iter().filter(|&&c| c).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_records_file_is_refused_before_anything_is_sent() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let notes = write(dir.path(), "notes.txt", "my notes, not records\n");
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), "refused"))
        .args(["--base-url", &server.base_url(), "--records"])
        .arg(&notes)
        .arg("--out")
        .arg(dir.path().join("out"));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--records") && stderr.contains("not an anvil-load records file"), "{stderr}");
    // Calibration probes are requests too: none was sent.
    assert_eq!(server.stats().requests_received, 0);
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes, not records\n");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_of_a_file_without_levels_exits_2_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::fs::read_to_string(manifest_dir().join("tests/fixtures/summarize/open.records.ndjson")).unwrap();
    let records = write(dir.path(), "setup-only.ndjson", &format!("{}\n", fixture.lines().next().unwrap()));
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("never started a load level"), "{stderr}");
    assert!(!dir.path().join("out").exists() || artifacts(&dir.path().join("out")).is_empty());
}
