//! `anvil-load deploy kubernetes`: the manifests carry the fields a sharded run depends on, the
//! YAML is exactly the JSON, and both pass the official Kubernetes schemas strictly (offline,
//! with the `kubernetes-validate` package that `.ci/run` installs); a manifest with a wrong field
//! fails that same check, and bad input prints nothing and exits 2.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{anvil, text};
use serde_json::Value;

/// Kubernetes versions the manifests must validate against: the first where every field used
/// here is stable (backoffLimitPerIndex and maxFailedIndexes went GA in 1.33), and the newest
/// the validator ships.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.33.0", "1.37.0"];

fn scenario(dir: &Path, extra_target: &str, load: &str) -> PathBuf {
    let path = dir.join("bench.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"Qwen/Qwen3-8B\"\n{extra_target}\n\n[run]\nrequests = 4000\nseed = 7\n\n[load]\n{load}\n\n[workload]\ncontext_tokens = 1024\nmax_context_tokens = 32768\nmax_tokens = 256\n\n# A trailing comment and a blank line.\n\n"
        ),
    )
    .unwrap();
    path
}

fn deploy(args: &[&str]) -> std::process::Output {
    let mut cmd = anvil();
    cmd.arg("deploy").arg("kubernetes").args(args).env_remove("OPENAI_API_KEY");
    cmd.output().expect("the binary runs")
}

fn validator() -> &'static str {
    let ok = Command::new("kubernetes-validate").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "kubernetes-validate is not installed: `python3 -m pip install kubernetes-validate==1.37.0` (.ci/run does this); the manifests cannot be checked against the Kubernetes schemas without it"
    );
    "kubernetes-validate"
}

fn validate(file: &Path) -> std::process::Output {
    let mut out = None;
    for version in KUBERNETES_VERSIONS {
        let o = Command::new(validator()).args(["--strict", "-k", version]).arg(file).output().expect("runs");
        let failed = !o.status.success() || text(&o.stdout).contains("ERROR") || text(&o.stderr).contains("ERROR");
        out = Some(o);
        if failed {
            break;
        }
    }
    out.unwrap()
}

fn passed(o: &std::process::Output) -> bool {
    o.status.success() && !text(&o.stdout).contains("ERROR") && !text(&o.stderr).contains("ERROR")
}

