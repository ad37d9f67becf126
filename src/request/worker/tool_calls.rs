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
pub use crate::request::workload::CalledTool;

/// Most calls kept per response (pieces of further calls are counted, not kept).
const MAX_CALLS: usize = 256;
/// Most argument bytes kept per call (longer arguments are counted, and judged `not_json`).
const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// One call, as its pieces arrived.
#[derive(Debug, Default)]
struct Call {
    index: u64,
    /// The id the server gave the call (chat `id`, Responses `call_id`, Messages `id`).
    id: String,
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
        if let Some(id) = p.id.as_deref().filter(|i| !i.is_empty() && call.id.is_empty()) {
            call.id.push_str(id);
        }
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

    /// The calls as the model made them (id, name, whole arguments), for an agent session's
    /// next turn.
    pub fn called(&self) -> Vec<CalledTool> {
        self.calls
            .iter()
            .map(|c| CalledTool {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: if c.bytes == 0 { c.whole.clone().unwrap_or_default() } else { c.arguments.clone() },
            })
            .collect()
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
        Arc::new(ToolSet {
            source: "synthetic".into(),
            choice: ToolChoice::Auto,
            count: 1,
            tools: vec![tool],
            definitions_sha256: String::new(),
            agent: None,
        })
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
    /// Hand-written from the documented wire formats (no engine capture with tool calls is
    /// kept): chat chunks as OpenAI and vLLM stream them, then the Responses and Messages events.
    const CHAT: &str = concat!(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\": \"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Oslo\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":7,\"total_tokens\":17}}\n\n",
        "data: [DONE]\n\n",
    );

    const RESPONSES: &str = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"usage\":null}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"in_progress\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"\"}}\n\n",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":2,\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{\\\"city\\\":\"}\n\n",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":3,\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"\\\"Oslo\\\"}\"}\n\n",
        "event: response.function_call_arguments.done\ndata: {\"type\":\"response.function_call_arguments.done\",\"sequence_number\":4,\"item_id\":\"fc_1\",\"output_index\":0,\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}\n\n",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":5,\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\"}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":6,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":10,\"output_tokens\":7}}}\n\n",
    );

    const MESSAGES: &str = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Os\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"lo\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );

    /// `bytes` read 7 bytes at a time, 1 ms apart, by `api`'s stream state.
    fn read(api: crate::plan::scenario::Api, bytes: &str) -> super::super::stream::StreamState {
        let mut s = super::super::stream::StreamState::new(false).for_api(api).with_tools(Some(set()));
        for (i, piece) in bytes.as_bytes().chunks(7).enumerate() {
            s.observe(piece, Duration::from_millis(i as u64 + 1)).unwrap();
        }
        s.finish(Duration::from_secs(1)).unwrap();
        s
    }

    #[test]
    fn every_api_streams_one_valid_call_that_is_the_answer() {
        use crate::plan::scenario::Api;
        for (api, bytes) in [(Api::Chat, CHAT), (Api::Responses, RESPONSES), (Api::Messages, MESSAGES)] {
            let mut s = read(api, bytes);
            assert!(s.done.is_some(), "{api:?}");
            assert_eq!(s.finish_reason.as_deref(), Some("tool_calls"), "{api:?}");
            assert_eq!(s.first_output, s.first_content, "{api:?}: a call is the answer");
            let first = s.first_output.expect("output");
            let r = s.tool_call_record(Some(7)).expect("a record");
            assert_eq!((r.calls, r.valid, r.invalid_reasons.len()), (1, 1, 0), "{api:?}: {r:?}");
            assert_eq!(r.time_to_first_tool_call_ms, Some(crate::request::record::timing::ms(first)), "{api:?}");
            assert_eq!((r.argument_tokens, r.argument_token_source.as_str()), (7, "usage"), "{api:?}");
            assert!(r.argument_bytes >= 15, "{api:?}: {r:?}");
        }
    }

    #[test]
    fn text_chunks_around_a_call_keep_their_fast_path_and_are_not_misread() {
        use crate::plan::scenario::Api;
        let text = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me check\"},\"finish_reason\":null}]}\n\n";
        // Text first (learned as the stream's shape), then the call: the call must not be read
        // as text, and the text before it makes the response more than tool calls.
        let both = CHAT.replacen("data: {", &format!("{text}data: {{"), 1);
        let mut s = read(Api::Chat, &both);
        assert_eq!(s.visible_chars, "Let me check".len());
        let r = s.tool_call_record(Some(7)).expect("a record");
        assert_eq!((r.calls, r.valid, r.argument_token_source.as_str()), (1, 1, "estimate"));
    }

    #[test]
    fn a_run_with_tools_records_a_response_without_a_call() {
        use crate::plan::scenario::Api;
        let mut s = super::super::stream::StreamState::new(false).for_api(Api::Chat).with_tools(Some(set()));
        s.observe(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
            Duration::from_millis(1),
        )
        .unwrap();
        let r = s.tool_call_record(None).expect("a record");
        assert_eq!((r.calls, r.time_to_first_tool_call_ms), (0, None));
        let mut plain = super::super::stream::StreamState::new(false);
        assert_eq!(plain.tool_call_record(None), None, "no tools offered, none came: no block");
    }
}
