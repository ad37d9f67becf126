//! A real llama.cpp server for one test: `llama-server` started as a child process on
//! `127.0.0.1` and a free port, waited for on `/health` with a deadline, and killed by its PID
//! when the handle drops — also when the test panics — and with the test process itself
//! (`PR_SET_PDEATHSIG`), so no server outlives its test.
//!
//! The binary and the model come from `ANVIL_LLAMA_SERVER` and `ANVIL_LLAMA_MODEL`, which
//! `make test-engine` sets after building them (`.ci/engine.sh`). Without them every test here
//! fails with a message saying so: these tests never pass by skipping.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http;

/// The model name the server is told to answer to (`--alias`), and the scenarios send.
pub const MODEL: &str = "smollm2";
/// Context per slot: every scenario's `max_context_tokens`.
pub const SLOT_CONTEXT: u32 = 2048;

/// What a server is started for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Text generation with this many slots (parallel sequences).
    Generate { slots: u32 },
    /// As `Generate`, with `--slot-save-path` (a temporary directory): slot actions, the erase
    /// of `load.reset_cache = "llamacpp"` among them, answer 501 without it. `host_cache`: keep
    /// the server's prompt cache in host memory (`--cache-ram`, on by default), which a slot's
    /// erase does not clear; off, `--cache-ram 0`.
    Erasable { slots: u32, host_cache: bool },
    /// `--embeddings --pooling mean`: `/v1/embeddings` only.
    Embeddings,
    /// `--rerank`: `/v1/rerank` (this model has no ranking head; the shape and usage are real).
    Rerank,
}

fn required(var: &str) -> PathBuf {
    let value = std::env::var_os(var).unwrap_or_else(|| {
        panic!(
            "{var} is not set. These tests drive a real llama.cpp server: run them with `make test-engine`, which \
             fetches and builds it (.ci/engine.sh) and sets ANVIL_LLAMA_SERVER and ANVIL_LLAMA_MODEL; or set both to \
             a llama-server binary and a GGUF model yourself."
        )
    });
    let path = PathBuf::from(value);
    assert!(path.is_file(), "{var} names {}, which is not a file", path.display());
    path
}

/// Threads for the server (`-t`): `ANVIL_LLAMA_THREADS`, else 1. One thread keeps the server
/// from spinning against the client and other jobs on a small, shared machine.
fn threads() -> String {
    std::env::var("ANVIL_LLAMA_THREADS").ok().filter(|t| t.parse::<u32>().is_ok_and(|n| n > 0)).unwrap_or("1".into())
}

/// A running `llama-server`; killed when dropped.
pub struct LlamaServer {
    child: Child,
    pub addr: SocketAddr,
    log: tempfile::NamedTempFile,
    /// `Kind::Erasable`: the slot directory, removed with the server.
    _slots: Option<tempfile::TempDir>,
}

impl LlamaServer {
    pub fn start(kind: Kind) -> LlamaServer {
        let (binary, model) = (required("ANVIL_LLAMA_SERVER"), required("ANVIL_LLAMA_MODEL"));
        // A port taken between asking for it and the server binding it is retried.
        let mut last = String::new();
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let log = tempfile::NamedTempFile::new().expect("a log file");
            let mut cmd = Command::new(&binary);
            let mut slot_dir = None;
            let slots = match kind {
                Kind::Generate { slots } | Kind::Erasable { slots, .. } => slots,
                Kind::Embeddings | Kind::Rerank => 1,
            };
            cmd.arg("-m")
                .arg(&model)
                .args(["--alias", MODEL, "--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["-np", &slots.to_string(), "-c", &(SLOT_CONTEXT * slots).to_string()])
                .args(["-t", &threads(), "--metrics", "--no-webui"]);
            match kind {
                Kind::Generate { .. } => {}
                Kind::Erasable { host_cache, .. } => {
                    let dir = tempfile::tempdir().expect("a slot directory");
                    cmd.arg("--slot-save-path").arg(dir.path());
                    slot_dir = Some(dir);
                    if !host_cache {
                        cmd.args(["--cache-ram", "0"]);
                    }
                }
                Kind::Embeddings => {
                    cmd.args(["--embeddings", "--pooling", "mean"]);
                }
                Kind::Rerank => {
                    cmd.arg("--rerank");
                }
            }
            cmd.stdin(Stdio::null())
                .stdout(log.reopen().expect("the log"))
                .stderr(log.reopen().expect("the log"))
                .env_remove("LLAMA_ARG_HOST")
                .env_remove("LLAMA_ARG_PORT");
            // SAFETY: prctl is async-signal-safe; it only asks for SIGKILL when this process dies.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
            let mut server = LlamaServer { child, addr, log, _slots: slot_dir };
            match server.wait_healthy() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("llama-server did not start: {last}");
    }

    /// `/health` answers 200 within 180 s (the model loads in about 2 s on a quiet machine), or
    /// the reason it did not, with the end of the server's log.
    fn wait_healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited ({status}) before it was healthy:\n{}", self.log_tail()));
            }
            if matches!(http::get(self.addr, "/health"), Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no healthy /health within 180 s:\n{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `GET path` answered 200 with JSON.
    pub fn json(&self, path: &str) -> Value {
        let (status, body) = http::get(self.addr, path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path} is not JSON: {e}"))
    }

    /// The `/metrics` exposition: `llamacpp:` name (without labels) → value.
    pub fn metrics(&self) -> Metrics {
        let (status, body) = http::get(self.addr, "/metrics").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "GET /metrics: {}", String::from_utf8_lossy(&body));
        Metrics(http::prometheus(&body))
    }

    /// Slots busy now, from `/slots`.
    pub fn busy_slots(&self) -> usize {
        let slots = self.json("/slots");
        let slots = slots.as_array().unwrap_or_else(|| panic!("/slots is not a list: {slots}"));
        slots.iter().filter(|s| s["is_processing"].as_bool() == Some(true)).count()
    }

    /// Waits (up to 60 s) until no slot is busy: what the engine does once every request has
    /// ended or been cancelled.
    pub fn wait_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.busy_slots() > 0 {
            assert!(Instant::now() < deadline, "slots still busy 60 s after the client ended:\n{}", self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // By PID (std's kill is kill(2) on the child's own PID), then reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `/metrics` scrape.
#[derive(Debug, Clone)]
pub struct Metrics(Vec<(String, f64)>);

impl Metrics {
    /// `llamacpp:<name>`, summed over label sets; panics when the engine does not export it.
    pub fn get(&self, name: &str) -> f64 {
        let full = format!("llamacpp:{name}");
        let values: Vec<f64> = self
            .0
            .iter()
            .filter(|(k, _)| k == &full || k.strip_prefix(full.as_str()).is_some_and(|rest| rest.starts_with('{')))
            .map(|(_, v)| *v)
            .collect();
        assert!(!values.is_empty(), "/metrics has no {full}: {:?}", self.0);
        values.iter().sum()
    }

    /// `after − before` for a counter.
    pub fn delta(&self, before: &Metrics, name: &str) -> f64 {
        self.get(name) - before.get(name)
    }
}
