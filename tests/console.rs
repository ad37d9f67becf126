//! The console leads with the answer, through the real binary against the simulator: a 4-level
//! sweep prints one line per level, the answer box, the table, each kind of warning once and one
//! line for the artifacts (at most 40 lines in all); a single level opens with its headline;
//! `--format json` puts one JSON summary on stdout that agrees with the artifacts; a 2-shard run's
//! shard 0 prints the merged table and writes the merged sweep file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, read_json, text, wait_all};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    anvil().args(args).output().expect("the binary runs")
}

fn file_ending(dir: &Path, end: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(end))
        .unwrap_or_else(|| panic!("no *{end} in {}", dir.display()))
}

/// A raw float as a person would never want to read it (`5.114754098360656`): a decimal number
/// with more than four significant digits.
fn raw_floats(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| w.contains('.') && w.chars().filter(char::is_ascii_digit).skip_while(|&c| c == '0').count() > 4)
        .map(str::to_string)
        .collect()
}

#[test]
fn a_four_level_sweep_answers_first_in_at_most_forty_lines() {
    let out = tempfile::tempdir().unwrap();
    let scenario = common::scenario("sweep.toml");
    let o = run(&[scenario.to_str().unwrap(), "--out", out.path().to_str().unwrap(), "--no-progress"]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    let lines = stdout.lines().count() + stderr.lines().count();
    assert!(lines <= 40, "{lines} lines:\n{stdout}{stderr}");

    // One line per level as it ends, then the answer box, then the table.
    let at = |needle: &str| stdout.find(needle).unwrap_or_else(|| panic!("no {needle:?} in\n{stdout}"));
    let answer = at("┌ 4 levels");
    let table = at("concurrency     req/s");
    for level in ["c=1 ", "c=2 ", "c=4 ", "c=8 "] {
        assert!(stdout.lines().any(|l| l.starts_with(level) && l.contains(" ok ")), "{level}: {stdout}");
        assert!(at(level) < answer, "the level lines come first:\n{stdout}");
    }
    assert!(answer < table, "the answer comes before the table:\n{stdout}");
    let boxed: Vec<&str> = stdout[answer..table].lines().collect();
    // The level to run at; or, on a machine too busy for a valid measurement, the levels not counted.
    assert!(
        boxed.iter().any(|l| l.contains("best throughput: c=") || l.contains("not counted: c=")),
        "the box names the level: {stdout}"
    );
    let rows: Vec<&str> = stdout[table..].lines().skip(1).take(4).collect();
    let levels: Vec<&str> = rows.iter().filter_map(|r| r.split_whitespace().next()).collect();
    assert_eq!(levels, ["1", "2", "4", "8"], "{stdout}");
    // No per-level detail table by default, and no raw float anywhere.
    assert!(!stdout.contains("samples"), "{stdout}");
    assert!(raw_floats(&stdout).is_empty(), "{:?}\n{stdout}", raw_floats(&stdout));

    // Each kind of warning once, with the levels it applies to.
    let found = artifacts(out.path());
    assert_eq!(found.len(), 4);
    let mut codes: Vec<String> = Vec::new();
    for path in &found {
        let a = check_artifact(path);
        for w in a["warnings"].as_array().unwrap() {
            let code = w["code"].as_str().unwrap().to_string();
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
    }
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), codes.len(), "one line per kind {codes:?}:\n{stderr}");
    assert!(warnings.iter().any(|w| w.contains("embedded simulator") && w.ends_with("(at every level)")), "{stderr}");
    // The artifacts in one line, then the sweep file.
    assert_eq!(stdout.lines().filter(|l| l.starts_with("artifacts: ")).count(), 1, "{stdout}");
    assert!(stdout.contains("-sweep.json"), "{stdout}");

    // --verbose brings the detail tables back.
    let verbose = tempfile::tempdir().unwrap();
    let o = run(&[
        scenario.to_str().unwrap(),
        "--out",
        verbose.path().to_str().unwrap(),
        "--no-progress",
        "--concurrency",
        "1,2",
        "--requests",
        "6",
        "-v",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).matches("samples").count(), 2, "{}", text(&o.stdout));
}

