//! What each request asks for: its planned context, its prompt, its canary marker, its body.
//!
//! Everything here is a pure function of the scenario, the run's salt, the sizer and the request
//! index, so request `i` is the same whichever worker prepares it and in whatever order.
//!
//! Planned context, prompt target and output reserve: `planned_context_tokens` is the prompt
//! size the server should count (drawn per request); the prompt text is built so that the sizer
//! predicts exactly that (`prompt_target_tokens`, the prediction for the text actually built);
//! `max_tokens` is reserved on top, and validation keeps `planned + max_tokens` within the
//! context window. The server's own count is recorded beside both.

pub mod agent;
mod api_prompts;
mod attach;
mod blocks;
pub mod canary;
mod conversation;
pub mod dataset_media;
pub mod exchange;
pub mod media;
pub mod media_files;
mod models;
mod probes;
mod salt;
pub mod sizing;
pub mod structured;
mod trace_prompt;

use bytes::Bytes;
use rand::RngExt;
use rand::seq::SliceRandom;

pub use crate::text::{estimate_tokens, is_filler_word};
pub use canary::{CANARY_PREFIX, CanaryScan, canary_marker, check_canary, check_controlled_output};
pub use conversation::Conversation;
pub use exchange::CalledTool;
use salt::tag_key;
pub use salt::{level_prompt_salt, level_prompt_salt_hex};
pub use sizing::Sizer;

use crate::plan::scenario::{
    ChatMessage, ContextDistribution, Dataset, DatasetPrompt, PromptCache, PromptSource, Scenario,
};
use crate::request::openai::{self, PromptBody, RequestParams};
use crate::request::record::ReplayFacts;
use crate::text::{self, Stream};

/// Template tokens each chat message beyond the first adds (role header, end of turn).
const EXTRA_MESSAGE_TOKENS: f64 = 4.0;

/// Request tags are written with this many digits, so that every request's header (and the
/// calibration probes') has the same length and the same token count on any tokenizer: a
/// header that grew with the request number would add tokens the calibration never saw.
const TAG_DIGITS: u32 = 10;
const TAG_SPACE: u64 = 10u64.pow(TAG_DIGITS);
/// The step of reproducible prompts' tags. Every step (this one, and the ones the salt draws) is
/// odd and not a multiple of 5, so `i · step + offset mod 10^10` is a bijection, and lies in
/// `[10^9, 9·10^9)`, so consecutive requests' tags differ in their first digit (no two prompts
/// share a cache block).
const TAG_STEP: u64 = 7_639_320_221;

/// One request, ready to send. Built before the request's clock starts.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub index: u64,
    pub planned_context_tokens: u32,
    /// The sizer's prediction of the server's count for the prompt actually built.
    pub prompt_target_tokens: u32,
    /// The marker the response must start with, when canaries are on.
    pub canary: Option<String>,
    /// Visible words the response was asked for.
    pub response_words: Option<u32>,
    /// Serialized JSON request body.
    pub body: Bytes,
    /// Trace or conversation facts recorded with the request.
    pub replay: Option<Box<ReplayFacts>>,
    /// Conversation turns: extra headers, and what to bring back.
    pub exchange: Option<std::sync::Arc<exchange::Exchange>>,
    /// Structured output: the schema the answer must satisfy (its field is in the body).
    pub structured: Option<structured::SchemaExpect>,
}

