//! Reading a generation request body: the prompt plus the sampling fields the simulator
//! honours. Everything else (temperature, top_p, tools, …) is accepted and ignored, as real
//! engines accept fields they do not use.

use serde_json::Value;

use super::api_wire::WireApi;
use super::tokenize::{Prompt, PromptKind};

/// Echoed when the request names no model.
pub const DEFAULT_MODEL: &str = "anvil-sim";

/// The canary prefix a load generator embeds in prompts to match answers to requests.
pub(crate) const CANARY_PREFIX: &str = "ANVIL_REQ_";

/// A validated generation request, borrowing from the parsed body.
#[derive(Debug)]
pub(crate) struct GenRequest<'a> {
    pub prompt: Prompt<'a>,
    pub stream: bool,
    pub include_usage: bool,
    /// vLLM's `stream_options.continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
    /// Output token limit; `None` lets the model stop at its natural length.
    pub max_tokens: Option<u32>,
    /// vLLM's `min_tokens`: the model does not stop before this many tokens.
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// False when `chat_template_kwargs.enable_thinking` is `false`.
    pub thinking: bool,
    pub model: &'a str,
    /// `ANVIL_REQ_…` marker the visible answer must start with.
    pub canary: Option<&'a str>,
    /// "… in exactly N words": the answer is given that many words (after any marker).
    pub response_words: Option<u32>,
    /// Structured output: the answer is this many tokens of JSON (see `structured`).
    pub content_tokens: Option<u32>,
}

/// Validates `body` for the endpoint `kind`. The error is the message of a 400 answer.
#[cfg(test)]
pub(crate) fn parse(kind: PromptKind, body: &Value) -> Result<GenRequest<'_>, String> {
    parse_api(kind, WireApi::OpenAi, body)
}

/// Validates `body` for the endpoint `kind` of `api` (the Responses and Messages APIs read
/// their own prompt and budget fields, and always report usage).
pub(crate) fn parse_api(kind: PromptKind, api: WireApi, body: &Value) -> Result<GenRequest<'_>, String> {
    if !body.is_object() {
        return Err("request body must be a JSON object".into());
    }
    let prompt = match (api, kind) {
        (WireApi::Responses, _) => super::api_prompts::responses_prompt(body)?,
        (WireApi::Messages, _) => super::api_prompts::messages_prompt(body)?,
        (WireApi::OpenAi, PromptKind::Chat) => Prompt::from_chat(body)?,
        (WireApi::OpenAi, PromptKind::Completion) => Prompt::from_completion(body)?,
    };
    let (include_usage, continuous_usage) = match body.get("stream_options") {
        // The Responses and Messages APIs always report usage, on their own events.
        _ if api != WireApi::OpenAi => (true, false),
        None | Some(Value::Null) => (false, false),
        Some(options @ Value::Object(_)) => (
            opt_bool(options, "include_usage")?.unwrap_or(false),
            opt_bool(options, "continuous_usage_stats")?.unwrap_or(false),
        ),
        Some(_) => return Err("'stream_options' must be an object".into()),
    };
    // llama.cpp's precedence: n_predict, then max_completion_tokens, then max_tokens.
    let mut max_tokens = None;
    let budget_keys: &[&str] = match api {
        WireApi::Responses => &["max_output_tokens"],
        _ => &["n_predict", "max_completion_tokens", "max_tokens"],
    };
    for &key in budget_keys {
        if let Some(limit) = opt_int(body, key)? {
            // Negative means unlimited (llama.cpp's -1); 0 still yields one token.
            if limit >= 0 {
                max_tokens = Some(u32::try_from(limit).unwrap_or(u32::MAX).max(1));
            }
            break;
        }
    }
    let min_tokens = opt_int(body, "min_tokens")?.map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)).unwrap_or(0);
    let thinking = match body.get("chat_template_kwargs") {
        Some(kwargs @ Value::Object(_)) => opt_bool(kwargs, "enable_thinking")?.unwrap_or(true),
        _ => true,
    };
    let model = match body.get("model") {
        None | Some(Value::Null) => DEFAULT_MODEL,
        Some(Value::String(name)) => name.as_str(),
        Some(_) => return Err("'model' must be a string".into()),
    };
    let canary = prompt.canary_source().iter().find_map(|text| find_canary(text));
    let response_words = prompt.canary_source().iter().find_map(|text| find_word_count(text));
    Ok(GenRequest {
        stream: opt_bool(body, "stream")?.unwrap_or(false),
        include_usage,
        continuous_usage,
        max_tokens,
        min_tokens,
        ignore_eos: opt_bool(body, "ignore_eos")?.unwrap_or(false),
        thinking,
        model,
        canary,
        response_words,
        content_tokens: None,
        prompt,
    })
}

