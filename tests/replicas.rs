//! Several replicas in one run (`target.base_urls`, `--base-url` repeated) against two
//! simulators, each counting what it saw: the per-replica table's counts are each server's own
//! and sum to the level's; round robin splits evenly, `least_in_flight` sends less to a slow
//! replica, `session` keeps every conversation on one replica (the servers' prefix caches agree);
//! a dead replica stops the run before any load, naming it; bad values exit 2 naming the key; the
//! table survives `summarize` and the `merge` of two shards' records.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use anvil_load::request::record::RequestTiming;
use common::{anvil, artifacts, check_artifact, check_records, run, text, wait_all};
use serde_json::Value;

/// Every request takes about `ms_per_token · 20` ms.
fn sim(ms_per_token: f64) -> Profile {
    Profile {
        name: "replica".into(),
        prefill_tok_s: Some(1_000_000.0),
        time_per_output_token: Duration::from_secs_f64(ms_per_token / 1000.0),
        reasoning_tokens: (0, 0),
        content_tokens: (20, 20),
        tokens_per_chunk: 1,
        ..Profile::named("fast").unwrap()
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// `[target]` naming the two servers, then `rest`. Prompts are sized by the estimate: no
/// calibration probe reaches the first replica, so each server's count is the run's requests.
fn scenario(a: &MockServer, b: &MockServer, target_extra: &str, rest: &str) -> String {
    format!("[target]\nbase_urls = [\"{}\", \"{}\"]\n{target_extra}\n{rest}", a.base_url(), b.base_url())
}

const SINGLE: &str = "[run]\nrequests = 40\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 20\ntokenizer = \"estimate\"\n";

async fn run_ok(file: &Path, out: &Path, args: &[&str]) -> Value {
    let mut cmd = anvil();
    cmd.arg(file).arg("--out").arg(out).arg("--no-progress").args(args);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let found = artifacts(out);
    assert_eq!(found.len(), 1, "{found:?}");
    check_artifact(&found[0])
}

/// `(requests, failures)` per row of the artifact's replica table, in order.
fn table(a: &Value) -> Vec<(u64, u64)> {
    let rows = a["replicas"].as_array().expect("a replica table");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["index"], i as u64);
    }
    rows.iter().map(|r| (r["requests"].as_u64().unwrap(), r["failures"].as_u64().unwrap())).collect()
}

