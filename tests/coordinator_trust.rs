//! The coordinator under attack, through the real binary and raw TCP peers on loopback: peers
//! without the token, of another protocol, sending garbage, a huge line or sixty connections
//! are ignored while the genuine shards complete and merge (exit 0, shard 0's memory flat, its
//! log free of colour codes); records altered in transit are detected; a shard that joined and
//! never gets ready is timed out at the barrier; Ctrl-C and SIGTERM are honoured while waiting
//! for others; a reported round trip or a start instant beyond the cap is refused, naming the
//! shard; a run id that is not one is refused; the coordinator binds to the address given and
//! refuses to serve off loopback without a token.

mod common;
#[path = "coordinator_trust/peers.rs"]
mod peers;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, check_artifact, text};
use peers::{
    Peer, SHARDS, TOKEN, fake_coordinator, fingerprint_of_shard_0, peak_rss_kb, tampering_proxy, wait_listening,
};
use serde_json::{Value, json};

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn write_scenario(dir: &Path, requests: u32) -> PathBuf {
    let path = dir.join("scenario.toml");
    let body = format!(
        "[target]\nmodel = \"anvil-sim\"\n\n[run]\nseed = 3\nrequests = {requests}\n\n[load]\nconcurrency = 2\n\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 32768\nmax_tokens = 8\ncanaries = true\ntokenizer = \"estimate\"\n"
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// Shard `index` of `SHARDS` against `base_url`, quiet, into `out`, with or without the token.
fn shard(scenario: &Path, base_url: &str, out: &Path, index: u32, extra: &[&str], token: Option<&str>) -> Command {
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--base-url").arg(base_url).arg("--out").arg(out).arg("--quiet");
    cmd.arg("--shard").arg(format!("{index}/{SHARDS}")).args(extra);
    cmd.env_remove("SLURM_PROCID").env_remove("JOB_COMPLETION_INDEX");
    match token {
        Some(t) => cmd.env("ANVIL_SHARD_TOKEN", t),
        None => cmd.env_remove("ANVIL_SHARD_TOKEN"),
    };
    cmd
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts")
}

/// Wait for every child, bounded in time (then kill them and fail).
fn wait_all(children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let deadline = Instant::now() + limit;
    let mut children = children;
    loop {
        if children.iter_mut().all(|c| c.try_wait().ok().flatten().is_some()) {
            break;
        }
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
            }
            let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
            panic!("the processes did not end within {limit:?}:\n{}", describe(&outputs));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children.into_iter().map(|c| c.wait_with_output().expect("output")).collect()
}

async fn wait_all_async(children: Vec<Child>, limit: Duration) -> Vec<Output> {
    tokio::task::spawn_blocking(move || wait_all(children, limit)).await.unwrap()
}

fn describe(outputs: &[Output]) -> String {
    outputs
        .iter()
        .enumerate()
        .map(|(i, o)| format!("--- process {i}: {:?}\n{}{}", o.status.code(), text(&o.stdout), text(&o.stderr)))
        .collect()
}

/// The artifacts merged into `out` (not the shards' own), each through the checker.
fn merged_artifacts(out: &Path) -> Vec<Value> {
    let merged: Vec<PathBuf> =
        common::artifacts(out).into_iter().filter(|p| !p.to_string_lossy().contains(".shard")).collect();
    merged.iter().map(|p| check_artifact(p)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_peers_are_ignored_while_the_genuine_shards_complete_and_merge() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 24);
    let server = MockServer::start(fast()).await.unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let outs: Vec<PathBuf> = (0..SHARDS).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let extra = ["--coordinator", addr.as_str(), "--join-timeout", "90s"];
    let zero = spawn(shard(&scenario, &server.base_url(), &outs[0], 0, &extra, Some(TOKEN)));
    let pid = zero.id();
    let hostile_addr = addr.clone();
    let (before, after, held) = tokio::task::spawn_blocking(move || {
        let addr = hostile_addr;
        wait_listening(&addr);
        std::thread::sleep(Duration::from_millis(300));
        let before = peak_rss_kb(pid);
        // Garbage, and a join of the old protocol with a wrong fingerprint.
        let mut garbage = Peer::connect(&addr);
        let _ = garbage.stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(garbage.recv(), None, "garbage gets nothing back");
        let mut old = Peer::connect(&addr);
        old.plain(&json!({"type": "join", "index": 1, "count": 2, "protocol": 1, "version": "0.0.1", "fingerprint": "fnv1a64:1", "host": "x"}));
        assert_eq!(old.recv(), None);
        // The protocol spoken right, with the wrong token: refused in plain words, nothing more.
        let mut wrong = Peer::hello(&addr, "not-the-token-of-this-run-at-all");
        wrong.join(1, "fnv1a64:0000000000000000");
        let refused = wrong.recv().expect("a refusal");
        assert_eq!(refused, json!({"type": "refused", "reason": "authentication"}));
        assert_eq!(wrong.recv(), None, "then closed");
        // With the token but another configuration: refused with the reason, the run goes on.
        fingerprint_of_shard_0(&addr);
        // Sixty connections at once, each sending a 16 MiB line before any hello, held open.
        let floods: Vec<std::thread::JoinHandle<Option<TcpStream>>> = (0..60)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let s = TcpStream::connect(&addr).ok()?;
                    s.set_write_timeout(Some(Duration::from_secs(10))).ok()?;
                    let mut w = s.try_clone().ok()?;
                    let chunk = vec![b'a'; 1 << 20];
                    for _ in 0..16 {
                        if w.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                    Some(s)
                })
            })
            .collect();
        let held: Vec<TcpStream> = floods.into_iter().filter_map(|t| t.join().ok().flatten()).collect();
        std::thread::sleep(Duration::from_millis(500));
        (before, peak_rss_kb(pid), held)
    })
    .await
    .unwrap();
    // The genuine shard 1 joins while the sixty are still held.
    let one = spawn(shard(&scenario, &server.base_url(), &outs[1], 1, &extra, Some(TOKEN)));
    let outputs = wait_all_async(vec![zero, one], Duration::from_secs(180)).await;
    drop(held);
    assert!(outputs.iter().all(|o| o.status.success()), "{}", describe(&outputs));
    let log = text(&outputs[0].stderr);
    assert!(log.contains("ignored a connection from 127.0.0.1:"), "{log}");
    assert!(log.contains("failed authentication"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes on a non-terminal stderr: {log:?}");
    assert!(text(&outputs[0].stdout).contains("merged artifacts"), "{}", describe(&outputs));
    // Memory: sixty connections and a 16 MiB line cost shard 0 next to nothing.
    eprintln!("shard 0 peak RSS: {before} kB before the hostile peers, {after} kB after");
    assert!(after < before + 64 * 1024, "shard 0's peak RSS grew from {before} kB to {after} kB");
    let merged = merged_artifacts(&outs[0]);
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0]["requests"], 24);
    assert_eq!(merged[0]["shards"]["partial"], false);
    assert_eq!(server.stats().requests_received, 24, "the simulator saw exactly the shards' requests");
    for out in &outs {
        for p in std::fs::read_dir(out).unwrap().filter_map(|e| e.ok().map(|e| e.path())) {
            if p.to_string_lossy().ends_with(".records.ndjson") {
                common::check_records(&p);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_altered_in_transit_are_detected_and_nothing_is_merged() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 16);
    let server = MockServer::start(fast()).await.unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let via = proxy.local_addr().unwrap().to_string();
    tampering_proxy(proxy, addr.clone());
    let outs: Vec<PathBuf> = (0..SHARDS).map(|i| dir.path().join(format!("shard{i}"))).collect();
    let children = vec![
        spawn(shard(&scenario, &server.base_url(), &outs[0], 0, &["--coordinator", &addr], Some(TOKEN))),
        spawn(shard(&scenario, &server.base_url(), &outs[1], 1, &["--coordinator", &via], Some(TOKEN))),
    ];
    let outputs = wait_all_async(children, Duration::from_secs(180)).await;
    for o in &outputs {
        assert_eq!(o.status.code(), Some(1), "{}", describe(&outputs));
        let err = text(&o.stderr);
        assert!(err.contains("shard 1") && err.contains("SHA-256") && err.contains("altered"), "{err}");
    }
    assert!(merged_artifacts(&outs[0]).is_empty(), "nothing merged from altered records");
    // The gathered copy holds nothing of what was altered.
    let gathered: Vec<PathBuf> = std::fs::read_dir(&outs[0])
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".shards"))
        .flat_map(|d| std::fs::read_dir(d).unwrap().filter_map(|e| e.ok().map(|e| e.path())))
        .filter(|p| p.to_string_lossy().contains("shard1of2"))
        .collect();
    for g in gathered {
        assert_eq!(std::fs::metadata(&g).unwrap().len(), 0, "{} kept altered bytes", g.display());
    }
}

