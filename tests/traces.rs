//! Trace replay through the real binary against the simulator: every sample trace in
//! `scenarios/traces/` is replayed by its scenario; each row is sent at its scaled time (or
//! counted), the server counts each prompt within 1 % of the row's input length, generates the
//! row's output length, and reports cached tokens for exactly the hash-id blocks a row shares
//! with rows sent before it. Bad traces exit 2 naming the row.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use common::{anvil, artifacts, check_artifact, manifest_dir, run, text};
use serde_json::Value;

/// One row of a sample trace as the test reads it, independently of the tool's parsers.
#[derive(Debug, Clone)]
struct Row {
    /// Seconds on the trace's clock.
    time: f64,
    input: u64,
    output: u64,
    hash_ids: Vec<u64>,
    session: Option<String>,
}

fn traces_dir() -> PathBuf {
    manifest_dir().join("scenarios/traces")
}

fn csv(path: &Path) -> Vec<Vec<String>> {
    let body = std::fs::read_to_string(path).unwrap();
    body.lines().skip(1).filter(|l| !l.trim().is_empty()).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

fn jsonl(path: &Path) -> Vec<Value> {
    let body = std::fs::read_to_string(path).unwrap();
    body.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect()).unwrap_or_default()
}

/// Seconds since the Unix epoch of `2023-11-16 18:15:46.6805908` (same day throughout the sample).
fn azure_seconds(stamp: &str) -> f64 {
    let time = stamp.split(' ').nth(1).unwrap();
    let mut parts = time.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    h * 3600.0 + m * 60.0 + s
}

/// Every data row of a sample (row numbers are 1-based positions), and the block size.
fn sample(format: &str) -> (BTreeMap<u64, Row>, u64) {
    let dir = traces_dir();
    let mut out = BTreeMap::new();
    let block = match format {
        "mooncake" => {
            for (i, v) in jsonl(&dir.join("mooncake-sample.jsonl")).iter().enumerate() {
                out.insert(
                    i as u64 + 1,
                    Row {
                        time: v["timestamp"].as_f64().unwrap() / 1000.0,
                        input: v["input_length"].as_u64().unwrap(),
                        output: v["output_length"].as_u64().unwrap(),
                        hash_ids: ids(&v["hash_ids"]),
                        session: None,
                    },
                );
            }
            512
        }
        "bailian" => {
            let mut root: BTreeMap<u64, u64> = BTreeMap::new();
            for (i, v) in jsonl(&dir.join("bailian-sample.jsonl")).iter().enumerate() {
                let chat = v["chat_id"].as_u64().unwrap();
                let parent = v["parent_chat_id"].as_i64().unwrap();
                let r = if parent < 0 { chat } else { root[&(parent as u64)] };
                root.insert(chat, r);
                out.insert(
                    i as u64 + 1,
                    Row {
                        time: v["timestamp"].as_f64().unwrap(),
                        input: v["input_length"].as_u64().unwrap(),
                        output: v["output_length"].as_u64().unwrap(),
                        hash_ids: ids(&v["hash_ids"]),
                        session: Some(r.to_string()),
                    },
                );
            }
            16
        }
        "jsonl" => {
            for (i, v) in jsonl(&dir.join("own-sample.jsonl")).iter().enumerate() {
                out.insert(
                    i as u64 + 1,
                    Row {
                        time: v["offset_ms"].as_f64().unwrap() / 1000.0,
                        input: v["input_tokens"].as_u64().unwrap(),
                        output: v["output_tokens"].as_u64().unwrap(),
                        hash_ids: ids(&v["hash_ids"]),
                        session: v["session"].as_str().map(str::to_string),
                    },
                );
            }
            64
        }
        "azure" => {
            for (i, f) in csv(&dir.join("azure-sample.csv")).iter().enumerate() {
                out.insert(
                    i as u64 + 1,
                    Row {
                        time: azure_seconds(&f[0]),
                        input: f[1].parse().unwrap(),
                        output: f[2].parse().unwrap(),
                        hash_ids: Vec::new(),
                        session: None,
                    },
                );
            }
            0
        }
        "burstgpt" => {
            for (i, f) in csv(&dir.join("burstgpt-sample.csv")).iter().enumerate() {
                out.insert(
                    i as u64 + 1,
                    Row {
                        time: f[0].parse().unwrap(),
                        input: f[2].parse().unwrap(),
                        output: f[3].parse().unwrap(),
                        hash_ids: Vec::new(),
                        session: None,
                    },
                );
            }
            0
        }
        other => panic!("{other}"),
    };
    (out, block)
}

