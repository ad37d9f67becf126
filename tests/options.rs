//! Command-line options mean what docs/command-line.md says: `--rate` runs an open loop and
//! `--concurrency` a closed one on any scenario, `--help` lists every exit code and simulator
//! profile, and `validate` prints every setting that changes the run.

mod common;

use anvil_load::plan::scenario::{Overrides, Pacing, Scenario};
use common::{anvil, manifest_dir, run, text};

fn shipped_scenarios() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(manifest_dir().join("scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "the shipped scenarios: {files:?}");
    files
}

fn is_trace(file: &std::path::Path) -> bool {
    std::fs::read_to_string(file).unwrap().contains("[workload.trace]")
}

fn is_sessions(file: &std::path::Path) -> bool {
    std::fs::read_to_string(file).unwrap().contains("[workload.sessions]")
}

#[test]
fn rate_and_concurrency_choose_the_mode_for_every_shipped_scenario() {
    for file in shipped_scenarios() {
        if is_trace(&file) {
            // A trace sets when each request goes: both options are refused, naming themselves.
            for o in [
                Overrides { rate: Some(vec![5.0]), ..Overrides::default() },
                Overrides { concurrency: Some(vec![3]), ..Overrides::default() },
            ] {
                let e = Scenario::load(&file, &o).expect_err("a trace replay has its own schedule").to_string();
                assert!(e.contains("--rate") || e.contains("--concurrency"), "{e}");
            }
            continue;
        }
        let open = Scenario::load(&file, &Overrides { rate: Some(vec![5.0, 10.0]), ..Overrides::default() })
            .unwrap_or_else(|e| panic!("--rate on {}: {e}", file.display()));
        assert!(matches!(&open.load.pacing, Pacing::Open { rates, .. } if rates == &[5.0, 10.0]), "{}", file.display());
        assert!(open.load.search.is_none());
        let closed = Scenario::load(&file, &Overrides { concurrency: Some(vec![3]), ..Overrides::default() })
            .unwrap_or_else(|e| panic!("--concurrency on {}: {e}", file.display()));
        assert!(matches!(&closed.load.pacing, Pacing::Closed { levels, .. } if levels == &[3]), "{}", file.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_with_rate_accepts_every_shipped_scenario_and_says_what_it_replaced() {
    for file in shipped_scenarios() {
        let mut cmd = anvil();
        cmd.arg("validate").arg(&file).args(["--rate", "5"]);
        let result = run(cmd).await;
        let stdout = text(&result.stdout);
        if is_trace(&file) {
            assert_eq!(result.status.code(), Some(2), "{}", file.display());
            assert!(text(&result.stderr).contains("(value set by --rate)"), "{}", text(&result.stderr));
            continue;
        }
        assert!(result.status.success(), "{}: {}", file.display(), text(&result.stderr));
        let wanted = if is_sessions(&file) {
            "conversations arriving open loop (poisson) at 5 per second"
        } else {
            "open loop, poisson arrivals at 5 req/s"
        };
        assert!(stdout.contains(wanted), "{}: {stdout}", file.display());
        let closed_file = std::fs::read_to_string(&file).unwrap().contains("concurrency");
        if closed_file {
            assert!(stdout.contains("note: --rate runs an open loop; it replaces"), "{stdout}");
        }
    }
    // With --rate, --concurrency (--max-concurrency) caps the open loop's requests in flight, as
    // vllm bench serve's --request-rate with --max-concurrency; a sweep of caps is refused.
    let mut cmd = anvil();
    cmd.arg("validate").arg(manifest_dir().join("scenarios/smoke.toml")).args(["--rate", "5", "--concurrency", "2"]);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    assert!(text(&result.stdout).contains("at most 2 in flight"), "{}", text(&result.stdout));
    let mut cmd = anvil();
    cmd.arg("validate").arg(manifest_dir().join("scenarios/smoke.toml")).args(["--rate", "5", "--concurrency", "2,4"]);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(2));
    assert!(text(&result.stderr).contains("--max-concurrency is one cap"), "{}", text(&result.stderr));
}

#[test]
fn help_lists_every_exit_code_and_simulator_profile() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_anvil-load")).arg("--help").output().unwrap();
    let help = text(&out.stdout);
    for code in ["0 run completed", "1 run aborted", "2 bad input", "3 with --strict"] {
        assert!(help.contains(code), "--help lacks exit code {code:?}: {help}");
    }
    let simulator = help.split("--simulator").nth(1).expect("--simulator is listed");
    let simulator = &simulator[..simulator.find("--tokenizer").unwrap_or(simulator.len())];
    for profile in anvil_load::mock::PROFILE_NAMES {
        assert!(simulator.contains(profile), "--simulator help lacks {profile}: {simulator}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_prints_every_setting_that_changes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("all.toml");
    std::fs::write(
        &file,
        r#"[target]
model = "m"
engine = "engine-label-x"
gpu = "gpu-label-y"
dialect = "vllm"
extra_body = { top_k = 23 }
redact_base_url = true
base_url = "http://127.0.0.1:9/v1"
metrics = true
[run]
metrics_interval = "700ms"
requests = 11
duration = "7m"
seed = 5
protocol = "proto-label"
tier = "tier-label"
clock_domain_id = "clock-label"
warmup = 3
cooldown = "9s"
grace = "17s"
snapshot_interval = "13s"
records = true
[load]
mode = "open"
rate = 7
arrival = "gamma"
burstiness = 0.25
ramp = "19s"
max_in_flight = 29
overload = "drop"
max_dispatch_lag = "3ms"
[workload]
context_tokens = 1024
max_context_tokens = 8192
max_tokens = 31
tokenizer = "estimate"
reproducible = true
canaries = false
[output]
ignore_eos = true
min_tokens = 2
response_words = 37
controlled_output_policy = "strict"
[sampling]
temperature = 0.35
top_p = 0.85
[serve]
thinking_mode = "disabled"
reasoning_effort = "low"
[client]
connect_timeout = "4s"
first_byte_timeout = "41s"
idle_timeout = "43s"
retries = 3
retry_on = ["http_503"]
retry_backoff = "250ms"
http2 = true
"#,
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg("validate").arg(&file);
    let result = run(cmd).await;
    let plan = text(&result.stdout);
    assert!(result.status.success(), "{}", text(&result.stderr));
    for needle in [
        "engine-label-x",
        "server metrics: scraped from /metrics beside the base URL every 700ms",
        "gpu-label-y",
        "dialect vllm",
        "top_k = 23",
        "[redacted]",
        "11 requests or 7m",
        "seed 5",
        "proto-label",
        "tier-label",
        "clock-label",
        "first 3 requests",
        "last 9s",
        "grace 17s",
        "every 13s",
        "records file kept",
        "gamma arrivals (burstiness 0.25) at 7 req/s",
        "ramp 19s",
        "at most 29 in flight (drop beyond)",
        "3ms",
        "max_tokens 31",
        "built-in estimate",
        "identical across runs",
        "canaries off",
        "ignore_eos true, min_tokens 2, response_words 37 (strict)",
        "temperature 0.35, top_p 0.85",
        "enable_thinking false, reasoning_effort low",
        "HTTP/2",
        "connect 4s, first output 41s, idle 43s",
        "up to 3 on http_503, back-off 250ms",
    ] {
        assert!(plan.contains(needle), "the plan lacks {needle:?}:\n{plan}");
    }
}
