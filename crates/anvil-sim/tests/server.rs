//! End-to-end tests of the mock server over real HTTP on loopback: wire shapes, limits,
//! errors, pacing and the counters.

mod common;

use std::time::Duration;

use anvil_sim::{MockServer, MockStatsSnapshot, Profile, ReasoningField};
use common::{chat_body, client, fast, parse, post, tokens_in, wait_for_stats, within};
use serde_json::{Value, json};

async fn get_json(server: &MockServer, path: &str) -> Value {
    let text = client()
        .get(format!("http://{}{path}", server.addr()))
        .send()
        .await
        .expect("request sent")
        .text()
        .await
        .expect("body");
    serde_json::from_str(&text).expect("JSON body")
}

/// The `data:` payloads of an SSE body, checking the framing on the way.
async fn sse_events(response: reqwest::Response) -> Vec<String> {
    let text = response.text().await.expect("body");
    assert!(text.ends_with("\n\n"), "body ends mid-event: {text:?}");
    text.split_terminator("\n\n")
        .map(|event| event.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {event:?}")).to_owned())
        .collect()
}

/// Streamed chat deltas, split by channel, checked for order and chunk size.
struct ChatStream {
    role_first: bool,
    reasoning: String,
    content: String,
    delta_chunks: u64,
    finish_reason: String,
    usage: Option<Value>,
    done_last: bool,
}

fn read_chat_stream(events: &[String], tokens_per_chunk: u64, reasoning_key: &str) -> ChatStream {
    let mut out = ChatStream {
        role_first: false,
        reasoning: String::new(),
        content: String::new(),
        delta_chunks: 0,
        finish_reason: String::new(),
        usage: None,
        done_last: events.last().map(String::as_str) == Some("[DONE]"),
    };
    for (i, event) in events.iter().enumerate() {
        if event == "[DONE]" {
            assert_eq!(i + 1, events.len(), "[DONE] is not last");
            continue;
        }
        let chunk = parse(event);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "test-model");
        assert!(chunk["id"].as_str().expect("id").starts_with("chatcmpl-"));
        let choices = chunk["choices"].as_array().expect("choices");
        if choices.is_empty() {
            out.usage = Some(chunk["usage"].clone());
            continue;
        }
        let choice = &choices[0];
        let delta = choice["delta"].as_object().expect("delta");
        if i == 0 {
            out.role_first = delta.get("role") == Some(&json!("assistant"))
                && delta.get("content") == Some(&Value::Null)
                && delta.len() == 2;
            continue;
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            assert!(delta.is_empty(), "finish chunk carries a delta");
            out.finish_reason = reason.to_owned();
            continue;
        }
        assert_eq!(delta.len(), 1, "chunk mixes channels: {event}");
        let (key, text) = delta.iter().next().expect("one key");
        let text = text.as_str().expect("text delta");
        assert!(tokens_in(text) <= tokens_per_chunk, "chunk too big: {text:?}");
        out.delta_chunks += 1;
        if key == reasoning_key {
            assert!(out.content.is_empty(), "reasoning after content");
            out.reasoning.push_str(text);
        } else {
            assert_eq!(key, "content");
            out.content.push_str(text);
        }
    }
    out
}

