//! Agent sessions: the tool calls of a conversation's answers and the tool results fed back.
//!
//! When an answer of a conversation that offers tools calls a tool, the next request is a tool
//! turn: the same prompt, then the model's call(s) as it sent them and one tool result per call
//! (`result_tokens` tokens of seeded text), after the tool's latency. The rounds of a user turn
//! (calls and results) stay in the history, between the user message and the final answer, so
//! later turns carry them too. Each API spells them its own way (`round_items`): chat an
//! assistant message with `tool_calls` and `tool` messages; Responses `function_call` and
//! `function_call_output` items; Messages an assistant `tool_use` block and a user
//! `tool_result` block. They are spliced into the body the conversation already built
//! (`splice`), off the worker's hot path (a turn is built before its wait).

use std::time::Duration;

use serde_json::{Value, json};

use super::exchange::CalledTool;
use crate::plan::scenario::Api;

/// One tool round: the calls an answer made and the result sent back for each.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub calls: Vec<CalledTool>,
    /// The result text (one per call, the same text).
    pub result: String,
}

/// Why an agent session's user turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentEnd {
    /// An answer called no tool.
    NoCall,
    /// `max_tool_turns` tool turns were sent and the last answer still called one.
    Cap,
}

/// The agent side of one conversation.
#[derive(Debug, Default)]
pub struct AgentTurns {
    /// Per history pair (user message, final answer), the rounds between them.
    pub rounds: Vec<Vec<Round>>,
    /// The rounds of the user turn in progress.
    pub current: Vec<Round>,
    /// The tool latency to sleep before the next request, when it is a tool turn.
    pub pending_latency: Option<Duration>,
    /// The latency drawn for the latest tool turn (recorded on its request).
    pub latency: Duration,
    /// Estimated tokens of the rounds in `rounds` (kept beside them).
    pub round_tokens: Vec<f64>,
}

impl AgentTurns {
    /// The next request is a tool turn: the latency to wait after the answer ended.
    pub fn take_latency(&mut self) -> Option<Duration> {
        self.pending_latency.take()
    }
}

/// The call's id, or one made up from its place when the server gave none.
fn call_id(call: &CalledTool, round: usize, k: usize) -> String {
    if call.id.is_empty() { format!("call_{round}_{k}") } else { call.id.clone() }
}

/// The wire items of one round for `api`.
fn round_items(api: Api, round: &Round, at: usize) -> Vec<Value> {
    let ids: Vec<String> = round.calls.iter().enumerate().map(|(k, c)| call_id(c, at, k)).collect();
    match api {
        Api::Responses => {
            let calls = round.calls.iter().zip(&ids).map(
                |(c, id)| json!({"type": "function_call", "call_id": id, "name": c.name, "arguments": c.arguments}),
            );
            let results =
                ids.iter().map(|id| json!({"type": "function_call_output", "call_id": id, "output": round.result}));
            calls.chain(results).collect()
        }
        Api::Messages => {
            let uses: Vec<Value> = round
                .calls
                .iter()
                .zip(&ids)
                .map(|(c, id)| {
                    // `input` is an object: arguments that are not one are sent as an empty one.
                    let input = serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"type": "tool_use", "id": id, "name": c.name, "input": input})
                })
                .collect();
            let results: Vec<Value> = ids
                .iter()
                .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": round.result}))
                .collect();
            vec![json!({"role": "assistant", "content": uses}), json!({"role": "user", "content": results})]
        }
        _ => {
            let calls: Vec<Value> = round
                .calls
                .iter()
                .zip(&ids)
                .map(|(c, id)| {
                    json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            let mut items = vec![json!({"role": "assistant", "content": null, "tool_calls": calls})];
            items.extend(ids.iter().map(|id| json!({"role": "tool", "tool_call_id": id, "content": round.result})));
            items
        }
    }
}

/// `body` (as built from the conversation's messages) with the rounds spliced in: each history
/// pair's rounds after its user message, the current user turn's at the end. `history` is the
/// number of history messages (two per pair) before the new user message, which is the body's
/// last item. The body unchanged when there is nothing to splice or it has no item list.
pub fn splice(api: Api, body: Vec<u8>, history: usize, rounds: &[Vec<Round>], current: &[Round]) -> Vec<u8> {
    if current.is_empty() && rounds.iter().all(Vec::is_empty) {
        return body;
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else { return body };
    let key = if api == Api::Responses { "input" } else { "messages" };
    let Some(Value::Array(items)) = v.get_mut(key) else { return body };
    let Some(first) = items.len().checked_sub(history + 1) else { return body };
    for (at, r) in current.iter().enumerate() {
        items.extend(round_items(api, r, rounds.len() * 1000 + at));
    }
    // Back to front, so earlier places stay put.
    for (pair, pair_rounds) in rounds.iter().enumerate().rev() {
        let after_user = first + 2 * pair + 1;
        if after_user > items.len() {
            continue;
        }
        let spliced: Vec<Value> =
            pair_rounds.iter().enumerate().flat_map(|(n, r)| round_items(api, r, pair * 1000 + n)).collect();
        items.splice(after_user..after_user, spliced);
    }
    serde_json::to_vec(&v).unwrap_or(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(id: &str) -> Round {
        Round {
            calls: vec![CalledTool { id: id.into(), name: "get".into(), arguments: "{\"a\":1}".into() }],
            result: "R".into(),
        }
    }

    #[test]
    fn chat_rounds_follow_their_user_message_and_the_current_ones_end_the_list() {
        let body = serde_json::to_vec(&json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"}]}))
        .unwrap();
        let out = splice(Api::Chat, body, 2, &[vec![round("c1")]], &[round("c2")]);
        let v: Value = serde_json::from_slice(&out).unwrap();
        let roles: Vec<&str> = v["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool"]);
        assert_eq!(v["messages"][2]["tool_calls"][0]["id"], "c1");
        assert_eq!(v["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(v["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "R"}));
        assert_eq!(v["messages"][7]["tool_call_id"], "c2");
    }

    #[test]
    fn responses_and_messages_spellings() {
        let body =
            serde_json::to_vec(&json!({"input": [{"type": "message", "role": "user", "content": "u"}]})).unwrap();
        let v: Value = serde_json::from_slice(&splice(Api::Responses, body, 0, &[], &[round("c")])).unwrap();
        assert_eq!(
            v["input"][1],
            json!({"type": "function_call", "call_id": "c", "name": "get", "arguments": "{\"a\":1}"})
        );
        assert_eq!(v["input"][2], json!({"type": "function_call_output", "call_id": "c", "output": "R"}));
        let body = serde_json::to_vec(&json!({"messages": [{"role": "user", "content": "u"}]})).unwrap();
        let v: Value = serde_json::from_slice(&splice(Api::Messages, body, 0, &[], &[round("c")])).unwrap();
        assert_eq!(
            v["messages"][1]["content"][0],
            json!({"type": "tool_use", "id": "c", "name": "get", "input": {"a": 1}})
        );
        assert_eq!(
            v["messages"][2],
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "R"}]})
        );
    }

    #[test]
    fn nothing_to_splice_leaves_the_body_as_it_was() {
        let body = b"{\"messages\":[]}".to_vec();
        assert_eq!(splice(Api::Chat, body.clone(), 0, &[vec![]], &[]), body);
    }
}
