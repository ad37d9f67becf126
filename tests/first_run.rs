//! A run without a file: the built-in scenario, the peers' flags, `--set` for any key (checked by
//! the same rules, refusals naming the option), `-` for standard input, and `validate` saying
//! where every key that is not the file's came from.

mod common;

use std::io::Write;
use std::process::Stdio;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

fn validate(args: &[&str]) -> std::process::Output {
    let mut cmd = anvil();
    cmd.arg("validate").args(args).stdin(Stdio::null());
    cmd.output().expect("the binary runs")
}

/// The same key paths, recursively, for objects (values and array lengths may differ).
fn key_paths(v: &Value, at: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = v {
        for (k, v) in map {
            let path = format!("{at}/{k}");
            out.push(path.clone());
            // Distributions keyed by observed values (context sizes, error kinds) are data.
            if !["context_distribution", "error_counts", "request_timings", "failures"].contains(&k.as_str()) {
                key_paths(v, &path, out);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_gives_the_same_artifact_as_the_equivalent_scenario_file() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (flags_out, file_out) = (dir.path().join("flags"), dir.path().join("file"));
    let mut cmd = anvil();
    cmd.args([
        "--base-url",
        &server.base_url(),
        "--input-tokens",
        "256",
        "--output-tokens",
        "32",
        "-c",
        "4",
        "-n",
        "40",
    ])
    .args(["--no-progress", "-o"])
    .arg(&flags_out);
    let flags = run(cmd).await;
    assert_eq!(flags.status.code(), Some(0), "{}", text(&flags.stderr));

    // The built-in scenario with the flags' values written in: the file a user would copy.
    let file = dir.path().join("equivalent.toml");
    let builtin = std::fs::read_to_string(common::scenario("default.toml")).unwrap();
    let written = builtin
        .replace("requests = 200", "requests = 40")
        .replace("concurrency = 8", "concurrency = 4")
        .replace("context_tokens = 1024", "context_tokens = 256")
        .replace("max_tokens = 128", "max_tokens = 32");
    assert_ne!(written, builtin);
    std::fs::write(&file, written).unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).args(["--base-url", &server.base_url(), "--no-progress", "-o"]).arg(&file_out);
    let from_file = run(cmd).await;
    assert_eq!(from_file.status.code(), Some(0), "{}", text(&from_file.stderr));

    let (a, b) = (check_artifact(&artifacts(&flags_out)[0]), check_artifact(&artifacts(&file_out)[0]));
    let (mut ka, mut kb) = (Vec::new(), Vec::new());
    key_paths(&a, "", &mut ka);
    key_paths(&b, "", &mut kb);
    assert_eq!(ka, kb, "the same artifact shape");
    assert_eq!(a["scenario"], b["scenario"], "the same resolved scenario");
    assert_eq!(a["configuration_fingerprint"], b["configuration_fingerprint"]);
    assert_eq!(a["requests"], 40);
    assert_eq!(a["concurrency"], 4);
    assert_eq!(a["max_tokens"], 32);
    assert_eq!(a["context_tokens"], 256);
    // The simulator lists one model and the built-in scenario names none: that one is used.
    assert_eq!(a["model"], anvil_load::mock::DEFAULT_MODEL);
    assert_eq!(a["model_source"]["source"], "server_models_list");
    server.shutdown().await;
}

#[test]
fn set_and_flags_are_checked_by_the_same_rules_and_named_in_refusals() {
    let out = validate(&["--set", "load.concurrency=0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("(value set by --set load.concurrency)"), "{}", text(&out.stderr));

    let out = validate(&["--set", "target.modle=Qwen/Qwen3-8B"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("did you mean `model`?") && stderr.contains("--set target.modle"), "{stderr}");

    let out = validate(&["--input-tokens", "40000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("(value set by --input-tokens)"), "{}", text(&out.stderr));

    let out = validate(&["--set", "run.requests"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not KEY=VALUE"), "{}", text(&out.stderr));

    let out = validate(&["--slo", "ttft_p99=500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--slo ttft_p99"), "{}", text(&out.stderr));

    // A value that is not TOML is text: a model name with a slash needs no quotes.
    let out =
        validate(&["--set", "target.model=Qwen/Qwen3-8B", "--set", "workload.context_tokens={ uniform = [128, 512] }"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("model: Qwen/Qwen3-8B") && stdout.contains("uniform 128–512"), "{stdout}");
}

#[test]
fn a_mistyped_key_in_a_file_gets_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.toml");
    let builtin = std::fs::read_to_string(common::scenario("default.toml")).unwrap();
    std::fs::write(&file, builtin.replace("concurrency = 8", "concurency = 8")).unwrap();
    let out = validate(&[file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("did you mean `concurrency`?"), "{}", text(&out.stderr));
}

#[test]
fn validate_says_where_each_key_came_from() {
    let mut cmd = anvil();
    cmd.env("ANVIL_BASE_URL", "http://127.0.0.1:9/v1").env("BENCH_KEY", "k").stdin(Stdio::null());
    cmd.args(["validate", "-d", "30s", "--ignore-eos", "--api-key-env", "BENCH_KEY", "--slo", "ttft_p99_ms=500"]);
    cmd.args(["--set", "sampling.temperature=0.5", "--output-tokens", "64"]);
    let out = cmd.output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("the built-in one (scenarios/default.toml)"), "{stdout}");
    for (key, origin) in [
        ("target.base_url", "environment ($ANVIL_BASE_URL)"),
        ("run.duration", "command line (--duration)"),
        ("output.ignore_eos", "command line (--ignore-eos)"),
        ("target.api_key_env", "command line (--api-key-env)"),
        ("slo.ttft_p99_ms", "command line (--slo ttft_p99_ms)"),
        ("sampling.temperature", "command line (--set sampling.temperature)"),
        ("workload.max_tokens", "command line (--output-tokens)"),
    ] {
        assert!(stdout.lines().any(|l| l.contains(key) && l.contains(origin)), "{key} from {origin}: {stdout}");
    }
    // Against a server, the model is read from its /models at run time, which validate does not ask.
    assert!(stdout.contains("model: not named; read from the server's /models list"), "{stdout}");
    assert!(!stdout.contains("BENCH_KEY=") && !stdout.contains(" k\n"), "{stdout}");
}

#[test]
fn rate_inf_and_max_concurrency_read_as_vllm_bench_serve_does() {
    let out = validate(&["-r", "inf", "-n", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("load: closed loop, concurrency 10") && stdout.contains("every request is released at once")
    );

    let out = validate(&["-r", "inf", "--max-concurrency", "3"]);
    assert!(text(&out.stdout).contains("load: closed loop, concurrency 3"), "{}", text(&out.stdout));

    let out = validate(&["-r", "10", "--max-concurrency", "4"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("open loop") && stdout.contains("at most 4 in flight"), "{stdout}");

    // Every request at once needs a number of requests: a level bounded by time alone is refused.
    let timed =
        b"[run]\nduration = \"30s\"\n[workload]\ncontext_tokens = 64\nmax_context_tokens = 4096\nmax_tokens = 8\n";
    let out = piped(&["validate", "-", "-r", "inf"], timed);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("add -n N"), "{}", text(&out.stderr));
    let out = validate(&["-r", "inf,5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot be one level of a sweep"), "{}", text(&out.stderr));
}

#[test]
fn an_open_loop_with_max_concurrency_never_holds_more_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let out = anvil()
        .args(["--simulator", "fast", "-r", "400", "--max-concurrency", "2", "-n", "24", "--input-tokens", "128"])
        .args(["--output-tokens", "16", "--tokenizer", "estimate", "--no-progress", "-o"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a = check_artifact(&artifacts(dir.path())[0]);
    assert_eq!(a["load_mode"], "open");
    assert_eq!(a["concurrency"], 2, "the in-flight cap");
    let peak = a["simulator"]["peak_active_requests"].as_u64().unwrap();
    assert!((1..=2).contains(&peak), "the simulator saw {peak} in flight at once");
}

fn piped(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child =
        anvil().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The program may stop reading (a bounded read): a broken pipe here is its refusal.
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

#[test]
fn a_dash_reads_the_scenario_from_standard_input() {
    let scenario = std::fs::read(common::scenario("smoke.toml")).unwrap();
    let out = piped(&["validate", "-"], &scenario);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("scenario: standard input"), "{}", text(&out.stdout));

    let out = piped(&["validate", "-"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("standard input is empty"), "{}", text(&out.stderr));

    let out = piped(&["validate", "-"], b"[workload]\nmax_tokens = 4\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("error: standard input: `workload"), "{}", text(&out.stderr));

    // Bounded: megabytes of input are refused, not read into memory without end.
    let big = vec![b'#'; 5 << 20];
    let out = piped(&["validate", "-"], &big);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("longer than"), "{}", text(&out.stderr));
}

#[test]
fn no_arguments_still_print_where_to_start_showing_the_no_file_form() {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_anvil-load")).env_remove("ANVIL_BASE_URL").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("anvil-load --base-url URL "), "{}", text(&out.stderr));
}
