//! Every API beyond chat, end to end: the real binary against the simulator serving it, the
//! simulator's own counts against the artifact, canaries wherever text streams; the failure
//! events of the Responses API and the Messages API's headers against a scripted server; and
//! the bad combinations refused before anything is sent.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anvil_load::mock::{MockServer, Profile};
use common::hostile::{Hostile, Reply, Step, models_answer, sse_head};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::{Value, json};

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

/// A scenario for `api` with the given extra `[target]` and `[workload]` lines.
fn write_scenario(dir: &Path, api: &str, requests: u64, target: &str, workload: &str) -> PathBuf {
    let path = dir.join(format!("{api}.toml"));
    // Conversations pace themselves (load.sessions); everything else runs 4 at a time.
    let load = if workload.contains("[workload.sessions]") { "" } else { "[load]\nconcurrency = 4\n" };
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n{target}\n[run]\nrequests = {requests}\nseed = 5\n{load}[workload]\nmax_context_tokens = 32768\nmax_tokens = 48\n{workload}\n"
        ),
    )
    .unwrap();
    path
}

/// Run the binary against `base_url` and return the one artifact it wrote, checked.
async fn run_one(scenario: &Path, base_url: &str, env: &[(&str, &str)]) -> (Value, String) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--out").arg(out.path()).arg("--base-url").arg(base_url);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1);
    (check_artifact(&paths[0]), std::fs::read_to_string(&paths[0]).unwrap())
}

fn records(a: &Value) -> &Vec<Value> {
    a["request_timings"].as_array().unwrap()
}

fn sum(a: &Value, field: &str) -> u64 {
    records(a).iter().map(|r| r[field].as_u64().unwrap_or(0)).sum()
}

