//! Workloads that mean what they say: prompt sizes the server agrees with, cache modes that are
//! cold or warm as declared, mixtures that follow their weights, controlled output, datasets.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, scenario, text};
use serde_json::Value;

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

/// A scenario file in `dir` with the given `[workload]` lines (and optional extra sections).
fn write_scenario(dir: &Path, name: &str, requests: u64, workload: &str, extra: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n[run]\nrequests = {requests}\nseed = 5\n[load]\nconcurrency = 4\n[workload]\nmax_context_tokens = 262144\nmax_tokens = 32\n{workload}\n{extra}"
        ),
    )
    .unwrap();
    path
}

/// Run the binary and return the one artifact it wrote.
async fn run_one(scenario: &Path, args: &[&str]) -> Value {
    run_one_raw(scenario, args).await.0
}

/// The artifact, and its raw text.
async fn run_one_raw(scenario: &Path, args: &[&str]) -> (Value, String) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--out").arg(out.path()).args(args);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(out.path());
    assert_eq!(paths.len(), 1);
    (check_artifact(&paths[0]), std::fs::read_to_string(&paths[0]).unwrap())
}

fn records(a: &Value) -> &Vec<Value> {
    a["request_timings"].as_array().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrated_prompts_are_within_one_percent_of_their_target() {
    let dir = tempfile::tempdir().unwrap();
    for context in [1024, 8192, 65_536, 200_000] {
        let file = write_scenario(dir.path(), "calibrate.toml", 3, &format!("context_tokens = {context}"), "");
        let a = run_one(&file, &[]).await;
        assert_eq!(a["prompt_sizing"]["mode"], "calibrate");
        assert!(a["prompt_sizing"]["probes"].as_array().unwrap().len() >= 2);
        for r in records(&a) {
            let (target, served) = (r["prompt_target_tokens"].as_f64().unwrap(), r["prompt_tokens"].as_f64().unwrap());
            assert!((target - f64::from(context)).abs() <= 2.0, "target {target} for planned {context}");
            let err = (served - target).abs() / target * 100.0;
            assert!(err <= 1.0, "context {context}: server counted {served}, target {target} ({err:.2} %)");
        }
        assert!(a["metrics"]["prompt_sizing_error_pct_max"].as_f64().unwrap() <= 1.0);
    }
    // Without calibration the simulator's different tokenizer shows: the estimate is off.
    let file = write_scenario(dir.path(), "estimate.toml", 3, "context_tokens = 8192\ntokenizer = \"estimate\"", "");
    let a = run_one(&file, &[]).await;
    assert!(a["metrics"]["prompt_sizing_error_pct_mean"].as_f64().unwrap() > 5.0);
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "prompt_sizing_off"));
}

