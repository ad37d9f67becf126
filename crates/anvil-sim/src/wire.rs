//! The bytes on the wire: SSE chunks, usage objects, non-streamed bodies and error bodies in
//! the shapes OpenAI-compatible engines send.
//!
//! Stream chunks are the hot path (the `instant` profile measures the client's cost per
//! chunk, so the server must stay cheap): the per-request part of every chunk (`id`,
//! `object`, `created`, `model`) is rendered once, and each chunk only appends its delta,
//! escaped by hand, into a reused buffer. Once-per-request objects go through serde.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use serde::Serialize;
use serde_json::{Value, json};

use super::api_wire::ApiEvents;
use super::plan::Finish;
use super::tokenize::PromptKind;

/// `usage` as engines report it; `prompt_tokens_details` is always present.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct PromptTokensDetails {
    pub cached_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, cached_tokens: u32, completion_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }

    fn write(&self, buf: &mut BytesMut) {
        use std::fmt::Write;
        // Writing into a BytesMut cannot fail.
        let _ = write!(
            buf,
            r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}}"#,
            self.prompt_tokens, self.completion_tokens, self.total_tokens, self.prompt_tokens_details.cached_tokens
        );
    }
}

/// Which delta channel a chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Channel {
    Reasoning,
    Content,
    /// A tool call's arguments (see `tool_call`).
    Tool,
}

