//! Agent sessions: the keys of `[workload.tools]` that feed tool results back into conversations
//! (`[workload.sessions]`).
//!
//! In a conversation that offers tools, an answer that calls a tool is followed by a tool turn:
//! the same prompt, then the model's call and a tool result of `result_tokens` tokens, sent
//! `latency` after the answer ended. A user turn is followed by tool turns until an answer calls
//! no tool or `max_tool_turns` tool turns were sent; then the conversation's next planned user
//! turn (after its think time) goes on.

use std::time::Duration;

use serde::Serialize;

use super::checker::{Checker, ScenarioError};
use super::raw::RawTools;

/// Most tool turns after one user turn.
pub const MAX_TOOL_TURNS: i64 = 64;
/// Largest tool result, in tokens.
pub const MAX_RESULT_TOKENS: i64 = 1_000_000;
/// Default tool result size, in tokens.
const DEFAULT_RESULT_TOKENS: i64 = 256;
/// Default most tool turns after one user turn.
const DEFAULT_TOOL_TURNS: i64 = 4;

/// How tool results are fed back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSpec {
    /// Most tool turns after one user turn.
    pub max_tool_turns: u32,
    /// Tokens of each tool result.
    pub result_tokens: u32,
    /// The tool's latency, slept between an answer that calls a tool and the tool turn.
    #[serde(serialize_with = "as_ms")]
    pub latency: Duration,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// The agent keys of `[workload.tools]`: `Some` for conversations, refused otherwise.
pub(super) fn agent(c: &Checker, raw: &RawTools, sessions: bool) -> Result<Option<AgentSpec>, ScenarioError> {
    if !sessions {
        for (key, set) in [
            ("workload.tools.max_tool_turns", raw.max_tool_turns.is_some()),
            ("workload.tools.result_tokens", raw.result_tokens.is_some()),
            ("workload.tools.latency", raw.latency.is_some()),
        ] {
            if set {
                return Err(c.err(
                    key,
                    "applies to agent sessions only: tool results are fed back into conversations",
                    "add [workload.sessions], or remove the key",
                ));
            }
        }
        return Ok(None);
    }
    let turns = raw.max_tool_turns.unwrap_or(DEFAULT_TOOL_TURNS);
    if !(1..=MAX_TOOL_TURNS).contains(&turns) {
        return Err(c.err(
            "workload.tools.max_tool_turns",
            format!("{turns} is not between 1 and {MAX_TOOL_TURNS}"),
            format!("set e.g. {DEFAULT_TOOL_TURNS}"),
        ));
    }
    let tokens = raw.result_tokens.unwrap_or(DEFAULT_RESULT_TOKENS);
    if !(1..=MAX_RESULT_TOKENS).contains(&tokens) {
        return Err(c.err(
            "workload.tools.result_tokens",
            format!("{tokens} is not between 1 and {MAX_RESULT_TOKENS}"),
            format!("set e.g. {DEFAULT_RESULT_TOKENS}"),
        ));
    }
    let latency = match raw.latency.as_deref().map(str::trim) {
        None | Some("0" | "0s" | "0ms") => Duration::ZERO,
        Some(text) => c.duration("workload.tools.latency", Some(text), Duration::ZERO)?,
    };
    Ok(Some(AgentSpec { max_tool_turns: turns as u32, result_tokens: tokens as u32, latency }))
}
