//! Every command after the run, at soak scale: a records file of N requests is written through
//! the project's own records writer (no server: the lines of a short real run against the
//! simulator, repeated with fresh indices and spread timings), then `summarize`, `report` (HTML
//! and Markdown), `compare` and `export` (CSV, Parquet) run over it in turn, each timed on the
//! wall clock with its own peak RSS (`VmHWM`), printed as records per second and MiB.
//!
//! `cargo bench --locked --bench soak` runs 200,000 requests; `ANVIL_SOAK_REQUESTS=200000,2000000`
//! chooses the sizes (2,000,000 takes minutes and a few GB of disk). A command that fails or
//! passes `ANVIL_SOAK_TIMEOUT` seconds (default 600) is shown as such with what it used until
//! then. Part of `make bench` at the default size; nothing is asserted. The table goes to stdout
//! and, as JSON, to `$CARGO_TARGET_DIR/bench/soak.json`.
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../tests/common/soak_records.rs"]
mod soak_records;
use soak_records::{CLIENT, template_run, write_records};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if args.iter().any(|a| !"soak".contains(a.as_str())) {
        return ExitCode::SUCCESS;
    }
    let sizes: Vec<u64> = match std::env::var("ANVIL_SOAK_REQUESTS") {
        Ok(v) => match v.split(',').map(|s| s.trim().parse::<u64>()).collect::<Result<Vec<_>, _>>() {
            Ok(sizes) if !sizes.is_empty() && sizes.iter().all(|&n| n >= 1000) => sizes,
            _ => {
                eprintln!("ANVIL_SOAK_REQUESTS={v:?}: give request counts of 1000 or more, comma-separated");
                return ExitCode::FAILURE;
            }
        },
        Err(_) => vec![200_000],
    };
    let timeout =
        Duration::from_secs(std::env::var("ANVIL_SOAK_TIMEOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(600));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let template = runtime.block_on(template_run(dir.path()));
    let mut report = Vec::new();
    println!(
        "{:<24} {:>10} {:>9} {:>12} {:>10} {:>9}",
        "command", "requests", "seconds", "records/s", "peak MiB", "B/req"
    );
    for &n in &sizes {
        let records = dir.path().join(format!("soak-{n}.records.ndjson"));
        let started = Instant::now();
        runtime.block_on(write_records(&template, &records, n));
        let bytes = std::fs::metadata(&records).map(|m| m.len()).unwrap_or(0);
        let written = started.elapsed();
        println!(
            "{:<24} {n:>10} {:>9.2} {:>12.0} {:>10} {:>9.0}",
            "(records written)",
            written.as_secs_f64(),
            n as f64 / written.as_secs_f64(),
            "",
            bytes as f64 / n as f64
        );
        let out = dir.path().join(format!("out-{n}"));
        let mut rows = vec![
            json!({ "command": "write records", "requests": n, "seconds": written.as_secs_f64(), "bytes": bytes }),
        ];
        let summarize = timed(Command::new(CLIENT).arg("summarize").arg(&records).arg("--out").arg(&out), timeout);
        rows.push(row("summarize", n, &summarize));
        let artifact = std::fs::read_dir(&out).ok().and_then(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().ends_with("-sweep.json"))
        });
        let Some(artifact) = artifact else {
            eprintln!("summarize wrote no artifact into {}; the rest is skipped", out.display());
            break;
        };
        let artifact_bytes = std::fs::metadata(&artifact).map(|m| m.len()).unwrap_or(0);
        println!(
            "{:<24} {n:>10} {:>9} {:>12} {:>10} {:>9.0}",
            "(artifact)",
            "",
            "",
            "",
            artifact_bytes as f64 / n as f64
        );
        let html =
            timed(Command::new(CLIENT).arg("report").arg(&artifact).arg("--out").arg(out.join("report.html")), timeout);
        rows.push(row("report", n, &html));
        let md = timed(
            Command::new(CLIENT)
                .arg("report")
                .arg(&artifact)
                .args(["--format", "md", "--out"])
                .arg(out.join("report.md")),
            timeout,
        );
        rows.push(row("report --format md", n, &md));
        let compare = timed(Command::new(CLIENT).arg("compare").arg(&artifact).arg(&artifact).arg("--force"), timeout);
        rows.push(row("compare A A", n, &compare));
        for (name, file) in [("export csv", "requests.csv"), ("export parquet", "requests.parquet")] {
            let export =
                timed(Command::new(CLIENT).arg("export").arg(&artifact).arg("--out").arg(out.join(file)), timeout);
            rows.push(row(name, n, &export));
        }
        report
            .push(json!({ "requests": n, "records_bytes": bytes, "artifact_bytes": artifact_bytes, "commands": rows }));
        let _ = std::fs::remove_dir_all(&out);
        let _ = std::fs::remove_file(&records);
    }
    let path = target_dir().join("bench").join("soak.json");
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap_or_default()) {
        Ok(()) => println!("written: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    ExitCode::SUCCESS
}

/// One command's wall time and peak RSS, or how it failed.
struct Timed {
    seconds: f64,
    peak_kib: u64,
    ok: bool,
    note: String,
}

fn row(name: &str, n: u64, t: &Timed) -> Value {
    println!(
        "{name:<24} {n:>10} {:>9.2} {:>12.0} {:>10.1} {:>9}{}",
        t.seconds,
        n as f64 / t.seconds,
        t.peak_kib as f64 / 1024.0,
        "",
        if t.ok { String::new() } else { format!("  FAILED: {}", t.note) }
    );
    json!({ "command": name, "requests": n, "seconds": t.seconds, "records_per_s": n as f64 / t.seconds,
            "peak_rss_mib": t.peak_kib as f64 / 1024.0, "ok": t.ok, "note": t.note })
}

/// Run `cmd` to its end (or kill it after `limit`), with its own peak RSS (polled every 20 ms).
fn timed(cmd: &mut Command, limit: Duration) -> Timed {
    let started = Instant::now();
    let mut child = match cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => return Timed { seconds: 0.0, peak_kib: 0, ok: false, note: e.to_string() },
    };
    let pid = child.id() as libc::pid_t;
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stderr {
            let _ = std::io::Read::read_to_string(&mut s, &mut text);
        }
        text
    });
    // The peak is the child's own high-water mark (`VmHWM`), read from /proc while it runs; an
    // exited child has none left, so its last 20 ms may be missed. wait4's ru_maxrss will not
    // do: exec keeps the high-water mark of the process it replaces, so this bench's own
    // resident memory (the records writer's) would be the floor of every command's figure.
    let killer = std::thread::spawn(move || {
        let end = Instant::now() + limit;
        let mut peak_kib = 0;
        while Instant::now() < end {
            peak_kib = peak_kib.max(high_water_kib(pid).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: kill with signal 0 only asks whether the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return (false, peak_kib);
            }
        }
        // SAFETY: the child is ours and still running; SIGKILL ends it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        (true, peak_kib)
    });
    let mut status = 0;
    // SAFETY: waits for and reaps our own child, writing its status.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    let seconds = started.elapsed().as_secs_f64();
    // The process is reaped; keep std's handle from waiting on it again.
    std::mem::forget(child);
    let (killed, peak_kib) = killer.join().unwrap_or((false, 0));
    let stderr = reader.join().unwrap_or_default();
    let ok = rc == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let note = if killed {
        format!("killed after {} s", limit.as_secs())
    } else if ok {
        String::new()
    } else {
        stderr.lines().last().unwrap_or("no message").to_string()
    };
    Timed { seconds, peak_kib, ok, note }
}

/// `VmHWM` of a process, KiB: the peak resident set of its current program.
fn high_water_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}
