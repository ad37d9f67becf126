//! What the simulator's tests share: a time limit, a loopback client, request bodies and the
//! token rule of simulated text.

use std::time::Duration;

use anvil_sim::{MockServer, MockStatsSnapshot, Profile};
use serde_json::{Value, json};

/// No test may take longer than this, whatever goes wrong.
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn within<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, test).await.expect("test timed out")
}

pub fn fast() -> Profile {
    Profile::named("fast").expect("fast profile")
}

pub fn client() -> reqwest::Client {
    // Loopback only; a proxy from the environment must not get in the way.
    reqwest::Client::builder().no_proxy().build().expect("client")
}

pub async fn post(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", server.base_url()))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).expect("serialize"))
        .send()
        .await
        .expect("request sent")
}

pub fn parse(event: &str) -> Value {
    serde_json::from_str(event).unwrap_or_else(|e| panic!("bad chunk {event:?}: {e}"))
}

/// Tokens in a piece of simulated text: every word has a leading space, the canary does not.
pub fn tokens_in(text: &str) -> u64 {
    (text.matches(' ').count() + usize::from(!text.is_empty() && !text.starts_with(' '))) as u64
}

pub fn chat_body(user: &str, extra: Value) -> Value {
    let mut body = json!({
        "model": "test-model",
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": user}],
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}

pub async fn wait_for_stats(server: &MockServer, done: impl Fn(&MockStatsSnapshot) -> bool) -> MockStatsSnapshot {
    loop {
        let stats = server.stats();
        if done(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