/// The committed scenario, with the trace's path made absolute (the copy lives elsewhere) and a
/// dispatch-lag (and client-lateness) threshold that a debug build on a shared, busy 2-core machine keeps (the OS
/// alone delays a wake-up by tens of milliseconds there); a schedule applied wrongly would be
/// off by far more (the sample rows are 50 ms to seconds apart after scaling).
fn scenario_copy(dir: &Path, name: &str) -> PathBuf {
    let body = std::fs::read_to_string(manifest_dir().join("scenarios").join(name)).unwrap();
    let absolute = format!("file = \"{}/", traces_dir().display());
    let mut body = body.replace("file = \"traces/", &absolute);
    body = if body.contains("\n[load]\n") {
        body.replace("\n[load]\n", "\n[load]\nmax_dispatch_lag = \"100ms\"\nmax_client_lateness = \"100ms\"\n")
    } else {
        body.replace(
            "\n[workload]\n",
            "\n[load]\nmax_dispatch_lag = \"100ms\"\nmax_client_lateness = \"100ms\"\n\n[workload]\n",
        )
    };
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

async fn replay(name: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario_copy(dir.path(), name);
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out);
    let result = run(cmd).await;
    assert!(result.status.success(), "{name}: {}", text(&result.stderr));
    let found = artifacts(&out);
    assert_eq!(found.len(), 1);
    check_artifact(&found[0])
}

/// Blocks of `row` that start some row sent before it (by the hash-id prefix rule).
fn shared_blocks(row: &Row, earlier: &[&Row]) -> u64 {
    earlier
        .iter()
        .map(|e| row.hash_ids.iter().zip(&e.hash_ids).take_while(|(a, b)| a == b).count() as u64)
        .max()
        .unwrap_or(0)
}

