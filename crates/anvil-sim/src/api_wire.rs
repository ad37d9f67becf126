//! The bytes of the Responses API and Anthropic's Messages API streams, in the shapes of their
//! public references (`event:` line, then the JSON that repeats the name in `type`).
//!
//! `ChunkWriter` calls in here for those APIs: its `role` is the opening of the response
//! (`response.created` / `message_start` with the input usage), `delta` one text or reasoning
//! delta, `finish` the closing event with the usage (`response.completed` or, cut by the
//! budget, `response.incomplete`, or `response.completed` as llama.cpp sends it; see
//! `completed_at_budget`; `message_delta`), `done` the Messages API's `message_stop`.

use std::cell::Cell;

use bytes::BytesMut;

use super::plan::Finish;
use super::wire::{Channel, ResponseIds, Usage, push_json_str};

/// Which streamed API a response speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireApi {
    /// Chat or completions chunks.
    OpenAi,
    Responses,
    Messages,
}

/// The per-response state of a Responses or Messages stream.
pub(crate) struct ApiEvents {
    api: WireApi,
    id: String,
    model: String,
    created: u64,
    /// Reasoning tokens of the plan, reported in the Responses usage.
    reasoning_tokens: u32,
    usage: Usage,
    /// Responses: the next `sequence_number`.
    sequence: Cell<u64>,
    /// The content block (Messages) or output item (Responses) open now, and its index.
    open: Cell<Option<(Channel, u32)>>,
    /// Responses: an answer cut by the budget ends `response.completed`, status `completed`,
    /// as llama.cpp's conversion does (the budget, not the event, says it was cut).
    completed_at_budget: bool,
    /// The tool call this response makes: name, call id, whole arguments (see `tool_call`).
    tool: Option<Box<(String, String, String)>>,
}

impl ApiEvents {
    pub fn new(api: WireApi, ids: &ResponseIds, reasoning_tokens: u32, usage: Usage) -> ApiEvents {
        let prefix = if api == WireApi::Responses { "resp_" } else { "msg_" };
        let tail = ids.id.rsplit('-').next().unwrap_or(&ids.id);
        ApiEvents {
            api,
            id: format!("{prefix}{tail}"),
            model: ids.model.clone(),
            created: ids.created,
            reasoning_tokens,
            usage,
            sequence: Cell::new(0),
            open: Cell::new(None),
            completed_at_budget: false,
            tool: None,
        }
    }

    /// The response is this tool call (its `Channel::Tool` deltas are the arguments).
    pub fn with_tool(mut self, call: &super::tool_call::ToolCall) -> ApiEvents {
        self.tool = Some(Box::new((call.name.clone(), call.id.clone(), call.arguments.clone())));
        self
    }

    /// The tool call's name and call id, as JSON strings.
    fn tool_fields(&self) -> (String, String) {
        let (name, id) = self.tool.as_deref().map_or(("", ""), |t| (t.0.as_str(), t.1.as_str()));
        (serde_json::Value::from(name).to_string(), serde_json::Value::from(id).to_string())
    }

    /// End budget-cut Responses answers with `response.completed` (see `completed_at_budget`).
    pub fn completed_at_budget(mut self, yes: bool) -> ApiEvents {
        self.completed_at_budget = yes;
        self
    }

