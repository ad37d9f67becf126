//! Request bodies for `/chat/completions` and `/completions`.
//!
//! Every request streams and asks for usage (`stream_options.include_usage`), because the
//! server's own token counts are what the throughput and TPOT figures divide by.

use serde::Serialize;

use crate::scenario::{Api, ReasoningEffort, Scenario};

/// The parts of a request body that are the same for every request of a run.
#[derive(Debug, Clone)]
pub struct RequestParams {
    pub api: Api,
    pub model: String,
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// `chat_template_kwargs.enable_thinking`, when the scenario sets a thinking mode.
    pub enable_thinking: Option<bool>,
    pub reasoning_effort: Option<ReasoningEffort>,
}

impl RequestParams {
    pub fn from_scenario(s: &Scenario) -> Self {
        RequestParams {
            api: s.target.api,
            model: s.target.model.clone(),
            max_tokens: s.workload.max_tokens,
            temperature: s.sampling.temperature,
            top_p: s.sampling.top_p,
            enable_thinking: s.serve.enable_thinking(),
            reasoning_effort: s.serve.reasoning_effort,
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_template_kwargs: Option<TemplateKwargs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<ReasoningEffort>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct TemplateKwargs {
    enable_thinking: bool,
}

/// The JSON body for one prompt.
pub fn request_body(p: &RequestParams, prompt: &str) -> Vec<u8> {
    let chat = p.api == Api::Chat;
    let body = Body {
        model: &p.model,
        messages: chat.then_some([Message { role: "user", content: prompt }]),
        prompt: (!chat).then_some(prompt),
        max_tokens: p.max_tokens,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        temperature: p.temperature,
        top_p: p.top_p,
        // Template kwargs only exist for chat templates.
        chat_template_kwargs: p
            .enable_thinking
            .filter(|_| chat)
            .map(|enable_thinking| TemplateKwargs { enable_thinking }),
        reasoning_effort: p.reasoning_effort,
    };
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(api: Api) -> RequestParams {
        RequestParams {
            api,
            model: "m".into(),
            max_tokens: 16,
            temperature: Some(0.9),
            top_p: None,
            enable_thinking: Some(false),
            reasoning_effort: Some(ReasoningEffort::High),
        }
    }

    #[test]
    fn chat_body_has_messages_usage_and_flags() {
        let v: serde_json::Value = serde_json::from_slice(&request_body(&params(Api::Chat), "hi \"x\"")).unwrap();
        assert_eq!(v["messages"][0]["content"], "hi \"x\"");
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["temperature"], 0.9);
        assert!(v.get("top_p").is_none());
        assert_eq!(v["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(v["reasoning_effort"], "high");
        assert!(v.get("prompt").is_none());
    }

    #[test]
    fn completions_body_has_prompt_only() {
        let v: serde_json::Value = serde_json::from_slice(&request_body(&params(Api::Completions), "p")).unwrap();
        assert_eq!(v["prompt"], "p");
        assert!(v.get("messages").is_none());
        assert!(v.get("chat_template_kwargs").is_none());
        assert_eq!(v["max_tokens"], 16);
    }
}
