//! `[workload.response_format]`: structured output asked of every request and checked against
//! its schema when the answer ends. One schema (inline or from a file), a weighted set drawn
//! per request from the seed, or `type = "json_object"` (any JSON object).
//!
//! Each schema is compiled here, once (`JsonSchema::compile`): a schema that cannot be read or
//! used stops the run before anything is sent. The field the request carries it in (its
//! *spelling*) is decided here too, from the API and the dialect, unless `spelling` names one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checker::Checker;
use super::json_schema::JsonSchema;
use super::{Api, Dialect, ScenarioError, Target};

/// The share of invalid answers above which a level is not eligible, unless set.
pub const DEFAULT_MAX_INVALID_RATE: f64 = 0.01;
/// Most schemas in one set.
const MAX_SCHEMAS: usize = 256;
/// Largest schema file read.
const MAX_SCHEMA_BYTES: u64 = 4 * 1024 * 1024;

/// `[workload.response_format]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponseFormat {
    /// `"json_schema"` (default when a schema is given) or `"json_object"`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The schema, inline: a TOML table, or a string holding JSON.
    pub schema: Option<toml::Value>,
    /// The schema, from a JSON file (relative to the scenario file).
    pub schema_file: Option<String>,
    /// Several schemas, one drawn per request by weight.
    pub schemas: Option<Vec<RawSchemaChoice>>,
    /// The name sent with a single schema (default: the file's stem, else `"response"`).
    pub name: Option<String>,
    /// `strict` sent with the schema (default `true`).
    pub strict: Option<bool>,
    /// The request field that carries the schema (default `"auto"`: by API and dialect).
    pub spelling: Option<String>,
    /// The level is not eligible when more than this share of checked answers is invalid.
    pub max_invalid_rate: Option<f64>,
}

/// One entry of `schemas`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchemaChoice {
    pub file: Option<String>,
    pub schema: Option<toml::Value>,
    pub weight: Option<i64>,
    pub name: Option<String>,
}

/// What the answers must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatKind {
    JsonSchema,
    JsonObject,
}

/// The request field the format goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spelling {
    /// OpenAI chat: `response_format: {type: "json_schema", json_schema: {name, schema, strict}}`.
    ResponseFormat,
    /// OpenAI Responses: `text: {format: {type: "json_schema", name, schema, strict}}`.
    TextFormat,
    /// vLLM (0.10.2 and later): `structured_outputs: {json: schema}`.
    StructuredOutputs,
    /// vLLM before 0.12: `guided_json: schema`.
    GuidedJson,
    /// llama.cpp: `json_schema: schema` at the top of the body.
    JsonSchema,
    /// TensorRT-LLM's `trtllm-serve`: `response_format: {type: "json", schema}`.
    ResponseFormatJson,
}

impl Spelling {
    pub fn name(self) -> &'static str {
        match self {
            Spelling::ResponseFormat => "response_format",
            Spelling::TextFormat => "text_format",
            Spelling::StructuredOutputs => "structured_outputs",
            Spelling::GuidedJson => "guided_json",
            Spelling::JsonSchema => "json_schema",
            Spelling::ResponseFormatJson => "response_format_json",
        }
    }

    const ALL: [Spelling; 6] = [
        Spelling::ResponseFormat,
        Spelling::TextFormat,
        Spelling::StructuredOutputs,
        Spelling::GuidedJson,
        Spelling::JsonSchema,
        Spelling::ResponseFormatJson,
    ];

    /// The top-level body field it writes (which `extra_body` must not also set).
    pub fn field(self) -> &'static str {
        match self {
            Spelling::TextFormat => "text",
            Spelling::ResponseFormatJson => "response_format",
            other => other.name(),
        }
    }
}

/// One schema of the set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemaChoice {
    pub name: String,
    pub weight: u32,
    pub schema: JsonSchema,
    /// The file it was read from, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

/// The validated `[workload.response_format]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseFormat {
    pub kind: FormatKind,
    /// One or more schemas (`json_schema`); for `json_object`, the one schema `{"type":
    /// "object"}` the answers are checked against, named `json_object`.
    pub schemas: Vec<SchemaChoice>,
    pub strict: bool,
    pub spelling: Spelling,
    pub max_invalid_rate: f64,
}

