//! Tool calls end to end: the real binary against the simulator offering `[workload.tools]` in
//! chat, Responses and Messages; the simulator's own counts of calls made and arguments broken
//! on purpose against the artifact's; bad tool keys refused before anything is sent.

mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

/// The `fast` profile, a fraction of its tool calls' arguments broken.
fn profile(invalid: f64) -> Profile {
    let mut p = Profile::named("fast").expect("fast profile exists");
    p.faults.invalid_tool_arguments = invalid;
    p
}

fn write_scenario(dir: &Path, api: &str, requests: u64, tools: &str) -> PathBuf {
    let path = dir.join(format!("{api}.toml"));
    let version = if api == "messages" { "anthropic_version = \"2023-06-01\"\n" } else { "" };
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n{version}[run]\nrequests = {requests}\nseed = 5\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 512\ntokenizer = \"estimate\"\nmax_context_tokens = 32768\nmax_tokens = 256\n[workload.tools]\n{tools}\n"
        ),
    )
    .unwrap();
    path
}

async fn run_one(scenario: &Path, base_url: &str) -> Value {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--out").arg(out.path()).arg("--base-url").arg(base_url);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1);
    check_artifact(&paths[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_in_every_api_are_counted_and_judged_as_the_simulator_made_them() {
    let dir = tempfile::tempdir().unwrap();
    for api in ["chat", "responses", "messages"] {
        let server = MockServer::start(profile(0.25)).await.unwrap();
        let file = write_scenario(dir.path(), api, 12, "count = 3\nproperties = 4");
        let a = run_one(&file, &server.base_url()).await;
        let stats = server.stats();
        assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(12), Some(0)), "{api}: {}", a["failures"]);
        assert_eq!(stats.tool_calls.calls_made, 12, "{api}");
        assert_eq!(stats.tool_calls.invalid_injected, 3, "{api}");
        let t = &a["tool_calls"];
        assert_eq!(t["requests"].as_u64(), Some(12), "{api}: {t}");
        assert_eq!(t["calls"].as_u64(), Some(stats.tool_calls.calls_made), "{api}: {t}");
        assert_eq!(t["invalid"].as_u64(), Some(stats.tool_calls.invalid_injected), "{api}: {t}");
        assert_eq!(t["valid"].as_u64(), Some(9), "{api}: {t}");
        let reasons: u64 = t["invalid_by_reason"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(reasons, 3, "{api}: {t}");
        assert_eq!(t["time_to_first_tool_call_ms"]["samples"].as_u64(), Some(12), "{api}: {t}");
        let records = a["request_timings"].as_array().unwrap();
        let output: u64 = records.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
        assert_eq!(output, stats.completion_tokens, "{api}");
        for r in records {
            assert_eq!(r["finish_reason"], "tool_calls", "{api}: {r}");
            let tc = &r["tool_calls"];
            assert_eq!(tc["calls"].as_u64(), Some(1), "{api}: {r}");
            assert_eq!(tc["argument_token_source"], "usage", "{api}: {r}");
            assert_eq!(tc["argument_tokens"], r["output_tokens"], "{api}: {r}");
            // A tool call is the answer: its first piece is the first output and the TTFT.
            assert_eq!(r["ttft_ms"], r["time_to_first_output_ms"], "{api}: {r}");
            assert_eq!(tc["time_to_first_tool_call_ms"], r["ttft_ms"], "{api}: {r}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_choice_none_gets_text_and_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.0)).await.unwrap();
    let file = write_scenario(dir.path(), "chat", 4, "count = 2\ntool_choice = \"none\"");
    let a = run_one(&file, &server.base_url()).await;
    assert_eq!(server.stats().tool_calls.calls_made, 0);
    assert_eq!((a["tool_calls"]["requests"].as_u64(), a["tool_calls"]["calls"].as_u64()), (Some(4), Some(0)));
    assert!(a["tool_calls"]["valid_rate"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_keys_exit_2_with_nothing_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.0)).await.unwrap();
    std::fs::write(
        dir.path().join("bad-schema.json"),
        r#"[{"type":"function","function":{"name":"x","parameters":{"type":"nonsense"}}}]"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("not-array.json"), r#"{"name":"x"}"#).unwrap();
    for (api, tools, key, says) in [
        ("completions", "count = 2", "workload.tools", "has no tools"),
        ("chat", "file = \"missing.json\"", "workload.tools.file", "cannot read"),
        ("chat", "file = \"bad-schema.json\"", "workload.tools.file", "parameters"),
        ("chat", "file = \"not-array.json\"", "workload.tools.file", "not a JSON array"),
        ("chat", "count = 2\ntool_choice = \"launch_rocket\"", "workload.tools.tool_choice", "launch_rocket"),
        ("chat", "count = 0", "workload.tools.count", "between"),
        ("chat", "file = \"bad-schema.json\"\ncount = 2", "workload.tools.count", "does not apply"),
        ("chat", "colour = 1", "colour", "unknown"),
        ("chat", "count = 2\nmax_tool_turns = 2", "workload.tools.max_tool_turns", "agent sessions only"),
        ("chat", "count = 2\nlatency = \"1s\"", "workload.tools.latency", "agent sessions only"),
    ] {
        let file = write_scenario(dir.path(), api, 4, tools);
        if tools.contains("[workload.sessions]") {
            // Conversations set every prompt themselves.
            let body = std::fs::read_to_string(&file).unwrap().replace("context_tokens = 512\n", "");
            std::fs::write(&file, body).unwrap();
        }
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
        let result = run(cmd).await;
        let err = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{tools}: {err}");
        assert!(err.contains(key) && err.contains(says), "{tools}: {err}");
    }
    assert_eq!(server.stats().requests_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_of_the_records_rebuilds_the_tool_calls_alike() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.5)).await.unwrap();
    let file = write_scenario(dir.path(), "chat", 8, "count = 2\nproperties = 3");
    let (live, records, rebuilt) =
        (dir.path().join("live"), dir.path().join("run.records.ndjson"), dir.path().join("re"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&live).arg("--base-url").arg(server.base_url()).arg("--records").arg(&records);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    common::check_records(&records);
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&rebuilt).output().expect("the binary starts");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (a, b) = (artifacts(&live), artifacts(&rebuilt));
    assert_eq!((a.len(), b.len()), (1, 1));
    let (a, b) = (check_artifact(&a[0]), check_artifact(&b[0]));
    assert_eq!(a["tool_calls"]["invalid"].as_u64(), Some(server.stats().tool_calls.invalid_injected));
    assert_eq!(a["tool_calls"], b["tool_calls"]);
    assert_eq!(a["request_timings"], b["request_timings"]);
}
