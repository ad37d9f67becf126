//! Fault injection, the restart and the ground truth, end to end over loopback HTTP: each
//! fault at probability 1 must reach a raw client exactly as documented and be counted.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anvil_sim::{ChunkKind, FaultProfile, GroundTruthRecord, MockServer, Profile};
use common::{chat_body, client, fast, parse, post, tokens_in, wait_for_stats, within};
use serde_json::{Value, json};
use tokio::time::{Instant, timeout};

/// Sets one fault in a profile.
type SetFault = fn(&mut FaultProfile);

fn with_faults(set: impl FnOnce(&mut FaultProfile)) -> Profile {
    let mut profile = fast();
    set(&mut profile.faults);
    profile
}

fn stream_body(marker: &str) -> Value {
    chat_body(
        &format!("Begin your reply with {marker}. Then explain caching."),
        json!({"stream": true, "stream_options": {"include_usage": true}}),
    )
}

/// Everything the client received, and the error that ended the body early, if any.
async fn read_raw(mut response: reqwest::Response) -> (Vec<u8>, Option<reqwest::Error>) {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return (body, None),
            Err(err) => return (body, Some(err)),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// The visible content of a chat stream whose events all parse.
fn content_of(body: &[u8]) -> String {
    let text = std::str::from_utf8(body).expect("utf-8");
    text.split_terminator("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|event| *event != "[DONE]")
        .filter_map(|event| parse(event)["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

fn injected(server: &MockServer, name: &str) -> u64 {
    server.stats().faults_injected[name]
}

#[tokio::test]
async fn http_faults_answer_with_status_retry_after_and_error_body() {
    within(async {
        let cases: [(SetFault, &str, u16, Option<&str>, &str); 3] = [
            (|f| f.http_429 = 1.0, "http_429", 429, Some("1"), "rate_limit_error"),
            (|f| f.http_500 = 1.0, "http_500", 500, None, "server_error"),
            (|f| f.http_503 = 1.0, "http_503", 503, Some("1"), "service_unavailable"),
        ];
        for (set, name, status, retry_after, kind) in cases {
            let server = MockServer::start(with_faults(set)).await.expect("start");
            let response = post(&server, "/chat/completions", &stream_body("ANVIL_REQ_1_1")).await;
            assert_eq!(response.status(), status);
            let headers = response.headers();
            assert_eq!(headers.get("retry-after").map(|v| v.to_str().expect("ascii")), retry_after, "{name}");
            assert_eq!(headers["connection"], "close");
            let error: Value = serde_json::from_slice(&response.bytes().await.expect("body")).expect("JSON");
            assert_eq!(error["error"]["type"], kind);
            assert_eq!(error["error"]["code"], status);
            assert!(error["error"]["message"].is_string());
            let stats = server.stats();
            assert_eq!((stats.requests_received, stats.requests_rejected, stats.requests_completed), (1, 1, 0));
            assert_eq!(stats.faults_injected[name], 1);
            assert_eq!(stats.faults_injected.values().sum::<u64>(), 1);
            server.shutdown().await;
        }
    })
    .await;
}

#[tokio::test]
async fn reset_mid_stream_breaks_the_body() {
    within(async {
        let server = MockServer::start(with_faults(|f| f.reset_mid_stream = 1.0)).await.expect("start");
        let response = post(&server, "/chat/completions", &stream_body("ANVIL_REQ_2_1")).await;
        assert_eq!(response.status(), 200);
        let (body, error) = read_raw(response).await;
        assert!(error.is_some(), "the body ended cleanly: {}", String::from_utf8_lossy(&body));
        assert!(body.starts_with(b"data: "), "no chunk before the reset");
        assert!(find(&body, b"[DONE]").is_none());
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!(stats.faults_injected["reset_mid_stream"], 1);
        assert_eq!((stats.requests_completed, stats.requests_disconnected), (0, 0));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn stall_before_first_byte_sends_headers_then_nothing() {
    within(async {
        // The default stall lasts an hour: the server must let go as soon as the client does.
        let server = MockServer::start(with_faults(|f| f.stall_before_first_byte = 1.0)).await.expect("start");
        let mut response = post(&server, "/chat/completions", &stream_body("ANVIL_REQ_3_1")).await;
        assert_eq!(response.status(), 200);
        assert!(timeout(Duration::from_millis(300), response.chunk()).await.is_err(), "bytes during the stall");
        assert_eq!(injected(&server, "stall_before_first_byte"), 1);
        drop(response);
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!((stats.requests_disconnected, stats.requests_completed), (1, 0));
        server.shutdown().await;

        // A client that waits a short stall out gets the whole answer.
        let profile = with_faults(|f| {
            f.stall_before_first_byte = 1.0;
            f.stall_duration = Duration::from_millis(300);
        });
        let server = MockServer::start(profile).await.expect("start");
        let started = Instant::now();
        let (body, error) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_3_2")).await).await;
        assert!(error.is_none());
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(body.ends_with(b"data: [DONE]\n\n"));
        assert!(content_of(&body).starts_with("ANVIL_REQ_3_2 "));
        assert_eq!(server.stats().requests_completed, 1);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn stall_mid_stream_stops_after_some_chunks() {
    within(async {
        let profile = with_faults(|f| {
            f.stall_mid_stream = 1.0;
            f.stall_duration = Duration::from_millis(300);
        });
        let server = MockServer::start(profile).await.expect("start");
        let mut response = post(&server, "/chat/completions", &stream_body("ANVIL_REQ_4_1")).await;
        let mut body = Vec::new();
        // Chunks come every fraction of a millisecond until the stall.
        while let Ok(chunk) = timeout(Duration::from_millis(150), response.chunk()).await {
            body.extend_from_slice(&chunk.expect("read").expect("stalled, not ended"));
        }
        assert!(body.starts_with(b"data: "), "stalled before the first chunk");
        assert!(find(&body, b"[DONE]").is_none());
        assert_eq!(injected(&server, "stall_mid_stream"), 1);
        drop(response);
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!(stats.requests_disconnected, 1);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn broken_lines_appear_once_and_the_stream_goes_on() {
    within(async {
        let cases: [(SetFault, &str, &[u8]); 3] = [
            (|f| f.malformed_sse = 1.0, "malformed_sse", b"\n\ndta: {\"choices\":"),
            (|f| f.invalid_json = 1.0, "invalid_json", b"\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n"),
            (|f| f.invalid_utf8 = 1.0, "invalid_utf8", b"\"content\":\"\xff\xfe\"}"),
        ];
        for (set, name, needle) in cases {
            let server = MockServer::start(with_faults(set)).await.expect("start");
            let (body, error) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_5_1")).await).await;
            assert!(error.is_none(), "{name}");
            let at = find(&body, needle).unwrap_or_else(|| panic!("{name}: {}", String::from_utf8_lossy(&body)));
            assert!(
                at > 0 && find(&body[at + 1..], needle).is_none(),
                "{name}: not exactly once after the first chunk"
            );
            assert!(body.ends_with(b"data: [DONE]\n\n"), "{name}");
            let stats = server.stats();
            assert_eq!((stats.faults_injected[name], stats.requests_completed), (1, 1), "{name}");
            server.shutdown().await;
        }
    })
    .await;
}

#[tokio::test]
async fn huge_chunk_and_missing_done() {
    within(async {
        let server = MockServer::start(with_faults(|f| f.huge_chunk = 1.0)).await.expect("start");
        let (body, error) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_6_1")).await).await;
        assert!(error.is_none());
        assert!(body.ends_with(b"data: [DONE]\n\n"));
        let text = std::str::from_utf8(&body).expect("utf-8");
        let longest = text.split_terminator("\n\n").map(str::len).max().unwrap_or(0);
        assert!(longest > 1 << 20, "{longest}");
        let content = content_of(&body);
        assert!(content.starts_with("ANVIL_REQ_6_1 ") && content.len() > 1 << 20);
        let stats = server.stats();
        assert_eq!((stats.faults_injected["huge_chunk"], stats.requests_completed), (1, 1));
        server.shutdown().await;

        let server = MockServer::start(with_faults(|f| f.missing_done = 1.0)).await.expect("start");
        let (body, error) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_6_2")).await).await;
        assert!(error.is_none(), "the body must end cleanly");
        let text = std::str::from_utf8(&body).expect("utf-8");
        assert!(!text.contains("[DONE]"));
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        let usage = parse(events[events.len() - 1].strip_prefix("data: ").expect("data"));
        assert!(usage["usage"]["completion_tokens"].as_u64().expect("usage") > 0);
        let finish = parse(events[events.len() - 2].strip_prefix("data: ").expect("data"));
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!(stats.faults_injected["missing_done"], 1);
        assert_eq!((stats.requests_completed, stats.requests_disconnected), (0, 0));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn contaminated_answers_carry_foreign_markers() {
    within(async {
        let server = MockServer::start(with_faults(|f| f.contamination_swapped = 1.0)).await.expect("start");
        // Nobody else known yet: a made-up marker.
        let (body, _) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_7_1")).await).await;
        let content = content_of(&body);
        assert!(content.starts_with("ANVIL_REQ_0_99999 "), "{content}");
        assert!(!content.contains("ANVIL_REQ_7_1"));
        // Then the one seen last.
        let (body, _) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_7_2")).await).await;
        assert!(content_of(&body).starts_with("ANVIL_REQ_7_1 "));
        // Non-streamed answers too.
        let body = chat_body("Begin your reply with ANVIL_REQ_7_3.", json!({}));
        let answer = post(&server, "/chat/completions", &body).await.bytes().await.expect("body");
        let answer: Value = serde_json::from_slice(&answer).expect("JSON");
        let content = answer["choices"][0]["message"]["content"].as_str().expect("content");
        assert!(content.starts_with("ANVIL_REQ_7_2 "), "{content}");
        let stats = server.stats();
        assert_eq!((stats.faults_injected["contamination_swapped"], stats.contaminated_responses), (3, 3));
        assert_eq!(stats.requests_completed, 3);
        server.shutdown().await;

        let server = MockServer::start(with_faults(|f| f.contamination_merged = 1.0)).await.expect("start");
        let (body, _) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_8_1")).await).await;
        let content = content_of(&body);
        assert!(content.starts_with("ANVIL_REQ_8_1 "), "{content}");
        let foreign = content.find(" ANVIL_REQ_0_99999").expect("a foreign marker mid-content");
        assert!(foreign > 0 && !content.ends_with("ANVIL_REQ_0_99999"), "{content}");
        let stats = server.stats();
        assert_eq!((stats.faults_injected["contamination_merged"], stats.contaminated_responses), (1, 1));
        server.shutdown().await;
    })
    .await;
}

/// Sends `count` requests one after another and names the fault each one got.
async fn fault_sequence(profile: Profile, count: usize) -> Vec<Option<String>> {
    let server = MockServer::start(profile).await.expect("start");
    let mut sequence = Vec::new();
    let mut before = server.stats().faults_injected;
    for i in 0..count {
        let response = post(&server, "/chat/completions", &stream_body(&format!("ANVIL_REQ_9_{i}"))).await;
        let _ = read_raw(response).await;
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        let grown: Vec<String> = stats
            .faults_injected
            .iter()
            .filter(|(name, n)| before.get(*name) != Some(*n))
            .map(|(name, _)| name.clone())
            .collect();
        assert!(grown.len() <= 1, "one request, several faults: {grown:?}");
        sequence.push(grown.into_iter().next());
        before = stats.faults_injected;
    }
    server.shutdown().await;
    sequence
}

#[tokio::test]
async fn the_same_seed_injects_the_same_faults() {
    within(async {
        let profile = with_faults(|f| {
            f.reset_mid_stream = 0.15;
            f.http_500 = 0.15;
            f.malformed_sse = 0.1;
            f.invalid_json = 0.1;
            f.missing_done = 0.1;
            f.contamination_merged = 0.1;
            f.fault_seed = 42;
        });
        let expected: Vec<Option<String>> =
            (1..=40).map(|n| profile.faults.fault_of_request(n).map(str::to_owned)).collect();
        let first = fault_sequence(profile.clone(), 40).await;
        let second = fault_sequence(profile.clone(), 40).await;
        assert_eq!(first, second);
        assert_eq!(first, expected, "the n-th request gets the n-th draw");
        let kinds: BTreeMap<_, usize> = first.iter().fold(BTreeMap::new(), |mut map, kind| {
            *map.entry(kind.clone()).or_default() += 1;
            map
        });
        assert!(kinds.len() >= 4, "too little variety to tell sequences apart: {kinds:?}");
        let other = Profile { faults: FaultProfile { fault_seed: 43, ..profile.faults.clone() }, ..profile };
        assert_ne!(fault_sequence(other, 40).await, first);
    })
    .await;
}

/// Polls until `connect` to `addr` is refused (true) or `limit` passes (false).
async fn refused_within(addr: std::net::SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Err(err) = tokio::net::TcpStream::connect(addr).await {
            assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

#[tokio::test]
async fn restart_closes_the_port_then_serves_again() {
    within(async {
        let profile = with_faults(|f| {
            f.restart_after_requests = Some(3);
            f.restart_downtime_ms = 300;
        });
        let server = MockServer::start(profile).await.expect("start");
        let addr = server.addr();
        for i in 1..=3 {
            let (body, error) =
                read_raw(post(&server, "/chat/completions", &stream_body(&format!("ANVIL_REQ_10_{i}"))).await).await;
            assert!(error.is_none() && body.ends_with(b"data: [DONE]\n\n"), "request {i}");
        }
        assert!(refused_within(addr, Duration::from_millis(250)).await, "the port stayed open");
        let down_at = Instant::now();
        let url = format!("http://{addr}/health");
        while client().get(&url).send().await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(down_at.elapsed() >= Duration::from_millis(250), "{:?}", down_at.elapsed());
        let (body, error) = read_raw(post(&server, "/chat/completions", &stream_body("ANVIL_REQ_10_4")).await).await;
        assert!(error.is_none() && body.ends_with(b"data: [DONE]\n\n"));
        let stats = server.stats();
        assert_eq!((stats.faults_injected["restart"], stats.faults_injected["connection_refused"]), (1, 1));
        assert_eq!((stats.faults_injected["restart_cut"], stats.requests_completed), (0, 4));
        assert_eq!(server.addr(), addr);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn restart_cuts_streams_in_flight() {
    within(async {
        let mut profile = with_faults(|f| {
            f.restart_after_requests = Some(2);
            f.restart_downtime_ms = 200;
        });
        profile.time_per_output_token = Duration::from_millis(2);
        profile.content_tokens = (5000, 5000);
        let server = MockServer::start(profile).await.expect("start");
        let mut long = post(&server, "/chat/completions", &stream_body("ANVIL_REQ_11_1")).await;
        assert!(long.chunk().await.expect("read").is_some());
        let short = chat_body("ANVIL_REQ_11_2", json!({"stream": true, "max_tokens": 4}));
        let (body, error) = read_raw(post(&server, "/chat/completions", &short).await).await;
        assert!(error.is_none() && body.ends_with(b"data: [DONE]\n\n"));
        let (_, error) = read_raw(long).await;
        assert!(error.is_some(), "the long stream survived the restart");
        let stats = wait_for_stats(&server, |s| s.active_requests == 0).await;
        assert_eq!((stats.faults_injected["restart"], stats.faults_injected["restart_cut"]), (1, 1));
        assert_eq!((stats.requests_completed, stats.requests_disconnected), (1, 0));
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn ground_truth_records_when_each_chunk_left() {
    within(async {
        let profile = Profile { prefill_tok_s: Some(1000.0), prefix_cache: false, record_ground_truth: true, ..fast() };
        let server = MockServer::start(profile).await.expect("start");
        let prompt = format!("{}ANVIL_REQ_12_1", "w ".repeat(40));
        let body = json!({"prompt": prompt, "stream": true, "stream_options": {"include_usage": true}});
        let (raw, error) = read_raw(post(&server, "/completions", &body).await).await;
        assert!(error.is_none());
        let text = std::str::from_utf8(&raw).expect("utf-8");
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        let chunks: Vec<Value> = events
            .iter()
            .filter(|e| **e != "data: [DONE]")
            .map(|e| parse(e.strip_prefix("data: ").expect("data")))
            .collect();
        let usage = &chunks.last().expect("usage chunk")["usage"];
        // No cache, so every prompt token is prefilled, at 1000 per second.
        let prefill_ns = usage["prompt_tokens"].as_u64().expect("prompt_tokens") * 1_000_000;

        let records = server.ground_truth();
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record.marker.as_deref(), Some("ANVIL_REQ_12_1"));
        assert_eq!(record.chunks.len(), events.len());
        let first_content = record.chunks.iter().find(|c| c.kind == ChunkKind::Content).expect("content");
        assert!(first_content.offset_ns >= prefill_ns, "{} < {prefill_ns}", first_content.offset_ns);
        assert!(record.chunks.windows(2).all(|w| w[0].offset_ns <= w[1].offset_ns));
        let kinds: Vec<ChunkKind> = record.chunks.iter().map(|c| c.kind).collect();
        assert_eq!(&kinds[kinds.len() - 3..], &[ChunkKind::Finish, ChunkKind::Usage, ChunkKind::Done]);
        let streamed: u64 = chunks.iter().filter_map(|c| c.pointer("/choices/0/text")?.as_str()).map(tokens_in).sum();
        assert_eq!(streamed, usage["completion_tokens"].as_u64().expect("completion_tokens"));
        assert_eq!(record.chunks.iter().map(|c| u64::from(c.tokens)).sum::<u64>(), streamed);
        let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
        assert!(
            u128::from(record.arrival_unix_ns) <= now_ns && now_ns - u128::from(record.arrival_unix_ns) < 5_000_000_000
        );

        let url = format!("http://{}/mock/ground-truth", server.addr());
        let served = client().get(url).send().await.expect("sent").bytes().await.expect("body");
        let served: Value = serde_json::from_slice(&served).expect("JSON");
        let served: Vec<GroundTruthRecord> = serde_json::from_value(served["requests"].clone()).expect("records");
        assert_eq!(served, records);
        server.shutdown().await;

        let server = MockServer::start(fast()).await.expect("start");
        let _ = read_raw(post(&server, "/completions", &body).await).await;
        assert!(server.ground_truth().is_empty(), "recorded while off");
        server.shutdown().await;
    })
    .await;
}
