//! Tool calls: when a request offers tools and its `tool_choice` allows a call, the simulated
//! model answers with one call instead of text, in the request's API spelling.
//!
//! The rule, deterministic: a request whose choice is `none` (chat and Responses `"none"`,
//! Messages `{"type": "none"}`) gets text. A request whose choice names a tool calls that tool.
//! Otherwise it calls a tool unless its input ends with `tool_turns` or more tool results in a
//! row (chat `role: "tool"` messages, Responses `function_call_output` items, Messages
//! `tool_result` blocks of the last user turns): so an agent session of this simulator makes
//! `tool_turns` calls, then answers in text (`required` calls whatever the results). The tool
//! called is the `n`-th offered one for the simulator's `n`-th call (round robin); its
//! arguments are `json_instance::instance(parameters, n)`, or, for the fraction
//! `faults.invalid_tool_arguments` of the calls (every call whose `n · fraction` crosses a
//! whole number), `json_instance::broken(parameters, n)`. The arguments stream in pieces of
//! `PIECE_BYTES` bytes, one token each.
//!
//! Ground truth (`/mock/stats` `tool_calls`): calls made, invalid arguments injected, and tool
//! results received (the trailing results of each request, so a session's results count once),
//! and of those, the ones whose id names no call it made (`results_unmatched`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api_wire::WireApi;

/// Bytes of arguments per streamed piece (one token).
pub(crate) const PIECE_BYTES: usize = 4;

/// The call a response makes.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub name: String,
    pub id: String,
    pub arguments: String,
}

impl ToolCall {
    /// The arguments in streamed pieces (`PIECE_BYTES` bytes, cut at character boundaries).
    pub fn pieces(&self) -> Vec<(usize, usize)> {
        let s = &self.arguments;
        let mut out = Vec::new();
        let mut start = 0;
        while start < s.len() {
            let mut end = (start + PIECE_BYTES).min(s.len());
            while !s.is_char_boundary(end) {
                end += 1;
            }
            out.push((start, end));
            start = end;
        }
        out
    }
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct ToolStats {
    calls: AtomicU64,
    invalid: AtomicU64,
    results: AtomicU64,
    unmatched: AtomicU64,
}

/// `/mock/stats` `tool_calls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallCounts {
    /// Tool calls answered.
    pub calls_made: u64,
    /// Calls whose arguments were broken on purpose (`faults.invalid_tool_arguments`).
    pub invalid_injected: u64,
    /// Tool results received: the trailing results of each request.
    pub results_received: u64,
    /// Received results whose id (chat `tool_call_id`, Responses `call_id`, Messages
    /// `tool_use_id`) names no call this simulator made.
    #[serde(default)]
    pub results_unmatched: u64,
}

impl ToolCallCounts {
    pub fn is_zero(&self) -> bool {
        *self == ToolCallCounts::default()
    }
}

impl ToolStats {
    pub fn snapshot(&self) -> ToolCallCounts {
        ToolCallCounts {
            calls_made: self.calls.load(Ordering::Relaxed),
            invalid_injected: self.invalid.load(Ordering::Relaxed),
            results_received: self.results.load(Ordering::Relaxed),
            results_unmatched: self.unmatched.load(Ordering::Relaxed),
        }
    }
}

/// The tools a body offers: `(name, parameters)` in any of the three spellings.
fn offered(body: &Value) -> Vec<(&str, &Value)> {
    static EMPTY: Value = Value::Null;
    let Some(Value::Array(tools)) = body.get("tools") else { return Vec::new() };
    tools
        .iter()
        .filter_map(|t| {
            let def = t.get("function").filter(|f| f.is_object()).unwrap_or(t);
            let name = def.get("name")?.as_str()?;
            let params = def.get("parameters").or_else(|| def.get("input_schema")).unwrap_or(&EMPTY);
            Some((name, params))
        })
        .collect()
}

/// `(allowed, required, named)` from `tool_choice`.
fn choice(body: &Value) -> (bool, bool, Option<&str>) {
    match body.get("tool_choice") {
        None | Some(Value::Null) => (true, false, None),
        Some(Value::String(s)) => (s != "none", s == "required" || s == "any", None),
        Some(Value::Object(o)) => {
            let kind = o.get("type").and_then(Value::as_str).unwrap_or("auto");
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .or_else(|| o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str));
            (kind != "none", kind != "auto", name)
        }
        Some(_) => (true, false, None),
    }
}

/// Tool results at the end of the input, in a row.
fn trailing_results(api: WireApi, body: &Value) -> u64 {
    let items = match api {
        WireApi::Responses => body.get("input"),
        _ => body.get("messages"),
    };
    let Some(Value::Array(items)) = items else { return 0 };
    let mut n = 0;
    for item in items.iter().rev() {
        let results = match api {
            WireApi::OpenAi => u64::from(item.get("role").and_then(Value::as_str) == Some("tool")),
            WireApi::Responses => u64::from(item.get("type").and_then(Value::as_str) == Some("function_call_output")),
            WireApi::Messages => match item.get("content") {
                Some(Value::Array(blocks)) if item.get("role").and_then(Value::as_str) == Some("user") => {
                    blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")).count()
                        as u64
                }
                _ => 0,
            },
        };
        if results == 0 {
            break;
        }
        n += results;
    }
    n
}

