//! One SSE data payload → what it means for timing: text deltas, finish, usage, errors.
//!
//! Only the fields the measurements need are read; strings borrow from the payload unless they
//! contain escapes, and only the first choice is looked at (the tool always asks for `n = 1`).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, SeqAccess, Visitor};

/// What a data payload carries.
#[derive(Debug, PartialEq)]
pub enum StreamEvent<'a> {
    /// `data: [DONE]`.
    Done,
    Chunk {
        delta: Delta<'a>,
        /// `finish_reason` of the first choice, when set (`stop`, `length`, …).
        finish_reason: Option<Cow<'a, str>>,
        usage: Option<Usage>,
    },
    /// An error object sent inside the stream (engines do this for failures after the headers).
    Error { kind: Option<String>, message: String },
    /// The last event of a stream that has no `[DONE]` (Responses API `response.completed`):
    /// its finish reason and usage count, then the response is complete.
    End { finish_reason: Option<Cow<'a, str>>, usage: Option<Usage> },
    /// The response ended without its answer (Responses API `response.failed`, or
    /// `response.incomplete` for a reason other than the output budget).
    Failed { incomplete: bool, kind: Option<String>, message: String },
}

/// Text of one chunk. Chat puts visible text in `content` and thinking in `reasoning_content`
/// (llama.cpp, SGLang) or `reasoning` (newer vLLM); completions put text in `text`.
#[derive(Debug, Default, PartialEq)]
pub struct Delta<'a> {
    pub content: Option<Cow<'a, str>>,
    pub reasoning: Option<Cow<'a, str>>,
    /// Pieces of tool calls (chat `delta.tool_calls[]`, Responses `function_call` items and
    /// argument deltas, Messages `tool_use` blocks and `input_json_delta`); empty, and never
    /// allocated, for text chunks.
    pub tools: Vec<ToolPiece<'a>>,
}

/// One piece of a streamed tool call: the call's index in the response, and whichever of its
/// id, name and argument text this piece carries.
#[derive(Debug, Default, PartialEq)]
pub struct ToolPiece<'a> {
    pub index: u64,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    /// A fragment of the arguments' JSON text, to append.
    pub arguments: Option<Cow<'a, str>>,
    /// The whole arguments text (Responses `response.function_call_arguments.done`): taken
    /// when no fragment arrived.
    pub whole_arguments: Option<Cow<'a, str>>,
}

/// Server-reported token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`; `None` when the server does not report it.
    pub cached_tokens: Option<u64>,
    /// Reasoning tokens among the completion tokens, when the server says (Responses API
    /// `output_tokens_details.reasoning_tokens`, chat `completion_tokens_details`).
    pub reasoning_tokens: Option<u64>,
    /// The first count that was a number but no count (negative, fractional, beyond 64 bits):
    /// the field, in chat's names, and the number. Such usage describes no response; the
    /// request is excluded as `usage_implausible`, not failed as unreadable JSON.
    pub not_a_count: Option<(&'static str, f64)>,
}

/// A token count as the wire gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Count {
    N(u64),
    /// A JSON number that is no count: negative, fractional, or beyond 64 bits.
    NotACount(f64),
}

impl Usage {
    /// Usage from the counts of one usage object; `None` counts were absent or null.
    pub(super) fn from_counts(
        prompt: Option<Count>,
        completion: Option<Count>,
        cached: Option<Count>,
        reasoning: Option<Count>,
    ) -> Usage {
        let mut u = Usage::default();
        for (name, count, slot) in [
            ("prompt_tokens", prompt, &mut u.prompt_tokens),
            ("completion_tokens", completion, &mut u.completion_tokens),
            ("cached_tokens", cached, &mut u.cached_tokens),
            ("reasoning_tokens", reasoning, &mut u.reasoning_tokens),
        ] {
            match count {
                Some(Count::N(n)) => *slot = Some(n),
                Some(Count::NotACount(v)) => {
                    u.not_a_count.get_or_insert((name, v));
                }
                None => {}
            }
        }
        u
    }
}