/// Builds requests for one run.
#[derive(Debug, Clone)]
pub struct Workload {
    seed: u64,
    /// Mixed into prompt text so that no earlier run can have warmed the cache; 0 when the
    /// scenario asks for reproducible prompts.
    salt: u64,
    source: PromptSource,
    canaries: bool,
    response_words: Option<u32>,
    params: RequestParams,
    sizer: Sizer,
    /// The text every prompt starts with in `shared-prefix` mode.
    shared_prefix: String,
    /// Its size in tokens (0 in `unique` mode), to rebuild it for another level.
    shared_prefix_tokens: u32,
    /// Its built-in estimate, counted once (`Sizer::prompt_tokens_after`).
    shared_prefix_estimate: u32,
    /// Whether every level sends the same prompts (reproducible prompts) or each its own.
    reproducible: bool,
    /// Template tokens of a conversation that brings its own system message, measured by a
    /// calibration probe (the template then drops its default system prompt, which the other
    /// probes included). `None`: the conversation is sized like any other.
    system_overhead: Option<f64>,
    /// Tokens a later turn of a conversation adds beyond its messages' text, measured by a
    /// calibration probe. `None`: each of its two messages adds `EXTRA_MESSAGE_TOKENS`.
    turn_overhead: Option<f64>,
    /// Dataset order: request `i` uses prompt `order[i % len]`.
    order: Vec<usize>,
    /// A trace replay: the trace and what is known about its rows.
    trace: Option<trace_prompt::TracePlan>,
    /// Conversations: their spec and what they share.
    sessions: Option<(std::sync::Arc<crate::plan::session::SessionSpec>, std::sync::Arc<conversation::SessionsState>)>,
    /// Embeddings: inputs per request; rerank: documents per request.
    batch_size: Option<u32>,
    /// Completions prompts as text or as token ids.
    encoding: crate::plan::scenario::PromptEncoding,
    /// Structured output: each schema's body field, and the draw (`structured`).
    formats: Option<std::sync::Arc<structured::Formats>>,
    /// Several models (`target.models`): each one's body parameters (see `models`).
    models: Option<std::sync::Arc<models::Models>>,
    /// `[workload.media]`: the spec and the level's encoded pool.
    media: Option<(
        std::sync::Arc<crate::plan::scenario::MediaSpec>,
        std::sync::Arc<std::sync::OnceLock<media::MediaPool>>,
    )>,
    /// `delivery = "http"`: the file server the parts name.
    media_files: Option<std::sync::Arc<media_files::MediaFiles>>,
    /// Prompt tokens one media item of each bucket adds (`media::buckets` order), as calibrated.
    media_tokens: std::sync::Arc<Vec<Option<u64>>>,
    /// A dataset whose rows name images: those images, encoded before the first level.
    dataset_media: Option<std::sync::Arc<std::sync::OnceLock<dataset_media::DatasetMedia>>>,
}

impl Workload {
    /// `run_salt` is ignored when the scenario asks for reproducible prompts.
    pub fn new(scenario: &Scenario, run_salt: u64, sizer: Sizer) -> Self {
        let w = &scenario.workload;
        let seed = scenario.run.seed;
        let salt = if w.prompt_cache.reproducible() { 0 } else { run_salt };
        let shared_prefix_tokens = w.prompt_cache.shared_prefix_tokens();
        let shared_prefix = match w.prompt_cache {
            PromptCache::SharedPrefix { tokens, .. } => build_shared_prefix(&sizer, seed, salt, tokens),
            PromptCache::Unique { .. } => String::new(),
        };
        let order = match &w.prompts {
            PromptSource::Dataset(d) => {
                let mut order: Vec<usize> = (0..d.prompts.len()).collect();
                order.shuffle(&mut text::rng(seed, 0, 0, Stream::Dataset));
                order
            }
            PromptSource::Synthetic { .. } | PromptSource::Trace(_) | PromptSource::Sessions(_) => Vec::new(),
        };
        let mut workload = Workload {
            seed,
            salt,
            source: w.prompts.clone(),
            canaries: w.canaries,
            response_words: scenario.output.response_words,
            params: RequestParams::from_scenario(scenario),
            models: models::Models::new(scenario, &RequestParams::from_scenario(scenario)).map(std::sync::Arc::new),
            sizer,
            shared_prefix_estimate: text::estimate_tokens(&shared_prefix),
            shared_prefix,
            shared_prefix_tokens,
            reproducible: w.prompt_cache.reproducible(),
            system_overhead: None,
            turn_overhead: None,
            order,
            trace: None,
            sessions: None,
            batch_size: w.batch_size,
            encoding: w.prompt_encoding,
            formats: w.response_format.as_ref().map(|rf| std::sync::Arc::new(structured::Formats::new(rf, seed))),
            media: None,
            media_tokens: Default::default(),
            media_files: None,
            dataset_media: None,
        };
        if let Some(crate::plan::scenario::MediaDelivery::Http { bind, url }) = w.media.as_ref().map(|m| &m.delivery) {
            match media_files::MediaFiles::for_bind(*bind, url.as_deref()) {
                Ok(files) => workload.media_files = Some(files),
                // Validation checked the address; a port already taken is said here, and the
                // requests then carry their media inline.
                Err(e) => tracing::error!("the media file server could not listen on {bind}: {e}"),
            }
        }
        // Encoded when first needed: `for_level` encodes each level's before it starts. A spec
        // without a modality (a dataset's own images, `delivery` only) has no pool.
        workload.media = w
            .media
            .as_ref()
            .filter(|spec| spec.images.is_some() || spec.audio.is_some())
            .map(|spec| (spec.clone(), Default::default()));
        if let PromptSource::Dataset(d) = &w.prompts {
            workload.dataset_media = (!d.images.is_empty()).then(Default::default);
        }
        if let PromptSource::Sessions(spec) = &w.prompts {
            let mut order: Vec<usize> = (0..spec.dataset.as_ref().map_or(0, |d| d.count)).collect();
            order.shuffle(&mut text::rng(seed, 0, 0, Stream::Dataset));
            let state = conversation::SessionsState {
                order,
                max_context_tokens: w.max_context_tokens,
                secrets: scenario.secrets(),
                agent: w.tools.as_ref().and_then(|t| t.agent.clone()),
                ..Default::default()
            };
            workload.sessions = Some((spec.clone(), std::sync::Arc::new(state)));
        }
        if let PromptSource::Trace(trace) = &w.prompts {
            workload.trace = Some(workload.trace_plan(trace.clone()));
        }
        workload
    }

