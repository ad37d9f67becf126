//! What one response's tool calls were: how many, when the first piece arrived, how long their
//! arguments were and how fast they streamed, and whether each call was valid (the tool was
//! offered and its arguments satisfy the tool's schema).
//!
//! A record carries this block only when the run offered tools (`[workload.tools]`); a
//! response without a call then says `calls: 0`.

use serde::{Deserialize, Serialize};

/// The `tool_calls` block of a request record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Calls the response made.
    pub calls: u32,
    /// Calls to an offered tool whose arguments satisfy its schema.
    pub valid: u32,
    /// From the request's start to the first piece of a call (its id, name or an argument
    /// fragment); null without a call.
    pub time_to_first_tool_call_ms: Option<f64>,
    /// Bytes of every call's arguments (UTF-8 JSON text, as streamed).
    pub argument_bytes: u64,
    /// Tokens of the arguments: the server's `completion_tokens` when the response was only
    /// tool calls (nothing else to count), the built-in estimate otherwise.
    pub argument_tokens: u64,
    /// `usage` or `estimate`: where `argument_tokens` came from.
    pub argument_token_source: String,
    /// `argument_tokens / (last argument fragment − first piece)`, in tokens per second; null
    /// for a single piece or no call.
    pub argument_tok_s: Option<f64>,
    /// Why each invalid call was invalid, one word per call in the order of the calls:
    /// `unknown_tool` (not offered) or the schema rule broken (`not_json`, `required`, …).
    pub invalid_reasons: Vec<String>,
}
