//! Keys that rotate (`target.api_key_command`, `target.api_key_refresh`), through the real
//! binary against the simulator: a token script (written here; it counts its calls in a file and
//! prints `tok-7f3a-N`) is run before the run and again at the refresh interval, and the
//! simulator saw each token; a 401 runs it once and the refused requests succeed with the new
//! token; a script that fails before the run refuses it (exit 2, nothing sent); one that fails
//! during the run is a warning with its time and the old token stays in use. No token reaches
//! any file the run writes, its stdout or its stderr.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::Value;

/// Every token the scripts print starts so; none may be written anywhere.
const TOKEN: &str = "tok-7f3a-";

/// A token script in `dir`: counts its calls in `dir/calls` and prints `tok-7f3a-N`; from the
/// call `dir/fail-from` names on (when that file exists) it fails instead, echoing the previous
/// token on its standard error (which must be withheld).
fn token_script(dir: &Path) -> PathBuf {
    let path = dir.join("token.sh");
    std::fs::write(
        &path,
        r#"#!/bin/sh
d="$(dirname "$0")"
n=$(( $(cat "$d/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$d/calls"
if [ -e "$d/fail-from" ] && [ "$n" -ge "$(cat "$d/fail-from")" ]; then
  echo "token service unavailable; last issued tok-7f3a-$((n - 1))" >&2
  exit 3
fi
echo "tok-7f3a-$n"
"#,
    )
    .unwrap();
    make_executable(&path);
    path
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn calls(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("calls")).map_or(0, |s| s.trim().parse().unwrap())
}

/// A scenario whose key `command` prints, with `target` lines added, `run` its `[run]` lines, at
/// most `rate` request starts per second over 2 workers.
fn scenario(dir: &Path, command: &Path, target: &str, run: &str, rate: u32) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\napi_key_command = [{command:?}]\n{target}\n[run]\n{run}\nseed = 3\n\
             [load]\nconcurrency = 2\nmax_rate = {rate}\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n"
        ),
    )
    .unwrap();
    path
}

fn profile() -> Profile {
    Profile::named("fast").unwrap()
}

/// Run the binary on `scenario` against `server`, records kept, into `out`.
async fn run_against(scenario: &Path, server: &MockServer, out: &Path) -> Output {
    let mut cmd = anvil();
    cmd.arg(scenario).arg("--base-url").arg(server.base_url()).arg("--no-progress").arg("--records");
    cmd.arg(out.join("records.ndjson")).arg("--out").arg(out);
    run(cmd).await
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { found.extend(files(&path)) } else { found.push(path) }
    }
    found
}

/// No token in stdout, stderr, or any file under `out`.
fn no_token_written(out: &Path, result: &Output) {
    let mut places: Vec<(String, Vec<u8>)> =
        vec![("stdout".into(), result.stdout.clone()), ("stderr".into(), result.stderr.clone())];
    for file in if out.exists() { files(out) } else { Vec::new() } {
        places.push((file.display().to_string(), std::fs::read(&file).unwrap()));
    }
    for (what, bytes) in places {
        if let Some(at) = bytes.windows(TOKEN.len()).position(|w| w == TOKEN.as_bytes()) {
            let around = text(&bytes[at.saturating_sub(200)..(at + 60).min(bytes.len())]);
            panic!("a token was written to {what}: …{around}…");
        }
    }
}

/// The one artifact under `out`, checked, and the records file.
fn the_artifact(out: &Path) -> Value {
    let paths = artifacts(out);
    assert_eq!(paths.len(), 1, "{paths:?}");
    check_records(&out.join("records.ndjson"));
    check_artifact(&paths[0])
}

