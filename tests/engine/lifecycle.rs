//! A run's edges against the engine: SIGINT in the middle of a run (the artifact marked
//! interrupted, every request the engine received accounted for, the engine's slots freed by
//! the cut streams), and the canary check with a model too small to follow the instruction
//! (one plain warning, nothing eligible, the documented way out named).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{int, records, run, scenario, spawn, warning, warnings};
use crate::server::{Kind, LlamaServer};
use crate::tap::Tap;

#[test]
fn sigint_mid_run_writes_an_interrupted_artifact_accounting_for_every_request() {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    let tap = Tap::start(server.addr);
    // Long answers and a grace shorter than one: the requests in flight at the signal are cut.
    let text = scenario(
        "chat",
        "",
        "[run]\nrequests = 40\nseed = 41\ngrace = \"200ms\"\n\n[load]\nconcurrency = 2\n\n[workload]\ncontext_tokens = 128\n\
         max_context_tokens = 2048\nmax_tokens = 200\ncanaries = false\ntokenizer = \"estimate\"\n\n[output]\nignore_eos = true\n",
    );
    let running = spawn(&text, &tap.base_url(), &[]);
    // A few requests done, two in flight: then the signal.
    let deadline = Instant::now() + Duration::from_secs(600);
    while tap.streamed_posts() < 4 {
        assert!(Instant::now() < deadline, "the run sent fewer than 4 requests in 600 s:\n{}", running.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    running.signal(libc::SIGINT);
    let finished = running.wait();
    assert_eq!(finished.code, Some(1), "an interrupted run exits 1\n{}", finished.stderr);
    let a = finished.one();
    assert_eq!(a["interrupted"], true);
    assert!(warnings(&a).contains(&"interrupted".to_string()), "{:?}", warnings(&a));
    let records = records(&a);
    let failures: Vec<Value> = a["failures"].as_array().expect("failures").clone();
    let attempted = int(&a, "requests");
    assert_eq!(attempted, records.len() as u64 + failures.len() as u64);
    assert!(attempted < 40, "the signal came before the end");
    assert!(failures.iter().all(|f| f["error_kind"] == "interrupted"), "{failures:?}");
    assert!(!failures.is_empty(), "no request was cut: the signal came between requests");
    // Every streamed request the engine received is one attempted request; sends on
    // connections the engine had already closed were repeated and are counted as such.
    let streamed = tap.streamed();
    let stale: u64 = records.iter().chain(&failures).map(|r| r["stale_connection_retries"].as_u64().unwrap_or(0)).sum();
    assert_eq!(streamed.len() as u64, attempted + stale, "streamed sends against attempted + stale");
    // Every completed record is a complete answer of the engine's.
    for r in &records {
        assert_eq!(int(r, "output_tokens"), 200, "{r}");
    }
    let completed = streamed.iter().filter(|e| e.last_with("usage").is_some()).count();
    assert_eq!(completed, records.len(), "answers with usage against completed records");
    // The cut streams were cancelled on the engine: its slots come free, nothing is deferred.
    server.wait_idle();
    let m = server.metrics();
    assert_eq!((m.get("requests_processing"), m.get("requests_deferred")), (0.0, 0.0));
}

#[test]
fn a_model_too_small_for_canaries_gets_one_plain_warning_and_no_eligible_request() {
    let server = LlamaServer::start(Kind::Generate { slots: 1 });
    let tap = Tap::start(server.addr);
    // The same prompts every run and greedy sampling: the engine gives the same answers, so
    // what this model does with these six instructions is pinned, not drawn anew. (With unique
    // prompts it follows one now and then: a run of six once had one marker in place.)
    let text = scenario(
        "chat",
        "",
        "[run]\nrequests = 6\nseed = 42\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 160\n\
         max_context_tokens = 2048\nmax_tokens = 24\ntokenizer = \"estimate\"\nreproducible = true\n\n\
         [sampling]\ntemperature = 0.0\n",
    );
    let finished = run(&text, &tap.base_url(), &["--strict"]);
    // With --strict a level with nothing eligible exits 3, and its artifact is written.
    assert_eq!(finished.code, Some(3), "{}", finished.stderr);
    let a = finished.one();
    let records = records(&a);
    let streamed = tap.streamed();
    assert_eq!(streamed.len() - streamed.iter().filter(|e| e.status.is_none()).count(), records.len());
    for (r, ex) in records.iter().zip(streamed.iter().filter(|e| e.status.is_some())) {
        // Each prompt asked for its own marker, and the engine's answer did not begin with it.
        let marker = r["request_canary"]["marker"].as_str().expect("a marker");
        assert!(ex.body.to_string().contains(marker), "the request asked for {marker}");
        let answer: String = ex
            .payloads()
            .iter()
            .filter_map(|p| p["choices"].get(0)?["delta"]["content"].as_str().map(str::to_string))
            .collect();
        assert!(!answer.trim_start().starts_with(marker), "the engine's answer began with {marker}: {answer:?}");
        assert_eq!(r["request_canary"]["passed"], false, "the model followed the instruction: {r}");
        assert_eq!(
            (r["performance_eligible"].as_bool(), r["exclusion_reason"].as_str()),
            (Some(false), Some("canary_failed"))
        );
        // Never counted as another request's marker: a small model's echo is no contamination.
        assert_eq!(r["request_canary"]["foreign_marker_count"], 0, "{r}");
        let reason = r["request_canary"]["failure_reason"].as_str().expect("a reason");
        assert!(
            ["marker_missing", "marker_not_at_start", "marker_truncated", "marker_garbled", "marker_repeated"]
                .contains(&reason),
            "{reason}: {r}"
        );
    }
    // One clear warning naming the way out, not one per request; and no contamination claimed.
    let codes = warnings(&a);
    assert_eq!(codes.iter().filter(|c| c.starts_with("canaries_")).count(), 1, "{codes:?}");
    let message = warning(&a, "canaries_all_failed").unwrap_or_else(|| panic!("{codes:?}"));
    assert!(message.contains("workload.canaries = false") && message.contains("no response held another"), "{message}");
    assert!(!codes.iter().any(|c| c.contains("contamination")), "{codes:?}");
    assert!(codes.contains(&"nothing_eligible".to_string()), "{codes:?}");
    assert_eq!(a["performance_eligible"], false);
    assert_eq!(a["metrics"]["ttft_samples"], 0);
    // The way out works: the same run without canaries has every request eligible.
    let text = text.replace("reproducible = true", "reproducible = true\ncanaries = false");
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let eligible = crate::harness::records(&a).iter().filter(|r| r["performance_eligible"] == true).count();
    assert_eq!(eligible, 6, "{:?}", warnings(&a));
}
