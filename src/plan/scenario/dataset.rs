//! Prompts from files: JSON Lines (one prompt per line) or a ShareGPT-style JSON array.
//!
//! JSON Lines accepts, per line, a string, `{"prompt": "..."}` (also `text`), or
//! `{"messages": [{"role": ..., "content": ...}, ...]}`. ShareGPT files are an array of
//! `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}`; the
//! conversation up to and including its first human turn becomes one prompt. Blank lines are
//! skipped; anything else that does not parse is an error naming the line.
//!
//! A row (JSON Lines object or ShareGPT item) may name local images: `"image": "a.jpg"` (or an
//! array) as ShareGPT4V and LLaVA ship them, or chat content parts of type `image_url` whose
//! URL is a path; `dataset_media` checks each file. LLaVA's `<image>` placeholder is taken out
//! of the text: the image travels as a content part.

use std::path::Path;

use serde_json::Value;

use super::dataset_media::{self, DatasetImage};
use super::{ChatMessage, Dataset, DatasetFormat, DatasetPrompt};

/// A prompt, the image paths its row names, and where the row is (`line 3`, `item 3`).
type Row = (DatasetPrompt, Vec<String>, String);

/// Load a dataset; the format follows the extension (`.jsonl` → JSON Lines, otherwise the
/// content decides: a JSON array is ShareGPT). An error about an image file comes with its
/// own fix (`dataset_media::FIX`).
pub fn load(path: &Path) -> Result<Dataset, (String, Option<&'static str>)> {
    let (format, rows) = rows(path).map_err(|e| (e, None))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let any_images = rows.iter().any(|(_, images, _)| !images.is_empty());
    let mut prompts = Vec::with_capacity(rows.len());
    let mut images: Vec<Vec<DatasetImage>> = Vec::new();
    for (prompt, names, at) in rows {
        if any_images {
            let checked: Result<Vec<_>, _> = names.iter().map(|n| dataset_media::check(dir, n)).collect();
            images.push(checked.map_err(|e| (format!("{at}: {e}"), Some(dataset_media::FIX)))?);
        }
        prompts.push(prompt);
    }
    Ok(Dataset { path: path.to_path_buf(), format, count: prompts.len(), prompts, images })
}

fn rows(path: &Path) -> Result<(DatasetFormat, Vec<Row>), String> {
    let text = crate::sys::read_input_to_string(path).map_err(|e| match e.kind() {
        // The file is there but is not text: the fix is its encoding, not its path.
        std::io::ErrorKind::InvalidData => "is not UTF-8 text (JSON is UTF-8): save it as UTF-8".to_string(),
        _ => format!("cannot read it: {e}"),
    })?;
    let is_array = text.trim_start().starts_with('[');
    let jsonl = path.extension().is_some_and(|e| e == "jsonl") || !is_array;
    let (format, prompts) = if jsonl {
        (DatasetFormat::Jsonl, parse_jsonl(&text)?)
    } else {
        (DatasetFormat::Sharegpt, parse_sharegpt(&text)?)
    };
    if prompts.is_empty() {
        return Err("holds no prompts".to_string());
    }
    Ok((format, prompts))
}

fn parse_jsonl(text: &str) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| format!("line {}: not JSON ({e})", n + 1))?;
        let at = format!("line {}", n + 1);
        let (prompt, mut images) = prompt_from_value(&value).map_err(|e| format!("{at}: {e}"))?;
        images.extend(dataset_media::image_key(&value).map_err(|e| format!("{at}: {e}"))?);
        out.push((strip_placeholders(prompt, !images.is_empty()), images, at));
    }
    Ok(out)
}

/// A row's prompt and the image paths its content parts name.
fn prompt_from_value(v: &Value) -> Result<(DatasetPrompt, Vec<String>), String> {
    if let Some(s) = v.as_str() {
        return non_empty(s).map(|s| (DatasetPrompt::Text(s), Vec::new()));
    }
    if let Some(s) = v.get("prompt").or_else(|| v.get("text")).and_then(Value::as_str) {
        return non_empty(s).map(|s| (DatasetPrompt::Text(s), Vec::new()));
    }
    if let Some(messages) = v.get("messages").and_then(Value::as_array) {
        let mut out = Vec::with_capacity(messages.len());
        let mut images = Vec::new();
        for m in messages {
            let role = m.get("role").and_then(Value::as_str).ok_or("a message has no \"role\"")?;
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let (text, named) = dataset_media::content_parts(parts)?;
                    images.extend(named);
                    text
                }
                _ => return Err("a message has no string or parts \"content\"".to_string()),
            };
            out.push(ChatMessage { role: role.to_string(), content });
        }
        if !out.iter().any(|m| m.role == "user") {
            return Err("the messages hold no user turn".to_string());
        }
        return Ok((DatasetPrompt::Messages(out), images));
    }
    if v.get("conversations").is_some() {
        return sharegpt_item(v).map(|p| (p, Vec::new())).ok_or_else(|| "the conversation has no human turn".into());
    }
    Err("expected a string, {\"prompt\": ...} or {\"messages\": [...]}".to_string())
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() { Err("the prompt is empty".to_string()) } else { Ok(s.to_string()) }
}

