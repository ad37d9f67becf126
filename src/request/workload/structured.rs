//! Structured output on the request side: which schema request `i` asks for (a seeded, weighted
//! draw), the body field that carries it in the run's spelling, and the check of the answer
//! against it once the answer has ended.
//!
//! Each schema's field is serialised once, when the workload is built, and spliced into every
//! body that asks for it (one copy of the body, before the request's clock starts). The check
//! runs after the stream's end, on the captured visible content, never per chunk.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use super::PreparedRequest;
use crate::plan::scenario::json_schema::JsonSchema;
use crate::plan::scenario::{FormatKind, ResponseFormat, Spelling};
use crate::request::record::SchemaCheck;

/// Visible characters kept to check an answer (a JSON answer of some 64k tokens). A longer
/// answer is not checked (`schema_valid: null`), and counted as such.
pub const SCHEMA_CAPTURE_CHARS: usize = 256 * 1024;

/// What an answer must satisfy: the schema drawn for its request.
#[derive(Debug, Clone)]
pub struct SchemaExpect {
    pub index: u32,
    pub name: Arc<str>,
    pub schema: JsonSchema,
}

/// Every schema of the run with its body field, and the draw.
#[derive(Debug, Clone)]
pub struct Formats {
    seed: u64,
    choices: Vec<(SchemaExpect, Bytes, u64)>,
    total_weight: u64,
}

impl Formats {
    pub fn new(rf: &ResponseFormat, seed: u64) -> Self {
        let choices = rf
            .schemas
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let expect =
                    SchemaExpect { index: i as u32, name: Arc::from(s.name.as_str()), schema: s.schema.clone() };
                let field = field(rf, &s.name, s.schema.value());
                (expect, Bytes::from(field), u64::from(s.weight))
            })
            .collect::<Vec<_>>();
        let total_weight = choices.iter().map(|c| c.2).sum();
        Formats { seed, choices, total_weight }
    }

    /// The schema request `index` asks for: drawn by weight, the same for the same seed.
    pub fn pick(&self, index: u64) -> Option<&(SchemaExpect, Bytes, u64)> {
        if self.choices.len() <= 1 {
            return self.choices.first();
        }
        let mut at = mix(self.seed ^ 0x7363_6865_6d61_0000, index) % self.total_weight.max(1);
        for choice in &self.choices {
            if at < choice.2 {
                return Some(choice);
            }
            at -= choice.2;
        }
        self.choices.last()
    }

    /// Ask request `req` for its schema: the field goes at the end of its body's JSON object.
    /// A request that already asks for one is left alone.
    pub fn attach(&self, req: &mut PreparedRequest) {
        if req.structured.is_some() {
            return;
        }
        let Some((expect, field, _)) = self.pick(req.index) else { return };
        req.body = splice(&req.body, field);
        req.structured = Some(expect.clone());
    }
}

