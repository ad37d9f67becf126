//! `anvil-load deploy kubernetes` against hostile input: a scenario path that spells a YAML
//! document, line and paragraph separators, NEL, byte-order marks, bidirectional and C1
//! controls in the scenario, CRLF line endings: the output, read back by a YAML parser
//! (PyYAML, as `kubernetes-validate` reads it), holds exactly the four expected objects with
//! the expected values, the same as the JSON output, and passes the Kubernetes schemas. Values
//! that cannot be escaped into a valid manifest (an environment variable's name with a line
//! break, DEL in the image, a storage size or claim name Kubernetes refuses, credentials in a
//! URL) are refused with exit 2 and nothing printed. The pods take the run's shard token from a
//! Secret and pod 0 serves the coordinator on its own pod IP.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{anvil, text};
use serde_json::Value;

fn deploy(args: &[&str]) -> Output {
    let mut cmd = anvil();
    cmd.arg("deploy").arg("kubernetes").args(args).env_remove("OPENAI_API_KEY");
    cmd.output().expect("the binary runs")
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn scenario_text(target: &str, eol: &str) -> String {
    [
        "# Hostile comment: LS\u{2028}--- PS\u{2029}kind: Secret NEL\u{85}x C1\u{9b}31m BOM\u{feff} RLO\u{202e}olleh tab\there",
        "[target]",
        "model = \"Qwen/Qwen3-8B\" # \u{2028}---\u{2028}apiVersion: v1\u{2029}kind: ConfigMap\u{85}metadata: {name: x}",
        target,
        "",
        "[run]",
        "requests = 400",
        "",
        "[load]",
        "concurrency = 8",
        "",
        "[workload]",
        "context_tokens = 512",
        "max_context_tokens = 8192",
        "max_tokens = 32",
        "",
    ]
    .join(eol)
}

/// The YAML stream read back by PyYAML, as JSON.
fn read_yaml(file: &Path) -> Value {
    let o = Command::new("python3")
        .arg("-c")
        .arg("import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1], encoding='utf-8')))))")
        .arg(file)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "PyYAML cannot read {}: {}", file.display(), text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The JSON output read as YAML by PyYAML (a YAML reader must read it as JSON does).
fn read_json_as_yaml(file: &Path) -> Value {
    let o = Command::new("python3")
        .arg("-c")
        .arg("import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1], encoding='utf-8'))))")
        .arg(file)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "PyYAML cannot read {}: {}", file.display(), text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn validated(file: &Path) {
    let ok = Command::new("kubernetes-validate").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "kubernetes-validate is not installed: `python3 -m pip install kubernetes-validate==1.37.0` (.ci/run does this)"
    );
    let o = Command::new("kubernetes-validate").args(["--strict", "-k", "1.33.0"]).arg(file).output().unwrap();
    let out = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success() && !out.contains("ERROR"), "{out}");
    assert_eq!(text(&o.stdout).matches("passed").count(), 4, "{out}");
}

#[test]
fn hostile_strings_come_back_from_the_yaml_as_written_and_nothing_more() {
    let root = tempfile::tempdir().unwrap();
    // A directory whose name spells a document of its own, and bidirectional controls.
    let evil =
        root.path().join("x\n---\n{apiVersion: v1, kind: ConfigMap, metadata: {name: injected}}\n#\u{2028}\u{202e}");
    std::fs::create_dir(&evil).unwrap();
    for eol in ["\n", "\r\n"] {
        let body = scenario_text("base_url = \"http://vllm.inference:8000/v1\"\napi_key_env = \"OPENAI_API_KEY\"", eol);
        let file = write(&evil, "bench.toml", &body);
        let args = |format: &str| {
            deploy(&[
                "--shards",
                "4",
                "--scenario",
                file.to_str().unwrap(),
                "--image",
                "registry.example.com/anvil-load:0.1.0",
                "--namespace",
                "bench",
                "--results-size",
                "1.5Gi",
                "--format",
                format,
            ])
        };
        let (yaml, json) = (args("yaml"), args("json"));
        assert!(yaml.status.success() && json.status.success(), "{}{}", text(&yaml.stderr), text(&json.stderr));
        let yaml_path = write(root.path(), "out.yaml", &text(&yaml.stdout));
        let json_path = write(root.path(), "out.json", &text(&json.stdout));
        let docs = read_yaml(&yaml_path);
        let docs = docs.as_array().unwrap();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ConfigMap", "Service", "PersistentVolumeClaim", "Job"], "exactly the four objects");
        let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["anvil-load-scenario", "anvil-load", "anvil-load-results", "anvil-load"]);
        assert_eq!(
            docs[0]["data"]["scenario.toml"],
            Value::String(body.clone()),
            "the scenario, character for character"
        );
        assert_eq!(docs[2]["spec"]["resources"]["requests"]["storage"], "1.5Gi");
        let list: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(&Value::Array(docs.clone()), &list["items"], "the YAML is the JSON");
        assert_eq!(read_json_as_yaml(&json_path), list, "the JSON reads the same as YAML");
        // The header comments stay comments: every line of the output outside the documents.
        let out = text(&yaml.stdout);
        for line in out.lines().take_while(|l| *l != "---") {
            assert!(line.starts_with('#'), "a header line that is not a comment: {line:?}");
        }
        for bad in ['\u{2028}', '\u{2029}', '\u{85}', '\u{7f}', '\u{feff}', '\u{202e}', '\u{9b}', '\r'] {
            assert!(!out.contains(bad), "{bad:?} written raw");
            assert!(!text(&json.stdout).contains(bad), "{bad:?} written raw in the JSON");
        }
        validated(&yaml_path);
    }
}