/// A shard 0 of two with the token, and an authenticated raw peer joined as shard 1 with the
/// right fingerprint (welcome received), heartbeating but never getting ready.
async fn shard_0_with_a_peer_that_never_gets_ready(
    dir: &Path,
    extra: &[&str],
) -> (Child, std::thread::JoinHandle<Vec<Value>>, PathBuf) {
    let scenario = write_scenario(dir, 8);
    let server = MockServer::start(fast()).await.unwrap();
    let base = server.base_url();
    // The simulator outlives this function: it runs as long as the test's runtime.
    std::mem::forget(server);
    let addr = format!("127.0.0.1:{}", free_port());
    let out = dir.join("shard0");
    let mut args = vec!["--coordinator", addr.as_str()];
    args.extend_from_slice(extra);
    let zero = spawn(shard(&scenario, &base, &out, 0, &args, Some(TOKEN)));
    let peer = std::thread::spawn(move || {
        wait_listening(&addr);
        let fingerprint = fingerprint_of_shard_0(&addr);
        let mut p = Peer::hello(&addr, TOKEN);
        p.join(1, &fingerprint);
        let mut seen = Vec::new();
        let mut beat = p.stream.try_clone().unwrap();
        let mut sealer_stream = Vec::new();
        // Heartbeats from a thread would need the sealer; sealing them here ahead is enough:
        // a batch of numbered heartbeats sent one a second.
        for _ in 0..120 {
            sealer_stream.push(p.sealer.as_mut().unwrap().seal(br#"{"type":"alive"}"#));
        }
        std::thread::spawn(move || {
            for line in sealer_stream {
                if beat.write_all(&line).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        while let Some(msg) = p.recv() {
            let end = msg["type"] == "abort" || msg["type"] == "done";
            seen.push(msg);
            if end {
                break;
            }
        }
        seen
    });
    (zero, peer, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_never_gets_ready_is_timed_out_at_the_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let (zero, peer, _) = shard_0_with_a_peer_that_never_gets_ready(dir.path(), &["--barrier-timeout", "3s"]).await;
    let outputs = wait_all_async(vec![zero], Duration::from_secs(120)).await;
    assert_eq!(outputs[0].status.code(), Some(1), "{}", describe(&outputs));
    let err = text(&outputs[0].stderr);
    assert!(err.contains("shard(s) 1 did not reach the barrier within 3s of shard 0"), "{err}");
    let seen = tokio::task::spawn_blocking(move || peer.join().unwrap()).await.unwrap();
    assert_eq!(seen.first().map(|m| m["type"].clone()), Some(json!("welcome")), "{seen:?}");
    let abort = seen.last().unwrap();
    assert_eq!(abort["type"], "abort", "{seen:?}");
    assert!(abort["reason"].as_str().unwrap().contains("--barrier-timeout"), "{abort}");
}

/// Poll until the records file in `out` has its run line: the shard is past joining and
/// prompt sizing, at (or about to reach) the level's start barrier.
fn wait_for_run_line(out: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let found = std::fs::read_dir(out).ok().into_iter().flatten().filter_map(|e| e.ok()).any(|e| {
            e.path().to_string_lossy().ends_with(".records.ndjson")
                && std::fs::read_to_string(e.path()).is_ok_and(|b| b.contains("\"type\":\"run\""))
        });
        if found {
            std::thread::sleep(Duration::from_millis(500));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("shard 0 never wrote its run line in {}", out.display());
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sending a signal to a child process this test started.
    let pid = i32::try_from(child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_the_start_barrier_stops_the_run_on_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let (zero, peer, out) = shard_0_with_a_peer_that_never_gets_ready(dir.path(), &[]).await;
    tokio::task::spawn_blocking(move || wait_for_run_line(&out)).await.unwrap();
    signal(&zero, libc::SIGINT);
    let outputs = wait_all_async(vec![zero], Duration::from_secs(60)).await;
    assert_eq!(outputs[0].status.code(), Some(1), "{}", describe(&outputs));
    let err = text(&outputs[0].stderr);
    assert!(err.contains("interrupted (Ctrl-C or SIGTERM) while waiting for the start of level"), "{err}");
    let seen = tokio::task::spawn_blocking(move || peer.join().unwrap()).await.unwrap();
    let abort = seen.last().unwrap();
    assert_eq!(abort["type"], "abort", "{seen:?}");
    assert!(abort["reason"].as_str().unwrap().contains("shard 0 stopped"), "{abort}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_for_the_others_to_join_ends_shard_0() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let extra = ["--coordinator", addr.as_str(), "--join-timeout", "10m"];
    let zero = spawn(shard(&scenario, &server.base_url(), &dir.path().join("out"), 0, &extra, None));
    let probe = addr.clone();
    tokio::task::spawn_blocking(move || wait_listening(&probe)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(&zero, libc::SIGTERM);
    let outputs = wait_all_async(vec![zero], Duration::from_secs(60)).await;
    assert_eq!(outputs[0].status.code(), Some(1), "{}", describe(&outputs));
    assert!(text(&outputs[0].stderr).contains("interrupted (Ctrl-C or SIGTERM)"), "{}", describe(&outputs));
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_beyond_the_cap_is_refused_naming_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let zero =
        spawn(shard(&scenario, &server.base_url(), &dir.path().join("out"), 0, &["--coordinator", &addr], Some(TOKEN)));
    let peer = tokio::task::spawn_blocking(move || {
        wait_listening(&addr);
        let fingerprint = fingerprint_of_shard_0(&addr);
        let mut p = Peer::hello(&addr, TOKEN);
        p.join(1, &fingerprint);
        let welcome = p.recv().unwrap();
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        // 7.5 s: four times that would have put the start 30 s away.
        p.send(&json!({"type": "ready", "level": "x", "plan": "p", "round_trip_ns": 7_500_000_000u64, "uncertainty_ns": 3_750_000_000u64}));
        let mut last = None;
        while let Some(msg) = p.recv() {
            last = Some(msg);
        }
        last
    });
    let outputs = wait_all_async(vec![zero], Duration::from_secs(120)).await;
    assert_eq!(outputs[0].status.code(), Some(1), "{}", describe(&outputs));
    let err = text(&outputs[0].stderr);
    assert!(
        err.contains("shard 1 measured a round trip of 7.500 s to the coordinator, more than the 1s accepted"),
        "{err}"
    );
    let last = peer.await.unwrap().expect("an abort");
    assert_eq!(last["type"], "abort", "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_instant_hours_ahead_is_refused_naming_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let listen = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listen.local_addr().unwrap().to_string();
    let coordinator = fake_coordinator(listen, "anvil-20260501T120000Z-00ab".into(), Duration::from_secs(11 * 3600));
    let one =
        spawn(shard(&scenario, &server.base_url(), &dir.path().join("out"), 1, &["--coordinator", &addr], Some(TOKEN)));
    let outputs = wait_all_async(vec![one], Duration::from_secs(120)).await;
    assert_eq!(outputs[0].status.code(), Some(1), "{}", describe(&outputs));
    let err = text(&outputs[0].stderr);
    assert!(err.contains("shard 1: the coordinator set the start of level") && err.contains("refusing it"), "{err}");
    let seen = tokio::task::spawn_blocking(move || coordinator.join().unwrap()).await.unwrap();
    let failed = seen.iter().find(|m| m["type"] == "failed").unwrap_or_else(|| panic!("{seen:?}"));
    assert!(failed["reason"].as_str().unwrap().contains("shard 1"), "{failed}");
    assert_eq!(server.stats().requests_received, 0, "no measured request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_that_is_not_one_names_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let out = dir.path().join("a").join("b").join("out");
    for run_id in ["../../escaped", "/tmp/anvil-escaped", "anvil-20260501T120000Z-00ab/../../escaped"] {
        let listen = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listen.local_addr().unwrap().to_string();
        let coordinator = fake_coordinator(listen, run_id.to_string(), Duration::from_millis(200));
        let one = spawn(shard(&scenario, &server.base_url(), &out, 1, &["--coordinator", &addr], Some(TOKEN)));
        let outputs = wait_all_async(vec![one], Duration::from_secs(60)).await;
        assert_eq!(outputs[0].status.code(), Some(1), "{run_id}: {}", describe(&outputs));
        assert!(text(&outputs[0].stderr).contains("a run id that is not one"), "{}", describe(&outputs));
        let _ = tokio::task::spawn_blocking(move || coordinator.join()).await;
    }
    let escaped = walk(dir.path()).into_iter().chain(
        walk(Path::new("/tmp"))
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("anvil-escaped"))),
    );
    for p in escaped {
        assert!(!p.to_string_lossy().contains("escaped"), "a file outside --out: {}", p.display());
    }
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() && dir != Path::new("/tmp") {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_far_ahead_or_beyond_any_clock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    for (at, says) in [
        ("5138-01-01T00:00:00Z", "more than 1h"),
        ("4102444800", "more than 1h"),
        ("1e300", "not a time within reach"),
        ("99999999999999999999", "not a time within reach"),
    ] {
        let cmd = shard(&scenario, &server.base_url(), &dir.path().join("out"), 1, &["--start-at", at], None);
        let o = common::run(cmd).await;
        assert_eq!(o.status.code(), Some(2), "{at}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{at}: {}", text(&o.stderr));
    }
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_the_token_is_required_and_every_interface_is_said_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let port = free_port();
    let every = format!("0.0.0.0:{port}");
    // One shard of one: the whole run on this process, served on every interface.
    let solo = |token: Option<&str>, extra: &[&str]| {
        let mut cmd = anvil();
        cmd.arg(&scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
        cmd.args(["--quiet", "--shard", "0/1", "--coordinator-listen", &every]).args(extra);
        match token {
            Some(t) => cmd.env("ANVIL_SHARD_TOKEN", t),
            None => cmd.env_remove("ANVIL_SHARD_TOKEN"),
        };
        cmd
    };
    let o = common::run(solo(None, &[])).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("ANVIL_SHARD_TOKEN is not set") && err.contains("--insecure-coordinator"), "{err}");
    let o = common::run(solo(Some("short"), &[])).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("fewer than 16") && !text(&o.stderr).contains("short\""), "{}", text(&o.stderr));
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
    for (token, extra, says) in [
        (Some(TOKEN), &[][..], "peers without it are logged and ignored"),
        (None, &["--insecure-coordinator"][..], "anyone who reaches this port can join the run"),
    ] {
        let o = common::run(solo(token, extra)).await;
        assert!(o.status.success(), "{}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(
            err.contains("WARNING: shard 0 serves the coordinator on EVERY interface") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains(TOKEN), "the token was printed: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_0_serves_on_the_address_its_host_name_resolves_to() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let port = free_port();
    let resolved: Vec<SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Iterator::collect).unwrap_or_default();
    let Some(first) = resolved.iter().find(|a| a.is_ipv4()).copied() else {
        panic!("this host's name {name} does not resolve to an IPv4 address here");
    };
    let coordinator = format!("{name}:{port}");
    let zero = spawn(shard(
        &scenario,
        &server.base_url(),
        &dir.path().join("out"),
        0,
        &["--coordinator", &coordinator],
        Some(TOKEN),
    ));
    let probe = first.to_string();
    let other: SocketAddr = if first.ip().is_loopback() {
        format!("127.0.0.2:{port}").parse().unwrap()
    } else {
        format!("127.0.0.1:{port}").parse().unwrap()
    };
    let reached = tokio::task::spawn_blocking(move || {
        wait_listening(&probe);
        TcpStream::connect_timeout(&other, Duration::from_secs(2)).is_ok()
    })
    .await
    .unwrap();
    let mut zero = zero;
    let _ = zero.kill();
    let o = zero.wait_with_output().unwrap();
    assert!(!reached, "the coordinator for {coordinator} ({first}) also answers on {other}: {}", text(&o.stderr));
    if first.ip().is_loopback() {
        assert!(text(&o.stderr).contains("serves on loopback only"), "{}", text(&o.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_with_another_token_is_told_and_named_missing_not_blamed() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), 8);
    let server = MockServer::start(fast()).await.unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let extra = ["--coordinator", addr.as_str(), "--join-timeout", "4s"];
    let children = vec![
        spawn(shard(&scenario, &server.base_url(), &dir.path().join("s0"), 0, &extra, Some(TOKEN))),
        spawn(shard(
            &scenario,
            &server.base_url(),
            &dir.path().join("s1"),
            1,
            &extra,
            Some("another-token-0123456789"),
        )),
    ];
    let outputs = wait_all_async(children, Duration::from_secs(120)).await;
    for o in &outputs {
        assert_eq!(o.status.code(), Some(1), "{}", describe(&outputs));
        assert!(!text(&o.stderr).contains("another-token"), "the token was printed: {}", describe(&outputs));
    }
    let (zero, one) = (text(&outputs[0].stderr), text(&outputs[1].stderr));
    assert!(zero.contains("shard(s) 1 of 2 did not join") && zero.contains("failed authentication"), "{zero}");
    assert!(one.contains("refused this shard: its join failed authentication"), "{one}");
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}
