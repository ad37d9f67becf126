//! Requests for the turns of a conversation (`[workload.sessions]`).
//!
//! A turn's prompt is the conversation so far: the group's system prompt (when there is one),
//! the earlier turns (user message, then the answer: the model's own with `history = "live"`,
//! the recorded one otherwise), and the new user message, which ends with the turn's canary
//! instruction (`ANVIL_REQ_<seed>_S<conversation>_T<turn>`). When the prompt and the turn's
//! output would not fit `max_context_tokens`, the oldest turns are dropped. Each turn records
//! its `history_tokens` (the prompt before the new message) and the prefix the server should
//! already hold (`expected_cached_tokens`): after a live turn, the previous prompt and its
//! answer as the server counted them; after a recorded answer, or an answer whose reasoning was
//! left out, the previous prompt only; after dropped turns, only a system prompt another
//! conversation already sent.
//!
//! The first words of a conversation that tell it apart are its session header,
//! `Session <tag> (<id>)`, with the salted tag of single requests (`Workload::tag`) first: it
//! opens the first user message, after a group's system prompt (shared by design), or the
//! system message a dataset conversation brings (the same text in every run otherwise).
//!
//! Sizing follows the server's counts: a later turn is predicted as what the server counted for
//! the messages it already read (each history message carries the difference between the
//! server's count and the sizer's estimate, see `Conversation::counted`) plus the sizer's
//! estimate of what is new, so the error of one turn does not carry into the next.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::agent::{AgentTurns, Round, splice};
use super::blocks::{block_rng, push_block};
use super::exchange::{Exchange, Reply};
use super::{EXTRA_MESSAGE_TOKENS, PreparedRequest, Workload, task_text};
use crate::plan::scenario::ChatMessage;
use crate::plan::session::canary::{cross_session_markers, turn_marker};
use crate::plan::session::plan::{plan, session_id};
use crate::plan::session::{ConversationPlan, History, ReasoningHistory, SessionSpec};
use crate::request::openai::{self, PromptBody};
use crate::request::record::{Outcome, ReplayFacts};
use crate::text::{self, Stream};

/// Group `g`'s system prompt is tagged as index `GROUP_TAGS − g`: below the probes' tags (the
/// top of the tag space), above any request or conversation number.
const GROUP_TAGS: u64 = super::TAG_SPACE - 1_000_000;

/// What a workload of conversations keeps across them.
#[derive(Debug, Default)]
pub(super) struct SessionsState {
    /// Dataset conversations in a seeded order.
    pub order: Vec<usize>,
    /// System prompt groups some conversation has sent already.
    pub groups_seen: Mutex<HashSet<u32>>,
    /// The server's context window: a prompt and its output must fit in it.
    pub max_context_tokens: u32,
    /// The run's secrets: the backend header a server sends is recorded through the sanitizer.
    pub secrets: crate::redact::Secrets,
    /// Agent sessions: tool results fed back (`[workload.tools]` with conversations).
    pub agent: Option<crate::plan::scenario::agent_rules::AgentSpec>,
}

/// What the server reported for the last turn.
#[derive(Debug, Clone, Copy)]
struct LastTurn {
    prompt_tokens: Option<u64>,
    predicted_prompt: u32,
    output_tokens: u64,
    reasoning: bool,
}

/// One conversation in progress.
#[derive(Debug)]
pub struct Conversation {
    pub plan: ConversationPlan,
    pub id: String,
    system: Option<String>,
    /// The session header opens the system message (a dataset conversation's own), not the
    /// first user message.
    header_in_system: bool,
    /// Earlier turns: user message, answer, user message, answer, …
    history: Vec<ChatMessage>,
    /// Per message of `history`, the server's count of it less the sizer's estimate: for a user
    /// message, the error of the prediction of the turn that sent it (whatever the server
    /// counted beyond the prediction, the template included, is the new message's); for a live
    /// answer, its output tokens less the estimate of its text. Dropped with its message.
    counted: Vec<f64>,
    last: Option<LastTurn>,
    /// The echoed response header's latest value.
    echo: Option<String>,
    /// The user message of the turn in flight, and the prediction of its whole prompt.
    pending: Option<(ChatMessage, f64)>,
    /// Agent sessions: the tool rounds of the history and of the turn in progress.
    pub agent: AgentTurns,
}

impl Conversation {
    /// Turns planned.
    pub fn turns(&self) -> usize {
        self.plan.turns.len()
    }
}

