//! Anthropic's Messages API (`POST /messages`), client side: the request body and the meaning
//! of each streamed event.
//!
//! `message_start` carries the input usage (`input_tokens` counts only the uncached part: the
//! prompt is `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`, and the
//! cache reads are its cached tokens); `content_block_delta` carries `text_delta` (visible text)
//! or `thinking_delta` (reasoning); `message_delta` the stop reason and the cumulative output
//! tokens; `message_stop` ends the stream. Stop reasons are recorded in chat's words where they
//! mean the same (`end_turn` → `stop`, `max_tokens` → `length`, `tool_use` → `tool_calls`),
//! others as sent. A tool call is a `tool_use` block (`content_block_start` with its `id` and
//! `name`) whose input streams as `input_json_delta` (`partial_json`).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::chunk::{ChunkError, Count, Delta, StreamEvent, ToolPiece, Usage, json_error, opt_count, opt_str};
use super::request::{PromptBody, RequestParams, merge_extra, shared_fields};

/// The body of a streamed Messages request. System messages go to the top-level `system`
/// (the API has no system role in `messages`).
pub(super) fn body(p: &RequestParams, prompt: PromptBody<'_>) -> Vec<u8> {
    let mut out = Map::new();
    out.insert("model".into(), json!(p.model));
    out.insert("max_tokens".into(), json!(p.max_tokens));
    match prompt {
        PromptBody::Messages(messages) => {
            let system: Vec<&str> =
                messages.iter().filter(|m| m.role == "system").map(|m| m.content.as_str()).collect();
            if !system.is_empty() {
                out.insert("system".into(), json!(system.join("\n\n")));
            }
            let turns: Vec<Value> = messages
                .iter()
                .filter(|m| m.role != "system")
                .map(|m| json!({"role": m.role, "content": m.content}))
                .collect();
            out.insert("messages".into(), Value::Array(turns));
        }
        other => {
            out.insert("messages".into(), json!([{"role": "user", "content": other.joined()}]));
        }
    }
    out.insert("stream".into(), Value::Bool(true));
    shared_fields(p, &mut out);
    merge_extra(p, &mut out)
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(borrow, rename = "type", deserialize_with = "opt_str", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(borrow, default)]
    error: Option<WireError<'a>>,
    /// `content_block_start` / `content_block_delta`: the block's index, and the block opened.
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    content_block: Option<WireBlock<'a>>,
}

/// A content block as `content_block_start` opens it (a `tool_use` block: `id`, `name`).
#[derive(Deserialize)]
struct WireBlock<'a> {
    #[serde(borrow, rename = "type", default, deserialize_with = "opt_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, rename = "type", default, deserialize_with = "opt_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    partial_json: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "opt_count")]
    input_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    output_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    cache_creation_input_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    cache_read_input_tokens: Option<Count>,
}

