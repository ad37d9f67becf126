//! Running the real binary against a real engine: a scenario written for the run, the binary
//! started with its records kept, waited for with a deadline (killed past it), and what it left
//! behind read back through the contract checks (`common::check_artifact`,
//! `common::check_records`).

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::server::MODEL;
use crate::common::{anvil, artifacts, check_artifact, check_records, text};

/// No run of these tests takes longer than this, however slow the machine (a quiet 2-core
/// machine needs well under a minute for any of them).
pub const RUN_LIMIT: Duration = Duration::from_secs(900);

/// A scenario against the engine: `[target]` for `api` with `target` lines added, then the
/// given sections. Timeouts leave room for a busy machine, where a queued request can wait
/// minutes for its prefill.
pub fn scenario(api: &str, target: &str, sections: &str) -> String {
    format!(
        "[target]\nmodel = \"{MODEL}\"\napi = \"{api}\"\ndialect = \"llamacpp\"\nengine = \"llama.cpp\"\n{target}\n\n\
         {sections}\n\n[client]\nfirst_byte_timeout = \"10m\"\nidle_timeout = \"5m\"\n",
    )
}

/// A run in progress.
pub struct Running {
    pub child: Child,
    /// Taken by `wait` (the finished run owns it then).
    dir: Option<tempfile::TempDir>,
    started: Instant,
}

/// A finished run: its exit code, console output and output directory (`out/`, with the
/// records file `out/records.ndjson`).
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    dir: tempfile::TempDir,
}

/// Start the binary on `scenario` against `base_url` with `args` added.
pub fn spawn(scenario: &str, base_url: &str, args: &[&str]) -> Running {
    let dir = tempfile::tempdir().expect("a run directory");
    let file = dir.path().join("scenario.toml");
    std::fs::write(&file, scenario).expect("the scenario is written");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("the output directory");
    let mut cmd = anvil();
    cmd.arg(&file)
        .arg("--base-url")
        .arg(base_url)
        .arg("--out")
        .arg(&out)
        .arg("--records")
        .arg(out.join("records.ndjson"))
        .arg("--no-progress")
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("stdout")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr file"));
    let child = cmd.spawn().expect("the binary starts");
    Running { child, dir: Some(dir), started: Instant::now() }
}

/// Run the binary to its end (at most [`RUN_LIMIT`]).
pub fn run(scenario: &str, base_url: &str, args: &[&str]) -> Finished {
    spawn(scenario, base_url, args).wait()
}

impl Running {
    pub fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.id()).expect("a pid")
    }

    /// Send `signal` to the run, by its PID.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the PID of a child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0, "kill({}, {signal})", self.pid());
    }

    /// The run's stderr so far.
    pub fn stderr(&self) -> String {
        let dir = self.dir.as_ref().expect("the run directory");
        text(&std::fs::read(dir.path().join("stderr")).unwrap_or_default())
    }

    /// Wait for the end (killed past [`RUN_LIMIT`], which fails the test).
    pub fn wait(mut self) -> Finished {
        let code = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status.code();
            }
            if self.started.elapsed() > RUN_LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the run did not end within {RUN_LIMIT:?}\nstderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr();
        let dir = self.dir.take().expect("the run directory");
        let stdout = text(&std::fs::read(dir.path().join("stdout")).unwrap_or_default());
        assert!(!stderr.contains("panicked"), "the binary panicked:\n{stderr}");
        Finished { code, stdout, stderr, dir }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panics before `wait` leaves no client behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Finished {
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Exit 0, or the console output.
    pub fn succeeded(&self) -> &Finished {
        assert_eq!(self.code, Some(0), "the run failed\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    /// Every artifact, in name order, each through both contract checks, after the records
    /// file through its own.
    pub fn artifacts(&self) -> Vec<Value> {
        check_records(&self.out().join("records.ndjson"));
        let paths = artifacts(&self.out());
        assert!(!paths.is_empty(), "no artifact\nstderr:\n{}", self.stderr);
        paths.iter().map(|p| check_artifact(p)).collect()
    }

    /// The one artifact of a one-level run.
    pub fn one(&self) -> Value {
        let mut all = self.artifacts();
        assert_eq!(all.len(), 1, "one artifact expected\nstderr:\n{}", self.stderr);
        all.remove(0)
    }
}

/// The records of an artifact, in the order their requests were sent.
pub fn records(a: &Value) -> Vec<Value> {
    let mut records = a["request_timings"].as_array().expect("request_timings").clone();
    records.sort_by(|x, y| x["start_offset_ms"].as_f64().partial_cmp(&y["start_offset_ms"].as_f64()).expect("offsets"));
    records
}

/// The warning codes of an artifact.
pub fn warnings(a: &Value) -> Vec<String> {
    a["warnings"].as_array().expect("warnings").iter().filter_map(|w| w["code"].as_str().map(str::to_string)).collect()
}

/// The message of warning `code`, if the artifact has it.
pub fn warning<'a>(a: &'a Value, code: &str) -> Option<&'a str> {
    a["warnings"].as_array()?.iter().find(|w| w["code"] == code)?["message"].as_str()
}

/// A record's integer field (panics, naming the record, when it is not one).
pub fn int(record: &Value, key: &str) -> u64 {
    record[key].as_u64().unwrap_or_else(|| panic!("{key} is not a count in {record}"))
}

/// A record's number field.
pub fn num(record: &Value, key: &str) -> f64 {
    record[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {record}"))
}