/// One line for `validate`: what is asked, in which field, and the gate.
pub fn describe(rf: &ResponseFormat) -> String {
    let what = match rf.kind {
        FormatKind::JsonObject => "any JSON object".to_string(),
        FormatKind::JsonSchema if rf.schemas.len() == 1 => format!("JSON following schema {:?}", rf.schemas[0].name),
        FormatKind::JsonSchema => {
            let names: Vec<String> = rf.schemas.iter().map(|s| format!("{} (weight {})", s.name, s.weight)).collect();
            format!("JSON following one of {} schemas drawn per request: {}", rf.schemas.len(), names.join(", "))
        }
    };
    format!(
        "structured output: {what}, sent as {}; every answer checked at its end; the level is ineligible above {}% invalid answers",
        rf.spelling.name(),
        rf.max_invalid_rate * 100.0
    )
}

/// Every body field some spelling writes: `extra_body` may not set any of them.
const FORMAT_FIELDS: [&str; 6] =
    ["response_format", "text", "structured_outputs", "guided_json", "json_schema", "grammar"];

/// The validated table; `None` when absent. `canaries_set` says whether `workload.canaries`
/// was written (a canary asks the answer to begin with a marker, which no JSON answer can).
pub(super) fn response_format(
    c: &Checker,
    raw: Option<&RawResponseFormat>,
    target: &Target,
    canaries: Option<bool>,
    response_words: Option<u32>,
) -> Result<Option<ResponseFormat>, ScenarioError> {
    let Some(raw) = raw else { return Ok(None) };
    let key = "workload.response_format";
    match target.api {
        Api::Embeddings | Api::Rerank => {
            return Err(c.err(
                key,
                format!("is set, but api = {:?} returns vectors or scores, not text to check", target.api.name()),
                "remove [workload.response_format], or use api = \"chat\", \"completions\" or \"responses\"",
            ));
        }
        Api::Messages => {
            return Err(c.err(
                key,
                "is not sent on the Messages API: its structured output is not one documented request field every Anthropic-compatible server accepts",
                "use api = \"chat\" or \"responses\" against the same server, or remove [workload.response_format]",
            ));
        }
        Api::Chat | Api::Completions | Api::Responses => {}
    }
    if canaries == Some(true) {
        return Err(c.err(
            "workload.canaries",
            "is true with [workload.response_format]: a canary asks the answer to begin with a marker, which no JSON answer can",
            "remove workload.canaries (structured output turns canaries off) or set it to false",
        ));
    }
    if response_words.is_some() {
        return Err(c.err(
            "output.response_words",
            "asks for a number of words, but [workload.response_format] asks for JSON",
            "remove output.response_words, or remove [workload.response_format]",
        ));
    }
    for field in FORMAT_FIELDS {
        if target.extra_body.contains_key(field) {
            return Err(c.err(
                &format!("target.extra_body.{field}"),
                "would replace or contradict the format [workload.response_format] sends",
                "remove it from extra_body; [workload.response_format] sends the format (see spelling)",
            ));
        }
    }
    let kind = match raw.kind.as_deref() {
        None | Some("json_schema") => FormatKind::JsonSchema,
        Some("json_object") => FormatKind::JsonObject,
        Some(other) => {
            return Err(c.err(
                &format!("{key}.type"),
                format!("{other:?} is not a response format this tool checks"),
                "use \"json_schema\" (with schema, schema_file or schemas) or \"json_object\"",
            ));
        }
    };
    let max_invalid_rate = match raw.max_invalid_rate {
        None => DEFAULT_MAX_INVALID_RATE,
        Some(r) if r.is_finite() && (0.0..=1.0).contains(&r) => r,
        Some(r) => {
            return Err(c.err(
                &format!("{key}.max_invalid_rate"),
                format!("{r} is not a share between 0 and 1"),
                "give a share such as 0.01 (1% of checked answers may be invalid; 0: none may be)",
            ));
        }
    };
    let schemas = match kind {
        FormatKind::JsonObject => {
            for (given, name) in [
                (raw.schema.is_some(), "schema"),
                (raw.schema_file.is_some(), "schema_file"),
                (raw.schemas.is_some(), "schemas"),
                (raw.name.is_some(), "name"),
            ] {
                if given {
                    return Err(c.err(
                        &format!("{key}.{name}"),
                        "is set with type = \"json_object\", which takes no schema",
                        "use type = \"json_schema\" to send a schema, or remove the key",
                    ));
                }
            }
            let schema = JsonSchema::compile(serde_json::json!({"type": "object"})).map_err(|e| c.err(key, e, ""))?;
            vec![SchemaChoice { name: "json_object".into(), weight: 1, schema, file: None }]
        }
        FormatKind::JsonSchema => schemas(c, raw)?,
    };
    let spelling = spelling(c, raw.spelling.as_deref(), target.api, target.dialect)?;
    Ok(Some(ResponseFormat { kind, schemas, strict: raw.strict.unwrap_or(true), spelling, max_invalid_rate }))
}