#[test]
fn manifests_carry_the_sharded_run_and_pass_the_official_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(
        dir.path(),
        "base_url = \"http://vllm.inference:8000/v1\"\napi_key_env = \"OPENAI_API_KEY\"",
        "concurrency = [64, 128]",
    );
    let file_arg = file.to_str().unwrap();
    let common = [
        "--shards",
        "8",
        "--scenario",
        file_arg,
        "--image",
        "registry.example.com/anvil-load:0.1.0",
        "--namespace",
        "bench",
    ];

    let json = deploy(&[&common[..], &["--format", "json"]].concat());
    assert!(json.status.success(), "{}", text(&json.stderr));
    let list: Value = serde_json::from_slice(&json.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ConfigMap", "Service", "PersistentVolumeClaim", "Job"]);
    let (config, service, claim, job) = (&items[0], &items[1], &items[2], &items[3]);

    assert_eq!(config["data"]["scenario.toml"], std::fs::read_to_string(&file).unwrap(), "the scenario, byte for byte");
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert_eq!(service["spec"]["selector"]["batch.kubernetes.io/job-name"], job["metadata"]["name"]);
    assert_eq!(service["spec"]["ports"][0]["port"], 7311);
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteMany");

    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 8);
    assert_eq!(spec["parallelism"], 8);
    assert_eq!(spec["backoffLimitPerIndex"], 0);
    assert_eq!(spec["maxFailedIndexes"], 0);
    assert_eq!(spec["podReplacementPolicy"], "Failed");
    assert_eq!(spec["activeDeadlineSeconds"], 24 * 3600, "the default deadline");
    assert_eq!(spec["ttlSecondsAfterFinished"], 7 * 24 * 3600, "the default time to live");
    let rules = spec["podFailurePolicy"]["rules"].as_array().unwrap();
    assert!(rules.iter().all(|r| r["action"] == "FailJob"));
    assert!(rules.iter().any(|r| r["onPodConditions"][0]["type"] == "DisruptionTarget"));
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert!(rules.iter().any(|r| r["onExitCodes"]["values"] == serde_json::json!([2])
        && r["onExitCodes"]["operator"] == "In"
        && r["onExitCodes"]["containerName"] == container["name"]));
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["subdomain"], service["metadata"]["name"], "pods resolve as <job>-<index>.<service>");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    // Guaranteed QoS: requests equal to limits, CPU and memory both.
    let resources = &pod["containers"][0]["resources"];
    assert_eq!(resources["requests"], serde_json::json!({ "cpu": "2", "memory": "2Gi" }));
    assert_eq!(resources["limits"], resources["requests"]);
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(spread["maxSkew"], 1);
    assert_eq!(spread["labelSelector"]["matchLabels"]["batch.kubernetes.io/job-name"], job["metadata"]["name"]);
    assert!(claim["spec"].get("storageClassName").is_none(), "the cluster's default class");
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let after = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap_or_else(|| panic!("{flag}")) + 1];
    assert_eq!(after("--shard"), "auto");
    assert_eq!(after("--coordinator"), "anvil-load-0.anvil-load:7311", "pod 0 via the headless service");
    assert!(after("--out").starts_with("/results/") && after("--out").contains("$(JOB_COMPLETION_INDEX)"));
    let env = container["env"].as_array().unwrap();
    assert!(env.iter().any(|e| e["name"] == "ANVIL_SHARDS" && e["value"] == "8"));
    assert!(env.iter().any(|e| e["name"] == "OPENAI_API_KEY" && e["valueFrom"]["secretKeyRef"]["key"] == "api-key"));
    let mounts: Vec<&str> =
        container["volumeMounts"].as_array().unwrap().iter().map(|m| m["mountPath"].as_str().unwrap()).collect();
    assert!(mounts.contains(&"/results") && args[0].starts_with(mounts[0]), "{mounts:?} {args:?}");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], config["metadata"]["name"]);
    assert_eq!(pod["volumes"][1]["persistentVolumeClaim"]["claimName"], claim["metadata"]["name"]);

    // The YAML users apply is the same objects, and the schemas accept it.
    let yaml = deploy(&common);
    assert!(yaml.status.success(), "{}", text(&yaml.stderr));
    let yaml_path = dir.path().join("anvil.yaml");
    std::fs::write(&yaml_path, &yaml.stdout).unwrap();
    let same = Command::new("python3")
        .arg("-c")
        .arg("import json, sys, yaml; docs = list(yaml.safe_load_all(open(sys.argv[1]))); items = json.load(open(sys.argv[2]))['items']; sys.exit(0 if docs == items else 1)")
        .arg(&yaml_path)
        .arg({
            let p = dir.path().join("anvil.json");
            std::fs::write(&p, &json.stdout).unwrap();
            p
        })
        .output()
        .expect("python3 runs");
    assert!(same.status.success(), "the YAML differs from the JSON: {}", text(&same.stderr));
    let checked = validate(&yaml_path);
    assert!(passed(&checked), "{}{}", text(&checked.stdout), text(&checked.stderr));
    assert_eq!(text(&checked.stdout).matches("passed").count(), 4, "{}", text(&checked.stdout));

    // The same check refuses a misspelt field and a wrong type: it can fail.
    let yaml_text = String::from_utf8(yaml.stdout).unwrap();
    for (from, to) in [("completionMode:", "completionMod:"), ("completions: 8", "completions: \"eight\"")] {
        let broken = dir.path().join("broken.yaml");
        std::fs::write(&broken, yaml_text.replacen(from, to, 1)).unwrap();
        assert!(!passed(&validate(&broken)), "{to} passed the schema check");
    }
}

#[test]
fn an_existing_results_claim_is_used_and_nothing_else_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(dir.path(), "", "mode = \"open\"\nrate = 500");
    let o = deploy(&[
        "--shards",
        "3",
        "--scenario",
        file.to_str().unwrap(),
        "--image",
        "anvil-load:dev",
        "--base-url",
        "http://engine:8000/v1",
        "--results-claim",
        "shared-nfs",
        "--name",
        "qwen-sweep",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["kind"] != "PersistentVolumeClaim"));
    let job = items.iter().find(|i| i["kind"] == "Job").unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][1]["persistentVolumeClaim"]["claimName"], "shared-nfs");
    let args = pod["containers"][0]["args"].as_array().unwrap();
    assert!(args.windows(2).any(|w| w[0] == "--base-url" && w[1] == "http://engine:8000/v1"));
    assert!(args.windows(2).any(|w| w[0] == "--coordinator" && w[1] == "qwen-sweep-0.qwen-sweep:7311"));
}