    /// Size conversations that carry their own system message with the measured overhead.
    pub fn with_system_overhead(mut self, overhead: Option<f64>) -> Self {
        self.system_overhead = overhead;
        self
    }

    /// Size later turns of conversations with the measured turn overhead.
    pub fn with_turn_overhead(mut self, overhead: Option<f64>) -> Self {
        self.turn_overhead = overhead;
        self
    }

    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// The requests of one load level (a concurrency or a rate). Each level gets its own salt,
    /// derived from the run's and the level, so no level sends a prompt an earlier level of the
    /// run sent (whose prefix the server would still have cached). With reproducible prompts
    /// every level sends the same prompts, as the run description says.
    pub fn for_level(&self, level: f64) -> Workload {
        // A dataset's images are the same at every level: encoded once, before the first.
        if let (Some(cell), PromptSource::Dataset(d)) = (&self.dataset_media, &self.source) {
            cell.get_or_init(|| dataset_media::DatasetMedia::build(d, self.params.api, self.media_files.as_deref()));
        }
        if self.reproducible {
            // Every level shares the media too: encoded once, before the first level.
            if let Some((spec, pool)) = &self.media {
                pool.get_or_init(|| {
                    media::MediaPool::build(spec, self.params.api, self.seed, self.salt, self.media_files.as_deref())
                });
            }
            return self.clone();
        }
        let mut w = self.clone();
        w.salt = level_prompt_salt(self.salt, false, level);
        // Each level's own media, encoded now, before its first request.
        if let Some((spec, _)) = &self.media {
            let pool = media::MediaPool::build(spec, self.params.api, self.seed, w.salt, self.media_files.as_deref());
            w.media = Some((spec.clone(), std::sync::Arc::new(std::sync::OnceLock::from(pool))));
        }
        if self.shared_prefix_tokens > 0 {
            w.shared_prefix = build_shared_prefix(&self.sizer, self.seed, w.salt, self.shared_prefix_tokens);
            w.shared_prefix_estimate = text::estimate_tokens(&w.shared_prefix);
        }
        w
    }

    /// The salt of level `level`'s prompts (the salt of `for_level(level)`).
    pub fn level_salt(&self, level: f64) -> u64 {
        level_prompt_salt(self.salt, self.reproducible, level)
    }

    /// Every level sends the same prompts (reproducible prompts).
    pub fn levels_share_prompts(&self) -> bool {
        self.reproducible
    }

    /// `Request <tag>-<salt> reference text:`, the first words of every drawn prompt after the
    /// shared prefix (when there is one).
    fn header(&self, tag_index: u64) -> String {
        let tag = self.tag(tag_index);
        // Reproducible prompts carry the seed instead of a salt; either is the same for every
        // request of a level, so it follows the tag, which tells requests apart.
        if self.salt == 0 {
            format!("Request {tag}-{} reference text:", self.seed)
        } else {
            format!("Request {tag}-{:010} reference text:", self.salt as u32)
        }
    }