/// `<image>` placeholders (LLaVA, ShareGPT4V) out of a prompt whose row names images.
fn strip_placeholders(prompt: DatasetPrompt, has_images: bool) -> DatasetPrompt {
    if !has_images {
        return prompt;
    }
    let strip = |s: &str| s.replace("<image>\n", "").replace("\n<image>", "").replace("<image>", "");
    match prompt {
        DatasetPrompt::Text(t) => DatasetPrompt::Text(strip(&t)),
        DatasetPrompt::Messages(m) => {
            DatasetPrompt::Messages(m.into_iter().map(|m| ChatMessage { content: strip(&m.content), ..m }).collect())
        }
    }
}

fn parse_sharegpt(text: &str) -> Result<Vec<Row>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let items = value.as_array().ok_or("a ShareGPT file is a JSON array")?;
    let mut out = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let at = format!("item {}", n + 1);
        let Some(prompt) = sharegpt_item(item) else { continue };
        let images = dataset_media::image_key(item).map_err(|e| format!("{at}: {e}"))?;
        out.push((strip_placeholders(prompt, !images.is_empty()), images, at));
    }
    Ok(out)
}

/// A ShareGPT item's conversation up to its first human turn (`None`: it has none).
fn sharegpt_item(item: &Value) -> Option<DatasetPrompt> {
    {
        let turns = item.get("conversations").and_then(Value::as_array)?;
        let mut messages = Vec::new();
        for turn in turns {
            let from = turn.get("from").and_then(Value::as_str).unwrap_or_default();
            let Some(value) = turn.get("value").and_then(Value::as_str) else { continue };
            let role = match from {
                "human" | "user" => "user",
                "system" => "system",
                _ => "assistant",
            };
            messages.push(ChatMessage { role: role.to_string(), content: value.to_string() });
            if role == "user" {
                break;
            }
        }
        // Conversations without a human turn (or an empty one) carry no prompt.
        messages
            .last()
            .is_some_and(|m| m.role == "user" && !m.content.trim().is_empty())
            .then_some(DatasetPrompt::Messages(messages))
    }
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
    fn jsonl_shapes() {
        let (_d, p) = write(
            "p.jsonl",
            "\"plain\"\n{\"prompt\": \"with key\"}\n\n{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}\n",
        );
        let d = load(&p).unwrap();
        assert_eq!((d.format, d.count), (DatasetFormat::Jsonl, 3));
        assert_eq!(d.prompts[0], DatasetPrompt::Text("plain".into()));
        assert!(matches!(&d.prompts[2], DatasetPrompt::Messages(m) if m.len() == 2 && m[1].content == "u"));
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let (_d, p) = write("p.jsonl", "\"ok\"\n{\"nope\": 1}\n");
        assert!(load(&p).unwrap_err().0.starts_with("line 2"));
        let (_d, p) = write("p.jsonl", "\"ok\"\n{broken\n");
        assert!(load(&p).unwrap_err().0.starts_with("line 2: not JSON"));
    }

    #[test]
    fn sharegpt_takes_the_conversation_to_the_first_human_turn() {
        let (_d, p) = write(
            "sg.json",
            r#"[{"id":"a","conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"hi"},{"from":"gpt","value":"hello"}]},
                {"id":"b","conversations":[{"from":"gpt","value":"only a reply"}]},
                {"id":"c","conversations":[{"from":"human","value":"second"}]}]"#,
        );
        let d = load(&p).unwrap();
        assert_eq!((d.format, d.count), (DatasetFormat::Sharegpt, 2));
        assert!(matches!(&d.prompts[0], DatasetPrompt::Messages(m) if m.len() == 2 && m[1].role == "user"));
    }
}