#[test]
fn values_that_cannot_be_written_safely_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.toml", &scenario_text("base_url = \"http://engine:8000/v1\"", "\n"));
    let good = good.to_str().unwrap();
    let injected_env = write(
        dir.path(),
        "env.toml",
        &scenario_text(
            "base_url = \"http://engine:8000/v1\"\napi_key_env = \"KEY\\n---\\napiVersion: v1\\nkind: Secret\"",
            "\n",
        ),
    );
    let reserved_env = write(
        dir.path(),
        "reserved.toml",
        &scenario_text("base_url = \"http://engine:8000/v1\"\napi_key_env = \"ANVIL_SHARD_TOKEN\"", "\n"),
    );
    let secret_query = write(
        dir.path(),
        "query.toml",
        &scenario_text("base_url = \"http://engine:8000/v1?api_key=sk-live-0123\"", "\n"),
    );
    let secret_metrics = write(
        dir.path(),
        "metrics.toml",
        &scenario_text(
            "base_url = \"http://engine:8000/v1\"\nmetrics_url = \"http://admin:hunter22@engine:8000/metrics\"",
            "\n",
        ),
    );
    let secret_endpoint = write(
        dir.path(),
        "endpoints.toml",
        &scenario_text(
            "base_url = \"http://engine:8000/v1\"\nmetrics = true\nmetrics_urls = [\"http://gpu:9400/metrics\", \"http://admin:hunter22@gpu:9100/metrics\"]",
            "\n",
        ),
    );
    // The live metrics' receivers land in the ConfigMap as well; the pods would have no token.
    let run_key = |name: &str, key: &str| {
        let text = scenario_text("base_url = \"http://engine:8000/v1\"", "\n");
        write(dir.path(), name, &text.replacen("requests = 400", &format!("requests = 400\n{key}"), 1))
    };
    let secret_push = run_key("push.toml", "remote_write = \"http://ops:hunter22@prom:9090/api/v1/write\"");
    let secret_otlp = run_key("otlp.toml", "otlp = \"http://collector:4318/v1/metrics?token=sk-live-0123\"");
    let push_token =
        run_key("token.toml", "remote_write = \"http://prom:9090/api/v1/write\"\npush_token_env = \"PUSH_TOKEN\"");
    let base = ["--shards", "2", "--image", "anvil-load:dev"];
    for (extra, says) in [
        (vec!["--scenario", secret_push.to_str().unwrap()], "run.remote_write"),
        (vec!["--scenario", secret_otlp.to_str().unwrap()], "carries credentials"),
        (vec!["--scenario", push_token.to_str().unwrap()], "run.push_token_env"),
        (vec!["--scenario", secret_endpoint.to_str().unwrap()], "target.metrics_urls[1]"),
        (vec!["--scenario", injected_env.to_str().unwrap()], "not an environment variable's name"),
        (vec!["--scenario", reserved_env.to_str().unwrap()], "the pods set that variable themselves"),
        (vec!["--scenario", secret_query.to_str().unwrap()], "carries credentials"),
        (vec!["--scenario", secret_metrics.to_str().unwrap()], "carries credentials"),
        (vec!["--scenario", good, "--base-url", "http://bench:hunter22@engine:8000/v1"], "carries credentials"),
        (vec!["--scenario", good, "--base-url", "http://engine:8000/v1\n---"], "control character"),
        (vec!["--scenario", good, "--image", "anvil-load:dev\u{7f}"], "--image"),
        (vec!["--scenario", good, "--image", "anvil-load:dev\n---\nkind: Secret"], "--image"),
        (vec!["--scenario", good, "--results-size", "10Gi\n---"], "--results-size"),
        (vec!["--scenario", good, "--results-size", "0"], "--results-size"),
        (vec!["--scenario", good, "--results-size", "lots"], "--results-size"),
        (vec!["--scenario", good, "--results-claim", "Shared_NFS"], "--results-claim"),
        (vec!["--scenario", good, "--results-claim", "nfs\n---"], "--results-claim"),
        (vec!["--scenario", good, "--join-timeout", "10m\n---"], "--join-timeout"),
        (vec!["--scenario", good, "--join-timeout", "0s"], "--join-timeout"),
        (vec!["--scenario", good, "--port", "0"], "--port"),
        (vec!["--scenario", good, "--namespace", "bench\n---"], "DNS label"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let o = deploy(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o.stderr));
        assert!(o.stdout.is_empty(), "{extra:?} printed a manifest");
        let err = text(&o.stderr);
        assert!(err.contains(says), "{extra:?}: {err}");
        for secret in ["hunter22", "sk-live-0123"] {
            assert!(!err.contains(secret), "{extra:?}: the secret is in the message: {err}");
        }
    }
}

