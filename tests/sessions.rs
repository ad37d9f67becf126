//! Multi-turn conversations through the real binary against the simulator: later turns find the
//! previous prompt and answer in the server's prefix cache, turn 1 is the slow one, `sessions =
//! N` holds N conversations through their think time, `in_flight` caps requests, every
//! cross-session contamination is caught, affinity keeps a session on one backend behind a
//! router, and dataset conversations send every turn.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anvil_load::mock::{FaultProfile, MockServer, Profile};
use anvil_load::plan::scenario::Slo;
use anvil_load::request::record::{FailureRecord, RequestTiming};
use anvil_load::results::aggregate::conversations::summarise;
use anvil_load::results::aggregate::summary::SessionSummary;
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

async fn run_scenario(dir: &Path, file: &Path, args: &[&str]) -> Value {
    let out = dir.join(format!("out-{}", file.file_stem().unwrap().to_string_lossy()));
    let mut cmd = anvil();
    cmd.arg(file).arg("--out").arg(&out).args(args);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let found = artifacts(&out);
    assert_eq!(found.len(), 1);
    check_artifact(&found[0])
}

fn records(a: &Value) -> Vec<RequestTiming> {
    serde_json::from_value(a["request_timings"].clone()).expect("records read back")
}

fn failures(a: &Value) -> Vec<FailureRecord> {
    serde_json::from_value(a["failures"].clone()).expect("failures read back")
}

fn summary(a: &Value) -> SessionSummary {
    summarise(&records(a), &failures(a), &Slo::default()).expect("a conversation summary")
}

/// Turns of each session, in order.
fn by_session(rs: &[RequestTiming]) -> BTreeMap<String, Vec<&RequestTiming>> {
    let mut out: BTreeMap<String, Vec<&RequestTiming>> = BTreeMap::new();
    for r in rs {
        out.entry(r.replay.session.clone().unwrap()).or_default().push(r);
    }
    for turns in out.values_mut() {
        turns.sort_by_key(|r| r.replay.turn);
    }
    out
}

