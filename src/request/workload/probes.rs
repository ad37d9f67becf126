//! Calibration probes: prompts shaped like the run's, sent with `max_tokens = 1` and no
//! streaming, whose `usage.prompt_tokens` sizes the prompts (`sizing`).
//!
//! The plain probes are single prompts built like a request (header, filler in whole blocks of
//! the word list, the task); a least-squares line through their counts gives the server's rate
//! and the template's overhead for one message. Two shapes that one message does not show get
//! a probe of their own when the workload sends them: a system message first (`system_probe`:
//! chat templates drop their default system prompt then) and a later turn of a conversation
//! (`turn_probe`: what an answer and a new user message add to a prompt the server already
//! counted, the per-message template and the new message's fixed words included).

use bytes::Bytes;

use super::{CANARY_PREFIX, TAG_SPACE, Workload, task_text};
use crate::plan::scenario::{Api, ChatMessage, DatasetPrompt, PromptSource};
use crate::plan::session::canary::turn_marker;
use crate::plan::session::plan::session_id;
use crate::request::openai::{self, PromptBody};
use crate::text::{self, Stream};

impl Workload {
    /// Calibration probes: prompts built like real ones (header, filler, task) with `words`
    /// filler words each, sent with `max_tokens = 1` and no streaming. Returns (body, predicted
    /// text tokens before calibration).
    pub fn probe(&self, k: u64, words: usize) -> (Bytes, f64) {
        let prompt = self.probe_text(k, words);
        let body = openai::probe_body(&self.params, &prompt);
        (Bytes::from(body), self.sizer.text_tokens(&prompt))
    }

    /// A probe prompt: the header of a request (same length, a tag no request uses), filler and
    /// the task, so the fit sees exactly the fixed parts every request carries. Synthetic
    /// conversations open with a session header and a turn marker instead, so their probes do
    /// too (of a conversation no run reaches): the fit's intercept then holds what the sizer
    /// miscounts in them (an id of hex digits and dashes), and a first turn is sized as the
    /// server counts it (a 200-token first turn was counted 204 by llama.cpp when the probes
    /// carried a request's header).
    pub(super) fn probe_text(&self, k: u64, words: usize) -> String {
        let conversation = self.synthetic_sessions().then(|| 99_999 - k.min(99_999));
        let (mut prompt, task) = match conversation {
            Some(c) => (
                format!("{} turn 1 reference text:", self.session_header(c, &session_id(self.salt, self.seed, c))),
                task_text(self.canaries.then(|| turn_marker(self.seed, c, 1)).as_deref(), None),
            ),
            None => (
                self.header(TAG_SPACE - 1 - k),
                task_text(
                    self.canaries.then(|| format!("{CANARY_PREFIX}{}_P{k:04}", self.seed)).as_deref(),
                    self.response_words,
                ),
            ),
        };
        text::push_filler(&mut prompt, words, &mut text::rng(self.seed, self.salt ^ 0x5052_4f42, k, Stream::Text));
        prompt.push_str(&task);
        prompt
    }

    /// Whether some prompt opens with its own system message: a dataset prompt that does, a
    /// conversation with a system prompt (`system_prompt_tokens`) or a dataset conversation
    /// with one. Then one more probe measures that template shape (see `system_probe`).
    pub fn has_system_conversations(&self) -> bool {
        if self.params.api != Api::Chat {
            return false;
        }
        match &self.source {
            PromptSource::Dataset(d) => d
                .prompts
                .iter()
                .any(|p| matches!(p, DatasetPrompt::Messages(m) if m.first().is_some_and(|m| m.role == "system"))),
            PromptSource::Sessions(spec) => {
                spec.system_prompt_tokens > 0
                    || spec.dataset.as_ref().is_some_and(|set| set.conversations.iter().any(|c| c.system.is_some()))
            }
            PromptSource::Synthetic { .. } | PromptSource::Trace(_) => false,
        }
    }

