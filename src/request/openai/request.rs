//! Request bodies for `/chat/completions` and `/completions`, and the dispatch to the other
//! APIs' bodies (`responses`, `messages`, `pooling`).
//!
//! Every measured request streams and asks for usage (`stream_options.include_usage`), because
//! the server's own token counts are what the throughput and TPOT figures divide by.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::plan::scenario::{Api, ChatMessage, Dialect, ReasoningEffort, Scenario};

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
    /// `ignore_eos: true`, in the dialects that have it.
    pub ignore_eos: bool,
    pub min_tokens: Option<u32>,
    pub dialect: Dialect,
    /// The scenario's `extra_body`, merged last.
    pub extra: Map<String, Value>,
    /// `stream_options.continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
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
            ignore_eos: s.output.ignore_eos,
            min_tokens: s.output.min_tokens,
            dialect: s.target.dialect,
            extra: with_tools(s),
            continuous_usage: s.target.continuous_usage_stats,
        }
    }
}

/// `target.extra_body`, with the tool set's `tools` and `tool_choice` where it does not set
/// them itself (`extra_body` is the user's last word).
fn with_tools(s: &Scenario) -> Map<String, Value> {
    let mut extra = s.target.extra_body.clone();
    if let Some(set) = &s.workload.tools {
        for (k, v) in super::tools::tool_fields(s.target.api, set) {
            extra.entry(k).or_insert(v);
        }
    }
    extra
}