/// `body` (a JSON object) with `,<field>` added before its closing brace.
fn splice(body: &[u8], field: &[u8]) -> Bytes {
    let end = body.iter().rposition(|&b| b == b'}');
    let Some(end) = end else { return Bytes::copy_from_slice(body) };
    let empty = body[..end].iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let mut out = Vec::with_capacity(body.len() + field.len() + 1);
    out.extend_from_slice(&body[..end]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(field);
    out.extend_from_slice(&body[end..]);
    Bytes::from(out)
}

/// The body field (`"key":value`, without braces) that asks for `schema` in `rf`'s spelling.
fn field(rf: &ResponseFormat, name: &str, schema: &Value) -> Vec<u8> {
    let object = rf.kind == FormatKind::JsonObject;
    let (key, value) = match rf.spelling {
        Spelling::ResponseFormat if object => ("response_format", json!({"type": "json_object"})),
        Spelling::ResponseFormat => (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": rf.strict}}),
        ),
        Spelling::TextFormat if object => ("text", json!({"format": {"type": "json_object"}})),
        Spelling::TextFormat => {
            ("text", json!({"format": {"type": "json_schema", "name": name, "schema": schema, "strict": rf.strict}}))
        }
        Spelling::StructuredOutputs if object => ("structured_outputs", json!({"json_object": true})),
        Spelling::StructuredOutputs => ("structured_outputs", json!({"json": schema})),
        Spelling::GuidedJson => ("guided_json", schema.clone()),
        Spelling::JsonSchema => ("json_schema", schema.clone()),
        Spelling::ResponseFormatJson => ("response_format", json!({"type": "json", "schema": schema})),
    };
    let mut out = serde_json::to_vec(key).expect("a key serialises");
    out.push(b':');
    out.extend(serde_json::to_vec(&value).expect("a JSON value serialises"));
    out
}

/// The check of one answer. `capture` is its visible content (up to `SCHEMA_CAPTURE_CHARS`),
/// `whole` whether that is all of it, `finish_reason` the record's.
pub fn check(expect: &SchemaExpect, capture: Option<&str>, whole: bool, finish_reason: Option<&str>) -> SchemaCheck {
    let cut = finish_reason == Some("length");
    let (valid, violation) = match capture {
        Some(text) if whole => match expect.schema.check_text(text) {
            Ok(()) => (Some(true), None),
            Err(v) => (Some(false), Some(v)),
        },
        _ => (None, None),
    };
    SchemaCheck {
        schema_index: expect.index,
        schema_name: expect.name.to_string(),
        schema_valid: valid,
        schema_violation: violation,
        // Cut by the output budget and not valid: the budget's doing, counted apart.
        schema_truncated: cut && valid != Some(true),
    }
}

fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::SchemaChoice;
    use crate::plan::scenario::json_schema::Violation;

    fn format(spelling: Spelling, kind: FormatKind, weights: &[u32]) -> ResponseFormat {
        let schema = JsonSchema::compile(json!({"type": "object", "required": ["a"]})).unwrap();
        ResponseFormat {
            kind,
            schemas: weights
                .iter()
                .enumerate()
                .map(|(i, &w)| SchemaChoice { name: format!("s{i}"), weight: w, schema: schema.clone(), file: None })
                .collect(),
            strict: true,
            spelling,
            max_invalid_rate: 0.01,
        }
    }

    fn attached(rf: &ResponseFormat, body: &str) -> Value {
        let mut req = PreparedRequest {
            index: 3,
            planned_context_tokens: 1,
            prompt_target_tokens: 1,
            canary: None,
            response_words: None,
            body: Bytes::from(body.to_string()),
            replay: None,
            exchange: None,
            structured: None,
        };
        Formats::new(rf, 7).attach(&mut req);
        assert!(req.structured.is_some());
        serde_json::from_slice(&req.body).unwrap()
    }

    #[test]
    fn each_spelling_is_its_engines_field() {
        let body = r#"{"model":"m","stream":true}"#;
        let v = attached(&format(Spelling::ResponseFormat, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(v["response_format"]["type"], "json_schema");
        assert_eq!(v["response_format"]["json_schema"]["name"], "s0");
        assert_eq!(v["response_format"]["json_schema"]["strict"], true);
        assert_eq!(v["response_format"]["json_schema"]["schema"]["required"][0], "a");
        assert_eq!(v["model"], "m");
        let v = attached(&format(Spelling::TextFormat, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(
            (v["text"]["format"]["type"].as_str(), v["text"]["format"]["name"].as_str()),
            (Some("json_schema"), Some("s0"))
        );
        let v = attached(&format(Spelling::StructuredOutputs, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(v["structured_outputs"]["json"]["type"], "object");
        let v = attached(&format(Spelling::GuidedJson, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(v["guided_json"]["type"], "object");
        let v = attached(&format(Spelling::JsonSchema, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(v["json_schema"]["type"], "object");
        let v = attached(&format(Spelling::ResponseFormatJson, FormatKind::JsonSchema, &[1]), body);
        assert_eq!(
            (v["response_format"]["type"].as_str(), v["response_format"]["schema"]["type"].as_str()),
            (Some("json"), Some("object"))
        );
        let v = attached(&format(Spelling::ResponseFormat, FormatKind::JsonObject, &[1]), body);
        assert_eq!(v["response_format"], json!({"type": "json_object"}));
        let v = attached(&format(Spelling::ResponseFormat, FormatKind::JsonObject, &[1]), "{}");
        assert_eq!(v["response_format"], json!({"type": "json_object"}));
    }

    #[test]
    fn schemas_are_drawn_by_weight_and_seed() {
        let rf = format(Spelling::ResponseFormat, FormatKind::JsonSchema, &[3, 1]);
        let f = Formats::new(&rf, 11);
        let firsts = (0..4000).filter(|&i| f.pick(i).unwrap().0.index == 0).count();
        assert!((2800..3200).contains(&firsts), "{firsts}");
        let again = Formats::new(&rf, 11);
        assert!((0..100).all(|i| f.pick(i).unwrap().0.index == again.pick(i).unwrap().0.index));
    }

    #[test]
    fn answers_are_checked_and_cut_ones_set_apart() {
        let rf = format(Spelling::ResponseFormat, FormatKind::JsonSchema, &[1]);
        let f = Formats::new(&rf, 1);
        let e = &f.pick(0).unwrap().0;
        let ok = check(e, Some(r#"{"a":1}"#), true, Some("stop"));
        assert_eq!((ok.schema_valid, ok.schema_violation, ok.schema_truncated), (Some(true), None, false));
        let bad = check(e, Some(r#"{"b":1}"#), true, Some("stop"));
        assert_eq!(
            (bad.schema_valid, bad.schema_violation, bad.schema_truncated),
            (Some(false), Some(Violation::Required), false)
        );
        let cut = check(e, Some(r#"{"a":"#), true, Some("length"));
        assert_eq!(
            (cut.schema_valid, cut.schema_violation, cut.schema_truncated),
            (Some(false), Some(Violation::NotJson), true)
        );
        let long = check(e, Some(r#"{"a":"#), false, Some("stop"));
        assert_eq!(long.schema_valid, None);
    }
}
