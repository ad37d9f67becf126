//! The client's readers against the simulator's writers, where the two crates share a format:
//! the canary marker a contaminated answer makes up when it knows no other request's, and the
//! Prometheus text of `/metrics`, each read with the client's own parsers.

use anvil_load::plan::session::canary::{cross_session_markers, parse_turn_marker, turn_marker};
use anvil_load::request::server_metrics::{Engine, Norm, normalise, parse};
use anvil_load::request::workload::canary::{canary_marker, check_canary, parse_request_marker};
use anvil_sim::{MockServer, MockStatsSnapshot, Profile, metrics};
use serde_json::{Value, json};

/// The answer of a fresh simulator that swaps every answer's marker, to a prompt carrying `own`:
/// nobody else's marker is known yet, so the one it carries is made up.
async fn swapped_answer(own: &str) -> String {
    let mut profile = Profile::named("fast").expect("fast");
    profile.faults.contamination_swapped = 1.0;
    let server = MockServer::start(profile).await.expect("start");
    let body = json!({"messages": [{"role": "user", "content": format!("Begin your reply with {own}.")}]});
    let answer = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(format!("{}/chat/completions", server.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent")
        .bytes()
        .await
        .expect("body");
    let answer: Value = serde_json::from_slice(&answer).expect("JSON");
    assert_eq!(server.stats().contaminated_responses, 1);
    server.shutdown().await;
    answer["choices"][0]["message"]["content"].as_str().expect("content").to_owned()
}

/// A made-up marker is another request of the same run as the client writes and reads it: the
/// neighbouring index, counted as foreign (contamination), not as garbled.
#[tokio::test]
async fn a_made_up_marker_is_another_request_of_the_same_run() {
    for (index, neighbour) in [(0, 1), (12, 11)] {
        let own = canary_marker(7, index);
        let content = swapped_answer(&own).await;
        let made_up = content.split_whitespace().next().expect("a first word");
        assert_eq!(parse_request_marker(made_up), Some(("7", neighbour)), "{content}");
        let check = check_canary(&own, &content, true);
        assert_eq!((check.foreign_marker_count, check.malformed_marker_count), (1, 0), "{content}");
    }
    // A conversation's turn: the neighbouring conversation's first turn, another session.
    let own = turn_marker(7, 3, 2);
    let content = swapped_answer(&own).await;
    let made_up = content.split_whitespace().next().expect("a first word");
    assert_eq!(parse_turn_marker(made_up), Some(("7", 2, 1)), "{content}");
    assert_eq!(cross_session_markers(&own, &content), 1, "{content}");
}

fn stats() -> MockStatsSnapshot {
    MockStatsSnapshot {
        active_requests: 3,
        prompt_tokens: 1000,
        cached_tokens: 400,
        completion_tokens: 250,
        requests_completed: 7,
        ..MockStatsSnapshot::default()
    }
}

fn profile(name: &str) -> Profile {
    Profile::named(name).expect("a named profile")
}

#[test]
fn vllm_names_carry_the_simulator_counts() {
    let body = metrics::render(&profile("fast"), &stats());
    let n = normalise(&parse(body.as_bytes()).expect("parses").series);
    assert_eq!(n.engine, Some(Engine::Vllm));
    assert_eq!(n.values[&Norm::Running], 3.0);
    assert_eq!(n.values[&Norm::Waiting], 0.0);
    assert_eq!(n.values[&Norm::PromptTokens], 1000.0);
    assert_eq!(n.values[&Norm::GenerationTokens], 250.0);
    assert_eq!(n.values[&Norm::RequestsSucceeded], 7.0);
    assert_eq!(n.values[&Norm::PrefixCacheQueries], 1000.0);
    assert_eq!(n.values[&Norm::PrefixCacheHits], 400.0);
}

#[test]
fn the_spec_profile_counts_drafts_per_chunk() {
    let s = MockStatsSnapshot { tokens_streamed: 300, chunks_streamed: 100, ..stats() };
    let n = normalise(&parse(metrics::render(&profile("spec"), &s).as_bytes()).expect("parses").series);
    assert_eq!(n.values[&Norm::SpecDecodeDrafts], 100.0);
    assert_eq!(n.values[&Norm::SpecDecodeDraftTokens], 300.0);
    assert_eq!(n.values[&Norm::SpecDecodeAcceptedTokens], 200.0);
}

#[test]
fn llamacpp_names_count_evaluated_prompt_tokens() {
    let n = normalise(&parse(metrics::render(&profile("llamacpp"), &stats()).as_bytes()).expect("parses").series);
    assert_eq!(n.engine, Some(Engine::Llamacpp));
    assert_eq!(n.values[&Norm::PromptTokensComputed], 600.0);
    assert_eq!(n.values[&Norm::PrefixCacheHits], 400.0);
    assert_eq!(n.values[&Norm::PrefixCacheQueries], 1000.0);
    assert_eq!(n.values[&Norm::GenerationTokens], 250.0);
    assert_eq!(n.values[&Norm::Running], 3.0);
    assert!(!n.values.contains_key(&Norm::PromptTokens));
}