    /// The tag of request `tag_index`: a fixed-width permutation of the index keyed by the
    /// level's salt (its step and offset). A prefix cache matches a prompt token by token from
    /// its start, so the first thing that tells prompts apart must tell apart both the requests
    /// of a level and the same request of two runs or levels: a tag that is the same for request
    /// `i` in every run (and only then followed by the salt) lets a cache match its digits, a
    /// dozen tokens, across runs; a salt first would be shared by every request of the level.
    /// Keyed by the salt, the tag is unique within the level and, in another run or level,
    /// shares leading digits with a tag of this one only by chance (one digit in ten, two in a
    /// hundred), request by request. Reproducible prompts (salt 0) keep the plain permutation,
    /// the same in every run by design.
    fn tag(&self, tag_index: u64) -> String {
        let (step, offset) = tag_key(self.salt);
        if tag_index < TAG_SPACE {
            // u128: the product does not fit 64 bits.
            let keyed = (u128::from(tag_index) * u128::from(step) + u128::from(offset)) % u128::from(TAG_SPACE);
            format!("{keyed:010}")
        } else {
            // Past the fixed width (a batch of billions of inputs): still keyed, still distinct
            // from every fixed-width tag (it has more digits).
            (u128::from(tag_index) + u128::from(offset)).to_string()
        }
    }

    /// The planned context of request `index` (synthetic prompts: a seeded draw).
    pub fn planned_context(&self, index: u64) -> Option<u32> {
        match &self.source {
            PromptSource::Synthetic { context } => Some(draw_context(context, self.seed, index)),
            PromptSource::Dataset(_) => None,
            PromptSource::Trace(t) => t.rows.get(index as usize).map(|r| r.input_tokens),
            PromptSource::Sessions(_) => None,
        }
    }

    /// A trace replay: rows to send, at most `requests` and those due within `duration`.
    pub fn trace_rows(&self, requests: Option<u64>, duration: Option<std::time::Duration>) -> Option<u64> {
        let trace = &self.trace.as_ref()?.trace;
        let mut n = trace.rows.len() as u64;
        if let Some(d) = duration {
            n = n.min(trace.rows_within(d));
        }
        Some(requests.map_or(n, |r| r.min(n)))
    }

    /// A trace replay: when row `index` is meant to be sent, from the level's start.
    pub fn trace_offset(&self, index: u64) -> Option<std::time::Duration> {
        self.trace.as_ref()?.trace.scaled_offset(index as usize)
    }

    /// Whether preparing request `index` is heavy enough to keep off the async runtime.
    pub fn is_large(&self, index: u64) -> bool {
        self.planned_context(index).is_none_or(|t| t > 4096) || self.sizer.exact().is_some()
    }

    pub fn prepare(&self, index: u64) -> PreparedRequest {
        let mut request = self.prepare_body(index);
        self.ask_format(&mut request);
        request
    }

    /// Structured output: the schema drawn for the request, in its body.
    fn ask_format(&self, request: &mut PreparedRequest) {
        if let Some(formats) = &self.formats {
            formats.attach(request);
        }
    }

    fn prepare_body(&self, index: u64) -> PreparedRequest {
        if let Some(plan) = &self.trace {
            return self.trace_request(plan, index);
        }
        // Conversations are built turn by turn by their runner; on its own, request `index` is
        // the first turn of conversation `index` (what `validate` shows).
        if let Some(request) = self.conversation(index).and_then(|mut c| self.turn_request(&mut c, 0, index)) {
            return request;
        }
        let canary = self.canaries.then(|| canary_marker(self.seed, index));
        let task = task_text(canary.as_deref(), self.response_words);
        // The tag comes first so that prompts diverge within their first few tokens.
        let header = self.header(index);
        let mut dataset_facts = None;
        let (body, target, planned) = match &self.source {
            PromptSource::Synthetic { context } => {
                let planned = draw_context(context, self.seed, index);
                if let Some(batch) = self.batch_size {
                    let (body, target) = self.batch_request(index, planned, batch);
                    (body, target, planned)
                } else if self.encoding == crate::plan::scenario::PromptEncoding::TokenIds {
                    let (prompt, _) = self.synthetic(index, planned, &header, &task);
                    let ids = self.token_ids(&prompt, &task, planned);
                    // Exactly the planned length: the server counts the ids as they are.
                    (openai::request_body(self.params_at(index), PromptBody::TokenIds(&ids)), planned, planned)
                } else {
                    let (prompt, target) = self.synthetic(index, planned, &header, &task);
                    (openai::request_body(self.params_at(index), PromptBody::Text(&prompt)), target, planned)
                }
            }
            PromptSource::Dataset(d) => {
                let (body, target) = self.dataset_prompt(d, index, &header, &task);
                let (body, facts, tokens) = self.with_dataset_media(d, index, body);
                dataset_facts = facts;
                let target = target.saturating_add(tokens);
                (body, target, target)
            }
            // Handled above: a trace replay has its plan, conversations their turns.
            PromptSource::Trace(_) | PromptSource::Sessions(_) => (Vec::new(), 0, 0),
        };
        let (body, mut replay, media_tokens) = self.with_media(index, body);
        if let Some(facts) = dataset_facts {
            let facts = crate::request::record::MediaFacts { body_bytes: body.len() as u64, ..facts };
            replay = Some(Box::new(ReplayFacts { media: Some(facts), ..ReplayFacts::default() }));
        }
        self.name_model(&mut replay, index);
        PreparedRequest {
            index,
            planned_context_tokens: planned,
            prompt_target_tokens: target.saturating_add(media_tokens),
            canary,
            response_words: self.response_words,
            body: Bytes::from(body),
            replay,
            exchange: None,
            structured: None,
        }
    }

