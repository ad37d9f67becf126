//! The OpenAI Responses API (`POST /responses`), client side: the request body and the meaning
//! of each streamed event.
//!
//! Every event names itself in `type` (the SSE `event:` line repeats it, and is not needed):
//! `response.output_text.delta` carries visible text, `response.reasoning_text.delta` (and
//! `response.reasoning_summary_text.delta`) reasoning, `response.completed` the usage and the
//! end of the stream (no `[DONE]` follows). `response.incomplete` for the output budget is a
//! complete answer cut at `max_output_tokens` (finish reason `length`, as chat's); for any other
//! reason, and `response.failed`, the response failed. The stream-level `error` event is a
//! server error like chat's in-stream error object. A function call opens with
//! `response.output_item.added` (an item of type `function_call`: `call_id`, `name`), streams
//! `response.function_call_arguments.delta` and closes with `.done` (the whole arguments).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::chunk::{
    ChunkError, Count, Delta, StreamEvent, ToolPiece, Usage, WireDetails, error_kind, json_error, opt_count, opt_str,
};
use super::request::{PromptBody, RequestParams, merge_extra, shared_fields};

/// The body of a streamed Responses request. A leading system message becomes `instructions`;
/// `store: false` keeps the server from holding every response of a load test. Each message of
/// a conversation goes as an input item `{type: "message", role, content}`: the API defines the
/// `type` (optional in OpenAI's schema), and llama.cpp cannot tell an item without it from the
/// other item kinds (HTTP 400 "Cannot determine type of 'item'").
pub(super) fn body(p: &RequestParams, prompt: PromptBody<'_>) -> Vec<u8> {
    let mut out = Map::new();
    out.insert("model".into(), json!(p.model));
    match prompt {
        PromptBody::Messages(messages) => {
            let rest = match messages.split_first() {
                Some((first, rest)) if first.role == "system" => {
                    out.insert("instructions".into(), json!(first.content));
                    rest
                }
                _ => messages,
            };
            let input: Vec<Value> =
                rest.iter().map(|m| json!({"type": "message", "role": m.role, "content": m.content})).collect();
            out.insert("input".into(), Value::Array(input));
        }
        other => {
            out.insert("input".into(), json!(other.joined()));
        }
    }
    out.insert("max_output_tokens".into(), json!(p.max_tokens));
    out.insert("stream".into(), Value::Bool(true));
    out.insert("store".into(), Value::Bool(false));
    if let Some(effort) = p.reasoning_effort {
        out.insert("reasoning".into(), json!({ "effort": effort }));
    }
    shared_fields(p, &mut out);
    merge_extra(p, &mut out)
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(borrow, rename = "type", deserialize_with = "opt_str", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    delta: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    response: Option<WireResponse<'a>>,
    /// The `error` event's own fields.
    #[serde(borrow, default, deserialize_with = "opt_str")]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<Value>,
    /// Function calls: the output item's index, the item itself (`response.output_item.added`)
    /// and the whole arguments (`response.function_call_arguments.done`).
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(borrow, default)]
    item: Option<WireItem<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    arguments: Option<Cow<'a, str>>,
}

/// An output item, as far as a function call needs it.
#[derive(Deserialize)]
struct WireItem<'a> {
    #[serde(borrow, rename = "type", default, deserialize_with = "opt_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(borrow, default)]
    error: Option<WireError<'a>>,
    #[serde(borrow, default)]
    incomplete_details: Option<WireIncomplete<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireError<'a> {
    #[serde(default)]
    code: Option<Value>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireIncomplete<'a> {
    #[serde(borrow, default, deserialize_with = "opt_str")]
    reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "opt_count")]
    input_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    output_tokens: Option<Count>,
    #[serde(default)]
    input_tokens_details: Option<WireDetails>,
    #[serde(default)]
    output_tokens_details: Option<WireDetails>,
}

impl WireUsage {
    fn usage(self) -> Usage {
        Usage::from_counts(
            self.input_tokens,
            self.output_tokens,
            self.input_tokens_details.and_then(|d| d.cached_tokens),
            self.output_tokens_details.and_then(|d| d.reasoning_tokens),
        )
    }
}

