//! The Kubernetes manifests proven to run, not only to parse: this test plays the Job
//! controller. It reads the Indexed Job that `deploy kubernetes` prints and starts one process
//! per completion index exactly as the kubelet would start the container: the image's entrypoint
//! (read from the `Dockerfile`) with the container's `args`, its `env` (values, the downward
//! API's pod IP, the Secret's token) and `JOB_COMPLETION_INDEX`, `$(VAR)` expanded as Kubernetes
//! expands it; the ConfigMap's files where its volume is mounted, the results claim where its
//! volume is mounted (one directory, shared), and the pods' DNS names (`<job>-<i>.<service>`)
//! resolved to loopback. The shards run against the simulator, and pod 0's merged artifacts
//! must equal a single process's run of the same scenario.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, check_artifact, text, wait_all};
use serde_json::Value;

const SHARDS: u32 = 3;
const TOKEN: &str = "a-test-token-of-the-run";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The image's entrypoint, which the Job's `args` follow: it must be anvil-load.
fn entrypoint() -> String {
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    let line = dockerfile.lines().find(|l| l.starts_with("ENTRYPOINT")).expect("the Dockerfile has an ENTRYPOINT");
    let exec: Vec<String> = serde_json::from_str(line.trim_start_matches("ENTRYPOINT").trim()).expect("exec form");
    assert_eq!(exec.len(), 1, "the entrypoint is the binary alone: {exec:?}");
    exec[0].clone()
}