    /// Shared prefix, unique header, filler sized so the whole prompt predicts `planned`, task.
    fn synthetic(&self, index: u64, planned: u32, header: &str, task: &str) -> (String, u32) {
        let build = |words: usize| {
            let mut prompt = String::with_capacity(self.shared_prefix.len() + header.len() + task.len() + words * 7);
            prompt.push_str(&self.shared_prefix);
            if !self.shared_prefix.is_empty() {
                prompt.push_str("\n\n");
            }
            prompt.push_str(header);
            text::push_filler(&mut prompt, words, &mut text::rng(self.seed, self.salt, index, Stream::Text));
            prompt.push_str(task);
            prompt
        };
        // The shared prefix, the same in every prompt, is counted once, when the sizer allows.
        let count = |prompt: &str| {
            let rest = prompt.get(self.shared_prefix.len() + 2..).filter(|_| !self.shared_prefix.is_empty());
            rest.and_then(|rest| self.sizer.prompt_tokens_after(self.shared_prefix_estimate, rest))
                .unwrap_or_else(|| self.sizer.prompt_tokens(prompt))
        };
        let fixed = build(0);
        let per_word = self.sizer.per_filler_word().max(1e-3);
        let words = ((f64::from(planned) - count(&fixed)) / per_word).round().max(0.0) as usize;
        let prompt = self.corrected(planned, words, per_word, build, |p| self.sizer.prompt_tokens(p));
        let target = count(&prompt).round().max(0.0) as u32;
        (prompt, target)
    }

    /// `build(words)`, and with an exact sizer (a tokenizer) the word count nudged, at most four
    /// times, until `count` gives `target` tokens: tokenizers are not quite additive over words.
    /// The other sizers keep the first estimate.
    fn corrected(
        &self,
        target: u32,
        mut words: usize,
        per_word: f64,
        build: impl Fn(usize) -> String,
        count: impl Fn(&str) -> f64,
    ) -> String {
        let mut text = build(words);
        if self.sizer.exact().is_none() {
            return text;
        }
        for _ in 0..4 {
            let diff = f64::from(target) - count(&text);
            if diff == 0.0 {
                break;
            }
            let step = (diff / per_word).round();
            let step = if step == 0.0 { diff.signum() } else { step };
            words = (words as f64 + step).max(0.0) as usize;
            text = build(words);
        }
        text
    }

    fn dataset_prompt(&self, d: &Dataset, index: u64, header: &str, task: &str) -> (Vec<u8>, u32) {
        let pick = self.order[(index % self.order.len() as u64) as usize];
        let lead = if self.shared_prefix.is_empty() {
            format!("{header}\n\n")
        } else {
            format!("{}\n\n{header}\n\n", self.shared_prefix)
        };
        match &d.prompts[pick] {
            DatasetPrompt::Text(text) => {
                let prompt = format!("{lead}{text}{task}");
                let target = self.sizer.prompt_tokens(&prompt).round() as u32;
                (openai::request_body(self.params_at(index), PromptBody::Text(&prompt)), target)
            }
            DatasetPrompt::Messages(messages) => {
                let mut messages: Vec<ChatMessage> = messages.clone();
                if let Some(first) = messages.first_mut() {
                    first.content.insert_str(0, &lead);
                }
                if let Some(last_user) = messages.iter_mut().rev().find(|m| m.role == "user") {
                    last_user.content.push_str(task);
                }
                let target = self.chat_tokens(&messages).round().max(1.0) as u32;
                (openai::request_body(self.params_at(index), PromptBody::Messages(&messages)), target)
            }
        }
    }

