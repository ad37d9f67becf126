//! The validated description of a multi-turn workload (`[workload.sessions]`): the shape of the
//! conversations, their history policy, how requests of one conversation are routed and
//! checked, and the conversations of a dataset when they come from a file.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::dist::Dist;

#[derive(Debug, Clone, Serialize)]
pub struct SessionSpec {
    /// Conversations started per level (`None`: as many as `run.requests` or `run.duration`
    /// allow).
    pub conversations: Option<u64>,
    /// Turns per conversation (synthetic conversations).
    pub turns: Dist,
    /// The whole first prompt, in tokens: system prompt and first user message.
    pub first_tokens: Dist,
    /// New user tokens in each later turn.
    pub user_tokens: Dist,
    /// Output tokens per turn, sent as `max_tokens` (with `ignore_eos` where the dialect has it).
    /// `None` with a dataset: each turn's recorded answer length.
    pub output_tokens: Option<Dist>,
    /// Seconds between a response's end and the conversation's next turn.
    pub think_time_s: Dist,
    /// Tokens of the shared system prompt (0: none).
    pub system_prompt_tokens: u32,
    /// Distinct system prompts; each conversation uses one.
    pub system_prompt_groups: u32,
    /// Zipf exponent of the choice among groups (`None`: uniform).
    pub system_prompt_zipf: Option<f64>,
    pub history: History,
    pub history_reasoning: ReasoningHistory,
    /// Requests in flight across all conversations, at most (`load.in_flight`).
    pub in_flight: Option<u32>,
    /// Request headers carrying the conversation's id (session affinity).
    pub affinity_headers: Vec<String>,
    /// A response header whose value is sent back on the conversation's later turns.
    pub echo_header: Option<String>,
    /// A response header naming the backend that served the request, recorded per request.
    pub backend_header: Option<String>,
    pub dataset: Option<Arc<ConversationSet>>,
}

/// What a later turn's prompt holds of the earlier answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum History {
    /// The model's own answers (its prefix cache holds their tokens).
    Live,
    /// The dataset's answers (synthetic conversations: seeded text of the planned length).
    Recorded,
}

/// What becomes of an answer's reasoning text in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningHistory {
    /// Left out, as most chat templates do (a prefix cache then misses after the prompt).
    Drop,
    /// Put back in front of the answer, separated by a blank line.
    Keep,
}

/// Conversations read from a file: every user turn becomes a request.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationSet {
    pub path: PathBuf,
    /// `sharegpt` or `jsonl` (OpenAI `messages`).
    pub format: &'static str,
    pub count: usize,
    pub turns: usize,
    #[serde(skip)]
    pub conversations: Vec<DatasetConversation>,
}

/// One conversation of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetConversation {
    pub system: Option<String>,
    pub turns: Vec<DatasetTurn>,
}

/// A user message and the answer the dataset recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetTurn {
    pub user: String,
    pub assistant: Option<String>,
    /// The recorded answer's length by the built-in estimate (its planned output).
    pub assistant_tokens: Option<u32>,
}
