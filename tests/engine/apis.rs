//! The Responses and Messages APIs, embeddings and rerank against the engine, each artifact
//! against the engine's own answers: usage read from the right events, text and reasoning split
//! as the engine streamed them, the budget deciding `length` where the engine says `completed`,
//! `ignore_eos` honoured on Responses and dropped on Messages (and the artifact saying so), and
//! the embeddings and rerank servers' counts and shapes.

use serde_json::Value;

use crate::harness::{int, num, records, run, scenario, warning, warnings};
use crate::server::{Kind, LlamaServer, MODEL};
use crate::tap::{Exchange, Tap};

/// The streamed requests the engine answered, in order; unanswered sends (on connections the
/// engine had closed) are the records' `stale_connection_retries`.
fn answered(tap: &Tap, records: &[Value]) -> Vec<Exchange> {
    let streamed: Vec<Exchange> = tap.exchanges().into_iter().filter(Exchange::streamed).collect();
    let unanswered = streamed.iter().filter(|e| e.status.is_none()).count() as u64;
    let stale: u64 = records.iter().map(|r| int(r, "stale_connection_retries")).sum();
    assert_eq!(stale, unanswered, "sends on closed connections against stale_connection_retries");
    let answered: Vec<Exchange> = streamed.into_iter().filter(|e| e.status.is_some()).collect();
    assert_eq!(answered.len(), records.len(), "one answered request per record");
    answered
}

/// The payload of the event named `name`.
fn event(ex: &Exchange, name: &str) -> Value {
    ex.events()
        .iter()
        .find(|e| e.name.as_deref() == Some(name))
        .and_then(|e| e.json())
        .unwrap_or_else(|| panic!("no {name} event: {}", String::from_utf8_lossy(&ex.response)))
}

/// Visible text deltas of a Responses or Messages stream.
fn text_deltas(ex: &Exchange) -> u64 {
    ex.payloads()
        .iter()
        .filter(|p| match p["type"].as_str() {
            Some("response.output_text.delta") => p["delta"].as_str().is_some_and(|t| !t.is_empty()),
            Some("content_block_delta") => p["delta"]["text"].as_str().is_some_and(|t| !t.is_empty()),
            _ => false,
        })
        .count() as u64
}

