//! Chat and completions against the engine: every request's prompt, cached and output tokens
//! are the engine's own (its `usage`, its `timings`), calibrated prompt sizes land within 1 % of
//! the plan, no TTFT is shorter than the engine's own prompt time, and the engine's `/metrics`
//! counters moved by exactly what crossed the wire. The wire shapes this engine is known for are
//! pinned: usage and `timings` on chat's last chunk, usage on the completions finish chunk, the
//! unstreamed end-of-turn token counted in `completion_tokens`.

use serde_json::Value;

use crate::harness::{int, num, records, run, scenario, warnings};
use crate::server::{Kind, LlamaServer, Metrics};
use crate::tap::{Exchange, Tap};

/// Text of a streamed payload: chat's `delta.content` or completions' `text`.
fn delta_text(payload: &Value) -> Option<&str> {
    let choice = payload["choices"].get(0)?;
    choice["delta"]["content"].as_str().or_else(|| choice["text"].as_str()).filter(|t| !t.is_empty())
}

fn finish_reason(ex: &Exchange) -> String {
    ex.payloads()
        .iter()
        .find_map(|p| p["choices"].get(0)?["finish_reason"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no finish_reason from the engine: {}", String::from_utf8_lossy(&ex.response)))
}

/// The engine's counts against the artifact's, request by request (records in the order sent,
/// exchanges likewise: a closed loop of one). A send the engine never answered is a request the
/// client wrote on a connection the engine had closed (it closes after every stream): the
/// client sends it again, untimed, and counts it in `stale_connection_retries`.
fn compare_requests(records: &[Value], streamed: &[Exchange], max_tokens: u64) {
    let unanswered = streamed.iter().filter(|e| e.status.is_none()).count() as u64;
    let stale: u64 = records.iter().map(|r| int(r, "stale_connection_retries")).sum();
    assert_eq!(stale, unanswered, "sends on closed connections against stale_connection_retries");
    let streamed: Vec<&Exchange> = streamed.iter().filter(|e| e.status.is_some()).collect();
    assert_eq!(records.len(), streamed.len(), "one answered streamed request per record");
    for (r, ex) in records.iter().zip(streamed) {
        assert_eq!(ex.status, Some(200), "{}", String::from_utf8_lossy(&ex.response));
        let usage = ex.last_with("usage").unwrap_or_else(|| panic!("the engine sent no usage: {r}"));
        let timings = ex.last_with("timings").unwrap_or_else(|| panic!("the engine sent no timings: {r}"));
        let engine_prompt = int(&usage, "prompt_tokens");
        let engine_output = int(&usage, "completion_tokens");
        let engine_cached = int(&usage["prompt_tokens_details"], "cached_tokens");
        // The engine agrees with itself: its timings split the same prompt.
        assert_eq!(int(&timings, "prompt_n") + int(&timings, "cache_n"), engine_prompt, "{timings}");
        assert_eq!(int(&timings, "cache_n"), engine_cached, "{timings}");
        assert_eq!(int(&timings, "predicted_n"), engine_output, "{timings}");
        // The artifact holds the engine's counts, exactly.
        assert_eq!(int(r, "prompt_tokens"), engine_prompt, "{r}");
        assert_eq!(int(r, "output_tokens"), engine_output, "{r}");
        assert_eq!(int(r, "cached_tokens"), engine_cached, "{r}");
        assert_eq!(r["output_token_source"], "usage", "{r}");
        // Every text delta the engine sent is a chunk the client counted.
        let chunks = ex.payloads().iter().filter(|p| delta_text(p).is_some()).count() as u64;
        assert_eq!(int(r, "content_chunks"), chunks, "{r}");
        // No TTFT shorter than the engine's own prompt processing.
        let prompt_ms = num(&timings, "prompt_ms");
        assert!(
            num(r, "ttft_ms") >= prompt_ms,
            "ttft {} below the engine's prompt time {prompt_ms}: {r}",
            r["ttft_ms"]
        );
        // Finish: the budget decides `length`; otherwise the engine's word.
        let engine_finish = finish_reason(ex);
        if engine_output >= max_tokens {
            assert_eq!(r["finish_reason"], "length", "{r}");
        } else {
            assert_eq!(r["finish_reason"], engine_finish.as_str(), "{r}");
        }
        if engine_finish == "stop" && engine_output < max_tokens {
            // Pinned: the end-of-turn token is counted, never streamed.
            assert_eq!(engine_output, chunks + 1, "{r}");
        }
    }
}

/// The engine's counters moved by what crossed the wire (probes and measured requests alike),
/// and the artifact's totals are the streamed requests' share of it.
fn compare_metrics(before: &Metrics, after: &Metrics, all: &[Exchange]) {
    let usage: Vec<Value> = all
        .iter()
        .filter(|e| e.method == "POST" && e.status.is_some())
        .map(|e| {
            e.json()
                .and_then(|j| j.get("usage").cloned())
                .or_else(|| e.last_with("usage"))
                .unwrap_or_else(|| panic!("no usage for {} {}", e.method, e.path))
        })
        .collect();
    let prompt: u64 = usage.iter().map(|u| int(u, "prompt_tokens")).sum();
    let cached: u64 = usage.iter().map(|u| int(&u["prompt_tokens_details"], "cached_tokens")).sum();
    let output: u64 = usage.iter().map(|u| int(u, "completion_tokens")).sum();
    // llama.cpp counts evaluated prompt tokens and, beside them, those reused from its cache.
    assert_eq!(after.delta(before, "prompt_tokens_total") as u64, prompt - cached);
    assert_eq!(after.delta(before, "prompt_tokens_cached_total") as u64, cached);
    assert_eq!(after.delta(before, "tokens_predicted_total") as u64, output);
}

#[test]
fn chat_counts_timings_and_sizing_are_the_engines() {
    let server = LlamaServer::start(Kind::Generate { slots: 1 });
    let tap = Tap::start(server.addr);
    let max_tokens = 32;
    // Short answers asked for, greedy sampling: most answers end their turn before the budget,
    // so both ends (`stop`, the budget) are met.
    let text = scenario(
        "chat",
        "",
        &format!(
            "[run]\nrequests = 6\nseed = 11\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 320\n\
             max_context_tokens = 2048\nmax_tokens = {max_tokens}\ncanaries = false\n\n[output]\nresponse_words = 4\n\n\
             [sampling]\ntemperature = 0.0\n"
        ),
    );
    let before = server.metrics();
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let after = server.metrics();
    let all = tap.exchanges();
    let streamed: Vec<Exchange> = all.iter().filter(|e| e.streamed()).cloned().collect();
    compare_requests(&records(&a), &streamed, max_tokens);
    compare_metrics(&before, &after, &all);
    let stops = streamed.iter().filter(|e| e.status.is_some() && finish_reason(e) == "stop").count();
    assert!(stops > 0, "no answer ended its turn: the end-of-turn count was not checked");
    // Calibrated against the engine's own counts: within 1 % of the plan.
    let sizing = &a["prompt_sizing"];
    assert_eq!(sizing["mode"], "calibrate", "{sizing}");
    let mean = num(&a["metrics"], "prompt_sizing_error_pct_mean");
    assert!(mean <= 1.0, "prompt sizing off by {mean} % on average: {sizing}");
    // Every probe's count is the engine's answer to it.
    let probes: Vec<&Exchange> =
        all.iter().filter(|e| e.method == "POST" && !e.streamed() && e.status.is_some()).collect();
    let recorded = sizing["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), recorded.len(), "{sizing}");
    for (probe, ex) in recorded.iter().zip(&probes) {
        let served = ex.json().and_then(|j| j["usage"]["prompt_tokens"].as_u64());
        assert_eq!(probe["server_prompt_tokens"].as_u64(), served, "{probe}");
    }
    // Pinned: the last chat chunk carries both usage and timings, with no choices.
    for ex in streamed.iter().filter(|e| e.status.is_some()) {
        let payloads = ex.payloads();
        let last = payloads.last().expect("payloads");
        assert!(last["choices"].as_array().is_some_and(Vec::is_empty), "{last}");
        assert!(last["usage"].is_object() && last["timings"].is_object(), "{last}");
        assert_eq!(ex.events().last().map(|e| e.data.as_str()), Some("[DONE]"));
    }
    // Pinned: the engine's head says keep-alive, yet it closes the connection after every
    // stream: nothing sent after a stream on its connection is answered (the client sent it
    // again on a new one, untimed; see `compare_requests`).
    for ex in streamed.iter().filter(|e| e.status.is_some()) {
        let head = ex.response_head.as_ref().expect("a head");
        assert!(head.header("keep-alive").is_some() && head.header("connection").is_none(), "{:?}", head.headers);
        let mut later = all.iter().filter(|e| e.connection == ex.connection && e.position > ex.position);
        assert!(later.all(|e| e.status.is_none()), "an answer after a stream on one connection");
    }
    assert!(a["performance_eligible"].as_bool() == Some(true), "{:?}", warnings(&a));
    assert!(!warnings(&a).contains(&"prompt_sizing_off".to_string()));
}

#[test]
fn completions_counts_are_the_engines_and_ignore_eos_gives_exact_lengths() {
    let server = LlamaServer::start(Kind::Generate { slots: 1 });
    let tap = Tap::start(server.addr);
    let max_tokens = 12;
    let text = scenario(
        "completions",
        "",
        &format!(
            "[run]\nrequests = 6\nseed = 12\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 320\n\
             max_context_tokens = 2048\nmax_tokens = {max_tokens}\ncanaries = false\n\n[output]\nignore_eos = true\n"
        ),
    );
    let before = server.metrics();
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let after = server.metrics();
    let all = tap.exchanges();
    let streamed: Vec<Exchange> = all.iter().filter(|e| e.streamed()).cloned().collect();
    compare_requests(&records(&a), &streamed, max_tokens);
    compare_metrics(&before, &after, &all);
    let mean = num(&a["metrics"], "prompt_sizing_error_pct_mean");
    assert!(mean <= 1.0, "prompt sizing off by {mean} % on average: {}", a["prompt_sizing"]);
    for r in records(&a) {
        // `ignore_eos` honoured on this API: every answer is the budget, exactly.
        assert_eq!((int(&r, "output_tokens"), r["finish_reason"].as_str()), (max_tokens, Some("length")), "{r}");
    }
    // Pinned: usage and timings ride on the finish chunk itself; no separate usage chunk; the
    // id still says chat.
    for ex in streamed.iter().filter(|e| e.status.is_some()) {
        assert_eq!(ex.body["ignore_eos"], true, "{}", ex.body);
        let payloads = ex.payloads();
        let finish = payloads.iter().find(|p| p["choices"][0]["finish_reason"].is_string()).expect("a finish chunk");
        assert!(finish["usage"].is_object() && finish["timings"].is_object(), "{finish}");
        assert!(payloads.iter().all(|p| !p["choices"].as_array().is_some_and(Vec::is_empty)), "a usage-only chunk");
        assert!(finish["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-")), "{finish}");
    }
    assert!(a["performance_eligible"].as_bool() == Some(true), "{:?}", warnings(&a));
}
