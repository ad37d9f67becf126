//! `[workload.tools]`: the tool set every request offers, and the `tool_choice` it sends.
//!
//! A tool set is synthetic (`count` tools of `properties` parameters each, names and
//! descriptions drawn from the run's seed, so the definitions are the same long prefix in every
//! request, as an agent's are) or read from a file (a JSON array of OpenAI-style tool
//! definitions). Every tool's `parameters` is compiled as a JSON Schema here, once: a schema that
//! does not compile stops the run before anything is sent. The worker checks each call's
//! arguments against the schema of the tool it names (`ToolSet::check`).

use std::path::Path;
use std::sync::Arc;

use rand::RngExt;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::checker::{Checker, ScenarioError};
use super::json_schema::{JsonSchema, Violation};
use super::raw::RawTools;
use super::target::Api;

/// Most tools a set may hold (engines and hosted APIs refuse far fewer; OpenAI's limit is 128).
pub const MAX_TOOLS: i64 = 512;
/// Most parameters a synthetic tool may have.
pub const MAX_PROPERTIES: i64 = 256;
/// Most description words of a synthetic tool.
pub const MAX_DESCRIPTION_WORDS: i64 = 4096;
/// Largest tools file read.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// One tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// The JSON Schema the arguments of a call must satisfy.
    pub parameters: JsonSchema,
}

/// What the model may do with the tools (`tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call a tool.
    Required,
    /// The model must not call one (the definitions are still sent: a prefix without calls).
    None,
    /// The model must call this tool.
    Function(String),
}

/// The tool set of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSet {
    /// `synthetic` or the file's name as written in the scenario.
    pub source: String,
    pub choice: ToolChoice,
    #[serde(skip)]
    pub tools: Vec<ToolDef>,
    /// How many tools (written in the configuration instead of every definition).
    pub count: usize,
    /// SHA-256 of the definitions as sent (names, descriptions, schemas): two runs offered the
    /// same tools exactly when it is the same.
    pub definitions_sha256: String,
    /// Agent sessions: tool results fed back into conversations (`[workload.sessions]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::agent_rules::AgentSpec>,
}

impl ToolSet {
    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&ToolDef> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Whether a call of `name` with `arguments` (the JSON text the model streamed) is valid:
    /// the tool was offered and the arguments satisfy its schema. `None` when valid.
    pub fn check(&self, name: &str, arguments: &str) -> Option<CallProblem> {
        match self.get(name) {
            None => Some(CallProblem::UnknownTool),
            Some(tool) => tool.parameters.check_text(arguments).err().map(CallProblem::Arguments),
        }
    }
}

/// Why a tool call is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallProblem {
    /// The model called a tool that was not offered.
    UnknownTool,
    /// The arguments broke the tool's schema.
    Arguments(Violation),
}

impl CallProblem {
    /// The reason as recorded: `unknown_tool` or a `Violation` word.
    pub fn as_str(self) -> &'static str {
        match self {
            CallProblem::UnknownTool => "unknown_tool",
            CallProblem::Arguments(v) => v.as_str(),
        }
    }
}

/// `[workload.tools]` validated for `api`; `seed` draws the synthetic names and descriptions;
/// `sessions`: the workload is conversations.
pub(super) fn tools(
    c: &Checker,
    raw: &RawTools,
    api: Api,
    seed: u64,
    sessions: bool,
) -> Result<ToolSet, ScenarioError> {
    if !matches!(api, Api::Chat | Api::Responses | Api::Messages) {
        return Err(c.err(
            "workload.tools",
            format!("the {} API has no tools", api.name()),
            "use api = \"chat\", \"responses\" or \"messages\", or remove [workload.tools]",
        ));
    }
    let agent = super::agent_rules::agent(c, raw, sessions)?;
    let tools = match &raw.file {
        Some(file) => {
            for (key, set) in [
                ("workload.tools.count", raw.count.is_some()),
                ("workload.tools.properties", raw.properties.is_some()),
                ("workload.tools.description_words", raw.description_words.is_some()),
            ] {
                if set {
                    return Err(c.err(
                        key,
                        "does not apply to tools read from a file (workload.tools.file)",
                        "remove one of the two",
                    ));
                }
            }
            from_file(c, &c.path("workload.tools.file", file))?
        }
        None => synthetic(c, raw, seed)?,
    };
    let choice = choice(c, raw.tool_choice.as_deref(), &tools)?;
    let source = raw.file.clone().unwrap_or_else(|| "synthetic".to_string());
    let definitions_sha256 = digest(&tools);
    Ok(ToolSet { source, choice, count: tools.len(), tools, definitions_sha256, agent })
}

fn bounded(
    c: &Checker,
    key: &str,
    value: Option<i64>,
    default: i64,
    max: i64,
    min: i64,
) -> Result<usize, ScenarioError> {
    let v = value.unwrap_or(default);
    if !(min..=max).contains(&v) {
        return Err(c.err(key, format!("{v} is not between {min} and {max}"), format!("set e.g. {default}")));
    }
    Ok(v as usize)
}

