//! Input that was accepted and then hung the run or was read as something else, through the real
//! binary: trace times centuries ahead, URLs holding characters the HTTP client drops or
//! rewrites, a negative think time, a table written as a list, no arguments at all, and the
//! simulator's per-level counters (a peak is the level's own, not a difference).
//!
//! Every refusal is checked to exit 2 with nothing sent: each run points at a server that
//! counts its connections.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::hostile::{Hostile, Reply, Step, models_answer, sse_head, stream_body};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A TOML basic string holding `s`, every character outside printable ASCII escaped.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// A server that answers everything well: if a run got as far as sending, it would proceed.
async fn server() -> Hostile {
    Hostile::start(|r| {
        if r.is_generation() {
            Reply::close(vec![Step::Send(sse_head()), Step::Send(stream_body(4))])
        } else {
            Reply::close(vec![Step::Send(models_answer(&["m"], false))])
        }
    })
    .await
}

/// Refused before anything was sent: exit 2, no connection, and stderr names `key`.
fn assert_refused(out: &std::process::Output, server: &Hostile, key: &str, what: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: expected exit 2\n{stderr}");
    assert_eq!(server.connections(), 0, "{what}: nothing may be sent\n{stderr}");
    assert!(stderr.contains(key), "{what}: the message names {key}\n{stderr}");
    assert!(stderr.contains("fix:"), "{what}: the message says how to fix it\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}\n{stderr}");
    stderr
}

// ---- Traces: every time bounded before it becomes a wait ----

const TRACE_SCENARIO: &str = "[target]\nmodel = \"m\"\n[run]\nseed = 1\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 64\ntokenizer = \"estimate\"\n";

fn trace_scenario(dir: &Path, format: &str, rows: &str, extra: &str) -> PathBuf {
    let file = write(dir, "trace.data", rows);
    write(
        dir,
        "trace.toml",
        &format!(
            "{TRACE_SCENARIO}[workload.trace]\nfile = {}\nformat = \"{format}\"\n{extra}",
            toml_str(&file.display().to_string())
        ),
    )
}

