//! Start skew of a sharded run on one machine: four shard processes (`ANVIL_BENCH_SHARDS`, e.g.
//! 64) with the coordinator on loopback run a sweep of closed-loop levels against the embedded
//! simulator; for every level and shard, the first request's dispatch is compared with the start
//! instant the shards agreed on. The join is the time from the first process started to the first
//! level's agreed start (every shard started, joined, prepared and told the instant).
//!
//! Each level's clock starts at the agreed instant itself, so a shard's lateness is its first
//! request's `start_offset_ms`; the spread across shards is the largest minus the smallest first
//! dispatch of a level, on the wall clock (one host: one clock). The figures cover the
//! coordinator's start message, the wake-up at the instant and the first request's preparation.
//!
//! `cargo bench --bench shards` (or `make bench`) prints the table and writes it as JSON to
//! `$CARGO_TARGET_DIR/bench/shards.json` (default `target/bench/shards.json`). Nothing is
//! asserted.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anvil_load::mock::{MockServer, Profile};
use anvil_load::request::record::file::RecordLine;
use anvil_load::request::record::writer;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CLIENT: &str = env!("CARGO_BIN_EXE_anvil-load");
/// Shards by default (`ANVIL_BENCH_SHARDS` overrides), and levels: 25, or 5 beyond 8 shards.
const DEFAULT_SHARDS: u32 = 4;

