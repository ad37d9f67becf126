//! Per-token truth against the `spec` simulator profile (1–4 tokens per chunk at a known time
//! per token): per-chunk and per-token inter-token latency, tokens per chunk, the longest stall,
//! the corrected TPOT, and the two distortions, through the real binary and checked against the
//! simulator's own counts and ground truth. Bounded: 40 short requests per run.

mod common;

use std::path::Path;
use std::time::Duration;

use anvil_load::mock::{ChunkKind, MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

const REQUESTS: u64 = 40;

fn spec() -> Profile {
    Profile { record_ground_truth: true, ..Profile::named("spec").expect("the spec profile exists") }
}

/// One closed-loop level against `server` (its metrics scraped); returns the artifact and the
/// records file.
async fn measure(server: &MockServer, dir: &Path, continuous_usage: bool) -> (Value, std::path::PathBuf) {
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        format!(
            "[target]\nmodel = \"m\"\nmetrics = true\ncontinuous_usage_stats = {continuous_usage}\n[run]\nrequests = {REQUESTS}\n\
             [load]\nconcurrency = 8\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 4096\nmax_tokens = 200\n\
             tokenizer = \"estimate\"\ncanaries = true\n"
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let records = dir.join("r.ndjson");
    let mut cmd = anvil();
    cmd.arg(&scenario).arg("--base-url").arg(server.base_url()).arg("--out").arg(&out).arg("--records").arg(&records);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(&out);
    assert_eq!(paths.len(), 1, "{paths:?}");
    (check_artifact(&paths[0]), records)
}

fn f(m: &Value, key: &str) -> f64 {
    m[key].as_f64().unwrap_or_else(|| panic!("metrics.{key} is {}", m[key]))
}

fn codes(a: &Value) -> Vec<String> {
    a["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_profile_per_chunk_and_per_token_latency_with_per_chunk_usage() {
    let profile = spec();
    let planned_tpot_ms = profile.time_per_output_token.as_secs_f64() * 1000.0;
    let server = MockServer::start(profile).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, records) = measure(&server, dir.path(), true).await;
    let m = &a["metrics"];
    assert_eq!(a["completed"], REQUESTS);

    // The server's own counts: every token and chunk it streamed is in the records.
    let stats = server.stats();
    let rts = a["request_timings"].as_array().unwrap();
    let streamed: u64 = rts.iter().map(|r| r["streamed_tokens"].as_u64().expect("per-chunk counts")).sum();
    let chunks: u64 = rts.iter().map(|r| r["content_chunks"].as_u64().unwrap()).sum();
    assert_eq!((streamed, chunks), (stats.tokens_streamed, stats.chunks_streamed));
    // Per-chunk counts agree with ground truth: every first chunk carried what the server sent.
    let truth = server.ground_truth();
    assert_eq!(truth.len() as u64, REQUESTS);
    let mut first_truth: Vec<u64> = truth
        .iter()
        .map(|t| t.chunks.iter().find(|c| c.kind == ChunkKind::Content).map_or(0, |c| u64::from(c.tokens)))
        .collect();
    let mut first_seen: Vec<u64> = rts.iter().map(|r| r["first_chunk_tokens"].as_u64().unwrap()).collect();
    first_truth.sort_unstable();
    first_seen.sort_unstable();
    assert_eq!(first_seen, first_truth);

    // Several tokens per chunk, said so.
    let tpc = f(m, "tokens_per_chunk_mean");
    assert!((2.5..3.5).contains(&tpc), "tokens per chunk {tpc}");
    assert!(codes(&a).contains(&"multi_token_chunks".to_string()), "{:?}", codes(&a));
    assert!(!codes(&a).contains(&"usage_not_streamed".to_string()), "{:?}", codes(&a));

    // The server's speculative-decoding counters tell the same story: tokens per step.
    let spec = &a["server_metrics"]["spec_decode"];
    let steps = spec["mean_acceptance_length"].as_f64().unwrap_or_else(|| panic!("{}", a["server_metrics"]));
    assert!((steps - streamed as f64 / chunks as f64).abs() < 1e-9, "{spec}");
    assert!(spec["acceptance_rate"].as_f64().is_some_and(|r| r > 0.5 && r < 0.8), "{spec}");

    // Per token = per chunk / tokens per chunk, within 5 %.
    let (chunk_p50, token_p50) = (f(m, "itl_chunk_p50_ms"), f(m, "itl_token_p50_ms"));
    let ratio = token_p50 / (chunk_p50 / tpc);
    assert!((0.95..=1.05).contains(&ratio), "itl_token_p50 {token_p50} vs itl_chunk_p50 {chunk_p50} / {tpc}");
    // Every gap is counted once: one fewer than the chunks of each request.
    assert_eq!(m["itl_chunk_samples"].as_u64().unwrap(), chunks - REQUESTS);
    assert_eq!(m["itl_token_samples"], m["itl_chunk_samples"]);

    // The corrected TPOT is what the simulator did, within 1 %: its ground truth says when each
    // content chunk left, so (last − first) / (tokens after the first chunk) is the time per
    // token it paced (its plan, 8 ms, give or take its own timer's lateness on a shared CPU).
    let corrected = f(m, "tpot_corrected_mean_ms");
    let by_marker: std::collections::HashMap<&str, f64> = truth
        .iter()
        .map(|t| {
            let content: Vec<_> = t.chunks.iter().filter(|c| c.kind == ChunkKind::Content).collect();
            let tokens: u32 = content.iter().map(|c| c.tokens).sum();
            let span_ms = (content[content.len() - 1].offset_ns - content[0].offset_ns) as f64 / 1e6;
            (t.marker.as_deref().expect("canaries are on"), span_ms / f64::from(tokens - content[0].tokens))
        })
        .collect();
    let served: Vec<f64> =
        rts.iter().map(|r| by_marker[r["request_canary"]["marker"].as_str().expect("a marker")]).collect();
    let served_mean = served.iter().sum::<f64>() / served.len() as f64;
    assert!((corrected / served_mean - 1.0).abs() < 0.01, "tpot_corrected {corrected} vs served {served_mean}");
    assert!((served_mean / planned_tpot_ms - 1.0).abs() < 0.05, "served {served_mean} vs planned {planned_tpot_ms}");
    // The standard TPOT is below it by (N − k)/(N − 1), request by request.
    for r in rts {
        let (n, k) = (r["output_tokens"].as_f64().unwrap(), r["first_chunk_tokens"].as_f64().unwrap());
        let (tpot, fixed) = (r["tpot_ms"].as_f64().unwrap(), r["tpot_corrected_ms"].as_f64().unwrap());
        assert!((tpot / fixed - (n - k) / (n - 1.0)).abs() < 1e-9, "{r}");
    }
    if rts.iter().any(|r| r["first_chunk_tokens"].as_u64().unwrap() > 1) {
        assert!(f(m, "tpot_mean_ms") < corrected);
    }
    // The longest stall of a request is at least its typical chunk gap.
    assert!(f(m, "max_stall_p50_ms") >= chunk_p50);
    assert!(a["timing_methodology"]["gap_percentiles"].as_str().unwrap().contains("HDR"));

    // The records alone give the same numbers.
    let again = dir.path().join("again");
    let out = anvil().arg("summarize").arg(&records).arg("--out").arg(&again).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let b = check_artifact(&artifacts(&again)[0]);
    // The live run took its gap distributions from histograms fed as the requests ended;
    // `summarize` reads every record back.
    let gap_keys: Vec<&String> = m.as_object().unwrap().keys().filter(|k| k.starts_with("itl_")).collect();
    assert!(gap_keys.len() > 10, "{gap_keys:?}");
    for key in gap_keys.into_iter().chain(&["max_stall_p90_ms".to_string(), "tpot_corrected_p50_ms".to_string()]) {
        assert_eq!(b["metrics"][key], m[key], "{key}");
    }
    // The live run copied its records into the artifact as written; `summarize` parsed and
    // serialized them again.
    for key in ["request_timings", "failures", "dropped"] {
        assert_eq!(b[key], a[key], "{key}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_per_chunk_usage_tokens_per_chunk_come_from_usage_over_chunks() {
    let server = MockServer::start(spec()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = measure(&server, dir.path(), false).await;
    let m = &a["metrics"];
    assert_eq!(m["tpot_corrected_samples"], 0);
    assert!(m["tpot_corrected_p50_ms"].is_null());
    let r = &a["request_timings"][0];
    assert!(r.get("streamed_tokens").is_none() && r.get("token_gaps_us").is_none(), "{r}");
    assert!(r["chunk_gaps_us"].as_array().is_some_and(|g| !g.is_empty()), "{r}");
    let tpc = f(m, "tokens_per_chunk_mean");
    assert!((2.5..3.5).contains(&tpc), "{tpc}");
    // Each gap divided by its request's mean: the same number of samples, one per gap.
    assert_eq!(m["itl_token_samples"], m["itl_chunk_samples"]);
    let ratio = f(m, "itl_token_p50_ms") / (f(m, "itl_chunk_p50_ms") / tpc);
    assert!((0.9..=1.1).contains(&ratio), "{ratio}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counting_unstreamed_tokens_is_recorded_and_warned_about() {
    // llama.cpp's habit: usage counts an end-of-turn token that is never streamed. With ten
    // streamed tokens that is 10 % more than what streamed.
    let profile = Profile { eos_in_usage: true, content_tokens: (10, 10), ..spec() };
    let server = MockServer::start(profile).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = measure(&server, dir.path(), true).await;
    let r = &a["request_timings"][0];
    assert_eq!((r["output_tokens"].as_u64(), r["streamed_tokens"].as_u64()), (Some(11), Some(10)), "{r}");
    assert!(codes(&a).contains(&"usage_not_streamed".to_string()), "{:?}", codes(&a));
    let stall = Duration::from_secs_f64(a["metrics"]["max_stall_max_ms"].as_f64().unwrap() / 1000.0);
    assert!(stall < Duration::from_secs(5));
    server.shutdown().await;
}