fn schemas(c: &Checker, raw: &RawResponseFormat) -> Result<Vec<SchemaChoice>, ScenarioError> {
    let key = "workload.response_format";
    let single = raw.schema.is_some() || raw.schema_file.is_some();
    match (&raw.schemas, single) {
        (Some(_), true) => Err(c.err(
            key,
            "sets both schemas and schema/schema_file",
            "give one schema (schema or schema_file) or a set (schemas = [{ file = \"a.json\", weight = 1 }, ...]), not both",
        )),
        (None, false) => Err(c.err(
            key,
            "has type = \"json_schema\" but no schema",
            "add schema_file = \"answer.json\", an inline schema = { type = \"object\", ... }, or schemas = [...]",
        )),
        (None, true) => {
            let (schema, file) =
                one_schema(c, key, raw.schema.as_ref(), raw.schema_file.as_deref(), &format!("{key}.schema"))?;
            let name = choice_name(c, &format!("{key}.name"), raw.name.as_deref(), file.as_ref(), 0, 1)?;
            Ok(vec![SchemaChoice { name, weight: 1, schema, file }])
        }
        (Some(list), false) => {
            if raw.name.is_some() {
                return Err(c.err(
                    &format!("{key}.name"),
                    "is set with schemas, where each schema has its own name",
                    "give each entry of schemas its name, and remove response_format.name",
                ));
            }
            if list.is_empty() || list.len() > MAX_SCHEMAS {
                return Err(c.err(
                    &format!("{key}.schemas"),
                    format!("holds {} schemas", list.len()),
                    format!("give from 1 to {MAX_SCHEMAS} schemas"),
                ));
            }
            let mut out: Vec<SchemaChoice> = Vec::with_capacity(list.len());
            for (i, entry) in list.iter().enumerate() {
                let at = format!("{key}.schemas[{i}]");
                let (schema, file) =
                    one_schema(c, &at, entry.schema.as_ref(), entry.file.as_deref(), &format!("{at}.schema"))?;
                let name = choice_name(c, &format!("{at}.name"), entry.name.as_deref(), file.as_ref(), i, list.len())?;
                if out.iter().any(|o| o.name == name) {
                    return Err(c.err(
                        &format!("{at}.name"),
                        format!("{name:?} names an earlier schema too"),
                        "give each schema its own name (the records count answers by name)",
                    ));
                }
                let weight = match entry.weight {
                    None => 1,
                    Some(w) if (1..=1_000_000).contains(&w) => w as u32,
                    Some(w) => {
                        return Err(c.err(
                            &format!("{at}.weight"),
                            format!("{w} is not a weight from 1 to 1000000"),
                            "give a positive whole weight; schemas are drawn in proportion to their weights",
                        ));
                    }
                };
                out.push(SchemaChoice { name, weight, schema, file });
            }
            Ok(out)
        }
    }
}

/// A schema given inline (`schema`) or by file (`file_key`'s value), compiled.
fn one_schema(
    c: &Checker,
    key: &str,
    inline: Option<&toml::Value>,
    file: Option<&str>,
    inline_key: &str,
) -> Result<(JsonSchema, Option<PathBuf>), ScenarioError> {
    let (value, path, at) = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err(c.err(key, "gives a schema both inline and by file", "keep one of schema and the file"));
        }
        (None, None) => {
            return Err(c.err(key, "gives no schema", "add file = \"answer.json\" or an inline schema = { ... }"));
        }
        (Some(toml::Value::String(text)), None) => {
            let v: Value = serde_json::from_str(text).map_err(|e| {
                c.err(
                    inline_key,
                    format!("is a string that is not JSON ({e})"),
                    "write the schema as a TOML table, or as a string holding one JSON object",
                )
            })?;
            (v, None, inline_key.to_string())
        }
        (Some(table), None) => {
            let v = serde_json::to_value(table).map_err(|e| {
                c.err(inline_key, format!("cannot be read as JSON ({e})"), "write the schema as a TOML table")
            })?;
            (v, None, inline_key.to_string())
        }
        (None, Some(file)) => {
            let file_key = if key.ends_with(']') { format!("{key}.file") } else { format!("{key}.schema_file") };
            let path = c.path(&file_key, file);
            let v = read_schema_file(c, &file_key, &path)?;
            (v, Some(path), file_key)
        }
    };
    let schema = JsonSchema::compile(value).map_err(|e| {
        let fix = match &path {
            Some(p) => {
                format!("fix the schema in {} (JSON Schema draft 2020-12 unless it names its $schema)", p.display())
            }
            None => "fix the schema (JSON Schema draft 2020-12 unless it names its $schema)".to_string(),
        };
        c.err(&at, e, fix)
    })?;
    Ok((schema, path))
}