impl Workload {
    /// The conversations' spec, for conversation workloads.
    pub fn session_spec(&self) -> Option<&SessionSpec> {
        self.sessions.as_ref().map(|(spec, _)| spec.as_ref())
    }

    /// Conversation `index`, before its first turn.
    pub fn conversation(&self, index: u64) -> Option<Conversation> {
        let (spec, state) = self.sessions.as_ref()?;
        let plan = plan(spec, self.seed, index, &state.order, self.params.max_tokens);
        let dataset = plan.dataset.and_then(|i| spec.dataset.as_ref()?.conversations.get(i));
        let id = session_id(self.salt, self.seed, index);
        // A dataset's system message is the same text in every run and in every conversation
        // that has it: the session header goes in front of it.
        let (system, header_in_system) = match (dataset.and_then(|d| d.system.as_deref()), plan.group) {
            (Some(text), _) => (Some(format!("{}:\n\n{text}", self.session_header(index, &id))), true),
            (None, Some(group)) => (Some(self.system_prompt(spec, group)), false),
            (None, None) => (None, false),
        };
        Some(Conversation {
            id,
            plan,
            system,
            header_in_system,
            history: Vec::new(),
            counted: Vec::new(),
            last: None,
            echo: None,
            pending: None,
            agent: AgentTurns::default(),
        })
    }

    /// `Session <tag> (<id>)`: the conversation's salted tag first (see `Workload::tag`), then
    /// its id (which starts with the level's salt, the same in every conversation of the level).
    pub(super) fn session_header(&self, index: u64, id: &str) -> String {
        format!("Session {} ({id})", self.tag(index))
    }

    /// The planned turns of the first `n` conversations.
    pub fn planned_turns(&self, n: u64) -> u64 {
        let Some((spec, state)) = self.sessions.as_ref() else { return 0 };
        (0..n).map(|i| plan(spec, self.seed, i, &state.order, self.params.max_tokens).turns.len() as u64).sum()
    }

    /// The system prompt of `group`: the same text for every conversation of the group in a
    /// level, opening with the group's salted tag (see `Workload::tag`; the group's number
    /// first would be the same words in every run).
    fn system_prompt(&self, spec: &SessionSpec, group: u32) -> String {
        let per_word = self.sizer.per_filler_word().max(1e-3);
        let words = (f64::from(spec.system_prompt_tokens) / per_word).round() as usize;
        // Tags of an index range no request or conversation reaches.
        let mut s = format!("System prompt {}:", self.tag(GROUP_TAGS - u64::from(group)));
        push_block(&mut s, 0, words, &mut block_rng(self.seed, self.salt, u64::from(group), spec.system_prompt_tokens));
        s
    }

    /// The prediction for a turn of these messages: the sizer's, each later turn's answer and
    /// user message costing the measured turn overhead (when there is one) instead of two
    /// messages' allowance, corrected by what the server counted of the history
    /// (`Conversation::counted`).
    fn turn_tokens(&self, conv: &Conversation, messages: &[ChatMessage]) -> f64 {
        let pairs = (conv.history.len() / 2) as f64;
        let per_pair = self.turn_overhead.map_or(0.0, |o| o - 2.0 * EXTRA_MESSAGE_TOKENS);
        let rounds: f64 = conv.agent.round_tokens.iter().sum::<f64>()
            + conv.agent.current.iter().map(|r| self.round_tokens(r)).sum::<f64>();
        self.chat_tokens(messages) + pairs * per_pair + conv.counted.iter().sum::<f64>() + rounds
    }

    /// The sizer's estimate of a tool round: the calls' names and arguments, and one result
    /// per call, each with a message's allowance.
    fn round_tokens(&self, round: &Round) -> f64 {
        let calls: f64 =
            round.calls.iter().map(|c| self.sizer.text_tokens(&c.name) + self.sizer.text_tokens(&c.arguments)).sum();
        let results = round.calls.len() as f64 * (self.sizer.text_tokens(&round.result) + EXTRA_MESSAGE_TOKENS);
        calls + results + EXTRA_MESSAGE_TOKENS
    }