/// `count` tools of `properties` parameters each; names, descriptions and parameter types drawn
/// from the seed (the same seed, the same tools).
fn synthetic(c: &Checker, raw: &RawTools, seed: u64) -> Result<Vec<ToolDef>, ScenarioError> {
    let count = bounded(c, "workload.tools.count", raw.count, 8, MAX_TOOLS, 1)?;
    let properties = bounded(c, "workload.tools.properties", raw.properties, 6, MAX_PROPERTIES, 0)?;
    let words = bounded(c, "workload.tools.description_words", raw.description_words, 40, MAX_DESCRIPTION_WORDS, 0)?;
    let mut rng = crate::text::rng(seed, 0x7001_5E75, 0, crate::text::Stream::Text);
    let vocabulary = crate::text::filler_words();
    let pick = |rng: &mut rand::rngs::Xoshiro256PlusPlus| vocabulary[rng.random_range(0..vocabulary.len())];
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        let name = format!("{}_{}_{k}", pick(&mut rng), pick(&mut rng));
        let mut description = String::new();
        crate::text::push_filler(&mut description, words, &mut rng);
        let mut props = Map::new();
        let mut required = Vec::new();
        for p in 0..properties {
            let pname = format!("{}_{p}", pick(&mut rng));
            let about = format!("the {} {}", pick(&mut rng), pick(&mut rng));
            let schema = match rng.random_range(0..5u32) {
                0 => json!({"type": "string", "description": about}),
                1 => json!({"type": "integer", "minimum": 0, "maximum": 1000, "description": about}),
                2 => json!({"type": "number", "description": about}),
                3 => json!({"type": "boolean", "description": about}),
                _ => {
                    json!({"type": "string", "enum": [pick(&mut rng), pick(&mut rng), pick(&mut rng)], "description": about})
                }
            };
            props.insert(pname.clone(), schema);
            required.push(Value::String(pname));
        }
        let parameters = json!({
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": false,
        });
        let parameters = JsonSchema::compile(parameters).map_err(|e| {
            c.err("workload.tools", format!("a synthetic tool's schema did not compile: {e}"), "report this")
        })?;
        out.push(ToolDef { name, description, parameters });
    }
    Ok(out)
}

/// A JSON array of OpenAI-style definitions: `{"type": "function", "function": {name,
/// description, parameters}}`, or the flat `{name, description, parameters}` (Responses) or
/// `{name, description, input_schema}` (Messages).
fn from_file(c: &Checker, path: &Path) -> Result<Vec<ToolDef>, ScenarioError> {
    const KEY: &str = "workload.tools.file";
    let shown = path.display();
    let fix = "give a JSON array of tool definitions, e.g. [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}]";
    let size = std::fs::metadata(path)
        .map_err(|e| c.err(KEY, format!("cannot read {shown}: {e}"), "check the path (relative to the scenario file)"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(c.err(
            KEY,
            format!("{shown} is {size} bytes, more than {MAX_FILE_BYTES}"),
            "keep the tool definitions only",
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        c.err(KEY, format!("cannot read {shown}: {e}"), "check the path (relative to the scenario file)")
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| c.err(KEY, format!("{shown} is not JSON: {e}"), fix))?;
    let Value::Array(items) = value else {
        return Err(c.err(KEY, format!("{shown} is not a JSON array"), fix));
    };
    if items.is_empty() || items.len() > MAX_TOOLS as usize {
        return Err(c.err(KEY, format!("{shown} holds {} tools; 1 to {MAX_TOOLS} are allowed", items.len()), fix));
    }
    let mut out: Vec<ToolDef> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let def = item.get("function").filter(|f| f.is_object()).unwrap_or(&item);
        let name = match def.get("name") {
            Some(Value::String(n)) if valid_name(n) => n.clone(),
            Some(Value::String(n)) => {
                return Err(c.err(
                    KEY,
                    format!("{shown}: tool {i}'s name {n:?} is not 1 to 64 letters, digits, '_' or '-'"),
                    "rename the tool",
                ));
            }
            _ => return Err(c.err(KEY, format!("{shown}: tool {i} has no string `name`"), fix)),
        };
        if out.iter().any(|t| t.name == name) {
            return Err(c.err(KEY, format!("{shown}: tool {name:?} is defined twice"), "give every tool its own name"));
        }
        let description = match def.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(d)) => d.clone(),
            Some(_) => return Err(c.err(KEY, format!("{shown}: tool {name:?}'s `description` is not a string"), fix)),
        };
        let schema =
            def.get("parameters").or_else(|| def.get("input_schema")).cloned().unwrap_or(json!({"type": "object"}));
        let parameters = JsonSchema::compile(schema).map_err(|e| {
            c.err(KEY, format!("{shown}: tool {name:?}'s `parameters`: {e}"), "fix the tool's JSON Schema")
        })?;
        out.push(ToolDef { name, description, parameters });
    }
    Ok(out)
}

/// SHA-256, in hex, of the definitions serialized in order.
fn digest(tools: &[ToolDef]) -> String {
    let text = serde_json::to_vec(tools).unwrap_or_default();
    let d = ring::digest::digest(&ring::digest::SHA256, &text);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Names every API accepts: `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn choice(c: &Checker, text: Option<&str>, tools: &[ToolDef]) -> Result<ToolChoice, ScenarioError> {
    const KEY: &str = "workload.tools.tool_choice";
    Ok(match text.unwrap_or("auto") {
        "auto" => ToolChoice::Auto,
        "required" => ToolChoice::Required,
        "none" => ToolChoice::None,
        other => {
            if !tools.iter().any(|t| t.name == other) {
                let names: Vec<&str> = tools.iter().take(5).map(|t| t.name.as_str()).collect();
                return Err(c.err(
                    KEY,
                    format!("{other:?} is neither auto, required, none nor a tool of the set"),
                    format!("use auto, required, none or a tool's name (e.g. {})", names.join(", ")),
                ));
            }
            ToolChoice::Function(other.to_string())
        }
    })
}

/// The tool set, shared by the request builder and every worker.
pub type SharedTools = Arc<ToolSet>;