fn main() -> ExitCode {
    // `cargo bench NAME` passes NAME to every bench binary; run only when it names this one.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if args.iter().any(|a| !"shards".contains(a.as_str())) {
        return ExitCode::SUCCESS;
    }
    let shards: u32 = match std::env::var("ANVIL_BENCH_SHARDS") {
        Ok(v) => match v.parse() {
            Ok(n) if (1..=256).contains(&n) => n,
            _ => {
                eprintln!("ANVIL_BENCH_SHARDS={v:?}: give a shard count from 1 to 256");
                return ExitCode::FAILURE;
            }
        },
        Err(_) => DEFAULT_SHARDS,
    };
    let levels_run: u32 = if shards > 8 { 5 } else { 25 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let server = runtime.block_on(MockServer::start(Profile::named("instant").expect("profile"))).expect("simulator");
    let dir = tempfile::tempdir().expect("temp dir");
    let scenario = dir.path().join("skew.toml");
    // Concurrency 4, 5, …: one level each, every shard holding at least one request in flight.
    let levels: Vec<String> = (0..levels_run).map(|k| (shards + k).to_string()).collect();
    std::fs::write(
        &scenario,
        format!(
            "[target]\nmodel = \"anvil-sim\"\n[run]\nrequests = {}\nseed = 3\n[load]\nconcurrency = [{}]\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\ncanaries = false\n",
            (2 * shards).max(32),
            levels.join(", ")
        ),
    )
    .expect("scenario");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let coordinator = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let started_unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let children: Vec<_> = (0..shards)
        .map(|i| {
            Command::new(CLIENT)
                .arg(&scenario)
                .args(["--base-url", &server.base_url()])
                .args(["--shard", &format!("{i}/{shards}"), "--coordinator", &coordinator, "--quiet"])
                .args(["--join-timeout", "300s"])
                .arg("--out")
                .arg(dir.path().join(format!("shard{i}")))
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("shard starts")
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("shard ends");
        if !out.status.success() {
            eprintln!("shard {i} failed:\n{}", String::from_utf8_lossy(&out.stderr));
            return ExitCode::FAILURE;
        }
    }
    let elapsed = started.elapsed();

    // (level ordinal) → per shard: (agreed start ns, first dispatch ns).
    let mut late_ms: Vec<f64> = Vec::new();
    let mut spread_ms: Vec<f64> = Vec::new();
    let per_shard: Vec<Vec<(u64, f64)>> = (0..shards)
        .map(|i| first_dispatches(&shard_records(&dir.path().join(format!("shard{i}")), i, shards)))
        .collect();
    let join_s =
        per_shard[0].first().map_or(f64::NAN, |&(start_ns, _)| (start_ns as f64 - started_unix_ns as f64) / 1e9);
    for level in 0..levels_run as usize {
        let firsts: Vec<f64> = per_shard
            .iter()
            .map(|levels| {
                let (start_ns, first_ms) = levels[level];
                late_ms.push(first_ms);
                start_ns as f64 / 1e6 + first_ms
            })
            .collect();
        let (lo, hi) = firsts.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        spread_ms.push(hi - lo);
    }
    let late = summary(&mut late_ms);
    let spread = summary(&mut spread_ms);
    println!(
        "start skew, {shards} shards on one machine, {levels_run} levels ({:.1} s; join: {join_s:.2} s from the first process started to the first level's agreed start)",
        elapsed.as_secs_f64()
    );
    println!("{:<44} {:>8} {:>8} {:>8} {:>8}", "", "p50 ms", "p99 ms", "max ms", "n");
    for (name, s) in
        [("first dispatch − agreed start (per shard)", &late), ("spread of first dispatches (per level)", &spread)]
    {
        let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
        println!("{name:<44} {:>8.3} {:>8.3} {:>8.3} {:>8}", f("p50_ms"), f("p99_ms"), f("max_ms"), s["n"]);
    }
    let merge = merge_throughput(&runtime, dir.path(), shards);
    let report = json!({ "shards": shards, "levels": levels_run, "join_s": join_s, "run_s": elapsed.as_secs_f64(),
                         "first_dispatch_late": late, "spread": spread, "merge": merge });
    let path = target_dir().join("bench").join("shards.json");
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap_or_default()) {
        Ok(()) => println!("written: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    runtime.block_on(server.shutdown());
    ExitCode::SUCCESS
}

/// Requests in all the synthetic shard files of the merge measurement.
const MERGE_RECORDS: u64 = 200_000;

/// Merge throughput: one shard file per shard, `MERGE_RECORDS` requests in all (one level, every
/// line a real record of the run above with its index rewritten), merged by the binary; wall
/// time, records per second and the merge's peak RSS.
fn merge_throughput(runtime: &tokio::runtime::Runtime, dir: &Path, shards: u32) -> Value {
    let per_shard = MERGE_RECORDS / u64::from(shards);
    let synthetic = dir.join("merge-input");
    let _ = std::fs::create_dir_all(&synthetic);
    let mut bytes = 0u64;
    for i in 0..shards {
        let source = shard_records(&dir.join(format!("shard{i}")), i, shards);
        let text = std::fs::read_to_string(&source).expect("records");
        let lines: Vec<RecordLine> = text.lines().map(|l| serde_json::from_str(l).expect("a record line")).collect();
        let run = lines.iter().find(|l| matches!(l, RecordLine::Run { .. })).expect("a run line");
        let level = lines.iter().find(|l| matches!(l, RecordLine::Level { .. })).expect("a level line");
        let Some(RecordLine::Request { level: name, record }) =
            lines.iter().find(|l| matches!(l, RecordLine::Request { .. }))
        else {
            panic!("a request line")
        };
        let end =
            lines.iter().find(|l| matches!(l, RecordLine::LevelEnd { level: l, .. } if l == name)).expect("its end");
        // Through the records writer, which tallies what it writes into the level's end: a file
        // edited afterwards would be refused by `merge` as not holding what the shard wrote.
        let path = synthetic.join(format!("s.shard{i}of{shards}.records.ndjson"));
        runtime.block_on(async {
            let (sink, writer) = writer::open(&path, true, CancellationToken::new()).expect("records file");
            sink.write(run).await;
            sink.write(level).await;
            for k in 0..per_shard {
                let mut record = record.clone();
                record.request_index = k * u64::from(shards) + u64::from(i);
                sink.write(&RecordLine::Request { level: name.clone(), record }).await;
            }
            sink.write(end).await;
            drop(sink);
            writer.finish().expect("records written");
        });
        bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    }
    let started = Instant::now();
    let merged = Command::new(CLIENT)
        .arg("merge")
        .arg(&synthetic)
        .arg("--out")
        .arg(dir.join("merged"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("merge runs");
    let seconds = started.elapsed().as_secs_f64();
    let status = merged.status;
    if !status.success() {
        eprintln!("merge failed:\n{}", String::from_utf8_lossy(&merged.stderr));
    }
    let records = per_shard * u64::from(shards);
    let peak_kib = children_peak_rss_kib();
    println!(
        "merge: {records} records ({:.0} MB) from {shards} shard files in {seconds:.2} s: {:.0} records/s, peak RSS {:.1} MiB ({:.0} B per record){}",
        bytes as f64 / 1e6,
        records as f64 / seconds,
        peak_kib as f64 / 1024.0,
        peak_kib as f64 * 1024.0 / records as f64,
        if status.success() { "" } else { " — the merge FAILED" }
    );
    json!({ "records": records, "input_bytes": bytes, "seconds": seconds, "records_per_s": records as f64 / seconds,
            "peak_rss_kib": peak_kib, "ok": status.success() })
}

/// The largest peak RSS of any child process waited for so far (the merge is the largest).
fn children_peak_rss_kib() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a rusage into the pointer it is given and reads nothing.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: getrusage returned 0, so it filled the structure.
    let usage = unsafe { usage.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    let kib = usage.ru_maxrss as u64;
    kib
}

/// Shard `i`'s own records file in its output directory (shard 0's also holds the records the
/// coordinator merged, which name no shard).
fn shard_records(out: &Path, i: u32, shards: u32) -> PathBuf {
    let suffix = format!(".shard{i}of{shards}.records.ndjson");
    std::fs::read_dir(out)
        .expect("shard output")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(&suffix))
        .expect("the shard's records file")
}

/// Per level, in order: the level's agreed start (ns, this host's clock) and its earliest
/// request start after it (ms).
fn first_dispatches(file: &Path) -> Vec<(u64, f64)> {
    let mut levels: Vec<(String, u64, f64)> = Vec::new();
    for line in std::fs::read_to_string(file).expect("records").lines() {
        let v: Value = serde_json::from_str(line).expect("record line");
        match v["type"].as_str() {
            Some("level") => {
                levels.push((
                    v["level"].as_str().unwrap_or_default().to_string(),
                    v["started_at_unix_ns"].as_u64().unwrap_or(0),
                    f64::MAX,
                ));
            }
            Some("request" | "failure") => {
                if let Some(level) = levels.iter_mut().find(|l| l.0 == v["level"].as_str().unwrap_or_default()) {
                    level.2 = level.2.min(v["start_offset_ms"].as_f64().unwrap_or(f64::MAX));
                }
            }
            _ => {}
        }
    }
    levels.into_iter().map(|(_, start, first)| (start, first)).collect()
}

/// Nearest-rank p50 and p99, and the maximum.
fn summary(v: &mut [f64]) -> Value {
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    json!({ "p50_ms": rank(50.0), "p99_ms": rank(99.0), "max_ms": v[v.len() - 1], "n": v.len() })
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}
