//! Agent sessions end to end: the real binary against the simulator, conversations that offer
//! tools (`[workload.tools]` with `[workload.sessions]`) in chat, Responses and Messages. Every
//! answer that calls a tool is followed by a tool turn carrying the call and its result; the
//! simulator's own counts (requests, calls made, tool results received and whether each names a
//! call it made) against the artifact's; the tool latency slept between turns and in no TTFT;
//! bad agent keys refused before anything is sent.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

const CONVERSATIONS: u64 = 3;
const TURNS: u64 = 2;
const LATENCY_MS: f64 = 150.0;

fn write_scenario(dir: &Path, api: &str, tools: &str) -> PathBuf {
    let path = dir.join(format!("{api}.toml"));
    let version = if api == "messages" { "anthropic_version = \"2023-06-01\"\n" } else { "" };
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n{version}[run]\nseed = 9\nprotocol = \"sessions\"\n\
             [load]\nsessions = 2\n[workload]\ntokenizer = \"estimate\"\nmax_context_tokens = 32768\nmax_tokens = 64\n\
             [workload.sessions]\nconversations = {CONVERSATIONS}\nturns = {TURNS}\nfirst_tokens = 300\nuser_tokens = 60\n\
             output_tokens = 16\n[workload.tools]\n{tools}\n"
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
async fn agent_sessions_feed_each_call_back_as_a_tool_turn_the_simulator_counts() {
    let dir = tempfile::tempdir().unwrap();
    for api in ["chat", "responses", "messages"] {
        // The simulator calls a tool unless the input ends with a tool result: each user turn
        // is followed by one tool turn, whose answer is text.
        let server = MockServer::start(Profile::named("fast").expect("fast profile")).await.unwrap();
        let file = write_scenario(
            dir.path(),
            api,
            &format!("count = 2\nproperties = 2\nmax_tool_turns = 3\nresult_tokens = 80\nlatency = \"{LATENCY_MS}ms\""),
        );
        let a = run_one(&file, &server.base_url()).await;
        let stats = server.stats();
        let user_turns = CONVERSATIONS * TURNS;
        let records = a["request_timings"].as_array().unwrap();
        assert_eq!(a["failed"].as_u64(), Some(0), "{api}: {}", a["failures"]);
        assert_eq!(a["completed"].as_u64(), Some(2 * user_turns), "{api}");
        assert_eq!(stats.requests_received, 2 * user_turns, "{api}");
        let tool_turns: Vec<&Value> = records.iter().filter(|r| r["tool_turn"] == Value::Bool(true)).collect();
        assert_eq!(tool_turns.len() as u64, user_turns, "{api}");
        assert_eq!(stats.tool_calls.calls_made, user_turns, "{api}");
        assert_eq!(stats.tool_calls.results_received, tool_turns.len() as u64, "{api}");
        assert_eq!(stats.tool_calls.results_unmatched, 0, "{api}: every result answers a call the server made");
        let agent = &a["conversations"]["agent"];
        assert_eq!(agent["tool_turns"].as_u64(), Some(stats.tool_calls.results_received), "{api}: {agent}");
        assert_eq!(agent["user_turns"].as_u64(), Some(user_turns), "{api}: {agent}");
        assert_eq!((agent["ended_by_no_call"].as_u64(), agent["ended_by_cap"].as_u64()), (Some(user_turns), Some(0)));
        assert_eq!(agent["tool_latency_ms_total"].as_f64(), Some(LATENCY_MS * user_turns as f64), "{api}: {agent}");
        assert_eq!(agent["tool_turns_per_session"]["max"].as_f64(), Some(TURNS as f64), "{api}: {agent}");
        // A session lasts at least its tool latencies.
        let duration = &a["conversations"]["totals"]["duration_ms"];
        assert!(duration["p50"].as_f64().unwrap() >= TURNS as f64 * LATENCY_MS, "{api}: {duration}");
        // Per session: its turns in order; every tool turn waited the latency after the answer
        // before it, and the latency is in none of its timings.
        let mut sessions: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
        for r in records {
            assert!(r["tool_turn"].as_bool().is_some(), "{api}: {r}");
            sessions.entry(r["session"].as_str().unwrap()).or_default().push(r);
        }
        assert_eq!(sessions.len() as u64, CONVERSATIONS, "{api}");
        for (id, mut turns) in sessions {
            turns.sort_by(|x, y| x["start_offset_ms"].as_f64().partial_cmp(&y["start_offset_ms"].as_f64()).unwrap());
            let kinds: Vec<bool> = turns.iter().map(|r| r["tool_turn"].as_bool().unwrap()).collect();
            assert_eq!(kinds, [false, true, false, true], "{api} {id}");
            let numbers: Vec<u64> = turns.iter().map(|r| r["turn"].as_u64().unwrap()).collect();
            assert_eq!(numbers, [1, 1, 2, 2], "{api} {id}: a tool turn keeps its user turn's number");
            for pair in turns.windows(2) {
                let (before, after) = (pair[0], pair[1]);
                if after["tool_turn"] != Value::Bool(true) {
                    assert!(after.get("tool_latency_ms").is_none(), "{api}: {after}");
                    continue;
                }
                assert_eq!(after["tool_latency_ms"].as_f64(), Some(LATENCY_MS), "{api}: {after}");
                let ended = before["start_offset_ms"].as_f64().unwrap() + before["e2e_ms"].as_f64().unwrap();
                let gap = after["start_offset_ms"].as_f64().unwrap() - ended;
                assert!(gap >= LATENCY_MS - 1.0, "{api} {id}: the tool turn started {gap} ms after the answer");
                assert!(
                    after["time_to_first_output_ms"].as_f64().is_some_and(|t| t < LATENCY_MS),
                    "{api}: the latency is not in TTFT: {after}"
                );
                assert!(
                    after["prompt_tokens"].as_u64().unwrap() > before["prompt_tokens"].as_u64().unwrap() + 60,
                    "{api}: the tool turn carries the call and its result: {before} {after}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_ends_tool_turns_when_every_answer_calls() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(Profile::named("fast").expect("fast profile")).await.unwrap();
    // `required`: the simulator calls whatever the results, so only the cap ends a user turn.
    let file = write_scenario(dir.path(), "chat", "count = 1\ntool_choice = \"required\"\nmax_tool_turns = 2");
    let a = run_one(&file, &server.base_url()).await;
    let stats = server.stats();
    let user_turns = CONVERSATIONS * TURNS;
    assert_eq!(a["completed"].as_u64(), Some(3 * user_turns));
    assert_eq!(stats.requests_received, 3 * user_turns);
    assert_eq!(stats.tool_calls.calls_made, 3 * user_turns);
    let tool_turns = a["request_timings"].as_array().unwrap().iter().filter(|r| r["tool_turn"] == Value::Bool(true));
    assert_eq!(tool_turns.count() as u64, 2 * user_turns);
    assert_eq!(stats.tool_calls.results_unmatched, 0);
    let agent = &a["conversations"]["agent"];
    assert_eq!(
        (agent["ended_by_no_call"].as_u64(), agent["ended_by_cap"].as_u64()),
        (Some(0), Some(user_turns)),
        "{agent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_keys_exit_2_with_nothing_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(Profile::named("fast").expect("fast profile")).await.unwrap();
    for (tools, key, says) in [
        ("count = 2\nmax_tool_turns = 0", "workload.tools.max_tool_turns", "between"),
        ("count = 2\nmax_tool_turns = 65", "workload.tools.max_tool_turns", "between"),
        ("count = 2\nresult_tokens = 0", "workload.tools.result_tokens", "0"),
        ("count = 2\nresult_tokens = { uniform = [5] }", "workload.tools.result_tokens", "uniform"),
        ("count = 2\nlatency = \"soon\"", "workload.tools.latency", "not a duration"),
    ] {
        let file = write_scenario(dir.path(), "chat", tools);
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
        let result = run(cmd).await;
        let err = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{tools}: {err}");
        assert!(err.contains(key) && err.contains(says) && err.contains("chat.toml"), "{tools}: {err}");
    }
    assert_eq!(server.stats().requests_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_of_the_records_rebuilds_the_agent_figures_alike() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(Profile::named("fast").expect("fast profile")).await.unwrap();
    // Both drawn per tool turn from a seeded distribution.
    let file = write_scenario(
        dir.path(),
        "chat",
        "count = 2\nlatency = { uniform = [\"10ms\", \"40ms\"] }\nresult_tokens = { uniform = [20, 200] }",
    );
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
    assert_eq!(a["conversations"]["agent"]["tool_turns"].as_u64(), Some(server.stats().tool_calls.results_received));
    assert_eq!(a["conversations"]["agent"], b["conversations"]["agent"]);
    let latencies: Vec<u64> =
        a["request_timings"].as_array().unwrap().iter().filter_map(|r| r["tool_latency_ms"].as_u64()).collect();
    assert_eq!(latencies.len() as u64, CONVERSATIONS * TURNS);
    assert!(latencies.iter().all(|ms| (10..=40).contains(ms)), "{latencies:?}");
    assert!(latencies.iter().any(|ms| *ms != latencies[0]), "drawn, not fixed: {latencies:?}");
    assert_eq!(a["request_timings"], b["request_timings"]);
}