#[test]
fn a_single_level_opens_with_its_headline_then_the_detail() {
    let out = tempfile::tempdir().unwrap();
    let scenario = common::scenario("smoke.toml");
    let o =
        run(&[scenario.to_str().unwrap(), "--out", out.path().to_str().unwrap(), "--no-progress", "--requests", "12"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    let first: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).take(4).collect();
    assert!(first[0].starts_with("┌ c=4 · anvil-sim"), "{stdout}");
    assert!(first[1].contains(" req/s · ") && first[1].contains("output tok/s"), "{stdout}");
    assert!(first[2].starts_with("│ TTFT p50 ") && first[2].contains("TPOT p50"), "{stdout}");
    assert!(first[3].starts_with("└ valid · 12/12 completed · 0 failed"), "{stdout}");
    // The detail: one unit per row named in its label; token counts as integers (but the mean).
    let row = |label: &str| -> Vec<String> {
        let line = stdout.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("{label}: {stdout}"));
        line[label.len()..].split_whitespace().map(str::to_string).collect()
    };
    let prompt = row("prompt tokens");
    assert!(prompt[1..4].iter().all(|c| !c.contains('.')), "{prompt:?}");
    let unit = ["µs", "ms", "s"].into_iter().find(|u| stdout.contains(&format!("\nTTFT ({u})"))).expect("a TTFT row");
    let ttft = row(&format!("TTFT ({unit})"));
    assert!(ttft.iter().all(|c| c.parse::<f64>().is_ok()), "no unit in the cells: {ttft:?}");
    assert!(stdout.find("└ valid").unwrap() < stdout.find("prompt tokens").unwrap());
    assert!(raw_floats(&stdout).is_empty(), "{:?}\n{stdout}", raw_floats(&stdout));
    let last = stdout.trim_end().lines().last().unwrap();
    assert!(last.starts_with("artifact: "), "{stdout}");
    check_artifact(Path::new(last.trim_start_matches("artifact: ")));
}

/// The JSON summary's figure against the artifact's own (same keys, same units).
fn same(summary: &Value, artifact: &Value, key: &str) {
    let (s, a) = (&summary["metrics"][key], &artifact["metrics"][key]);
    match (s.as_f64(), a.as_f64()) {
        (Some(s), Some(a)) => assert!((s - a).abs() <= 1e-9 * a.abs().max(1.0), "{key}: {s} in the summary, {a}"),
        _ => assert_eq!(s, a, "{key}"),
    }
}