    /// `event: <name>\ndata: {"type":"<name>"` (the caller closes the object).
    fn head(&self, buf: &mut BytesMut, name: &str) {
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\ndata: {\"type\":\"");
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b"\"");
        if self.api == WireApi::Responses {
            let n = self.sequence.get();
            self.sequence.set(n + 1);
            buf.extend_from_slice(format!(",\"sequence_number\":{n}").as_bytes());
        }
    }

    /// The `response` object of the Responses API's lifecycle events.
    fn response_object(&self, buf: &mut BytesMut, status: &str, incomplete: bool, usage: Option<&Usage>) {
        buf.extend_from_slice(b",\"response\":{\"id\":");
        push_json_str(buf, &self.id);
        buf.extend_from_slice(format!(",\"object\":\"response\",\"created_at\":{},\"status\":\"{status}\",\"error\":null,\"incomplete_details\":", self.created).as_bytes());
        buf.extend_from_slice(if incomplete { br#"{"reason":"max_output_tokens"}"# } else { b"null" });
        buf.extend_from_slice(b",\"model\":");
        push_json_str(buf, &self.model);
        buf.extend_from_slice(b",\"output\":[],\"usage\":");
        match usage {
            Some(u) => buf.extend_from_slice(
                format!(
                    r#"{{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},"output_tokens_details":{{"reasoning_tokens":{}}},"total_tokens":{}}}"#,
                    u.prompt_tokens,
                    u.prompt_tokens_details.cached_tokens,
                    u.completion_tokens,
                    self.reasoning_tokens.min(u.completion_tokens),
                    u.total_tokens
                )
                .as_bytes(),
            ),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b"}");
    }

    /// The opening events.
    pub fn start(&self, buf: &mut BytesMut) {
        let usage = &self.usage;
        match self.api {
            WireApi::Responses => {
                for name in ["response.created", "response.in_progress"] {
                    self.head(buf, name);
                    self.response_object(buf, "in_progress", false, None);
                    buf.extend_from_slice(b"}\n\n");
                }
            }
            WireApi::Messages => {
                self.head(buf, "message_start");
                buf.extend_from_slice(b",\"message\":{\"id\":");
                push_json_str(buf, &self.id);
                buf.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":");
                push_json_str(buf, &self.model);
                let cached = usage.prompt_tokens_details.cached_tokens;
                // `input_tokens` is the uncached part; cache reads are reported beside it.
                buf.extend_from_slice(
                    format!(
                        r#","stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":{cached},"output_tokens":1}}}}}}"#,
                        usage.prompt_tokens.saturating_sub(cached)
                    )
                    .as_bytes(),
                );
                buf.extend_from_slice(b"\n\n");
            }
            WireApi::OpenAi => {}
        }
    }

    /// Opens the block or item of `channel` when another one is open (or none).
    fn enter(&self, buf: &mut BytesMut, channel: Channel) -> u32 {
        let index = match self.open.get() {
            Some((open, index)) if open == channel => return index,
            Some((_, index)) => {
                self.close(buf);
                index + 1
            }
            None => 0,
        };
        self.open.set(Some((channel, index)));
        match self.api {
            WireApi::Responses => {
                self.head(buf, "response.output_item.added");
                let (name, call_id) = self.tool_fields();
                let tool = format!(r#","status":"in_progress","call_id":{call_id},"name":{name},"arguments":"""#);
                let (kind, extra) = match channel {
                    Channel::Reasoning => ("reasoning", r#","summary":[],"content":[]"#),
                    Channel::Content => ("message", r#","status":"in_progress","role":"assistant","content":[]"#),
                    Channel::Tool => ("function_call", tool.as_str()),
                };
                buf.extend_from_slice(
                    format!(
                        r#","output_index":{index},"item":{{"id":"{}_{index}","type":"{kind}"{extra}}}}}"#,
                        self.id
                    )
                    .as_bytes(),
                );
                buf.extend_from_slice(b"\n\n");
            }
            WireApi::Messages => {
                self.head(buf, "content_block_start");
                let (name, id) = self.tool_fields();
                let tool = format!(r#"{{"type":"tool_use","id":{id},"name":{name},"input":{{}}}}"#);
                let block = match channel {
                    Channel::Reasoning => r#"{"type":"thinking","thinking":""}"#,
                    Channel::Content => r#"{"type":"text","text":""}"#,
                    Channel::Tool => tool.as_str(),
                };
                buf.extend_from_slice(format!(r#","index":{index},"content_block":{block}}}"#).as_bytes());
                buf.extend_from_slice(b"\n\n");
            }
            WireApi::OpenAi => {}
        }
        index
    }

    /// Closes the open block or item.
    fn close(&self, buf: &mut BytesMut) {
        let Some((channel, index)) = self.open.take() else { return };
        match self.api {
            WireApi::Responses => {
                if let (Channel::Tool, Some(tool)) = (channel, self.tool.as_deref()) {
                    self.head(buf, "response.function_call_arguments.done");
                    buf.extend_from_slice(
                        format!(r#","item_id":"{}_{index}","output_index":{index},"arguments":"#, self.id).as_bytes(),
                    );
                    push_json_str(buf, &tool.2);
                    buf.extend_from_slice(b"}\n\n");
                }
                self.head(buf, "response.output_item.done");
                buf.extend_from_slice(
                    format!(r#","output_index":{index},"item":{{"id":"{}_{index}"}}}}"#, self.id).as_bytes(),
                );
            }
            WireApi::Messages => {
                self.head(buf, "content_block_stop");
                buf.extend_from_slice(format!(r#","index":{index}}}"#).as_bytes());
            }
            WireApi::OpenAi => return,
        }
        buf.extend_from_slice(b"\n\n");
    }

    /// One delta of `text` on `channel`.
    pub fn delta(&self, buf: &mut BytesMut, channel: Channel, text: &str) {
        let index = self.enter(buf, channel);
        match self.api {
            WireApi::Responses => {
                let name = match channel {
                    Channel::Reasoning => "response.reasoning_text.delta",
                    Channel::Content => "response.output_text.delta",
                    Channel::Tool => "response.function_call_arguments.delta",
                };
                self.head(buf, name);
                let content_index = if channel == Channel::Tool { "" } else { r#","content_index":0"# };
                buf.extend_from_slice(
                    format!(r#","item_id":"{}_{index}","output_index":{index}{content_index},"delta":"#, self.id)
                        .as_bytes(),
                );
                push_json_str(buf, text);
            }
            WireApi::Messages => {
                self.head(buf, "content_block_delta");
                let (kind, key) = match channel {
                    Channel::Reasoning => ("thinking_delta", "thinking"),
                    Channel::Content => ("text_delta", "text"),
                    Channel::Tool => ("input_json_delta", "partial_json"),
                };
                buf.extend_from_slice(format!(r#","index":{index},"delta":{{"type":"{kind}","{key}":"#).as_bytes());
                push_json_str(buf, text);
                buf.extend_from_slice(b"}");
            }
            WireApi::OpenAi => return,
        }
        buf.extend_from_slice(b"}\n\n");
    }

    /// The closing event, with the usage.
    pub fn finish(&self, buf: &mut BytesMut, finish: Finish) {
        self.close(buf);
        let usage = &self.usage;
        match self.api {
            WireApi::Responses => {
                let (name, status, incomplete) = match finish {
                    Finish::Stop | Finish::ToolCalls => ("response.completed", "completed", false),
                    Finish::Length if self.completed_at_budget => ("response.completed", "completed", false),
                    Finish::Length => ("response.incomplete", "incomplete", true),
                };
                self.head(buf, name);
                self.response_object(buf, status, incomplete, Some(&self.usage));
                buf.extend_from_slice(b"}\n\n");
            }
            WireApi::Messages => {
                let stop = match finish {
                    Finish::Stop => "end_turn",
                    Finish::Length => "max_tokens",
                    Finish::ToolCalls => "tool_use",
                };
                self.head(buf, "message_delta");
                buf.extend_from_slice(
                    format!(
                        r#","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                        usage.completion_tokens
                    )
                    .as_bytes(),
                );
                buf.extend_from_slice(b"\n\n");
            }
            WireApi::OpenAi => {}
        }
    }

    /// The Messages API's last event; the Responses API has none after `finish`.
    pub fn done(&self, buf: &mut BytesMut) {
        if self.api == WireApi::Messages {
            self.head(buf, "message_stop");
            buf.extend_from_slice(b"}\n\n");
        }
    }
}