/// What the prompt is: one text (a user message for chat, the prompt for completions) or a
/// conversation (chat only; completions get the turns joined).
#[derive(Debug, Clone, Copy)]
pub enum PromptBody<'a> {
    Text(&'a str),
    Messages(&'a [ChatMessage]),
    /// Completions: `prompt` as token ids.
    TokenIds(&'a [u32]),
    /// Embeddings: the inputs of one request.
    Inputs(&'a [String]),
    /// Rerank: one query and its documents.
    Rerank {
        query: &'a str,
        documents: &'a [String],
    },
}

impl<'a> PromptBody<'a> {
    /// The prompt as one text, for APIs that take one (a conversation's turns joined).
    pub(super) fn joined(self) -> std::borrow::Cow<'a, str> {
        use std::borrow::Cow;
        match self {
            PromptBody::Text(t) => Cow::Borrowed(t),
            PromptBody::Messages(m) => {
                Cow::Owned(m.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n"))
            }
            PromptBody::Inputs(inputs) => Cow::Owned(inputs.join("\n\n")),
            PromptBody::Rerank { query, .. } => Cow::Borrowed(query),
            PromptBody::TokenIds(_) => Cow::Borrowed(""),
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum PromptField<'a> {
    Text(std::borrow::Cow<'a, str>),
    Ids(&'a [u32]),
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Messages<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<PromptField<'a>>,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_template_kwargs: Option<TemplateKwargs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<ReasoningEffort>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u32>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Messages<'a> {
    One([Message<'a>; 1]),
    Many(&'a [ChatMessage]),
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: std::borrow::Cow<'a, str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    continuous_usage_stats: bool,
}

#[derive(Serialize)]
struct TemplateKwargs {
    enable_thinking: bool,
}

fn body<'a>(p: &'a RequestParams, prompt: PromptBody<'a>, stream: bool, max_tokens: u32) -> Body<'a> {
    let chat = p.api == Api::Chat;
    let (messages, text) = match (chat, prompt) {
        (true, PromptBody::Messages(m)) => (Some(Messages::Many(m)), None),
        (true, other) => (Some(Messages::One([Message { role: "user", content: other.joined() }])), None),
        (false, PromptBody::TokenIds(ids)) => (None, Some(PromptField::Ids(ids))),
        (false, other) => (None, Some(PromptField::Text(other.joined()))),
    };
    // Hosted OpenAI-style APIs reject fields they do not know; validation keeps output control
    // away from that dialect, and this keeps the body clean whatever happens.
    let engine_fields = !p.dialect.openai_fields_only();
    Body {
        model: &p.model,
        messages,
        prompt: text,
        max_tokens,
        stream,
        stream_options: stream
            .then_some(StreamOptions { include_usage: true, continuous_usage_stats: p.continuous_usage }),
        temperature: p.temperature,
        top_p: p.top_p,
        // Template kwargs only exist for chat templates.
        chat_template_kwargs: p
            .enable_thinking
            .filter(|_| chat)
            .map(|enable_thinking| TemplateKwargs { enable_thinking }),
        reasoning_effort: p.reasoning_effort,
        ignore_eos: p.ignore_eos && engine_fields,
        min_tokens: p.min_tokens.filter(|_| engine_fields && p.dialect != crate::plan::scenario::Dialect::Llamacpp),
        extra: &p.extra,
    }
}

/// The JSON body of a measured request (streamed, except for embeddings and rerank).
pub fn request_body(p: &RequestParams, prompt: PromptBody<'_>) -> Vec<u8> {
    match p.api {
        Api::Responses => return super::responses::body(p, prompt),
        Api::Messages => return super::messages::body(p, prompt),
        Api::Embeddings | Api::Rerank => return super::pooling::body(p, prompt),
        Api::Chat | Api::Completions => {}
    }
    // Serializing plain structs of strings and numbers cannot fail.
    // The body is plain data; an empty body sent to the server would be a silent failure.
    serde_json::to_vec(&body(p, prompt, true, p.max_tokens)).expect("a request body serialises to JSON")
}

/// The sampling and engine fields every generating API shares, as JSON (merged into the
/// Responses and Messages bodies; chat and completions spell them in `Body`).
pub(super) fn shared_fields(p: &RequestParams, out: &mut Map<String, Value>) {
    if let Some(t) = p.temperature {
        out.insert("temperature".into(), Value::from(t));
    }
    if let Some(t) = p.top_p {
        out.insert("top_p".into(), Value::from(t));
    }
    let engine_fields = !p.dialect.openai_fields_only();
    if p.ignore_eos && engine_fields {
        out.insert("ignore_eos".into(), Value::Bool(true));
    }
    if let Some(n) = p.min_tokens.filter(|_| engine_fields && p.dialect != Dialect::Llamacpp) {
        out.insert("min_tokens".into(), Value::from(n));
    }
}

/// `extra_body`, merged last (validation keeps it from replacing the tool's own fields).
pub(super) fn merge_extra(p: &RequestParams, out: &mut Map<String, Value>) -> Vec<u8> {
    for (k, v) in &p.extra {
        out.insert(k.clone(), v.clone());
    }
    serde_json::to_vec(out).expect("a request body serialises to JSON")
}

/// The JSON body of a calibration probe: the same fields, one output token, not streamed (so
/// usage comes back even from servers that ignore `stream_options`).
pub fn probe_body(p: &RequestParams, prompt: &str) -> Vec<u8> {
    let mut b = body(p, PromptBody::Text(prompt), false, 1);
    b.ignore_eos = false;
    b.min_tokens = None;
    serde_json::to_vec(&b).expect("a probe body serialises to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(api: Api) -> RequestParams {
        let mut extra = Map::new();
        extra.insert("top_k".into(), Value::from(20));
        RequestParams {
            api,
            model: "m".into(),
            max_tokens: 16,
            temperature: Some(0.9),
            top_p: None,
            enable_thinking: Some(false),
            reasoning_effort: Some(ReasoningEffort::High),
            ignore_eos: true,
            min_tokens: Some(8),
            dialect: Dialect::Generic,
            extra,
            continuous_usage: false,
        }
    }

    fn json(bytes: Vec<u8>) -> Value {
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn chat_body_has_messages_usage_flags_and_extras() {
        let v = json(request_body(&params(Api::Chat), PromptBody::Text("hi \"x\"")));
        assert_eq!(v["messages"][0]["content"], "hi \"x\"");
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["temperature"], 0.9);
        assert!(v.get("top_p").is_none());
        assert_eq!(v["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(v["reasoning_effort"], "high");
        assert_eq!((v["ignore_eos"].as_bool(), v["min_tokens"].as_u64()), (Some(true), Some(8)));
        assert_eq!(v["top_k"], 20);
        assert!(v.get("prompt").is_none());
        assert!(v["stream_options"].get("continuous_usage_stats").is_none(), "only when asked");
        let asked = RequestParams { continuous_usage: true, ..params(Api::Chat) };
        let v = json(request_body(&asked, PromptBody::Text("hi")));
        assert_eq!(v["stream_options"]["continuous_usage_stats"], true);
    }

    #[test]
    fn completions_body_has_prompt_only() {
        let v = json(request_body(&params(Api::Completions), PromptBody::Text("p")));
        assert_eq!(v["prompt"], "p");
        assert!(v.get("messages").is_none());
        assert!(v.get("chat_template_kwargs").is_none());
        assert_eq!(v["max_tokens"], 16);
    }

    #[test]
    fn conversations_and_dialects() {
        let turns = [
            ChatMessage { role: "system".into(), content: "s".into() },
            ChatMessage { role: "user".into(), content: "u".into() },
        ];
        let v = json(request_body(&params(Api::Chat), PromptBody::Messages(&turns)));
        assert_eq!(
            (v["messages"][0]["role"].as_str(), v["messages"][1]["content"].as_str()),
            (Some("system"), Some("u"))
        );
        let mut llama = params(Api::Chat);
        llama.dialect = Dialect::Llamacpp;
        let v = json(request_body(&llama, PromptBody::Text("x")));
        assert!(v["ignore_eos"].as_bool().unwrap() && v.get("min_tokens").is_none());
        let mut openai = params(Api::Chat);
        openai.dialect = Dialect::Openai;
        let v = json(request_body(&openai, PromptBody::Text("x")));
        assert!(v.get("ignore_eos").is_none() && v.get("min_tokens").is_none());
    }

    #[test]
    fn probes_ask_for_one_token_without_streaming() {
        let v = json(probe_body(&params(Api::Chat), "p"));
        assert_eq!((v["max_tokens"].as_u64(), v["stream"].as_bool()), (Some(1), Some(false)));
        assert!(v.get("stream_options").is_none() && v.get("ignore_eos").is_none());
    }
}
