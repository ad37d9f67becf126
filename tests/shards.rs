//! Sharded runs through the real binary: four shard processes on loopback against one simulator
//! send exactly the requests a single process sends (indices, planned contexts, canary markers,
//! intended arrival offsets, counts, token totals); the coordinator gathers every shard's
//! records; a shard killed with `kill -9`, or one that never joins, stops every shard with
//! exit 1 and its index named; bad sharding options are refused with exit 2 and nothing sent.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, check_artifact, text, wait_all};
use serde_json::Value;

const SHARDS: u32 = 4;

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn write_scenario(dir: &Path, load: &str, workload: &str) -> PathBuf {
    let path = dir.join("scenario.toml");
    let body = format!(
        "[target]\nmodel = \"anvil-sim\"\n\n[run]\nseed = 11\n{load}\n\n[workload]\ncontext_tokens = {{ 512 = 2, 1024 = 1, 2048 = 1 }}\nmax_context_tokens = 32768\nmax_tokens = 16\ncanaries = true\nreproducible = true\ntokenizer = \"estimate\"\n{workload}\n"
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// A shard (or single-process) command against `server`, quiet, into `out`.
fn command(scenario: &Path, server: &MockServer, out: &Path, shard: Option<(u32, &[&str])>) -> Command {
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(out).arg("--quiet");
    if let Some((index, extra)) = shard {
        cmd.arg("--shard").arg(format!("{index}/{SHARDS}")).args(extra);
    } else {
        cmd.arg("--records").arg(out.join("solo.records.ndjson"));
    }
    cmd
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts")
}

fn describe(outputs: &[Output]) -> String {
    outputs
        .iter()
        .enumerate()
        .map(|(i, o)| format!("--- shard {i}: {:?}\n{}{}", o.status.code(), text(&o.stdout), text(&o.stderr)))
        .collect()
}

/// One records file, as (level ordinal → lines of that level, by type).
#[derive(Debug, Default)]
struct Level {
    requests: Vec<Value>,
    failures: Vec<Value>,
    dropped: Vec<Value>,
}

fn read_records(path: &Path) -> (Value, Vec<Level>) {
    let body = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut run = Value::Null;
    let mut order: Vec<String> = Vec::new();
    let mut levels: BTreeMap<String, Level> = BTreeMap::new();
    for line in body.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let level = v["level"].as_str().unwrap_or_default().to_string();
        match v["type"].as_str().unwrap() {
            "run" => run = v["info"].clone(),
            "level" => order.push(level),
            "request" => levels.entry(level).or_default().requests.push(v),
            "failure" => levels.entry(level).or_default().failures.push(v),
            "dropped" => levels.entry(level).or_default().dropped.push(v),
            _ => {}
        }
    }
    (run, order.iter().map(|l| levels.remove(l).unwrap_or_default()).collect())
}

/// What must be identical between the single process and the union of the shards.
#[derive(Debug, PartialEq)]
struct Plan {
    /// (index, planned context, canary marker, intended offset in ns) for every request sent.
    sent: Vec<(u64, u64, String, Option<i64>)>,
    completed: usize,
    failed: usize,
    dropped: usize,
    prompt_tokens: u64,
    output_tokens: u64,
    canaries_passed: usize,
}

fn plan_of(levels: &[&Level]) -> Plan {
    let all: Vec<&Value> = levels.iter().flat_map(|l| l.requests.iter().chain(&l.failures).chain(&l.dropped)).collect();
    let mut sent: Vec<(u64, u64, String, Option<i64>)> = all
        .iter()
        .map(|r| {
            (
                r["request_index"].as_u64().unwrap(),
                r["planned_context_tokens"].as_u64().unwrap(),
                r["request_canary"]["marker"].as_str().unwrap_or_default().to_string(),
                r["intended_offset_ms"].as_f64().map(|ms| (ms * 1e6).round() as i64),
            )
        })
        .collect();
    sent.sort();
    let requests: Vec<&Value> = levels.iter().flat_map(|l| &l.requests).collect();
    Plan {
        sent,
        completed: requests.len(),
        failed: levels.iter().map(|l| l.failures.len()).sum(),
        dropped: levels.iter().map(|l| l.dropped.len()).sum(),
        prompt_tokens: requests.iter().map(|r| r["prompt_tokens"].as_u64().unwrap_or(0)).sum(),
        output_tokens: requests.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum(),
        canaries_passed: requests.iter().filter(|r| r["request_canary"]["passed"] == Value::Bool(true)).count(),
    }
}

/// Run the scenario in one process, then as four shards (`sync` picks how they start), and
/// compare level by level. Returns the shards' records files.
async fn single_versus_shards(scenario_load: &str, workload: &str, sync: &str) -> Vec<PathBuf> {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), scenario_load, workload);

    let solo_server = MockServer::start(fast()).await.unwrap();
    let solo_out = dir.path().join("solo");
    let solo = wait_all(vec![spawn(command(&scenario, &solo_server, &solo_out, None))], Duration::from_secs(120)).await;
    assert!(solo[0].status.success(), "{}", describe(&solo));

    let server = MockServer::start(fast()).await.unwrap();
    let port = free_port();
    let coordinator = format!("127.0.0.1:{port}");
    let start_at = (SystemTime::now() + Duration::from_secs(8)).duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let start_at = format!("{start_at:.3}");
    let outs: Vec<PathBuf> = (0..SHARDS).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children: Vec<Child> = (0..SHARDS)
        .map(|i| {
            let extra: Vec<&str> = match sync {
                "coordinator" => vec!["--coordinator", &coordinator, "--join-timeout", "60s"],
                _ => vec!["--start-at", &start_at],
            };
            spawn(command(&scenario, &server, &outs[i as usize], Some((i, &extra))))
        })
        .collect();
    let outputs = wait_all(children, Duration::from_secs(120)).await;
    assert!(outputs.iter().all(|o| o.status.success()), "{}", describe(&outputs));

    let (solo_run, solo_levels) = read_records(&solo_out.join("solo.records.ndjson"));
    let locals: Vec<PathBuf> = outs
        .iter()
        .map(|out| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(out)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.to_string_lossy().ends_with(".records.ndjson") && !p.to_string_lossy().contains(".merged.")
                })
                .collect();
            assert_eq!(files.len(), 1, "one records file per shard in {}", out.display());
            files.remove(0)
        })
        .collect();
    for local in &locals {
        common::check_records(local); // the `shard` block included
    }
    let shards: Vec<(Value, Vec<Level>)> = locals.iter().map(|p| read_records(p)).collect();
    for (i, (run, levels)) in shards.iter().enumerate() {
        assert_eq!(run["shard"]["index"], i as u64);
        assert_eq!(run["shard"]["count"], SHARDS);
        assert_eq!(run["shard"]["sync"], sync);
        // (The single run's fingerprint differs only by its server's address.)
        assert_eq!(run["configuration_fingerprint"], shards[0].0["configuration_fingerprint"]);
        assert_eq!(run["run_id"], shards[0].0["run_id"], "one run id for every shard");
        assert_eq!(levels.len(), solo_levels.len(), "shard {i} ran every level");
        if sync == "coordinator" {
            let uncertainty = run["shard"]["clock_offset_uncertainty_ms"].as_f64().unwrap();
            let offset = run["shard"]["clock_offset_ms"].as_f64().unwrap();
            // One host, one clock: the estimate is zero within its own error bound.
            assert!(offset.abs() <= uncertainty + 0.001, "shard {i}: offset {offset} ± {uncertainty} ms");
        }
        for level in levels {
            for r in level.requests.iter().chain(&level.failures).chain(&level.dropped) {
                let index = r["request_index"].as_u64().unwrap();
                assert_eq!(index % u64::from(SHARDS), i as u64, "shard {i} sent request {index}");
            }
        }
    }
    assert!(solo_run.get("shard").is_none(), "an unsharded records file has no shard block");
    for (k, solo_level) in solo_levels.iter().enumerate() {
        let union: Vec<&Level> = shards.iter().map(|(_, levels)| &levels[k]).collect();
        let (want, got) = (plan_of(&[solo_level]), plan_of(&union));
        assert!(want.completed > 0);
        assert_eq!(got, want, "level {k}: the shards together are not the single run");
    }
    // Each shard's own artifacts pass the independent checker.
    for out in &outs {
        for artifact in common::artifacts(out).iter().filter(|p| p.to_string_lossy().contains(".shard")) {
            let a = check_artifact(artifact);
            assert!(a["completed"].as_u64().unwrap() > 0);
        }
    }
    // The merged artifacts (written by the coordinator, or by `merge` from the local files) are
    // what the single process wrote: the same counts and totals, every summary the nearest-rank
    // over the union of the shards' records (check_artifact recomputes each one).
    let merged_out = if sync == "coordinator" {
        outs[0].clone()
    } else {
        let merged_out = dir.path().join("merged");
        let mut cmd = anvil();
        cmd.arg("merge").args(&locals).arg("--out").arg(&merged_out);
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        merged_out
    };
    let merged: Vec<PathBuf> =
        common::artifacts(&merged_out).into_iter().filter(|p| !p.to_string_lossy().contains(".shard")).collect();
    let solo: Vec<PathBuf> = common::artifacts(&solo_out);
    assert_eq!(merged.len(), solo.len(), "one merged artifact per level");
    for (m, s) in merged.iter().zip(&solo) {
        let (m, s) = (check_artifact(m), check_artifact(s));
        for key in
            ["requests", "completed", "failed", "context_distribution", "planned_arrivals", "concurrency", "rate"]
        {
            assert_eq!(m[key], s[key], "merged {key}");
        }
        for key in ["output_tokens", "prompt_tokens", "request_canary_passed", "request_canary_samples", "e2e_samples"]
        {
            assert_eq!(m["metrics"][key], s["metrics"][key], "merged metrics.{key}");
        }
        assert_eq!(m["shards"]["count"], SHARDS);
        assert_eq!(m["shards"]["partial"], false);
        assert_eq!(m["shards"]["parts"].as_array().unwrap().len(), SHARDS as usize);
        assert!(m.get("shard").is_none(), "a merged artifact is no shard's");
    }
    let stats = server.stats();
    let sent: usize = shards.iter().flat_map(|(_, l)| l).map(|l| l.requests.len() + l.failures.len()).sum();
    assert_eq!(stats.requests_received as usize, sent, "the simulator saw exactly the shards' requests");
    if sync == "coordinator" {
        // The coordinator gathered every shard's records, byte for byte.
        let run_id = shards[0].0["run_id"].as_str().unwrap().to_string();
        let gathered = outs[0].join(format!("{run_id}.shards"));
        for (i, local) in locals.iter().enumerate() {
            let copy = gathered.join(format!("{run_id}.shard{i}of{SHARDS}.records.ndjson"));
            assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(local).unwrap(), "shard {i}'s gathered records");
        }
        assert!(text(&outputs[0].stdout).contains("merged artifacts"), "{}", describe(&outputs));
    }
    locals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_sweep_with_a_warm_up_burst_splits_exactly() {
    single_versus_shards(
        "requests = 41\n\n[load]\nconcurrency = [4, 6]",
        "prompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 256\nshared_prefix_burst = true",
        "coordinator",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_arrivals_keep_their_offsets_across_shards() {
    single_versus_shards(
        "requests = 150\n\n[load]\nmode = \"open\"\nrate = 300\narrival = \"poisson\"\nmax_in_flight = 32",
        "",
        "coordinator",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_without_a_coordinator_splits_exactly() {
    single_versus_shards(
        "requests = 90\n\n[load]\nmode = \"open\"\nrate = 200\narrival = \"constant\"",
        "",
        "start_at",
    )
    .await;
}

/// Poll until `path` holds a `level` line (the level has started), bounded.
fn wait_for_level(out: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let started = std::fs::read_dir(out).ok().into_iter().flatten().filter_map(|e| e.ok()).any(|e| {
            e.path().to_string_lossy().ends_with(".records.ndjson")
                && std::fs::read_to_string(e.path()).is_ok_and(|b| b.contains("\"type\":\"request\""))
        });
        if started {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the level never started in {}", out.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_killed_mid_run_stops_every_shard_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "duration = \"60s\"\ngrace = \"1s\"\n\n[load]\nmode = \"open\"\nrate = 40\narrival = \"constant\"",
        "",
    );
    let server = MockServer::start(fast()).await.unwrap();
    let coordinator = format!("127.0.0.1:{}", free_port());
    let outs: Vec<PathBuf> = (0..SHARDS).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let mut children: Vec<Child> = (0..SHARDS)
        .map(|i| {
            let extra = ["--coordinator", coordinator.as_str(), "--join-timeout", "60s"];
            spawn(command(&scenario, &server, &outs[i as usize], Some((i, &extra))))
        })
        .collect();
    let victim_out = outs[2].clone();
    tokio::task::spawn_blocking(move || wait_for_level(&victim_out, Duration::from_secs(60))).await.unwrap();
    let started = Instant::now();
    let mut victim = children.remove(2);
    victim.kill().unwrap(); // SIGKILL
    let _ = victim.wait();
    let outputs = wait_all(children, Duration::from_secs(30)).await;
    let stopped_in = started.elapsed();
    for (o, shard) in outputs.iter().zip([0, 1, 3]) {
        assert_eq!(o.status.code(), Some(1), "shard {shard}\n{}", describe(&outputs));
        let err = text(&o.stderr);
        assert!(err.contains("shard 2") && err.contains("missing"), "shard {shard} does not name shard 2:\n{err}");
    }
    // Far sooner than the 60 s level: the abort cut it.
    assert!(stopped_in < Duration::from_secs(45), "{stopped_in:?}");
    // Merging the shards' local records by hand: shard 2 is named, unless a partial merge is
    // asked for, whose artifact says it is partial and not performance-eligible.
    let locals: Vec<PathBuf> = outs
        .iter()
        .flat_map(|out| std::fs::read_dir(out).unwrap().filter_map(|e| e.ok().map(|e| e.path())))
        .filter(|p| p.to_string_lossy().ends_with(".records.ndjson") && p.to_string_lossy().contains(".shard"))
        .collect();
    let merged_out = dir.path().join("merged");
    let o = anvil().arg("merge").args(&locals).arg("--out").arg(&merged_out).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("shard 2"), "{}", text(&o.stderr));
    let o = anvil().arg("merge").args(&locals).arg("--out").arg(&merged_out).arg("--allow-partial").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let a = check_artifact(&common::artifacts(&merged_out)[0]);
    assert_eq!((a["shards"]["partial"].as_bool(), a["performance_eligible"].as_bool()), (Some(true), Some(false)));
    assert!(a["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "partial_merge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_never_joins_is_named_by_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "requests = 8\n\n[load]\nconcurrency = 4", "");
    let server = MockServer::start(fast()).await.unwrap();
    let coordinator = format!("127.0.0.1:{}", free_port());
    // Shards 0 and 1 of 4 start; 2 and 3 never do.
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let extra = ["--coordinator", coordinator.as_str(), "--join-timeout", "2s"];
            spawn(command(&scenario, &server, &dir.path().join(format!("shard{i}")), Some((i, &extra))))
        })
        .collect();
    let outputs = wait_all(children, Duration::from_secs(30)).await;
    for (i, o) in outputs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "{}", describe(&outputs));
        let err = text(&o.stderr);
        assert!(err.contains("2, 3 of 4 did not join"), "shard {i}:\n{err}");
    }
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sharding_options_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "requests = 8\n\n[load]\nconcurrency = 4", "");
    let server = MockServer::start(fast()).await.unwrap();
    let out = dir.path().join("out");
    for (args, says) in [
        (vec!["--shard", "4/4", "--coordinator", "127.0.0.1:9"], "out of range"),
        (vec!["--shard", "0/8", "--coordinator", "127.0.0.1:9"], "below the shard count 8"),
        (vec!["--shard", "1/2"], "--start-at"),
        (vec!["--shard", "auto", "--coordinator", "127.0.0.1:9"], "SLURM_PROCID"),
        (vec!["--coordinator", "127.0.0.1:9"], "add --shard"),
        (vec!["--shard", "1/2", "--start-at", "2001-01-01T00:00:00Z"], "has passed"),
    ] {
        let mut cmd = anvil();
        cmd.arg(&scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(&out).args(&args);
        cmd.env_remove("SLURM_PROCID").env_remove("JOB_COMPLETION_INDEX");
        let o = common::run(cmd).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", text(&o.stderr));
    }
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}
