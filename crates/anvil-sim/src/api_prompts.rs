//! Reading the prompts of the Responses and Messages APIs (into the same `Prompt` chat
//! messages make, so counting, the prefix cache and canaries work alike), and completions
//! prompts given as token ids. Tool results are prompt text as in chat: a Responses
//! `function_call_output`'s `output` (and a `function_call`'s `arguments`), a Messages
//! `tool_result` block's string `content`.

use serde_json::Value;

use super::tokenize::{Message, Prompt, PromptKind};

/// The text parts of a content array: parts of type `text`, `input_text` or `output_text`
/// (images and other parts are skipped, as chat's are).
fn text_parts<'a>(what: &str, items: &'a [Value]) -> Result<Vec<&'a str>, String> {
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        let kind = item.get("type").and_then(Value::as_str);
        // A Messages tool result's text is read like a message's.
        if kind == Some("tool_result") {
            if let Some(Value::String(text)) = item.get("content") {
                parts.push(text.as_str());
            }
            continue;
        }
        if !matches!(kind, Some("text" | "input_text" | "output_text")) {
            continue;
        }
        match item.get("text") {
            Some(Value::String(text)) => parts.push(text.as_str()),
            _ => return Err(format!("{what}: a text part needs a string 'text'")),
        }
    }
    Ok(parts)
}

/// Content that is a string or an array of parts.
fn content<'a>(what: &str, value: Option<&'a Value>) -> Result<Vec<&'a str>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![text.as_str()]),
        Some(Value::Array(items)) => text_parts(what, items),
        Some(_) => Err(format!("{what} must be a string or an array of parts")),
    }
}

/// Messages of `role`/`content` objects.
fn messages<'a>(key: &str, items: &'a [Value], out: &mut Vec<Message<'a>>) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
        // Responses tool items: a call's arguments and a result's output are read as text.
        let text = match item.get("type").and_then(Value::as_str) {
            Some("function_call") => item.get("arguments"),
            Some("function_call_output") => item.get("output"),
            _ => None,
        };
        if let Some(Value::String(text)) = text {
            out.push(Message { role: if role == "user" { "tool" } else { role }, parts: vec![text.as_str()] });
            continue;
        }
        out.push(Message { role, parts: content(&format!("{key}[{i}].content"), item.get("content"))? });
    }
    Ok(())
}

fn chat(messages: Vec<Message<'_>>) -> Prompt<'_> {
    Prompt { kind: PromptKind::Chat, messages, tokenizer: None, default_system_tokens: 0 }
}

/// Responses API: `instructions` (a system message), then `input`, a string or messages.
pub(crate) fn responses_prompt(body: &Value) -> Result<Prompt<'_>, String> {
    let mut out = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => out.push(Message { role: "system", parts: vec![text.as_str()] }),
        Some(_) => return Err("'instructions' must be a string".into()),
    }
    match body.get("input") {
        Some(Value::String(text)) => out.push(Message { role: "user", parts: vec![text.as_str()] }),
        Some(Value::Array(items)) if !items.is_empty() => messages("input", items, &mut out)?,
        _ => return Err("'input' is required: a string or a non-empty array of messages".into()),
    }
    Ok(chat(out))
}

/// llama.cpp's rule for a Responses `input` array: a message of role `user`, `system` or
/// `developer` is placed by its role; an assistant message only with `"type": "message"`; a
/// function call, its output or a reasoning item by its type. Anything else is refused with
/// llama.cpp's own words (`None`: every item is placed, or `input` is a string).
pub(crate) fn llamacpp_unplaceable_item(body: &Value) -> Option<String> {
    let items = body.get("input")?.as_array()?;
    let placed = |item: &Value| {
        let role = item.get("role").and_then(Value::as_str);
        let kind = item.get("type").and_then(Value::as_str);
        matches!(role, Some("user" | "system" | "developer"))
            || (role == Some("assistant") && kind == Some("message"))
            || matches!(kind, Some("function_call" | "function_call_output" | "reasoning"))
    };
    let at = items.iter().position(|item| !placed(item))?;
    Some(format!("Cannot determine type of 'item' (input[{at}])"))
}

/// Messages API: `system` (a string or text blocks), then `messages`.
pub(crate) fn messages_prompt(body: &Value) -> Result<Prompt<'_>, String> {
    let mut out = Vec::new();
    let system = content("'system'", body.get("system"))?;
    if !system.is_empty() {
        out.push(Message { role: "system", parts: system });
    }
    match body.get("messages") {
        Some(Value::Array(items)) if !items.is_empty() => messages("messages", items, &mut out)?,
        _ => return Err("'messages' is required: a non-empty array".into()),
    }
    if body.get("max_tokens").is_none_or(Value::is_null) {
        return Err("'max_tokens' is required".into());
    }
    Ok(chat(out))
}

/// A completions `prompt` given as token ids: replaced by its text (decoded with the
/// simulator's tokenizer, or the ids written out as words without one) so canaries and the
/// per-prompt seed still work, and its exact token count returned.
pub(crate) fn token_id_prompt(body: &mut Value, tokenizer: Option<&tokenizers::Tokenizer>) -> Option<u32> {
    let items = body.get("prompt")?.as_array()?;
    if items.is_empty() {
        return None;
    }
    let ids: Option<Vec<u32>> = items.iter().map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())).collect();
    let ids = ids?;
    let text = tokenizer
        .and_then(|t| t.decode(&ids, false).ok())
        .unwrap_or_else(|| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "));
    body["prompt"] = Value::String(text);
    u32::try_from(ids.len()).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn responses_and_messages_prompts_read_like_chat() {
        let body = json!({"instructions": "be brief", "input": "hello ANVIL_REQ_1 there"});
        let p = responses_prompt(&body).unwrap();
        assert_eq!((p.messages.len(), p.messages[0].role), (2, "system"));
        assert_eq!(p.canary_source(), ["hello ANVIL_REQ_1 there"]);
        let body = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a b"}]}]});
        assert_eq!(responses_prompt(&body).unwrap().messages[0].parts, ["a b"]);
        assert!(responses_prompt(&json!({"input": 3})).is_err());
        let body = json!({"system": "s", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]});
        let p = messages_prompt(&body).unwrap();
        assert_eq!(p.messages.len(), 2);
        assert!(messages_prompt(&json!({"messages": [{"role": "user", "content": "x"}]})).is_err());
    }

    #[test]
    fn llamacpp_places_responses_items_by_role_or_type() {
        let typed = json!({"input": [
            {"role": "user", "content": "a"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
            {"role": "developer", "content": "c"},
        ]});
        assert_eq!(llamacpp_unplaceable_item(&typed), None);
        assert_eq!(llamacpp_unplaceable_item(&json!({"input": "a string"})), None);
        let untyped = json!({"input": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]});
        let refusal = llamacpp_unplaceable_item(&untyped).expect("an untyped assistant item is refused");
        assert!(refusal.starts_with("Cannot determine type of 'item'") && refusal.contains("input[1]"), "{refusal}");
        assert!(llamacpp_unplaceable_item(&json!({"input": [{"content": "no role"}]})).is_some());
    }

    #[test]
    fn token_ids_are_counted_exactly() {
        let mut body = json!({"prompt": [5, 17, 17, 3]});
        assert_eq!(token_id_prompt(&mut body, None), Some(4));
        assert_eq!(body["prompt"], "5 17 17 3");
        let mut text = json!({"prompt": "5 17"});
        assert_eq!(token_id_prompt(&mut text, None), None);
        let mut negative = json!({"prompt": [1, -2]});
        assert_eq!(token_id_prompt(&mut negative, None), None);
    }
}
