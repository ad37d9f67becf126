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
    match run(quick) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(quick: bool) -> io::Result<()> {
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
    println!();

    let overhead = overhead(&bench, scale)?;
    let memory = memory(&bench, &overhead)?;
    let accuracy = accuracy(&bench, quick)?;
    let scale_run = scale_test(&bench, quick)?;
    let startup = startup(&bench)?;
    let targets = targets(&overhead, &accuracy, &scale_run, &startup);

    print_overhead(&overhead);
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
        "overhead": overhead,
        "memory": memory,
        "accuracy": accuracy,
        "scale": scale_run,
        "startup": startup,
        "targets": targets,
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
        let dir = self.run_dir(&load.tag())?;
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
        let (exit, server_side) = self.measure(server, Path::new(CLIENT), &args, &dir, limit)?;
        let artifact = read_artifact(&out);
        Ok(ClientRun { exit, server: server_side, artifact })
    }

    /// One floor-reader run with the same load.
    fn floor(&self, server: &MockServer, load: &Load, limit: Duration) -> io::Result<FloorRun> {
        let dir = self.run_dir(&format!("floor-{}", load.tag()))?;
        let me = std::env::current_exe()?;
        let args: Vec<OsString> = vec![
            "--floor".into(),
            server.base_url().into(),
            load.concurrency.to_string().into(),
            load.requests.to_string().into(),
            load.max_tokens.to_string().into(),
            if load.canaries { "canaries" } else { "plain" }.into(),
        ];
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

/// Raises the soft open-file limit to the hard one; children inherit it. The 10,000-stream run
/// needs that many sockets on each side.
fn raise_fd_limit() -> String {
    // SAFETY: `getrlimit`/`setrlimit` read and write the plain struct passed to them.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return format!("unknown ({})", io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return format!("{} (raised from {})", lim.rlim_max, lim.rlim_cur);
            }
            return format!("{} (raising to {} failed: {})", lim.rlim_cur, lim.rlim_max, io::Error::last_os_error());
        }
        format!("{}", lim.rlim_cur)
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
    // SAFETY: all-zero is a valid rusage; `getrusage` fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
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
        bench.stop(server);
        let ratio = |f: fn(&Cost) -> f64| floor.as_ref().map(|fl| f(&client) / f(fl));
        out.push(Comparison {
            cpu_per_chunk_ratio: ratio(|c| c.cpu_us_per_chunk),
            requests_per_s_ratio: ratio(|c| c.requests_per_s),
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
// 2. Timing accuracy against the simulator's ground truth

/// Nearest-rank percentiles of a set of errors (the artifact's definition).
#[derive(Debug, Serialize)]
struct Dist {
    samples: usize,
    min: f64,
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Dist {
    fn of(mut values: Vec<f64>) -> Option<Dist> {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: usize| values[(p * n).div_ceil(100).clamp(1, n) - 1];
        Some(Dist {
            samples: n,
            min: values[0],
            p50: rank(50),
            p99: rank(99),
            max: values[n - 1],
            mean: values.iter().sum::<f64>() / n as f64,
        })
    }
}

#[derive(Debug, Serialize)]
struct Accuracy {
    load: Load,
    status: String,
    completed: u64,
    failed: u64,
    /// Client records matched to a ground-truth record by canary marker.
    joined: usize,
    /// Client − server, ms. Positive: the client's clock starts before the request is sent and
    /// stops after the bytes crossed loopback, the server's runs from arrival to hand-over.
    ttft_error_ms: Option<Dist>,
    time_to_first_output_error_ms: Option<Dist>,
    /// The TTFT error of requests sent on an already open connection (each worker's first
    /// request also opens its connection, which the client times and the server does not see).
    ttft_error_warm_ms: Option<Dist>,
    /// Client request start → server arrival (the handler starting), on the wall clock: the
    /// request's side of the TTFT error (pool, connect, write, the server's accept queue).
    request_delivery_ms: Option<Dist>,
    /// TTFT error minus request delivery: server hand-over of the first content chunk → the
    /// client's stamp of the read that carried it.
    ttft_response_side_error_ms: Option<Dist>,
    /// The same for the first output (reasoning) chunk.
    ttfo_response_side_error_ms: Option<Dist>,
    /// (client TPOT − server TPOT) / server TPOT · 100.
    tpot_error_pct: Option<Dist>,
    /// The same over requests sent on an already open connection.
    tpot_error_warm_pct: Option<Dist>,
    /// The server's own TTFT, for scale (ms).
    server_ttft_ms: Option<Dist>,
    /// Simulator CPU ÷ wall time over the run: near 100 % the simulator itself lags.
    server_busy: f64,
    client_cpu_s: f64,
    peak_rss_mib: f64,
    first_error: Option<String>,
}

/// Server-side timings of one response, from its chunk offsets.
struct Truth {
    arrival_unix_ns: u64,
    first_output_ms: f64,
    first_content_ms: Option<f64>,
    tpot_ms: Option<f64>,
}

impl Truth {
    fn of(record: &GroundTruthRecord) -> Option<Truth> {
        let ms = |ns: u64| ns as f64 / 1e6;
        let output: Vec<_> =
            record.chunks.iter().filter(|c| matches!(c.kind, ChunkKind::Reasoning | ChunkKind::Content)).collect();
        let first = output.first()?;
        let last = output.last()?;
        let tokens: u32 = output.iter().map(|c| c.tokens).sum();
        Some(Truth {
            arrival_unix_ns: record.arrival_unix_ns,
            first_output_ms: ms(first.offset_ns),
            first_content_ms: output.iter().find(|c| c.kind == ChunkKind::Content).map(|c| ms(c.offset_ns)),
            tpot_ms: (tokens > 1).then(|| ms(last.offset_ns - first.offset_ns) / f64::from(tokens - 1)),
        })
    }
}

/// Errors of one level, one entry per joined request.
#[derive(Default)]
struct Errors {
    ttft: Vec<f64>,
    ttfo: Vec<f64>,
    ttft_warm: Vec<f64>,
    delivery: Vec<f64>,
    response_side: Vec<f64>,
    ttfo_response_side: Vec<f64>,
    tpot: Vec<f64>,
    tpot_warm: Vec<f64>,
    server_ttft: Vec<f64>,
}

impl Errors {
    fn add(&mut self, record: &Value, truth: &Truth, level_start_unix_ns: u64, concurrency: u32) {
        let warm = record["request_index"].as_u64().is_some_and(|i| i >= u64::from(concurrency));
        // Both instants on the wall clock; the difference of two u64 nanosecond counts first, so
        // no precision is lost to the size of the epoch.
        let delivery = record["start_offset_ms"]
            .as_f64()
            .filter(|_| level_start_unix_ns > 0)
            .map(|offset| (i128::from(truth.arrival_unix_ns) - i128::from(level_start_unix_ns)) as f64 / 1e6 - offset);
        if let Some(d) = delivery {
            self.delivery.push(d);
        }
        if let Some(client) = record["time_to_first_output_ms"].as_f64() {
            let error = client - truth.first_output_ms;
            self.ttfo.push(error);
            if let Some(d) = delivery {
                self.ttfo_response_side.push(error - d);
            }
        }
        if let (Some(client), Some(server)) = (record["ttft_ms"].as_f64(), truth.first_content_ms) {
            let error = client - server;
            self.ttft.push(error);
            self.server_ttft.push(server);
            if warm {
                self.ttft_warm.push(error);
            }
            if let Some(d) = delivery {
                self.response_side.push(error - d);
            }
        }
        if let (Some(client), Some(server)) = (record["tpot_ms"].as_f64(), truth.tpot_ms) {
            let error = (client - server) / server * 100.0;
            self.tpot.push(error);
            if warm {
                self.tpot_warm.push(error);
            }
        }
    }
}

fn accuracy(bench: &Bench, quick: bool) -> io::Result<Vec<Accuracy>> {
    // 64 output tokens at 10 ms (8 reasoning, then 56 content); prefill at 2,000 tokens/s puts
    // the first token some 40 ms after arrival for the ~80-token prompts.
    let profile = Profile {
        name: "bench-accuracy".into(),
        prefill_tok_s: Some(2_000.0),
        time_per_output_token: Duration::from_millis(10),
        reasoning_tokens: (8, 8),
        content_tokens: (56, 56),
        record_ground_truth: true,
        ..instant()
    };
    let levels: &[(u32, u64)] = if quick {
        &[(1, 10), (100, 200), (256, 256), (1000, 1000)]
    } else {
        &[(1, 30), (100, 300), (256, 768), (1000, 3000)]
    };
    let mut out = Vec::new();
    for &(concurrency, requests) in levels {
        let load = Load { regime: "accuracy-10ms", concurrency, requests, max_tokens: 64, canaries: true };
        eprintln!("accuracy: {} ({} requests)", load.tag(), load.requests);
        // A fresh server per level: markers repeat across levels (same seed).
        let server = bench.start(profile.clone())?;
        let run = bench.client(&server, &load, Duration::from_secs(180))?;
        let truth: HashMap<String, Truth> =
            server.ground_truth().iter().filter_map(|r| Some((r.marker.clone()?, Truth::of(r)?))).collect();
        bench.stop(server);
        let mut errors = Errors::default();
        let mut joined = 0;
        for record in &run.artifact.request_timings {
            if let Some(t) = record["request_canary"]["marker"].as_str().and_then(|m| truth.get(m)) {
                joined += 1;
                errors.add(record, t, run.artifact.started_at_unix_ns, concurrency);
            }
        }
        let wall_s = run.artifact.wall_clock_ms / 1000.0;
        out.push(Accuracy {
            status: run.exit.status(),
            completed: run.artifact.completed,
            failed: run.artifact.failed,
            joined,
            ttft_error_ms: Dist::of(errors.ttft),
            time_to_first_output_error_ms: Dist::of(errors.ttfo),
            ttft_error_warm_ms: Dist::of(errors.ttft_warm),
            request_delivery_ms: Dist::of(errors.delivery),
            ttft_response_side_error_ms: Dist::of(errors.response_side),
            ttfo_response_side_error_ms: Dist::of(errors.ttfo_response_side),
            tpot_error_pct: Dist::of(errors.tpot),
            tpot_error_warm_pct: Dist::of(errors.tpot_warm),
            server_ttft_ms: Dist::of(errors.server_ttft),
            server_busy: if wall_s > 0.0 { run.server.cpu_s / wall_s } else { f64::NAN },
            client_cpu_s: run.exit.cpu_s(),
            peak_rss_mib: run.exit.max_rss_kib as f64 / 1024.0,
            first_error: run.artifact.first_failure.clone(),
            load,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// 3. Scale: 10,000 concurrent streams

#[derive(Debug, Serialize)]
struct Scale {
    load: Load,
    status: String,
    completed: u64,
    failed: u64,
    error_counts: Value,
    first_error: Option<String>,
    stderr_tail: String,
    peak_rss_mib: f64,
    baseline_peak_rss_mib: f64,
    /// (peak RSS − RSS of the same run at concurrency 1) / streams.
    rss_per_stream_kib: f64,
    cpu_s: f64,
    process_wall_s: f64,
    /// The simulator's count of streams that reached `[DONE]`.
    server_completed: u64,
    /// The floor reader with the same load, for comparison: what the HTTP stack alone costs.
    floor_status: String,
    floor_completed: u64,
    floor_peak_rss_mib: f64,
    floor_baseline_peak_rss_mib: f64,
    floor_rss_per_stream_kib: f64,
    floor_cpu_s: f64,
}

fn scale_test(bench: &Bench, quick: bool) -> io::Result<Scale> {
    // Short answers at 10 ms per token: every stream stays open ~160 ms, so with one request per
    // worker all of them are in flight together.
    let profile = Profile { content_tokens: (16, 16), ..paced(Duration::from_millis(10)) };
    let streams = if quick { 2_000 } else { 10_000 };
    let load = Load {
        regime: "scale-10ms",
        concurrency: streams,
        requests: u64::from(streams),
        max_tokens: 16,
        canaries: true,
    };
    let baseline = Load { concurrency: 1, requests: 20, ..load.clone() };
    eprintln!("scale: {} and its concurrency-1 baseline, client and floor", load.tag());
    let server = bench.start(profile)?;
    let base = bench.client(&server, &baseline, Duration::from_secs(60))?;
    let run = bench.client(&server, &load, Duration::from_secs(300))?;
    let floor_base = bench.floor(&server, &baseline, Duration::from_secs(60))?;
    let floor = bench.floor(&server, &load, Duration::from_secs(300))?;
    bench.stop(server);
    let per_stream = |peak: u64, base: u64| (peak as f64 - base as f64) / f64::from(streams);
    Ok(Scale {
        status: run.exit.status(),
        completed: run.artifact.completed,
        failed: run.artifact.failed,
        error_counts: run.artifact.error_counts.clone(),
        first_error: if run.artifact.found {
            run.artifact.first_failure.clone()
        } else {
            Some("no artifact written".into())
        },
        stderr_tail: run.exit.stderr_tail.clone(),
        peak_rss_mib: run.exit.max_rss_kib as f64 / 1024.0,
        baseline_peak_rss_mib: base.exit.max_rss_kib as f64 / 1024.0,
        rss_per_stream_kib: per_stream(run.exit.max_rss_kib, base.exit.max_rss_kib),
        cpu_s: run.exit.cpu_s(),
        process_wall_s: run.exit.process_wall_s,
        server_completed: run.server.requests_completed,
        floor_status: floor.exit.status(),
        floor_completed: floor.report.as_ref().map_or(0, |r| r.completed),
        floor_peak_rss_mib: floor.exit.max_rss_kib as f64 / 1024.0,
        floor_baseline_peak_rss_mib: floor_base.exit.max_rss_kib as f64 / 1024.0,
        floor_rss_per_stream_kib: per_stream(floor.exit.max_rss_kib, floor_base.exit.max_rss_kib),
        floor_cpu_s: floor.exit.cpu_s(),
        load,
    })
}

/// Peak RSS at concurrency 256 against the number of requests: the client keeps every
/// request's record until the artifact is written, so its peak grows with the run's length as
/// well as with the streams in flight.
#[derive(Debug, Serialize)]
struct Memory {
    concurrency: u32,
    short_run_requests: u64,
    short_run_peak_rss_mib: f64,
    long_run_requests: u64,
    long_run_peak_rss_mib: f64,
    /// (long − short) / (long − short requests).
    retained_kib_per_request: f64,
    floor_peak_rss_mib: Option<f64>,
}

fn memory(bench: &Bench, overhead: &[Comparison]) -> io::Result<Option<Memory>> {
    let Some(long) =
        overhead.iter().find(|o| o.load.regime == "zero-delay" && o.load.concurrency == 256 && o.load.canaries)
    else {
        return Ok(None);
    };
    let short = Load { requests: long.load.requests.min(2_000) / 2, ..long.load.clone() };
    eprintln!("memory: {} ({} requests)", short.tag(), short.requests);
    let server = bench.start(instant())?;
    let run = bench.client(&server, &short, Duration::from_secs(120))?;
    bench.stop(server);
    let short_mib = run.exit.max_rss_kib as f64 / 1024.0;
    let extra = long.load.requests.saturating_sub(short.requests);
    Ok(Some(Memory {
        concurrency: short.concurrency,
        short_run_requests: short.requests,
        short_run_peak_rss_mib: short_mib,
        long_run_requests: long.load.requests,
        long_run_peak_rss_mib: long.client.peak_rss_mib,
        retained_kib_per_request: if extra > 0 {
            (long.client.peak_rss_mib - short_mib) * 1024.0 / extra as f64
        } else {
            f64::NAN
        },
        floor_peak_rss_mib: long.floor.as_ref().map(|f| f.peak_rss_mib),
    }))
}

// ---------------------------------------------------------------------------------------------
// 4. Start-up

#[derive(Debug, Serialize)]
struct Startup {
    /// CPU (user + sys) of whole one-request runs against the zero-delay profile, ms.
    cpu_ms: Vec<f64>,
    median_cpu_ms: f64,
    median_process_wall_ms: f64,
    peak_rss_mib: f64,
    /// The floor under every child's peak RSS (see `spawner`).
    spawner_peak_rss_mib: f64,
    status: String,
}

fn startup(bench: &Bench) -> io::Result<Startup> {
    eprintln!("start-up: one-request runs");
    let server = bench.start(instant())?;
    let load = Load { regime: "startup", concurrency: 1, requests: 1, max_tokens: OVERHEAD_TOKENS, canaries: true };
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(bench.client(&server, &load, Duration::from_secs(30))?);
    }
    bench.stop(server);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cpu_ms: Vec<f64> = runs.iter().map(|r| r.exit.cpu_s() * 1e3).collect();
    Ok(Startup {
        median_cpu_ms: median(cpu_ms.clone()),
        cpu_ms,
        median_process_wall_ms: median(runs.iter().map(|r| r.exit.process_wall_s * 1e3).collect()),
        peak_rss_mib: runs.iter().map(|r| r.exit.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        spawner_peak_rss_mib: runs.iter().map(|r| r.exit.spawner_peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        status: runs.iter().find(|r| !r.exit.ok()).map_or_else(|| "exit 0".into(), |r| r.exit.status()),
    })
}

// ---------------------------------------------------------------------------------------------
// Targets and printing

#[derive(Debug, Serialize)]
struct Target {
    target: String,
    measured: String,
    met: Option<bool>,
}

fn targets(overhead: &[Comparison], accuracy: &[Accuracy], scale: &Scale, startup: &Startup) -> Vec<Target> {
    let mut out = Vec::new();
    let mut push = |target: String, measured: String, met: Option<bool>| out.push(Target { target, measured, met });
    let find = |regime: &str, c: u32| {
        overhead.iter().find(|o| o.load.regime == regime && o.load.concurrency == c && o.load.canaries)
    };
    for o in overhead.iter().filter(|o| o.load.canaries) {
        push(
            format!("CPU/chunk ≤ 1.25 × floor ({}, c={})", o.load.regime, o.load.concurrency),
            o.cpu_per_chunk_ratio.map_or("n/a".into(), |r| format!("{r:.2} ×")),
            o.cpu_per_chunk_ratio.map(|r| r <= 1.25),
        );
    }
    if let Some(o) = find("zero-delay", 256) {
        push(
            "CPU/chunk ≤ 1.0 µs (zero-delay, c=256)".into(),
            format!("{:.3} µs", o.client.cpu_us_per_chunk),
            Some(o.client.cpu_us_per_chunk <= 1.0),
        );
        push(
            "req/s ≥ 0.8 × floor (zero-delay, c=256)".into(),
            o.requests_per_s_ratio.map_or("n/a".into(), |r| format!("{r:.2} ×")),
            o.requests_per_s_ratio.map(|r| r >= 0.8),
        );
        push(
            "peak RSS ≤ 48 MiB (c=256)".into(),
            format!("{:.1} MiB", o.client.peak_rss_mib),
            Some(o.client.peak_rss_mib <= 48.0),
        );
    }
    for a in accuracy.iter().filter(|a| a.load.concurrency >= 256) {
        if let Some(d) = &a.ttft_error_ms {
            push(
                format!("TTFT error p50 ≤ 0.5 ms, p99 ≤ 1 ms (c={})", a.load.concurrency),
                format!("p50 {:.3} ms, p99 {:.3} ms", d.p50, d.p99),
                Some(d.p50 <= 0.5 && d.p99 <= 1.0),
            );
        }
        // Informative: without each worker's first request, which also opens its connection.
        if let Some(d) = &a.ttft_error_warm_ms {
            push(
                format!("  same, open connections only (c={})", a.load.concurrency),
                format!("p50 {:.3} ms, p99 {:.3} ms", d.p50, d.p99),
                Some(d.p50 <= 0.5 && d.p99 <= 1.0),
            );
        }
    }
    for a in accuracy {
        if let Some(d) = &a.tpot_error_pct {
            let worst = d.min.abs().max(d.max.abs());
            push(
                format!("per-request TPOT within 1 % (c={})", a.load.concurrency),
                format!("worst {worst:.3} %"),
                Some(worst <= 1.0),
            );
        }
        if let Some(d) = a.tpot_error_warm_pct.as_ref().filter(|_| a.load.concurrency > 1) {
            let worst = d.min.abs().max(d.max.abs());
            push(
                format!("  same, open connections only (c={})", a.load.concurrency),
                format!("worst {worst:.3} %"),
                Some(worst <= 1.0),
            );
        }
    }
    push(
        format!("{} streams complete without errors", scale.load.concurrency),
        format!("{} completed, {} failed, {}", scale.completed, scale.failed, scale.status),
        Some(scale.failed == 0 && scale.completed == scale.load.requests && scale.status == "exit 0"),
    );
    push(
        format!("≤ 16 KiB per in-flight stream ({} streams)", scale.load.concurrency),
        format!("{:.1} KiB", scale.rss_per_stream_kib),
        Some(scale.rss_per_stream_kib <= 16.0),
    );
    push("start-up < 50 ms CPU".into(), format!("{:.1} ms", startup.median_cpu_ms), Some(startup.median_cpu_ms < 50.0));
    out
}

fn print_overhead(rows: &[Comparison]) {
    println!("== Overhead: anvil-load vs floor reader (256-token responses, 1 token per chunk) ==");
    println!(
        "{:<22} {:<11} {:>8} {:>10} {:>9} {:>10} {:>11} {:>9} {:>9} {:>8} {:>9}",
        "regime",
        "client",
        "requests",
        "chunks",
        "CPU µs/ch",
        "CPU µs/req",
        "chunks/s",
        "req/s",
        "RSS MiB",
        "srv busy",
        "status"
    );
    for row in rows {
        let mut sides = vec![&row.client];
        sides.extend(row.floor.as_ref());
        for c in sides {
            let label = format!(
                "{} c={}{}",
                row.load.regime,
                row.load.concurrency,
                if row.load.canaries { "" } else { " nocanary" }
            );
            println!(
                "{:<22} {:<11} {:>8} {:>10} {:>9.3} {:>10.1} {:>11.0} {:>9.0} {:>9.1} {:>7.0}% {:>9}",
                label,
                c.who,
                c.completed,
                c.chunks,
                c.cpu_us_per_chunk,
                c.cpu_us_per_request,
                c.chunks_per_s,
                c.requests_per_s,
                c.peak_rss_mib,
                c.server_busy * 100.0,
                c.status
            );
            if let Some(e) = &c.first_error {
                println!("{:<22}   first error: {e}", "");
            }
        }
        if row.artifact_chunks != row.client.chunks || row.client.completed != row.client_server_completed {
            println!(
                "{:<22}   mismatch: the artifact counted {} chunks and {} completed requests, the simulator {} and {}",
                "", row.artifact_chunks, row.client.completed, row.client.chunks, row.client_server_completed
            );
        }
        if let (Some(cpu), Some(rps)) = (row.cpu_per_chunk_ratio, row.requests_per_s_ratio) {
            println!("{:<22} ratio       CPU/chunk {cpu:.2} ×, req/s {rps:.2} ×", "");
        }
    }
    println!("CPU = the child's user + sys (wait4); chunks = content chunks the simulator streamed;");
    println!("srv busy = simulator CPU ÷ wall time: near 100 % the simulator, not the reader, bounds that row's rate.");
    println!();
}

fn print_accuracy(rows: &[Accuracy]) {
    println!("== Timing accuracy vs simulator ground truth (10 ms/token, 8 reasoning + 56 content tokens) ==");
    println!("error = client − server, p50/p99/max; TTFT and TTFO errors include the request's way to the server");
    println!("(delivery: client start → server arrival) and the first chunk's way back (response side)");
    println!(
        "{:>5} {:>5} {:>5} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>5}",
        "conc",
        "reqs",
        "joind",
        "TTFT err ms",
        "TTFT err, warm conn",
        "TTFO err ms",
        "delivery ms",
        "TTFT response side",
        "TTFO response side",
        "TPOT err %",
        "srv"
    );
    let fmt = |d: &Option<Dist>| d.as_ref().map_or("n/a".into(), |d| format!("{:.3}/{:.3}/{:.3}", d.p50, d.p99, d.max));
    for a in rows {
        println!(
            "{:>5} {:>5} {:>5} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>22} | {:>4.0}%",
            a.load.concurrency,
            a.completed,
            a.joined,
            fmt(&a.ttft_error_ms),
            fmt(&a.ttft_error_warm_ms),
            fmt(&a.time_to_first_output_error_ms),
            fmt(&a.request_delivery_ms),
            fmt(&a.ttft_response_side_error_ms),
            fmt(&a.ttfo_response_side_error_ms),
            fmt(&a.tpot_error_pct),
            a.server_busy * 100.0
        );
        if a.status != "exit 0" || a.failed > 0 {
            println!("       {}: {}", a.status, a.first_error.as_deref().unwrap_or(""));
        }
    }
    println!();
}

fn print_memory(m: &Option<Memory>) {
    let Some(m) = m else { return };
    println!("== Peak RSS at concurrency {} (zero-delay) against the run's length ==", m.concurrency);
    println!(
        "{} requests: {:.1} MiB; {} requests: {:.1} MiB; {:.2} KiB kept per request; floor reader: {}",
        m.short_run_requests,
        m.short_run_peak_rss_mib,
        m.long_run_requests,
        m.long_run_peak_rss_mib,
        m.retained_kib_per_request,
        m.floor_peak_rss_mib.map_or("n/a".into(), |f| format!("{f:.1} MiB"))
    );
    println!();
}

fn print_scale(s: &Scale) {
    println!("== Scale: {} concurrent streams (16 tokens at 10 ms) ==", s.load.concurrency);
    println!(
        "{} ({} completed, {} failed; simulator saw {} complete), peak RSS {:.1} MiB (c=1: {:.1} MiB), \
         {:.1} KiB per stream, CPU {:.2} s, wall {:.1} s",
        s.status,
        s.completed,
        s.failed,
        s.server_completed,
        s.peak_rss_mib,
        s.baseline_peak_rss_mib,
        s.rss_per_stream_kib,
        s.cpu_s,
        s.process_wall_s
    );
    if let Some(e) = &s.first_error {
        println!("first error: {e}; errors: {}", s.error_counts);
    }
    if s.status != "exit 0" && !s.stderr_tail.is_empty() {
        println!("stderr: {}", s.stderr_tail);
    }
    println!(
        "floor reader: {} ({} completed), peak RSS {:.1} MiB (c=1: {:.1} MiB), {:.1} KiB per stream, CPU {:.2} s",
        s.floor_status,
        s.floor_completed,
        s.floor_peak_rss_mib,
        s.floor_baseline_peak_rss_mib,
        s.floor_rss_per_stream_kib,
        s.floor_cpu_s
    );
    println!();
}

fn print_startup(s: &Startup) {
    println!("== Start-up: one request, zero-delay profile ==");
    println!(
        "(a child's peak RSS reads at least the spawner's {:.1} MiB: the kernel carries a parent's peak over at fork)",
        s.spawner_peak_rss_mib
    );
    println!(
        "CPU {:.1} ms (median of {}), wall {:.1} ms, peak RSS {:.1} MiB, {}",
        s.median_cpu_ms,
        s.cpu_ms.len(),
        s.median_process_wall_ms,
        s.peak_rss_mib,
        s.status
    );
    println!();
}

fn print_targets(targets: &[Target]) {
    println!("== Targets ==");
    for t in targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "n/a",
        };
        println!("{:<52} {:>32}  {verdict}", t.target, t.measured);
    }
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
// The floor reader (child process)

mod floor {
    //! The cheapest client that can take these responses: the same request bodies over the same
    //! kind of pooled connections, body bytes read and counted, nothing parsed, timed or kept.

    use super::*;

    use bytes::Bytes;
    use reqwest::header::CONTENT_TYPE;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize)]
    pub struct Report {
        pub requests: u64,
        pub completed: u64,
        pub failed: u64,
        pub body_bytes: u64,
        /// First send to last read.
        pub wall_s: f64,
        pub first_error: Option<String>,
    }

    /// Filler for a prompt of about 64 tokens, like the client's synthetic prompts.
    const FILLER: &str = "the river ran north past the old mill while the city slept under a quiet sky and \
                          every street held its breath as the night train rolled slowly across the long bridge \
                          toward the harbour where ships waited for the morning tide to carry them out";

    /// `--floor URL CONCURRENCY REQUESTS MAX_TOKENS canaries|plain`
    pub fn main(args: &[String]) -> ExitCode {
        let parsed = (|| {
            let url = args.first()?.clone();
            let concurrency: usize = args.get(1)?.parse().ok()?;
            let requests: u64 = args.get(2)?.parse().ok()?;
            let max_tokens: u32 = args.get(3)?.parse().ok()?;
            let canaries = args.get(4)? == "canaries";
            Some((url, concurrency, requests, max_tokens, canaries))
        })();
        let Some((url, concurrency, requests, max_tokens, canaries)) = parsed else {
            eprintln!("usage: --floor URL CONCURRENCY REQUESTS MAX_TOKENS canaries|plain");
            return ExitCode::from(2);
        };
        // The same runtime the client builds: multi-threaded, one worker per available CPU.
        let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("floor: {e}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(load(url, concurrency, requests, max_tokens, canaries)) {
            Ok(report) => {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("floor: {e}");
                ExitCode::FAILURE
            }
        }
    }

    fn body(index: u64, max_tokens: u32, canaries: bool) -> Bytes {
        // The canary instruction makes the simulator do the same work as for the client.
        let task = if canaries {
            format!(" Begin your reply with ANVIL_REQ_{SEED}_{index:05} and then continue.")
        } else {
            String::new()
        };
        let prompt = format!("Request {index}. {FILLER}.{task}");
        let body = json!({
            "model": "bench",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }

    async fn load(
        base_url: String,
        concurrency: usize,
        requests: u64,
        max_tokens: u32,
        canaries: bool,
    ) -> Result<Report, reqwest::Error> {
        // The client's pool settings: no proxy, Nagle off, one idle connection kept per worker.
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(concurrency)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        let url = reqwest::Url::parse(&format!("{base_url}/chat/completions")).expect("valid base URL");
        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (http, url, next) = (http.clone(), url.clone(), Arc::clone(&next));
                tokio::spawn(async move {
                    let (mut completed, mut failed, mut bytes, mut first_error) = (0u64, 0u64, 0u64, None);
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= requests {
                            break;
                        }
                        let sent = http
                            .post(url.clone())
                            .header(CONTENT_TYPE, "application/json")
                            .body(body(index, max_tokens, canaries))
                            .send()
                            .await;
                        let result = match sent {
                            Ok(mut response) if response.status().is_success() => loop {
                                match response.chunk().await {
                                    Ok(Some(chunk)) => bytes += chunk.len() as u64,
                                    Ok(None) => break Ok(()),
                                    Err(e) => break Err(e.to_string()),
                                }
                            },
                            Ok(response) => Err(format!("HTTP {}", response.status())),
                            Err(e) => Err(e.to_string()),
                        };
                        match result {
                            Ok(()) => completed += 1,
                            Err(e) => {
                                failed += 1;
                                first_error.get_or_insert(e);
                            }
                        }
                    }
                    (completed, failed, bytes, first_error)
                })
            })
            .collect();
        let mut report = Report { requests, completed: 0, failed: 0, body_bytes: 0, wall_s: 0.0, first_error: None };
        for worker in workers {
            match worker.await {
                Ok((completed, failed, bytes, error)) => {
                    report.completed += completed;
                    report.failed += failed;
                    report.body_bytes += bytes;
                    if report.first_error.is_none() {
                        report.first_error = error;
                    }
                }
                Err(e) => report.first_error = Some(format!("worker panicked: {e}")),
            }
        }
        report.wall_s = started.elapsed().as_secs_f64();
        Ok(report)
    }
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

mod spawner {
    //! Starts the measured children and reaps them with `wait4`, which yields exactly the
    //! child's CPU time and peak RSS.
    //!
    //! It is a separate small process because the kernel counts a child's peak RSS from the
    //! moment it is forked, and carries it across `exec`: a child of the bench itself would
    //! report at least the simulator's peak. Started before the simulator, the spawner stays a
    //! few MiB, which is all its children inherit.

    use super::*;

    /// One child to run: the command line, an optional CPU to pin it to, the directory its
    /// `stdout` and `stderr` files go to, and when to kill it.
    #[derive(Debug, Serialize, Deserialize)]
    pub struct Job {
        pub argv: Vec<String>,
        pub affinity: Option<usize>,
        pub dir: String,
        pub limit_ms: u64,
    }

    /// Reads one JSON `Job` per line from stdin and answers each with a JSON `ChildExit` line.
    pub fn main() -> ExitCode {
        let stdout = io::stdout();
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let exit = serde_json::from_str::<Job>(&line).map_err(io::Error::other).and_then(|job| run(&job));
            let reply = match exit {
                Ok(exit) => serde_json::to_string(&exit).unwrap_or_default(),
                Err(e) => {
                    eprintln!("spawner: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let mut out = stdout.lock();
            if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
                break;
            }
        }
        ExitCode::SUCCESS
    }

    /// Spawns the job with its output in files, reaps it with `wait4`, and kills it if it
    /// outlives its limit.
    fn run(job: &Job) -> io::Result<ChildExit> {
        let (program, args) = job.argv.split_first().ok_or_else(|| io::Error::other("empty command line"))?;
        let dir = Path::new(&job.dir);
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.join("stdout"))?)
            .stderr(fs::File::create(dir.join("stderr"))?)
            .env_remove("RUST_LOG");
        if let Some(cpu) = job.affinity {
            // SAFETY: runs in the forked child before exec and makes one system call, which is
            // async-signal-safe; it allocates nothing and takes no lock.
            unsafe {
                cmd.pre_exec(move || set_affinity(cpu));
            }
        }
        let limit = Duration::from_millis(job.limit_ms);
        let spawner_peak_rss_kib = own_peak_rss_kib();
        let started = Instant::now();
        let child = cmd.spawn()?;
        let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        let mut timed_out = false;
        let (status, usage) = loop {
            let mut status: libc::c_int = 0;
            // SAFETY: all-zero is a valid rusage; `wait4` fills it in.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `pid` is our own child, not yet reaped (std never waits for it: `child`
            // is only dropped); the pointers are to locals.
            let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            if reaped == pid {
                break (status, usage);
            }
            if reaped < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if !timed_out && started.elapsed() > limit {
                // SAFETY: signalling our own unreaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                timed_out = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        drop(child);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(ChildExit {
            code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
            timed_out,
            user_s: secs(usage.ru_utime),
            sys_s: secs(usage.ru_stime),
            max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
            spawner_peak_rss_kib,
            process_wall_s: started.elapsed().as_secs_f64(),
            stdout: String::new(),
            stderr_tail: String::new(),
        })
    }

    /// `VmHWM` of this process, KiB.
    fn own_peak_rss_kib() -> u64 {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }
}