#[test]
fn the_pods_authenticate_with_the_shard_token_and_pod_0_serves_on_its_own_ip() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "bench.toml", &scenario_text("base_url = \"http://engine:8000/v1\"", "\n"));
    let args = |format: &str| {
        deploy(&[
            "--shards",
            "3",
            "--scenario",
            file.to_str().unwrap(),
            "--image",
            "anvil-load:dev",
            "--name",
            "sweep",
            "--format",
            format,
        ])
    };
    let o = args("json");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let job = list["items"].as_array().unwrap().iter().find(|i| i["kind"] == "Job").unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_array().unwrap();
    let token = env.iter().find(|e| e["name"] == "ANVIL_SHARD_TOKEN").expect("the token variable");
    assert_eq!(token["valueFrom"]["secretKeyRef"], serde_json::json!({"name": "sweep-shard-token", "key": "token"}));
    let pod_ip = env.iter().find(|e| e["name"] == "POD_IP").expect("the pod's IP");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    let args_list: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args_list.windows(2).any(|w| w == ["--coordinator-listen", "$(POD_IP)"]), "{args_list:?}");
    assert!(args_list.windows(2).any(|w| w == ["--coordinator", "sweep-0.sweep:7311"]), "{args_list:?}");
    assert!(args_list.windows(2).any(|w| w == ["--join-timeout", "10m"]), "{args_list:?}");
    let yaml = args("yaml");
    let out = text(&yaml.stdout);
    assert!(
        out.contains("kubectl -n default create secret generic sweep-shard-token --from-literal=token=\"$(openssl rand -hex 32)\""),
        "{out}"
    );
}