    /// The request for turn `k` (from 0) of `conv`, numbered `index` in the level.
    pub fn turn_request(&self, conv: &mut Conversation, k: usize, index: u64) -> Option<PreparedRequest> {
        let (spec, state) = self.sessions.as_ref()?;
        let turn_plan = *conv.plan.turns.get(k)?;
        let turn = k as u32 + 1;
        let marker = self.canaries.then(|| turn_marker(self.seed, conv.plan.index, turn));
        let task = task_text(marker.as_deref(), None);
        let dataset_turn =
            conv.plan.dataset.and_then(|i| spec.dataset.as_ref()?.conversations.get(i)).and_then(|d| d.turns.get(k));
        let user = match dataset_turn {
            Some(t) if k == 0 && !conv.header_in_system => {
                format!("{}:\n\n{}{task}", self.session_header(conv.plan.index, &conv.id), t.user)
            }
            Some(t) => format!("{}{task}", t.user),
            None => self.synthetic_user(conv, k, turn_plan.tokens, &task),
        };
        let user = ChatMessage { role: "user".into(), content: user };
        let output = turn_plan.output_tokens;
        // Oldest turns out until the prompt and its output fit the window.
        let mut truncated = false;
        loop {
            let messages = self.messages(conv, &user);
            let fits = self.turn_tokens(conv, &messages) + f64::from(output) <= f64::from(state.max_context_tokens);
            if fits || conv.history.len() < 2 {
                break;
            }
            conv.history.drain(..2);
            conv.counted.drain(..2.min(conv.counted.len()));
            if !conv.agent.rounds.is_empty() {
                conv.agent.rounds.remove(0);
                conv.agent.round_tokens.remove(0);
            }
            truncated = true;
        }
        let messages = self.messages(conv, &user);
        let prediction = self.turn_tokens(conv, &messages);
        let predicted = prediction.round().max(1.0) as u32;
        let history_tokens = if messages.len() > 1 {
            let new = self.sizer.text_tokens(&user.content) + EXTRA_MESSAGE_TOKENS;
            (f64::from(predicted) - new).round().max(0.0) as u32
        } else {
            0
        };
        let system_shared = |state: &SessionsState| {
            let group = conv.plan.group?;
            let seen = state.groups_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&group);
            seen.then(|| self.sizer.text_tokens(conv.system.as_deref().unwrap_or_default()).round() as u32)
        };
        let expected = match conv.last {
            Some(last) if !truncated => {
                let prompt = last.prompt_tokens.unwrap_or(u64::from(last.predicted_prompt));
                let continued = spec.history == History::Live
                    && (!last.reasoning || spec.history_reasoning == ReasoningHistory::Keep);
                let tokens = if continued { prompt + last.output_tokens } else { prompt };
                u32::try_from(tokens).unwrap_or(u32::MAX)
            }
            _ => system_shared(state).unwrap_or(0),
        };
        if let Some(group) = conv.plan.group {
            state.groups_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(group);
        }
        let mut params = self.params_at(conv.plan.index).clone();
        params.max_tokens = output;
        let body = openai::request_body(&params, PromptBody::Messages(&messages));
        let body = splice(params.api, body, conv.history.len(), &conv.agent.rounds, &conv.agent.current);
        let tool_turn = state.agent.as_ref().map(|_| {
            let tool = !conv.agent.current.is_empty();
            (tool, tool.then_some(conv.agent.latency.as_millis() as u64))
        });
        let mut headers: Vec<(String, String)> =
            spec.affinity_headers.iter().map(|h| (h.clone(), conv.id.clone())).collect();
        if let (Some(name), Some(value)) = (&spec.echo_header, &conv.echo) {
            headers.push((name.clone(), value.clone()));
        }
        let read_headers = spec.echo_header.iter().chain(&spec.backend_header).cloned().collect();
        conv.pending = Some((user, prediction));
        let mut request = PreparedRequest {
            index,
            planned_context_tokens: if k == 0 && turn_plan.tokens > 0 && conv.agent.current.is_empty() {
                turn_plan.tokens
            } else {
                predicted
            },
            prompt_target_tokens: predicted,
            canary: marker,
            response_words: None,
            body: Bytes::from(body),
            replay: Some(Box::new(ReplayFacts {
                planned_output_tokens: Some(output),
                expected_cached_tokens: Some(expected),
                session: Some(conv.id.clone()),
                turn: Some(turn),
                history_tokens: Some(history_tokens),
                model: self.model_at(conv.plan.index),
                tool_turn: tool_turn.map(|(t, _)| t),
                tool_latency_ms: tool_turn.and_then(|(_, ms)| ms),
                ..ReplayFacts::default()
            })),
            // The whole answer is always kept: the cross-session check reads all of it.
            exchange: Some(Arc::new(Exchange::new(headers, read_headers, true))),
            structured: None,
        };
        self.ask_format(&mut request);
        Some(request)
    }

    fn messages(&self, conv: &Conversation, user: &ChatMessage) -> Vec<ChatMessage> {
        let system = conv.system.iter().map(|s| ChatMessage { role: "system".into(), content: s.clone() });
        system.chain(conv.history.iter().cloned()).chain(std::iter::once(user.clone())).collect()
    }

    /// A synthetic user message: its header (session and turn), stratified filler, the task.
    /// Turn 1 is sized so the whole first prompt is `tokens`; later ones so the message is.
    fn synthetic_user(&self, conv: &Conversation, k: usize, tokens: u32, task: &str) -> String {
        let header = format!("{} turn {} reference text:", self.session_header(conv.plan.index, &conv.id), k + 1);
        let per_word = self.sizer.per_filler_word().max(1e-3);
        let build = |words: usize| {
            let mut s = header.clone();
            let rng = &mut text::rng(self.seed, self.salt, conv.plan.index << 16 | k as u64, Stream::Text);
            push_block(&mut s, 0, words, rng);
            s.push_str(task);
            s
        };
        let bare = build(0);
        let fixed = if k == 0 {
            // The whole first prompt, sized as the server counts it: with a system message, the
            // template's overhead for that shape (`system_probe`), not the default one.
            let probe = ChatMessage { role: "user".into(), content: bare.clone() };
            let mut m: Vec<ChatMessage> =
                conv.system.iter().map(|s| ChatMessage { role: "system".into(), content: s.clone() }).collect();
            m.push(probe);
            self.chat_tokens(&m)
        } else {
            self.sizer.text_tokens(&bare)
        };
        build(((f64::from(tokens) - fixed) / per_word).round().max(0.0) as usize)
    }

    /// After a turn: the answer joins the history (live or recorded), the echoed header and the
    /// backend are taken from the response, and an answer's markers of other sessions are
    /// counted. False when the conversation cannot go on (the turn failed).
    pub fn finish_turn(&self, conv: &mut Conversation, request: &PreparedRequest, outcome: &mut Outcome) -> bool {
        let Some((spec, state)) = self.sessions.as_ref() else { return false };
        let reply = request.exchange.as_ref().map(|e| e.take_reply()).unwrap_or_default();
        let header = |name: &Option<String>| {
            name.as_ref().and_then(|n| reply.headers.iter().find(|(h, _)| h == n).map(|(_, v)| v.clone()))
        };
        if let Some(value) = header(&spec.echo_header) {
            conv.echo = Some(value);
        }
        // The echoed header goes back to the server as it came (it is never written); the
        // backend is recorded, so it goes through the sanitizer: a router that echoes the API
        // key (or anything else) in it must not put that in the records and the artifact.
        let backend = header(&spec.backend_header).map(|b| state.secrets.field(&b));
        match outcome {
            Outcome::Completed(c) => {
                if let Some(r) = c.replay.as_deref_mut() {
                    r.backend = backend;
                }
                if let (Some(check), Some(marker)) = (c.canary.as_mut(), request.canary.as_deref()) {
                    check.cross_session_marker_count = Some(cross_session_markers(marker, &reply.content));
                }
                let turn = c.replay.as_deref().and_then(|r| r.turn).unwrap_or(1) as usize - 1;
                let answer = self.history_answer(spec, conv, turn, &reply);
                // Agent sessions: an answer that calls a tool is followed by a tool turn (the
                // same user turn, its rounds growing) until the cap.
                if let Some(agent) = state.agent.as_ref() {
                    let room = conv.agent.current.len() < agent.max_tool_turns as usize;
                    if !reply.calls.is_empty() && room {
                        // Drawn per (conversation, turn, round): the same in every run.
                        let round = conv.agent.current.len() as u64;
                        let rng = &mut text::rng(
                            self.seed,
                            0x0700_12E5,
                            conv.plan.index << 24 | (turn as u64) << 8 | round,
                            Stream::Dataset,
                        );
                        let tokens = agent.result_tokens.sample_count(rng, 1);
                        let latency = std::time::Duration::from_secs_f64(agent.latency_s.sample(rng).max(0.0));
                        let result = self.tool_result(conv, turn, tokens);
                        conv.agent.current.push(Round { calls: reply.calls.clone(), result });
                        conv.agent.pending_latency = Some(latency);
                        conv.agent.latency = latency;
                        conv.pending = None;
                        conv.last = Some(LastTurn {
                            prompt_tokens: c.prompt_tokens,
                            predicted_prompt: request.prompt_target_tokens,
                            output_tokens: c.output_tokens,
                            reasoning: !reply.reasoning.is_empty(),
                        });
                        return true;
                    }
                    let rounds = std::mem::take(&mut conv.agent.current);
                    conv.agent.round_tokens.push(rounds.iter().map(|r| self.round_tokens(r)).sum());
                    conv.agent.rounds.push(rounds);
                }
                if let Some((user, prediction)) = conv.pending.take() {
                    // What the server counted beyond the prediction is the new message's.
                    let user_error = counted_error(c.prompt_tokens, prediction);
                    // The model's own answer: the server counted its tokens as it generated them
                    // (less its reasoning, when that is left out of the history and the usage
                    // says how much it was). A recorded answer keeps the estimate; the next
                    // turn's count corrects it.
                    let kept = if reply.reasoning.is_empty() || spec.history_reasoning == ReasoningHistory::Keep {
                        Some(c.output_tokens)
                    } else {
                        c.reasoning_tokens.and_then(|r| c.output_tokens.checked_sub(r))
                    };
                    let answer_error = match kept {
                        Some(tokens) if spec.history == History::Live => {
                            counted_error(Some(tokens), self.sizer.text_tokens(&answer))
                        }
                        _ => 0.0,
                    };
                    conv.history.push(user);
                    conv.history.push(ChatMessage { role: "assistant".into(), content: answer });
                    conv.counted.push(user_error);
                    conv.counted.push(answer_error);
                }
                conv.last = Some(LastTurn {
                    prompt_tokens: c.prompt_tokens,
                    predicted_prompt: request.prompt_target_tokens,
                    output_tokens: c.output_tokens,
                    reasoning: !reply.reasoning.is_empty(),
                });
                true
            }
            Outcome::Failed(f) => {
                if let Some(r) = f.replay.as_deref_mut() {
                    r.backend = backend;
                }
                false
            }
            Outcome::Dropped(_) => false,
        }
    }

    /// A tool result of about `tokens` tokens: seeded text, the same for the same conversation,
    /// turn and round.
    fn tool_result(&self, conv: &Conversation, k: usize, tokens: u32) -> String {
        let words = (f64::from(tokens) / self.sizer.per_filler_word().max(1e-3)).round() as usize;
        let round = conv.agent.current.len() as u64;
        let mut s = String::from("Tool result:");
        let rng = &mut text::rng(
            self.seed,
            self.salt ^ 0x0700_12E5_u64,
            conv.plan.index << 24 | (k as u64) << 8 | round,
            Stream::Text,
        );
        push_block(&mut s, 0, words, rng);
        s
    }

    /// What the history keeps of turn `k`'s answer.
    fn history_answer(&self, spec: &SessionSpec, conv: &Conversation, k: usize, reply: &Reply) -> String {
        match spec.history {
            History::Live if spec.history_reasoning == ReasoningHistory::Keep && !reply.reasoning.is_empty() => {
                format!("{}\n\n{}", reply.reasoning, reply.content)
            }
            History::Live => reply.content.clone(),
            History::Recorded => {
                let recorded = conv
                    .plan
                    .dataset
                    .and_then(|i| spec.dataset.as_ref()?.conversations.get(i))
                    .and_then(|d| d.turns.get(k))
                    .and_then(|t| t.assistant.clone());
                recorded.unwrap_or_else(|| {
                    // Synthetic conversations record seeded text of the planned length.
                    let tokens = conv.plan.turns.get(k).map_or(1, |t| t.output_tokens);
                    let words = (f64::from(tokens) / self.sizer.per_filler_word().max(1e-3)).round() as usize;
                    let mut s = String::new();
                    let rng = &mut text::rng(
                        self.seed,
                        self.salt ^ 0x5245_434f,
                        conv.plan.index << 16 | k as u64,
                        Stream::Text,
                    );
                    push_block(&mut s, 0, words, rng);
                    s.trim_start().to_string()
                })
            }
        }
    }
}

/// The server's count less the estimate, when the count is plausible beside it (within a factor
/// of four, give or take a few hundred tokens); 0 otherwise. A count from a broken server would
/// otherwise size every later turn of the conversation, and decide which turns are dropped.
fn counted_error(counted: Option<u64>, estimate: f64) -> f64 {
    match counted.map(|c| c as f64) {
        Some(c) if c <= 4.0 * estimate + 256.0 && c >= estimate / 4.0 - 256.0 => c - estimate,
        _ => 0.0,
    }
}
