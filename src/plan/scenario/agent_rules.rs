//! Agent sessions: the keys of `[workload.tools]` that feed tool results back into conversations
//! (`[workload.sessions]`).
//!
//! In a conversation that offers tools, an answer that calls a tool is followed by a tool turn:
//! the same prompt, then the model's call and a tool result of `result_tokens` tokens (a
//! distribution), sent `latency` (a distribution) after the answer ended. A user turn is followed by tool turns until an answer calls
//! no tool or `max_tool_turns` tool turns were sent; then the conversation's next planned user
//! turn (after its think time) goes on.

use serde::Serialize;

use super::checker::{Checker, ScenarioError};
use super::raw::RawTools;
use crate::plan::session::Dist;

/// Most tool turns after one user turn.
pub const MAX_TOOL_TURNS: i64 = 64;
/// Largest tool result, in tokens.
pub const MAX_RESULT_TOKENS: i64 = 1_000_000;
/// Default tool result size, in tokens.
const DEFAULT_RESULT_TOKENS: f64 = 256.0;
/// Default most tool turns after one user turn.
const DEFAULT_TOOL_TURNS: i64 = 4;

/// How tool results are fed back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSpec {
    /// Most tool turns after one user turn.
    pub max_tool_turns: u32,
    /// Tokens of each tool result, drawn per result.
    pub result_tokens: Dist,
    /// The tool's latency in seconds, drawn per tool turn: slept between an answer that calls a
    /// tool and the tool turn.
    pub latency_s: Dist,
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
    let result_tokens = match &raw.result_tokens {
        None => Dist::Constant { value: DEFAULT_RESULT_TOKENS },
        Some(v) => {
            super::session_rules::count_dist(c, "workload.tools.result_tokens", v, 1.0, MAX_RESULT_TOKENS as f64)?
        }
    };
    let latency_s = match &raw.latency {
        None => Dist::Constant { value: 0.0 },
        Some(v) => super::session_rules::time_dist(c, "workload.tools.latency", v)?,
    };
    Ok(Some(AgentSpec { max_tool_turns: turns as u32, result_tokens, latency_s }))
}
