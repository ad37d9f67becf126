//! A records file is checked before anything is rebuilt from it. `summarize` and `merge` read
//! real runs' records (against the simulator) after they were edited: request lines deleted, a
//! timing changed or made negative, an index moved outside its shard's residue class, another
//! scenario put in a shard's run line under the same fingerprint, garbage appended. Each edit is
//! refused, naming what is missing or which line is wrong, and a refused merge leaves no merged
//! records file behind; `--allow-partial` rebuilds what there is, marked so. Input files that are
//! not regular files (a FIFO) are refused by every command that reads one, at once.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, manifest_dir, text};
use serde_json::Value;

/// Run `cmd`, bounded: a command that blocks (on a FIFO, say) is killed and the test fails.
async fn within(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let task = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().expect("the binary starts");
        let deadline = Instant::now() + limit;
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!("the command did not finish within {limit:?}: {}", text(&out.stderr));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().expect("output")
    });
    task.await.expect("join")
}

async fn run(cmd: Command) -> Output {
    within(cmd, Duration::from_secs(120)).await
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A two-level closed-loop sweep of `requests` requests per level, against the simulator, with
/// its records kept in `dir/run.records.ndjson`.
async fn recorded_sweep(dir: &Path, requests: u32) -> PathBuf {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let scenario = write(
        dir,
        "sweep.toml",
        &format!(
            "[target]\nmodel = \"m\"\n[run]\nrequests = {requests}\nseed = 3\n[load]\nconcurrency = [4, 8]\n\
             [workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 8\ntokenizer = \"estimate\"\ncanaries = false\n"
        ),
    );
    let records = dir.join("run.records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .args(["--base-url", &server.base_url(), "--quiet", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(dir.join("run"));
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    server.shutdown().await;
    check_records(&records);
    records
}

fn summarize(records: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = anvil();
    cmd.arg("summarize").arg(records).arg("--out").arg(out).args(extra);
    cmd
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
}

fn put_lines(path: &Path, lines: &[String]) {
    let mut body = lines.join("\n");
    body.push('\n');
    std::fs::write(path, body).unwrap();
}

fn kind(line: &str) -> String {
    serde_json::from_str::<Value>(line).unwrap()["type"].as_str().unwrap().to_owned()
}

fn level_ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| kind(l) == "level")
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["level"].as_str().unwrap().to_owned())
        .collect()
}

/// Positions of the request lines of `level`.
fn request_lines(lines: &[String], level: &str) -> Vec<usize> {
    (0..lines.len())
        .filter(|&i| {
            let v: Value = serde_json::from_str(&lines[i]).unwrap();
            v["type"] == "request" && v["level"] == level
        })
        .collect()
}

