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
    expect_rejected(&GOOD.replace("[target]\n", "[target]\napi = \"images\"\n"), "target.api", &[]).await;
    expect_rejected("[target\nmodel = 1", "line 1", &[]).await;
    expect_rejected(
        &GOOD.replace("[target]\n", "[target]\nsimulator_time_per_output_token_ms = -1\n"),
        "target.simulator_time_per_output_token_ms",
        &[],
    )
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_behind_a_shared_prefix_that_cannot_fit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prompts.jsonl"), "\"What is a river?\"\n").unwrap();
    let toml = "[target]\nmodel = \"m\"\n[run]\nrequests = 2\n[workload]\nprompts = \"prompts.jsonl\"\nmax_context_tokens = 4096\nmax_tokens = 64\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 16000000\n";
    // Written beside the dataset: prompts are relative to the scenario file.
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, toml).unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("workload.shared_prefix_tokens") && stderr.contains("4096"), "{stderr}");
    assert_eq!(server.stats().requests_received, 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_modes_are_refused_for_the_completions_api() {
    let completions = GOOD.replace("[target]\n", "[target]\napi = \"completions\"\n");
    expect_rejected(&format!("{completions}[serve]\nthinking_mode = \"enabled\"\n"), "serve.thinking_mode", &[]).await;
    expect_rejected(&format!("{completions}[serve]\nno_thinking = true\n"), "serve.no_thinking", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_use_the_scenario_words_and_numbers_as_written() {
    expect_rejected(&GOOD.replace("concurrency = 1", "concurrency = \"4\""), "a number or a list of numbers", &[])
        .await;
    expect_rejected(&GOOD.replace("concurrency = 1", "mode = 5"), "\"closed\" or \"open\"", &[]).await;
    expect_rejected(
        &GOOD.replace("context_tokens = 1024", "context_tokens = { uniform = [64, 1e300] }"),
        "1e300 is not a usable context size",
        &[],
    )
    .await;
    expect_rejected(&GOOD.replace("requests = 2", "requests = 2\nsnapshot_interval = \"1ns\""), "1s to 1day", &[])
        .await;
    expect_rejected(
        &GOOD.replace("concurrency = 1", "mode = \"open\"\nrate = 1e-300"),
        "1e-300 is not a usable rate",
        &[],
    )
    .await;
    // None of them carries a Rust type name or a saturated integer.
    for toml in [
        GOOD.replace("concurrency = 1", "concurrency = \"4\""),
        GOOD.replace("requests = 2", "requests = 2\nwarmup = [1]"),
        GOOD.replace("context_tokens = 1024", "context_tokens = { uniform = [64, 1e300] }"),
        GOOD.replace("requests = 2", "requests = 1e300"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, toml).unwrap();
        let result = run({
            let mut cmd = anvil();
            cmd.arg("validate").arg(&file);
            cmd
        })
        .await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        for internal in ["untagged enum", "Levels", "Phase", "u64", "9223372036854775807", "0000000000000000"] {
            assert!(!stderr.contains(internal), "{internal} in: {stderr}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_that_is_not_utf8_is_told_to_fix_its_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("latin1.toml");
    std::fs::write(&file, b"[target]\nmodel = \"caf\xe9\"\n").unwrap();
    let mut cmd = anvil();
    cmd.arg("validate").arg(&file);
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("UTF-8") && !stderr.contains("check the path"), "{stderr}");
}
