//! Helpers shared by the integration tests: running the real binary, reading artifacts, and
//! checking every artifact and records file against the contract kept in `contract/`.

#![allow(dead_code)] // each test binary uses its own subset

pub mod contract;
pub mod recompute;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

pub mod hostile;

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

/// The independent checker from the shared tree (or the file `ANVIL_ARTIFACT_CHECKER` names),
/// when this machine has it and python3.
fn checker() -> Option<PathBuf> {
    let path = std::env::var_os("ANVIL_ARTIFACT_CHECKER")
        .map_or_else(|| manifest_dir().join("../shared/tools/check_artifact.py"), PathBuf::from);
    let python = Command::new("python3").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    (path.exists() && python).then_some(path)
}

/// The reference artifact of the contract, as kept under tests/fixtures.
pub fn reference() -> Value {
    read_json(&manifest_dir().join("tests/fixtures/reference-artifact.json"))
}

/// Every way an artifact breaks the contract: the schema in `contract/`, the recomputation
/// `check_artifact.py` does, and the project's own invariants. Empty when it holds.
pub fn contract_violations(artifact: &Value) -> Vec<String> {
    let mut bad = contract::artifact_schema_violations(artifact);
    bad.extend(recompute::oracle(artifact, &reference()));
    bad.extend(recompute::invariants(artifact));
    bad
}

/// Every artifact a test writes goes through here. The repository's own check always runs
/// (schema, every summary recomputed from the records, invariants) and fails the test with the
/// list of violations; `check_artifact.py` adds an independent second opinion wherever it and
/// python3 are available.
pub fn check_artifact(path: &Path) -> Value {
    let artifact = read_json(path);
    contract::fail_on(
        &path.display().to_string(),
        "the artifact contract (contract/anvil-serving.benchmark.v1.schema.json and the recomputed summaries)",
        &contract_violations(&artifact),
    );
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
            eprintln!(
                "check_artifact.py or python3 not available: the repository's own check ran alone on {}",
                path.display()
            )
        }
    }
    artifact
}

/// Every records file a test writes or keeps goes through here: each line against
/// `contract/anvil-load.records.v1.schema.json`, and the file's structure.
pub fn check_records(path: &Path) {
    contract::fail_on(
        &path.display().to_string(),
        "the records contract (contract/anvil-load.records.v1.schema.json)",
        &contract::records_violations(path),
    );
}

/// Wait for every child process, bounded in time (they are killed past it), without blocking the
/// runtime that may host the simulator they talk to.
pub async fn wait_all(children: Vec<std::process::Child>, limit: Duration) -> Vec<Output> {
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + limit;
        let mut children = children;
        while !children.iter_mut().all(|c| c.try_wait().ok().flatten().is_some()) {
            if std::time::Instant::now() > deadline {
                for c in &mut children {
                    let _ = c.kill();
                }
                panic!("the processes did not finish within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        children.into_iter().map(|c| c.wait_with_output().expect("output")).collect::<Vec<_>>()
    })
    .await
    .expect("join")
}