/// An optional token count: any JSON number is taken (a count, or a number that is none, for
/// the plausibility check to judge), `null` is absent; anything else is a type error.
pub(super) fn opt_count<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Count>, D::Error> {
    struct C;
    impl<'de> Visitor<'de> for C {
        type Value = Option<Count>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a token count or null")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(C)
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(Count::N(v)))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(u64::try_from(v).map_or(Count::NotACount(v as f64), Count::N)))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            // `3.0` is the count 3; a float that names no whole count exactly is none.
            let whole = v >= 0.0 && v.fract() == 0.0 && v < 9_007_199_254_740_992.0;
            Ok(Some(if whole { Count::N(v as u64) } else { Count::NotACount(v) }))
        }
    }
    d.deserialize_option(C)
}

/// What a payload that serde could not read is, in the user's words: not JSON at all, JSON
/// that is no object (`data: null`), or an object with a field of the wrong type. `what` names
/// the payload (`stream chunk`, `the answer`); serde's names of this module's types never show.
pub(super) fn json_error(what: &str, text: &str, e: &serde_json::Error) -> ChunkError {
    use serde_json::error::Category;
    let detail = e.to_string();
    let detail = match detail.find("struct Wire") {
        Some(at) => {
            let end = detail[at + 7..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(detail.len(), |n| at + 7 + n);
            format!("{}an object{}", &detail[..at], &detail[end..])
        }
        None => detail,
    };
    if !matches!(e.classify(), Category::Data) {
        return ChunkError::InvalidJson(format!("{what} is not valid JSON: {detail}"));
    }
    let kind = match text.trim_start().as_bytes().first() {
        Some(b'{') => None,
        Some(b'n') => Some("JSON null"),
        Some(b't' | b'f') => Some("a JSON boolean"),
        Some(b'"') => Some("a JSON string"),
        Some(b'[') => Some("a JSON array"),
        _ => Some("a JSON number"),
    };
    ChunkError::InvalidJson(match kind {
        Some(kind) => format!("{what} is {kind}, not an object"),
        None => format!("{what} has a field of the wrong type: {detail}"),
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("stream chunk is not valid UTF-8")]
    InvalidUtf8,
    /// The whole message: what was not readable, and why.
    #[error("{0}")]
    InvalidJson(String),
}

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(borrow, default)]
    choices: FirstOf<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(borrow, default)]
    error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, default, deserialize_with = "opt_str")]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

/// One element of chat's `delta.tool_calls`.
#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(borrow, default, deserialize_with = "opt_str")]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_str")]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "opt_count")]
    prompt_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    completion_tokens: Option<Count>,
    #[serde(default)]
    prompt_tokens_details: Option<WireDetails>,
    #[serde(default)]
    completion_tokens_details: Option<WireDetails>,
}

#[derive(Deserialize)]
pub(super) struct WireDetails {
    #[serde(default, deserialize_with = "opt_count")]
    pub cached_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    pub reasoning_tokens: Option<Count>,
}

#[derive(Deserialize)]
struct WireError<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// An optional string that borrows from the input unless it holds escapes. (serde's own
/// `Option<Cow<str>>` always copies; borrowing is what keeps a chunk free of allocations.)
pub(super) fn opt_str<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Str;
    impl<'de> Visitor<'de> for Str {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(Str)
        }
        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
    }
    d.deserialize_option(Str)
}

/// The first element of a JSON array; the rest are skipped without allocating.
struct FirstOf<T>(Option<T>);

