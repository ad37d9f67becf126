//! The tool set and `tool_choice` in each API's spelling.
//!
//! Chat: `tools: [{"type": "function", "function": {name, description, parameters}}]` and
//! `tool_choice: "auto" | "required" | "none" | {"type": "function", "function": {"name": …}}`.
//! Responses: `tools: [{"type": "function", name, description, parameters}]` and
//! `tool_choice: "auto" | "required" | "none" | {"type": "function", "name": …}`.
//! Messages: `tools: [{name, description, input_schema}]` and
//! `tool_choice: {"type": "auto" | "any" | "none" | "tool", "name": …}`.
//! The fields are built once per run and sent in every request beside the prompt.

use serde_json::{Map, Value, json};

use crate::plan::scenario::Api;
use crate::plan::scenario::tools_rules::{ToolChoice, ToolSet};

/// `tools` and `tool_choice` for `api`'s request body.
pub fn tool_fields(api: Api, set: &ToolSet) -> Map<String, Value> {
    let tools: Vec<Value> = set
        .tools
        .iter()
        .map(|t| match api {
            Api::Responses => json!({
                "type": "function", "name": t.name, "description": t.description,
                "parameters": t.parameters.value(),
            }),
            Api::Messages => {
                json!({"name": t.name, "description": t.description, "input_schema": t.parameters.value()})
            }
            _ => json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters.value(),
            }}),
        })
        .collect();
    let choice = match (api, &set.choice) {
        (Api::Messages, ToolChoice::Auto) => json!({"type": "auto"}),
        (Api::Messages, ToolChoice::Required) => json!({"type": "any"}),
        (Api::Messages, ToolChoice::None) => json!({"type": "none"}),
        (Api::Messages, ToolChoice::Function(name)) => json!({"type": "tool", "name": name}),
        (_, ToolChoice::Auto) => json!("auto"),
        (_, ToolChoice::Required) => json!("required"),
        (_, ToolChoice::None) => json!("none"),
        (Api::Responses, ToolChoice::Function(name)) => json!({"type": "function", "name": name}),
        (_, ToolChoice::Function(name)) => json!({"type": "function", "function": {"name": name}}),
    };
    let mut out = Map::new();
    out.insert("tools".into(), Value::Array(tools));
    out.insert("tool_choice".into(), choice);
    out
}
