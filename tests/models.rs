//! Several models in one run (`target.models`) and cache resets before each level
//! (`load.reset_cache`), against the simulator serving LoRA adapters and honouring the three
//! reset endpoints, each counting what it did: the per-model table's counts are the server's own
//! per-model counts (zipf, random, round robin), every turn of a conversation names one model, a
//! model the server does not list stops the run before any load, each reset spelling is called
//! before every level (and the first request of each level then finds nothing cached), a server
//! whose reset does not take is warned about, and bad values exit 2 naming the key.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_load::mock::{Lora, MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::Value;

/// A fast server with a prefix cache, serving `anvil-sim` and the adapters `loras`.
fn sim(loras: &[(&str, Option<f64>)]) -> Profile {
    Profile {
        name: "lora".into(),
        prefill_tok_s: Some(1_000_000.0),
        time_per_output_token: Duration::from_micros(500),
        reasoning_tokens: (0, 0),
        content_tokens: (16, 16),
        tokens_per_chunk: 1,
        prefix_cache: true,
        loras: loras
            .iter()
            .map(|(name, ms)| Lora { name: (*name).to_string(), time_per_output_token_ms: *ms })
            .collect(),
        ..Profile::named("fast").unwrap()
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

const THREE: &str = "models = [{ name = \"anvil-sim\" }, { name = \"sql-lora\" }, { name = \"chat-lora\" }]";

/// `(name, requests)` of the artifact's per-model table.
fn table(a: &Value) -> BTreeMap<String, u64> {
    a["models"]
        .as_array()
        .expect("a per-model table")
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r["requests"].as_u64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_model_mix_is_counted_per_model_as_the_server_counted_it() {
    for (assignment, extra) in [("zipf", "model_zipf_exponent = 1.2"), ("random", ""), ("round_robin", "")] {
        let server = MockServer::start(sim(&[("sql-lora", Some(2.0)), ("chat-lora", None)])).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "[target]\nbase_url = \"{}\"\n{THREE}\nmodel_assignment = \"{assignment}\"\n{extra}\n[run]\nrequests = 60\nseed = 5\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 200\nmax_context_tokens = 4096\nmax_tokens = 16\ntokenizer = \"estimate\"\n",
            server.base_url()
        );
        let file = write(dir.path(), "mix.toml", &body);
        let out = dir.path().join("out");
        let records = dir.path().join("records.ndjson");
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress").arg("--records").arg(&records);
        let result = run(cmd).await;
        assert_eq!(result.status.code(), Some(0), "{assignment}: {}", text(&result.stderr));
        let art = check_artifact(&artifacts(&out)[0]);
        check_records(&records);
        let seen = server.stats().requests_by_model;
        let counted = table(&art);
        assert_eq!(counted, seen, "{assignment}: the table counts what the server saw per model");
        assert_eq!(counted.values().sum::<u64>(), 60);
        assert_eq!(counted.len(), 3, "{assignment}: every model was sent something: {counted:?}");
        match assignment {
            "round_robin" => assert_eq!(counted.values().copied().collect::<Vec<_>>(), [20, 20, 20]),
            // Zipf by list order: the first model the most used.
            "zipf" => assert!(counted["anvil-sim"] > counted["chat-lora"], "{counted:?}"),
            _ => {}
        }
        // Every record names its model, and those names are the table's.
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for r in art["request_timings"].as_array().unwrap() {
            *by.entry(r["model"].as_str().expect("every record names its model").to_string()).or_default() += 1;
        }
        assert_eq!(by, counted);
        // The adapter with its own, slower decode shows it in its own row.
        let tpot = |name: &str| {
            art["models"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap()["tpot_ms"]["p50"]
                .as_f64()
                .unwrap()
        };
        assert!(tpot("sql-lora") > tpot("anvil-sim") * 2.0, "{}", art["models"]);
        let console = text(&result.stdout);
        for name in ["anvil-sim", "sql-lora", "chat-lora"] {
            assert!(console.contains(&format!("model {name}:")), "{console}");
        }
        // summarize rebuilds the table from the records alone.
        let again = dir.path().join("summarized");
        let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&again).output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let rebuilt = check_artifact(&artifacts(&again)[0]);
        assert_eq!(rebuilt["models"], art["models"]);
        // The report shows the table.
        let md = dir.path().join("report.md");
        let o =
            anvil().arg("report").arg(&artifacts(&out)[0]).args(["--format", "md", "--out"]).arg(&md).output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let md = std::fs::read_to_string(&md).unwrap();
        assert!(md.contains("| model | requests | failed | TTFT p50 ms |"), "{md}");
        assert!(md.contains(&format!("| sql-lora | {} |", counted["sql-lora"])), "{md}");
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_of_a_conversation_names_its_model() {
    let server = MockServer::start(sim(&[("sql-lora", None), ("chat-lora", None)])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "[target]\nbase_url = \"{}\"\n{THREE}\n[run]\nseed = 3\n[load]\nsessions = 4\n[workload]\nmax_context_tokens = 8192\nmax_tokens = 16\ntokenizer = \"estimate\"\n[workload.sessions]\nconversations = 12\nturns = 3\nfirst_tokens = 300\nuser_tokens = 40\noutput_tokens = 16\nthink_time = \"10ms\"\n",
        server.base_url()
    );
    let file = write(dir.path(), "sessions.toml", &body);
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let art = check_artifact(&artifacts(&out)[0]);
    let mut by_session: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in art["request_timings"].as_array().unwrap() {
        by_session
            .entry(r["session"].as_str().unwrap().to_string())
            .or_default()
            .insert(r["model"].as_str().unwrap().to_string());
    }
    assert_eq!(by_session.len(), 12);
    assert!(by_session.values().all(|m| m.len() == 1), "a conversation changed model: {by_session:?}");
    let used: BTreeSet<&String> = by_session.values().flatten().collect();
    assert!(used.len() >= 2, "the conversations spread over the models: {used:?}");
    assert_eq!(table(&art), server.stats().requests_by_model);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_server_does_not_list_stops_the_run_before_any_load() {
    let server = MockServer::start(sim(&[("sql-lora", None)])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "[target]\nbase_url = \"{}\"\nmodels = [{{ name = \"anvil-sim\" }}, {{ name = \"sql-lora\" }}, {{ name = \"typo-lora\" }}, {{ name = \"gone\" }}]\n[run]\nrequests = 4\n[workload]\ncontext_tokens = 100\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n",
        server.base_url()
    );
    let file = write(dir.path(), "missing.toml", &body);
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--no-progress");
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("typo-lora, gone") && stderr.contains("target.models"), "{stderr}");
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
    server.shutdown().await;
}

/// A shared-prefix sweep of two levels with the same prompts at both (reproducible), so the
/// second level would find the first's prefix cached unless the reset took.
fn reset_scenario(base_url: &str, reset: &str) -> String {
    format!(
        "[target]\nbase_url = \"{base_url}\"\nmodel = \"anvil-sim\"\n[run]\nrequests = 12\nseed = 9\n[load]\nconcurrency = [1, 2]\nreset_cache = \"{reset}\"\n[workload]\ncontext_tokens = 600\nmax_context_tokens = 8192\nmax_tokens = 8\ntokenizer = \"estimate\"\nreproducible = true\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 400\nshared_prefix_burst = true\n"
    )
}

/// Run `reset` against `server`; the two level artifacts.
async fn two_levels(server: &MockServer, reset: &str, dir: &Path) -> (Vec<Value>, String) {
    let file = write(dir, "reset.toml", &reset_scenario(&server.base_url(), reset));
    let out = dir.join("out");
    let records = dir.join("records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress").arg("--records").arg(&records);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{reset}: {}", text(&result.stderr));
    let found = artifacts(&out);
    assert_eq!(found.len(), 2, "{found:?}");
    let levels: Vec<Value> = found.iter().map(|p| check_artifact(p)).collect();
    check_records(&records);
    // summarize rebuilds each level's reset and warnings from the records alone.
    let again = dir.join("summarized");
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&again).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    for (live, path) in levels.iter().zip(artifacts(&again)) {
        let rebuilt = check_artifact(&path);
        assert_eq!(rebuilt["cache_reset"], live["cache_reset"]);
        assert_eq!(codes(&rebuilt), codes(live));
    }
    (levels, text(&result.stdout) + &text(&result.stderr))
}

/// The cached tokens of the level's earliest-started request.
fn first_cached(a: &Value) -> u64 {
    let rts = a["request_timings"].as_array().unwrap();
    let first = rts
        .iter()
        .min_by(|x, y| x["start_offset_ms"].as_f64().unwrap().total_cmp(&y["start_offset_ms"].as_f64().unwrap()))
        .unwrap();
    first["cached_tokens"].as_u64().expect("the simulator reports cached tokens")
}

fn codes(a: &Value) -> Vec<String> {
    a["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reset_spelling_is_called_before_every_level_and_the_levels_start_cold() {
    for (reset, per_level) in [("vllm", 1), ("sglang", 1), ("llamacpp", u64::from(anvil_load::mock::LLAMACPP_SLOTS))] {
        let server = MockServer::start(sim(&[])).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (levels, _) = two_levels(&server, reset, dir.path()).await;
        let resets = server.stats().cache_resets;
        assert_eq!(resets, BTreeMap::from([(reset.to_string(), 2 * per_level)]), "{reset}: one reset per level");
        for a in &levels {
            let r = &a["cache_reset"];
            assert_eq!(r["engine"], reset);
            assert_eq!(r["ok"], true);
            assert_eq!(r["replicas"][0]["status"], 200, "{r}");
            assert_eq!(first_cached(a), 0, "{reset}: the level's first request found nothing cached");
            assert!(!codes(a).contains(&"cache_not_reset".to_string()), "{:?}", codes(a));
            // Later requests of the level did find the shared prefix: the cache works.
            assert!(a["request_timings"].as_array().unwrap().iter().any(|r| r["cached_tokens"].as_u64() > Some(0)));
        }
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_that_does_not_take_is_warned_about() {
    let server = MockServer::start(Profile { ignore_cache_resets: true, ..sim(&[]) }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (levels, console) = two_levels(&server, "sglang", dir.path()).await;
    assert_eq!(server.stats().cache_resets["sglang"], 2);
    assert!(first_cached(&levels[1]) > 0, "the second level started warm");
    assert!(codes(&levels[1]).contains(&"cache_not_reset".to_string()), "{:?}", codes(&levels[1]));
    assert_eq!(console.matches("yet its first request").count(), 1, "said once: {console}");
    server.shutdown().await;
}

/// A server that lists `anvil-sim` in `/v1/models` and answers 404 to everything else (as vLLM
/// does to `/reset_prefix_cache` without `VLLM_SERVER_DEV_MODE=1`); the paths it was asked.
fn without_reset_endpoints() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { continue };
            let mut line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
            seen.lock().unwrap().push(path.clone());
            let (status, body) = if path == "/v1/models" {
                ("200 OK", r#"{"object":"list","data":[{"id":"anvil-sim","object":"model"}]}"#)
            } else {
                ("404 Not Found", r#"{"detail":"Not Found"}"#)
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_the_server_refuses_stops_the_run_before_the_level() {
    let (url, asked) = without_reset_endpoints();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "reset.toml", &reset_scenario(&url, "vllm"));
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress");
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/reset_prefix_cache answered 404") && stderr.contains("VLLM_SERVER_DEV_MODE=1"),
        "{stderr}"
    );
    let asked = asked.lock().unwrap().clone();
    assert!(asked.contains(&"/reset_prefix_cache".to_string()), "{asked:?}");
    assert!(!asked.iter().any(|p| p.contains("completions")), "no request was sent: {asked:?}");
}

#[test]
fn bad_values_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("model = \"a\"\nmodels = [{ name = \"b\" }]", "", "target.models"),
        (
            "models = [{ name = \"a\" }, { name = \"b\" }]\nmodel_assignment = \"zipfian\"",
            "",
            "target.model_assignment",
        ),
        (
            "models = [{ name = \"a\", weight = 2 }, { name = \"b\" }]\nmodel_assignment = \"zipf\"",
            "",
            "target.models[0].weight",
        ),
        ("models = [{ name = \"a\", weight = 0 }, { name = \"b\" }]", "", "target.models[0].weight"),
        ("models = [{ name = \"a\" }, { name = \"a\" }]", "", "target.models[1].name"),
        ("models = [{ name = \" \" }]", "", "target.models[0].name"),
        ("models = []", "", "target.models"),
        ("models = [{ name = \"a\" }, { name = \"b\" }]\nmodel_zipf_exponent = 1.0", "", "target.model_zipf_exponent"),
        (
            "models = [{ name = \"a\" }, { name = \"b\" }]\nmodel_assignment = \"zipf\"\nmodel_zipf_exponent = -1",
            "",
            "target.model_zipf_exponent",
        ),
        ("model_assignment = \"random\"", "", "target.model_assignment"),
        ("models = [{ name = \"a\", share = 1 }]", "", "target.models"),
        ("", "reset_cache = \"redis\"", "load.reset_cache"),
    ];
    for (i, (target, load, key)) in cases.iter().enumerate() {
        let body = format!(
            "[target]\nsimulator = \"instant\"\n{target}\n[run]\nrequests = 1\n[load]\n{load}\n[workload]\ncontext_tokens = 100\nmax_context_tokens = 4096\nmax_tokens = 8\n"
        );
        let file = write(dir.path(), &format!("bad{i}.toml"), &body);
        let o = anvil().arg(&file).arg("--out").arg(dir.path().join("out")).output().unwrap();
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{body}\n{stderr}");
        assert!(stderr.contains(key), "{body}\nexpected {key}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mix_over_two_replicas_counts_what_both_servers_saw() {
    let loras = [("sql-lora", None), ("chat-lora", None)];
    let (a, b) = (MockServer::start(sim(&loras)).await.unwrap(), MockServer::start(sim(&loras)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "[target]\nbase_urls = [\"{}\", \"{}\"]\n{THREE}\nmodel_assignment = \"round_robin\"\n[run]\nrequests = 30\n[load]\nconcurrency = [2, 3]\nreset_cache = \"sglang\"\n[workload]\ncontext_tokens = 200\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n",
        a.base_url(),
        b.base_url()
    );
    let file = write(dir.path(), "replicas.toml", &body);
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let levels: Vec<Value> = artifacts(&out).iter().map(|p| check_artifact(p)).collect();
    assert_eq!(levels.len(), 2);
    // Per model, both levels together are what the two servers saw together.
    let mut counted: BTreeMap<String, u64> = BTreeMap::new();
    for art in &levels {
        for (name, n) in table(art) {
            *counted.entry(name).or_default() += n;
        }
        // Every replica was reset before the level.
        assert_eq!(art["cache_reset"]["replicas"].as_array().unwrap().len(), 2, "{}", art["cache_reset"]);
    }
    let mut seen = a.stats().requests_by_model;
    for (name, n) in b.stats().requests_by_model {
        *seen.entry(name).or_default() += n;
    }
    assert_eq!(counted, seen);
    assert_eq!(counted.values().copied().collect::<Vec<_>>(), [20, 20, 20]);
    assert_eq!(a.stats().cache_resets["sglang"], 2);
    assert_eq!(b.stats().cache_resets["sglang"], 2);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_lists_its_adapters_and_refuses_an_unknown_model() {
    let server = MockServer::start(sim(&[("sql-lora", Some(4.0))])).await.unwrap();
    let http = reqwest::Client::new();
    let json = |body: bytes::Bytes| -> Value { serde_json::from_slice(&body).unwrap() };
    let listed = json(http.get(format!("{}/models", server.base_url())).send().await.unwrap().bytes().await.unwrap());
    let ids: Vec<&str> = listed["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["anvil-sim", "sql-lora"]);
    assert_eq!(listed["data"][1]["parent"], "anvil-sim");
    let ask = |model: &str| {
        http.post(format!("{}/chat/completions", server.base_url()))
            .header("content-type", "application/json")
            .body(
                serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
                    .to_string(),
            )
            .send()
    };
    assert_eq!(ask("sql-lora").await.unwrap().status(), 200);
    assert_eq!(ask("anvil-sim").await.unwrap().status(), 200);
    assert_eq!(ask("other-lora").await.unwrap().status(), 404);
    assert_eq!(
        server.stats().requests_by_model,
        BTreeMap::from([("anvil-sim".to_string(), 1), ("sql-lora".to_string(), 1)])
    );
    let root = server.base_url().trim_end_matches("/v1").to_string();
    let slots = json(http.get(format!("{root}/slots")).send().await.unwrap().bytes().await.unwrap());
    assert_eq!(slots.as_array().unwrap().len(), anvil_load::mock::LLAMACPP_SLOTS as usize);
    assert_eq!(http.post(format!("{root}/slots/0?action=erase")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{root}/slots/0?action=save")).send().await.unwrap().status(), 400);
    assert_eq!(http.post(format!("{root}/reset_prefix_cache")).send().await.unwrap().status(), 200);
    assert_eq!(server.stats().cache_resets, BTreeMap::from([("llamacpp".to_string(), 1), ("vllm".to_string(), 1)]));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_of_two_shards_keeps_the_per_model_table_and_the_reset() {
    let server = MockServer::start(sim(&[("sql-lora", None), ("chat-lora", None)])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "[target]\nbase_url = \"{}\"\n{THREE}\n[run]\nrequests = 40\nseed = 11\n[load]\nconcurrency = 4\nreset_cache = \"vllm\"\n[workload]\ncontext_tokens = 200\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n",
        server.base_url()
    );
    let file = write(dir.path(), "shards.toml", &body);
    let coordinator = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children = (0..2)
        .map(|i| {
            let mut cmd = anvil();
            cmd.arg(&file).arg("--out").arg(&outs[i]).arg("--quiet");
            cmd.arg("--shard").arg(format!("{i}/2")).arg("--coordinator").arg(&coordinator);
            cmd.arg("--join-timeout").arg("60s");
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for o in common::wait_all(children, Duration::from_secs(120)).await {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let records: Vec<PathBuf> = outs
        .iter()
        .map(|o| {
            std::fs::read_dir(o)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| {
                    let name = p.to_string_lossy();
                    name.ends_with(".records.ndjson") && !name.contains(".merged.")
                })
                .expect("each shard keeps its records")
        })
        .collect();
    let merged = dir.path().join("merged");
    let o = anvil().arg("merge").args(&records).arg("--out").arg(&merged).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let found: Vec<PathBuf> =
        artifacts(&merged).into_iter().filter(|p| !p.to_string_lossy().contains(".shard")).collect();
    let art = check_artifact(&found[0]);
    assert_eq!(art["shards"]["count"], 2);
    assert_eq!(table(&art), server.stats().requests_by_model, "the merged table counts what the server saw");
    assert_eq!(art["cache_reset"]["engine"], "vllm");
    assert_eq!(server.stats().cache_resets["vllm"], 2, "each shard reset the server before the level");
    server.shutdown().await;
}