/// Renders the SSE events of one response.
pub(crate) struct ChunkWriter {
    kind: PromptKind,
    reasoning_key: &'static str,
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`
    head: Vec<u8>,
    /// The Responses or Messages API's events instead of chunks.
    events: Option<ApiEvents>,
    /// Chat: the tool call's name and id as JSON strings, and whether its first piece (which
    /// carries them) went out.
    tool: Option<(String, String, std::cell::Cell<bool>)>,
}

impl ChunkWriter {
    pub fn new(kind: PromptKind, reasoning_key: &'static str, ids: &ResponseIds) -> ChunkWriter {
        let object = match kind {
            PromptKind::Chat => "chat.completion.chunk",
            PromptKind::Completion => "text_completion",
        };
        let mut head = BytesMut::with_capacity(128 + ids.model.len());
        head.extend_from_slice(b"data: {\"id\":");
        push_json_str(&mut head, &ids.id);
        head.extend_from_slice(b",\"object\":\"");
        head.extend_from_slice(object.as_bytes());
        head.extend_from_slice(format!("\",\"created\":{},\"model\":", ids.created).as_bytes());
        push_json_str(&mut head, &ids.model);
        head.extend_from_slice(b",\"choices\":[");
        ChunkWriter { kind, reasoning_key, head: head.to_vec(), events: None, tool: None }
    }

    /// Chat: the response is this tool call (`Channel::Tool` deltas are its arguments).
    pub fn with_tool(mut self, call: &super::tool_call::ToolCall) -> ChunkWriter {
        let json = |s: &str| serde_json::Value::from(s).to_string();
        self.tool = Some((json(&call.name), json(&call.id), std::cell::Cell::new(false)));
        self
    }

    /// Write the Responses or Messages API's events instead of chat chunks.
    pub fn with_events(mut self, events: ApiEvents) -> ChunkWriter {
        self.events = Some(events);
        self
    }

    /// The role-only first chunk of a chat stream (the opening events of the other APIs).
    pub fn role(&self, buf: &mut BytesMut) {
        if let Some(events) = &self.events {
            return events.start(buf);
        }
        buf.extend_from_slice(&self.head);
        buf.extend_from_slice(br#"{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}"#);
        buf.extend_from_slice(b"\n\n");
    }

    /// One delta chunk carrying `text` on `channel`.
    pub fn delta(&self, buf: &mut BytesMut, channel: Channel, text: &str) {
        if let Some(events) = &self.events {
            return events.delta(buf, channel, text);
        }
        buf.extend_from_slice(&self.head);
        match self.kind {
            PromptKind::Chat if channel == Channel::Tool => {
                // The first piece names the call; the others carry arguments only.
                buf.extend_from_slice(br#"{"index":0,"delta":{"tool_calls":[{"index":0,"#);
                match &self.tool {
                    Some((name, id, sent)) if !sent.replace(true) => buf.extend_from_slice(
                        format!(r#""id":{id},"type":"function","function":{{"name":{name},"arguments":"#).as_bytes(),
                    ),
                    _ => buf.extend_from_slice(br#""function":{"arguments":"#),
                }
                push_json_str(buf, text);
                buf.extend_from_slice(b"}}]},\"finish_reason\":null}]}\n\n");
            }
            PromptKind::Chat => {
                buf.extend_from_slice(b"{\"index\":0,\"delta\":{\"");
                buf.extend_from_slice(match channel {
                    Channel::Reasoning => self.reasoning_key.as_bytes(),
                    Channel::Content | Channel::Tool => b"content",
                });
                buf.extend_from_slice(b"\":");
                push_json_str(buf, text);
                buf.extend_from_slice(b"},\"finish_reason\":null}]}\n\n");
            }
            PromptKind::Completion => {
                buf.extend_from_slice(b"{\"index\":0,\"text\":");
                push_json_str(buf, text);
                buf.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            }
        }
    }

    /// The finish chunk, with `usage` on it when given (llama.cpp's completions).
    pub fn finish(&self, buf: &mut BytesMut, finish: Finish, usage: Option<&Usage>) {
        if let Some(events) = &self.events {
            return events.finish(buf, finish);
        }
        buf.extend_from_slice(&self.head);
        match self.kind {
            PromptKind::Chat => buf.extend_from_slice(b"{\"index\":0,\"delta\":{},"),
            PromptKind::Completion => {
                buf.extend_from_slice(b"{\"index\":0,\"text\":\"\",\"logprobs\":null,");
            }
        }
        buf.extend_from_slice(b"\"finish_reason\":\"");
        buf.extend_from_slice(finish.as_str().as_bytes());
        buf.extend_from_slice(b"\"}]");
        if let Some(usage) = usage {
            buf.extend_from_slice(b",\"usage\":");
            usage.write(buf);
        }
        buf.extend_from_slice(b"}\n\n");
    }

    /// The OpenAI-style trailing usage chunk, `"choices": []`.
    pub fn usage(&self, buf: &mut BytesMut, usage: &Usage) {
        if self.events.is_some() {
            return; // the other APIs carry usage on their opening and closing events
        }
        buf.extend_from_slice(&self.head);
        buf.extend_from_slice(b"],\"usage\":");
        usage.write(buf);
        buf.extend_from_slice(b"}\n\n");
    }

    /// Puts `usage` on the event just written (vLLM's `continuous_usage_stats`).
    pub fn with_usage(buf: &mut BytesMut, usage: &Usage) {
        if buf.ends_with(b"}\n\n") {
            buf.truncate(buf.len() - 3);
            buf.extend_from_slice(b",\"usage\":");
            usage.write(buf);
            buf.extend_from_slice(b"}\n\n");
        }
    }

    pub fn done(&self, buf: &mut BytesMut) {
        if let Some(events) = &self.events {
            return events.done(buf);
        }
        buf.extend_from_slice(b"data: [DONE]\n\n");
    }
}

/// The identity shared by every chunk of one response.
pub(crate) struct ResponseIds {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ResponseIds {
    pub fn new(kind: PromptKind, model: &str) -> ResponseIds {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // Unique within the process (counter) and across restarts (clock), mixed so ids do
        // not look sequential.
        let a = splitmix64(n ^ (now.as_nanos() as u64));
        let b = splitmix64(a ^ n);
        let prefix = match kind {
            PromptKind::Chat => "chatcmpl",
            PromptKind::Completion => "cmpl",
        };
        ResponseIds { id: format!("{prefix}-{a:016x}{b:016x}"), created: now.as_secs(), model: model.to_owned() }
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Appends `text` as a JSON string literal, quotes included.
pub(crate) fn push_json_str(buf: &mut BytesMut, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.extend_from_slice(b"\"");
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => &[b'\\', b'u', b'0', b'0', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]],
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        buf.extend_from_slice(escaped);
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.extend_from_slice(b"\"");
}

/// The body of a non-streamed response.
pub(crate) fn full_body(
    kind: PromptKind,
    ids: &ResponseIds,
    reasoning_key: &str,
    reasoning: &str,
    content: &str,
    finish: Finish,
    usage: &Usage,
) -> Value {
    let choice = match kind {
        PromptKind::Chat => {
            let mut message = serde_json::Map::new();
            message.insert("role".into(), json!("assistant"));
            message.insert("content".into(), json!(content));
            let reasoning = (!reasoning.is_empty()).then_some(reasoning);
            message.insert(reasoning_key.into(), json!(reasoning));
            json!({"index": 0, "message": message, "finish_reason": finish.as_str()})
        }
        PromptKind::Completion => json!({
            "index": 0, "text": content, "logprobs": null, "finish_reason": finish.as_str()
        }),
    };
    let object = match kind {
        PromptKind::Chat => "chat.completion",
        PromptKind::Completion => "text_completion",
    };
    json!({
        "id": ids.id,
        "object": object,
        "created": ids.created,
        "model": ids.model,
        "choices": [choice],
        "usage": usage,
    })
}

/// 400 for a missing or ill-typed field.
pub(crate) fn invalid_request_body(message: &str) -> Value {
    json!({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})
}

/// 404 for a model the server does not serve, as vLLM answers it.
pub(crate) fn model_not_found_body(model: &str) -> Value {
    json!({"error": {"message": format!("The model `{model}` does not exist."), "type": "NotFoundError", "param": null, "code": 404}})
}

/// 500 for a body that is not JSON (llama.cpp's answer to it).
pub(crate) fn server_error_body(message: &str) -> Value {
    json!({"error": {"code": 500, "message": message, "type": "server_error"}})
}

/// 400 for a prompt longer than the context, with llama.cpp's token fields.
pub(crate) fn context_error_body(prompt_tokens: u32, context_limit: u32) -> Value {
    let message = format!(
        "This model's maximum context length is {context_limit} tokens. However, your \
         request has {prompt_tokens} input tokens. Please reduce the length of the input \
         messages."
    );
    json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "param": null,
        "code": "context_length_exceeded",
        "n_prompt_tokens": prompt_tokens,
        "n_ctx": context_limit,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_event(bytes: &[u8]) -> Value {
        let text = std::str::from_utf8(bytes).expect("utf-8");
        let json = text.strip_prefix("data: ").and_then(|t| t.strip_suffix("\n\n")).expect("one SSE event");
        serde_json::from_str(json).expect("valid JSON")
    }

    #[test]
    fn escaping_matches_serde() {
        for text in ["plain", "q\"uote", "back\\slash", "nl\n\r\t", "\u{1}\u{1f}", "é ✓ 🚀", ""] {
            let mut buf = BytesMut::new();
            push_json_str(&mut buf, text);
            let expected = serde_json::to_string(text).expect("serialize");
            assert_eq!(std::str::from_utf8(&buf).expect("utf-8"), expected);
        }
    }

    #[test]
    fn chat_chunks_have_the_engine_shape() {
        let ids = ResponseIds::new(PromptKind::Chat, "we\"ird");
        let writer = ChunkWriter::new(PromptKind::Chat, "reasoning", &ids);
        let mut buf = BytesMut::new();
        writer.role(&mut buf);
        let role = parse_event(&buf.split());
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["model"], "we\"ird");
        assert!(role["id"].as_str().expect("id").starts_with("chatcmpl-"));
        assert_eq!(role["choices"][0]["delta"], json!({"role": "assistant", "content": null}));
        assert_eq!(role["choices"][0]["finish_reason"], Value::Null);

        writer.delta(&mut buf, Channel::Reasoning, " hmm");
        let delta = parse_event(&buf.split());
        assert_eq!(delta["choices"][0]["delta"], json!({"reasoning": " hmm"}));

        let usage = Usage::new(10, 4, 3);
        writer.finish(&mut buf, Finish::Length, None);
        let finish = parse_event(&buf.split());
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        assert_eq!(finish["choices"][0]["finish_reason"], "length");
        assert!(finish.get("usage").is_none());

        writer.usage(&mut buf, &usage);
        let chunk = parse_event(&buf.split());
        assert_eq!(chunk["choices"], json!([]));
        assert_eq!(
            chunk["usage"],
            json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                   "prompt_tokens_details": {"cached_tokens": 4}})
        );
        assert_eq!(chunk["usage"], serde_json::to_value(usage).expect("serialize"));
    }

    #[test]
    fn completion_chunks_carry_text() {
        let ids = ResponseIds::new(PromptKind::Completion, "m");
        let writer = ChunkWriter::new(PromptKind::Completion, "reasoning_content", &ids);
        let mut buf = BytesMut::new();
        writer.delta(&mut buf, Channel::Content, " Paris");
        let delta = parse_event(&buf.split());
        assert_eq!(delta["object"], "text_completion");
        assert_eq!(delta["choices"][0]["text"], " Paris");
        writer.finish(&mut buf, Finish::Stop, Some(&Usage::new(5, 0, 8)));
        let finish = parse_event(&buf.split());
        assert_eq!(finish["choices"][0]["text"], "");
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        assert_eq!(finish["usage"]["total_tokens"], 13);
    }

    #[test]
    fn ids_are_unique() {
        let a = ResponseIds::new(PromptKind::Chat, "m");
        let b = ResponseIds::new(PromptKind::Chat, "m");
        assert_ne!(a.id, b.id);
        assert_eq!(a.id.len(), "chatcmpl-".len() + 32);
    }
}
