//! Embeddings (`POST /embeddings`) and rerank (`POST /rerank`), client side: the request body
//! and what the one JSON answer says. Neither streams: the answer arrives whole, and only its
//! token usage and its shape (a `data` or `results` array) are read.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

use super::chunk::{ChunkError, Count, Usage, json_error, opt_count};
use super::request::{PromptBody, RequestParams, merge_extra};
use crate::plan::scenario::Api;

/// The body of an embeddings request (`input`: the batch) or a rerank request (`query` and
/// `documents`). Sampling and output fields have no meaning here and are not sent.
pub(super) fn body(p: &RequestParams, prompt: PromptBody<'_>) -> Vec<u8> {
    let mut out = Map::new();
    out.insert("model".into(), json!(p.model));
    match (p.api, prompt) {
        (Api::Rerank, PromptBody::Rerank { query, documents }) => {
            out.insert("query".into(), json!(query));
            out.insert("documents".into(), json!(documents));
        }
        (Api::Rerank, other) => {
            out.insert("query".into(), json!(other.joined()));
            out.insert("documents".into(), json!([]));
        }
        (_, PromptBody::Inputs(inputs)) => {
            out.insert("input".into(), json!(inputs));
            out.insert("encoding_format".into(), json!("float"));
        }
        (_, other) => {
            out.insert("input".into(), json!([other.joined()]));
            out.insert("encoding_format".into(), json!("float"));
        }
    }
    merge_extra(p, &mut out)
}

/// What a whole answer said.
#[derive(Debug, Clone, PartialEq)]
pub enum PoolingAnswer {
    /// `items`: embeddings in `data`, or scores in `results`.
    Ok { usage: Usage, items: usize },
    /// An `error` object in a 200 answer.
    Error { kind: Option<String>, message: String },
}

#[derive(Deserialize)]
struct WireAnswer {
    #[serde(default)]
    data: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    results: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "opt_count")]
    prompt_tokens: Option<Count>,
    #[serde(default, deserialize_with = "opt_count")]
    total_tokens: Option<Count>,
}

/// Read the answer of `api` (embeddings or rerank).
pub fn parse_answer(api: Api, body: &[u8]) -> Result<PoolingAnswer, ChunkError> {
    let text = std::str::from_utf8(body).map_err(|_| ChunkError::InvalidUtf8)?;
    let answer: WireAnswer = serde_json::from_str(text).map_err(|e| json_error("the answer", text, &e))?;
    if let Some(error) = answer.error.filter(|e| !e.is_null()) {
        let (kind, message) = super::parse_error_body(json!({ "error": error }).to_string().as_bytes());
        return Ok(PoolingAnswer::Error { kind, message: message.unwrap_or_else(|| "error in the answer".into()) });
    }
    let (items, field) = match api {
        Api::Rerank => (answer.results, "results"),
        _ => (answer.data, "data"),
    };
    let Some(items) = items else {
        return Err(ChunkError::InvalidJson(format!("the answer has no {field} array")));
    };
    // Rerank reports only `total_tokens` (every token is input); embeddings both.
    let prompt_tokens = answer.usage.and_then(|u| u.prompt_tokens.or(u.total_tokens));
    let usage = Usage::from_counts(prompt_tokens, Some(Count::N(0)), None, None);
    Ok(PoolingAnswer::Ok { usage, items: items.len() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::Dialect;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/apis/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn params(api: Api) -> RequestParams {
        RequestParams {
            api,
            model: "m".into(),
            max_tokens: 1,
            temperature: Some(0.3),
            top_p: None,
            enable_thinking: None,
            reasoning_effort: None,
            ignore_eos: true,
            min_tokens: None,
            dialect: Dialect::Generic,
            continuous_usage: false,
            extra: Map::new(),
        }
    }

    #[test]
    fn answers_of_the_references() {
        let tokens = |n| Usage { prompt_tokens: Some(n), completion_tokens: Some(0), ..Usage::default() };
        assert_eq!(
            parse_answer(Api::Embeddings, &fixture("embeddings.json")).unwrap(),
            PoolingAnswer::Ok { usage: tokens(16), items: 2 }
        );
        assert_eq!(
            parse_answer(Api::Rerank, &fixture("rerank.json")).unwrap(),
            PoolingAnswer::Ok { usage: tokens(56), items: 2 }
        );
        assert!(matches!(parse_answer(Api::Rerank, &fixture("embeddings.json")), Err(ChunkError::InvalidJson(_))));
        assert_eq!(
            parse_answer(Api::Embeddings, br#"{"error":{"type":"server_error","message":"oom"}}"#).unwrap(),
            PoolingAnswer::Error { kind: Some("server_error".into()), message: "oom".into() }
        );
        assert!(matches!(parse_answer(Api::Embeddings, b"{\"data\": [1,"), Err(ChunkError::InvalidJson(_))));
    }

    #[test]
    fn bodies_carry_no_sampling_fields() {
        let inputs = ["a".to_string(), "b".to_string()];
        let v: Value = serde_json::from_slice(&body(&params(Api::Embeddings), PromptBody::Inputs(&inputs))).unwrap();
        assert_eq!(v, json!({"model": "m", "input": ["a", "b"], "encoding_format": "float"}));
        let v: Value =
            serde_json::from_slice(&body(&params(Api::Rerank), PromptBody::Rerank { query: "q", documents: &inputs }))
                .unwrap();
        assert_eq!(v, json!({"model": "m", "query": "q", "documents": ["a", "b"]}));
    }
}