#[test]
fn json_on_stdout_agrees_with_the_artifacts() {
    let out = tempfile::tempdir().unwrap();
    let scenario = common::scenario("sweep.toml");
    let args = [scenario.to_str().unwrap(), "--out", out.path().to_str().unwrap(), "--no-progress", "--format", "json"];
    let o = run(&[&args[..], &["--concurrency", "1,2", "--requests", "8"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(summary["schema"], "anvil-load.summary/v1");
    // The human output went to stderr.
    assert!(text(&o.stderr).contains("┌ 2 levels"), "{}", text(&o.stderr));
    let levels = summary["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    for level in levels {
        let artifact = check_artifact(Path::new(level["artifact"].as_str().unwrap()));
        assert_eq!(level["run_id"], artifact["run_id"]);
        for key in ["requests", "completed", "failed", "concurrency", "performance_eligible"] {
            assert_eq!(level[key], artifact[key], "{key}");
        }
        assert_eq!(level["valid"], artifact["validity"]["valid"]);
        for key in [
            "request_throughput_rps",
            "throughput_tok_s",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "tpot_p50_ms",
            "tpot_p99_ms",
            "e2e_p50_ms",
            "e2e_p99_ms",
        ] {
            same(level, &artifact, key);
        }
    }
    assert_eq!(summary["answer"]["basis"], "throughput");
    let sweep = file_ending(out.path(), "-sweep.json");
    assert_eq!(summary["files"][0], sweep.display().to_string());

    // A capacity search: the summary's capacity is the search's answer. Every level must pass
    // for there to be one. `max_tokens` stays above the profile's longest reasoning (24
    // tokens): at 16, a level whose every response was cut inside its reasoning had no TTFT,
    // so its TTFT SLO failed and the answer was null. The client-lateness verdict of this
    // shared machine is not what is tested here, so it is not judged.
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("search.toml");
    std::fs::write(
        &scenario,
        "[target]\nmodel = \"anvil-sim\"\nsimulator = \"fast\"\n\n[run]\nrequests = 6\nseed = 3\n\n[load]\nsearch = \"concurrency\"\nsearch_min = 1\nsearch_max = 4\nsearch_steps = 3\nmax_client_lateness = \"1h\"\n\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 48\ntokenizer = \"estimate\"\n\n[slo]\nttft_p99_ms = 600000\n",
    )
    .unwrap();
    let searched = dir.path().join("out");
    let o = run(&[scenario.to_str().unwrap(), "--out", searched.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let trace = read_json(&file_ending(&searched, "-search.json"));
    assert_eq!(summary["answer"]["basis"], "search");
    assert_eq!(summary["answer"]["capacity"], trace["search"]["best"]);
    assert_eq!(summary["levels"].as_array().unwrap().len(), trace["search"]["probes"].as_array().unwrap().len());
    for level in summary["levels"].as_array().unwrap() {
        let artifact = check_artifact(Path::new(level["artifact"].as_str().unwrap()));
        assert_eq!(level["slo"]["passed"], artifact["slo"]["passed"]);
        same(level, &artifact, "goodput_rps");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_sweep_prints_and_writes_the_merged_sweep() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("sweep.toml");
    std::fs::write(
        &scenario,
        "[target]\nmodel = \"anvil-sim\"\n\n[run]\nrequests = 20\nseed = 5\n\n[load]\nconcurrency = [2, 4]\n\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 16\nreproducible = true\ntokenizer = \"estimate\"\n",
    )
    .unwrap();
    let coordinator = format!("127.0.0.1:{}", free_port());
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let mut cmd = anvil();
            cmd.arg(&scenario)
                .arg("--base-url")
                .arg(server.base_url())
                .arg("--out")
                .arg(&outs[i])
                .arg("--no-progress")
                .args(["--shard", &format!("{i}/2"), "--coordinator", &coordinator, "--join-timeout", "60s"]);
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts")
        })
        .collect();
    let outputs = wait_all(children, Duration::from_secs(120)).await;
    let describe = || outputs.iter().map(|o| format!("{}{}\n", text(&o.stdout), text(&o.stderr))).collect::<String>();
    assert!(outputs.iter().all(|o| o.status.success()), "{}", describe());

    // Shard 0 merged: the merged sweep file, the same shape as one process's, whose counts are
    // the union of the shards' parts.
    let run_id = read_json(&file_ending(&outs[1], ".shard1of2-sweep.json"))["run_id"].as_str().unwrap().to_string();
    let merged = read_json(&outs[0].join(format!("{run_id}-sweep.json")));
    assert_eq!(merged["schema"], "anvil-load.sweep/v1");
    assert_eq!(merged["run_id"], run_id.as_str());
    let parts: Vec<Value> =
        (0..2).map(|i| read_json(&file_ending(&outs[i], &format!(".shard{i}of2-sweep.json")))).collect();
    let rows = merged["levels"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (k, row) in rows.iter().enumerate() {
        let union: u64 = parts.iter().map(|p| p["levels"][k]["requests"].as_u64().unwrap()).sum();
        assert_eq!(row["requests"].as_u64(), Some(union), "level {k}");
        assert_eq!(row["requests"], 20);
        let artifact = check_artifact(Path::new(row["artifact"].as_str().unwrap()));
        assert_eq!(artifact["requests"], row["requests"]);
        assert_eq!(artifact["shards"]["count"], 2);
    }
    // Shard 0 prints the merged table; shard 1 says where the merged results are.
    let (zero, one) = (text(&outputs[0].stdout), text(&outputs[1].stdout));
    assert!(zero.contains("merged from every shard") && zero.contains("concurrency     req/s"), "{}", describe());
    let row = zero.lines().find(|l| l.trim_start().starts_with("4 ")).expect("the c=4 row");
    assert!(row.split_whitespace().nth(1).is_some(), "{row}");
    assert!(zero.contains(&format!("{run_id}-sweep.json")) && zero.contains("merged artifacts"), "{zero}");
    assert!(!one.contains("concurrency     req/s"), "{one}");
    assert_eq!(one.lines().filter(|l| l.starts_with("shards: merged artifacts in ")).count(), 1, "{one}");
    // `anvil-load merge` by hand writes the same sweep file.
    let by_hand = dir.path().join("by-hand");
    let o =
        anvil().arg("merge").arg(outs[0].join(format!("{run_id}.shards"))).arg("--out").arg(&by_hand).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let again = read_json(&by_hand.join(format!("{run_id}-sweep.json")));
    let requests =
        |v: &Value| v["levels"].as_array().unwrap().iter().map(|r| r["requests"].clone()).collect::<Vec<_>>();
    assert_eq!(requests(&again), requests(&merged));
    server.shutdown().await;
}
