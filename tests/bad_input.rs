//! Bad scenarios and options: exit code 2, a message naming the file and the key, and not one
//! request sent (checked with the simulator's own counter).

mod common;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, run, scenario, text};

const GOOD: &str = "[target]\nmodel = \"m\"\n[run]\nrequests = 2\n[load]\nconcurrency = 1\n[workload]\ncontext_tokens = 1024\nmax_context_tokens = 8192\nmax_tokens = 64\n";

async fn expect_rejected(toml: &str, key: &str, extra: &[&str]) {
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, toml).unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out")).args(extra);
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(key), "the message names {key}: {stderr}");
    assert!(
        stderr.contains("bad.toml") || extra.iter().any(|a| stderr.contains(a)),
        "the message names the file: {stderr}"
    );
    assert!(stderr.contains("fix:") || !extra.is_empty(), "the message says how to fix it: {stderr}");
    assert_eq!(server.stats().requests_received, 0, "nothing may be sent for bad input");
    assert!(!dir.path().join("out").join("x").exists());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_key() {
    expect_rejected(&GOOD.replace("[load]\n", "[load]\nconcurency = 2\n"), "concurency", &[]).await;
    expect_rejected(&format!("{GOOD}[sampling]\ntemprature = 0.5\n"), "sampling.temprature", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_zero() {
    expect_rejected(&GOOD.replace("concurrency = 1", "concurrency = 0"), "load.concurrency", &[]).await;
    expect_rejected(&GOOD.replace("concurrency = 1", "concurrency = [1, 0]"), "load.concurrency", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_above_max_context() {
    expect_rejected(&GOOD.replace("context_tokens = 1024", "context_tokens = 9000"), "workload.context_tokens", &[])
        .await;
    // Fits alone but not with the output reserve.
    expect_rejected(&GOOD.replace("context_tokens = 1024", "context_tokens = 8180"), "workload.context_tokens", &[])
        .await;
    expect_rejected(&GOOD.replace("context_tokens = 1024", "context_tokens = {}"), "workload.context_tokens", &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_and_bad_values() {
    expect_rejected(&GOOD.replace("requests = 2", "requests = \"two\""), "run.requests", &[]).await;
    expect_rejected(&GOOD.replace("max_tokens = 64", "max_tokens = 0"), "workload.max_tokens", &[]).await;
    expect_rejected(&format!("{GOOD}[sampling]\ntop_p = 1.5\n"), "sampling.top_p", &[]).await;
    expect_rejected(&GOOD.replace("[target]\n", "[target]\napi = \"responses\"\n"), "target.api", &[]).await;
    expect_rejected("[target\nmodel = 1", "line 1", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_command_line_values() {
    // An override is validated by the same rules and the message names the option.
    expect_rejected(
        &GOOD.replace("max_context_tokens = 8192", "max_context_tokens = 1100"),
        "workload.max_tokens",
        &["--max-tokens", "200"],
    )
    .await;
    expect_rejected(GOOD, "--concurrency", &["--concurrency", "0"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_prints_the_plan_and_sends_nothing() {
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let mut cmd = anvil();
    cmd.arg("validate").arg(scenario("capacity-v4.toml")).arg("--base-url").arg(server.base_url());
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let stdout = text(&result.stdout);
    for needle in ["concurrency 1", "65536", "ANVIL_REQ_1717_00000", "temperature 0.9", "nothing was sent"] {
        assert!(stdout.contains(needle), "plan lacks {needle}: {stdout}");
    }
    assert_eq!(server.stats().requests_received, 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_reported_before_any_load() {
    // Port 9 (discard) on loopback: nothing listens there in a test environment.
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml")).args(["--base-url", "http://127.0.0.1:9/v1"]).arg("--out").arg(dir.path());
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(1), "{}", text(&result.stderr));
    assert!(text(&result.stderr).contains("cannot reach the server"), "{}", text(&result.stderr));
}