#[test]
fn responses_usage_budget_and_text_are_read_from_the_engines_events() {
    let server = LlamaServer::start(Kind::Generate { slots: 1 });
    let tap = Tap::start(server.addr);
    let max_tokens = 12;
    let text = scenario(
        "responses",
        "",
        &format!(
            "[run]\nrequests = 4\nseed = 21\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 256\n\
             max_context_tokens = 2048\nmax_tokens = {max_tokens}\ncanaries = false\n\n[output]\nignore_eos = true\n"
        ),
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let records = records(&a);
    for (r, ex) in records.iter().zip(&answered(&tap, &records)) {
        let completed = event(ex, "response.completed");
        let response = &completed["response"];
        let usage = &response["usage"];
        // Pinned: a budget-cut answer still ends `completed`, and the timings ride beside it.
        assert_eq!(response["status"], "completed", "{completed}");
        let timings = &completed["timings"];
        assert!(timings.is_object(), "no timings on response.completed: {completed}");
        assert_eq!(int(r, "prompt_tokens"), int(usage, "input_tokens"), "{r}");
        assert_eq!(int(r, "cached_tokens"), int(&usage["input_tokens_details"], "cached_tokens"), "{r}");
        assert_eq!(int(r, "cached_tokens"), int(timings, "cache_n"), "{r}");
        assert_eq!(int(r, "output_tokens"), int(usage, "output_tokens"), "{r}");
        // `ignore_eos` is honoured on this API: the budget, exactly; and the budget decides.
        assert_eq!(int(r, "output_tokens"), max_tokens, "{r}");
        assert_eq!(r["finish_reason"], "length", "{r}");
        assert!(num(r, "ttft_ms") >= num(timings, "prompt_ms"), "TTFT below the engine's prompt time: {r}");
        // Text only: the engine sends no reasoning events and no reasoning count, and the
        // record says neither.
        assert_eq!(int(r, "content_chunks"), text_deltas(ex), "{r}");
        assert_eq!(int(r, "reasoning_chunks"), 0, "{r}");
        assert!(r.get("reasoning_tokens").is_none(), "{r}");
        assert!(usage.get("output_tokens_details").is_none(), "the engine now reports reasoning tokens: {usage}");
        // The body the client sent is what this engine reads.
        assert_eq!(
            (ex.body["store"].as_bool(), ex.body["max_output_tokens"].as_u64()),
            (Some(false), Some(max_tokens))
        );
    }
    assert!(warning(&a, "finish_reason_at_budget").is_some(), "{:?}", warnings(&a));
    assert!(!warnings(&a).contains(&"output_control_ignored".to_string()), "{:?}", warnings(&a));
}

#[test]
fn messages_usage_is_read_and_the_dropped_ignore_eos_is_said() {
    let server = LlamaServer::start(Kind::Generate { slots: 1 });
    let tap = Tap::start(server.addr);
    let max_tokens = 32;
    // Short answers asked for, greedy sampling: the model ends its turn before the budget,
    // which `ignore_eos` would have prevented had the engine kept it.
    let text = scenario(
        "messages",
        "anthropic_version = \"2023-06-01\"",
        &format!(
            "[run]\nrequests = 4\nseed = 22\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 256\n\
             max_context_tokens = 2048\nmax_tokens = {max_tokens}\ncanaries = false\n\n[output]\nignore_eos = true\n\
             response_words = 4\n\n[sampling]\ntemperature = 0.0\n"
        ),
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let records = records(&a);
    let mut stopped = 0;
    for (r, ex) in records.iter().zip(&answered(&tap, &records)) {
        assert_eq!(ex.body["ignore_eos"], true, "the client sent ignore_eos: {}", ex.body);
        let start = event(ex, "message_start");
        let usage = &start["message"]["usage"];
        let delta = event(ex, "message_delta");
        let cached = int(usage, "cache_read_input_tokens");
        // Anthropic's input_tokens is the uncached part; the prompt is both.
        assert_eq!(int(r, "prompt_tokens"), int(usage, "input_tokens") + cached, "{r}");
        assert_eq!(int(r, "cached_tokens"), cached, "{r}");
        assert_eq!(int(r, "output_tokens"), int(&delta["usage"], "output_tokens"), "{r}");
        assert_eq!(int(r, "content_chunks"), text_deltas(ex), "{r}");
        assert_eq!(int(r, "reasoning_chunks"), 0, "{r}");
        match delta["delta"]["stop_reason"].as_str() {
            Some("end_turn") if int(r, "output_tokens") < max_tokens => {
                stopped += 1;
                assert_eq!(r["finish_reason"], "stop", "{r}");
            }
            Some(_) => assert_eq!(r["finish_reason"], "length", "{r}"),
            None => panic!("no stop_reason: {delta}"),
        }
    }
    // Pinned: the engine drops `ignore_eos` on this API, so answers end early; the artifact
    // counts them.
    assert!(stopped > 0, "every answer reached its budget: the engine may honour ignore_eos on /v1/messages now");
    let message = warning(&a, "output_control_ignored").unwrap_or_else(|| panic!("{:?}", warnings(&a)));
    assert!(message.contains(&stopped.to_string()), "{message} (stopped early: {stopped})");
}

/// The one answered request body's usage per record, for the APIs that answer with one JSON.
fn pooled_usage(tap: &Tap, records: &[Value], path: &str) -> Vec<Value> {
    let posts: Vec<Exchange> = tap.exchanges().into_iter().filter(|e| e.method == "POST").collect();
    assert!(posts.iter().all(|e| e.path.ends_with(path)), "{:?}", posts.iter().map(|e| &e.path).collect::<Vec<_>>());
    let answers: Vec<Value> = posts.iter().filter_map(Exchange::json).collect();
    assert_eq!(answers.len(), records.len(), "one answer per record");
    answers
}

#[test]
fn embeddings_and_rerank_counts_and_shapes_are_the_engines() {
    for (api, kind, batch) in [("embeddings", Kind::Embeddings, 3u64), ("rerank", Kind::Rerank, 4)] {
        let server = LlamaServer::start(kind);
        let tap = Tap::start(server.addr);
        let text = scenario(
            api,
            "",
            &format!(
                "[run]\nrequests = 4\nseed = 23\n\n[load]\nconcurrency = 1\n\n[workload]\ncontext_tokens = 96\n\
                 max_context_tokens = 2048\nmax_tokens = 1\nbatch_size = {batch}\n"
            ),
        );
        let before = server.metrics();
        let finished = run(&text, &tap.base_url(), &[]);
        finished.succeeded();
        let a = finished.one();
        let after = server.metrics();
        let records = records(&a);
        let answers = pooled_usage(&tap, &records, api);
        let mut total = 0;
        for (r, answer) in records.iter().zip(&answers) {
            // Whatever order the engine answered in, the counts are the engine's.
            let served = int(&answer["usage"], "prompt_tokens");
            assert_eq!(int(r, "prompt_tokens"), served, "{api}: {r}");
            total += served;
            assert_eq!(int(r, "output_tokens"), 0, "{r}");
            assert_eq!(num(r, "time_to_first_output_ms"), num(r, "e2e_ms"), "{r}");
            let items = if api == "embeddings" { &answer["data"] } else { &answer["results"] };
            assert_eq!(items.as_array().map(Vec::len), Some(batch as usize), "{api}: one item per input: {answer}");
            if api == "rerank" {
                // No ranking head, but a score for every document, and the count as total_tokens.
                assert!(items.as_array().into_iter().flatten().all(|x| x["relevance_score"].is_number()), "{answer}");
                assert_eq!(answer["usage"]["total_tokens"], answer["usage"]["prompt_tokens"], "{answer}");
            }
        }
        // The engine's counters moved by the same tokens (it evaluated or reused every one).
        let moved = after.delta(&before, "prompt_tokens_total") + after.delta(&before, "prompt_tokens_cached_total");
        assert_eq!(moved as u64, total, "{api}");
        assert_eq!(a["metrics"]["prompt_tokens"].as_u64(), Some(total), "{api}");
        assert!(a["metric_notes"].is_object(), "{api}: the artifact says why streaming metrics are null");
        assert!(num(&a["metrics"], "input_throughput_tok_s") > 0.0, "{api}");
    }
}

#[test]
fn a_responses_conversation_sends_typed_history_the_engine_accepts_and_caches() {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    // Pinned: an assistant history item without `"type": "message"` is refused.
    let untyped = serde_json::json!({"model": MODEL, "max_output_tokens": 1, "input": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "bye"}]});
    let (status, body) = crate::http::post(server.addr, "/v1/responses", &untyped).unwrap_or_else(|e| panic!("{e}"));
    let body = String::from_utf8_lossy(&body);
    assert!(status == 400 && body.contains("Cannot determine type of 'item'"), "{status}: {body}");
    let tap = Tap::start(server.addr);
    let text = scenario(
        "responses",
        "",
        "[run]\nseed = 24\n\n[load]\nsessions = 2\n\n[workload]\nmax_context_tokens = 2048\nmax_tokens = 12\n\
         canaries = false\n\n[workload.sessions]\nconversations = 2\nturns = 3\nfirst_tokens = 200\nuser_tokens = 40\n\
         output_tokens = 12\n\n[output]\nignore_eos = true\n",
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(6), Some(0)), "{}", a["failures"]);
    let records = records(&a);
    // Each record against the engine's answer to its turn (the conversation's id in the
    // affinity header, the turn in the user items sent).
    let answered = answered(&tap, &records);
    let turn_of = |ex: &Exchange| {
        let session = ex.request_head.header("x-session-id").expect("the affinity header").to_string();
        let items = ex.body["input"].as_array().expect("input items");
        (session, items.iter().filter(|i| i["role"] == "user").count() as u64)
    };
    let mut prompt_of = std::collections::HashMap::new();
    for r in &records {
        let key = (r["session"].as_str().expect("session").to_string(), int(r, "turn"));
        let ex = answered.iter().find(|ex| turn_of(ex) == key).unwrap_or_else(|| panic!("no answer for {key:?}"));
        // Every earlier answer went back as a typed message item.
        let items = ex.body["input"].as_array().expect("input items");
        let assistant: Vec<&Value> = items.iter().filter(|i| i["role"] == "assistant").collect();
        assert_eq!(assistant.len() as u64, key.1 - 1, "{}", ex.body);
        assert!(assistant.iter().all(|i| i["type"] == "message"), "{}", ex.body);
        let completed = event(ex, "response.completed");
        let usage = &completed["response"]["usage"];
        assert_eq!(int(r, "prompt_tokens"), int(usage, "input_tokens"), "{r}");
        assert_eq!(int(r, "cached_tokens"), int(&usage["input_tokens_details"], "cached_tokens"), "{r}");
        assert_eq!((int(r, "output_tokens"), r["finish_reason"].as_str()), (12, Some("length")), "{r}");
        prompt_of.insert(key, int(r, "prompt_tokens"));
    }
    // Later turns found the whole previous prompt in the engine's prefix cache.
    for r in records.iter().filter(|r| int(r, "turn") > 1) {
        let previous = prompt_of[&(r["session"].as_str().expect("session").to_string(), int(r, "turn") - 1)];
        assert!(int(r, "cached_tokens") >= previous, "previous prompt {previous}: {r}");
    }
}
