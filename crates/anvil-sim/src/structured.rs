//! Structured output: a request that asks for JSON (in any spelling a load generator sends)
//! is answered with JSON that satisfies its schema (`json_instance::instance`), streamed token
//! by token at the usual pace; `faults.schema_invalid_rate` makes that share of answers break
//! it (`json_instance::broken`), and every such answer is counted by how it was broken.
//!
//! The spellings read, first found wins: `response_format` (`{"type": "json_schema",
//! "json_schema": {"schema": …}}`, `{"type": "json_object"}` with or without llama.cpp's
//! `schema`; TensorRT-LLM's `{"type": "json", "schema": …}`), the Responses API's `text.format` (`{"type": "json_schema", "schema": …}` or
//! `json_object`), vLLM's `structured_outputs.json` / `structured_outputs.json_object` and its
//! older `guided_json`, and llama.cpp's top-level `json_schema`. `json_object` without a
//! schema answers with an object that satisfies `{"type": "object"}`.
//!
//! The answer's tokens are its JSON text cut into pieces of at most `TOKEN_CHARS` characters
//! (JSON tokenizes densely: punctuation and short keys), so its output length is the JSON's
//! length over four, capped by `max_tokens` as any answer is (then it is cut, `length`).
//!
//! Which answers break is drawn from `(faults.fault_seed, the prompt's seed)`: the same prompt
//! breaks the same way every time, whatever the order of arrival.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::json_instance::{self, Broken};

/// Characters per answer token.
pub const TOKEN_CHARS: usize = 4;

/// Answers served and answers broken, by how (ground truth for the client's counts).
#[derive(Debug, Default)]
pub struct SchemaCounters {
    pub(crate) answers: AtomicU64,
    pub(crate) broken_required: AtomicU64,
    pub(crate) broken_not_json: AtomicU64,
}

impl SchemaCounters {
    fn count(&self, broken: Option<Broken>) {
        self.answers.fetch_add(1, Ordering::Relaxed);
        match broken {
            None => {}
            Some(Broken::Required) => {
                self.broken_required.fetch_add(1, Ordering::Relaxed);
            }
            Some(Broken::NotJson) => {
                self.broken_not_json.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `(answers, broken by reason)` with only the reasons that occurred.
    pub(crate) fn read(&self) -> (u64, std::collections::BTreeMap<String, u64>) {
        let mut by = std::collections::BTreeMap::new();
        for (name, counter) in [("required", &self.broken_required), ("not_json", &self.broken_not_json)] {
            let n = counter.load(Ordering::Relaxed);
            if n > 0 {
                by.insert(name.to_string(), n);
            }
        }
        (self.answers.load(Ordering::Relaxed), by)
    }
}

/// The schema a request body asks its answer to follow, in any spelling it is sent in.
pub(crate) fn requested_schema(body: &Value) -> Option<Value> {
    let object = || json!({"type": "object"});
    if let Some(rf) = body.get("response_format").filter(|v| v.is_object()) {
        match rf.get("type").and_then(Value::as_str) {
            Some("json_schema") => {
                let inner = rf.get("json_schema").and_then(|j| j.get("schema")).or_else(|| rf.get("schema"));
                return Some(inner.cloned().unwrap_or_else(object));
            }
            // TensorRT-LLM's trtllm-serve: `{"type": "json", "schema": …}`.
            Some("json_object" | "json") => return Some(rf.get("schema").cloned().unwrap_or_else(object)),
            _ => {}
        }
    }
    if let Some(format) = body.get("text").and_then(|t| t.get("format")) {
        match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => return Some(format.get("schema").cloned().unwrap_or_else(object)),
            Some("json_object") => return Some(object()),
            _ => {}
        }
    }
    if let Some(so) = body.get("structured_outputs") {
        if let Some(schema) = so.get("json") {
            return Some(as_schema(schema));
        }
        if so.get("json_object").and_then(Value::as_bool) == Some(true) {
            return Some(object());
        }
    }
    if let Some(schema) = body.get("guided_json").or_else(|| body.get("json_schema")) {
        return Some(as_schema(schema));
    }
    None
}

/// vLLM and llama.cpp take a schema as an object or as a string holding one.
fn as_schema(v: &Value) -> Value {
    match v {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| json!({"type": "object"})),
        other => other.clone(),
    }
}

/// The answer to a request for `schema`: its tokens, and how it was broken (when it was).
/// Counted in `counters` as it is decided.
pub(crate) fn answer(
    schema: &Value,
    prompt_seed: u64,
    (fault_seed, invalid_rate): (u64, f64),
    counters: &SchemaCounters,
) -> Vec<Box<str>> {
    let broken = invalid_rate > 0.0 && unit(fault_seed, prompt_seed) < invalid_rate;
    let (text, how) = if broken {
        let (text, how) = json_instance::broken(schema, prompt_seed);
        (text, Some(how))
    } else {
        (json_instance::instance(schema, prompt_seed).to_string(), None)
    };
    counters.count(how);
    tokens(&text)
}

/// `text` in pieces of at most `TOKEN_CHARS` characters.
fn tokens(text: &str) -> Vec<Box<str>> {
    let mut out = Vec::with_capacity(text.len() / TOKEN_CHARS + 1);
    let mut start = 0;
    for (n, (i, _)) in text.char_indices().enumerate() {
        if n > 0 && n % TOKEN_CHARS == 0 {
            out.push(text[start..i].into());
            start = i;
        }
    }
    if start < text.len() {
        out.push(text[start..].into());
    }
    out
}

/// A uniform draw in `[0, 1)` from the two seeds.
fn unit(a: u64, b: u64) -> f64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5343_4845_4d41_0000;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_names_its_schema() {
        let s = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}});
        let bodies = [
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}}}),
            json!({"response_format": {"type": "json_object", "schema": s}}),
            json!({"response_format": {"type": "json", "schema": s}}),
            json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": s}}}),
            json!({"structured_outputs": {"json": s}}),
            json!({"guided_json": s}),
            json!({"guided_json": s.to_string()}),
            json!({"json_schema": s}),
        ];
        for body in bodies {
            assert_eq!(requested_schema(&body).as_ref(), Some(&s), "{body}");
        }
        assert_eq!(
            requested_schema(&json!({"response_format": {"type": "json_object"}})),
            Some(json!({"type": "object"}))
        );
        assert_eq!(
            requested_schema(&json!({"structured_outputs": {"json_object": true}})),
            Some(json!({"type": "object"}))
        );
        assert_eq!(requested_schema(&json!({"response_format": {"type": "text"}})), None);
        assert_eq!(requested_schema(&json!({"messages": []})), None);
    }

    #[test]
    fn answers_are_whole_json_in_small_tokens_and_broken_at_the_configured_rate() {
        let s = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}});
        let counters = SchemaCounters::default();
        let t = answer(&s, 5, (1, 0.0), &counters);
        let text: String = t.iter().map(|p| &**p).collect();
        assert!(serde_json::from_str::<Value>(&text).unwrap().get("a").is_some());
        assert!(t.iter().all(|p| p.chars().count() <= TOKEN_CHARS));
        for seed in 0..1000 {
            answer(&s, seed, (1, 0.3), &counters);
        }
        let (answers, by) = counters.read();
        let broken: u64 = by.values().sum();
        assert_eq!(answers, 1001);
        assert!((250..350).contains(&broken), "{broken}");
        assert_eq!(by.keys().collect::<Vec<_>>(), ["required"]);
    }
}