impl<T> Default for FirstOf<T> {
    fn default() -> Self {
        FirstOf(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for FirstOf<T> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = FirstOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(FirstOf(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstOf(first))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Interpret one data payload.
pub fn parse_event(data: &[u8]) -> Result<StreamEvent<'_>, ChunkError> {
    if data.trim_ascii() == b"[DONE]" {
        return Ok(StreamEvent::Done);
    }
    // UTF-8 is checked once for the whole payload; parsing from `str` then skips the check that
    // parsing from bytes repeats for every string and key.
    let text = std::str::from_utf8(data).map_err(|_| ChunkError::InvalidUtf8)?;
    // Text deltas, nearly every payload, take the validating scanner; the rest (and anything it
    // is not sure of) the general parser.
    match super::scan::chat_chunk(text) {
        Some(event) => Ok(event),
        None => parse_event_general(text),
    }
}

/// `parse_event`, reading a payload that repeats the stream's last text chunk (`shape`) by
/// comparing, and learning the next shape from the others.
pub(super) fn parse_event_shaped<'a>(
    data: &'a [u8],
    shape: &mut super::shape::ChunkShape,
) -> Result<StreamEvent<'a>, ChunkError> {
    if let Some(event) = shape.read(data) {
        return Ok(event);
    }
    let event = parse_event(data)?;
    shape.learn(data, &event);
    Ok(event)
}

/// `parse_event` by serde alone, for a payload already known to be UTF-8.
pub(super) fn parse_event_general(text: &str) -> Result<StreamEvent<'_>, ChunkError> {
    let chunk: WireChunk<'_> = serde_json::from_str(text).map_err(|e| json_error("stream chunk", text, &e))?;
    if let Some(err) = chunk.error {
        return Ok(StreamEvent::Error {
            kind: error_kind(err.kind.as_deref(), err.code.as_ref()),
            message: err.message.unwrap_or_default().into_owned(),
        });
    }
    let (delta, finish_reason) = match chunk.choices.0 {
        None => (Delta::default(), None),
        Some(choice) => {
            let (content, reasoning, calls) = match choice.delta {
                Some(d) => (d.content.or(choice.text), d.reasoning_content.or(d.reasoning), d.tool_calls),
                None => (choice.text, None, None),
            };
            let tools = calls
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(i, call)| {
                    let (name, arguments) = call.function.map_or((None, None), |f| (f.name, f.arguments));
                    ToolPiece {
                        index: call.index.unwrap_or(i as u64),
                        id: call.id,
                        name,
                        arguments,
                        whole_arguments: None,
                    }
                })
                .collect();
            (Delta { content, reasoning, tools }, choice.finish_reason)
        }
    };
    let usage = chunk.usage.map(|u| {
        Usage::from_counts(
            u.prompt_tokens,
            u.completion_tokens,
            u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        )
    });
    Ok(StreamEvent::Chunk { delta, finish_reason, usage })
}

pub(super) fn error_kind(kind: Option<&str>, code: Option<&serde_json::Value>) -> Option<String> {
    match (kind, code) {
        (Some(k), _) => Some(k.to_string()),
        (None, Some(serde_json::Value::String(c))) => Some(c.clone()),
        (None, Some(c)) if !c.is_null() => Some(c.to_string()),
        _ => None,
    }
}

