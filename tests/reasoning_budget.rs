//! A reasoning model whose `max_tokens` ends inside the reasoning: `finish_reason = length` and
//! no visible content. That is diagnosed as such (`budget_spent_in_reasoning`, with the fix), and
//! the canaries, which had nothing to check, are not blamed on a model that cannot copy the
//! marker or on swapped responses.

mod common;

use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

/// 12 requests, canaries on, against the simulator's `fast` profile (8–24 reasoning tokens
/// before 8–24 tokens of answer).
async fn level(max_tokens: u32) -> (Value, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"anvil-sim\"\nsimulator = \"fast\"\n[run]\nrequests = 12\nseed = 3\n[load]\nconcurrency = 4\n\
             [workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = {max_tokens}\ncanaries = true\n"
        ),
    )
    .expect("write the scenario");
    let mut cmd = anvil();
    cmd.arg(&path).arg("--out").arg(dir.path().join("out")).arg("--no-progress");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let written = artifacts(&dir.path().join("out"));
    assert_eq!(written.len(), 1);
    (check_artifact(&written[0]), text(&result.stderr))
}

fn codes(a: &Value) -> Vec<&str> {
    a["warnings"].as_array().expect("warnings").iter().filter_map(|w| w["code"].as_str()).collect()
}

fn message<'a>(a: &'a Value, code: &str) -> &'a str {
    a["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .find(|w| w["code"] == code)
        .and_then(|w| w["message"].as_str())
        .unwrap_or_else(|| panic!("no {code} warning in {:?}", codes(a)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_spent_in_reasoning_is_named_with_its_fix_and_not_called_a_canary_failure() {
    let (a, stderr) = level(6).await;
    for r in a["request_timings"].as_array().expect("records") {
        assert_eq!(r["finish_reason"], "length", "{r}");
        assert_eq!(r["content_chunks"], 0, "{r}");
        assert_eq!(r["request_canary"]["failure_reason"], "no_content", "{}", r["request_canary"]);
    }
    let m = message(&a, "budget_spent_in_reasoning");
    assert!(m.starts_with("12 of 12 responses ended at max_tokens (6) before any content (all reasoning)"), "{m}");
    assert!(m.contains("raise workload.max_tokens") && m.contains("serve.thinking_mode = \"disabled\""), "{m}");
    assert!(m.contains("no sign of mixed-up responses"), "{m}");
    // Not a model that cannot copy its marker, not swapped answers, and not "turn canaries off".
    for code in ["canaries_all_failed", "canaries_failed", "canary_markers_malformed"] {
        assert!(!codes(&a).contains(&code), "{code} raised: {:?}", codes(&a));
    }
    let nothing = message(&a, "nothing_eligible");
    assert!(nothing.contains("raise workload.max_tokens") && !nothing.contains("canaries = false"), "{nothing}");
    assert!(!stderr.contains("canaries = false"), "{stderr}");
    assert!(stderr.contains("before any content (all reasoning)"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_reaches_the_answer_raises_no_such_warning() {
    let (a, _) = level(96).await;
    assert!(!codes(&a).contains(&"budget_spent_in_reasoning"), "{:?}", codes(&a));
    assert_eq!(a["metrics"]["request_canary_passed"], 12, "{:?}", codes(&a));
}