/// `$(VAR)` replaced by the variable's value where it is defined, as Kubernetes expands a
/// container's `args`.
fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = arg.to_string();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_job_runs_as_written_and_merges_into_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bench.toml");
    std::fs::write(
        &scenario,
        "[target]\nmodel = \"anvil-sim\"\n\n[run]\nrequests = 24\nseed = 5\n\n[load]\nconcurrency = [3, 6]\n\n[workload]\ncontext_tokens = { 256 = 1, 512 = 1 }\nmax_context_tokens = 8192\nmax_tokens = 8\ncanaries = true\nreproducible = true\ntokenizer = \"estimate\"\n",
    )
    .unwrap();
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let port = free_port().to_string();
    let printed = anvil()
        .args(["deploy", "kubernetes", "--shards", &SHARDS.to_string(), "--image", "anvil-load:dev"])
        .args(["--name", "sweep", "--port", &port, "--join-timeout", "60s", "--format", "json"])
        .arg("--scenario")
        .arg(&scenario)
        .arg("--base-url")
        .arg(server.base_url())
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    let list: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let find = |kind: &str| items.iter().find(|i| i["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    let (job, config, service) = (find("Job"), find("ConfigMap"), find("Service"));
    let pod = &job["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["completions"], SHARDS);

    // The volumes, where the kubelet would mount them: the ConfigMap's keys as files, the claim
    // as one directory every pod shares.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap();
        let host = dir.path().join(format!("volume-{name}"));
        std::fs::create_dir_all(&host).unwrap();
        if let Some(map) = volume.get("configMap") {
            assert_eq!(map["name"], config["metadata"]["name"]);
            for (file, content) in config["data"].as_object().unwrap() {
                std::fs::write(host.join(file), content.as_str().unwrap()).unwrap();
            }
        } else {
            assert!(volume.get("persistentVolumeClaim").is_some(), "{volume}");
        }
        mounts.push((mount["mountPath"].as_str().unwrap().to_string(), host));
    }
    let on_host = |arg: String| -> String {
        for (path, host) in &mounts {
            if let Some(rest) = arg.strip_prefix(path.as_str()) {
                return format!("{}{rest}", host.display());
            }
        }
        arg
    };
    // Pod DNS names (`<hostname>.<subdomain>`, the Service being headless) resolve to loopback.
    let subdomain = format!(".{}:", service["metadata"]["name"].as_str().unwrap());
    assert_eq!(pod["subdomain"], service["metadata"]["name"]);

    let program = entrypoint();
    assert!(program.ends_with("/anvil-load"), "{program}");
    let children: Vec<Child> = (0..SHARDS)
        .map(|index| {
            let mut env = BTreeMap::from([("JOB_COMPLETION_INDEX".to_string(), index.to_string())]);
            for var in container["env"].as_array().unwrap() {
                let name = var["name"].as_str().unwrap().to_string();
                let value = if let Some(v) = var["value"].as_str() {
                    v.to_string()
                } else if var["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP" {
                    "127.0.0.1".to_string()
                } else if var["valueFrom"]["secretKeyRef"]["key"] == "token" {
                    TOKEN.to_string()
                } else {
                    panic!("an environment variable this test cannot fill: {var}")
                };
                env.insert(name, value);
            }
            let args: Vec<String> = container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| expand(a.as_str().unwrap(), &env))
                .map(on_host)
                .map(|a| match a.split_once(&subdomain) {
                    Some((host, port)) if host.starts_with("sweep-") => format!("127.0.0.1:{port}"),
                    _ => a,
                })
                .collect();
            let mut cmd = anvil();
            cmd.args(&args).env_clear().envs(&env).env("PATH", std::env::var("PATH").unwrap_or_default());
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the container's process starts")
        })
        .collect();
    let outputs = wait_all(children, Duration::from_secs(120)).await;
    let describe = || -> String {
        outputs
            .iter()
            .enumerate()
            .map(|(i, o)| format!("--- pod {i}: {:?}\n{}{}", o.status.code(), text(&o.stdout), text(&o.stderr)))
            .collect()
    };
    assert!(outputs.iter().all(|o| o.status.success()), "{}", describe());

    // A single process, the same scenario, its own simulator.
    let solo_server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let solo_out = dir.path().join("solo");
    let solo = Command::new(env!("CARGO_BIN_EXE_anvil-load"))
        .arg(&scenario)
        .arg("--base-url")
        .arg(solo_server.base_url())
        .arg("--out")
        .arg(&solo_out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(solo.status.success(), "{}", text(&solo.stderr));

    // Pod 0 merged every shard's records under its own results directory on the claim.
    let results = &mounts.iter().find(|(p, _)| p == "/results").expect("results mounted at /results").1;
    let pod0 = results.join("sweep").join("shard-0");
    let merged: Vec<PathBuf> =
        common::artifacts(&pod0).into_iter().filter(|p| !p.to_string_lossy().contains(".shard")).collect();
    let solo: Vec<PathBuf> = common::artifacts(&solo_out);
    assert_eq!(merged.len(), 2, "one merged artifact per level in {}: {}", pod0.display(), describe());
    assert_eq!(merged.len(), solo.len());
    for (m, s) in merged.iter().zip(&solo) {
        let (m, s) = (check_artifact(m), check_artifact(s));
        for key in ["requests", "completed", "failed", "context_distribution", "concurrency"] {
            assert_eq!(m[key], s[key], "merged {key}");
        }
        for key in ["output_tokens", "prompt_tokens", "request_canary_passed", "e2e_samples"] {
            assert_eq!(m["metrics"][key], s["metrics"][key], "merged metrics.{key}");
        }
        assert_eq!(m["shards"]["count"], SHARDS);
        assert_eq!(m["shards"]["partial"], false);
    }
    assert_eq!(server.stats().requests_received, solo_server.stats().requests_received);
    assert_eq!(server.stats().requests_received, 48, "two levels of 24 requests");
}

#[test]
fn the_expansion_is_kubernetes_own() {
    let env = BTreeMap::from([("JOB_COMPLETION_INDEX".to_string(), "7".to_string())]);
    assert_eq!(expand("/results/x/shard-$(JOB_COMPLETION_INDEX)", &env), "/results/x/shard-7");
    assert_eq!(expand("$(UNDEFINED)", &env), "$(UNDEFINED)", "an undefined reference stays as written");
}

#[test]
fn the_pods_run_the_images_own_binary() {
    assert_eq!(Path::new(&entrypoint()).file_name().unwrap(), "anvil-load");
}