/// `a + b` of two counts: a sum past 64 bits is no count either.
fn add(a: Option<Count>, b: Option<Count>) -> Option<Count> {
    match (a, b) {
        (Some(Count::N(x)), Some(Count::N(y))) => {
            Some(x.checked_add(y).map_or(Count::NotACount(x as f64 + y as f64), Count::N))
        }
        (Some(Count::NotACount(v)), _) | (_, Some(Count::NotACount(v))) => Some(Count::NotACount(v)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[derive(Deserialize)]
struct WireError<'a> {
    #[serde(borrow, rename = "type", default, deserialize_with = "opt_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    message: Option<Cow<'a, str>>,
}

/// Chat's word for a stop reason that means the same.
fn finish_reason(stop: Cow<'_, str>) -> Cow<'_, str> {
    match stop.as_ref() {
        "end_turn" => Cow::Borrowed("stop"),
        "tool_use" => Cow::Borrowed("tool_calls"),
        "max_tokens" => Cow::Borrowed("length"),
        _ => stop,
    }
}

/// Interpret one Messages event's data.
pub fn parse_event(data: &[u8]) -> Result<StreamEvent<'_>, ChunkError> {
    let text = std::str::from_utf8(data).map_err(|_| ChunkError::InvalidUtf8)?;
    let event: WireEvent<'_> = serde_json::from_str(text).map_err(|e| json_error("stream event", text, &e))?;
    let chunk = |delta, finish_reason, usage| StreamEvent::Chunk { delta, finish_reason, usage };
    let Some(kind) = event.kind else { return Ok(chunk(Delta::default(), None, None)) };
    Ok(match kind.as_ref() {
        "message_start" => {
            let usage = event.message.and_then(|m| m.usage).map(|u| {
                let cached = u.cache_read_input_tokens;
                let prompt = u.input_tokens.and_then(|n| add(add(Some(n), u.cache_creation_input_tokens), cached));
                // `output_tokens` here is a placeholder (1); the count comes with message_delta.
                Usage::from_counts(prompt, None, cached, None)
            });
            chunk(Delta::default(), None, usage)
        }
        "content_block_start" => match event.content_block {
            Some(block) if block.kind.as_deref() == Some("tool_use") => {
                let piece = ToolPiece {
                    index: event.index.unwrap_or(0),
                    id: block.id,
                    name: block.name,
                    ..ToolPiece::default()
                };
                chunk(Delta { content: None, reasoning: None, tools: vec![piece] }, None, None)
            }
            _ => chunk(Delta::default(), None, None),
        },
        "content_block_delta" => {
            let index = event.index.unwrap_or(0);
            let delta = match event.delta {
                Some(d) => match d.kind.as_deref() {
                    Some("input_json_delta") => {
                        let piece = ToolPiece { index, arguments: d.partial_json, ..ToolPiece::default() };
                        Delta { content: None, reasoning: None, tools: vec![piece] }
                    }
                    Some("text_delta") => Delta { content: d.text, reasoning: None, tools: Vec::new() },
                    Some("thinking_delta") => Delta { content: None, reasoning: d.thinking, tools: Vec::new() },
                    // signature_delta: no text.
                    _ => Delta::default(),
                },
                None => Delta::default(),
            };
            chunk(delta, None, None)
        }
        "message_delta" => {
            let usage = event.usage.map(|u| Usage::from_counts(None, u.output_tokens, None, None));
            chunk(Delta::default(), event.delta.and_then(|d| d.stop_reason).map(finish_reason), usage)
        }
        "message_stop" => StreamEvent::Done,
        "error" => {
            let (kind, message) = match event.error {
                Some(e) => (e.kind.map(Cow::into_owned), e.message.map(Cow::into_owned)),
                None => (None, None),
            };
            StreamEvent::Error { kind, message: message.unwrap_or_default() }
        }
        // ping, content_block_start, content_block_stop: no output.
        _ => chunk(Delta::default(), None, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::{Api, ChatMessage, Dialect};
    use crate::request::openai::responses::tests::fixture_events;

    fn summary(name: &str, piece: usize) -> (String, String, Option<String>, Usage, bool) {
        let (mut content, mut reasoning, mut finish, mut usage, mut done) =
            (String::new(), String::new(), None, Usage::default(), false);
        for e in fixture_events(name, piece) {
            match parse_event(&e).unwrap() {
                StreamEvent::Chunk { delta, finish_reason, usage: u } => {
                    content.push_str(delta.content.as_deref().unwrap_or(""));
                    reasoning.push_str(delta.reasoning.as_deref().unwrap_or(""));
                    finish = finish_reason.map(Cow::into_owned).or(finish);
                    if let Some(u) = u {
                        usage.prompt_tokens = u.prompt_tokens.or(usage.prompt_tokens);
                        usage.completion_tokens = u.completion_tokens.or(usage.completion_tokens);
                        usage.cached_tokens = u.cached_tokens.or(usage.cached_tokens);
                    }
                }
                StreamEvent::Done => done = true,
                other => panic!("{other:?}"),
            }
        }
        (content, reasoning, finish, usage, done)
    }

    #[test]
    fn text_stream() {
        for piece in [1, 13, 4096] {
            let (content, reasoning, finish, usage, done) = summary("messages-text.sse", piece);
            assert_eq!((content.as_str(), reasoning.as_str()), ("Hello! How can I help?", ""));
            assert_eq!(finish.as_deref(), Some("stop"));
            assert_eq!(
                (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens),
                (Some(25), Some(15), Some(0))
            );
            assert!(done);
        }
    }

    #[test]
    fn thinking_then_text_cut_by_the_budget() {
        let (content, reasoning, finish, usage, done) = summary("messages-thinking.sse", 50);
        assert_eq!(content, "27 * 453 = 12,231");
        assert!(reasoning.starts_with("Let me solve this") && reasoning.ends_with("453 = 400 + 50 + 3"));
        assert_eq!(finish.as_deref(), Some("length"));
        // 40 uncached + 2048 read from the cache.
        assert_eq!(
            (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens),
            (Some(2088), Some(2048), Some(64))
        );
        assert!(done);
    }

    #[test]
    fn error_event() {
        let events = fixture_events("messages-error.sse", 30);
        assert_eq!(
            parse_event(events.last().unwrap()).unwrap(),
            StreamEvent::Error { kind: Some("overloaded_error".into()), message: "Overloaded".into() }
        );
    }

    #[test]
    fn body_puts_system_on_top() {
        let p = RequestParams {
            api: Api::Messages,
            model: "m".into(),
            max_tokens: 32,
            temperature: None,
            top_p: Some(0.9),
            enable_thinking: None,
            reasoning_effort: None,
            ignore_eos: false,
            min_tokens: Some(4),
            dialect: Dialect::Generic,
            continuous_usage: false,
            extra: Map::new(),
        };
        let v: Value = serde_json::from_slice(&body(&p, PromptBody::Text("hi"))).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}],
                "stream": true, "top_p": 0.9, "min_tokens": 4})
        );
        let turns = [
            ChatMessage { role: "system".into(), content: "s".into() },
            ChatMessage { role: "user".into(), content: "u".into() },
        ];
        let v: Value = serde_json::from_slice(&body(&p, PromptBody::Messages(&turns))).unwrap();
        assert_eq!((v["system"].as_str(), v["messages"].as_array().unwrap().len()), (Some("s"), 1));
    }
}
