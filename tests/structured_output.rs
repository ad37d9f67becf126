//! Structured output checked under load (`[workload.response_format]`), end to end: the real
//! binary against the simulator, whose own counts (JSON answers served, answers broken on
//! purpose by `faults.schema_invalid_rate`, by how) are the artifact's; every spelling the
//! client sends is one the simulator answers with JSON; a level past `max_invalid_rate` is not
//! eligible; answers cut by `max_tokens` are counted apart; bad keys stop the run before
//! anything is sent.

mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{FaultProfile, MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::Value;

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1},
    "unit": {"enum": ["c", "f"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}
  },
  "required": ["city", "unit", "days"],
  "additionalProperties": false
}"#;

fn profile(invalid_rate: f64) -> Profile {
    Profile {
        faults: FaultProfile { schema_invalid_rate: invalid_rate, fault_seed: 3, ..FaultProfile::default() },
        ..Profile::named("fast").expect("fast profile exists")
    }
}

/// A scenario of `requests` requests on `api`, with `[target]` extra lines, `max_tokens` and the
/// `[workload.response_format]` table's lines; the schema file sits beside it.
fn scenario(dir: &Path, name: &str, api: &str, target: &str, requests: u64, max_tokens: u32, format: &str) -> PathBuf {
    std::fs::write(dir.join("weather.json"), SCHEMA).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n{target}\n[run]\nrequests = {requests}\nseed = 9\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = {max_tokens}\ntokenizer = \"estimate\"\n[workload.response_format]\n{format}\n"
        ),
    )
    .unwrap();
    path
}

/// Runs the binary; returns its exit code, console, and its one artifact (checked) when it wrote one.
async fn go(file: &Path, base_url: &str) -> (Option<i32>, String, Option<Value>) {
    let out = tempfile::tempdir().unwrap();
    let records = out.path().join("records.jsonl");
    let mut cmd = anvil();
    cmd.arg(file).arg("--out").arg(out.path()).arg("--base-url").arg(base_url).arg("--records").arg(&records);
    let result = run(cmd).await;
    let console = format!("{}{}", text(&result.stdout), text(&result.stderr));
    let paths = artifacts(out.path());
    let artifact = paths.first().map(|p| check_artifact(p));
    if records.exists() {
        check_records(&records);
    }
    (result.status.code(), console, artifact)
}

fn records(a: &Value) -> &Vec<Value> {
    a["request_timings"].as_array().unwrap()
}