/// `ANVIL_REQ_` plus the longest following run of `[A-Za-z0-9_]`, at its first occurrence.
pub(crate) fn find_canary(text: &str) -> Option<&str> {
    let start = memchr::memmem::find(text.as_bytes(), CANARY_PREFIX.as_bytes())?;
    let tail = &text.as_bytes()[start + CANARY_PREFIX.len()..];
    let run = tail.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
    // The run is ASCII, so the end is a char boundary.
    text.get(start..start + CANARY_PREFIX.len() + run)
}

/// The N of "exactly N words" in an instruction: a model that follows instructions perfectly.
pub(crate) fn find_word_count(text: &str) -> Option<u32> {
    let at = memchr::memmem::find(text.as_bytes(), b"exactly ")?;
    let rest = &text[at + "exactly ".len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !rest[digits..].starts_with(" words") {
        return None;
    }
    rest[..digits].parse().ok()
}

fn opt_bool(object: &Value, key: &str) -> Result<Option<bool>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("'{key}' must be a boolean")),
    }
}

fn opt_int(object: &Value, key: &str) -> Result<Option<i64>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(i))
            } else if n.as_u64().is_some() {
                Ok(Some(i64::MAX))
            } else {
                Err(format!("'{key}' must be an integer"))
            }
        }
        Some(_) => Err(format!("'{key}' must be an integer")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canary_takes_the_maximal_identifier_run() {
        assert_eq!(find_canary("Begin with ANVIL_REQ_ab12_X9. then"), Some("ANVIL_REQ_ab12_X9"));
        assert_eq!(find_canary("ANVIL_REQ_"), Some("ANVIL_REQ_"));
        assert_eq!(find_canary("ANVIL_REQ_é"), Some("ANVIL_REQ_"));
        assert_eq!(find_canary("no marker"), None);
    }

    #[test]
    fn fields_are_read_with_defaults() {
        let body = json!({"messages": [{"role": "user", "content": "hi ANVIL_REQ_7"}]});
        let req = parse(PromptKind::Chat, &body).expect("valid");
        assert!(!req.stream && !req.include_usage && !req.ignore_eos && req.thinking);
        assert_eq!(req.max_tokens, None);
        assert_eq!(req.model, DEFAULT_MODEL);
        assert_eq!(req.canary, Some("ANVIL_REQ_7"));

        let body = json!({"prompt": "x", "stream": true, "stream_options": {"include_usage": true},
            "max_tokens": 0, "min_tokens": 4, "ignore_eos": true, "model": "m",
            "temperature": 0.7, "chat_template_kwargs": {"enable_thinking": false}});
        let req = parse(PromptKind::Completion, &body).expect("valid");
        assert!(req.stream && req.include_usage && req.ignore_eos && !req.thinking);
        assert_eq!(req.max_tokens, Some(1));
        assert_eq!(req.min_tokens, 4);
        assert_eq!(req.model, "m");
    }

    #[test]
    fn max_tokens_precedence_and_unlimited() {
        let body = json!({"prompt": "x", "max_tokens": 5, "max_completion_tokens": 9});
        let req = parse(PromptKind::Completion, &body).expect("valid");
        assert_eq!(req.max_tokens, Some(9));
        let body = json!({"prompt": "x", "max_tokens": -1});
        let req = parse(PromptKind::Completion, &body).expect("valid");
        assert_eq!(req.max_tokens, None);
    }

    #[test]
    fn ill_typed_fields_are_refused() {
        let cases = [
            json!([1, 2]),
            json!({"prompt": "x", "stream": "yes"}),
            json!({"prompt": "x", "max_tokens": 1.5}),
            json!({"prompt": "x", "max_tokens": "10"}),
            json!({"prompt": "x", "model": 3}),
            json!({"prompt": "x", "stream_options": 1}),
            json!({"messages": [{"role": "user", "content": "x"}]}),
        ];
        for body in cases {
            assert!(parse(PromptKind::Completion, &body).is_err(), "accepted {body}");
        }
    }
}