/// A chunk carrying one piece of a function call.
fn tool_chunk(piece: ToolPiece<'_>) -> StreamEvent<'_> {
    StreamEvent::Chunk {
        delta: Delta { content: None, reasoning: None, tools: vec![piece] },
        finish_reason: None,
        usage: None,
    }
}

/// Interpret one Responses event's data.
pub fn parse_event(data: &[u8]) -> Result<StreamEvent<'_>, ChunkError> {
    let text = std::str::from_utf8(data).map_err(|_| ChunkError::InvalidUtf8)?;
    let event: WireEvent<'_> = serde_json::from_str(text).map_err(|e| json_error("stream event", text, &e))?;
    let nothing = || StreamEvent::Chunk { delta: Delta::default(), finish_reason: None, usage: None };
    let Some(kind) = event.kind else { return Ok(nothing()) };
    Ok(match kind.as_ref() {
        "response.output_text.delta" => StreamEvent::Chunk {
            delta: Delta { content: event.delta, reasoning: None, tools: Vec::new() },
            finish_reason: None,
            usage: None,
        },
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => StreamEvent::Chunk {
            delta: Delta { content: None, reasoning: event.delta, tools: Vec::new() },
            finish_reason: None,
            usage: None,
        },
        "response.output_item.added" => match event.item {
            Some(item) if item.kind.as_deref() == Some("function_call") => tool_chunk(ToolPiece {
                index: event.output_index.unwrap_or(0),
                id: item.call_id,
                name: item.name,
                arguments: item.arguments.filter(|a| !a.is_empty()),
                whole_arguments: None,
            }),
            _ => nothing(),
        },
        "response.function_call_arguments.delta" => tool_chunk(ToolPiece {
            index: event.output_index.unwrap_or(0),
            arguments: event.delta,
            ..ToolPiece::default()
        }),
        "response.function_call_arguments.done" => tool_chunk(ToolPiece {
            index: event.output_index.unwrap_or(0),
            whole_arguments: event.arguments,
            ..ToolPiece::default()
        }),
        "response.completed" => StreamEvent::End {
            finish_reason: Some(Cow::Borrowed("stop")),
            usage: event.response.and_then(|r| r.usage).map(WireUsage::usage),
        },
        "response.incomplete" => {
            let response = event.response;
            let (reason, usage) = match response {
                Some(r) => (r.incomplete_details.and_then(|d| d.reason), r.usage),
                None => (None, None),
            };
            match reason.as_deref() {
                // Cut by the output budget: chat's `length`.
                Some("max_output_tokens") => StreamEvent::End {
                    finish_reason: Some(Cow::Borrowed("length")),
                    usage: usage.map(WireUsage::usage),
                },
                other => StreamEvent::Failed {
                    incomplete: true,
                    kind: other.map(str::to_string),
                    message: format!("response.incomplete: {}", other.unwrap_or("no reason given")),
                },
            }
        }
        "response.failed" => {
            let error = event.response.and_then(|r| r.error);
            let (code, message) = match error {
                Some(e) => (e.code, e.message),
                None => (None, None),
            };
            StreamEvent::Failed {
                incomplete: false,
                kind: error_kind(None, code.as_ref()),
                message: message.map_or_else(|| "response.failed".to_string(), Cow::into_owned),
            }
        }
        "error" => StreamEvent::Error {
            kind: error_kind(None, event.code.as_ref()),
            message: event.message.unwrap_or_default().into_owned(),
        },
        // response.created, in_progress, output_item.added, *.done, …: no output.
        _ => nothing(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::scenario::{Api, ChatMessage, Dialect, ReasoningEffort};
    use crate::request::openai::SseDecoder;

    /// The data of every event of a fixture, decoded in reads of `piece` bytes.
    pub(crate) fn fixture_events(name: &str, piece: usize) -> Vec<Vec<u8>> {
        let bytes = std::fs::read(format!("{}/tests/fixtures/apis/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.feed(chunk, |data: &[u8]| -> Result<(), crate::request::openai::SseError> {
                out.push(data.to_vec());
                Ok(())
            })
            .unwrap();
        }
        d.finish(|data: &[u8]| -> Result<(), crate::request::openai::SseError> {
            out.push(data.to_vec());
            Ok(())
        })
        .unwrap();
        out
    }

    fn texts(events: &[Vec<u8>]) -> (String, String) {
        let (mut content, mut reasoning) = (String::new(), String::new());
        for e in events {
            if let StreamEvent::Chunk { delta, .. } = parse_event(e).unwrap() {
                content.push_str(delta.content.as_deref().unwrap_or(""));
                reasoning.push_str(delta.reasoning.as_deref().unwrap_or(""));
            }
        }
        (content, reasoning)
    }

    #[test]
    fn text_stream_ends_at_completed_with_its_usage() {
        for piece in [1, 7, 97, 100_000] {
            let events = fixture_events("responses-text.sse", piece);
            assert_eq!(events.len(), 18, "piece {piece}");
            assert_eq!(texts(&events), ("Hi there! How can I assist you today?".into(), String::new()));
            let last = parse_event(events.last().unwrap()).unwrap();
            assert_eq!(
                last,
                StreamEvent::End {
                    finish_reason: Some(Cow::Borrowed("stop")),
                    usage: Some(Usage {
                        prompt_tokens: Some(37),
                        completion_tokens: Some(11),
                        cached_tokens: Some(0),
                        reasoning_tokens: Some(0),
                        not_a_count: None
                    })
                }
            );
        }
    }

    #[test]
    fn reasoning_deltas_are_reasoning() {
        let events = fixture_events("responses-reasoning.sse", 64);
        assert_eq!(texts(&events), ("Hello! ¡Hola!".into(), "The user asks for a greeting.".into()));
        let StreamEvent::End { usage: Some(u), .. } = parse_event(events.last().unwrap()).unwrap() else { panic!() };
        assert_eq!((u.prompt_tokens, u.cached_tokens, u.reasoning_tokens), (Some(70), Some(64), Some(7)));
    }

    #[test]
    fn incomplete_failed_and_error_events() {
        let events = fixture_events("responses-incomplete.sse", 50);
        let StreamEvent::End { finish_reason, usage } = parse_event(events.last().unwrap()).unwrap() else { panic!() };
        assert_eq!((finish_reason.as_deref(), usage.unwrap().completion_tokens), (Some("length"), Some(3)));
        let events = fixture_events("responses-failed.sse", 50);
        assert_eq!(
            parse_event(events.last().unwrap()).unwrap(),
            StreamEvent::Failed {
                incomplete: false,
                kind: Some("server_error".into()),
                message: "The model failed to generate a response.".into()
            }
        );
        let events = fixture_events("responses-error.sse", 50);
        assert_eq!(
            parse_event(events.last().unwrap()).unwrap(),
            StreamEvent::Error {
                kind: Some("rate_limit_exceeded".into()),
                message: "Rate limit reached for requests".into()
            }
        );
        let filtered =
            br#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"content_filter"}}}"#;
        assert!(matches!(parse_event(filtered).unwrap(), StreamEvent::Failed { incomplete: true, .. }));
        assert!(matches!(parse_event(b"{\"type\":\"response.out"), Err(ChunkError::InvalidJson(_))));
    }

    #[test]
    fn body_has_input_instructions_budget_and_store_off() {
        let p = RequestParams {
            api: Api::Responses,
            model: "m".into(),
            max_tokens: 64,
            temperature: Some(0.5),
            top_p: None,
            enable_thinking: None,
            reasoning_effort: Some(ReasoningEffort::Low),
            ignore_eos: true,
            min_tokens: None,
            dialect: Dialect::Generic,
            continuous_usage: false,
            extra: Map::new(),
        };
        let v: Value = serde_json::from_slice(&body(&p, PromptBody::Text("hi"))).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "input": "hi", "max_output_tokens": 64, "stream": true, "store": false,
                "reasoning": {"effort": "low"}, "temperature": 0.5, "ignore_eos": true})
        );
        let turns = [
            ChatMessage { role: "system".into(), content: "be brief".into() },
            ChatMessage { role: "user".into(), content: "u".into() },
        ];
        let v: Value = serde_json::from_slice(&body(&p, PromptBody::Messages(&turns))).unwrap();
        assert_eq!((v["instructions"].as_str(), v["input"][0]["role"].as_str()), (Some("be brief"), Some("user")));
        // Every input item names its type: llama.cpp refuses an item without one.
        let turns = [
            ChatMessage { role: "user".into(), content: "u".into() },
            ChatMessage { role: "assistant".into(), content: "a".into() },
            ChatMessage { role: "user".into(), content: "v".into() },
        ];
        let v: Value = serde_json::from_slice(&body(&p, PromptBody::Messages(&turns))).unwrap();
        for item in v["input"].as_array().unwrap() {
            assert_eq!(item["type"], "message", "{item}");
        }
        assert_eq!(v["input"][1], json!({"type": "message", "role": "assistant", "content": "a"}));
    }
}
