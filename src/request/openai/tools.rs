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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::scenario::{Overrides, Scenario};

    fn scenario(api: &str, tools: &str) -> Scenario {
        let text = format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n[run]\nrequests = 1\nseed = 3\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n[workload.tools]\n{tools}\n"
        );
        Scenario::from_toml(std::path::Path::new("t.toml"), &text, &Overrides::default()).expect("a valid scenario")
    }

    #[test]
    fn each_api_gets_its_own_spelling() {
        let s = scenario("chat", "count = 2\nproperties = 1\ntool_choice = \"required\"");
        let set = s.workload.tools.as_ref().unwrap();
        let name = set.tools[0].name.clone();
        let chat = tool_fields(Api::Chat, set);
        assert_eq!(chat["tools"][0]["type"], "function");
        assert_eq!(chat["tools"][0]["function"]["name"], json!(name));
        assert_eq!(chat["tools"][0]["function"]["parameters"]["type"], "object");
        assert_eq!(chat["tool_choice"], "required");
        let responses = tool_fields(Api::Responses, set);
        assert_eq!(
            (responses["tools"][0]["type"].as_str(), responses["tools"][0]["name"].as_str()),
            (Some("function"), Some(name.as_str()))
        );
        assert!(responses["tools"][0]["parameters"].is_object());
        let messages = tool_fields(Api::Messages, set);
        assert_eq!(messages["tools"][0]["name"], json!(name));
        assert!(messages["tools"][0]["input_schema"].is_object() && messages["tools"][0].get("type").is_none());
        assert_eq!(messages["tool_choice"], json!({"type": "any"}));
        let named = scenario("messages", &format!("count = 2\ntool_choice = \"{name}\"\n"));
        let set = named.workload.tools.as_ref().unwrap();
        assert_eq!(tool_fields(Api::Messages, set)["tool_choice"], json!({"type": "tool", "name": name}));
        assert_eq!(tool_fields(Api::Responses, set)["tool_choice"], json!({"type": "function", "name": name}));
        assert_eq!(tool_fields(Api::Chat, set)["tool_choice"], json!({"type": "function", "function": {"name": name}}));
    }

    #[test]
    fn synthetic_sets_follow_the_seed_and_their_size() {
        let digest = |tools: &str| scenario("chat", tools).workload.tools.as_ref().unwrap().definitions_sha256.clone();
        assert_eq!(digest("count = 4"), digest("count = 4"));
        assert_ne!(digest("count = 4"), digest("count = 4\nproperties = 9"));
        assert_ne!(digest("count = 4"), digest("count = 4\ndescription_words = 3"));
        let body = crate::request::openai::request_body(
            &crate::request::openai::RequestParams::from_scenario(&scenario("chat", "count = 3")),
            crate::request::openai::PromptBody::Text("hi"),
        );
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((body["tools"].as_array().map(Vec::len), body["tool_choice"].as_str()), (Some(3), Some("auto")));
    }
}