/// The simulator's counts are the artifact's: requests, prompt and output tokens.
fn assert_counts_agree(server: &MockServer, a: &Value, requests: u64) {
    let stats = server.stats();
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(requests), Some(0)), "{}", a["failures"]);
    assert_eq!((stats.requests_received, stats.requests_completed), (requests, requests));
    assert_eq!(stats.prompt_tokens, sum(a, "prompt_tokens"));
    assert_eq!(a["metrics"]["prompt_tokens"].as_u64(), Some(stats.prompt_tokens));
    assert_eq!(stats.completion_tokens, sum(a, "output_tokens"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_apis_time_text_and_reasoning_and_pass_their_canaries() {
    let dir = tempfile::tempdir().unwrap();
    for (api, target) in [("responses", ""), ("messages", "anthropic_version = \"2023-06-01\"")] {
        // The `fast` profile reasons before it answers: both delta kinds are exercised.
        let server = MockServer::start(fast()).await.unwrap();
        let file = write_scenario(dir.path(), api, 12, target, "context_tokens = 1024\ntokenizer = \"estimate\"");
        let (a, _) = run_one(&file, &server.base_url(), &[]).await;
        assert_eq!(a["api"], api);
        assert_counts_agree(&server, &a, 12);
        assert_eq!(
            (a["metrics"]["request_canary_passed"].as_u64(), a["metrics"]["request_canary_samples"].as_u64()),
            (Some(12), Some(12))
        );
        let stats = server.stats();
        // Every streamed chunk of the simulator arrived as one text or reasoning delta.
        let chunks = sum(&a, "content_chunks") + sum(&a, "reasoning_chunks");
        assert_eq!(stats.chunks_streamed, chunks);
        for r in records(&a) {
            assert!(r["reasoning_chunks"].as_u64().unwrap() > 0, "{r}");
            // Reasoning starts the first-output clock; visible text the TTFT one.
            assert!(r["ttft_ms"].as_f64().unwrap() > r["time_to_first_output_ms"].as_f64().unwrap());
            assert_eq!(r["output_token_source"], "usage");
            assert!(matches!(r["finish_reason"].as_str(), Some("stop" | "length")), "{r}");
            // The Responses API reports its reasoning tokens; Anthropic's usage does not.
            match api {
                "responses" => assert!(r["reasoning_tokens"].as_u64().unwrap() > 0, "{r}"),
                _ => assert!(r.get("reasoning_tokens").is_none(), "{r}"),
            }
        }
        assert!(a["metric_notes"].is_null(), "streamed APIs have all their metrics");
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_and_rerank_report_input_throughput_and_say_why_streaming_metrics_are_null() {
    let dir = tempfile::tempdir().unwrap();
    for (api, batch) in [("embeddings", 3u64), ("rerank", 5)] {
        let server = MockServer::start(fast()).await.unwrap();
        let file = write_scenario(dir.path(), api, 10, "", &format!("context_tokens = 300\nbatch_size = {batch}"));
        let (a, _) = run_one(&file, &server.base_url(), &[]).await;
        assert_eq!(a["api"], api);
        assert_counts_agree(&server, &a, 10);
        let m = &a["metrics"];
        for key in
            ["ttft_p50_ms", "tpot_p50_ms", "decode_tok_s_p50", "mean_inter_token_latency_ms_p50", "itl_chunk_p50_ms"]
        {
            assert!(m[key].is_null(), "{key} = {}", m[key]);
        }
        assert_eq!((m["ttft_samples"].as_u64(), m["e2e_samples"].as_u64()), (Some(0), Some(10)));
        assert_eq!(m["output_tokens"].as_u64(), Some(0));
        for family in ["ttft", "tpot", "decode_tok_s", "itl_chunk", "time_to_first_output", "throughput_tok_s"] {
            assert!(
                a["metric_notes"][family].as_str().is_some_and(|n| n.contains(api)),
                "{family}: {}",
                a["metric_notes"]
            );
        }
        let wall_s = a["wall_clock_ms"].as_f64().unwrap() / 1000.0;
        let input = m["input_throughput_tok_s"].as_f64().unwrap();
        assert!((input - m["prompt_tokens"].as_f64().unwrap() / wall_s).abs() < 1e-6 * input);
        assert!(m["request_throughput_rps"].as_f64().unwrap() > 0.0);
        for r in records(&a) {
            assert_eq!(r["e2e_ms"], r["time_to_first_output_ms"], "an answer that arrives whole");
            assert!(r["ttft_ms"].is_null() && r["tpot_ms"].is_null());
            // Each input (each query and document) is a prompt of the planned size.
            let target = r["prompt_target_tokens"].as_u64().unwrap();
            assert!(target >= 300 * batch, "target {target}");
        }
        let warnings = a["warnings"].to_string();
        assert!(!warnings.contains("ttft 0"), "a null by design is not a thin p99: {warnings}");
        // The estimate is about 20 % off the simulator's count; calibration cannot probe these
        // APIs (validation refuses it), so the advice is a tokenizer.json.
        let sizing = a["warnings"].as_array().unwrap().iter().find(|w| w["code"] == "prompt_sizing_off");
        let message = sizing.and_then(|w| w["message"].as_str()).expect("prompts sized by the estimate are off");
        assert!(message.contains("tokenizer.json") && !message.contains("\"calibrate\""), "{message}");
        server.shutdown().await;
    }
}

/// A word-level tokenizer over the filler vocabulary, the task's words and the run's canary
/// markers, so token ids decode back into a prompt that still carries its marker.
fn build_tokenizer(path: &Path, seed: u64, requests: u64) {
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    let mut vocab: HashMap<String, u32> = HashMap::new();
    vocab.insert("[UNK]".into(), 0);
    let task = "Task : begin your reply with the exact text and then summarise reference text in one sentence .";
    let markers: Vec<String> = (0..requests).map(|i| anvil_load::request::workload::canary_marker(seed, i)).collect();
    let words = anvil_load::text::filler_words().iter().map(|w| w.to_string());
    for w in words.chain(task.split(' ').map(str::to_string)).chain(markers) {
        let next = vocab.len() as u32;
        vocab.entry(w).or_insert(next);
    }
    let model = WordLevel::builder().vocab(vocab.into_iter().collect()).unk_token("[UNK]".into()).build().unwrap();
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    tokenizer.save(path, false).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_id_prompts_are_counted_exactly_as_planned() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    build_tokenizer(&tokenizer, 5, 8);
    let server = MockServer::start(Profile { tokenizer: Some(tokenizer.clone()), ..fast() }).await.unwrap();
    let workload = format!(
        "context_tokens = {{ 700 = 1, 1500 = 1 }}\ntokenizer = \"{}\"\nprompt_encoding = \"token_ids\"",
        tokenizer.display()
    );
    let file = write_scenario(dir.path(), "completions", 8, "", &workload);
    let (a, _) = run_one(&file, &server.base_url(), &[]).await;
    // Two probes measured the template allowance of text prompts before the run.
    let probes = a["prompt_sizing"]["probes"].as_array().unwrap();
    let probe_tokens: u64 = probes.iter().map(|p| p["server_prompt_tokens"].as_u64().unwrap()).sum();
    let stats = server.stats();
    assert_eq!(stats.requests_received, 8 + probes.len() as u64);
    assert_eq!(stats.prompt_tokens, sum(&a, "prompt_tokens") + probe_tokens, "the server counted the ids exactly");
    assert_eq!(a["scenario"]["workload"]["prompt_encoding"], "token_ids");
    for r in records(&a) {
        let planned = r["planned_context_tokens"].as_u64();
        assert!(matches!(planned, Some(700 | 1500)), "{r}");
        assert_eq!((r["prompt_tokens"].as_u64(), r["prompt_target_tokens"].as_u64()), (planned, planned), "{r}");
    }
    assert_eq!(a["metrics"]["prompt_sizing_error_pct_max"].as_f64(), Some(0.0));
    assert_eq!(a["metrics"]["request_canary_passed"].as_u64(), Some(8), "the ids decode back into the marker");
    server.shutdown().await;
}

/// A stream cut right after its first text delta (at an event boundary).
fn cut_after_first_delta(stream: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(stream.to_vec()).unwrap();
    let delta = text.find("response.output_text.delta\ndata:").unwrap();
    let end = delta + text[delta..].find("\n\n").unwrap() + 2;
    stream[..end].to_vec()
}

/// Failures of the Responses API arrive as events after a 200: each is a failure of its kind,
/// with its server text bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_failure_events_are_failures_of_their_kind() {
    let fixture = |name: &str| std::fs::read(common::manifest_dir().join("tests/fixtures/apis").join(name)).unwrap();
    let huge = format!(
        "event: response.failed\ndata: {}\n\n",
        json!({"type": "response.failed", "response": {"error": {"code": "server_error", "message": "x".repeat(100_000)}}})
    );
    let bodies = [
        fixture("responses-failed.sse"),
        fixture("responses-error.sse"),
        huge.into_bytes(),
        cut_after_first_delta(&fixture("responses-text.sse")),
    ];
    let server = Hostile::start(move |r| {
        if !r.is_generation() {
            return Reply::close(vec![Step::Send(models_answer(&["m"], false))]);
        }
        let body = &bodies[(r.number as usize) % bodies.len()];
        Reply::close(vec![Step::Send([sse_head(), body.clone()].concat())])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_scenario(dir.path(), "responses", 4, "", "context_tokens = 256\ncanaries = false");
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(out.path()).arg("--base-url").arg(server.base_url());
    let result = run(cmd).await;
    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1, "{}", text(&result.stderr));
    let a = check_artifact(&paths[0]);
    let kinds: HashMap<String, u64> = serde_json::from_value(a["error_counts"].clone()).unwrap();
    assert_eq!(
        kinds,
        HashMap::from([
            ("response_failed".to_string(), 2),
            ("server_error_event".to_string(), 1),
            ("missing_done".to_string(), 1)
        ])
    );
    for f in a["failures"].as_array().unwrap() {
        assert!(f["message"].as_str().unwrap().chars().count() <= 201, "{f}");
        match f["error_kind"].as_str() {
            Some("response_failed") => assert_eq!(f["server_error_type"], "server_error"),
            Some("server_error_event") => assert_eq!(f["server_error_type"], "rate_limit_exceeded"),
            _ => assert_eq!(f["message"], "the stream ended without response.completed"),
        }
    }
}

/// The headers of one request, as the scripted server saw them.
type Headers = Vec<(String, String)>;

/// The Messages API gets the key as `x-api-key` (beside the bearer token) and the
/// `anthropic-version` header the scenario asks for; the key is written nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_send_their_headers_and_never_record_the_key() {
    const KEY: &str = "sk-ant-test-0123456789abcdef";
    let seen: Arc<Mutex<Vec<Headers>>> = Arc::default();
    let body = std::fs::read(common::manifest_dir().join("tests/fixtures/apis/messages-text.sse")).unwrap();
    let server = Hostile::start({
        let seen = seen.clone();
        move |r| {
            if !r.is_generation() {
                return Reply::close(vec![Step::Send(models_answer(&["m"], false))]);
            }
            seen.lock().unwrap().push(r.headers.clone());
            assert!(r.target.ends_with("/v1/messages"), "{}", r.target);
            Reply::close(vec![Step::Send([sse_head(), body.clone()].concat())])
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let target = "api_key_env = \"ANVIL_APIS_KEY\"\nanthropic_version = \"2023-06-01\"";
    let file = write_scenario(dir.path(), "messages", 3, target, "context_tokens = 256\ncanaries = false");
    let (a, raw) = run_one(&file, &server.base_url(), &[("ANVIL_APIS_KEY", KEY)]).await;
    assert_eq!(a["completed"].as_u64(), Some(3));
    for r in records(&a) {
        // The fixture's usage: 25 input tokens, 15 output tokens, end_turn.
        assert_eq!((r["prompt_tokens"].as_u64(), r["output_tokens"].as_u64()), (Some(25), Some(15)));
        assert_eq!(r["finish_reason"], "stop");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    for headers in seen.iter() {
        let get = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        assert_eq!(get("x-api-key"), Some(KEY));
        assert_eq!(get("anthropic-version"), Some("2023-06-01"));
        assert_eq!(get("authorization"), Some(format!("Bearer {KEY}").as_str()));
    }
    assert!(!raw.contains(KEY), "the key is never written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_api_combinations_are_refused_before_sending() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    build_tokenizer(&tokenizer, 5, 1);
    let tok = format!("tokenizer = \"{}\"", tokenizer.display());
    let cases: Vec<(&str, String, String, &str)> = vec![
        ("embeddings", String::new(), "context_tokens = 256\ncanaries = true".into(), "workload.canaries"),
        (
            "embeddings",
            String::new(),
            "[workload.sessions]\nturns = 2\nfirst_tokens = 256\nuser_tokens = 32".into(),
            "workload.sessions",
        ),
        ("rerank", String::new(), "context_tokens = 256\nbatch_size = 0".into(), "workload.batch_size"),
        ("chat", String::new(), "context_tokens = 256\nbatch_size = 4".into(), "workload.batch_size"),
        (
            "completions",
            String::new(),
            "context_tokens = 256\nprompt_encoding = \"token_ids\"".into(),
            "workload.prompt_encoding",
        ),
        (
            "chat",
            String::new(),
            format!("context_tokens = 256\nprompt_encoding = \"token_ids\"\n{tok}"),
            "workload.prompt_encoding",
        ),
        (
            "chat",
            "anthropic_version = \"2023-06-01\"".into(),
            "context_tokens = 256".into(),
            "target.anthropic_version",
        ),
        (
            "responses",
            "continuous_usage_stats = true".into(),
            "context_tokens = 256".into(),
            "target.continuous_usage_stats",
        ),
        ("responses", String::new(), "context_tokens = 256\ntokenizer = \"calibrate\"".into(), "workload.tokenizer"),
        ("embeddings", String::new(), "context_tokens = 256\n[output]\nignore_eos = true".into(), "output.ignore_eos"),
        (
            "messages",
            String::new(),
            "context_tokens = 256\n[serve]\nreasoning_effort = \"high\"".into(),
            "serve.reasoning_effort",
        ),
    ];
    for (api, target, workload, key) in cases {
        let path = write_scenario(dir.path(), api, 2, &target, &workload);
        let mut cmd = anvil();
        cmd.arg(&path).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{api} {workload}: {stderr}");
        assert!(stderr.contains(key) && stderr.contains(&*path.display().to_string()), "{key} not named: {stderr}");
    }
    assert_eq!(server.stats().requests_received, 0, "nothing is sent for bad input");
    server.shutdown().await;
}