#[tokio::test]
async fn streaming_chat_with_usage() {
    within(async {
        let server = MockServer::start(fast()).await.expect("start");
        let body = chat_body(
            "Begin your reply with ANVIL_REQ_0042_ab. Then explain caching.",
            json!({"stream": true, "stream_options": {"include_usage": true}, "temperature": 0.2}),
        );
        let response = post(&server, "/chat/completions", &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["cache-control"], "no-cache");
        let events = sse_events(response).await;
        let stream = read_chat_stream(&events, 2, "reasoning_content");
        assert!(stream.role_first, "first chunk is not role-only: {}", events[0]);
        assert!(!stream.reasoning.is_empty());
        assert!(stream.content.starts_with("ANVIL_REQ_0042_ab "), "{}", stream.content);
        assert_eq!(stream.finish_reason, "stop");
        assert!(stream.done_last);
        let streamed = tokens_in(&stream.reasoning) + tokens_in(&stream.content);
        let usage = stream.usage.expect("usage chunk");
        assert_eq!(usage["completion_tokens"], streamed);
        let prompt_tokens = usage["prompt_tokens"].as_u64().expect("prompt_tokens");
        assert_eq!(usage["total_tokens"], prompt_tokens + streamed);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);

        let stats = server.stats();
        assert_eq!(stats.requests_received, 1);
        assert_eq!(stats.requests_completed, 1);
        assert_eq!(stats.requests_rejected, 0);
        assert_eq!(stats.active_requests, 0);
        assert_eq!(stats.prompt_tokens, prompt_tokens);
        assert_eq!(stats.completion_tokens, streamed);
        assert_eq!(stats.tokens_streamed, streamed);
        assert_eq!(stats.chunks_streamed, stream.delta_chunks);

        // Same prompt again: same answer, and the prefix cache covers all but one token.
        let response = post(&server, "/chat/completions", &body).await;
        let again = read_chat_stream(&sse_events(response).await, 2, "reasoning_content");
        assert_eq!(again.content, stream.content);
        assert_eq!(again.reasoning, stream.reasoning);
        let usage = again.usage.expect("usage chunk");
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], prompt_tokens - 1);
        assert_eq!(server.stats().cached_tokens, prompt_tokens - 1);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn reasoning_key_follows_the_profile_and_thinking_can_be_off() {
    within(async {
        let profile = Profile { reasoning_field: ReasoningField::Reasoning, ..fast() };
        let server = MockServer::start(profile).await.expect("start");
        let body = chat_body("hello there", json!({"stream": true}));
        let events = sse_events(post(&server, "/chat/completions", &body).await).await;
        let stream = read_chat_stream(&events, 2, "reasoning");
        assert!(!stream.reasoning.is_empty());
        assert!(stream.usage.is_none(), "usage without include_usage");

        let body =
            chat_body("hello there", json!({"stream": true, "chat_template_kwargs": {"enable_thinking": false}}));
        let events = sse_events(post(&server, "/chat/completions", &body).await).await;
        let quiet = read_chat_stream(&events, 2, "reasoning");
        assert!(quiet.reasoning.is_empty());
        assert!(!events.iter().any(|e| e.contains("\"reasoning\"")));
        assert_eq!(quiet.content, stream.content, "content length must not depend on thinking");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn ignore_eos_yields_exactly_max_tokens() {
    within(async {
        let server = MockServer::start(fast()).await.expect("start");
        let body = chat_body(
            "count to many",
            json!({"stream": true, "max_tokens": 57, "ignore_eos": true,
                   "stream_options": {"include_usage": true}}),
        );
        let events = sse_events(post(&server, "/chat/completions", &body).await).await;
        let stream = read_chat_stream(&events, 2, "reasoning_content");
        assert_eq!(tokens_in(&stream.reasoning) + tokens_in(&stream.content), 57);
        assert_eq!(stream.finish_reason, "length");
        assert_eq!(stream.usage.expect("usage")["completion_tokens"], 57);
        assert_eq!(server.stats().tokens_streamed, 57);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn completions_stream_plain_and_llamacpp_style() {
    within(async {
        let server = MockServer::start(fast()).await.expect("start");
        let body = json!({"model": "m", "prompt": "The capital of France is ANVIL_REQ_c7",
                          "stream": true, "max_tokens": 30, "ignore_eos": true});
        let events = sse_events(post(&server, "/completions", &body).await).await;
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| parse(e)).collect();
        let text: String = chunks[..chunks.len() - 1]
            .iter()
            .map(|c| {
                assert_eq!(c["object"], "text_completion");
                assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
                c["choices"][0]["text"].as_str().expect("text").to_owned()
            })
            .collect();
        assert!(text.starts_with("ANVIL_REQ_c7 "));
        assert_eq!(tokens_in(&text), 30, "completions have no reasoning: all 30 are text");
        let finish = chunks.last().expect("finish chunk");
        assert_eq!(finish["choices"][0]["finish_reason"], "length");
        assert!(finish.get("usage").is_none());
        server.shutdown().await;

        let server = MockServer::start(Profile::named("llamacpp").expect("llamacpp")).await.expect("start");
        let body = json!({"prompt": "Once upon a time", "stream": true});
        let response = post(&server, "/completions", &body).await;
        assert_eq!(response.headers()["connection"], "close");
        let events = sse_events(response).await;
        let finish = parse(&events[events.len() - 2]);
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        let streamed: u64 = events[..events.len() - 2]
            .iter()
            .map(|e| tokens_in(parse(e)["choices"][0]["text"].as_str().expect("text")))
            .sum();
        // One chunk per token, and the end-of-turn token counted but never streamed.
        assert_eq!(events.len() as u64, streamed + 2);
        assert_eq!(finish["usage"]["completion_tokens"], streamed + 1);
        assert_eq!(finish["usage"]["prompt_tokens"], 5);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn non_streaming_answers_in_one_body() {
    within(async {
        let server = MockServer::start(fast()).await.expect("start");
        let body = chat_body("Start with ANVIL_REQ_n1 please", json!({"max_tokens": 200}));
        let response = post(&server, "/chat/completions", &body).await;
        assert_eq!(response.status(), 200);
        let answer: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
        assert_eq!(answer["object"], "chat.completion");
        let message = &answer["choices"][0]["message"];
        assert_eq!(message["role"], "assistant");
        let content = message["content"].as_str().expect("content");
        let reasoning = message["reasoning_content"].as_str().expect("reasoning");
        assert!(content.starts_with("ANVIL_REQ_n1"));
        assert_eq!(answer["choices"][0]["finish_reason"], "stop");
        assert_eq!(answer["usage"]["completion_tokens"], tokens_in(content) + tokens_in(reasoning));

        let body = json!({"prompt": "abc", "max_tokens": 0});
        let response = post(&server, "/completions", &body).await;
        let answer: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
        assert_eq!(answer["object"], "text_completion");
        assert_eq!(answer["usage"]["completion_tokens"], 1, "max_tokens 0 yields one");
        assert_eq!(answer["choices"][0]["finish_reason"], "length");

        let stats = server.stats();
        assert_eq!((stats.requests_completed, stats.tokens_streamed), (2, 0));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn errors_have_engine_shapes() {
    within(async {
        let profile = Profile { context_limit: 50, ..fast() };
        let server = MockServer::start(profile).await.expect("start");
        let long = "word ".repeat(60);
        let body = chat_body(&long, json!({"stream": true}));
        let response = post(&server, "/chat/completions", &body).await;
        assert_eq!(response.status(), 400);
        assert_eq!(response.headers()["connection"], "close");
        assert!(response.headers()["content-type"].to_str().expect("ascii").starts_with("application/json"));
        let error: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
        let error = &error["error"];
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["code"], "context_length_exceeded");
        assert_eq!(error["n_ctx"], 50);
        assert_eq!(error["n_prompt_tokens"], 60 + 3 + (4 + 3) + 3);
        assert!(error["message"].as_str().expect("message").contains("50 tokens"));

        let response = client()
            .post(format!("{}/chat/completions", server.base_url()))
            .header("content-type", "application/json")
            .body("{\"messages\": [")
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 500);
        assert_eq!(response.headers()["connection"], "close");
        let error: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
        assert_eq!(error["error"]["code"], 500);
        assert_eq!(error["error"]["type"], "server_error");

        for (path, body) in [
            ("/chat/completions", json!({"model": "m"})),
            ("/chat/completions", json!({"messages": "hi"})),
            ("/completions", json!({"prompt": 17})),
            ("/completions", json!({"prompt": "x", "max_tokens": "many"})),
        ] {
            let response = post(&server, path, &body).await;
            assert_eq!(response.status(), 400, "{body}");
            let error: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON body");
            assert_eq!(error["error"]["type"], "invalid_request_error");
            assert_eq!(error["error"]["code"], 400);
        }

        let stats = server.stats();
        assert_eq!(stats.requests_received, 6);
        assert_eq!(stats.requests_rejected, 6);
        assert_eq!(stats.prompt_tokens, 0);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn disconnect_mid_stream_is_counted() {
    within(async {
        let profile =
            Profile { time_per_output_token: Duration::from_millis(2), content_tokens: (5000, 5000), ..fast() };
        let server = MockServer::start(profile).await.expect("start");
        let body = chat_body("go on forever", json!({"stream": true}));
        let mut response = post(&server, "/chat/completions", &body).await;
        let first = response.chunk().await.expect("read").expect("a first chunk");
        assert!(first.starts_with(b"data: "));
        assert_eq!(server.stats().active_requests, 1);
        drop(response);
        let stats = wait_for_stats(&server, |s| s.requests_disconnected == 1).await;
        assert_eq!(stats.requests_completed, 0);
        assert_eq!(stats.completion_tokens, 0);
        assert!(stats.tokens_streamed > 0 && stats.tokens_streamed < 5000);
        wait_for_stats(&server, |s| s.active_requests == 0).await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn peak_counts_the_streams_held_open_together() {
    within(async {
        let profile =
            Profile { time_per_output_token: Duration::from_millis(2), content_tokens: (5000, 5000), ..fast() };
        let server = MockServer::start(profile).await.expect("start");
        let body = chat_body("go on forever", json!({"stream": true}));
        // Three streams open together, each read to its first chunk; then one more alone.
        let mut open = Vec::new();
        for _ in 0..3 {
            let mut response = post(&server, "/chat/completions", &body).await;
            response.chunk().await.expect("read").expect("a first chunk");
            open.push(response);
        }
        assert_eq!(server.stats().peak_active_requests, 3);
        drop(open);
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!(stats.peak_active_requests, 3, "the peak outlives the streams");
        server.reset_peak();
        assert_eq!(server.stats().peak_active_requests, 0);
        let mut response = post(&server, "/chat/completions", &body).await;
        response.chunk().await.expect("read").expect("a first chunk");
        assert_eq!(server.stats().peak_active_requests, 1);
        drop(response);
        wait_for_stats(&server, |s| s.active_requests == 0).await;
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn tokens_are_paced_by_absolute_deadlines() {
    within(async {
        let profile = Profile {
            prefill_tok_s: Some(1000.0),
            time_per_output_token: Duration::from_millis(2),
            reasoning_tokens: (0, 0),
            content_tokens: (60, 60),
            tokens_per_chunk: 1,
            prefix_cache: false,
            ..fast()
        };
        let server = MockServer::start(profile).await.expect("start");
        // 40 one-token words + 1 BOS: 41 ms of prefill, then 59 steps of 2 ms.
        let prompt = "w ".repeat(40);
        let body = json!({"prompt": prompt, "stream": true});
        let started = tokio::time::Instant::now();
        let response = post(&server, "/completions", &body).await;
        let events = sse_events(response).await;
        let elapsed = started.elapsed();
        assert_eq!(events.len(), 60 + 2);
        assert!(elapsed >= Duration::from_millis(41 + 59 * 2), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(600), "{elapsed:?}");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn side_endpoints() {
    within(async {
        let server = MockServer::start(Profile::named("instant").expect("instant")).await.expect("start");
        assert!(server.base_url().starts_with("http://127.0.0.1:"));
        let models = get_json(&server, "/v1/models").await;
        assert_eq!(models["object"], "list");
        assert_eq!(models["data"][0]["id"], "anvil-sim");
        assert_eq!(get_json(&server, "/health").await, json!({"status": "ok"}));
        let profile: Profile = serde_json::from_value(get_json(&server, "/mock/profile").await).expect("profile");
        assert_eq!(profile, Profile::named("instant").expect("instant"));

        let body = json!({"messages": [{"role": "user", "content": "x"}], "stream": true});
        let events = sse_events(post(&server, "/chat/completions", &body).await).await;
        // Role chunk, 256 one-token content chunks, finish, [DONE].
        assert_eq!(events.len(), 1 + 256 + 2);
        let stats: MockStatsSnapshot = serde_json::from_value(get_json(&server, "/mock/stats").await).expect("stats");
        assert_eq!(stats, server.stats());
        assert_eq!(stats.tokens_streamed, 256);

        let addr = server.addr();
        server.shutdown().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    })
    .await;
}

#[tokio::test]
async fn headers_precede_prefill_and_disconnect_during_prefill_is_seen() {
    within(async {
        let profile = Profile {
            // 1 + 4 tokens at 10 tok/s: half a second of prefill.
            prefill_tok_s: Some(10.0),
            ..fast()
        };
        let server = MockServer::start(profile).await.expect("start");
        let body = json!({"prompt": "a b c d", "stream": true});
        let started = tokio::time::Instant::now();
        let response = post(&server, "/completions", &body).await;
        let headers_at = started.elapsed();
        assert!(headers_at < Duration::from_millis(300), "{headers_at:?}");
        drop(response);
        let stats = wait_for_stats(&server, |s| s.requests_disconnected == 1).await;
        let seen_at = started.elapsed();
        // Seen while the body was still waiting for prefill, not at the first write.
        assert!(seen_at < Duration::from_millis(400), "{seen_at:?}");
        assert_eq!(stats.tokens_streamed, 0);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn concurrent_streams_slow_each_other_down() {
    within(async {
        let profile = Profile {
            prefill_tok_s: None,
            time_per_output_token: Duration::from_millis(2),
            reasoning_tokens: (0, 0),
            content_tokens: (20, 20),
            tokens_per_chunk: 1,
            batch_slowdown: 1.0,
            ..fast()
        };
        let server = MockServer::start(profile).await.expect("start");
        let run = |prompt: &'static str| {
            let server = &server;
            async move {
                let body = json!({"prompt": prompt, "stream": true});
                sse_events(post(server, "/completions", &body).await).await.len()
            }
        };
        let started = tokio::time::Instant::now();
        assert_eq!(run("alone").await, 22);
        let alone = started.elapsed();
        assert!(alone >= Duration::from_millis(38), "{alone:?}");

        let started = tokio::time::Instant::now();
        let (a, b, c) = tokio::join!(run("one"), run("two"), run("three"));
        let together = started.elapsed();
        assert_eq!((a, b, c), (22, 22, 22));
        // Three active streams decode three times slower while all three run.
        assert!(together >= Duration::from_millis(90), "{together:?}");
        server.shutdown().await;
    })
    .await;
}
