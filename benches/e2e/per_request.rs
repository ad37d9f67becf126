//! What the client pays once per request: short responses (4 tokens, zero delay) at c=64, where
//! building the prompt, the record and the artifact outweigh reading the chunks. CPU per request
//! and requests per second beside the floor reader and oha, and, when valgrind is on the PATH,
//! instructions per request counted by callgrind for the client and the floor reader over the
//! same 3,000 requests: a count that does not move with whatever else the machine does.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use super::{Bench, CLIENT, Cost, Load, floor, floor_args, instant, read_artifact};

/// Output tokens per request in this row.
const TOKENS: u32 = 4;
const CONCURRENCY: u32 = 64;
/// Requests of the timed runs (divided by the bench's scale) and of the callgrind runs.
const REQUESTS: u64 = 20_000;
const CALLGRIND_REQUESTS: u64 = 3_000;
/// Accepted instructions per request, the client's whole process over its whole run.
pub const TARGET_INSTRUCTIONS: f64 = 100_000.0;

#[derive(Debug, Serialize)]
pub(super) struct PerRequestRow {
    pub load: Load,
    pub client: Cost,
    pub floor: Option<Cost>,
    pub oha: Option<Cost>,
    /// anvil-load ÷ floor and ÷ oha: CPU per request, requests per second.
    pub cpu_ratio_floor: Option<f64>,
    pub cpu_ratio_oha: Option<f64>,
    pub requests_per_s_ratio_floor: Option<f64>,
    pub requests_per_s_ratio_oha: Option<f64>,
    /// `None` when valgrind is not on the PATH.
    pub instructions: Option<Instructions>,
}

#[derive(Debug, Serialize)]
pub(super) struct Instructions {
    pub requests: u64,
    /// Whole-process instructions (every thread, start-up included) ÷ requests completed.
    pub client_per_request: f64,
    /// Of them, SHA-256's block function (the records file's digest), when `callgrind_annotate`
    /// could say. valgrind hides the CPU's SHA extensions, so under it the digest takes the
    /// software path; a run without valgrind uses the extensions where the CPU has them.
    pub client_sha256_per_request: Option<f64>,
    pub floor_per_request: f64,
    pub ratio: f64,
    pub met: bool,
}

pub(super) fn per_request_row(bench: &Bench, scale: u64) -> io::Result<PerRequestRow> {
    let load = Load {
        regime: "short-4tok",
        concurrency: CONCURRENCY,
        requests: REQUESTS / scale,
        max_tokens: TOKENS,
        canaries: true,
    };
    let limit = Duration::from_secs(300);
    eprintln!("per request: {} ({} requests)", load.tag(), load.requests);
    let server = bench.start(instant())?;
    let client = Cost::of_client(&bench.client(&server, &load, limit)?);
    let floor = Cost::of_floor(&bench.floor(&server, &load, limit)?);
    let oha = bench.oha(&server, &load, limit)?.map(|run| {
        let mut cost = Cost::of_floor(&run);
        cost.who = "oha";
        cost
    });
    let instructions = callgrind(bench, &server, &Load { requests: CALLGRIND_REQUESTS, ..load.clone() })?;
    bench.stop(server);
    let ratio = |of: fn(&Cost) -> f64, to: Option<&Cost>| to.map(|t| of(&client) / of(t));
    Ok(PerRequestRow {
        cpu_ratio_floor: ratio(|c| c.cpu_us_per_request, Some(&floor)),
        cpu_ratio_oha: ratio(|c| c.cpu_us_per_request, oha.as_ref()),
        requests_per_s_ratio_floor: ratio(|c| c.requests_per_s, Some(&floor)),
        requests_per_s_ratio_oha: ratio(|c| c.requests_per_s, oha.as_ref()),
        load,
        client,
        floor: Some(floor),
        oha,
        instructions,
    })
}

