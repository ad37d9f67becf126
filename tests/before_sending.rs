//! What must be settled before the first request: every refusal (exit code 2 promises that
//! nothing was sent; the `/models` check and the calibration probes are requests), the
//! machine's limits (open files, disk space), and a Ctrl-C that arrives while prompts are being
//! calibrated. A small server in this file counts every HTTP request it receives, whatever the
//! path, and never answers a generation request.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anvil_load::mock::{MockServer, Profile};
use axum::Router;
use axum::routing::{get, post};
use common::{anvil, artifacts, check_artifact, run, text};

/// Counts requests: `hits` every one, `posts` generation requests (which never get an answer).
struct Counting {
    base_url: String,
    hits: Arc<AtomicU64>,
    posts: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Counting {
    async fn start() -> Counting {
        let hits = Arc::new(AtomicU64::new(0));
        let posts = Arc::new(AtomicU64::new(0));
        let (h1, h2, p) = (hits.clone(), hits.clone(), posts.clone());
        let app = Router::new()
            .route(
                "/v1/models",
                get(move || async move {
                    h1.fetch_add(1, Ordering::SeqCst);
                    axum::Json(serde_json::json!({"object": "list", "data": [{"id": "m"}]}))
                }),
            )
            .route(
                "/v1/chat/completions",
                post(move || async move {
                    h2.fetch_add(1, Ordering::SeqCst);
                    p.fetch_add(1, Ordering::SeqCst);
                    // Held until the client goes away (bounded by the test's own timeouts).
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Counting { base_url: format!("http://{addr}/v1"), hits, posts, task }
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const SMALL: &str = "[target]\nmodel = \"m\"\n[run]\nrequests = 4\n[load]\nconcurrency = 2\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 16\n[client]\nfirst_byte_timeout = \"3s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_file_that_cannot_be_written_is_refused_before_any_request() {
    let server = Counting::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", SMALL);
    let mut cmd = anvil();
    cmd.arg(&file).args(["--base-url", &server.base_url]).arg("--out").arg(dir.path().join("out"));
    cmd.arg("--records").arg(dir.path().join("no-such-dir").join("r.ndjson"));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--records"), "{stderr}");
    assert_eq!(server.hits(), 0, "exit code 2 means nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_with_a_line_break_is_refused_by_validation() {
    let server = Counting::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file =
        write(dir.path(), "k.toml", &SMALL.replace("model = \"m\"", "model = \"m\"\napi_key_env = \"ANVIL_TEST_KEY\""));
    let secret = "sk-linebreak-secret-4711";
    for validate in [true, false] {
        let mut cmd = anvil();
        if validate {
            cmd.arg("validate");
        }
        cmd.arg(&file).args(["--base-url", &server.base_url]).arg("--out").arg(dir.path().join("out"));
        cmd.env("ANVIL_TEST_KEY", format!("{secret}\r\n"));
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("target.api_key_env") && stderr.contains("line break"), "{stderr}");
        assert!(!stderr.contains(secret) && !text(&result.stdout).contains(secret), "the key is never printed");
    }
    assert_eq!(server.hits(), 0, "not even the /models check may be sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_out_of_range_is_refused_by_validate() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "p.toml", SMALL);
    for sub in [Some("validate"), None] {
        let mut cmd = anvil();
        cmd.args(sub).arg(&file).args(["--base-url", "http://127.0.0.1:99999/v1"]);
        cmd.arg("--out").arg(dir.path().join("out"));
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("target.base_url") && stderr.contains("--base-url"), "{stderr}");
        assert!(stderr.contains("port"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_calibration_stops_at_once_and_sends_no_further_probe() {
    let server = Counting::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Probes wait for an answer up to 30 s each: stopping must not wait for them.
    let file =
        write(dir.path(), "c.toml", &SMALL.replace("first_byte_timeout = \"3s\"", "first_byte_timeout = \"30s\""));
    let mut child = Command::new(env!("CARGO_BIN_EXE_anvil-load"))
        .env_remove("ANVIL_BASE_URL")
        .env("RUST_LOG", "warn")
        .arg(&file)
        .args(["--base-url", &server.base_url])
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let waited = Instant::now();
    while server.posts.load(Ordering::SeqCst) == 0 {
        assert!(waited.elapsed() < Duration::from_secs(20), "no calibration probe arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let signalled = Instant::now();
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(kill.success());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still calibrating 10 s after Ctrl-C");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stopped_after = signalled.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stopped_after < Duration::from_secs(5), "took {stopped_after:?} to stop: {stderr}");
    assert!(stderr.contains("calibration"), "{stderr}");
    // Give a probe that was (wrongly) about to be sent the time to arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.posts.load(Ordering::SeqCst), 1, "no probe after the signal");
    let out = dir.path().join("out");
    let leftovers: Vec<_> =
        std::fs::read_dir(&out).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(leftovers.is_empty(), "a run stopped before its first level leaves nothing behind: {leftovers:?}");
}

/// `sh -c 'ulimit -n N; exec anvil-load …'`: the binary under a low open-file limit.
fn under_file_limit(limit: &str, args: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit {limit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_anvil-load"))
        .args(args)
        .env_remove("ANVIL_BASE_URL")
        .env("RUST_LOG", "warn");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_file_descriptors_refuse_the_run_before_anything_is_sent() {
    let server = Counting::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "fd.toml", SMALL);
    let out = dir.path().join("out");
    // Soft and hard limit 64: 200 connections cannot fit, and the limit cannot be raised.
    let cmd = under_file_limit(
        "-n 64",
        &[
            file.as_os_str(),
            "--base-url".as_ref(),
            server.base_url.as_ref(),
            "--concurrency".as_ref(),
            "200".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
    );
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    for needle in ["load.concurrency", "open-file limit is 64", "ulimit -n 264"] {
        assert!(stderr.contains(needle), "the message names {needle}: {stderr}");
    }
    assert_eq!(server.hits(), 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_soft_file_limit_is_raised_to_what_the_run_needs() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "raise.toml",
        "[target]\nmodel = \"m\"\nsimulator = \"instant\"\n[run]\nrequests = 100\n[load]\nconcurrency = 100\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 8192\nmax_tokens = 4\ntokenizer = \"estimate\"\n",
    );
    let out = dir.path().join("out");
    // Only the soft limit is low: the run raises it (the embedded simulator doubles the need).
    let cmd = under_file_limit("-Sn 64", &[file.as_os_str(), "--out".as_ref(), out.as_os_str()]);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(100), Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_estimate_follows_the_bound_that_comes_first() {
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A billion requests would need terabytes, but one second at 20 req/s ends the level first.
    let file = write(
        dir.path(),
        "first.toml",
        "[target]\nmodel = \"m\"\n[run]\nrequests = 1000000000\nduration = \"1s\"\ngrace = \"5s\"\n[load]\nmode = \"open\"\nrate = 20\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 8192\nmax_tokens = 4\ntokenizer = \"estimate\"\n",
    );
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).args(["--base-url", &server.base_url()]).arg("--out").arg(&out);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    assert_eq!(a["planned_arrivals"].as_u64(), Some(20));
    assert_eq!(server.stats().requests_received, a["requests"].as_u64().unwrap());
    server.shutdown().await;
}