fn tokens_seen(server: &MockServer) -> Vec<String> {
    server.stats().bearer_tokens.into_keys().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_runs_again_at_every_refresh_and_the_server_sees_each_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = token_script(dir.path());
    let file = scenario(dir.path(), &script, "api_key_refresh = \"10s\"", "duration = \"30s\"", 4);
    let server = MockServer::start(profile()).await.unwrap();
    let result = run_against(&file, &server, &out).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = the_artifact(&out);
    let stats = server.stats();
    // Before the run, then at 10 s and 20 s (and at 30 s when it came before the end).
    let ran = calls(dir.path());
    assert!((3..=4).contains(&ran), "the command ran {ran} times in a 30 s run refreshed every 10 s");
    let seen = tokens_seen(&server);
    assert!(seen.len() >= 3 && seen.iter().all(|t| t.starts_with(TOKEN)), "{seen:?}");
    let counts = &a["credential_refreshes"];
    // The artifact counts the refreshes up to the level's end; one at 30 s may end after it.
    let scheduled = counts["scheduled"].as_u64().unwrap();
    assert!((2..ran).contains(&scheduled), "{counts} with {ran} runs");
    assert_eq!((counts["after_401"].as_u64(), counts["failed"].as_u64()), (Some(0), Some(0)), "{counts}");
    assert_eq!(a["failed"].as_u64(), Some(0), "{}", a["failures"]);
    assert_eq!(a["completed"].as_u64(), Some(stats.requests_completed));
    // Every generation request carried a token (the connection warm-up's GETs do too).
    let carried: u64 = stats.bearer_tokens.values().sum();
    assert!(carried >= stats.requests_received, "{carried} tokens for {} requests", stats.requests_received);
    assert_eq!(a["scenario"]["target"]["api_key_command"]["program"], "token.sh");
    no_token_written(&out, &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_runs_the_command_once_and_the_refused_requests_succeed_with_the_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = token_script(dir.path());
    let requests = 40;
    let file = scenario(dir.path(), &script, "", &format!("requests = {requests}"), 10);
    let server = MockServer::start(profile()).await.unwrap();
    let run_task = {
        let file = file.clone();
        let base = server.base_url();
        let out = out.clone();
        tokio::spawn(async move {
            let mut cmd = anvil();
            cmd.arg(&file).arg("--base-url").arg(base).arg("--no-progress").arg("--records");
            cmd.arg(out.join("records.ndjson")).arg("--out").arg(&out);
            run(cmd).await
        })
    };
    // Once some requests went through with the first token, the server takes only the second.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while server.stats().requests_completed < 10 {
        assert!(tokio::time::Instant::now() < deadline, "the run never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.accept_only_tokens(Some(&["tok-7f3a-2"]));
    let result = run_task.await.unwrap();
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = the_artifact(&out);
    let stats = server.stats();
    assert_eq!(calls(dir.path()), 2, "one run before, one after the first 401");
    assert!(stats.auth_refused >= 1, "the server refused no token");
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(requests), Some(0)), "{}", a["failures"]);
    assert_eq!(stats.requests_completed, requests);
    assert!(stats.requests_rejected >= 1, "the server refused no request");
    assert_eq!(stats.requests_received, requests + stats.requests_rejected, "each refused request was sent once more");
    let counts = &a["credential_refreshes"];
    assert_eq!(
        (counts["scheduled"].as_u64(), counts["after_401"].as_u64(), counts["failed"].as_u64()),
        (Some(0), Some(1), Some(0)),
        "{counts}"
    );
    assert_eq!(tokens_seen(&server), ["tok-7f3a-1", "tok-7f3a-2"]);
    no_token_written(&out, &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_check_carries_the_key_and_a_401_there_refreshes_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = token_script(dir.path());
    let requests = 8;
    // No model named: the run needs the server's /models list, which refuses the first token.
    let file = scenario(dir.path(), &script, "", &format!("requests = {requests}"), 10);
    let text_of = std::fs::read_to_string(&file).unwrap().replace("model = \"m\"\n", "");
    std::fs::write(&file, text_of).unwrap();
    let server = MockServer::start(profile()).await.unwrap();
    server.accept_only_tokens(Some(&["tok-7f3a-2"]));
    let result = run_against(&file, &server, &out).await;
    let err = text(&result.stderr);
    assert!(result.status.success(), "{err}");
    assert!(!err.contains("401"), "{err}");
    let a = the_artifact(&out);
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(requests), Some(0)), "{}", a["failures"]);
    assert_eq!(a["model"], anvil_load::mock::DEFAULT_MODEL);
    assert_eq!(calls(dir.path()), 2);
    assert_eq!(a["credential_refreshes"]["after_401"].as_u64(), Some(1));
    let stats = server.stats();
    assert_eq!((stats.auth_refused, stats.requests_received), (1, requests), "only the /models check was refused");
    no_token_written(&out, &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_401_fails_the_request_and_the_echoed_token_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = token_script(dir.path());
    let requests = 6;
    let file = scenario(dir.path(), &script, "", &format!("requests = {requests}"), 10);
    let server = MockServer::start(profile()).await.unwrap();
    // No token is accepted, and every refusal quotes the token it refused.
    server.accept_only_tokens(Some(&[]));
    let result = run_against(&file, &server, &out).await;
    assert_eq!(result.status.code(), Some(1), "nothing succeeded: {}", text(&result.stderr));
    let a = the_artifact(&out);
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(0), Some(requests)));
    assert_eq!(a["error_counts"]["http_401"].as_u64(), Some(requests), "{}", a["error_counts"]);
    let stats = server.stats();
    // Each request was sent twice at most: once, and once more after a refresh.
    let rejected = stats.requests_rejected;
    assert!(rejected > requests && rejected <= 2 * requests, "{rejected} refusals of {requests} requests");
    let counts = &a["credential_refreshes"];
    assert!(counts["after_401"].as_u64().unwrap() >= 1, "{counts}");
    assert_eq!(calls(dir.path()), 1 + counts["after_401"].as_u64().unwrap());
    no_token_written(&out, &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_gives_no_token_before_the_run_refuses_it_and_nothing_is_sent() {
    let server = MockServer::start(profile()).await.unwrap();
    // (script body, what the refusal says)
    let cases = [
        ("echo 'login required' >&2; exit 3", "exited with status 3"),
        ("exit 0", "printed nothing"),
        ("printf 'tok-7f3a-1\\ntok-7f3a-2\\n'", "more than one line"),
        ("printf 'tok-7f3a-\\001x\\n'", "characters an HTTP header cannot carry"),
        // Never answers (a login prompt waiting for input): stopped after 30 s.
        ("exec sleep 45", "printed no token within 30 s"),
    ];
    for (body, said) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = dir.path().join("token.sh");
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        make_executable(&script);
        let file = scenario(dir.path(), &script, "", "requests = 4", 10);
        let result = run_against(&file, &server, &out).await;
        let err = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{body}: {err}");
        assert!(
            err.contains("target.api_key_command") && err.contains("token.sh") && err.contains(said),
            "{body}: {err}"
        );
        assert!(err.contains("fix:"), "{err}");
        if said.contains("status") {
            assert!(err.contains("login required"), "the first line of standard error is named: {err}");
        }
        no_token_written(&out, &result);
    }
    let stats = server.stats();
    assert_eq!(stats.requests_received, 0, "nothing was sent");
    assert!(stats.bearer_tokens.is_empty());

    // A program that does not exist, and both key sources at once.
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(dir.path(), &dir.path().join("no-such-program"), "", "requests = 4", 10);
    let result = run_against(&file, &server, &dir.path().join("out")).await;
    assert_eq!(result.status.code(), Some(2), "{}", text(&result.stderr));
    assert!(text(&result.stderr).contains("could not be started"), "{}", text(&result.stderr));
    let file = scenario(dir.path(), Path::new("/bin/true"), "api_key_env = \"HOME\"", "requests = 4", 10);
    let result = run_against(&file, &server, &dir.path().join("out")).await;
    assert_eq!(result.status.code(), Some(2));
    assert!(text(&result.stderr).contains("target.api_key_env"), "{}", text(&result.stderr));
    let file = scenario(dir.path(), Path::new("/bin/true"), "api_key_refresh = \"1s\"", "requests = 4", 10);
    let result = run_against(&file, &server, &dir.path().join("out")).await;
    assert_eq!(result.status.code(), Some(2));
    assert!(text(&result.stderr).contains("target.api_key_refresh"), "{}", text(&result.stderr));
    assert_eq!(server.stats().requests_received, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_failing_during_the_run_is_a_warning_with_its_time_and_the_old_token_stays() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = token_script(dir.path());
    std::fs::write(dir.path().join("fail-from"), "2").unwrap();
    let file = scenario(dir.path(), &script, "api_key_refresh = \"10s\"", "duration = \"15s\"", 4);
    let server = MockServer::start(profile()).await.unwrap();
    let result = run_against(&file, &server, &out).await;
    let err = text(&result.stderr);
    assert!(result.status.success(), "{err}");
    let a = the_artifact(&out);
    assert_eq!(calls(dir.path()), 2, "before the run, and the refresh at 10 s");
    let warning =
        err.lines().find(|l| l.contains("target.api_key_command (token.sh) failed at")).unwrap_or_else(|| {
            panic!("no warning on the console: {err}");
        });
    // The time it happened, as the artifact writes instants (RFC 3339, UTC).
    assert!(warning.contains("failed at 20") && warning.contains('T'), "{warning}");
    assert!(warning.contains("status 3") && warning.contains("previous token stays in use"), "{warning}");
    assert_eq!(err.matches("target.api_key_command (token.sh) failed").count(), 1, "printed once: {err}");
    let warnings = a["warnings"].as_array().unwrap();
    let kept: Vec<&Value> = warnings.iter().filter(|w| w["code"] == "credential_refresh_failed").collect();
    assert_eq!(kept.len(), 1, "{warnings:?}");
    assert!(kept[0]["message"].as_str().unwrap().contains("failed at 20"));
    let counts = &a["credential_refreshes"];
    assert_eq!(
        (counts["scheduled"].as_u64(), counts["after_401"].as_u64(), counts["failed"].as_u64()),
        (Some(0), Some(0), Some(1)),
        "{counts}"
    );
    assert_eq!(a["failed"].as_u64(), Some(0), "{}", a["failures"]);
    assert_eq!(tokens_seen(&server), ["tok-7f3a-1"], "the first token stayed in use");
    no_token_written(&out, &result);
    // The records file's own copy of the scenario names the program only.
    let records = std::fs::read_to_string(out.join("records.ndjson")).unwrap();
    let run_line: Value = serde_json::from_str(records.lines().next().unwrap()).unwrap();
    assert!(run_line.to_string().contains("token.sh"));
}