    /// A probe shaped like a conversation with its own system message: a system message of one
    /// block of filler words (counted at the calibrated rate), then a probe prompt. Returns the
    /// body and its two texts, for measuring the template overhead of that shape.
    pub fn system_probe(&self, k: u64, words: usize) -> (Bytes, String, String) {
        let mut system = String::from("Reference instructions:");
        let block = text::filler_words().len();
        text::push_filler(&mut system, block, &mut text::rng(self.seed, self.salt ^ 0x5359_5354, k, Stream::Text));
        let user = self.probe_text(k, words);
        let messages = [
            ChatMessage { role: "system".into(), content: system.clone() },
            ChatMessage { role: "user".into(), content: user.clone() },
        ];
        (self.messages_probe(&messages), system, user)
    }

    /// Conversations drawn by the run (not a dataset's): their first prompts open with the
    /// session header.
    fn synthetic_sessions(&self) -> bool {
        self.sessions.as_ref().is_some_and(|(spec, _)| spec.dataset.is_none())
    }

    /// Whether some conversation has a later turn (then one more probe measures what a turn
    /// adds; see `turn_probe`).
    pub fn has_later_turns(&self) -> bool {
        if self.params.api != Api::Chat {
            return false;
        }
        let Some((spec, _)) = self.sessions.as_ref() else { return false };
        match &spec.dataset {
            Some(set) => set.conversations.iter().any(|c| c.turns.len() > 1),
            None => spec.turns.max() > 1.0,
        }
    }

    /// A probe shaped like a later turn: plain probe `first`'s prompt (`words` filler words; the
    /// fit already holds its count), an answer of one block of filler, and a new user message
    /// built like a later turn's (the session header unless the conversations come from a
    /// dataset, filler, the turn's task). Its count less probe `first`'s and the two messages'
    /// text is what a turn adds beyond its text (`turn_overhead`). `k` numbers the probe (its
    /// tag and marker). Returns the body, the answer and the new message.
    pub fn turn_probe(&self, first: u64, words: usize, k: u64) -> (Bytes, String, String) {
        let block = text::filler_words().len();
        let mut answer = String::new();
        text::push_filler(&mut answer, block, &mut text::rng(self.seed, self.salt ^ 0x414e_5357, k, Stream::Text));
        let answer = answer.trim_start().to_string();
        // A conversation number no run reaches, of the width the run's have.
        let conversation = 99_999 - k.min(99_999);
        let task = task_text(self.canaries.then(|| turn_marker(self.seed, conversation, 2)).as_deref(), None);
        let dataset = self.sessions.as_ref().is_some_and(|(spec, _)| spec.dataset.is_some());
        let mut user = if dataset {
            String::new()
        } else {
            let id = session_id(self.salt, self.seed, conversation);
            format!("{} turn 2 reference text:", self.session_header(conversation, &id))
        };
        text::push_filler(&mut user, block, &mut text::rng(self.seed, self.salt ^ 0x5455_524e, k, Stream::Text));
        user.push_str(&task);
        let messages = [
            ChatMessage { role: "user".into(), content: self.probe_text(first, words) },
            ChatMessage { role: "assistant".into(), content: answer.clone() },
            ChatMessage { role: "user".into(), content: user.clone() },
        ];
        (self.messages_probe(&messages), answer, user)
    }

    /// The body of a measured request of these messages, made into a probe: the same fields,
    /// one token, not streamed.
    fn messages_probe(&self, messages: &[ChatMessage]) -> Bytes {
        let body = openai::request_body(&self.params, PromptBody::Messages(messages));
        let body = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(mut map)) => {
                map.insert("max_tokens".into(), 1.into());
                map.insert("stream".into(), false.into());
                for key in ["stream_options", "ignore_eos", "min_tokens"] {
                    map.remove(key);
                }
                serde_json::to_vec(&map).unwrap_or(body)
            }
            _ => body,
        };
        Bytes::from(body)
    }
}