/// `line` with the number after `"key":` replaced by `value`, bytes elsewhere untouched.
fn set_number(line: &str, key: &str, value: &str) -> String {
    let pattern = format!("\"{key}\":");
    let at = line.find(&pattern).unwrap_or_else(|| panic!("{key} in {line}")) + pattern.len();
    let end = at + line[at..].find([',', '}']).unwrap();
    format!("{}{value}{}", &line[..at], &line[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_refuses_records_with_request_lines_deleted_and_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let records = recorded_sweep(dir.path(), 40).await;
    let original = lines(&records);
    let levels = level_ids(&original);
    assert_eq!(levels.len(), 2);

    // As written: rebuilt whole, without a word about completeness.
    let out = run(summarize(&records, &dir.path().join("whole"), &[])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("cannot be checked"), "{}", text(&out.stderr));
    for a in artifacts(&dir.path().join("whole")) {
        let a = check_artifact(&a);
        assert_eq!((a["requests"].as_u64(), a["performance_eligible"].as_bool()), (Some(40), Some(true)));
        assert!(a["warnings"].as_array().unwrap().iter().all(|w| w["code"] != "records_incomplete"));
    }

    // One request line of the second level deleted: 39 of 40 is refused, naming it.
    let second = request_lines(&original, &levels[1]);
    let mut one_gone = original.clone();
    one_gone.remove(second[7]);
    put_lines(&records, &one_gone);
    let refused = dir.path().join("refused");
    let out = run(summarize(&records, &refused, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("level {}: 1 request line missing (40 written, 39 in the file)", levels[1])),
        "{stderr}"
    );
    assert!(stderr.contains(&records.display().to_string()) && stderr.contains("--allow-partial"), "{stderr}");
    assert!(!stderr.contains(&format!("level {}:", levels[0])), "the first level is whole: {stderr}");
    assert!(!refused.exists() || artifacts(&refused).is_empty(), "nothing is rebuilt");
    // The contract's own reading of the file, independent of the tool's, sees it too.
    let seen = common::contract::records_violations(&records);
    assert!(seen.iter().any(|v| v.contains("says it wrote requests 40, its lines give 39")), "{seen:?}");

    // A quarter of the first level's lines deleted.
    let first = request_lines(&original, &levels[0]);
    let kept: Vec<String> =
        original.iter().enumerate().filter(|(i, _)| !first[..10].contains(i)).map(|(_, l)| l.clone()).collect();
    put_lines(&records, &kept);
    let out = run(summarize(&records, &refused, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("level {}: 10 request lines missing (40 written, 30 in the file)", levels[0])),
        "{stderr}"
    );

    // The first level deleted whole (from its level line to its end): the second says it.
    let start = original.iter().position(|l| kind(l) == "level").unwrap();
    let end = original.iter().position(|l| kind(l) == "level_end").unwrap();
    let mut level_gone = original.clone();
    level_gone.drain(start..=end);
    put_lines(&records, &level_gone);
    let out = run(summarize(&records, &refused, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "level {}: it was level 2 of its run, but the file holds 0 of the run's levels before it: 1 level deleted whole",
            levels[1]
        )),
        "{stderr}"
    );

    // The first level's end deleted: not a kill, since the run went on.
    let mut end_gone = original.clone();
    end_gone.remove(end);
    put_lines(&records, &end_gone);
    let out = run(summarize(&records, &refused, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("level {}: its end line is missing, yet its run went on", levels[0])), "{stderr}");

    // With --allow-partial: what there is, marked partial, not performance-eligible.
    put_lines(&records, &one_gone);
    let partial = dir.path().join("partial");
    let out = run(summarize(&records, &partial, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("records_incomplete"), "{stderr}");
    let rebuilt: Vec<Value> = artifacts(&partial).iter().map(|p| check_artifact(p)).collect();
    assert_eq!(rebuilt.len(), 2);
    for a in &rebuilt {
        let marked = a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "records_incomplete");
        if a["run_id"] == levels[1].as_str() {
            assert_eq!(a["requests"], 39);
            assert!(marked && a["performance_eligible"] == false, "{}", a["warnings"]);
        } else {
            assert_eq!(a["requests"], 40);
            assert!(!marked && a["performance_eligible"] == true, "{}", a["warnings"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_refuses_edited_negative_and_misplaced_records_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let records = recorded_sweep(dir.path(), 16).await;
    let original = lines(&records);
    let levels = level_ids(&original);
    let at = request_lines(&original, &levels[0])[3];
    let out_dir = dir.path().join("out");

    // A timing edited, the count unchanged: the digest says so.
    let mut edited = original.clone();
    let e2e: f64 = serde_json::from_str::<Value>(&edited[at]).unwrap()["e2e_ms"].as_f64().unwrap();
    edited[at] = set_number(&edited[at], "e2e_ms", &format!("{}", e2e + 1.0));
    put_lines(&records, &edited);
    let out = run(summarize(&records, &out_dir, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("level {}: its record lines differ from those written", levels[0])), "{stderr}");

    // A negative timing: exit 2, naming the line and the field.
    let mut negative = original.clone();
    negative[at] = set_number(&negative[at], "ttft_ms", "-3.5");
    put_lines(&records, &negative);
    let out = run(summarize(&records, &out_dir, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("line {}: ttft_ms -3.5 is negative", at + 1)), "{stderr}");

    // A timing no JSON number can hold as a finite double is refused as well.
    let mut huge = original.clone();
    huge[at] = set_number(&huge[at], "e2e_ms", "1e300");
    put_lines(&records, &huge);
    let out = run(summarize(&records, &out_dir, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("line {}: e2e_ms", at + 1)), "{stderr}");

    // A request line moved after its level's end, and one copied into the file twice.
    let mut moved = original.clone();
    let line = moved.remove(at);
    let end = moved.iter().position(|l| kind(l) == "level_end").unwrap();
    moved.insert(end + 1, line);
    put_lines(&records, &moved);
    let out = run(summarize(&records, &out_dir, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("line {}: a request line", end + 2)) && stderr.contains("after the level's end"),
        "{stderr}"
    );
    let mut twice = original.clone();
    twice.insert(at + 1, original[at].clone());
    put_lines(&records, &twice);
    let out = run(summarize(&records, &out_dir, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("line {}: request", at + 2)) && stderr.contains("recorded twice"), "{stderr}");

    // A level id that would name a file outside --out.
    let mut escaping = original.clone();
    for l in &mut escaping {
        *l = l.replace(&format!("\"{}\"", levels[1]), "\"../../escaped\"");
    }
    put_lines(&records, &escaping);
    let out = run(summarize(&records, &out_dir, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"../../escaped\" is not one this tool makes"), "{stderr}");
    assert!(!dir.path().join("escaped.json").exists());
    assert!(!out_dir.exists() || artifacts(&out_dir).is_empty(), "nothing is rebuilt from a refused file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_garbage_last_line_is_an_error_and_only_a_cut_line_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let records = recorded_sweep(dir.path(), 12).await;
    let original = std::fs::read_to_string(&records).unwrap();
    let n = original.lines().count();

    // A whole line of garbage at the end (it has its line end): an error naming it.
    std::fs::write(&records, format!("{original}not a record at all\n")).unwrap();
    let out = run(summarize(&records, &dir.path().join("garbage"), &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("line {}:", n + 1)), "{stderr}");
    assert!(!dir.path().join("garbage").exists() || artifacts(&dir.path().join("garbage")).is_empty());

    // A complete JSON line of another kind: also an error.
    std::fs::write(&records, format!("{original}{{\"type\":\"request\",\"level\":\"x\"}}\n")).unwrap();
    let out = run(summarize(&records, &dir.path().join("garbage"), &[])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("line {}:", n + 1)), "{}", text(&out.stderr));

    // The start of a line with no line end (a kill mid-write): left out, and said.
    let last = original.lines().rev().find(|l| kind(l) == "request").unwrap();
    std::fs::write(&records, format!("{original}{}", &last[..last.len() / 2])).unwrap();
    let out = run(summarize(&records, &dir.path().join("cut"), &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("line {}, the last, was cut short", n + 1)), "{stderr}");
    for a in artifacts(&dir.path().join("cut")) {
        assert_eq!(check_artifact(&a)["requests"], 12);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_records_without_a_tally_still_summarize_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = manifest_dir().join("tests/fixtures/summarize/open.records.ndjson");
    assert!(!std::fs::read_to_string(&fixture).unwrap().contains("\"written\""), "the fixture predates the tally");
    let out = run(summarize(&fixture, &dir.path().join("out"), &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("cannot be checked") && stderr.contains("older anvil-load"), "{stderr}");
    let rebuilt = artifacts(&dir.path().join("out"));
    assert_eq!(rebuilt.len(), 1);
    check_artifact(&rebuilt[0]);
}

/// Two shards of one open-loop level, started together with `--start-at`: their records files.
async fn two_shards(dir: &Path) -> Vec<PathBuf> {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let scenario = write(
        dir,
        "shards.toml",
        "[target]\nmodel = \"m\"\n[run]\nrequests = 40\nseed = 9\n[load]\nmode = \"open\"\nrate = 400\n\
         [workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 8\ntokenizer = \"estimate\"\ncanaries = false\n",
    );
    let start = (SystemTime::now() + Duration::from_secs(4)).duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let start = format!("{start:.3}");
    let mut tasks = Vec::new();
    for index in 0..2 {
        let mut cmd = anvil();
        cmd.arg(&scenario)
            .args(["--base-url", &server.base_url(), "--quiet", "--shard", &format!("{index}/2"), "--start-at", &start])
            .arg("--out")
            .arg(dir.join(format!("shard{index}")));
        tasks.push(tokio::spawn(run(cmd)));
    }
    for task in tasks {
        let out = task.await.unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    server.shutdown().await;
    (0..2)
        .map(|index| {
            let found: Vec<PathBuf> = std::fs::read_dir(dir.join(format!("shard{index}")))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".records.ndjson"))
                .collect();
            assert_eq!(found.len(), 1, "{found:?}");
            check_records(&found[0]);
            found[0].clone()
        })
        .collect()
}

fn merge(parts: &[PathBuf], out: &Path, extra: &[&str]) -> Command {
    let mut cmd = anvil();
    cmd.arg("merge").args(parts).arg("--out").arg(out).args(extra);
    cmd
}

/// Nothing merged was left in `out`: no records file, no temporary file, no artifact.
fn nothing_left(out: &Path) {
    if !out.exists() {
        return;
    }
    let left: Vec<String> =
        std::fs::read_dir(out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(left.is_empty(), "a refused merge left {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_refuses_deleted_misplaced_and_swapped_shard_records_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let parts = two_shards(dir.path()).await;

    // As written: merged, and the merged records file holds what its own ends say.
    let whole = dir.path().join("whole");
    let out = run(merge(&parts, &whole, &[])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged: Vec<PathBuf> = std::fs::read_dir(&whole)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".merged.records.ndjson"))
        .collect();
    assert_eq!(merged.len(), 1);
    check_records(&merged[0]);
    let a = check_artifact(&artifacts(&whole)[0]);
    assert_eq!((a["requests"].as_u64(), a["shards"]["partial"].as_bool()), (Some(40), Some(false)));
    assert_eq!(a["performance_eligible"], true);
    let again = run(summarize(&merged[0], &dir.path().join("again"), &[])).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(!text(&again.stderr).contains("cannot be checked"), "{}", text(&again.stderr));

    let original = lines(&parts[1]);
    let level = level_ids(&original).remove(0);
    let requests = request_lines(&original, &level);

    // A request line of shard 1 deleted: exit 1 naming the shard, its file, the level and the count.
    let mut deleted = original.clone();
    deleted.remove(requests[2]);
    put_lines(&parts[1], &deleted);
    let refused = dir.path().join("refused");
    let out = run(merge(&parts, &refused, &[])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("shard 1's records") && stderr.contains(&parts[1].display().to_string()), "{stderr}");
    assert!(stderr.contains(&format!("level {level}: 1 request line missing")), "{stderr}");
    nothing_left(&refused);
    // Merged anyway with --allow-partial: partial, and says so.
    let partial = dir.path().join("partial");
    let out = run(merge(&parts, &partial, &["--allow-partial"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a = check_artifact(&artifacts(&partial)[0]);
    assert_eq!((a["requests"].as_u64(), a["shards"]["partial"].as_bool()), (Some(39), Some(true)));
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "partial_merge"));
    assert_eq!(a["performance_eligible"], false);

    // A request index of shard 1 (odd) made even: outside its residue class.
    let mut moved = original.clone();
    let index = serde_json::from_str::<Value>(&moved[requests[2]]).unwrap()["request_index"].as_u64().unwrap();
    assert_eq!(index % 2, 1);
    moved[requests[2]] = set_number(&moved[requests[2]], "request_index", &(index + 1001).to_string());
    put_lines(&parts[1], &moved);
    let out = run(merge(&parts, &refused, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "line {}: request {} of level {level} is not shard 1 of 2's",
            requests[2] + 1,
            index + 1001
        )),
        "{stderr}"
    );
    nothing_left(&refused);

    // Another scenario in shard 1's run line, under the fingerprint it had.
    let mut swapped = original.clone();
    let mut run_line: Value = serde_json::from_str(&swapped[0]).unwrap();
    run_line["info"]["scenario"]["workload"]["max_tokens"] = Value::from(4096);
    swapped[0] = serde_json::to_string(&run_line).unwrap();
    put_lines(&parts[1], &swapped);
    let out = run(merge(&parts, &refused, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&parts[1].display().to_string()) && stderr.contains("configuration_fingerprint"),
        "{stderr}"
    );
    assert!(stderr.contains("is not its scenario's"), "{stderr}");
    nothing_left(&refused);
    // `summarize` checks the same run line.
    let out = run(summarize(&parts[1], &refused, &[])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("line 1: the run line's configuration_fingerprint"), "{}", text(&out.stderr));
    nothing_left(&refused);

    // Behind a redacted base URL the fingerprint cannot be recomputed; the shards' scenarios
    // are still compared with each other, and so is the rest of their run lines.
    let mut redacted = original.clone();
    let mut run_line: Value = serde_json::from_str(&redacted[0]).unwrap();
    run_line["info"]["scenario"]["target"]["redact_base_url"] = Value::from(true);
    redacted[0] = serde_json::to_string(&run_line).unwrap();
    put_lines(&parts[1], &redacted);
    let out = run(merge(&parts, &refused, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not parts of one run: their run lines differ in `scenario`"), "{stderr}");
    nothing_left(&refused);
    let mut relabelled = original.clone();
    let mut run_line: Value = serde_json::from_str(&relabelled[0]).unwrap();
    run_line["info"]["model"] = Value::from("another-model");
    relabelled[0] = serde_json::to_string(&run_line).unwrap();
    put_lines(&parts[1], &relabelled);
    let out = run(merge(&parts, &refused, &["--allow-partial"])).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("their run lines differ in `model`"), "{stderr}");
    nothing_left(&refused);

    // Restored, the parts merge again.
    put_lines(&parts[1], &original);
    let out = run(merge(&parts, &dir.path().join("restored"), &[])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reader_refuses_a_fifo_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("input.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    let out = dir.path().join("out");
    let fifo_arg = fifo.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["summarize", fifo_arg],
        vec!["merge", fifo_arg],
        vec!["validate", fifo_arg],
        vec![fifo_arg],
        vec!["report", fifo_arg],
        vec!["compare", fifo_arg, fifo_arg],
        vec!["deploy", "kubernetes", "--scenario", fifo_arg, "--image", "anvil-load:1", "--shards", "2"],
    ];
    for args in commands {
        let mut cmd = anvil();
        cmd.args(&args).arg("--out").arg(&out);
        if args[0] == "deploy" || args[0] == "compare" || args[0] == "validate" {
            // These take no --out.
            cmd = anvil();
            cmd.args(&args);
        }
        let result = within(cmd, Duration::from_secs(20)).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("FIFO") && stderr.contains("not a regular file"), "{args:?}: {stderr}");
    }
    // --records naming a FIFO: refused before anything is sent.
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let scenario = write(
        dir.path(),
        "s.toml",
        "[target]\nmodel = \"m\"\n[run]\nrequests = 2\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 4\n",
    );
    let mut cmd = anvil();
    cmd.arg(&scenario).args(["--base-url", &server.base_url(), "--records", fifo_arg]).arg("--out").arg(&out);
    let result = within(cmd, Duration::from_secs(20)).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("FIFO"), "{stderr}");
    assert_eq!(server.stats().requests_received, 0);
    server.shutdown().await;
}