fn read_schema_file(c: &Checker, key: &str, path: &std::path::Path) -> Result<Value, ScenarioError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        c.err(key, format!("cannot read {shown}: {e}"), "check the path (relative to the scenario file)")
    })?;
    if !meta.is_file() || meta.len() > MAX_SCHEMA_BYTES {
        return Err(c.err(
            key,
            format!("{shown} is not a file of at most {MAX_SCHEMA_BYTES} bytes"),
            "name a JSON Schema file",
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        c.err(key, format!("cannot read {shown}: {e}"), "check the path and that the file is UTF-8 JSON")
    })?;
    serde_json::from_str(&text)
        .map_err(|e| c.err(key, format!("{shown} is not JSON ({e})"), "the file must hold one JSON Schema object"))
}

/// A schema's name: given, else the file's stem, else `response` (one schema) or `schema<i>`.
/// OpenAI's rule: letters, digits, `_` and `-`, at most 64.
fn choice_name(
    c: &Checker,
    key: &str,
    given: Option<&str>,
    file: Option<&PathBuf>,
    index: usize,
    count: usize,
) -> Result<String, ScenarioError> {
    let name = match given {
        Some(n) => n.to_string(),
        None => match file.and_then(|f| f.file_stem()).and_then(|s| s.to_str()) {
            Some(stem) => {
                stem.chars().map(|ch| if ch.is_ascii_alphanumeric() || ch == '-' { ch } else { '_' }).collect()
            }
            None if count == 1 => "response".to_string(),
            None => format!("schema{index}"),
        },
    };
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err(c.err(
            key,
            format!("{name:?} is not a schema name servers accept"),
            "use letters, digits, _ and - only, at most 64 (OpenAI's rule for json_schema.name)",
        ));
    }
    Ok(name)
}

fn spelling(c: &Checker, given: Option<&str>, api: Api, dialect: Dialect) -> Result<Spelling, ScenarioError> {
    let key = "workload.response_format.spelling";
    let names: Vec<&str> = Spelling::ALL.iter().map(|s| s.name()).collect();
    let chosen = match given {
        None | Some("auto") => None,
        Some(text) => match Spelling::ALL.into_iter().find(|s| s.name() == text) {
            Some(s) => Some(s),
            None => {
                return Err(c.err(
                    key,
                    format!("{text:?} is not a spelling"),
                    format!("use \"auto\" or one of {}", names.join(", ")),
                ));
            }
        },
    };
    let hosted = dialect.openai_fields_only();
    let spelling = match (api, chosen) {
        (Api::Responses, None | Some(Spelling::TextFormat)) => Spelling::TextFormat,
        (Api::Responses, Some(other)) => {
            return Err(c.err(
                key,
                format!("{:?} is not how the Responses API takes a format", other.name()),
                "use \"auto\" or \"text_format\" with api = \"responses\" (text.format)",
            ));
        }
        (_, Some(Spelling::TextFormat)) => {
            return Err(c.err(key, "\"text_format\" is the Responses API's", "use \"auto\" with this API"));
        }
        // Refused before: no text to check.
        (Api::Chat | Api::Messages | Api::Embeddings | Api::Rerank, None) => Spelling::ResponseFormat,
        (Api::Completions, None) => match dialect {
            Dialect::Vllm => Spelling::StructuredOutputs,
            Dialect::Llamacpp => Spelling::JsonSchema,
            Dialect::Generic | Dialect::Sglang => Spelling::ResponseFormat,
            Dialect::Openai | Dialect::Azure => {
                return Err(c.err(
                    "workload.response_format",
                    format!("is set with api = \"completions\" in the {} dialect, whose completions API has no structured output", dialect.name()),
                    "use api = \"chat\" or \"responses\"",
                ));
            }
        },
        (_, Some(s)) => s,
    };
    if hosted && spelling != Spelling::ResponseFormat && spelling != Spelling::TextFormat {
        return Err(c.err(
            key,
            format!(
                "{:?} is an engine's own field, which the {} dialect does not send",
                spelling.name(),
                dialect.name()
            ),
            "use \"auto\" (response_format)",
        ));
    }
    Ok(spelling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_has_one_name_and_a_field() {
        for s in Spelling::ALL {
            assert!(FORMAT_FIELDS.contains(&s.field()), "{s:?}");
        }
    }
}