fn valgrind_on_path() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The client and the floor reader under callgrind, each over `load`; `None` without valgrind.
fn callgrind(bench: &Bench, server: &anvil_load::mock::MockServer, load: &Load) -> io::Result<Option<Instructions>> {
    if !valgrind_on_path() {
        return Ok(None);
    }
    // Under callgrind a run is some fifty times slower.
    let limit = Duration::from_secs(900);
    let under_callgrind = |program: &Path, args: Vec<OsString>, dir: &Path| -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", dir.join("callgrind.out").display()).into(),
            program.into(),
        ];
        argv.extend(args);
        argv
    };
    let valgrind = Path::new("valgrind");

    eprintln!("per request: the client under callgrind ({} requests)", load.requests);
    let (dir, args, out) = bench.client_args(server, load, &format!("callgrind-{}", load.tag()))?;
    let (exit, _) = bench.measure(server, valgrind, &under_callgrind(Path::new(CLIENT), args, &dir), &dir, limit)?;
    let artifact = read_artifact(&out);
    if artifact.completed != load.requests {
        return Err(io::Error::other(format!(
            "the client under callgrind completed {} of {} requests: {}",
            artifact.completed, load.requests, exit.stderr_tail
        )));
    }
    let client = total_instructions(&dir.join("callgrind.out"))?;
    let sha256 = sha256_instructions(&dir.join("callgrind.out"));

    eprintln!("per request: the floor reader under callgrind ({} requests)", load.requests);
    let dir = bench.run_dir(&format!("callgrind-floor-{}", load.tag()))?;
    let me = std::env::current_exe()?;
    let (exit, _) =
        bench.measure(server, valgrind, &under_callgrind(&me, floor_args(server, load, false), &dir), &dir, limit)?;
    let completed = serde_json::from_str::<floor::Report>(exit.stdout.trim()).map_or(0, |r| r.completed);
    if completed != load.requests {
        return Err(io::Error::other(format!(
            "the floor reader under callgrind completed {completed} of {} requests: {}",
            load.requests, exit.stderr_tail
        )));
    }
    let floor = total_instructions(&dir.join("callgrind.out"))?;

    let per = |total: u64| total as f64 / load.requests as f64;
    let (client_per_request, floor_per_request) = (per(client), per(floor));
    Ok(Some(Instructions {
        requests: load.requests,
        client_per_request,
        client_sha256_per_request: sha256.map(per),
        floor_per_request,
        ratio: client_per_request / floor_per_request,
        met: client_per_request <= TARGET_INSTRUCTIONS,
    }))
}

/// The instructions a callgrind profile counted: its `summary:` (or older `totals:`) line.
fn total_instructions(profile: &Path) -> io::Result<u64> {
    let text = std::fs::read_to_string(profile)?;
    text.lines()
        .find_map(|line| line.strip_prefix("summary:").or_else(|| line.strip_prefix("totals:")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| io::Error::other(format!("{}: no summary line", profile.display())))
}

/// Instructions in SHA-256's block functions, by `callgrind_annotate`'s flat profile.
fn sha256_instructions(profile: &Path) -> Option<u64> {
    let out = Command::new("callgrind_annotate").arg(profile).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let counts = text
        .lines()
        .filter(|l| l.contains("sha256_block_data_order"))
        .map(|l| l.split_whitespace().next().map(|n| n.replace(',', "")).and_then(|n| n.parse::<u64>().ok()));
    counts.sum::<Option<u64>>().filter(|&n| n > 0)
}

pub(super) fn print_per_request(row: &PerRequestRow) {
    println!(
        "== Per request: {}-token responses, zero delay, c={}, {} requests ==",
        row.load.max_tokens, row.load.concurrency, row.load.requests
    );
    println!("{:<11} {:>10} {:>10} {:>9} {:>9}", "client", "completed", "CPU µs/req", "req/s", "RSS MiB");
    for c in [Some(&row.client), row.floor.as_ref(), row.oha.as_ref()].into_iter().flatten() {
        println!(
            "{:<11} {:>10} {:>10.1} {:>9.0} {:>9.1}",
            c.who, c.completed, c.cpu_us_per_request, c.requests_per_s, c.peak_rss_mib
        );
    }
    let ratio = |r: Option<f64>| r.map_or("n/a".to_owned(), |r| format!("{r:.2}x"));
    println!(
        "CPU per request ÷ floor {}, ÷ oha {}; requests per second ÷ floor {}, ÷ oha {}",
        ratio(row.cpu_ratio_floor),
        ratio(row.cpu_ratio_oha),
        ratio(row.requests_per_s_ratio_floor),
        ratio(row.requests_per_s_ratio_oha)
    );
    match &row.instructions {
        Some(i) => println!(
            "instructions per request (callgrind, {} requests): anvil-load {:.0}, floor reader {:.0} ({:.2}x); target ≤ {TARGET_INSTRUCTIONS:.0}: {}",
            i.requests,
            i.client_per_request,
            i.floor_per_request,
            i.ratio,
            if i.met { "met" } else { "NOT MET" }
        ),
        None => println!("instructions per request: not counted (valgrind is not on the PATH)"),
    }
    if let Some(sha) = row.instructions.as_ref().and_then(|i| i.client_sha256_per_request) {
        println!(
            "  of the client's, {sha:.0} are SHA-256 (the records' digest) in software: valgrind hides the CPU's SHA extensions"
        );
    }
    println!();
}
