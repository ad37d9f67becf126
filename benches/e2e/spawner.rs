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
