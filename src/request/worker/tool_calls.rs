//! A response's tool calls as they stream: pieces gathered per call (by the index the API gives
//! it), then, once the response ended, judged against the tool set (`finish`).
//!
//! Nothing here runs for a response without tool calls: the stream state creates the gatherer
//! at the first piece.

use std::sync::Arc;
use std::time::Duration;

use crate::plan::scenario::tools_rules::ToolSet;
use crate::request::openai::ToolPiece;
use crate::request::record::ToolCallRecord;

/// Most calls kept per response (pieces of further calls are counted, not kept).
const MAX_CALLS: usize = 256;
/// Most argument bytes kept per call (longer arguments are counted, and judged `not_json`).
const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// One call, as its pieces arrived.
#[derive(Debug, Default)]
struct Call {
    index: u64,
    name: String,
    arguments: String,
    /// Bytes of arguments, kept or not.
    bytes: u64,
    /// The whole arguments as a closing event gave them (Responses), when no fragment came.
    whole: Option<String>,
}

/// The calls of one response so far.
#[derive(Debug, Default)]
pub struct ToolCalls {
    calls: Vec<Call>,
    first: Option<Duration>,
    last_argument: Option<Duration>,
    /// Pieces of calls beyond `MAX_CALLS`.
    dropped: u32,
}

impl ToolCalls {
    /// One piece, arrived `at` since the request started.
    pub fn piece(&mut self, p: &ToolPiece<'_>, at: Duration) {
        self.first.get_or_insert(at);
        let at_index = self.calls.iter().position(|c| c.index == p.index);
        let call = match at_index {
            Some(i) => &mut self.calls[i],
            None if self.calls.len() < MAX_CALLS => {
                self.calls.push(Call { index: p.index, ..Call::default() });
                let last = self.calls.len() - 1;
                &mut self.calls[last]
            }
            None => {
                self.dropped = self.dropped.saturating_add(1);
                return;
            }
        };
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            call.name.push_str(name);
        }
        if let Some(fragment) = p.arguments.as_deref().filter(|a| !a.is_empty()) {
            call.bytes += fragment.len() as u64;
            if call.arguments.len() + fragment.len() <= MAX_ARGUMENT_BYTES {
                call.arguments.push_str(fragment);
            }
            self.last_argument = Some(at);
        }
        if let Some(whole) = p.whole_arguments.as_deref() {
            call.whole = Some(whole.chars().take(MAX_ARGUMENT_BYTES).collect());
        }
    }

    /// The record, judged against `set`. `only_tools` says the response streamed nothing but
    /// tool calls, so the server's `completion_tokens` (`usage_tokens`) counts their arguments.
    pub fn finish(self, set: Option<&Arc<ToolSet>>, only_tools: bool, usage_tokens: Option<u64>) -> ToolCallRecord {
        let mut record = ToolCallRecord { argument_token_source: "estimate".into(), ..ToolCallRecord::default() };
        let mut estimate = 0u64;
        for mut call in self.calls {
            if call.bytes == 0 {
                if let Some(whole) = call.whole.take() {
                    call.bytes = whole.len() as u64;
                    call.arguments = whole;
                }
            }
            record.calls += 1;
            record.argument_bytes += call.bytes;
            estimate += u64::from(crate::text::estimate_tokens(&call.arguments));
            // Arguments longer than were kept cannot be judged whole: they count as cut.
            let problem = if call.bytes as usize > call.arguments.len() {
                Some("not_json")
            } else {
                match set {
                    Some(set) => set.check(&call.name, &call.arguments).map(|p| p.as_str()),
                    None => Some("unknown_tool"),
                }
            };
            match problem {
                None => record.valid += 1,
                Some(reason) => record.invalid_reasons.push(reason.to_string()),
            }
        }
        record.calls = record.calls.saturating_add(self.dropped.min(1));
        record.argument_tokens = estimate;
        if let (true, Some(n)) = (only_tools && record.calls > 0, usage_tokens) {
            record.argument_tokens = n;
            record.argument_token_source = "usage".into();
        }
        record.time_to_first_tool_call_ms = self.first.map(ms);
        record.argument_tok_s = match (self.first, self.last_argument) {
            (Some(first), Some(last)) if last > first && record.argument_tokens > 0 => {
                Some(record.argument_tokens as f64 / (last - first).as_secs_f64())
            }
            _ => None,
        };
        record
    }
}

/// Milliseconds as every record field writes them.
fn ms(d: Duration) -> f64 {
    crate::request::record::timing::ms(d)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::plan::scenario::json_schema::JsonSchema;
    use crate::plan::scenario::tools_rules::{ToolChoice, ToolDef};

    fn set() -> Arc<ToolSet> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let tool = ToolDef {
            name: "get_weather".into(),
            description: String::new(),
            parameters: JsonSchema::compile(schema).unwrap(),
        };
        Arc::new(ToolSet { source: "synthetic".into(), choice: ToolChoice::Auto, count: 1, tools: vec![tool] })
    }

    fn piece(index: u64, name: Option<&'static str>, args: Option<&'static str>) -> ToolPiece<'static> {
        ToolPiece {
            index,
            id: None,
            name: name.map(Cow::Borrowed),
            arguments: args.map(Cow::Borrowed),
            whole_arguments: None,
        }
    }

    #[test]
    fn calls_are_gathered_by_index_and_judged() {
        let ms1 = Duration::from_millis(1);
        let mut t = ToolCalls::default();
        t.piece(&piece(0, Some("get_weather"), None), ms1 * 10);
        t.piece(&piece(0, None, Some("{\"ci")), ms1 * 11);
        t.piece(&piece(1, Some("launch"), Some("{}")), ms1 * 12);
        t.piece(&piece(0, None, Some("ty\":\"Oslo\"}")), ms1 * 20);
        t.piece(&piece(2, Some("get_weather"), Some("{\"town\":1}")), ms1 * 21);
        let r = t.finish(Some(&set()), true, Some(30));
        assert_eq!((r.calls, r.valid), (3, 1));
        assert_eq!(r.invalid_reasons, ["unknown_tool", "required"]);
        assert_eq!(r.time_to_first_tool_call_ms, Some(10.0));
        assert_eq!(r.argument_bytes, 15 + 2 + 10);
        assert_eq!((r.argument_tokens, r.argument_token_source.as_str()), (30, "usage"));
        assert!((r.argument_tok_s.unwrap() - 30.0 / 0.011).abs() < 1e-6);
    }

    #[test]
    fn whole_arguments_stand_in_for_missing_fragments() {
        let mut t = ToolCalls::default();
        t.piece(&piece(3, Some("get_weather"), None), Duration::from_millis(5));
        let whole =
            ToolPiece { index: 3, whole_arguments: Some(Cow::Borrowed("{\"city\":\"Rome\"}")), ..ToolPiece::default() };
        t.piece(&whole, Duration::from_millis(6));
        let r = t.finish(Some(&set()), false, Some(99));
        assert_eq!((r.calls, r.valid, r.argument_bytes), (1, 1, 15));
        assert_eq!(r.argument_token_source, "estimate");
        assert_eq!(r.argument_tok_s, None);
    }
}
