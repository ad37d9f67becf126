//! End-to-end benchmark of the `anvil-load` client against the embedded simulator: CPU cost per
//! streamed chunk beside a floor reader, timing accuracy against the simulator's ground truth,
//! 10,000 concurrent streams, and start-up cost.
//!
//! The simulator runs in this process on one runtime worker, pinned to CPU 0; every measured
//! client runs as a child process pinned to CPU 1, so `wait4` gives exactly its CPU time and
//! peak RSS and the two sides never compete for a core. The floor reader is this same binary
//! re-executed with `--floor`: the same requests over the same kind of connection pool, reading
//! and counting body bytes and nothing else. Its cost is what any streaming client pays; the
//! ratio anvil-load ÷ floor is the figure to drive down.
//!
//! `cargo bench --bench e2e` (or `make bench`) prints the tables and writes them as JSON to
//! `$CARGO_TARGET_DIR/bench/e2e.json` (default `target/bench/e2e.json`); append `-- --quick`
//! for a run with a tenth of the requests. No figure is asserted: the targets are reported as
//! met or not.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anvil_load::mock::{ChunkKind, GroundTruthRecord, MockServer, MockStatsSnapshot, Profile};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod accuracy;
mod exporter;
mod floor;
mod media;
mod oha;
mod per_request;
mod report;
mod scale;
mod spawner;

use accuracy::*;
use report::*;
use scale::*;

