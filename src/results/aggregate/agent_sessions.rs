//! Agent sessions' figures in a level's `conversations` block, from the per-request records
//! alone (a rebuild recomputes them): tool turns (requests carrying tool results), user turns
//! and how each ended (its last answer called no tool, or still called one: the
//! `max_tool_turns` cap, or a failure, ended it), tool turns per session, and the tool latency
//! slept (in total and per session). Session duration and requests per session are the
//! `totals` beside it.
//!
//! Present when any record of the level says whether it was a tool turn.

use std::collections::BTreeMap;

use serde::Serialize;

use super::stats::Summary;
use crate::request::record::RequestTiming;

/// The agent figures of a level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSummary {
    /// Requests that carried tool results.
    pub tool_turns: u64,
    /// Planned user turns that were sent (each followed by its tool turns).
    pub user_turns: u64,
    /// User turns whose last answer called no tool.
    pub ended_by_no_call: u64,
    /// User turns whose last answer still called a tool (the cap was reached).
    pub ended_by_cap: u64,
    /// Tool turns per session.
    pub tool_turns_per_session: Option<Summary>,
    /// The tool latency slept before every tool turn, summed over the level, in ms.
    pub tool_latency_ms_total: u64,
    /// The tool latency slept per session, in ms.
    pub tool_latency_ms_per_session: Option<Summary>,
}

/// The figures of `records` (those of conversations); `None` without agent sessions.
pub fn summarise(records: &[&RequestTiming]) -> Option<AgentSummary> {
    if !records.iter().any(|r| r.replay.tool_turn.is_some()) {
        return None;
    }
    // Per session: tool turns and latency; per (session, turn): the last answer (by start).
    let mut sessions: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut turns: BTreeMap<(&str, u32), (f64, bool)> = BTreeMap::new();
    let mut out = AgentSummary {
        tool_turns: 0,
        user_turns: 0,
        ended_by_no_call: 0,
        ended_by_cap: 0,
        tool_turns_per_session: None,
        tool_latency_ms_total: 0,
        tool_latency_ms_per_session: None,
    };
    for r in records {
        let session = r.replay.session.as_deref().unwrap_or_default();
        let s = sessions.entry(session).or_default();
        if r.replay.tool_turn == Some(true) {
            out.tool_turns += 1;
            s.0 += 1;
            let latency = r.replay.tool_latency_ms.unwrap_or(0);
            s.1 += latency;
            out.tool_latency_ms_total = out.tool_latency_ms_total.saturating_add(latency);
        } else {
            out.user_turns += 1;
        }
        let called = r.tool_calls.as_ref().is_some_and(|t| t.calls > 0);
        let last = turns.entry((session, r.replay.turn.unwrap_or(0))).or_insert((f64::MIN, false));
        if r.start_offset_ms >= last.0 {
            *last = (r.start_offset_ms, called);
        }
    }
    out.ended_by_cap = turns.values().filter(|t| t.1).count() as u64;
    out.ended_by_no_call = turns.len() as u64 - out.ended_by_cap;
    out.tool_turns_per_session = Summary::of(sessions.values().map(|s| s.0 as f64).collect());
    out.tool_latency_ms_per_session = Summary::of(sessions.values().map(|s| s.1 as f64).collect());
    Some(out)
}
