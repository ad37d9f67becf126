//! Conversations from files, for `[workload.sessions] dataset`: a ShareGPT-style JSON array
//! (`[{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}]`, every
//! turn kept, not only the first) or JSON Lines of OpenAI `messages`
//! (`{"messages": [{"role": "system" | "user" | "assistant", "content": ...}, ...]}`).
//!
//! Each user message is a turn; the assistant message after it is that turn's recorded answer
//! (used by `history = "recorded"`, and for its length when no `output_tokens` is given). A
//! leading system message is the conversation's system prompt; consecutive user messages are
//! joined into one turn. Conversations without a user message are skipped.

use std::path::Path;

use serde_json::Value;

use super::{ConversationSet, DatasetConversation, DatasetTurn};
use crate::text::estimate_tokens;

pub fn load(path: &Path) -> Result<ConversationSet, String> {
    let text = crate::sys::read_input_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let (format, conversations) =
        if text.trim_start().starts_with('[') { ("sharegpt", sharegpt(&text)?) } else { ("jsonl", jsonl(&text)?) };
    if conversations.is_empty() {
        return Err("holds no conversation with a user turn".to_string());
    }
    let turns = conversations.iter().map(|c| c.turns.len()).sum();
    Ok(ConversationSet { path: path.to_path_buf(), format, count: conversations.len(), turns, conversations })
}

/// Messages as (role, text) in order → a conversation.
fn build(messages: Vec<(&str, String)>) -> Option<DatasetConversation> {
    let mut system = None;
    let mut turns: Vec<DatasetTurn> = Vec::new();
    for (role, text) in messages {
        match role {
            "system" if turns.is_empty() && system.is_none() => system = Some(text),
            "user" => match turns.last_mut() {
                // Two user messages in a row are one turn.
                Some(last) if last.assistant.is_none() => {
                    last.user.push_str("\n\n");
                    last.user.push_str(&text);
                }
                _ => turns.push(DatasetTurn { user: text, assistant: None, assistant_tokens: None }),
            },
            _ => {
                if let Some(last) = turns.last_mut().filter(|t| t.assistant.is_none()) {
                    last.assistant_tokens = Some(estimate_tokens(&text).max(1));
                    last.assistant = Some(text);
                }
            }
        }
    }
    turns.retain(|t| !t.user.trim().is_empty());
    (!turns.is_empty()).then_some(DatasetConversation { system, turns })
}

fn sharegpt(text: &str) -> Result<Vec<DatasetConversation>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let items = value.as_array().ok_or("a ShareGPT file is a JSON array")?;
    let mut out = Vec::new();
    for item in items {
        let Some(turns) = item.get("conversations").and_then(Value::as_array) else { continue };
        let messages = turns
            .iter()
            .filter_map(|t| {
                let value = t.get("value").and_then(Value::as_str)?.to_string();
                let role = match t.get("from").and_then(Value::as_str).unwrap_or_default() {
                    "human" | "user" => "user",
                    "system" => "system",
                    _ => "assistant",
                };
                Some((role, value))
            })
            .collect();
        out.extend(build(messages));
    }
    Ok(out)
}

fn jsonl(text: &str) -> Result<Vec<DatasetConversation>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| format!("line {}: not JSON ({e})", n + 1))?;
        let list = value
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("line {}: expected {{\"messages\": [...]}}", n + 1))?;
        let mut messages = Vec::with_capacity(list.len());
        for m in list {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("line {}: a message has no role", n + 1))?;
            let content = m
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("line {}: a message has no string content", n + 1))?;
            let role = match role {
                "user" => "user",
                "system" | "developer" => "system",
                _ => "assistant",
            };
            messages.push((role, content.to_string()));
        }
        out.extend(build(messages));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn sharegpt_keeps_every_turn() {
        let (_d, p) = write(
            "c.json",
            r#"[{"conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"one"},{"from":"gpt","value":"a b c"},{"from":"human","value":"two"},{"from":"human","value":"more"},{"from":"gpt","value":"d"}]},
                {"conversations":[{"from":"gpt","value":"only an answer"}]}]"#,
        );
        let set = load(&p).unwrap();
        assert_eq!((set.format, set.count, set.turns), ("sharegpt", 1, 2));
        let c = &set.conversations[0];
        assert_eq!(c.system.as_deref(), Some("be brief"));
        assert_eq!(
            c.turns[0],
            DatasetTurn { user: "one".into(), assistant: Some("a b c".into()), assistant_tokens: Some(3) }
        );
        assert_eq!(c.turns[1].user, "two\n\nmore");
    }

    #[test]
    fn messages_jsonl_and_its_errors() {
        let (_d, p) = write(
            "c.jsonl",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"hello there\"}, {\"role\": \"user\", \"content\": \"again\"}]}\n",
        );
        let set = load(&p).unwrap();
        assert_eq!((set.format, set.turns), ("jsonl", 2));
        assert_eq!(set.conversations[0].turns[1].assistant, None);
        let (_d, p) = write("c.jsonl", "{\"messages\": [{\"content\": \"x\"}]}\n");
        assert!(load(&p).unwrap_err().starts_with("line 1"));
    }
}
