//! One way to finish a level: the live run, `summarize` of its records file and `merge` of a
//! sharded run's records files end every level through the same function, so the same records give
//! the same artifact whichever way they come.
//!
//! What is compared, and why it must be equal:
//! - **live ≡ `summarize`, byte for byte.** The live run writes each level's records as it runs and
//!   summarises them once the level ends; `summarize` reads the same records back from the file.
//!   The records hold every request, failure, the level's pacing and its end, so every number of
//!   the artifact follows from them. Snapshots are off: windows of wall time while the level ran
//!   are the one thing the records file does not carry (`summarize` writes no time series).
//! - **`merge` by hand ≡ the coordinator's merge, byte for byte.** The coordinator gathers each
//!   shard's records byte for byte and merges them; `merge` of the gathered files is the same
//!   input, read from the same paths (the merged artifact names each part's records file).
//! - **the live shard ≡ the merge of a one-shard run, but for what names the sharding.** Merging
//!   one part is the union of one part: the same requests, the same failures, the same level end.
//!   The shard's artifact names its place (`shard`), the merged one its parts (`shards`); the merge
//!   also cuts the union's samples into time-series windows (`snapshot_windows`, and `drift` from
//!   them) where the live level had snapshots off. Every other key is equal.
//! - **`merge` of two shards ≡ `summarize` of the merged records file, but for the same three
//!   keys.** `merge` writes the union of the parts as one records file; reading it back gives the
//!   level the merge summarised.

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anvil_load::mock::{FaultProfile, MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, text};
use serde_json::Value;

/// The fast simulator with a few faults the client records as failures (no stalls: the test stays
/// short), drawn from a fixed seed.
fn faulty() -> Profile {
    let mut profile = Profile::named("fast").expect("fast profile exists");
    profile.faults = FaultProfile {
        http_500: 0.04,
        reset_mid_stream: 0.04,
        malformed_sse: 0.04,
        missing_done: 0.04,
        fault_seed: 7,
        ..FaultProfile::default()
    };
    profile
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A scenario of `load` and `workload`, with warm-up and cool-down, objectives, and snapshots off
/// (see the module doc).
fn write_scenario(dir: &Path, load: &str, workload: &str) -> PathBuf {
    let path = dir.join("scenario.toml");
    let body = format!(
        "[target]\nmodel = \"anvil-sim\"\n\n[run]\nseed = 11\nrequests = 48\nwarmup = 3\ncooldown = 2\nsnapshot_interval = \"0s\"\n\n[load]\n{load}\n\n[slo]\nttft_p99_ms = 2000\nerror_rate = 0.5\n\n[workload]\nmax_context_tokens = 32768\n{workload}\n"
    );
    std::fs::write(&path, body).unwrap();
    path
}

const SINGLE_TURNS: &str = "context_tokens = { 512 = 2, 1024 = 1 }\nmax_tokens = 16\ncanaries = true\nreproducible = true\ntokenizer = \"estimate\"";

/// Wait for every child, bounded in time (killed past it), without blocking the runtime that
/// hosts the simulator; their outputs.
async fn wait_all(children: Vec<Child>) -> Vec<std::process::Output> {
    let task = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut children = children;
        while !children.iter_mut().all(|c| c.try_wait().ok().flatten().is_some()) {
            if std::time::Instant::now() > deadline {
                for c in &mut children {
                    let _ = c.kill();
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        children.into_iter().map(|c| c.wait_with_output().expect("output")).collect::<Vec<_>>()
    });
    task.await.expect("join")
}

fn spawn(mut cmd: std::process::Command) -> Child {
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("the binary starts")
}

fn ok(outputs: &[std::process::Output]) {
    for o in outputs {
        assert!(o.status.success(), "exit {:?}\n{}{}", o.status.code(), text(&o.stdout), text(&o.stderr));
    }
}

/// `anvil-load summarize` or `merge` of `inputs` into `out`.
fn rebuild(verb: &str, inputs: &[&Path], out: &Path) {
    let o = anvil().arg(verb).args(inputs).arg("--out").arg(out).output().expect("the binary starts");
    assert!(o.status.success(), "{verb} failed: {}", text(&o.stderr));
}

/// The artifacts in `dir` whose names contain `part` (or lack `.shard` when `part` is empty), each
/// checked against the contract.
fn level_artifacts(dir: &Path, part: &str) -> Vec<PathBuf> {
    let found: Vec<PathBuf> = artifacts(dir)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if part.is_empty() { !name.contains(".shard") } else { name.contains(part) }
        })
        .collect();
    for path in &found {
        check_artifact(path);
    }
    found
}

