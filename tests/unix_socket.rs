//! `target.unix_socket`: a run against the simulator served on a Unix socket (as vLLM's `--uds`
//! serves), every request, the server check and the server's metrics through it; the artifact's
//! counts equal the simulator's own. A socket nobody serves stops the run before any load,
//! naming it.

mod common;

use std::path::Path;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};

const REQUESTS: u64 = 6;

fn scenario(dir: &Path, socket: &Path) -> std::path::PathBuf {
    let path = dir.join("uds.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nbase_url = \"http://localhost/v1\"\nunix_socket = {:?}\nmetrics = true\n\
             [run]\nrequests = {REQUESTS}\nseed = 5\n[load]\nconcurrency = 2\n\
             [workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 16\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_a_unix_socket_counts_what_the_simulator_counted() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sim.sock");
    let sim = MockServer::start_unix(Profile::named("fast").unwrap(), &socket).await.unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), &socket)).args(["--no-progress", "-o"]).arg(dir.path().join("out"));
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let stats = sim.stats();
    let probes = a["prompt_sizing"]["probes"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(REQUESTS), Some(0)), "{}", a["failures"]);
    assert_eq!(stats.requests_completed, REQUESTS + probes);
    let records = a["request_timings"].as_array().unwrap();
    let generated: u64 = records.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
    let m = &a["server_metrics"];
    assert_eq!(m["complete"], true, "scraped through the socket: {m}");
    assert_eq!(m["counters"]["generation_tokens"].as_f64().map(|v| v as u64), Some(generated), "{m}");
    assert_eq!(a["scenario"]["target"]["unix_socket"], socket.display().to_string());
    assert_eq!(a["base_url"], "http://localhost/v1");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_nobody_serves_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), &socket)).args(["--no-progress", "-o"]).arg(dir.path().join("out"));
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Unix socket") && stderr.contains("nobody.sock"), "{stderr}");
    assert!(stderr.contains("target.unix_socket"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_without_an_http_base_url_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (target, words) in [
        ("unix_socket = \"/run/x.sock\"", "no base_url"),
        ("base_url = \"https://localhost/v1\"\nunix_socket = \"/run/x.sock\"", "http://"),
        ("base_url = \"http://localhost/v1\"\nunix_socket = \"\"", "is empty"),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(
            &file,
            format!("[target]\n{target}\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n"),
        )
        .unwrap();
        let out = run({
            let mut cmd = anvil();
            cmd.arg(&file).arg("-o").arg(dir.path().join("out"));
            cmd
        })
        .await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{target}: {stderr}");
        assert!(stderr.contains("target.unix_socket") && stderr.contains(words), "{target}: {stderr}");
    }
}