/// Two rows of `format`, the second at `time` as the file writes it.
fn two_rows(format: &str, first: &str, time: &str) -> String {
    match format {
        "mooncake" => format!(
            "{{\"timestamp\": {first}, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [1]}}\n{{\"timestamp\": {time}, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [1]}}\n"
        ),
        "bailian" => format!(
            "{{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": {first}, \"input_length\": 16, \"output_length\": 4, \"turn\": 1, \"hash_ids\": [1]}}\n{{\"chat_id\": 2, \"parent_chat_id\": -1, \"timestamp\": {time}, \"input_length\": 16, \"output_length\": 4, \"turn\": 1, \"hash_ids\": [2]}}\n"
        ),
        "jsonl" => format!(
            "{{\"offset_ms\": {first}, \"input_tokens\": 100, \"output_tokens\": 4}}\n{{\"offset_ms\": {time}, \"input_tokens\": 100, \"output_tokens\": 4}}\n"
        ),
        "burstgpt" => format!(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n{first},ChatGPT,100,4,104,Conversation log\n{time},ChatGPT,100,4,104,Conversation log\n"
        ),
        "azure" => format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{first},100,4\n{time},100,4\n"),
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_rows_centuries_ahead_are_refused_with_the_value_as_written() {
    // (format, first row's time, second row's time, what the message must quote)
    let cases = [
        ("mooncake", "0", "1e300", "timestamp 1e300"),
        ("mooncake", "0", "1e18", "timestamp 1e18"),
        ("mooncake", "0", "18446744073709551615", "timestamp 18446744073709551615"),
        ("mooncake", "0", "1e13", "timestamp 1e13"),
        // 31 days: on the trace's clock, but later than the longest run.
        ("mooncake", "0", "2678400000", "timestamp 2678400000"),
        ("mooncake", "1e300", "1e300", "timestamp 1e300"),
        ("bailian", "0", "1e300", "timestamp 1e300"),
        ("bailian", "0", "9999999999", "timestamp 9999999999"),
        ("jsonl", "0", "1e300", "offset_ms 1e300"),
        ("jsonl", "0", "253402300799000", "offset_ms 253402300799000"),
        ("burstgpt", "0", "1e300", "Timestamp 1e300"),
        ("burstgpt", "0", "1e18", "Timestamp 1e18"),
        ("burstgpt", "0", "2678400", "Timestamp 2678400"),
        ("burstgpt", "0", "inf", "Timestamp \"inf\""),
        ("azure", "2023-11-16 18:15:46.0000000", "9999-12-31 23:59:59", "TIMESTAMP \"9999-12-31 23:59:59\""),
        ("azure", "2023-11-16 18:15:46.0000000", "2023-12-18 00:00:00", "TIMESTAMP \"2023-12-18 00:00:00\""),
        ("azure", "2023-11-16 18:15:46.0000000", "9223372036854775807-01-01 00:00:00", "9223372036854775807-01-01"),
    ];
    for (format, first, time, quoted) in cases {
        let what = format!("{format} row at {time}");
        let dir = tempfile::tempdir().unwrap();
        let file = trace_scenario(dir.path(), format, &two_rows(format, first, time), "");
        let server = server().await;
        let mut validate = anvil();
        validate.arg("validate").arg(&file).arg("--base-url").arg(server.base_url());
        let out = run(validate).await;
        let stderr = assert_refused(&out, &server, "workload.trace.file", &what);
        assert!(stderr.contains(quoted), "{what}: the time as written ({quoted})\n{stderr}");
        let row = if first == time { "row 1" } else { "row 2" };
        assert!(stderr.contains(row), "{what}: names {row}\n{stderr}");
        // Never a saturated number: u64::MAX nanoseconds in seconds, milliseconds or as such.
        for saturated in ["18446744073.7", "18446744073709.5", "18446744073709551615 ns"] {
            assert!(!stderr.contains(saturated), "{what}: a saturated value\n{stderr}");
        }
        // The run itself refuses it the same way, before its first request (bounded: it would
        // otherwise wait for the row).
        let mut replay = anvil();
        replay.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
        let out = run(replay).await;
        assert_refused(&out, &server, "workload.trace.file", &what);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_trace_clock_replays_when_the_replay_itself_fits() {
    // A trace spanning 40 days: its last day, replayed alone, is 200 ms of requests.
    let day_ms: u64 = 86_400_000;
    let rows: String = [0, 40 * day_ms, 40 * day_ms + 100, 40 * day_ms + 200]
        .iter()
        .map(|t| format!("{{\"timestamp\": {t}, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [1]}}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = trace_scenario(dir.path(), "mooncake", &rows, "window = [\"40d\", \"41d\"]\n");
    let std::process::Output { status, stdout, stderr } = run({
        let mut c = anvil();
        c.arg("validate").arg(&file);
        c
    })
    .await;
    assert!(status.success(), "{}", text(&stderr));
    assert!(text(&stdout).contains("3 rows over 0.200 s"), "{}", text(&stdout));
    let mut replay = anvil();
    replay.arg(&file).arg("--simulator").arg("instant").arg("--out").arg(dir.path().join("out"));
    let out = run(replay).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = artifacts(&dir.path().join("out"));
    assert_eq!(found.len(), 1);
    let a = check_artifact(&found[0]);
    assert_eq!(a["requests"], 3, "the window's rows, sent");
    // Halving a 31-day trace brings it within the longest run.
    let dir = tempfile::tempdir().unwrap();
    let file = trace_scenario(dir.path(), "jsonl", &two_rows("jsonl", "0", "2678400000"), "time_scale = 0.5\n");
    let out = run({
        let mut c = anvil();
        c.arg("validate").arg(&file);
        c
    })
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

// ---- URLs: what the artifact names is what is measured ----

const URL_SCENARIO: &str = "[run]\nrequests = 1\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n";

/// Characters the HTTP client drops or rewrites, or a reader cannot see, with their escaped form.
const HIDDEN: &[(&str, &str)] = &[
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\t", "\\t"),
    ("\u{7f}", "\\u{007f}"),
    ("\u{1b}[31m", "\\u{001b}"),
    ("\u{85}", "\\u{0085}"),
    ("\u{2028}", "\\u{2028}"),
    ("\u{2029}", "\\u{2029}"),
    ("\u{202e}", "\\u{202e}"),
    ("\u{2066}", "\\u{2066}"),
    ("\u{200b}", "\\u{200b}"),
    ("\u{feff}", "\\u{feff}"),
    ("\u{a0}", "\\u{00a0}"),
];

fn assert_escaped(stderr: &str, hidden: &str, escaped: &str, what: &str) {
    assert!(stderr.contains(escaped), "{what}: shown escaped as {escaped}\n{stderr}");
    let raw = hidden.trim_end_matches("[31m");
    if raw != "\n" {
        assert!(!stderr.contains(raw), "{what}: the raw character reached the terminal\n{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_with_hidden_characters_are_refused_before_anything_is_sent() {
    for &(hidden, escaped) in HIDDEN {
        for origin in ["file", "--base-url", "ANVIL_BASE_URL", "metrics_url"] {
            let what = format!("{escaped} via {origin}");
            let server = server().await;
            let bad = format!("{}{hidden}x", server.base_url());
            let dir = tempfile::tempdir().unwrap();
            let target = match origin {
                "file" => format!("[target]\nmodel = \"m\"\nbase_url = {}\n", toml_str(&bad)),
                "metrics_url" => format!(
                    "[target]\nmodel = \"m\"\nbase_url = {}\nmetrics_url = {}\n",
                    toml_str(&server.base_url()),
                    toml_str(&format!("http://{}/metr{hidden}ics", server.addr()))
                ),
                _ => "[target]\nmodel = \"m\"\n".to_string(),
            };
            let file = write(dir.path(), "s.toml", &format!("{target}{URL_SCENARIO}"));
            let mut cmd = anvil();
            cmd.arg(&file).arg("--out").arg(dir.path().join("out"));
            match origin {
                "--base-url" => {
                    cmd.arg("--base-url").arg(&bad);
                }
                "ANVIL_BASE_URL" => {
                    cmd.env("ANVIL_BASE_URL", &bad);
                }
                _ => {}
            }
            let key = if origin == "metrics_url" { "target.metrics_url" } else { "target.base_url" };
            let stderr = assert_refused(&run(cmd).await, &server, key, &what);
            assert_escaped(&stderr, hidden, escaped, &what);
            if origin.starts_with("--") || origin.starts_with("ANVIL") {
                assert!(stderr.contains(origin), "{what}: the message names where the value came from\n{stderr}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_urls_the_client_would_rewrite_are_refused() {
    // A backslash is read as '/', dot segments are resolved, a fragment swallows the endpoint's
    // path: each would measure another address than the one written.
    for suffix in ["\\x", "/../admin", "/./x", "/%2e%2E/x", "#x"] {
        let server = server().await;
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "s.toml", &format!("[target]\nmodel = \"m\"\n{URL_SCENARIO}"));
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out"));
        cmd.arg("--base-url").arg(format!("http://user:pass@{}/v1{suffix}", server.addr()));
        let stderr = assert_refused(&run(cmd).await, &server, "target.base_url", suffix);
        assert!(!stderr.contains("pass"), "{suffix}: the URL's credentials stay out of the message\n{stderr}");
    }
    // The plain URL of the same server is accepted and measured (the control).
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", &format!("[target]\nmodel = \"m\"\n{URL_SCENARIO}"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(server.streamed() >= 1);
    check_artifact(&artifacts(&dir.path().join("out"))[0]);
}

/// A base URL with a query (Azure's `?api-version=…`): every request goes to the endpoint's path
/// with the query after it, not to the base URL's path with the endpoint glued onto the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_query_follows_the_endpoint_path() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let server = {
        let seen = seen.clone();
        Hostile::start(move |r| {
            seen.lock().unwrap().push(format!("{} {}", r.method, r.target));
            if r.is_generation() {
                Reply::close(vec![Step::Send(sse_head()), Step::Send(stream_body(4))])
            } else {
                Reply::close(vec![Step::Send(models_answer(&["m"], false))])
            }
        })
        .await
    };
    for base in [
        format!("http://{}/v1?api-version=2024-06-01", server.addr()),
        format!("http://{}?api-version=2024-06-01", server.addr()),
    ] {
        seen.lock().unwrap().clear();
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "s.toml", &format!("[target]\nmodel = \"m\"\n{URL_SCENARIO}"));
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(&base);
        let out = run(cmd).await;
        assert!(out.status.success(), "{base}: {}", text(&out.stderr));
        let seen = seen.lock().unwrap().clone();
        assert!(!seen.is_empty());
        for line in &seen {
            let (method, target) = line.split_once(' ').unwrap();
            let expected = if method == "GET" {
                "/v1/models?api-version=2024-06-01"
            } else {
                "/v1/chat/completions?api-version=2024-06-01"
            };
            assert_eq!(target, expected, "{base}: every request goes to the endpoint's path, then the query: {seen:?}");
        }
        let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
        assert_eq!(
            a["base_url"].as_str().map(|u| u.split_once('?').map(|(root, _)| root.to_string())),
            Some(Some(format!("http://{}/v1", server.addr()))),
            "{}",
            a["base_url"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_addresses_with_hidden_characters_are_refused() {
    for &(hidden, escaped) in HIDDEN {
        let server = server().await;
        let dir = tempfile::tempdir().unwrap();
        // Two shards need two requests in flight: the scenario is otherwise valid for them.
        let file =
            write(dir.path(), "s.toml", &format!("[target]\nmodel = \"m\"\n[load]\nconcurrency = 2\n{URL_SCENARIO}"));
        let address = format!("127.0.0.1{hidden}:{}", server.addr().port());
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
        cmd.args(["--shard", "1/2", "--join-timeout", "2s", "--coordinator", &address]);
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{escaped}: expected exit 2\n{stderr}");
        assert_eq!(server.connections(), 0, "{escaped}: nothing may be sent\n{stderr}");
        assert!(stderr.contains("--coordinator") && stderr.contains("HOST:PORT"), "{escaped}\n{stderr}");
        assert_escaped(&stderr, hidden, escaped, escaped);
        // Shard 0's listening address is refused the same way, and shown escaped.
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out")).arg("--base-url").arg(server.base_url());
        cmd.args(["--shard", "0/2", "--join-timeout", "2s", "--coordinator-listen", &address]);
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{escaped}: expected exit 2\n{stderr}");
        assert_eq!(server.connections(), 0, "{escaped}: nothing may be sent\n{stderr}");
        assert_escaped(&stderr, hidden, escaped, escaped);
    }
}

// ---- Scenario messages that used to misread the input ----

const SESSIONS: &str = "[target]\nmodel = \"m\"\n[run]\nseed = 1\n[load]\nsessions = 1\n[workload]\nmax_context_tokens = 4096\nmax_tokens = 16\ntokenizer = \"estimate\"\n[workload.sessions]\nconversations = 1\nturns = 2\nfirst_tokens = 200\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_think_time_is_called_negative() {
    for (value, key) in [
        ("\"-1s\"", "workload.sessions.think_time"),
        ("-1", "workload.sessions.think_time"),
        ("{ uniform = [\"1s\", \"-1s\"] }", "workload.sessions.think_time.uniform"),
        ("{ normal = [\"1s\", \"0.2s\"], min = \"-1s\" }", "workload.sessions.think_time.min"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "s.toml", &format!("{SESSIONS}think_time = {value}\n"));
        let server = server().await;
        let out = run({
            let mut c = anvil();
            c.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
            c
        })
        .await;
        let stderr = assert_refused(&out, &server, &format!("`{key}`"), value);
        assert!(stderr.contains("negative") || stderr.contains("outside 0s to 24h"), "{value}\n{stderr}");
        assert!(!stderr.contains("not a distribution"), "{value}\n{stderr}");
    }
    // A valid think time is accepted (the control).
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", &format!("{SESSIONS}think_time = \"500ms\"\n"));
    let out = run({
        let mut c = anvil();
        c.arg("validate").arg(&file);
        c
    })
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_written_as_a_list_is_named_with_its_fix() {
    let rest = "[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 8\n";
    for (text_before, key, shape) in [
        ("[[target]]\nmodel = \"m\"\n[run]\nrequests = 1\n", "target", "[[target]]"),
        ("target = [1]\n[run]\nrequests = 1\n", "target", "is a list"),
        ("[target]\nmodel = \"m\"\n[[run]]\nrequests = 1\n", "run", "[[run]]"),
        ("[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[[client]]\nretries = 1\n", "client", "[[client]]"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "s.toml", &format!("{text_before}{rest}"));
        let server = server().await;
        let out = run({
            let mut c = anvil();
            c.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
            c
        })
        .await;
        let stderr = assert_refused(&out, &server, &format!("`{key}`"), text_before);
        assert!(stderr.contains(shape), "{text_before}\n{stderr}");
        assert!(stderr.contains(&format!("write [{key}]")), "{text_before}\n{stderr}");
        assert!(!stderr.contains("invalid type: map") && !stderr.contains("[0]"), "{text_before}\n{stderr}");
    }
}

#[test]
fn no_arguments_say_where_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_anvil-load")).env_remove("ANVIL_BASE_URL").output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for first_step in ["anvil-load SCENARIO", "anvil-load validate", "anvil-load mock", "--help", "--base-url"] {
        assert!(stderr.contains(first_step), "the usage shows {first_step}\n{stderr}");
    }
    assert!(!stderr.contains("required arguments were not provided"), "{stderr}");
    assert!(stderr.lines().count() <= 15, "short: {stderr}");
}

// ---- The simulator block: each level's own numbers ----

fn levels(dir: &Path) -> Vec<Value> {
    let mut found: Vec<Value> = artifacts(dir).iter().map(|p| check_artifact(p)).collect();
    found.sort_by_key(|a| a["concurrency"].as_u64());
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quieter_second_level_reports_its_own_peak() {
    // Requests of ~80 ms (16 tokens at 5 ms), eight at once, then two at once.
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "s.toml",
        "[target]\nmodel = \"m\"\nsimulator = \"fast\"\nsimulator_time_per_output_token_ms = 5\n[run]\nrequests = 24\nseed = 3\n[load]\nconcurrency = [8, 2]\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 16\ntokenizer = \"estimate\"\n",
    );
    let out = run({
        let mut c = anvil();
        c.arg(&file).arg("--out").arg(dir.path().join("out"));
        c
    })
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = levels(&dir.path().join("out"));
    assert_eq!(found.len(), 2);
    for a in &found {
        let (concurrency, peak) = (a["concurrency"].as_u64().unwrap(), a["simulator"]["peak_active_requests"].as_u64());
        let peak = peak.expect("the simulator block has the peak");
        // Timing-free bounds: the level ran requests, never more at once than its concurrency.
        assert!((1..=concurrency).contains(&peak), "level {concurrency}: peak {peak}\n{}", a["simulator"]);
        assert_eq!(a["simulator"]["requests_received"], 24, "level {concurrency}: its own count");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_are_counted_per_level() {
    // The faults profile: each level's faults_injected holds that level's faults only, so an
    // HTTP error injected is an HTTP error the level recorded (no retries).
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "s.toml",
        "[target]\nmodel = \"m\"\nsimulator = \"faults\"\n[run]\nrequests = 300\nseed = 5\n[load]\nconcurrency = [16, 8]\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 16\ntokenizer = \"estimate\"\n[client]\nfirst_byte_timeout = \"1s\"\nidle_timeout = \"1s\"\n",
    );
    let out = run({
        let mut c = anvil();
        c.arg(&file).arg("--out").arg(dir.path().join("out"));
        c
    })
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = levels(&dir.path().join("out"));
    assert_eq!(found.len(), 2);
    let mut total = 0;
    for a in &found {
        for kind in ["http_500", "http_503"] {
            let injected = a["simulator"]["faults_injected"][kind].as_u64().unwrap_or(0);
            let recorded = a["error_counts"][kind].as_u64().unwrap_or(0);
            assert_eq!(injected, recorded, "level {}: {kind}\n{}", a["concurrency"], a["simulator"]);
            total += injected;
        }
    }
    assert!(total > 0, "the profile injected HTTP errors");
}