/// What an HTTP error body says: `(type or code, message)`. Understands OpenAI's
/// `{"error": {...}}`, vLLM's flat `{"object": "error", ...}` and FastAPI's `{"detail": ...}`.
pub fn parse_error_body(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, None);
    };
    let obj = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
    let text = |key: &str| obj.get(key).and_then(|x| x.as_str()).map(str::to_string);
    let code = obj.get("code").filter(|c| c.is_string()).and_then(|c| c.as_str()).map(str::to_string);
    let kind = code.filter(|c| c.chars().any(|ch| ch.is_ascii_alphabetic())).or_else(|| text("type"));
    let message =
        text("message").or_else(|| v.get("detail").map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_string)));
    (kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &str) -> StreamEvent<'_> {
        parse_event(data.as_bytes()).unwrap()
    }

    #[test]
    fn role_only_chunk_has_no_text() {
        let e = chunk(
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"id":"x"}"#,
        );
        assert_eq!(e, StreamEvent::Chunk { delta: Delta::default(), finish_reason: None, usage: None });
    }

    #[test]
    fn content_and_reasoning_fields() {
        let StreamEvent::Chunk { delta, .. } = chunk(r#"{"choices":[{"delta":{"content":"Hi \"x\""}}]}"#) else {
            panic!()
        };
        assert_eq!(delta.content.as_deref(), Some("Hi \"x\""));
        let StreamEvent::Chunk { delta, .. } = chunk(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#) else {
            panic!()
        };
        assert_eq!((delta.content, delta.reasoning.as_deref()), (None, Some("think")));
        let StreamEvent::Chunk { delta, .. } = chunk(r#"{"choices":[{"delta":{"reasoning":"vllm"}}]}"#) else {
            panic!()
        };
        assert_eq!(delta.reasoning.as_deref(), Some("vllm"));
    }

    #[test]
    fn borrowed_unless_escaped() {
        let StreamEvent::Chunk { delta, .. } = chunk(r#"{"choices":[{"delta":{"content":"plain"}}]}"#) else {
            panic!()
        };
        assert!(matches!(delta.content, Some(Cow::Borrowed(_))));
    }

    #[test]
    fn completions_text_and_usage_on_finish_chunk() {
        let e = chunk(
            r#"{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"completion_tokens":8,"prompt_tokens":5,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0}}"#,
        );
        let StreamEvent::Chunk { delta, finish_reason, usage } = e else { panic!() };
        assert_eq!(delta.content.as_deref(), Some(""));
        assert_eq!(finish_reason.as_deref(), Some("length"));
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(8),
                cached_tokens: Some(0),
                reasoning_tokens: None,
                not_a_count: None
            })
        );
    }

    #[test]
    fn usage_chunk_without_choices_and_without_cache_details() {
        let StreamEvent::Chunk { usage, .. } =
            chunk(r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#)
        else {
            panic!()
        };
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: Some(7),
                completion_tokens: Some(3),
                cached_tokens: None,
                reasoning_tokens: None,
                not_a_count: None
            })
        );
        let StreamEvent::Chunk { usage, .. } = chunk(r#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#) else {
            panic!()
        };
        assert_eq!(usage, None);
    }

    #[test]
    fn numbers_that_are_no_counts_are_kept_for_the_plausibility_check() {
        let usage = |text: &str| match parse_event(text.as_bytes()).unwrap() {
            StreamEvent::Chunk { usage, .. } => usage.unwrap(),
            other => panic!("{other:?}"),
        };
        let u = usage(r#"{"choices":[],"usage":{"prompt_tokens":-3,"completion_tokens":2.5}}"#);
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.not_a_count), (None, None, Some(("prompt_tokens", -3.0))));
        let u = usage(r#"{"choices":[],"usage":{"completion_tokens":18446744073709551616}}"#);
        assert_eq!(u.not_a_count, Some(("completion_tokens", 18446744073709551616.0)));
        let u = usage(r#"{"choices":[],"usage":{"completion_tokens":3.0,"prompt_tokens":18446744073709551615}}"#);
        assert_eq!((u.completion_tokens, u.prompt_tokens, u.not_a_count), (Some(3), Some(u64::MAX), None));
        let u = usage(r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":-1}}}"#);
        assert_eq!(u.not_a_count, Some(("cached_tokens", -1.0)));
    }

    #[test]
    fn unreadable_payloads_say_what_they_are_in_the_users_words() {
        let message = |text: &str| match parse_event(text.as_bytes()) {
            Err(ChunkError::InvalidJson(m)) => m,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(message("null"), "stream chunk is JSON null, not an object");
        assert_eq!(message("[1]"), "stream chunk is a JSON array, not an object");
        assert_eq!(message("\"x\""), "stream chunk is a JSON string, not an object");
        assert_eq!(message("7"), "stream chunk is a JSON number, not an object");
        for text in [r#"{"choices":[{"delta":3}]}"#, r#"{"usage":{"prompt_tokens_details":3}}"#, r#"{"choices":"x"}"#] {
            let m = message(text);
            assert!(m.starts_with("stream chunk has a field of the wrong type: invalid type: "), "{m}");
            assert!(!m.contains("Wire") && !m.contains("struct"), "{m}");
        }
        assert!(message("{\"choices\": [tru").starts_with("stream chunk is not valid JSON: "));
    }

    #[test]
    fn done_error_and_garbage() {
        assert_eq!(chunk("[DONE]"), StreamEvent::Done);
        assert_eq!(
            chunk(r#"{"error":{"message":"boom","type":"server_error","code":500}}"#),
            StreamEvent::Error { kind: Some("server_error".into()), message: "boom".into() }
        );
        assert!(matches!(parse_event(b"{\"choices\": [tru"), Err(ChunkError::InvalidJson(_))));
        assert_eq!(parse_event(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}"), Err(ChunkError::InvalidUtf8));
    }

    #[test]
    fn error_bodies_of_known_engines() {
        let llama = include_bytes!("../../../tests/fixtures/sse/llamacpp-context-too-long.body");
        let (kind, message) = parse_error_body(llama);
        assert_eq!(kind.as_deref(), Some("exceed_context_size_error"));
        assert!(message.unwrap().contains("exceeds the available context size"));
        let vllm = br#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(parse_error_body(vllm).0.as_deref(), Some("BadRequestError"));
        let openai =
            br#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert_eq!(parse_error_body(openai).0.as_deref(), Some("context_length_exceeded"));
        assert_eq!(parse_error_body(br#"{"detail":"Not Found"}"#), (None, Some("Not Found".into())));
        assert_eq!(parse_error_body(b"<html>"), (None, None));
    }
}
