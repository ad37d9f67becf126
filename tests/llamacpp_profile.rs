//! The simulator's `llamacpp` profile does what the real llama.cpp server was seen to do on the
//! APIs it converts to a chat request (pinned against the engine itself by `make test-engine`,
//! `tests/engine/apis.rs`), so `cargo test` meets those behaviours without an engine: a
//! Responses answer cut at its budget ends `completed` (recorded as `length`, the server's word
//! kept); a Messages request loses `ignore_eos` (answers stop early, and the run says so); a
//! Responses history item without its type is refused (so a conversation completes only if the
//! client types its items). Each through the real binary, against the embedded simulator.

mod common;

use std::path::Path;

use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::Value;

/// One run of the binary against the embedded `profile` simulator: its artifact (through both
/// contract checks, its records file through its own).
async fn measure(dir: &Path, profile: &str, api: &str, sections: &str) -> Value {
    let file = dir.join("s.toml");
    std::fs::write(
        &file,
        format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\nsimulator = \"{profile}\"\n\n{sections}\n\n[client]\n\
             first_byte_timeout = \"20s\"\nidle_timeout = \"20s\"\n"
        ),
    )
    .unwrap();
    let (out, records) = (dir.join("out"), dir.join("records.ndjson"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--records").arg(&records).arg("--no-progress");
    let result = run(cmd).await;
    assert!(result.status.success(), "{profile}/{api}: {}", text(&result.stderr));
    check_records(&records);
    let paths = artifacts(&out);
    assert_eq!(paths.len(), 1, "{paths:?}");
    check_artifact(&paths[0])
}

fn records(a: &Value) -> &Vec<Value> {
    a["request_timings"].as_array().expect("request_timings")
}

fn warning<'a>(a: &'a Value, code: &str) -> Option<&'a str> {
    a["warnings"].as_array()?.iter().find(|w| w["code"] == code)?["message"].as_str()
}

const REQUESTS: u64 = 6;

/// `REQUESTS` one at a time, asking for an exact 24-token answer (`ignore_eos`).
fn exact_answers() -> String {
    format!(
        "[run]\nrequests = {REQUESTS}\nseed = 7\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 256\n\
         max_context_tokens = 4096\nmax_tokens = 24\ntokenizer = \"estimate\"\ncanaries = false\n\n[output]\n\
         ignore_eos = true\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_cut_at_the_budget_end_completed_and_are_recorded_as_length() {
    let dir = tempfile::tempdir().unwrap();
    let a = measure(dir.path(), "llamacpp", "responses", &exact_answers()).await;
    assert_eq!(a["completed"], REQUESTS, "{}", a["failures"]);
    for r in records(&a) {
        assert_eq!(r["output_tokens"], 24, "ignore_eos holds on this API: {r}");
        // The server said `completed`; the budget says `length`; the server's word is kept.
        assert_eq!((&r["finish_reason"], &r["reported_finish_reason"]), (&"length".into(), &"stop".into()), "{r}");
    }
    let w = warning(&a, "finish_reason_at_budget").expect("the disagreement is flagged");
    assert!(w.starts_with(&format!("{REQUESTS} responses reached their output budget")), "{w}");
    assert!(warning(&a, "output_control_ignored").is_none(), "{:?}", a["warnings"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_lose_ignore_eos_on_the_llamacpp_profile_and_the_run_says_so() {
    // Answers of 16–48 tokens at their natural length, under a 64-token budget.
    let sections = exact_answers().replace("max_tokens = 24", "max_tokens = 64");
    let dir = tempfile::tempdir().unwrap();
    let a = measure(dir.path(), "llamacpp", "messages", &sections).await;
    assert_eq!(a["completed"], REQUESTS, "{}", a["failures"]);
    for r in records(&a) {
        let output = r["output_tokens"].as_u64().expect("output tokens");
        assert!(output < 64 && r["finish_reason"] == "stop", "the answer stopped on its own: {r}");
    }
    let w = warning(&a, "output_control_ignored").expect("the ignored ignore_eos is said");
    assert!(w.starts_with(&format!("{REQUESTS} of {REQUESTS} completed answers stopped on their own")), "{w}");
    // The same run on a profile that keeps the field: every answer is the budget, nothing said.
    let dir = tempfile::tempdir().unwrap();
    let a = measure(dir.path(), "fast", "messages", &sections).await;
    assert!(records(&a).iter().all(|r| r["output_tokens"] == 64 && r["finish_reason"] == "length"), "{a}");
    assert!(warning(&a, "output_control_ignored").is_none(), "{:?}", a["warnings"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_conversation_is_accepted_by_the_llamacpp_profile() {
    // Later turns carry the earlier answers as assistant items, which the profile refuses
    // without `"type": "message"`, as llama.cpp does.
    let sections = "[run]\nseed = 9\n\n[load]\nsessions = 2\n\n[workload]\nmax_context_tokens = 4096\nmax_tokens = 16\n\
                    tokenizer = \"estimate\"\ncanaries = false\n\n[workload.sessions]\nconversations = 3\nturns = 3\n\
                    first_tokens = 200\nuser_tokens = 40\noutput_tokens = 16\n";
    let dir = tempfile::tempdir().unwrap();
    let a = measure(dir.path(), "llamacpp", "responses", sections).await;
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(9), Some(0)), "{}", a["failures"]);
    // Later turns found their history in the simulated prefix cache.
    let later: Vec<&Value> = records(&a).iter().filter(|r| r["turn"].as_u64() > Some(1)).collect();
    assert_eq!(later.len(), 6);
    assert!(later.iter().all(|r| r["cached_tokens"].as_u64() > Some(100)), "{later:?}");
}
