//! The scenario's plan through the real binary: every key whose value is one of a few names
//! lists exactly those names, once, when it is given another (nothing sent), and every level a run
//! paces (a list, a sweep chosen by an option, a capacity search) is named and paced by its own
//! pacing.

mod common;

use std::path::Path;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

const GOOD: &str = "[target]\nmodel = \"m\"\n[run]\nrequests = 2\n[load]\nconcurrency = 1\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 16\ntokenizer = \"estimate\"\n";

/// Every key with a fixed set of values, and the values it takes.
const NAMED: &[(&str, &[&str])] = &[
    ("target.api", &["chat", "completions", "responses", "messages", "embeddings", "rerank"]),
    ("target.dialect", &["generic", "vllm", "sglang", "llamacpp", "openai", "azure"]),
    ("load.mode", &["closed", "open"]),
    ("load.arrival", &["constant", "poisson", "gamma"]),
    ("load.overload", &["queue", "drop"]),
    ("load.search", &["concurrency", "rate"]),
    ("workload.prompt_cache", &["unique", "shared-prefix"]),
    ("workload.prompt_encoding", &["text", "token_ids"]),
    ("output.controlled_output_policy", &["observe", "strict"]),
    ("serve.thinking_mode", &["default", "enabled", "disabled"]),
    ("serve.reasoning_effort", &["low", "medium", "high"]),
];

/// `GOOD` with `key = value` in its section (added when `GOOD` has none).
fn with_key(key: &str, value: &str) -> String {
    let (section, name) = key.split_once('.').expect("a section and a key");
    let header = format!("[{section}]\n");
    if GOOD.contains(&header) {
        GOOD.replace(&header, &format!("{header}{name} = {value}\n"))
    } else {
        format!("{GOOD}{header}{name} = {value}\n")
    }
}

/// The quoted names in a line of a message.
fn quoted(line: &str) -> Vec<String> {
    line.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_value_that_is_not_one_of_its_names_is_refused_with_every_name() {
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    for (key, names) in NAMED {
        // A word no key takes, and a value of another type: the same names either way.
        for value in ["\"zz_none\"", "5"] {
            std::fs::write(&file, with_key(key, value)).unwrap();
            let mut cmd = anvil();
            cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
            let result = run(cmd).await;
            let stderr = text(&result.stderr);
            assert_eq!(result.status.code(), Some(2), "{key} = {value}: {stderr}");
            assert!(stderr.contains(&format!("bad.toml: `{key}`: ")), "{key} = {value} names the key: {stderr}");
            let fix = stderr.lines().find_map(|l| l.trim().strip_prefix("fix: use one of ")).unwrap_or_else(|| {
                panic!("{key} = {value}: the fix lists the names: {stderr}");
            });
            // The names follow at once: no "one of one of".
            assert!(fix.starts_with('"'), "{key} = {value}: {stderr}");
            assert_eq!(quoted(fix), *names, "{key} = {value}: {stderr}");
            let problem = stderr.lines().next().unwrap_or_default();
            for name in *names {
                assert!(problem.contains(name), "{key} = {value}: the problem shows {name}: {stderr}");
            }
        }
    }
    assert_eq!(server.stats().requests_received, 0, "nothing may be sent for a bad scenario");
    assert!(!dir.path().join("out").exists(), "nothing may be written for a bad scenario");
    server.shutdown().await;
}

/// Run `body` (a scenario against the simulator) with `args`; every artifact, checked, with the
/// level its id names (`c4`, `r10`, or nothing for a run of one level).
async fn levels(dir: &Path, name: &str, body: &str, args: &[&str]) -> Vec<(String, Value)> {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, body).unwrap();
    let out = dir.join(name);
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--quiet").args(args);
    let result = run(cmd).await;
    assert!(result.status.success(), "{name}: {}", text(&result.stderr));
    artifacts(&out)
        .iter()
        .map(|path| {
            let a = check_artifact(path);
            let run_id = a["run_id"].as_str().expect("a run id").to_string();
            assert_eq!(path.file_name().unwrap().to_string_lossy(), format!("{run_id}.json"), "{name}");
            // `anvil-<time>-<4 hex>`, then `-<level>` when the run has several levels.
            (run_id.splitn(4, '-').nth(3).unwrap_or_default().to_string(), a)
        })
        .collect()
}

/// The levels of `found` with their artifacts' own pacing: `(suffix, mode, concurrency, rate)`.
fn pacing(found: &[(String, Value)]) -> Vec<(String, String, Option<u64>, Option<f64>)> {
    let mut out: Vec<_> = found
        .iter()
        .map(|(level, a)| {
            let mode = a["load_mode"].as_str().unwrap_or_default().to_string();
            let rate = if mode == "open" { a["rate"].as_f64() } else { None };
            let concurrency = if mode == "closed" { a["concurrency"].as_u64() } else { None };
            (level.clone(), mode, concurrency, rate)
        })
        .collect();
    out.sort_by(|x, y| (x.2, x.3.map(f64::to_bits)).cmp(&(y.2, y.3.map(f64::to_bits))));
    out
}

fn closed(level: &str, c: u64) -> (String, String, Option<u64>, Option<f64>) {
    (level.to_string(), "closed".to_string(), Some(c), None)
}

fn open(level: &str, r: f64) -> (String, String, Option<u64>, Option<f64>) {
    (level.to_string(), "open".to_string(), None, Some(r))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_is_named_and_paced_by_its_own_pacing() {
    let dir = tempfile::tempdir().unwrap();
    let target = "[target]\nmodel = \"m\"\nsimulator = \"instant\"\n";
    let workload = "[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 16\ntokenizer = \"estimate\"\ncanaries = false\n";
    // Judged neither by the client's lateness nor by its dispatch lag: the levels are under test,
    // not this shared machine.
    let lenient = "max_client_lateness = \"1h\"\nmax_dispatch_lag = \"1h\"\n";
    let run = "[run]\nrequests = 3\n";

    let body = format!("{target}{run}[load]\nconcurrency = [1, 3]\n{lenient}{workload}");
    let found = levels(dir.path(), "sweep-closed", &body, &[]).await;
    assert_eq!(pacing(&found), [closed("c1", 1), closed("c3", 3)]);

    let body = format!("{target}{run}[load]\nmode = \"open\"\nrate = [20, 40.5]\n{lenient}{workload}");
    let found = levels(dir.path(), "sweep-open", &body, &[]).await;
    assert_eq!(pacing(&found), [open("r20", 20.0), open("r40.5", 40.5)]);

    // One level chosen by an option replaces the file's mode: named by the run alone.
    let found = levels(dir.path(), "option", &body, &["--concurrency", "2"]).await;
    assert_eq!(pacing(&found), [closed("", 2)]);

    // A capacity search whose objective always holds probes min, doubles, and stops at max.
    let slo = "[slo]\nerror_rate = 1.0\n";
    let body = format!(
        "{target}{run}[load]\nsearch = \"concurrency\"\nsearch_min = 1\nsearch_max = 4\n{lenient}{workload}{slo}"
    );
    let found = levels(dir.path(), "search-closed", &body, &[]).await;
    assert_eq!(pacing(&found), [closed("c1", 1), closed("c2", 2), closed("c4", 4)]);

    let body =
        format!("{target}{run}[load]\nsearch = \"rate\"\nsearch_min = 10\nsearch_max = 40\n{lenient}{workload}{slo}");
    let found = levels(dir.path(), "search-open", &body, &[]).await;
    assert_eq!(pacing(&found), [open("r10", 10.0), open("r20", 20.0), open("r40", 40.0)]);
}
