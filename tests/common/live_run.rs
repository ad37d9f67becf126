//! A run of the real binary watched while it runs: its console lines as they come, each with
//! a bounded wait, and the process killed if the test ends first.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct LiveRun {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far, both streams.
    pub seen: Vec<String>,
}

impl LiveRun {
    /// Start `cmd` with both streams read line by line.
    pub fn start(mut cmd: Command) -> LiveRun {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let tx2 = tx.clone();
        std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        std::thread::spawn(move || BufReader::new(err).lines().map_while(Result::ok).for_each(|l| drop(tx2.send(l))));
        LiveRun { child, lines, seen: Vec::new() }
    }

    /// The first line (from now on) that contains `needle`, within `limit`.
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {needle:?} within {limit:?}; seen:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// The URL the run prints for its `/metrics`.
    pub fn metrics_url(&mut self) -> String {
        let line = self.wait_for("client metrics: http", Duration::from_secs(30));
        line.split_whitespace().find(|w| w.starts_with("http://")).expect("a URL").to_string()
    }

    /// Wait for the exit, within `limit` (killed past it).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the run did not end within {limit:?}; seen:\n{}", self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
