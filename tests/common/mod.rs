//! Helpers shared by the integration tests: running the real binary, reading artifacts, and
//! checking every artifact with the independent checker.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn scenario(name: &str) -> PathBuf {
    manifest_dir().join("scenarios").join(name)
}

/// The binary under test, with progress off and logs quiet.
pub fn anvil() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_anvil-load"));
    cmd.env_remove("ANVIL_BASE_URL").env("RUST_LOG", "warn");
    cmd
}

/// Run a blocking command from async tests without stalling the runtime that hosts the simulator,
/// bounded in time.
pub async fn run(mut cmd: Command) -> Output {
    let task = tokio::task::spawn_blocking(move || cmd.output().expect("the binary starts"));
    tokio::time::timeout(Duration::from_secs(120), task).await.expect("the run finishes within 120 s").expect("join")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Artifacts (not sweep summaries or search traces) written to `dir`, sorted by name.
pub fn artifacts(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("output dir exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.to_string_lossy();
            p.extension().is_some_and(|x| x == "json")
                && !name.ends_with("-sweep.json")
                && !name.ends_with("-search.json")
        })
        .collect();
    out.sort();
    out
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("artifact readable")).expect("artifact is JSON")
}

/// The independent checker from the shared tree, when this machine has it and python3.
fn checker() -> Option<PathBuf> {
    // `ANVIL_CHECK_ARTIFACT` names the checker where the tree is checked out elsewhere.
    let path = std::env::var_os("ANVIL_CHECK_ARTIFACT")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../shared/tools/check_artifact.py"));
    let python = Command::new("python3").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    (path.exists() && python).then_some(path)
}

/// Every artifact a test writes goes through here: the project's own schema check always, and
/// `check_artifact.py` (which recomputes every summary) wherever it is available.
pub fn check_artifact(path: &Path) -> Value {
    let artifact = read_json(path);
    own_schema_check(&artifact);
    match checker() {
        Some(checker) => {
            let out = Command::new("python3").arg(&checker).arg(path).output().expect("python3 runs");
            assert!(
                out.status.success(),
                "check_artifact.py rejected {}:\n{}{}",
                path.display(),
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        None => {
            eprintln!("check_artifact.py or python3 not available: skipped the independent check of {}", path.display())
        }
    }
    artifact
}

/// Every key of the reference artifact (kept under tests/fixtures) is present, recursively for
/// the blocks the contract fixes.
pub fn own_schema_check(artifact: &Value) {
    let reference = read_json(&manifest_dir().join("tests/fixtures/reference-artifact.json"));
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    for key in keys(&reference) {
        assert!(artifact.get(&key).is_some(), "artifact lacks top-level key {key}");
    }
    assert_eq!(artifact["schema"], reference["schema"]);
    for block in ["metrics", "metric_population", "timing_methodology", "sampling", "serve_flags"] {
        for key in keys(&reference[block]) {
            assert!(artifact[block].get(&key).is_some(), "artifact lacks {block}.{key}");
        }
    }
    let record_keys = keys(&reference["request_timings"][0]);
    let canary_keys = keys(&reference["request_timings"][0]["request_canary"]);
    for r in artifact["request_timings"].as_array().expect("request_timings is a list") {
        for key in &record_keys {
            assert!(r.get(key).is_some(), "request {} lacks {key}", r["request_index"]);
        }
        if r["request_canary"].is_object() {
            for key in &canary_keys {
                assert!(r["request_canary"].get(key).is_some(), "canary lacks {key}");
            }
        }
    }
    let requests = artifact["requests"].as_u64().expect("requests");
    assert_eq!(artifact["completed"].as_u64().unwrap() + artifact["failed"].as_u64().unwrap(), requests);
    assert_eq!(artifact["failures"].as_array().unwrap().len() as u64, artifact["failed"].as_u64().unwrap());
}
