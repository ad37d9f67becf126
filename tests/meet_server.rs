//! Meeting the server where it is: the model its `/models` lists is used when it lists exactly
//! one, several listed stop the run before any load, and a 4xx on every sizing probe stops it
//! before the level, with the server's message and the fix.

mod common;

use std::process::Stdio;

use anvil_load::mock::{MockServer, Profile};
use common::hostile::{Hostile, Reply, Step, json_answer};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::json;

fn serving(names: &[&str]) -> Profile {
    Profile { served_model_names: names.iter().map(|n| n.to_string()).collect(), ..Profile::named("fast").unwrap() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_model_listed_is_used_instead_of_the_scenarios() {
    let server = MockServer::start(serving(&["Qwen/Qwen3-8B"])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.records.ndjson");
    let mut cmd = anvil();
    cmd.arg(common::scenario("smoke.toml")).args(["--base-url", &server.base_url(), "-n", "12", "--no-progress"]);
    cmd.args(["--model", "qwen38-swift15-ninfer-dflash2-c4-262k", "-o"]).arg(dir.path()).arg("--records").arg(&records);
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("model: \"Qwen/Qwen3-8B\", the one model the server lists")).count(),
        1,
        "one line says so: {stderr}"
    );
    assert!(stderr.contains("instead of \"qwen38-swift15-ninfer-dflash2-c4-262k\""), "{stderr}");
    let a = check_artifact(&artifacts(dir.path())[0]);
    check_records(&records);
    assert_eq!(a["model"], "Qwen/Qwen3-8B");
    assert_eq!(a["scenario"]["target"]["model"], "Qwen/Qwen3-8B", "the fingerprint covers the model used");
    assert_eq!(
        a["model_source"],
        json!({"source": "server_models_list", "instead_of": "qwen38-swift15-ninfer-dflash2-c4-262k"})
    );
    assert_eq!(a["completed"], 12);
    // The simulator answers any other name 404: nothing it refused, every request it finished
    // named the listed model.
    let stats = server.stats();
    assert_eq!(stats.requests_rejected, 0);
    assert!(stats.requests_completed >= 12, "{stats:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_models_listed_stop_before_any_load_naming_them() {
    let server = MockServer::start(serving(&["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"])).await.unwrap();
    for model in [None, Some("other")] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = anvil();
        cmd.args(["--base-url", &server.base_url(), "-n", "4", "--no-progress", "-o"]).arg(dir.path());
        if let Some(m) = model {
            cmd.args(["--model", m]);
        }
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("\"Qwen/Qwen3-8B\"") && stderr.contains("\"meta-llama/Llama-3.1-8B-Instruct\""),
            "{stderr}"
        );
        assert!(stderr.contains("--model NAME"), "{stderr}");
        assert!(artifacts(dir.path()).is_empty());
    }
    assert_eq!(server.stats().requests_received, 0, "no request reached the server");
    // A listed name is used as it is.
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "-n", "4", "-c", "2", "--input-tokens", "128"]);
    cmd.args(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--no-progress", "-o"]).arg(dir.path());
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a = check_artifact(&artifacts(dir.path())[0]);
    assert!(a.get("model_source").is_none(), "the scenario's own model: {}", a["model_source"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_ids_are_shown_bounded_and_without_secrets() {
    const KEY: &str = "sk-listed-4242-secret";
    let server = Hostile::start(|req| {
        let ids = [format!("m-{KEY}"), "\u{202e}evil\u{7}".to_string(), "x".repeat(5000)];
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert_eq!(req.method, "GET", "nothing but the /models check is sent");
        Reply::close(vec![Step::Send(common::hostile::models_answer(&ids, false))])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    for model in [None, Some("m")] {
        let mut cmd = anvil();
        cmd.env("LISTED_KEY", KEY).args(["--base-url", &server.base_url(), "--api-key-env", "LISTED_KEY", "-o"]);
        cmd.arg(dir.path());
        if let Some(m) = model {
            cmd.args(["--model", m]);
        }
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains(KEY) && !stderr.contains('\u{202e}') && !stderr.contains('\u{7}'), "{stderr}");
        assert!(stderr.len() < 2000, "bounded: {} bytes", stderr.len());
    }
    // A single listed id the sanitizer would change is never sent as the model: the user names it.
    let single = Hostile::start(|_| {
        Reply::close(vec![Step::Send(common::hostile::models_answer(&["\u{202e}evil\u{7}"], false))])
    })
    .await;
    let mut cmd = anvil();
    cmd.args(["--base-url", &single.base_url(), "-o"]).arg(dir.path());
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(single.unstreamed() + single.streamed(), 0);
}

/// vLLM's answer to a model it does not serve.
fn not_found(keep_alive: bool) -> Vec<u8> {
    let body = json!({"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "param": null, "code": 404}});
    json_answer("404 Not Found", "", &body, keep_alive)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_on_every_probe_stops_before_the_level() {
    // No /models (404) and 404 to every generation request: a gateway in front of a server that
    // serves another name.
    let server = Hostile::start(|_| Reply::keep_alive(vec![Step::Send(not_found(true))])).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "--model", "x", "-n", "8", "--no-progress", "-o"]).arg(dir.path());
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("every prompt-sizing probe was refused"), "{stderr}");
    assert!(stderr.contains("HTTP 404") && stderr.contains("does not exist"), "the server's message: {stderr}");
    assert!(stderr.contains("--model NAME"), "the fix: {stderr}");
    assert!(server.unstreamed() > 0, "the probes were sent");
    assert_eq!(server.streamed(), 0, "no request of the level was sent");
    assert!(artifacts(dir.path()).is_empty());

    // Without a model and without a list to choose from: asked for, before anything is sent.
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "-n", "8", "--no-progress", "-o"]).arg(dir.path()).stdin(Stdio::null());
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no model named") && stderr.contains("--model NAME"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_on_every_probe_points_at_the_key() {
    let server = Hostile::start(|req| {
        let body = json!({"error": {"message": "Invalid API key", "type": "AuthenticationError", "code": 401}});
        if req.method == "GET" {
            Reply::keep_alive(vec![Step::Send(common::hostile::models_answer(&["m"], true))])
        } else {
            Reply::keep_alive(vec![Step::Send(json_answer("401 Unauthorized", "", &body, true))])
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = anvil();
    cmd.args(["--base-url", &server.base_url(), "-n", "8", "--no-progress", "-o"]).arg(dir.path());
    let out = run(cmd).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HTTP 401") && stderr.contains("--api-key-env"), "{stderr}");
    assert_eq!(server.streamed(), 0);
}

/// POST `body` to `path` below the simulator's base URL: the status and the JSON answer.
async fn post(server: &MockServer, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let answer = reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_serves_only_its_served_model_names() {
    let server = MockServer::start(serving(&["a", "b"])).await.unwrap();
    let models: serde_json::Value = serde_json::from_slice(
        &reqwest::get(format!("{}/models", server.base_url())).await.unwrap().bytes().await.unwrap(),
    )
    .unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b"]);
    let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let (status, error) = post(&server, "/chat/completions", chat("c")).await;
    assert_eq!(status, 404);
    assert_eq!(
        error,
        json!({"error": {"message": "The model `c` does not exist.", "type": "NotFoundError", "param": null, "code": 404}})
    );
    assert_eq!(post(&server, "/chat/completions", chat("b")).await.0, 200);
    assert_eq!(post(&server, "/embeddings", json!({"model": "c", "input": "hi"})).await.0, 404);
    assert_eq!(post(&server, "/embeddings", json!({"model": "a", "input": "hi"})).await.0, 200);
    server.shutdown().await;
}