/// The level's name: the artifact's file name without the shard and the extension.
fn level_of(path: &Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    name.split(".shard").next().unwrap().trim_end_matches(".json").to_string()
}

/// Two sets of artifacts, level by level, byte for byte.
fn same_bytes(what: &str, a: &[PathBuf], b: &[PathBuf]) {
    assert_eq!(a.iter().map(|p| level_of(p)).collect::<Vec<_>>(), b.iter().map(|p| level_of(p)).collect::<Vec<_>>());
    for (x, y) in a.iter().zip(b) {
        if std::fs::read(x).unwrap() != std::fs::read(y).unwrap() {
            let (vx, vy) = (common::read_json(x), common::read_json(y));
            let differing: Vec<&String> =
                vx.as_object().unwrap().iter().filter(|(k, v)| vy.get(k.as_str()) != Some(v)).map(|(k, _)| k).collect();
            panic!("{what}: {} and {} differ (keys {differing:?})", x.display(), y.display());
        }
    }
}

/// A merged artifact's verdict on its level's own records: the merge adds one reason when a
/// shard failed its own validity check (a verdict over that shard's records alone, which no other
/// reading of the level makes); it is checked and taken off here.
fn without_shard_verdict(merged: &mut Value) {
    let invalid_parts = merged["shards"]["parts"].as_array().expect("parts").iter().any(|p| p["valid"] == false);
    let validity = merged["validity"].as_object_mut().expect("validity");
    let reasons = validity["reasons"].as_array_mut().expect("reasons");
    let shard_line = reasons.last().and_then(Value::as_str).is_some_and(|r| r.starts_with("shard(s) "));
    assert_eq!(shard_line, invalid_parts, "the merge names the shards that failed their own check: {reasons:?}");
    if invalid_parts {
        reasons.pop();
        let own = reasons.is_empty();
        assert_eq!(validity["valid"], false, "a level with an invalid shard is invalid");
        validity["valid"] = own.into();
    }
}

/// Two sets of artifacts, level by level, equal but for `except` (and the second set merged: see
/// `without_shard_verdict`).
fn same_but_merged(what: &str, a: &[PathBuf], merged: &[PathBuf], except: &[&str]) {
    assert_eq!(
        a.iter().map(|p| level_of(p)).collect::<Vec<_>>(),
        merged.iter().map(|p| level_of(p)).collect::<Vec<_>>()
    );
    let strip = |mut v: Value| {
        for key in except {
            v.as_object_mut().unwrap().remove(*key);
        }
        v
    };
    for (x, y) in a.iter().zip(merged) {
        let mut m = common::read_json(y);
        without_shard_verdict(&mut m);
        let (vx, vy) = (strip(common::read_json(x)), strip(m));
        let keys: Vec<&String> = vx.as_object().unwrap().keys().chain(vy.as_object().unwrap().keys()).collect();
        for key in keys {
            assert_eq!(vx.get(key), vy.get(key), "{what}: key {key} of {} and {}", x.display(), y.display());
        }
    }
}

fn only_records_file(dir: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".records.ndjson") && !p.to_string_lossy().contains(".merged."))
        .collect();
    assert_eq!(found.len(), 1, "one shard records file in {}: {found:?}", dir.display());
    found.remove(0)
}