/// The table's counts are the servers' own, and sum to the level's.
fn counts_agree(a: &Value, servers: &[&MockServer]) -> Vec<u64> {
    let rows = table(a);
    let seen: Vec<u64> = servers.iter().map(|s| s.stats().requests_received).collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), seen, "the table counts what each server saw");
    assert_eq!(rows.iter().map(|r| r.0).sum::<u64>(), a["requests"].as_u64().unwrap());
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_splits_evenly_and_each_row_is_its_servers_count() {
    let (a, b) = (MockServer::start(sim(1.0)).await.unwrap(), MockServer::start(sim(1.0)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "rr.toml", &scenario(&a, &b, "", SINGLE));
    let records = dir.path().join("records.ndjson");
    let art = run_ok(&file, &dir.path().join("out"), &["--records", records.to_str().unwrap()]).await;
    assert_eq!(counts_agree(&art, &[&a, &b]), [20, 20], "round robin takes each in turn");
    assert_eq!(art["requests"], 40);
    let urls: Vec<&str> = art["replicas"].as_array().unwrap().iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(urls, [a.base_url(), b.base_url()]);
    for row in art["replicas"].as_array().unwrap() {
        assert!(row["ttft_ms"]["p50"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["tpot_ms"]["p99"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["output_tokens_per_s"].as_f64().unwrap() > 0.0, "{row}");
    }
    // Every record names its replica; the run description lists them.
    let rts: Vec<RequestTiming> = serde_json::from_value(art["request_timings"].clone()).unwrap();
    let mut by: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &rts {
        *by.entry(r.replay.replica.expect("every record names its replica")).or_default() += 1;
    }
    assert_eq!(by.into_values().collect::<Vec<_>>(), [20, 20]);
    check_records(&records);
    let first: Value =
        serde_json::from_str(std::fs::read_to_string(&records).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["info"]["replicas"], serde_json::json!([a.base_url(), b.base_url()]));
    // summarize reads the table back from the records alone.
    let again = dir.path().join("summarized");
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&again).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rebuilt = check_artifact(&artifacts(&again)[0]);
    assert_eq!(rebuilt["replicas"], art["replicas"]);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_in_flight_sends_less_to_a_slow_replica_and_the_console_shows_the_table() {
    let (fast, slow) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(25.0)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "lif.toml", &scenario(&fast, &slow, "balance = \"least_in_flight\"", SINGLE));
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let art = check_artifact(&artifacts(&out)[0]);
    let seen = counts_agree(&art, &[&fast, &slow]);
    assert!(seen[1] * 3 < seen[0], "the slow replica got {} of 40, the fast one {}", seen[1], seen[0]);
    let console = text(&result.stdout);
    assert!(console.contains(&format!("replica 0 {}:", fast.base_url())), "{console}");
    assert!(console.contains(&format!("replica 1 {}:", slow.base_url())), "{console}");
    fast.shutdown().await;
    slow.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_differ_raise_a_warning() {
    let (fast, slow) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(5.0)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "rr.toml", &scenario(&fast, &slow, "", SINGLE));
    let art = run_ok(&file, &dir.path().join("out"), &[]).await;
    counts_agree(&art, &[&fast, &slow]);
    let warning = art["warnings"].as_array().unwrap().iter().find(|w| w["code"] == "replicas_differ");
    let message = warning.expect("replicas_differ")["message"].as_str().unwrap();
    assert!(message.contains("TPOT p50") && message.contains("on replica 1 against"), "{message}");
    fast.shutdown().await;
    slow.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_balance_keeps_every_conversation_on_one_replica() {
    let (a, b) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(0.5)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let conversations = "[run]\nseed = 5\n[load]\nsessions = 4\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 32\ntokenizer = \"estimate\"\n[workload.sessions]\nconversations = 12\nturns = 3\nfirst_tokens = 3000\nuser_tokens = 200\noutput_tokens = 20\nthink_time = \"20ms\"\n";
    let mut turns_on_one = Vec::new();
    for balance in ["session", "round_robin"] {
        let file = write(
            dir.path(),
            &format!("{balance}.toml"),
            &scenario(&a, &b, &format!("balance = \"{balance}\""), conversations),
        );
        let (before_a, before_b) = (a.stats().requests_received, b.stats().requests_received);
        let art = run_ok(&file, &dir.path().join(balance), &[]).await;
        let rows = table(&art);
        assert_eq!(
            [rows[0].0, rows[1].0],
            [a.stats().requests_received - before_a, b.stats().requests_received - before_b],
            "{balance}: the table counts what each server saw"
        );
        assert_eq!(rows[0].0 + rows[1].0, 36);
        let rts: Vec<RequestTiming> = serde_json::from_value(art["request_timings"].clone()).unwrap();
        let mut replicas: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for r in &rts {
            replicas.entry(r.replay.session.clone().unwrap()).or_default().insert(r.replay.replica.unwrap());
        }
        assert_eq!(replicas.len(), 12);
        turns_on_one.push(replicas.values().filter(|r| r.len() == 1).count());
        if balance == "session" {
            // Both replicas serve conversations, and each server's prefix cache held every later
            // turn's history: it saw the earlier turns.
            assert!(rows[0].0 > 0 && rows[1].0 > 0, "{rows:?}");
            for r in rts.iter().filter(|r| r.replay.turn.unwrap() > 1) {
                assert!(r.cached_tokens.unwrap() >= 3000, "turn {:?}: cached {:?}", r.replay.turn, r.cached_tokens);
            }
        }
    }
    assert_eq!(turns_on_one[0], 12, "session: every conversation on one replica");
    assert!(turns_on_one[1] < 12, "round robin spreads a conversation's turns");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_stops_the_run_before_any_load_naming_it() {
    let live = MockServer::start(sim(0.5)).await.unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://user:hunter2@127.0.0.1:{}/v1", l.local_addr().unwrap().port())
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.args(["--base-url", &live.base_url(), "--base-url", &dead, "-n", "40", "-c", "4", "--no-progress", "-o"])
        .arg(&out);
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    let shown = dead.replace("user:hunter2@", "");
    assert!(stderr.contains(&format!("replica 1 of target.base_urls ({shown})")), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert_eq!(live.stats().requests_received, 0, "nothing was sent");
    assert!(out.read_dir().map_or(true, |mut d| d.next().is_none()) || artifacts(&out).is_empty());
    live.shutdown().await;
}

#[test]
fn bad_replica_settings_exit_2_naming_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let rest = "[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
    let cases = [
        (
            "both.toml",
            "base_url = \"http://127.0.0.1:9/v1\"\nbase_urls = [\"http://127.0.0.1:9/v1\", \"http://127.0.0.1:10/v1\"]",
            "target.base_urls",
            "is set together with target.base_url",
        ),
        ("one.toml", "base_urls = [\"http://127.0.0.1:9/v1\"]", "target.base_urls", "lists 1 URL(s)"),
        (
            "twice.toml",
            "base_urls = [\"http://127.0.0.1:9/v1\", \"http://127.0.0.1:9/v1/\"]",
            "target.base_urls[1]",
            "is listed twice (also target.base_urls[0])",
        ),
        (
            "balance.toml",
            "base_urls = [\"http://127.0.0.1:9/v1\", \"http://127.0.0.1:10/v1\"]\nbalance = \"random\"",
            "target.balance",
            "unknown balance \"random\"",
        ),
        (
            "bad-url.toml",
            "base_urls = [\"http://127.0.0.1:9/v1\", \"ftp://127.0.0.1:10/v1\"]",
            "target.base_urls[1]",
            "is not an http:// or https:// URL",
        ),
        (
            "lonely-balance.toml",
            "base_url = \"http://127.0.0.1:9/v1\"\nbalance = \"session\"",
            "target.balance",
            "only one server",
        ),
    ];
    for (name, target, key, problem) in cases {
        let file = write(dir.path(), name, &format!("[target]\nmodel = \"m\"\n{target}\n{rest}"));
        let o = anvil().arg(&file).arg("--out").arg(dir.path().join("out")).output().unwrap();
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name} names the file: {stderr}");
        assert!(stderr.contains(key), "{name} names {key}: {stderr}");
        assert!(stderr.contains(problem), "{name}: {stderr}");
        assert!(stderr.contains("fix"), "{name} says the fix: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_of_two_shards_keeps_the_replica_table() {
    let (a, b) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(0.5)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "shards.toml", &scenario(&a, &b, "", SINGLE));
    let coordinator = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children = (0..2)
        .map(|i| {
            let mut cmd = anvil();
            cmd.arg(&file).arg("--out").arg(&outs[i]).arg("--quiet");
            cmd.arg("--shard").arg(format!("{i}/2")).arg("--coordinator").arg(&coordinator);
            cmd.arg("--join-timeout").arg("60s");
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for o in wait_all(children, Duration::from_secs(120)).await {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let records: Vec<PathBuf> = outs
        .iter()
        .map(|o| {
            std::fs::read_dir(o)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                // Shard 0 also writes the merged run's records beside its own: the shard's own.
                .find(|p| {
                    let name = p.to_string_lossy();
                    name.ends_with(".records.ndjson") && !name.contains(".merged.")
                })
                .expect("each shard keeps its records")
        })
        .collect();
    let merged = dir.path().join("merged");
    let o = anvil().arg("merge").args(&records).arg("--out").arg(&merged).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let found: Vec<PathBuf> =
        artifacts(&merged).into_iter().filter(|p| !p.to_string_lossy().contains(".shard")).collect();
    let art = check_artifact(&found[0]);
    assert_eq!(art["shards"]["count"], 2);
    counts_agree(&art, &[&a, &b]);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replicas_metrics_are_scraped_and_kept_apart() {
    let (a, b) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(0.5)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "metrics.toml", &scenario(&a, &b, "metrics = true", SINGLE));
    let out = dir.path().join("out");
    let art = run_ok(&file, &out, &[]).await;
    let seen = counts_agree(&art, &[&a, &b]);
    let m = &art["server_metrics"];
    let per: &Vec<Value> = m["replicas"].as_array().expect("one summary per replica");
    assert_eq!(per.len(), 2);
    for (i, (r, server)) in per.iter().zip([&a, &b]).enumerate() {
        let metrics_url = server.base_url().replace("/v1", "/metrics");
        assert_eq!(r["url"], metrics_url.as_str(), "replica {i}");
        assert_eq!(r["complete"], true, "{r}");
        // Each server's own counter is its share of the requests, not the run's.
        assert_eq!(r["counters"]["requests_succeeded"].as_f64().map(|v| v as u64), Some(seen[i]), "replica {i}");
        let file = out.join(r["file"].as_str().unwrap());
        assert!(std::fs::read_to_string(&file).unwrap().lines().count() >= 2, "{}", file.display());
    }
    assert_eq!(m["url"], per[0]["url"], "the level's server_metrics are the first replica's");
    let codes: Vec<&str> = art["warnings"].as_array().unwrap().iter().filter_map(|w| w["code"].as_str()).collect();
    assert!(!codes.contains(&"server_counts_differ"), "{codes:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_credentials_are_used_and_never_written() {
    let (a, b) = (MockServer::start(sim(0.5)).await.unwrap(), MockServer::start(sim(0.5)).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let with = |s: &MockServer, user: &str| s.base_url().replace("http://", &format!("http://{user}:pw-secret-7@"));
    let body = format!(
        "[target]\nbase_urls = [\"{}\", \"{}?key=qsecret-7\"]\nmetrics = true\n{SINGLE}",
        with(&a, "ann"),
        with(&b, "bob")
    );
    let file = write(dir.path(), "creds.toml", &body);
    let out = dir.path().join("out");
    let records = dir.path().join("records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--records").arg(&records).arg("--no-progress");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let art = check_artifact(&artifacts(&out)[0]);
    counts_agree(&art, &[&a, &b]);
    let mut written = vec![("stdout".to_string(), text(&result.stdout)), ("stderr".to_string(), text(&result.stderr))];
    for path in std::fs::read_dir(&out).unwrap().filter_map(|e| e.ok().map(|e| e.path())).chain([records]) {
        written.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
    }
    for (name, content) in &written {
        for secret in ["pw-secret-7", "qsecret-7", "ann:", "bob:"] {
            assert!(!content.contains(secret), "{name} holds {secret}");
        }
    }
    assert_eq!(art["replicas"][1]["url"], format!("{}?key=[redacted]", b.base_url()));
    a.shutdown().await;
    b.shutdown().await;
}