#[test]
fn resources_spread_deadline_and_storage_are_the_users_to_set_and_pass_the_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(dir.path(), "base_url = \"http://engine:8000/v1\"", "concurrency = 64");
    let file = file.to_str().unwrap();
    let base = ["--shards", "4", "--scenario", file, "--image", "anvil-load:dev"];
    let settings = [
        "--cpu",
        "3500m",
        "--memory",
        "6Gi",
        "--spread",
        "required",
        "--deadline",
        "2h 30m",
        "--ttl",
        "1h",
        "--storage-class",
        "fast-nfs",
    ];
    let o = deploy(&[&base[..], &settings, &["--format", "json"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let claim = items.iter().find(|i| i["kind"] == "PersistentVolumeClaim").unwrap();
    assert_eq!(claim["spec"]["storageClassName"], "fast-nfs");
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteMany");
    let job = items.iter().find(|i| i["kind"] == "Job").unwrap();
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 9000);
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 3600);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["resources"]["limits"], serde_json::json!({ "cpu": "3500m", "memory": "6Gi" }));
    assert_eq!(pod["topologySpreadConstraints"][0]["whenUnsatisfiable"], "DoNotSchedule");

    // One node, one ReadWriteOnce volume: no spreading constraint, and the schemas accept it.
    let o = deploy(&[&base[..], &["--spread", "none", "--access-mode", "ReadWriteOnce"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let yaml = dir.path().join("one-node.yaml");
    std::fs::write(&yaml, &o.stdout).unwrap();
    let checked = validate(&yaml);
    assert!(passed(&checked), "{}{}", text(&checked.stdout), text(&checked.stderr));
    let yaml_text = String::from_utf8(o.stdout).unwrap();
    assert!(yaml_text.contains("ReadWriteOnce") && !yaml_text.contains("topologySpreadConstraints"), "{yaml_text}");

    for (extra, says) in [
        (vec!["--cpu", "0"], "--cpu"),
        (vec!["--cpu", "2 cores"], "--cpu"),
        (vec!["--memory", "lots"], "--memory"),
        (vec!["--deadline", "5m"], "not longer than --join-timeout"),
        (vec!["--ttl", "soon"], "--ttl"),
        (vec!["--storage-class", "Fast_NFS"], "StorageClass"),
        (vec!["--storage-class", "nfs", "--results-claim", "shared"], "give one of them"),
        (vec!["--access-mode", "ReadWriteOnce"], "--spread none"),
    ] {
        let o = deploy(&[&base[..], &extra].concat());
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o.stderr));
        assert!(o.stdout.is_empty(), "{extra:?} printed a manifest");
        assert!(text(&o.stderr).contains(says), "{extra:?}: {}", text(&o.stderr));
    }
}

#[test]
fn bad_input_prints_nothing_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let remote = scenario(dir.path(), "base_url = \"http://engine:8000/v1\"", "concurrency = 4");
    let remote = remote.to_str().unwrap();
    let local_dir = tempfile::tempdir().unwrap();
    let local = scenario(local_dir.path(), "", "concurrency = 16");
    let local = local.to_str().unwrap();
    for (args, says) in [
        (vec!["--shards", "8", "--scenario", remote, "--image", "x"], "below the shard count 8"),
        (vec!["--shards", "2", "--scenario", local, "--image", "x"], "--base-url"),
        (vec!["--shards", "2", "--scenario", remote, "--image", "x", "--name", "Anvil_Run"], "DNS label"),
        (vec!["--shards", "0", "--scenario", remote, "--image", "x"], "--shards"),
        (vec!["--shards", "2", "--scenario", "/nonexistent.toml", "--image", "x"], "cannot read"),
    ] {
        let o = deploy(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(o.stdout.is_empty(), "{args:?} printed a manifest");
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", text(&o.stderr));
    }
}