/// Run `scenario` alone with its records kept, then `summarize` them; both sets of artifacts.
async fn live_and_summarized(dir: &Path, scenario: &Path, profile: Profile) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let server = MockServer::start(profile).await.unwrap();
    let (live, records) = (dir.join("live"), dir.join("run.records.ndjson"));
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(&live).arg("--quiet");
    cmd.arg("--records").arg(&records);
    ok(&wait_all(vec![spawn(cmd)]).await);
    check_records(&records);
    let rebuilt = dir.join("summarized");
    rebuild("summarize", &[&records], &rebuilt);
    (level_artifacts(&live, ""), level_artifacts(&rebuilt, ""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_sweep_and_summarize_of_its_records_write_the_same_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "concurrency = [3, 5]", SINGLE_TURNS);
    let (live, rebuilt) = live_and_summarized(dir.path(), &scenario, faulty()).await;
    assert_eq!(live.len(), 2, "one artifact per level");
    // The sweep is what it is meant to be: failures recorded, requests measured.
    let first = common::read_json(&live[0]);
    assert!(first["failed"].as_u64().unwrap() > 0, "the faults were recorded");
    assert!(first["completed"].as_u64().unwrap() > 0);
    same_bytes("live versus summarize", &live, &rebuilt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_conversations_and_summarize_of_their_records_write_the_same_artifact() {
    let dir = tempfile::tempdir().unwrap();
    // The conversations and their gaps are read back from the records file at the level's end,
    // live as in a rebuild.
    let workload = "max_tokens = 24\n[workload.sessions]\nconversations = 6\nturns = 3\nfirst_tokens = 1500\nuser_tokens = 100\noutput_tokens = 12\nthink_time = \"20ms\"";
    let scenario = write_scenario(dir.path(), "sessions = 3", workload);
    let mut profile = faulty();
    profile.prefix_cache = true;
    let (live, rebuilt) = live_and_summarized(dir.path(), &scenario, profile).await;
    assert_eq!(live.len(), 1);
    assert!(common::read_json(&live[0])["conversations"].is_object(), "the conversations are summarised");
    same_bytes("live versus summarize", &live, &rebuilt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shard_run_its_summarize_and_its_merge_end_every_level_alike() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "concurrency = [3, 5]", SINGLE_TURNS);
    let server = MockServer::start(faulty()).await.unwrap();
    let out = dir.path().join("run");
    let mut cmd = anvil();
    cmd.arg(&scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(&out).arg("--quiet");
    cmd.arg("--shard").arg("0/1").arg("--coordinator").arg(format!("127.0.0.1:{}", free_port()));
    cmd.arg("--join-timeout").arg("60s");
    ok(&wait_all(vec![spawn(cmd)]).await);
    let records = only_records_file(&out);
    check_records(&records);
    let live = level_artifacts(&out, ".shard0of1");
    let coordinated = level_artifacts(&out, "");
    assert_eq!((live.len(), coordinated.len()), (2, 2), "the shard's artifacts and the merged ones");

    // The shard's records, summarised: what the shard wrote as it ran.
    let summarized = dir.path().join("summarized");
    rebuild("summarize", &[&records], &summarized);
    same_bytes("the live shard versus summarize", &live, &level_artifacts(&summarized, ""));

    // The gathered records merged by hand: what the coordinator merged. The coordinator's copies
    // are named in the merged artifacts, so the hand merge reads those very paths.
    let run_id = level_of(&records);
    let gathered = out.join(format!("{run_id}.shards"));
    assert!(gathered.is_dir(), "the coordinator gathered the records into {}", gathered.display());
    let merged = dir.path().join("merged");
    rebuild("merge", &[&gathered], &merged);
    let merged = level_artifacts(&merged, "");
    same_bytes("merge versus the coordinator's merge", &merged, &coordinated);

    // One part merged is that part: everything but what names the sharding and the windows.
    same_but_merged(
        "the live shard versus its merge",
        &live,
        &merged,
        &["shard", "shards", "snapshot_windows", "drift"],
    );
    for (shard, merged) in live.iter().zip(&merged) {
        let (shard, merged) = (common::read_json(shard), common::read_json(merged));
        assert_eq!(shard["shard"]["index"], 0);
        assert_eq!(merged["shards"]["count"], 1);
        assert_eq!(merged["shards"]["partial"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_shard_merge_is_what_summarize_reads_back_from_the_merged_records() {
    let dir = tempfile::tempdir().unwrap();
    let open = "mode = \"open\"\nrate = 200\narrival = \"poisson\"\nmax_in_flight = 16";
    let scenario = write_scenario(dir.path(), open, SINGLE_TURNS);
    let server = MockServer::start(faulty()).await.unwrap();
    let coordinator = format!("127.0.0.1:{}", free_port());
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children = (0..2)
        .map(|i| {
            let mut cmd = anvil();
            cmd.arg(&scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(&outs[i]).arg("--quiet");
            cmd.arg("--shard").arg(format!("{i}/2")).arg("--coordinator").arg(&coordinator);
            cmd.arg("--join-timeout").arg("60s");
            spawn(cmd)
        })
        .collect();
    ok(&wait_all(children).await);
    let locals: Vec<PathBuf> = outs.iter().map(|o| only_records_file(o)).collect();
    let merged = dir.path().join("merged");
    rebuild("merge", &locals.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &merged);
    let merged_records: PathBuf = std::fs::read_dir(&merged)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".merged.records.ndjson"))
        .expect("merge writes the union of the records");
    check_records(&merged_records);
    let summarized = dir.path().join("summarized");
    rebuild("summarize", &[&merged_records], &summarized);
    let (merged, summarized) = (level_artifacts(&merged, ""), level_artifacts(&summarized, ""));
    assert_eq!(merged.len(), 1);
    let level = common::read_json(&merged[0]);
    assert_eq!(level["shards"]["count"], 2);
    assert!(level["failed"].as_u64().unwrap() > 0, "the faults were recorded");
    same_but_merged(
        "summarize of a merge's records versus the merge",
        &summarized,
        &merged,
        &["shards", "snapshot_windows", "drift"],
    );
}