fn count(a: &Value, f: impl Fn(&Value) -> bool) -> u64 {
    records(a).iter().filter(|r| f(r)).count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_answers_counted_are_the_ones_the_server_broke() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.25)).await.unwrap();
    let file =
        scenario(dir.path(), "broken", "chat", "", 40, 256, "schema_file = \"weather.json\"\nmax_invalid_rate = 1.0");
    let (code, console, a) = go(&file, &server.base_url()).await;
    assert_eq!(code, Some(0), "{console}");
    let a = a.expect("an artifact");
    let stats = server.stats();
    let injected: u64 = stats.schema_broken.values().sum();
    assert_eq!(stats.structured_answers, 40);
    assert!(injected > 0 && injected < 40, "the fault profile broke {injected} of 40");
    let so = &a["structured_output"];
    assert_eq!(so["requests"].as_u64(), Some(40));
    assert_eq!(so["invalid"].as_u64(), Some(injected), "{so}");
    assert_eq!(so["valid"].as_u64(), Some(40 - injected));
    assert_eq!(so["truncated"].as_u64(), Some(0));
    // The reasons counted are the ways the server broke them.
    let reasons: std::collections::BTreeMap<String, u64> =
        serde_json::from_value(so["invalid_by_reason"].clone()).unwrap();
    assert_eq!(reasons, stats.schema_broken);
    // Each invalid answer is a kept, excluded record naming its reason.
    assert_eq!(
        count(&a, |r| r["exclusion_reason"] == "schema_invalid" && r["performance_eligible"] == false),
        injected
    );
    assert_eq!(count(&a, |r| r["schema_valid"] == false && r["schema_violation"] == "required"), injected);
    assert_eq!(count(&a, |r| r["schema_name"] == "weather" && r["schema_index"] == 0), 40);
    assert_eq!(a["metric_population"]["performance_eligible_requests"].as_u64(), Some(40 - injected));
    // Within its (lenient) threshold: the level stays eligible, and says what it excluded.
    assert_eq!((a["performance_eligible"].as_bool(), so["passed"].as_bool()), (Some(true), Some(true)));
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "schema_invalid"));
    assert!(console.contains(&format!("schema valid {:.1}%", (40 - injected) as f64 / 40.0 * 100.0)), "{console}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_the_client_sends_is_answered_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("chat", "", "schema_file = \"weather.json\"", "response_format"),
        ("responses", "", "schema_file = \"weather.json\"", "text.format"),
        ("completions", "dialect = \"vllm\"", "schema_file = \"weather.json\"", "structured_outputs"),
        ("chat", "dialect = \"vllm\"", "schema_file = \"weather.json\"\nspelling = \"guided_json\"", "guided_json"),
        ("completions", "dialect = \"llamacpp\"", "schema_file = \"weather.json\"", "json_schema"),
        (
            "chat",
            "dialect = \"llamacpp\"",
            "schema_file = \"weather.json\"\nspelling = \"json_schema\"",
            "json_schema (chat)",
        ),
        ("chat", "", "schema_file = \"weather.json\"\nspelling = \"response_format_json\"", "response_format_json"),
        ("chat", "", "type = \"json_object\"", "json_object"),
    ];
    for (i, (api, target, format, spelling)) in cases.into_iter().enumerate() {
        let server = MockServer::start(profile(0.0)).await.unwrap();
        let file = scenario(dir.path(), &format!("s{i}"), api, target, 6, 256, format);
        let (code, console, a) = go(&file, &server.base_url()).await;
        assert_eq!(code, Some(0), "{spelling}: {console}");
        let a = a.expect("an artifact");
        // The simulator recognised the format in this spelling: every answer was its JSON.
        assert_eq!(server.stats().structured_answers, 6, "{spelling}");
        let so = &a["structured_output"];
        assert_eq!((so["checked"].as_u64(), so["valid"].as_u64()), (Some(6), Some(6)), "{spelling}: {so}");
        assert_eq!(so["schema_valid_rate"].as_f64(), Some(1.0), "{spelling}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_past_its_threshold_is_not_eligible() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.5)).await.unwrap();
    let file =
        scenario(dir.path(), "strict", "chat", "", 16, 256, "schema_file = \"weather.json\"\nmax_invalid_rate = 0.05");
    let (code, console, a) = go(&file, &server.base_url()).await;
    let a = a.expect("an artifact");
    assert_eq!(code, Some(0), "{console}");
    let so = &a["structured_output"];
    assert_eq!(so["passed"].as_bool(), Some(false), "{so}");
    assert_eq!(so["invalid"].as_u64(), Some(server.stats().schema_broken.values().sum::<u64>()));
    assert_eq!(a["performance_eligible"].as_bool(), Some(false));
    assert_eq!(a["validity"]["valid"].as_bool(), Some(false));
    let reasons = a["validity"]["reasons"].to_string();
    assert!(reasons.contains("max_invalid_rate"), "{reasons}");
    let warning = a["warnings"].as_array().unwrap().iter().find(|w| w["code"] == "schema_invalid").expect("warned");
    assert!(warning["message"].as_str().unwrap().contains("not eligible"), "{warning}");
    assert!(console.contains("above max_invalid_rate"), "{console}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cut_by_max_tokens_are_counted_as_truncated_not_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.0)).await.unwrap();
    // Completions have no reasoning: three tokens of JSON, then the budget cuts it.
    let file = scenario(dir.path(), "cut", "completions", "dialect = \"vllm\"", 8, 3, "schema_file = \"weather.json\"");
    let (code, console, a) = go(&file, &server.base_url()).await;
    assert_eq!(code, Some(0), "{console}");
    let a = a.expect("an artifact");
    let so = &a["structured_output"];
    assert_eq!((so["truncated"].as_u64(), so["invalid"].as_u64()), (Some(8), Some(0)), "{so}");
    assert_eq!(so["truncated_by_reason"]["not_json"].as_u64(), Some(8));
    assert_eq!(count(&a, |r| r["schema_truncated"] == true && r["finish_reason"] == "length"), 8);
    // Kept in the distributions: the budget, not the server, cut them.
    assert_eq!(a["metric_population"]["performance_eligible_requests"].as_u64(), Some(8));
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "schema_truncated"));
    assert!(console.contains("cut by max_tokens"), "{console}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_exit_2_naming_the_key_with_nothing_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.0)).await.unwrap();
    std::fs::write(dir.path().join("bad.json"), r#"{"type": "nonsense"}"#).unwrap();
    std::fs::write(dir.path().join("prose.json"), "not json").unwrap();
    let cases = [
        ("chat", "", "schema_file = \"missing.json\"", "workload.response_format.schema_file"),
        ("chat", "", "schema_file = \"bad.json\"", "workload.response_format.schema_file"),
        ("chat", "", "schema_file = \"prose.json\"", "workload.response_format.schema_file"),
        ("chat", "", "schema = { type = 3 }", "workload.response_format.schema"),
        ("chat", "", "type = \"json_object\"\nschema_file = \"weather.json\"", "workload.response_format.schema_file"),
        ("chat", "", "type = \"xml\"", "workload.response_format.type"),
        ("chat", "", "", "workload.response_format"),
        ("chat", "", "schema_file = \"weather.json\"\nmax_invalid_rate = 2.0", "max_invalid_rate"),
        ("chat", "", "schema_file = \"weather.json\"\nspelling = \"yaml\"", "workload.response_format.spelling"),
        ("chat", "dialect = \"openai\"", "schema_file = \"weather.json\"\nspelling = \"guided_json\"", "spelling"),
        ("responses", "", "schema_file = \"weather.json\"\nspelling = \"guided_json\"", "spelling"),
        ("embeddings", "", "schema_file = \"weather.json\"", "workload.response_format"),
        (
            "messages",
            "anthropic_version = \"2023-06-01\"",
            "schema_file = \"weather.json\"",
            "workload.response_format",
        ),
        (
            "chat",
            "extra_body = { response_format = { type = \"text\" } }",
            "schema_file = \"weather.json\"",
            "target.extra_body.response_format",
        ),
        (
            "chat",
            "",
            "schemas = [{ file = \"weather.json\", name = \"a b\" }]",
            "workload.response_format.schemas[0].name",
        ),
        (
            "chat",
            "",
            "schemas = [{ file = \"weather.json\", weight = 0 }]",
            "workload.response_format.schemas[0].weight",
        ),
    ];
    for (i, (api, target, format, key)) in cases.into_iter().enumerate() {
        let file = scenario(dir.path(), &format!("bad{i}"), api, target, 4, 64, format);
        let (code, console, a) = go(&file, &server.base_url()).await;
        assert_eq!(code, Some(2), "case {i} ({key}) was not refused: {console}");
        assert!(console.contains(key), "case {i}: the error does not name {key}: {console}");
        assert!(console.contains("fix:"), "case {i}: no fix given: {console}");
        assert!(a.is_none());
    }
    // A canary asks for a marker before the JSON: refused when asked for explicitly.
    let file = scenario(dir.path(), "canary", "chat", "", 4, 64, "schema_file = \"weather.json\"");
    let body = std::fs::read_to_string(&file)
        .unwrap()
        .replace("tokenizer = \"estimate\"", "tokenizer = \"estimate\"\ncanaries = true");
    std::fs::write(&file, body).unwrap();
    let (code, console, _) = go(&file, &server.base_url()).await;
    assert_eq!(code, Some(2), "{console}");
    assert!(console.contains("workload.canaries"), "{console}");
    assert_eq!(server.stats().requests_received, 0, "nothing is sent for a refused scenario");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_rebuilds_the_same_verdicts_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(profile(0.3)).await.unwrap();
    let file =
        scenario(dir.path(), "again", "chat", "", 20, 256, "schema_file = \"weather.json\"\nmax_invalid_rate = 0.05");
    let (live, rebuilt, records) = (dir.path().join("live"), dir.path().join("rebuilt"), dir.path().join("r.jsonl"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&live).arg("--base-url").arg(server.base_url()).arg("--records").arg(&records);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(&rebuilt);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let (a, b) = (check_artifact(&artifacts(&live)[0]), check_artifact(&artifacts(&rebuilt)[0]));
    assert!(a["structured_output"]["invalid"].as_u64().unwrap() > 0);
    for key in ["structured_output", "performance_eligible", "validity", "warnings", "metric_population"] {
        assert_eq!(a[key], b[key], "{key} differs between the live run and summarize");
    }
}