/// The most sessions open at once: from a session's first request's start to its last's end.
fn sessions_open(rs: &[RequestTiming]) -> usize {
    let mut events: Vec<(f64, i32)> = Vec::new();
    for turns in by_session(rs).values() {
        let start = turns.iter().map(|r| r.start_offset_ms).fold(f64::MAX, f64::min);
        let end = turns.iter().map(|r| r.start_offset_ms + r.e2e_ms).fold(0.0, f64::max);
        events.push((start, 1));
        events.push((end, -1));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0, 0);
    for (_, d) in events {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

const TARGET: &str = "[target]\nmodel = \"m\"\nsimulator = \"realistic\"\n[serve]\nthinking_mode = \"disabled\"\n";

fn conversations(load: &str, extra: &str) -> String {
    format!(
        "{TARGET}[run]\nseed = 5\n[load]\n{load}\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 32\n[workload.sessions]\nconversations = 8\nturns = 3\nfirst_tokens = 3000\nuser_tokens = 200\noutput_tokens = 24\nthink_time = \"150ms\"\nsystem_prompt_tokens = 512\nsystem_prompt_groups = 2\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_turns_hit_the_previous_turn_and_sessions_are_held() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "held.toml", &conversations("sessions = 4", ""));
    let a = run_scenario(dir.path(), &file, &[]).await;
    let rs = records(&a);
    assert_eq!(rs.len(), 24, "8 conversations of 3 turns");
    assert_eq!(a["simulator"]["requests_completed"].as_u64().unwrap(), 24, "the server saw each turn once");
    assert!(rs.iter().all(|r| r.request_canary.as_ref().is_some_and(|c| c.passed)));
    // Every later turn finds the previous prompt and its answer: the server's cached tokens are
    // the previous turn's prompt plus output, within one cache block (16 tokens).
    for turns in by_session(&rs).values() {
        assert_eq!(turns.iter().map(|r| r.replay.turn.unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
        for pair in turns.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            let reuse = prev.prompt_tokens.unwrap() + prev.output_tokens;
            let cached = next.cached_tokens.unwrap();
            assert!(
                cached.abs_diff(reuse) <= 16,
                "turn {}: cached {cached}, previous prompt + answer {reuse}",
                next.replay.turn.unwrap()
            );
            assert_eq!(
                u64::from(next.replay.expected_cached_tokens.unwrap()),
                reuse,
                "the client expects exactly that"
            );
            assert!(next.replay.history_tokens.unwrap() > prev.replay.history_tokens.unwrap());
        }
    }
    let s = summary(&a);
    let ttft =
        |turn: usize| s.by_turn[turn - 1].ttft_ms.as_ref().map(|t| t.stat(anvil_load::contract::Stat::P50)).unwrap();
    // Turn 1 prefills about 3,000 tokens (some 400 ms on the realistic profile); later turns only
    // their new message.
    assert!(ttft(1) > 2.0 * ttft(2) && ttft(1) > 2.0 * ttft(3), "{:?}", s.by_turn);
    for turn in [2, 3] {
        let ratio = s.by_turn[turn - 1].cache.ratio.unwrap();
        assert!((1.0..1.01).contains(&ratio), "turn {turn}: cache effectiveness {ratio}");
    }
    assert_eq!((s.totals.sessions, s.totals.without_failures), (8, 8));
    // The artifact's block is this summary, over the records as the artifact lists them.
    let block = &a["conversations"];
    assert_eq!(block["totals"]["sessions"], 8);
    assert_eq!(block["by_turn"].as_array().unwrap().len(), 3);
    assert_eq!(block["by_turn"][0]["ttft_ms"]["p50"].as_f64(), Some(ttft(1)));
    // sessions = 4: four conversations open at once, held through their think time, and never
    // more than four requests in flight.
    assert_eq!(sessions_open(&rs), 4);
    assert!(a["peak_in_flight"].as_u64().unwrap() <= 4);
    assert_eq!(a["concurrency"], 4);
    // Each turn waits the think time after the previous answer (150 ms), never start-to-start.
    for turns in by_session(&rs).values() {
        for pair in turns.windows(2) {
            let gap = pair[1].start_offset_ms - (pair[0].start_offset_ms + pair[0].e2e_ms);
            assert!(gap >= 150.0, "think time {gap} ms");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_caps_requests_not_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "capped.toml", &conversations("sessions = 4\nin_flight = 2", ""));
    let a = run_scenario(dir.path(), &file, &[]).await;
    let rs = records(&a);
    assert_eq!(rs.len(), 24);
    assert!(a["peak_in_flight"].as_u64().unwrap() <= 2, "peak {}", a["peak_in_flight"]);
    assert_eq!(sessions_open(&rs), 4, "still four conversations held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_conversation_arrivals_keep_their_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let load = "mode = \"open\"\nrate = 10\narrival = \"constant\"\nmax_dispatch_lag = \"100ms\"\nmax_client_lateness = \"100ms\"";
    let file = write(dir.path(), "open.toml", &conversations(load, ""));
    let a = run_scenario(dir.path(), &file, &[]).await;
    let rs = records(&a);
    assert_eq!(rs.len(), 24);
    assert_eq!((a["planned_arrivals"].as_u64(), a["undispatched_arrivals"].as_u64()), (Some(24), Some(0)));
    for r in &rs {
        let intended = r.intended_offset_ms.expect("every turn has an intended time");
        if r.replay.turn == Some(1) {
            // Conversation c arrives at c × 100 ms.
            assert!((intended / 100.0 - (intended / 100.0).round()).abs() < 1e-6, "{intended}");
        }
        assert!(r.schedule_lag_ms.unwrap() >= 0.0);
    }
    assert_eq!(a["validity"]["valid"], true, "{}", a["validity"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_session_contamination_is_caught_on_every_affected_turn() {
    let profile = Profile {
        faults: FaultProfile {
            contamination_swapped: 0.25,
            cross_session: true,
            fault_seed: 11,
            ..FaultProfile::default()
        },
        ..Profile::named("fast").unwrap()
    };
    let server = MockServer::start(profile).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // No calibration probes: every request the server sees is a turn.
    let body = conversations("sessions = 4", "")
        .replace("conversations = 8", "conversations = 16")
        .replace("max_tokens = 32\n", "max_tokens = 32\ntokenizer = \"estimate\"\n");
    let file = write(dir.path(), "contaminated.toml", &body);
    let a = run_scenario(dir.path(), &file, &["--base-url", &server.base_url()]).await;
    let rs = records(&a);
    assert_eq!(rs.len(), 48);
    assert_eq!(server.stats().requests_received, 48);
    let injected = server.stats().contaminated_responses;
    assert!(injected >= 5, "the fault draw hit {injected} turns");
    let flagged: Vec<&RequestTiming> = rs
        .iter()
        .filter(|r| r.request_canary.as_ref().and_then(|c| c.cross_session_marker_count).unwrap_or(0) > 0)
        .collect();
    assert_eq!(flagged.len() as u64, injected, "every contaminated turn is flagged, and nothing else");
    for r in &flagged {
        let c = r.request_canary.as_ref().unwrap();
        assert!(!c.passed && c.foreign_marker_count >= 1);
        assert!(!r.performance_eligible);
    }
    let failed_canaries = rs.iter().filter(|r| r.request_canary.as_ref().is_some_and(|c| !c.passed)).count();
    assert_eq!(failed_canaries as u64, injected);
    assert_eq!(summary(&a).cross_session_contaminated, injected);
    // The artifact carries the same summary, and says it plainly.
    assert_eq!(a["conversations"]["cross_session_contaminated"].as_u64(), Some(injected));
    let codes: Vec<&str> = a["warnings"].as_array().unwrap().iter().filter_map(|w| w["code"].as_str()).collect();
    assert!(codes.contains(&"cross_session_contamination"), "{codes:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_keeps_a_session_on_one_backend() {
    let server = MockServer::start(Profile { backends: 3, ..Profile::named("fast").unwrap() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.base_url();
    let runs = [
        ("sticky.toml", "backend_header = \"x-anvil-backend\"\n"),
        ("none.toml", "backend_header = \"x-anvil-backend\"\naffinity_headers = []\n"),
        (
            "echo.toml",
            "backend_header = \"x-anvil-backend\"\naffinity_headers = []\necho_header = \"x-anvil-backend\"\n",
        ),
    ];
    let mut on_one = Vec::new();
    for (name, extra) in runs {
        let file = write(dir.path(), name, &conversations("sessions = 4", extra));
        let a = run_scenario(dir.path(), &file, &["--base-url", &url]).await;
        let rs = records(&a);
        assert!(rs.iter().all(|r| r.replay.backend.as_deref().is_some_and(|b| b.starts_with("backend-"))), "{name}");
        let s = summary(&a);
        assert_eq!(s.backends.iter().map(|b| b.completed).sum::<u64>(), 24);
        on_one.push(s.sessions_on_one_backend.unwrap());
    }
    assert_eq!(on_one[0], (8, 8), "X-Session-ID routes every turn of a session to one backend");
    assert!(on_one[1].0 < 8, "without affinity the router spreads a session's turns: {:?}", on_one[1]);
    assert_eq!(on_one[2], (8, 8), "the echoed backend header keeps it on one");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_conversations_send_every_turn_with_recorded_answers() {
    let dir = tempfile::tempdir().unwrap();
    let words = |n: usize, w: &str| vec![w; n].join(" ");
    let data = serde_json::json!([
        {"conversations": [
            {"from": "system", "value": "You answer questions about rivers."},
            {"from": "human", "value": words(400, "river")},
            {"from": "gpt", "value": words(30, "flows")},
            {"from": "human", "value": words(80, "delta")},
            {"from": "gpt", "value": words(20, "silt")},
            {"from": "human", "value": words(60, "basin")},
            {"from": "gpt", "value": words(10, "rain")}]},
        {"conversations": [
            {"from": "human", "value": words(500, "mountain")},
            {"from": "gpt", "value": words(40, "snow")},
            {"from": "human", "value": words(90, "glacier")},
            {"from": "gpt", "value": words(25, "ice")}]}
    ]);
    write(dir.path(), "talks.json", &data.to_string());
    let body = format!(
        "{TARGET}[run]\nseed = 5\n[load]\nsessions = 2\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 64\n[workload.sessions]\nconversations = 4\ndataset = \"talks.json\"\nhistory = \"recorded\"\n"
    );
    let file = write(dir.path(), "dataset.toml", &body);
    let a = run_scenario(dir.path(), &file, &[]).await;
    let rs = records(&a);
    let sessions = by_session(&rs);
    assert_eq!(sessions.len(), 4);
    let mut turn_counts: Vec<usize> = sessions.values().map(Vec::len).collect();
    turn_counts.sort_unstable();
    assert_eq!(turn_counts, vec![2, 2, 3, 3], "every user turn of both conversations, twice each");
    for turns in sessions.values() {
        // The recorded answer's length is the turn's output ("flows" × 30 is 30 tokens).
        assert!(turns.iter().all(|r| r.replay.planned_output_tokens == Some(r.output_tokens as u32)));
        for pair in turns.windows(2) {
            // The history holds the recorded answer, not the model's: the cache holds the
            // previous prompt only.
            let prev = pair[0].prompt_tokens.unwrap();
            assert_eq!(u64::from(pair[1].replay.expected_cached_tokens.unwrap()), prev);
            assert!(pair[1].cached_tokens.unwrap().abs_diff(prev) <= 16, "{:?}", pair[1].cached_tokens);
        }
    }
}

#[test]
fn bad_conversation_settings_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (conversations("concurrency = 4", ""), "load.concurrency"),
        (conversations("", ""), "load.sessions"),
        (conversations("sessions = 4", "").replace("turns = 3", "turns = { zipf = 2 }"), "workload.sessions.turns"),
        (conversations("sessions = 4", "").replace("first_tokens = 3000", "first_tokens = 40000"), "first_tokens"),
        (conversations("sessions = 4", "history = \"remembered\"\n"), "workload.sessions.history"),
        (
            conversations("sessions = 4", "").replace("system_prompt_tokens = 512", "system_prompt_tokens = 2990"),
            "system_prompt_tokens",
        ),
        (conversations("mode = \"open\"\nrate = 2\nmax_in_flight = 2\noverload = \"drop\"", ""), "load.overload"),
    ];
    for (body, key) in cases {
        let file = write(dir.path(), "bad.toml", &body);
        let out = anvil().arg("validate").arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{key}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains(key), "{key}: {}", text(&out.stderr));
    }
    // Conversation keys outside a conversation workload are refused too.
    let file = write(
        dir.path(),
        "plain.toml",
        "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[load]\nin_flight = 2\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n",
    );
    let out = anvil().arg("validate").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("load.in_flight"));
}