/// A word-level tokenizer over the filler vocabulary, built here (nothing is downloaded).
fn build_tokenizer(path: &Path) {
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    let mut vocab: HashMap<String, u32> = HashMap::new();
    vocab.insert("[UNK]".into(), 0);
    for w in anvil_load::text::filler_words() {
        let next = vocab.len() as u32;
        vocab.entry((*w).to_string()).or_insert(next);
    }
    let model = WordLevel::builder().vocab(vocab.into_iter().collect()).unk_token("[UNK]".into()).build().unwrap();
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    tokenizer.save(path, false).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_tokenizer_sizes_prompts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    build_tokenizer(&tokenizer);
    let server = MockServer::start(Profile { tokenizer: Some(tokenizer.clone()), ..fast() }).await.unwrap();
    for context in [1000, 8192] {
        let file = write_scenario(
            dir.path(),
            "exact.toml",
            4,
            &format!("context_tokens = {context}\ntokenizer = \"{}\"", tokenizer.display()),
            "",
        );
        let a = run_one(&file, &["--base-url", &server.base_url()]).await;
        assert_eq!(a["prompt_sizing"]["mode"], "tokenizer");
        for r in records(&a) {
            assert_eq!(r["prompt_tokens"].as_u64(), Some(context), "{r}");
            assert_eq!(r["prompt_target_tokens"].as_u64(), Some(context));
        }
        assert_eq!(a["metrics"]["prompt_sizing_error_pct_max"].as_f64(), Some(0.0));
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_prompts_are_salted_per_run_unless_reproducible() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cached = |a: &Value| records(a).iter().map(|r| r["cached_tokens"].as_u64().unwrap()).collect::<Vec<_>>();
    let warned = |a: &Value| a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "cache_warm_in_unique_mode");

    let salted = write_scenario(dir.path(), "salted.toml", 8, "context_tokens = 2048", "");
    let url = server.base_url();
    let base = ["--base-url", url.as_str()];
    let _first = run_one(&salted, &base).await;
    let second = run_one(&salted, &base).await;
    assert!(cached(&second).iter().all(|&c| c == 0), "salted prompts hit the cache: {:?}", cached(&second));
    assert!(!warned(&second));
    assert_eq!(second["prompts_reproducible"], false);

    let fixed = write_scenario(dir.path(), "fixed.toml", 8, "context_tokens = 2048\nreproducible = true", "");
    let first = run_one(&fixed, &base).await;
    assert!(cached(&first).iter().all(|&c| c == 0));
    let second = run_one(&fixed, &base).await;
    assert!(cached(&second).iter().all(|&c| c > 1000), "reproducible prompts were cached: {:?}", cached(&second));
    assert!(warned(&second), "the warm cache is reported");
    assert!(second["metrics"]["prefix_cache_hit_avg"].as_f64().unwrap() > 0.5);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prefix_requests_hit_the_warmed_prefix() {
    let a = run_one(&scenario("shared-prefix.toml"), &[]).await;
    assert_eq!(
        (a["prompt_cache_mode"].as_str(), a["shared_prefix_tokens"].as_u64()),
        (Some("shared-prefix"), Some(4096))
    );
    assert_eq!(a["serve_flags"]["shared_prefix_burst"], true);
    let rs = records(&a);
    assert_eq!(rs.len(), 32);
    for r in rs.iter().filter(|r| r["request_index"] != 0) {
        assert!(
            r["cached_tokens"].as_u64().unwrap() >= 4096,
            "request {} cached {}",
            r["request_index"],
            r["cached_tokens"]
        );
    }
    // The warm-up request is kept but not measured.
    let warm = rs.iter().find(|r| r["request_index"] == 0).unwrap();
    assert_eq!(
        (warm["performance_eligible"].as_bool(), warm["exclusion_reason"].as_str()),
        (Some(false), Some("prefix_warmup"))
    );
    let ratios: Vec<f64> = rs
        .iter()
        .filter(|r| r["performance_eligible"] == true)
        .map(|r| r["cached_tokens"].as_f64().unwrap() / r["prompt_tokens"].as_f64().unwrap())
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!((a["metrics"]["prefix_cache_hit_avg"].as_f64().unwrap() - mean).abs() < 1e-12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixture_follows_its_weights_and_its_seed() {
    let first = run_one(&scenario("mixture.toml"), &["--tokenizer", "estimate"]).await;
    let second = run_one(&scenario("mixture.toml"), &["--tokenizer", "estimate"]).await;
    assert_eq!(first["context_distribution"], second["context_distribution"], "same seed, same draws");
    let small = first["context_distribution"]["1024"].as_u64().unwrap();
    let large = first["context_distribution"]["8192"].as_u64().unwrap();
    assert_eq!(small + large, 400);
    // Binomial(400, 3/4): mean 300, sd 8.66; the 99 % band is ±2.576 sd.
    assert!((278..=322).contains(&small), "{small} short contexts out of 400");
    assert_eq!(first["context_tokens"], serde_json::json!({"1024": 3, "8192": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniform_and_normal_contexts_stay_in_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_scenario(
        dir.path(),
        "u.toml",
        40,
        "context_tokens = { uniform = [512, 2048] }\ntokenizer = \"estimate\"",
        "",
    );
    let a = run_one(&file, &[]).await;
    for (size, _) in a["context_distribution"].as_object().unwrap() {
        let size: u32 = size.parse().unwrap();
        assert!((512..=2048).contains(&size));
    }
    assert_eq!(a["context_tokens"], serde_json::json!({"uniform": [512, 2048]}));
    let file = write_scenario(
        dir.path(),
        "n.toml",
        40,
        "context_tokens = { normal = [1024, 200] }\ntokenizer = \"estimate\"",
        "",
    );
    let a = run_one(&file, &[]).await;
    assert_eq!(a["context_distribution"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlled_output_is_observed_and_enforced() {
    let dir = tempfile::tempdir().unwrap();
    // The simulator answers in exactly the requested number of words.
    let file = write_scenario(
        dir.path(),
        "words.toml",
        6,
        "context_tokens = 512",
        "[output]\nresponse_words = 12\ncontrolled_output_policy = \"strict\"\n",
    );
    // Reasoning counts against max_tokens: leave room for it and the 12 words.
    let a = run_one(&file, &["--max-tokens", "128"]).await;
    let m = &a["metrics"];
    assert_eq!((a["response_words"].as_u64(), a["controlled_output_policy"].as_str()), (Some(12), Some("strict")));
    assert_eq!(
        (m["controlled_output_samples"].as_u64(), m["controlled_output_exact_adherence"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(m["controlled_output_exact_adherence_rate"].as_f64(), Some(1.0));
    for r in records(&a) {
        assert_eq!(r["controlled_output"]["observed_words"], 12);
        assert_eq!(r["performance_eligible"], true);
    }
    // 40 words cannot fit in 8 tokens: every answer is truncated, and strict excludes them all.
    let file = write_scenario(
        dir.path(),
        "cut.toml",
        4,
        "context_tokens = 512\ncanaries = false",
        "[output]\nresponse_words = 40\ncontrolled_output_policy = \"strict\"\n",
    );
    let a = run_one(&file, &["--max-tokens", "8"]).await;
    for r in records(&a) {
        assert_eq!(
            (r["controlled_output"]["truncated"].as_bool(), r["performance_eligible"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(r["exclusion_reason"], "controlled_output");
    }
    assert_eq!(a["metrics"]["controlled_output_exact_adherence"], 0);
    assert_eq!(a["performance_eligible"], false);
    // ignore_eos reaches the server: exactly max_tokens tokens every time.
    let file = write_scenario(dir.path(), "eos.toml", 4, "context_tokens = 512", "[output]\nignore_eos = true\n");
    let a = run_one(&file, &[]).await;
    for r in records(&a) {
        assert_eq!((r["output_tokens"].as_u64(), r["finish_reason"].as_str()), (Some(32), Some("length")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_prompts_from_jsonl_and_sharegpt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "\"Explain why rivers meander.\"\n{\"prompt\": \"Name three winter sports.\"}\n{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"What is a station?\"}]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("sharegpt.json"),
        r#"[{"id": "x", "conversations": [{"from": "human", "value": "Describe a forest at night."}, {"from": "gpt", "value": "Dark."}]},
            {"id": "y", "conversations": [{"from": "human", "value": "Why is the sea salty?"}]}]"#,
    )
    .unwrap();
    for (file, format) in [("prompts.jsonl", "jsonl"), ("sharegpt.json", "sharegpt")] {
        let path = write_scenario(dir.path(), "data.toml", 6, &format!("prompts = \"{file}\""), "");
        let (a, raw) = run_one_raw(&path, &[]).await;
        assert_eq!(a["scenario"]["workload"]["prompts"]["format"], format);
        assert_eq!(a["context_tokens"], Value::Null);
        assert_eq!(a["metrics"]["request_canary_passed"], 6, "canaries work on dataset prompts too");
        for r in records(&a) {
            assert_eq!(r["planned_context_tokens"], r["prompt_target_tokens"]);
            // Short prompts: a few tokens of template guesswork is all the error there is.
            let (target, served) = (r["prompt_target_tokens"].as_i64().unwrap(), r["prompt_tokens"].as_i64().unwrap());
            assert!((served - target).abs() <= 6, "{r}");
        }
        assert!(!raw.contains("meander") && !raw.contains("salty"), "prompt text is never written into the artifact");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_workload_combinations_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for (workload, extra, key) in [
        ("context_tokens = 1024\nshared_prefix_tokens = 512", "", "workload.shared_prefix_tokens"),
        ("context_tokens = 1024\nprompt_cache = \"shared-prefix\"", "", "workload.shared_prefix_tokens"),
        (
            "context_tokens = 1024\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 2000",
            "",
            "workload.context_tokens",
        ),
        ("context_tokens = 1024\nprompts = \"p.jsonl\"", "", "workload.context_tokens"),
        ("prompts = \"missing.jsonl\"", "", "workload.prompts"),
        ("context_tokens = 1024\ntokenizer = \"nope/tokenizer.json\"", "", "workload.tokenizer"),
        ("context_tokens = { uniform = [2000, 1000] }", "", "workload.context_tokens.uniform"),
        (
            "context_tokens = 1024",
            "[output]\ncontrolled_output_policy = \"strict\"\n",
            "output.controlled_output_policy",
        ),
        ("context_tokens = 1024", "[output]\nmin_tokens = 64\n", "output.min_tokens"),
    ] {
        let path = write_scenario(dir.path(), "bad.toml", 2, workload, extra);
        let mut cmd = anvil();
        cmd.arg(&path).arg("--out").arg(dir.path().join("out"));
        let result = run(cmd).await;
        assert_eq!(result.status.code(), Some(2), "{workload} {extra}: {}", text(&result.stderr));
        assert!(text(&result.stderr).contains(key), "{key} not named: {}", text(&result.stderr));
    }
}

/// Run the binary and return every level's artifact (sweeps write one per level).
async fn run_levels(scenario: &Path, args: &[&str]) -> Vec<Value> {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--out").arg(out.path()).args(args);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    artifacts(out.path()).iter().map(|p| check_artifact(p)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_of_a_sweep_sends_prompts_no_earlier_level_sent() {
    let dir = tempfile::tempdir().unwrap();
    // The fast simulator keeps a prefix cache: a prompt an earlier level sent would be cached.
    let file = write_scenario(dir.path(), "sweep.toml", 6, "context_tokens = 2048\ntokenizer = \"estimate\"", "");
    let levels = run_levels(&file, &["--concurrency", "1,2,4"]).await;
    assert_eq!(levels.len(), 3);
    for a in &levels {
        assert_eq!(a["simulator"]["cached_tokens"], 0, "level {} found earlier prompts cached", a["concurrency"]);
        assert!(records(a).iter().all(|r| r["cached_tokens"] == 0));
    }
    // Reproducible prompts are the same at every level, and the run description says so.
    let records_file = dir.path().join("fixed.records.ndjson");
    let fixed = write_scenario(
        dir.path(),
        "fixed.toml",
        6,
        "context_tokens = 2048\ntokenizer = \"estimate\"\nreproducible = true",
        "",
    );
    let levels = run_levels(&fixed, &["--concurrency", "1,2", "--records", records_file.to_str().unwrap()]).await;
    let second = levels.iter().find(|a| a["concurrency"] == 2).unwrap();
    assert!(second["simulator"]["cached_tokens"].as_u64().unwrap() > 6 * 1000, "{}", second["simulator"]);
    let run_line: Value =
        serde_json::from_str(std::fs::read_to_string(&records_file).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(run_line["info"]["levels_share_prompts"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_number_adds_no_tokens_the_calibration_did_not_see() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.toml");
    std::fs::write(
        &file,
        "[target]\nmodel = \"m\"\nsimulator = \"instant\"\n[run]\nrequests = 2000\nseed = 3\n[load]\nconcurrency = 32\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 8192\nmax_tokens = 1\nreproducible = true\n",
    )
    .unwrap();
    let a = run_one(&file, &[]).await;
    assert_eq!(a["prompt_sizing"]["mode"], "calibrate");
    // Whole filler words make single requests scatter; the mean over each range of request
    // numbers shows a header that grows with the number (a token is 0.8 % of 128). Reproducible
    // prompts make the run the same every time.
    let mean_error = |lo: u64, hi: u64| {
        let errors: Vec<f64> = records(&a)
            .iter()
            .filter(|r| (lo..hi).contains(&r["request_index"].as_u64().unwrap()))
            .map(|r| r["prompt_sizing_error_pct"].as_f64().unwrap())
            .collect();
        errors.iter().sum::<f64>() / errors.len() as f64
    };
    let buckets = [mean_error(0, 1000), mean_error(1000, 2000)];
    for (bucket, mean) in buckets.iter().enumerate() {
        assert!(mean.abs() <= 1.0, "bucket {bucket}: mean sizing error {mean:.2} % ({buckets:?})");
    }
    let spread = buckets.iter().copied().fold(f64::MIN, f64::max) - buckets.iter().copied().fold(f64::MAX, f64::min);
    assert!(spread <= 0.3, "the sizing error moves with the request number: {buckets:?}");
    assert!(a["metrics"]["prompt_sizing_error_pct_bias"].as_f64().unwrap().abs() <= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_with_their_own_system_message_are_sized_as_the_server_counts_them() {
    // A chat template that adds a 40-token default system prompt unless the conversation
    // brings its own (as Qwen2.5's do): the calibration probes include it, these prompts do not.
    let server = MockServer::start(Profile { default_system_prompt_tokens: 40, ..fast() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let words = anvil_load::text::filler_words();
    let block =
        |offset: usize| (0..words.len()).map(|i| words[(i + offset) % words.len()]).collect::<Vec<_>>().join(" ");
    let mut lines = Vec::new();
    for k in 0..4 {
        let system = serde_json::json!({"messages": [
            {"role": "system", "content": format!("You follow these notes. {}", block(k))},
            {"role": "user", "content": block(k + 7)},
        ]});
        lines.push(system.to_string());
        lines.push(serde_json::json!({ "prompt": block(k + 3) }).to_string());
    }
    std::fs::write(dir.path().join("conversations.jsonl"), lines.join("\n")).unwrap();
    let path = write_scenario(dir.path(), "sys.toml", 16, "prompts = \"conversations.jsonl\"", "");
    let a = run_one(&path, &["--base-url", &server.base_url()]).await;
    let sizing = &a["prompt_sizing"];
    assert!(sizing["system_probe"]["server_prompt_tokens"].is_u64(), "{sizing}");
    assert!(sizing["system_message_overhead"].is_f64(), "{sizing}");
    for r in records(&a) {
        let error = r["prompt_sizing_error_pct"].as_f64().unwrap();
        assert!(error.abs() <= 1.5, "request {}: {error:.2} % ({r})", r["request_index"]);
    }
    assert!(!a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "prompt_sizing_off"));
    server.shutdown().await;
}