    /// The sizer's prediction for a chat of these messages. The sizer knows one message's
    /// template; each further message adds its own role header and end of turn, a few tokens in
    /// every chat template in use. A chat that opens with its own system message replaces the
    /// template's default system prompt (which the probes' single messages carried): its
    /// overhead is the one its own probe measured for the `[system, user]` shape, when there
    /// was one.
    fn chat_tokens(&self, messages: &[ChatMessage]) -> f64 {
        let text: f64 = messages.iter().map(|m| self.sizer.text_tokens(&m.content)).sum();
        let (base, counted) = match self.system_overhead {
            Some(overhead) if messages.first().is_some_and(|m| m.role == "system") => (overhead, 2.0),
            _ => (self.sizer.overhead(), 1.0),
        };
        text + base + EXTRA_MESSAGE_TOKENS * (messages.len() as f64 - counted).max(0.0)
    }

    /// The sizer's count for a piece of text (for the system-message probe's overhead).
    pub fn text_tokens(&self, text: &str) -> f64 {
        self.sizer.text_tokens(text)
    }
}

/// The instruction that ends every prompt.
fn task_text(canary: Option<&str>, words: Option<u32>) -> String {
    match (canary, words) {
        (Some(marker), Some(n)) => {
            format!(
                "\n\nTask: begin your reply with the exact text {marker}, then answer in exactly {n} words about the reference text."
            )
        }
        (Some(marker), None) => format!(
            "\n\nTask: begin your reply with the exact text {marker} and then summarise the reference text in one sentence."
        ),
        (None, Some(n)) => format!("\n\nTask: answer in exactly {n} words about the reference text."),
        (None, None) => "\n\nTask: summarise the reference text in one sentence.".to_string(),
    }
}

/// Shared-prefix text of `tokens` tokens by the sizer (content only: the chat template's opening
/// adds a few more shared tokens on the server).
fn build_shared_prefix(sizer: &Sizer, seed: u64, salt: u64, tokens: u32) -> String {
    let per_word = sizer.per_filler_word().max(1e-3);
    let build = |words: usize| {
        let mut s = String::from("Shared reference text:");
        text::push_filler(&mut s, words, &mut text::rng(seed, salt, 0, Stream::SharedPrefix));
        s
    };
    // One cache block of margin: block-granular caches (16 tokens in vLLM) then hold at least the
    // requested count, whatever the template adds in front.
    let goal = f64::from(tokens) + 16.0;
    let mut words = (goal / per_word).ceil() as usize;
    let mut prefix = build(words);
    while sizer.text_tokens(&prefix) < goal {
        words += 1;
        prefix = build(words);
    }
    prefix
}

/// The planned context of request `index`.
pub fn draw_context(dist: &ContextDistribution, seed: u64, index: u64) -> u32 {
    let mut rng = text::rng(seed, 0, index, Stream::Context);
    match dist {
        ContextDistribution::Weighted { choices } => {
            if let [(tokens, _)] = choices.as_slice() {
                return *tokens;
            }
            let total: u64 = choices.iter().map(|&(_, w)| u64::from(w)).sum();
            let mut pick = rng.random_range(0..total);
            for &(tokens, weight) in choices {
                if pick < u64::from(weight) {
                    return tokens;
                }
                pick -= u64::from(weight);
            }
            dist.largest()
        }
        ContextDistribution::Uniform { lo, hi } => rng.random_range(*lo..=*hi),
        ContextDistribution::Normal { mean, sd, min, max } => {
            let normal = rand_distr::Normal::new(*mean, *sd)
                .unwrap_or_else(|_| rand_distr::Normal::new(*mean, 1.0).expect("unit sd is valid"));
            let v: f64 = rng.sample(normal);
            (v.round().clamp(f64::from(*min), f64::from(*max))) as u32
        }
    }
}

#[cfg(test)]
mod tests;