fn check_replay(name: &str, format: &str, a: &Value, expect_skipped_failed: u64) {
    let (rows, block) = sample(format);
    let scale = a["scenario"]["workload"]["prompts"]["time_scale"].as_f64().unwrap();
    let stats = &a["scenario"]["workload"]["prompts"]["stats"];
    let records = a["request_timings"].as_array().unwrap();
    let failures = a["failures"].as_array().unwrap();
    let dropped = a["dropped"].as_array().unwrap();
    assert!(failures.is_empty() && dropped.is_empty(), "{name}: nothing fails or drops against the simulator");
    assert_eq!(a["load_mode"], "open");
    assert_eq!(a["arrival"], "trace");
    assert_eq!(a["prompt_cache_mode"], "trace");

    // Every replayed row is sent exactly once, and every row is replayed or counted.
    let sent: Vec<u64> = records.iter().map(|r| r["trace_row"].as_u64().unwrap()).collect();
    let unique: BTreeSet<u64> = sent.iter().copied().collect();
    assert_eq!(unique.len(), sent.len(), "{name}: a row sent twice");
    assert_eq!(sent.len() as u64, stats["rows"].as_u64().unwrap());
    assert_eq!(a["planned_arrivals"].as_u64().unwrap(), sent.len() as u64);
    assert_eq!(a["undispatched_arrivals"], 0);
    let skipped = &a["scenario"]["workload"]["prompts"]["skipped"];
    assert_eq!(skipped["no_output"].as_u64().unwrap(), expect_skipped_failed);
    let no_output = rows.values().filter(|r| r.output == 0).count() as u64;
    assert_eq!(no_output, expect_skipped_failed, "{name}: the failed rows of the file");
    let sampled_out = skipped["sampled_out"].as_u64().unwrap();
    let outside = skipped["outside_window"].as_u64().unwrap();
    assert_eq!(sent.len() as u64 + no_output + sampled_out + outside, rows.len() as u64, "{name}: rows accounted for");

    // Session sampling keeps whole sessions.
    if sampled_out > 0 {
        let kept_sessions: HashSet<&str> = unique.iter().filter_map(|i| rows[i].session.as_deref()).collect();
        for (i, r) in &rows {
            if r.session.as_deref().is_some_and(|s| kept_sessions.contains(s)) {
                assert!(unique.contains(i), "{name}: row {i} of a kept session was left out");
            }
        }
    }

    // Each row at its scaled time: intended = scale × (its time − the first sent row's time),
    // with no gap capped in these samples (they have none longer than the caps).
    let first_time = rows[unique.iter().next().unwrap()].time;
    let threshold = a["validity"]["max_dispatch_lag_ms"].as_f64().unwrap();
    for r in records {
        let row = &rows[&r["trace_row"].as_u64().unwrap()];
        let intended = r["intended_offset_ms"].as_f64().unwrap();
        let want = scale * (row.time - first_time) * 1000.0;
        assert!((intended - want).abs() < 1e-3, "{name}: row intended at {intended} ms, trace says {want} ms");
        let lag = r["schedule_lag_ms"].as_f64().unwrap();
        assert!(lag >= 0.0 && lag <= threshold, "{name}: row sent {lag} ms late");
    }
    assert_eq!(a["validity"]["valid"], true, "{name}: {}", a["validity"]);

    // Lengths: the server's prompt count within 1 % of the row's input, the row's output.
    for r in records {
        let row = &rows[&r["trace_row"].as_u64().unwrap()];
        assert_eq!(r["planned_context_tokens"].as_u64().unwrap(), row.input);
        let server = r["prompt_tokens"].as_u64().unwrap() as f64;
        let off = (server - row.input as f64).abs() / row.input as f64;
        assert!(off <= 0.01, "{name}: row input {} but the server counted {server}", row.input);
        assert_eq!(r["output_tokens"].as_u64().unwrap(), row.output, "{name}: output length");
        assert_eq!(r["planned_output_tokens"].as_u64().unwrap(), row.output);
        assert_eq!(r["request_canary"]["passed"], true);
    }

    // Cached tokens: exactly the shared blocks, to the server's granularity: the simulator
    // caches at 16-token block boundaries and adds the chat template's 3-token opening, and a
    // run of blocks counts within 2 tokens of its size on the simulator's tokenizer (the
    // calibrated sizer's own error, tested in `workload::blocks`).
    let mut by_start: Vec<&Value> = records.iter().collect();
    by_start.sort_by(|x, y| x["start_offset_ms"].as_f64().unwrap().total_cmp(&y["start_offset_ms"].as_f64().unwrap()));
    let mut earlier: Vec<&Row> = Vec::new();
    let mut shared_total = 0;
    for r in by_start {
        let row = &rows[&r["trace_row"].as_u64().unwrap()];
        let cached = r["cached_tokens"].as_u64().unwrap();
        let expected = r["expected_cached_tokens"].as_u64().unwrap();
        let shared = shared_blocks(row, &earlier) * block;
        shared_total += shared;
        // The client's expectation is the shared blocks, less what the request's own tail takes
        // from the last blocks (its header and task: under 64 tokens).
        assert!(
            expected <= shared && expected + 64 >= shared.min(row.input),
            "{name}: expected {expected}, shared {shared}"
        );
        assert!(
            cached + 16 + 2 >= expected && cached <= expected + 3 + 2,
            "{name}: row {} cached {cached}, expected {expected} (shared blocks: {shared} tokens)",
            r["trace_row"]
        );
        earlier.push(row);
    }
    if block > 0 {
        assert!(shared_total > 0, "{name}: the sample shares blocks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncake_sample_replays_with_exact_blocks() {
    let a = replay("trace-mooncake.toml").await;
    check_replay("mooncake", "mooncake", &a, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bailian_sample_replays_whole_sessions_open() {
    let a = replay("trace-bailian.toml").await;
    check_replay("bailian", "bailian", &a, 0);
    let sessions: BTreeSet<&str> =
        a["request_timings"].as_array().unwrap().iter().filter_map(|r| r["session"].as_str()).collect();
    assert!(sessions.len() >= 2, "{sessions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_jsonl_sample_replays_its_window() {
    let a = replay("trace-jsonl.toml").await;
    check_replay("jsonl", "jsonl", &a, 0);
    assert!(a["peak_in_flight"].as_u64().unwrap() <= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_sample_replays_its_datetimes() {
    let a = replay("trace-azure.toml").await;
    check_replay("azure", "azure", &a, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burstgpt_sample_skips_and_counts_failed_rows() {
    let a = replay("trace-burstgpt.toml").await;
    check_replay("burstgpt", "burstgpt", &a, 4);
}

#[test]
fn validate_prints_the_trace_statistics() {
    for name in
        ["trace-mooncake.toml", "trace-azure.toml", "trace-burstgpt.toml", "trace-bailian.toml", "trace-jsonl.toml"]
    {
        let out = anvil().arg("validate").arg(manifest_dir().join("scenarios").join(name)).output().unwrap();
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for words in [
            "rows",
            "of trace time, replayed in",
            "input tokens: mean",
            "p99",
            "output tokens:",
            "burstiness",
            "prefix reuse",
        ] {
            assert!(stdout.contains(words), "{name}: no {words:?} in\n{stdout}");
        }
        assert!(stdout.contains("nothing was sent"));
    }
    let out = anvil().arg("validate").arg(manifest_dir().join("scenarios/trace-burstgpt.toml")).output().unwrap();
    assert!(text(&out.stdout).contains("4 with no output"), "{}", text(&out.stdout));
}

/// A scenario replaying `trace` (written next to it) as `format`.
fn bad(dir: &Path, format: &str, trace: &str) -> (PathBuf, std::process::Output) {
    let trace_path = dir.join(format!("bad-{format}.trace"));
    std::fs::write(&trace_path, trace).unwrap();
    let scenario = dir.join(format!("bad-{format}.toml"));
    std::fs::write(
        &scenario,
        format!(
            "[target]\nmodel = \"m\"\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 512\n[workload.trace]\nfile = \"bad-{format}.trace\"\nformat = \"{format}\"\n"
        ),
    )
    .unwrap();
    // A real run, not only validate: nothing may be sent, and the exit code is 2.
    let out = anvil().arg(&scenario).arg("--out").arg(dir.join("out")).output().unwrap();
    (trace_path, out)
}

#[test]
fn bad_traces_exit_2_naming_the_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "mooncake",
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n{\"timestamp\": 500, \"input_length\": 2000, \"output_length\": 4, \"hash_ids\": [1, 2]}\n",
            "row 2",
            "cannot make up input length 2000",
        ),
        (
            "mooncake",
            "{\"timestamp\": 900, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n",
            "row 2",
            "negative gap",
        ),
        (
            "bailian",
            "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": -2, \"input_length\": 16, \"output_length\": 4, \"turn\": 1, \"hash_ids\": [1]}\n",
            "row 1",
            "negative",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,-5,44\n",
            "row 2 (line 3)",
            "not a token count",
        ),
        (
            "burstgpt",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n4,ChatGPT,10,3,13,API log\n2,ChatGPT,10,3,13,API log\n",
            "row 2 (line 3)",
            "negative gap",
        ),
    ];
    for (format, trace, row, words) in cases {
        let (path, out) = bad(dir.path(), format, trace);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{format}: the file is named: {stderr}");
        assert!(stderr.contains(row) && stderr.contains(words), "{format}: {stderr}");
        assert!(stderr.contains("workload.trace.file"), "{stderr}");
        assert!(!dir.path().join("out").exists() || artifacts(&dir.path().join("out")).is_empty(), "nothing was run");
    }
}