/// Whether `id` is one this simulator gave (`call_<n, 8 hex digits>`, `n` below `made`).
fn is_made(id: &str, made: u64) -> bool {
    id.strip_prefix("call_")
        .filter(|h| h.len() == 8)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .is_some_and(|n| n < made)
}

/// The ids the trailing results answer.
fn trailing_ids(api: WireApi, body: &Value) -> Vec<String> {
    let items = match api {
        WireApi::Responses => body.get("input"),
        _ => body.get("messages"),
    };
    let Some(Value::Array(items)) = items else { return Vec::new() };
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let mut ids = Vec::new();
    for item in items.iter().rev() {
        let found: Vec<String> = match api {
            WireApi::OpenAi if item.get("role").and_then(Value::as_str) == Some("tool") => {
                vec![text(item, "tool_call_id").unwrap_or_default()]
            }
            WireApi::Responses if item.get("type").and_then(Value::as_str) == Some("function_call_output") => {
                vec![text(item, "call_id").unwrap_or_default()]
            }
            WireApi::Messages if item.get("role").and_then(Value::as_str) == Some("user") => {
                match item.get("content") {
                    Some(Value::Array(blocks)) => blocks
                        .iter()
                        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                        .map(|b| text(b, "tool_use_id").unwrap_or_default())
                        .collect(),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        if found.is_empty() {
            break;
        }
        ids.extend(found);
    }
    ids
}

/// The call the response to `body` makes, by the module's rule; counts the results received
/// and the call made.
pub(crate) fn plan(
    api: WireApi,
    body: &Value,
    tool_turns: u32,
    invalid_fraction: f64,
    stats: &ToolStats,
) -> Option<ToolCall> {
    let tools = offered(body);
    let results = trailing_results(api, body);
    if results > 0 {
        stats.results.fetch_add(results, Ordering::Relaxed);
        let made = stats.calls.load(Ordering::Relaxed);
        let unmatched = trailing_ids(api, body).iter().filter(|id| !is_made(id, made)).count() as u64;
        stats.unmatched.fetch_add(unmatched, Ordering::Relaxed);
    }
    let (allowed, required, named) = choice(body);
    if tools.is_empty() || !allowed {
        return None;
    }
    if !required && named.is_none() && results >= u64::from(tool_turns.max(1)) {
        return None;
    }
    let n = stats.calls.fetch_add(1, Ordering::Relaxed);
    let (name, params) = match named.and_then(|want| tools.iter().find(|(name, _)| *name == want)) {
        Some(t) => *t,
        None => tools[(n % tools.len() as u64) as usize],
    };
    let f = invalid_fraction.clamp(0.0, 1.0);
    let invalid = f > 0.0 && ((n + 1) as f64 * f).floor() > (n as f64 * f).floor();
    let arguments = if invalid {
        stats.invalid.fetch_add(1, Ordering::Relaxed);
        super::json_instance::broken(params, n).0
    } else {
        super::json_instance::instance(params, n).to_string()
    };
    Some(ToolCall { name: name.to_string(), id: format!("call_{n:08x}"), arguments })
}

/// The output of a response that is `call`: one token per piece of its arguments, cut at
/// `max_tokens` (then `length`, arguments cut short), else a `tool_calls` end.
pub(crate) fn output_plan(call: &ToolCall, max_tokens: Option<u32>) -> super::plan::OutputPlan {
    let pieces = u32::try_from(call.pieces().len()).unwrap_or(u32::MAX).max(1);
    let budget = max_tokens.unwrap_or(u32::MAX);
    let (content, finish) =
        if pieces > budget { (budget, super::plan::Finish::Length) } else { (pieces, super::plan::Finish::ToolCalls) };
    super::plan::OutputPlan { reasoning: 0, content, finish, completion_tokens: content, eos_step: false }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_rule_calls_until_enough_results_came_back() {
        let stats = ToolStats::default();
        let tools = json!([{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]);
        let first = json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools});
        let call = plan(WireApi::OpenAi, &first, 1, 0.0, &stats).expect("a call");
        assert_eq!(call.name, "a");
        assert!(serde_json::from_str::<Value>(&call.arguments).unwrap().get("x").is_some());
        let after = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}, {"role": "tool", "tool_call_id": "c", "content": "ok"}], "tools": tools});
        assert!(plan(WireApi::OpenAi, &after, 1, 0.0, &stats).is_none());
        let none = json!({"messages": [], "tools": tools, "tool_choice": "none"});
        assert!(plan(WireApi::OpenAi, &none, 1, 0.0, &stats).is_none());
        assert_eq!(
            stats.snapshot(),
            ToolCallCounts { calls_made: 1, invalid_injected: 0, results_received: 1, results_unmatched: 1 }
        );
    }

    #[test]
    fn a_fraction_of_the_arguments_is_broken() {
        let stats = ToolStats::default();
        let body = json!({"input": "x", "tools": [{"type": "function", "name": "b", "parameters": {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]}}]});
        for _ in 0..10 {
            plan(WireApi::Responses, &body, 1, 0.3, &stats).expect("a call");
        }
        assert_eq!(stats.snapshot().invalid_injected, 3);
        let call = ToolCall { name: "b".into(), id: "c".into(), arguments: "{\"é\":1234}".into() };
        let joined: String = call.pieces().iter().map(|&(a, b)| &call.arguments[a..b]).collect();
        assert_eq!(joined, call.arguments);
    }
}