/// The release-built client under test.
const CLIENT: &str = env!("CARGO_BIN_EXE_anvil-load");
/// CPU the simulator (this process) runs on; the measured children get `CHILD_CPU`.
const SERVER_CPU: usize = 0;
const CHILD_CPU: usize = 1;
/// Seed of every scenario; request `i` then carries the canary `ANVIL_REQ_1_<i:05>`.
const SEED: u64 = 1;
/// Output tokens per request in the overhead regimes (the `instant` profile's answer length).
const OVERHEAD_TOKENS: u32 = 256;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--floor") => return floor::main(&args[2..]),
        Some("--spawner") => return spawner::main(),
        _ => {}
    }
    // `cargo bench NAME` passes NAME to every bench binary: a filter meant for the criterion
    // benches must not start minutes of this one. Other flags (`--bench`) are ignored.
    let filters: Vec<&String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| "e2e".contains(f.as_str())) {
        return ExitCode::SUCCESS;
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `-- --media`: the media row alone (see `media`); `-- --exporter`: the /metrics row alone;
    // `-- --per-request`: the short-response row alone (see `per_request`).
    let only = ["--media", "--exporter", "--per-request"].into_iter().find(|flag| args.iter().any(|a| a == flag));
    match run(quick, only) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(quick: bool, only: Option<&str>) -> io::Result<()> {
    // Read before pinning: afterwards this process sees only its own CPU.
    let machine = Machine::read();
    let pinning = Pinning::apply();
    let fd_limit = raise_fd_limit();
    // Started while this process is still small: see `spawner`.
    let spawner = Mutex::new(Spawner::start()?);
    let scale = if quick { 10 } else { 1 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let work = tempfile::tempdir()?;
    let bench = Bench { runtime, dir: work.path().to_path_buf(), pinning, spawner, next_run: 0.into() };

    println!("anvil-load end-to-end benchmark, {}", machine.date);
    println!(
        "machine: {} CPUs, {}, kernel {}; {}",
        machine.cpus,
        machine.cpu_model,
        machine.kernel,
        bench.pinning.describe()
    );
    println!("open-file limit for the children: {fd_limit}");
    let oha_version = oha::version();
    println!(
        "external floor: {}",
        oha_version.as_deref().unwrap_or("oha not on the PATH (cargo install oha --locked adds it); floor reader only")
    );
    println!();

    if only == Some("--per-request") {
        per_request::print_per_request(&per_request::per_request_row(&bench, scale)?);
        return Ok(());
    }
    let exporter_row = match only {
        Some("--media") => None,
        _ => Some(exporter::exporter_row(&bench, scale)?),
    };
    if let Some(row) = &exporter_row {
        exporter::print_exporter(row);
    }
    if only == Some("--exporter") {
        return Ok(());
    }
    let media_row = media::media_row(&bench, quick)?;
    media::print_media(&media_row);
    if only == Some("--media") {
        return Ok(());
    }
    let overhead = overhead(&bench, scale)?;
    let per_request = per_request::per_request_row(&bench, scale)?;
    let memory = memory(&bench, &overhead)?;
    let accuracy = accuracy(&bench, quick)?;
    let scale_run = scale_test(&bench, quick)?;
    let startup = startup(&bench)?;
    let targets = targets(&overhead, &per_request, &accuracy, &scale_run, &startup);

    print_overhead(&overhead);
    per_request::print_per_request(&per_request);
    print_memory(&memory);
    print_accuracy(&accuracy);
    print_scale(&scale_run);
    print_startup(&startup);
    print_targets(&targets);

    let report = json!({
        "schema": "anvil-load.bench.e2e/v1",
        "date": machine.date,
        "command": if quick { "cargo bench --bench e2e -- --quick" } else { "cargo bench --bench e2e" },
        "machine": machine,
        "pinning": bench.pinning.describe(),
        "open_file_limit": fd_limit,
        "oha": oha_version,
        "overhead": overhead,
        "per_request": per_request,
        "memory": memory,
        "accuracy": accuracy,
        "scale": scale_run,
        "startup": startup,
        "targets": targets,
        "media": media_row,
        "exporter": exporter_row,
    });
    let out_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from).join("bench");
    fs::create_dir_all(&out_dir)?;
    let path = out_dir.join("e2e.json");
    fs::write(&path, serde_json::to_vec_pretty(&report)?)?;
    println!("\nsaved: {}", path.display());
    Ok(())
}

/// The simulator's runtime, the scratch directory, and how children are pinned.
struct Bench {
    runtime: tokio::runtime::Runtime,
    dir: PathBuf,
    pinning: Pinning,
    spawner: Mutex<Spawner>,
    /// Numbers each child run, so every run gets its own files.
    next_run: AtomicU64,
}

impl Bench {
    fn start(&self, profile: Profile) -> io::Result<MockServer> {
        self.runtime.block_on(MockServer::start(profile))
    }

    fn stop(&self, server: MockServer) {
        self.runtime.block_on(server.shutdown());
    }

    fn run_dir(&self, tag: &str) -> io::Result<PathBuf> {
        let n = self.next_run.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("{n:02}-{tag}"));
        fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// One `anvil-load` run against `server`: the child's resources, the artifact's counts,
    /// and the server's counters over the run.
    fn client(&self, server: &MockServer, load: &Load, limit: Duration) -> io::Result<ClientRun> {
        let (dir, args, out) = self.client_args(server, load, &load.tag())?;
        let (exit, server_side) = self.measure(server, Path::new(CLIENT), &args, &dir, limit)?;
        let artifact = read_artifact(&out);
        Ok(ClientRun { exit, server: server_side, artifact })
    }

    /// A fresh run directory named after `tag`, holding `load`'s scenario, and the client's
    /// arguments for it: its run directory, its arguments and its output directory.
    fn client_args(
        &self,
        server: &MockServer,
        load: &Load,
        tag: &str,
    ) -> io::Result<(PathBuf, Vec<OsString>, PathBuf)> {
        let dir = self.run_dir(tag)?;
        let scenario = dir.join("scenario.toml");
        fs::write(&scenario, load.scenario())?;
        let out = dir.join("out");
        let args: Vec<OsString> = vec![
            scenario.into(),
            "--base-url".into(),
            server.base_url().into(),
            "--out".into(),
            out.clone().into(),
            "--no-progress".into(),
            "--tokenizer".into(),
            "estimate".into(),
        ];
        Ok((dir, args, out))
    }

    /// One floor-reader run with the same load.
    fn floor(&self, server: &MockServer, load: &Load, limit: Duration) -> io::Result<FloorRun> {
        self.floor_run(server, load, limit, false)
    }

    /// A floor-reader run that also reports each request's timings.
    fn floor_timed(&self, server: &MockServer, load: &Load, limit: Duration) -> io::Result<FloorRun> {
        self.floor_run(server, load, limit, true)
    }

    fn floor_run(&self, server: &MockServer, load: &Load, limit: Duration, timed: bool) -> io::Result<FloorRun> {
        let dir = self.run_dir(&format!("floor-{}", load.tag()))?;
        let me = std::env::current_exe()?;
        let args = floor_args(server, load, timed);
        let (exit, server_side) = self.measure(server, &me, &args, &dir, limit)?;
        let report = serde_json::from_str::<floor::Report>(exit.stdout.trim()).ok();
        Ok(FloorRun { exit, server: server_side, report })
    }

    /// Runs a pinned child to its end (or kills it at `limit`) and returns its resources and
    /// what the server did meanwhile, including the server's own CPU time.
    fn measure(
        &self,
        server: &MockServer,
        program: &Path,
        args: &[OsString],
        dir: &Path,
        limit: Duration,
    ) -> io::Result<(ChildExit, ServerSide)> {
        server.reset_peak();
        let before = server.stats();
        let cpu_before = self_cpu();
        let job = self.pinning.job(program, args, dir, limit)?;
        let exit = self.spawner.lock().unwrap_or_else(PoisonError::into_inner).run(&job)?;
        settle(server);
        let cpu = self_cpu() - cpu_before;
        let after = server.stats();
        Ok((exit, ServerSide::between(&before, &after, cpu)))
    }
}

/// The floor reader's arguments for `load` (this binary re-executed with `--floor`).
fn floor_args(server: &MockServer, load: &Load, timed: bool) -> Vec<OsString> {
    vec![
        "--floor".into(),
        server.base_url().into(),
        load.concurrency.to_string().into(),
        load.requests.to_string().into(),
        load.max_tokens.to_string().into(),
        if load.canaries { "canaries" } else { "plain" }.into(),
        if timed { "timed" } else { "untimed" }.into(),
    ]
}

/// Waits (briefly) until the server has no request in flight, so its counters are final.
fn settle(server: &MockServer) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().active_requests > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------------------------
// Load definitions and scenario files

/// One closed-loop load: what the scenario file (and the floor reader) is told.
#[derive(Clone, Debug, Serialize)]
struct Load {
    regime: &'static str,
    concurrency: u32,
    requests: u64,
    max_tokens: u32,
    canaries: bool,
}

impl Load {
    fn tag(&self) -> String {
        format!("{}-c{}{}", self.regime, self.concurrency, if self.canaries { "" } else { "-nocanary" })
    }

    fn scenario(&self) -> String {
        format!(
            "[target]\nmodel = \"bench\"\n\n[run]\nrequests = {}\nseed = {SEED}\n\n[load]\nconcurrency = {}\n\n\
             [workload]\ncontext_tokens = 64\nmax_context_tokens = 8192\nmax_tokens = {}\ncanaries = {}\n",
            self.requests, self.concurrency, self.max_tokens, self.canaries
        )
    }
}

fn instant() -> Profile {
    Profile::named("instant").expect("the instant profile exists")
}

/// The zero-delay profile with a fixed time per output token.
fn paced(per_token: Duration) -> Profile {
    Profile { name: "bench-paced".into(), time_per_output_token: per_token, ..instant() }
}

/// What the client's artifact says about its run.
#[derive(Debug, Default, Serialize)]
struct Artifact {
    found: bool,
    requests: u64,
    completed: u64,
    failed: u64,
    wall_clock_ms: f64,
    /// The level's start on the wall clock; request starts are offsets from it.
    started_at_unix_ns: u64,
    content_chunks: u64,
    reasoning_chunks: u64,
    error_counts: Value,
    first_failure: Option<String>,
    #[serde(skip)]
    request_timings: Vec<Value>,
}

fn read_artifact(out: &Path) -> Artifact {
    let Some(path) = fs::read_dir(out).ok().and_then(|entries| {
        entries.filter_map(Result::ok).map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "json"))
    }) else {
        return Artifact::default();
    };
    let Some(v) = fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
        return Artifact::default();
    };
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    Artifact {
        found: true,
        requests: u(&v["requests"]),
        completed: u(&v["completed"]),
        failed: u(&v["failed"]),
        wall_clock_ms: v["wall_clock_ms"].as_f64().unwrap_or(0.0),
        started_at_unix_ns: u(&v["started_at_unix_ns"]),
        content_chunks: u(&v["metrics"]["content_chunks"]),
        reasoning_chunks: u(&v["metrics"]["reasoning_chunks"]),
        error_counts: v["error_counts"].clone(),
        first_failure: v["failures"].get(0).map(|f| format!("{}: {}", f["error_kind"], f["message"])),
        request_timings: v["request_timings"].as_array().cloned().unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Children: pinning, resources, timeouts

/// How the simulator and the measured children are kept apart.
struct Pinning {
    /// Whether this process (the simulator) is pinned to `SERVER_CPU`, or why not.
    server: Result<(), String>,
    child: ChildPin,
}

enum ChildPin {
    Taskset,
    /// `taskset` is missing: the child sets its own affinity between fork and exec.
    Affinity,
    /// Fewer than two CPUs, or pinning failed: children run wherever the kernel puts them.
    None(String),
}

impl Pinning {
    fn apply() -> Pinning {
        let allowed = allowed_cpus();
        if !(allowed.contains(&SERVER_CPU) && allowed.contains(&CHILD_CPU)) {
            let why = format!("CPUs {SERVER_CPU} and {CHILD_CPU} are not both available (allowed: {allowed:?})");
            return Pinning { server: Err(why.clone()), child: ChildPin::None(why) };
        }
        let server = set_affinity(SERVER_CPU).map_err(|e| format!("sched_setaffinity failed: {e}"));
        let child = if command_exists("taskset") { ChildPin::Taskset } else { ChildPin::Affinity };
        Pinning { server, child }
    }

    fn describe(&self) -> String {
        let server = match &self.server {
            Ok(()) => format!("simulator pinned to CPU {SERVER_CPU}"),
            Err(why) => format!("simulator NOT pinned ({why})"),
        };
        let child = match &self.child {
            ChildPin::Taskset => format!("clients pinned to CPU {CHILD_CPU} with taskset"),
            ChildPin::Affinity => {
                format!("taskset not found: clients pinned to CPU {CHILD_CPU} with sched_setaffinity before exec")
            }
            ChildPin::None(why) => format!("clients NOT pinned ({why})"),
        };
        format!("{server}; {child}")
    }

    /// The command line that runs `program` pinned to the child CPU (through `taskset`, or by
    /// asking the spawner to set the affinity itself).
    fn job(&self, program: &Path, args: &[OsString], dir: &Path, limit: Duration) -> io::Result<spawner::Job> {
        let text = |s: &std::ffi::OsStr| {
            s.to_str().map(str::to_owned).ok_or_else(|| io::Error::other(format!("not UTF-8: {s:?}")))
        };
        let mut argv = Vec::new();
        if matches!(self.child, ChildPin::Taskset) {
            argv.extend(["taskset".to_owned(), "-c".to_owned(), CHILD_CPU.to_string()]);
        }
        argv.push(text(program.as_os_str())?);
        for arg in args {
            argv.push(text(arg)?);
        }
        Ok(spawner::Job {
            argv,
            affinity: matches!(self.child, ChildPin::Affinity).then_some(CHILD_CPU),
            dir: text(dir.as_os_str())?,
            limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set owned here, and its size is passed along with it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect()
    }
}

/// Pins the calling thread (and every thread or process it starts later) to one CPU.
fn set_affinity(cpu: usize) -> io::Result<()> {
    // SAFETY: as in `allowed_cpus`; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn command_exists(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// Raises the soft open-file limit to the hard one (children inherit it), as the client does
/// for its own streams. The 10,000-stream run needs that many sockets on each side.
fn raise_fd_limit() -> String {
    match anvil_load::sys::raise_file_limit(u64::MAX) {
        None => "unknown".into(),
        Some(l) if l.soft > l.soft_before => format!("{} (raised from {})", l.soft, l.soft_before),
        Some(l) if l.soft < l.hard => format!("{} (raising to {} failed)", l.soft, l.hard),
        Some(l) => format!("{}", l.soft),
    }
}

/// A finished child: how it ended, its CPU time and peak RSS from `wait4`, and its output.
#[derive(Debug, Serialize, Deserialize)]
struct ChildExit {
    /// Exit code, or `None` when it died of a signal.
    code: Option<i32>,
    signal: Option<i32>,
    /// Killed by the bench at its time limit.
    timed_out: bool,
    user_s: f64,
    sys_s: f64,
    max_rss_kib: u64,
    /// The spawner's own peak RSS when it started the child: `max_rss_kib` cannot be below it
    /// (the kernel carries the parent's peak into the child), so it is the floor of that figure.
    spawner_peak_rss_kib: u64,
    /// From spawn to reaping (includes start-up and the artifact write).
    process_wall_s: f64,
    #[serde(skip)]
    stdout: String,
    /// The last lines of stderr (warnings, errors).
    #[serde(default)]
    stderr_tail: String,
}

impl ChildExit {
    fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }

    fn ok(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    fn status(&self) -> String {
        match (self.timed_out, self.code, self.signal) {
            (true, _, _) => "killed at the time limit".into(),
            (_, Some(code), _) => format!("exit {code}"),
            (_, None, Some(sig)) => format!("signal {sig}"),
            _ => "unknown".into(),
        }
    }
}

/// User + system CPU seconds of this process (the simulator, every thread).
fn self_cpu() -> f64 {
    anvil_load::sys::process_cpu_time().map_or(0.0, |t| t.as_secs_f64())
}

/// What the simulator did during one child's run.
#[derive(Debug, Default, Serialize)]
struct ServerSide {
    requests_received: u64,
    requests_completed: u64,
    requests_rejected: u64,
    requests_disconnected: u64,
    chunks_streamed: u64,
    tokens_streamed: u64,
    prompt_tokens: u64,
    /// The most streams the simulator held open at once during the run.
    peak_streams: u64,
    /// The simulator's own CPU (this process) over the run: when it nears the wall time, the
    /// simulator, not the client, bounds the request rate.
    cpu_s: f64,
}

impl ServerSide {
    fn between(a: &MockStatsSnapshot, b: &MockStatsSnapshot, cpu_s: f64) -> ServerSide {
        ServerSide {
            requests_received: b.requests_received - a.requests_received,
            requests_completed: b.requests_completed - a.requests_completed,
            requests_rejected: b.requests_rejected - a.requests_rejected,
            requests_disconnected: b.requests_disconnected - a.requests_disconnected,
            chunks_streamed: b.chunks_streamed - a.chunks_streamed,
            tokens_streamed: b.tokens_streamed - a.tokens_streamed,
            prompt_tokens: b.prompt_tokens - a.prompt_tokens,
            peak_streams: b.peak_active_requests,
            cpu_s,
        }
    }
}

struct ClientRun {
    exit: ChildExit,
    server: ServerSide,
    artifact: Artifact,
}

struct FloorRun {
    exit: ChildExit,
    server: ServerSide,
    report: Option<floor::Report>,
}

// ---------------------------------------------------------------------------------------------
// 1. Overhead: client vs floor

/// One side of an overhead comparison, reduced to the figures the table shows.
#[derive(Debug, Serialize)]
struct Cost {
    who: &'static str,
    status: String,
    requests: u64,
    completed: u64,
    failed: u64,
    /// Reasoning and content chunks the simulator streamed during the run.
    chunks: u64,
    cpu_s: f64,
    user_s: f64,
    sys_s: f64,
    cpu_us_per_chunk: f64,
    cpu_us_per_request: f64,
    /// Load phase only: the artifact's `wall_clock_ms`, or the floor's own first-send-to-last-read.
    wall_s: f64,
    chunks_per_s: f64,
    requests_per_s: f64,
    peak_rss_mib: f64,
    process_wall_s: f64,
    /// Simulator CPU over the run ÷ load-phase wall time.
    server_busy: f64,
    /// Prompt tokens per request as the simulator counted them (the two sides' prompts should
    /// be about the same size).
    server_prompt_tokens_per_request: f64,
    first_error: Option<String>,
    stderr_tail: String,
}

impl Cost {
    fn new(who: &'static str, exit: &ChildExit, server: &ServerSide, counts: (u64, u64, u64), wall_s: f64) -> Cost {
        let (requests, completed, failed) = counts;
        let chunks = server.chunks_streamed;
        let per = |total: f64, n: u64| if n > 0 { total / n as f64 } else { f64::NAN };
        let rate = |n: u64| if wall_s > 0.0 { n as f64 / wall_s } else { f64::NAN };
        Cost {
            who,
            status: exit.status(),
            requests,
            completed,
            failed,
            chunks,
            cpu_s: exit.cpu_s(),
            user_s: exit.user_s,
            sys_s: exit.sys_s,
            cpu_us_per_chunk: per(exit.cpu_s() * 1e6, chunks),
            cpu_us_per_request: per(exit.cpu_s() * 1e6, completed),
            wall_s,
            chunks_per_s: rate(chunks),
            requests_per_s: rate(completed),
            peak_rss_mib: exit.max_rss_kib as f64 / 1024.0,
            process_wall_s: exit.process_wall_s,
            server_busy: if wall_s > 0.0 { server.cpu_s / wall_s } else { f64::NAN },
            server_prompt_tokens_per_request: per(server.prompt_tokens as f64, server.requests_received),
            first_error: None,
            stderr_tail: exit.stderr_tail.clone(),
        }
    }

    fn of_client(run: &ClientRun) -> Cost {
        let a = &run.artifact;
        let counts = if a.found {
            (a.requests, a.completed, a.failed)
        } else {
            let s = &run.server;
            (s.requests_received, s.requests_completed, s.requests_received - s.requests_completed)
        };
        let mut cost = Cost::new("anvil-load", &run.exit, &run.server, counts, a.wall_clock_ms / 1000.0);
        cost.first_error = if a.found { a.first_failure.clone() } else { Some("no artifact written".into()) };
        cost
    }

    fn of_floor(run: &FloorRun) -> Cost {
        let (counts, wall_s, first_error) = match &run.report {
            Some(r) => ((r.requests, r.completed, r.failed), r.wall_s, r.first_error.clone()),
            None => ((0, 0, 0), 0.0, Some("the floor reader printed no report".into())),
        };
        let mut cost = Cost::new("floor", &run.exit, &run.server, counts, wall_s);
        cost.first_error = first_error;
        cost
    }
}

#[derive(Debug, Serialize)]
struct Comparison {
    load: Load,
    client: Cost,
    floor: Option<Cost>,
    /// anvil-load ÷ floor, CPU per chunk.
    cpu_per_chunk_ratio: Option<f64>,
    /// oha (an external raw HTTP floor) with the same load, when it is installed.
    oha: Option<Cost>,
    /// anvil-load ÷ oha, CPU per chunk, requests per second and peak RSS.
    cpu_per_chunk_ratio_oha: Option<f64>,
    requests_per_s_ratio_oha: Option<f64>,
    peak_rss_ratio_oha: Option<f64>,
    /// anvil-load ÷ floor, peak RSS.
    peak_rss_ratio: Option<f64>,
    /// anvil-load ÷ floor, requests per second.
    requests_per_s_ratio: Option<f64>,
    /// Chunks the client's artifact counted, to check against the simulator's count.
    artifact_chunks: u64,
    /// Streams the simulator completed during the client's run.
    client_server_completed: u64,
}

fn overhead(bench: &Bench, scale: u64) -> io::Result<Vec<Comparison>> {
    let zero_delay = |concurrency, requests, canaries| Load {
        regime: "zero-delay",
        concurrency,
        requests: requests / scale,
        max_tokens: OVERHEAD_TOKENS,
        canaries,
    };
    // 20,000 requests of 256 chunks: over five million chunks per side, enough that start-up
    // and the last stragglers are lost in the total.
    let plan = [
        (zero_delay(64, 20_000, true), instant(), Duration::from_secs(300)),
        (zero_delay(256, 20_000, true), instant(), Duration::from_secs(300)),
        (zero_delay(256, 20_000, false), instant(), Duration::from_secs(300)),
        (zero_delay(1024, 20_000, true), instant(), Duration::from_secs(300)),
        // 256 tokens at 10 ms is 2.6 s per request: four waves of 256 streams.
        (
            Load {
                regime: "paced-10ms",
                concurrency: 256,
                requests: 1024 / scale.min(4),
                max_tokens: OVERHEAD_TOKENS,
                canaries: true,
            },
            paced(Duration::from_millis(10)),
            Duration::from_secs(180),
        ),
    ];
    let mut out = Vec::new();
    for (load, profile, limit) in plan {
        eprintln!("overhead: {} ({} requests)", load.tag(), load.requests);
        let server = bench.start(profile)?;
        let client = bench.client(&server, &load, limit)?;
        let artifact_chunks = client.artifact.content_chunks + client.artifact.reasoning_chunks;
        let client_server_completed = client.server.requests_completed;
        let client = Cost::of_client(&client);
        // The variant without canaries is compared with the client that has them; its floor
        // would be the same as the canary run's.
        let floor = if load.canaries { Some(Cost::of_floor(&bench.floor(&server, &load, limit)?)) } else { None };
        let oha = match load.canaries {
            true => bench.oha(&server, &load, limit)?.map(|run| {
                let mut cost = Cost::of_floor(&run);
                cost.who = "oha";
                cost
            }),
            false => None,
        };
        bench.stop(server);
        let ratio = |f: fn(&Cost) -> f64| floor.as_ref().map(|fl| f(&client) / f(fl));
        let ratio_oha = |f: fn(&Cost) -> f64| oha.as_ref().map(|o| f(&client) / f(o));
        out.push(Comparison {
            cpu_per_chunk_ratio: ratio(|c| c.cpu_us_per_chunk),
            requests_per_s_ratio: ratio(|c| c.requests_per_s),
            peak_rss_ratio: ratio(|c| c.peak_rss_mib),
            cpu_per_chunk_ratio_oha: ratio_oha(|c| c.cpu_us_per_chunk),
            requests_per_s_ratio_oha: ratio_oha(|c| c.requests_per_s),
            peak_rss_ratio_oha: ratio_oha(|c| c.peak_rss_mib),
            oha,
            load,
            client,
            floor,
            artifact_chunks,
            client_server_completed,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Machine description

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    cpu_model: String,
    kernel: String,
    date: String,
}

impl Machine {
    fn read() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_else(|| "unknown CPU".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().into()),
            date: utc_now(),
        }
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`, without a date library.
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = String::new();
    let _ = write!(out, "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60);
    out
}

// ---------------------------------------------------------------------------------------------
// The spawner (child process)

/// The bench's handle on its spawner process.
struct Spawner {
    process: Child,
    /// `None` once closed, which tells the spawner to exit.
    requests: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
}

impl Spawner {
    fn start() -> io::Result<Spawner> {
        let mut process = Command::new(std::env::current_exe()?)
            .arg("--spawner")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let requests = process.stdin.take().ok_or_else(|| io::Error::other("spawner without stdin"))?;
        let replies = BufReader::new(process.stdout.take().ok_or_else(|| io::Error::other("spawner without stdout"))?);
        Ok(Spawner { process, requests: Some(requests), replies })
    }

    /// Runs one job to its end and reads the child's output files.
    fn run(&mut self, job: &spawner::Job) -> io::Result<ChildExit> {
        let requests = self.requests.as_mut().ok_or_else(|| io::Error::other("the spawner was closed"))?;
        writeln!(requests, "{}", serde_json::to_string(job)?)?;
        requests.flush()?;
        let mut line = String::new();
        if self.replies.read_line(&mut line)? == 0 {
            return Err(io::Error::other("the spawner process ended"));
        }
        let mut exit: ChildExit = serde_json::from_str(&line)?;
        let dir = Path::new(&job.dir);
        exit.stdout = fs::read_to_string(dir.join("stdout")).unwrap_or_default();
        let stderr = fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        exit.stderr_tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        Ok(exit)
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // End of input is the spawner's signal to exit; it has no child running between jobs.
        drop(self.requests.take());
        let _ = self.process.wait();
    }
}
