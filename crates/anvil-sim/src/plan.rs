//! What a request will generate: how many reasoning and content tokens, why it stops, what it
//! reports in usage, and the words themselves. All of it is drawn from a generator seeded by
//! the prompt hash, so the same prompt always produces the same answer.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::profile::Profile;
use super::request::GenRequest;
use super::tokenize::PromptKind;

/// Vocabulary of the simulated model; every token is one of these with a leading space.
/// Plain ASCII letters keep chunks cheap to build (nothing to escape) and easy to read. Every
/// word has at most five letters, so a generated token read back in a later prompt (a
/// conversation's history) counts exactly one prompt token, as a real tokenizer's would.
const WORDS: &[&str] = &[
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " on", " this", " by", " from",
    " at", " model", " token", " time", " load", " query", " serve", " reply", " first", " stage", " then", " trace",
    " which", " each", " more", " less", " fast", " slow", " queue", " batch", " cache", " block", " fetch", " chunk",
    " store", " split", " value", " merge", " order", " check", " frame", " clear", " step", " next", " think",
    " count", " shard", " word", " line", " test", " data", " point", " rate", " peak", " path", " unit", " node",
    " flow", " input",
];

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// The model reached its natural end of turn.
    Stop,
    /// Cut by `max_tokens` (or `ignore_eos` + `max_tokens`, or the context edge).
    Length,
    /// The model called a tool (see `tool_call`).
    ToolCalls,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// Token counts of one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutputPlan {
    pub reasoning: u32,
    pub content: u32,
    pub finish: Finish,
    /// What usage reports; one more than streamed with the end-of-turn quirk.
    pub completion_tokens: u32,
    /// The never-streamed end-of-turn token takes one decode step before the finish chunk.
    pub eos_step: bool,
}

impl OutputPlan {
    pub fn total(&self) -> u32 {
        self.reasoning.saturating_add(self.content)
    }
}

fn draw(rng: &mut Xoshiro256PlusPlus, (a, b): (u32, u32)) -> u32 {
    rng.random_range(a.min(b)..=a.max(b))
}

/// Decides the token counts for `req`. Reasoning counts against `max_tokens` first, as it
/// does in real engines; completions have no reasoning channel at all.
pub(crate) fn plan_output(
    profile: &Profile,
    req: &GenRequest<'_>,
    prompt_tokens: u32,
    rng: &mut Xoshiro256PlusPlus,
) -> OutputPlan {
    // Both lengths are always drawn so the content length of a prompt does not change when
    // thinking is switched off.
    let natural_reasoning = draw(rng, profile.reasoning_tokens);
    let natural_content = draw(rng, profile.content_tokens);
    let mut reasoning = if req.prompt.kind == PromptKind::Chat && req.thinking { natural_reasoning } else { 0 };
    // An instruction to answer in N words is obeyed (the canary marker rides in front of them).
    let mut content = match (req.content_tokens, req.response_words) {
        (Some(tokens), _) => tokens,
        (None, Some(words)) => words.saturating_add(u32::from(req.canary.is_some())),
        (None, None) => natural_content,
    };
    // Every answer carries at least one token, and a canary needs a content token to ride on.
    if content == 0 && (reasoning == 0 || req.canary.is_some()) {
        content = 1;
    }
    if reasoning.saturating_add(content) < req.min_tokens {
        content = req.min_tokens - reasoning;
    }
    // Output past the context edge stops with `length`, like llama.cpp.
    let room = profile.context_limit.saturating_sub(prompt_tokens).max(1);
    let cap = req.max_tokens.map_or(room, |limit| limit.min(room));
    // `ignore_eos` with a limit runs to exactly the limit; otherwise only a natural length
    // over the limit is cut.
    let cut = (req.ignore_eos && req.max_tokens.is_some()) || reasoning.saturating_add(content) > cap;
    let finish = if cut {
        reasoning = reasoning.min(cap);
        content = cap - reasoning;
        Finish::Length
    } else {
        Finish::Stop
    };
    let eos_step = profile.eos_in_usage && finish == Finish::Stop;
    OutputPlan {
        reasoning,
        content,
        finish,
        completion_tokens: reasoning.saturating_add(content).saturating_add(u32::from(eos_step)),
        eos_step,
    }
}

/// Produces the words of one response in order: reasoning tokens, then content tokens (the
/// first of which is the canary marker when there is one).
#[derive(Clone)]
pub(crate) struct TextSource {
    /// Separate streams, so the answer's words do not depend on how much reasoning came
    /// before them (thinking on or off, reasoning cut by `max_tokens`).
    reasoning_rng: Xoshiro256PlusPlus,
    content_rng: Xoshiro256PlusPlus,
    canary: Option<String>,
    /// Content tokens produced so far.
    content_emitted: u32,
    /// Contamination: another request's marker replaces the content token at this index.
    foreign: Option<(u32, String)>,
    /// Structured output: the answer's JSON, token by token, instead of words.
    json: Option<std::sync::Arc<[Box<str>]>>,
}

impl TextSource {
    pub fn new(seed: u64, canary: Option<&str>) -> TextSource {
        TextSource {
            // Different streams from the one that drew the lengths.
            reasoning_rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_7e47_0000_0001),
            content_rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_7e47_0000_0002),
            canary: canary.map(str::to_owned),
            content_emitted: 0,
            foreign: None,
            json: None,
        }
    }

    /// Content tokens are these pieces of JSON (structured output), in order.
    pub fn with_json(mut self, tokens: Vec<Box<str>>) -> TextSource {
        self.json = Some(tokens.into());
        self
    }

    /// Makes content token `index` another request's `marker` (index 0 swaps the answer's
    /// own marker). Replacing a token rather than adding one keeps every count as planned.
    pub fn contaminate(&mut self, index: u32, marker: String) {
        self.foreign = Some((index, marker));
    }

    /// Appends `n` reasoning tokens.
    pub fn push_reasoning(&mut self, out: &mut String, n: u32) {
        for _ in 0..n {
            out.push_str(word(&mut self.reasoning_rng));
        }
    }

    /// Appends `n` content tokens. True when the contaminating marker was among them.
    pub fn push_content(&mut self, out: &mut String, n: u32) -> bool {
        let mut contaminated = false;
        for _ in 0..n {
            let index = self.content_emitted;
            self.content_emitted = index.saturating_add(1);
            let own = if index == 0 { self.canary.as_deref() } else { None };
            // The word is drawn even when replaced, so the rest of the answer stays the same.
            let token = own.unwrap_or_else(|| word(&mut self.content_rng));
            let token = match &self.json {
                Some(json) => json.get(index as usize).map_or("", |t| &**t),
                None => token,
            };
            match &self.foreign {
                Some((at, marker)) if *at == index => {
                    if index > 0 {
                        out.push(' ');
                    }
                    out.push_str(marker);
                    contaminated = true;
                }
                _ => out.push_str(token),
            }
        }
        contaminated
    }
}

fn word(rng: &mut Xoshiro256PlusPlus) -> &'static str {
    WORDS[rng.random_range(0..WORDS.len())]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::request::parse;

    fn plan_for(profile: &Profile, kind: PromptKind, body: &Value) -> OutputPlan {
        let req = parse(kind, body).expect("valid request");
        let tokens = req.prompt.token_count();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
        plan_output(profile, &req, tokens, &mut rng)
    }

    fn profile() -> Profile {
        Profile { reasoning_tokens: (30, 30), content_tokens: (20, 20), ..Profile::named("fast").expect("fast") }
    }

    #[test]
    fn every_generated_word_reads_back_as_one_prompt_token() {
        let mut seen = std::collections::HashSet::new();
        for word in WORDS {
            assert!(seen.insert(word), "{word} twice");
            assert_eq!(crate::count_text_tokens(word), 1, "{word}");
        }
        assert_eq!(WORDS.len(), 64);
    }

    #[test]
    fn natural_length_stops() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let plan = plan_for(&profile(), PromptKind::Chat, &body);
        assert_eq!((plan.reasoning, plan.content, plan.finish), (30, 20, Finish::Stop));
        assert_eq!(plan.completion_tokens, 50);
    }

    #[test]
    fn max_tokens_cuts_reasoning_first() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40});
        let plan = plan_for(&profile(), PromptKind::Chat, &body);
        assert_eq!((plan.reasoning, plan.content, plan.finish), (30, 10, Finish::Length));
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10});
        let plan = plan_for(&profile(), PromptKind::Chat, &body);
        assert_eq!((plan.reasoning, plan.content), (10, 0));
    }

    #[test]
    fn ignore_eos_generates_exactly_max_tokens() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 100, "ignore_eos": true});
        let plan = plan_for(&profile(), PromptKind::Chat, &body);
        assert_eq!((plan.reasoning, plan.content, plan.finish), (30, 70, Finish::Length));
    }

    #[test]
    fn min_tokens_extends_content() {
        let body = json!({"prompt": "hi", "min_tokens": 64});
        let plan = plan_for(&profile(), PromptKind::Completion, &body);
        assert_eq!((plan.reasoning, plan.content, plan.finish), (0, 64, Finish::Stop));
    }

    #[test]
    fn thinking_off_and_eos_quirk() {
        let mut profile = profile();
        profile.eos_in_usage = true;
        let body = json!({"messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": false}});
        let plan = plan_for(&profile, PromptKind::Chat, &body);
        assert_eq!((plan.reasoning, plan.content), (0, 20));
        assert_eq!(plan.completion_tokens, 21);
        assert!(plan.eos_step);
    }

    #[test]
    fn context_edge_stops_with_length() {
        let mut profile = profile();
        profile.context_limit = 20;
        let body = json!({"prompt": "a b c d e f g h i"});
        let plan = plan_for(&profile, PromptKind::Completion, &body);
        assert_eq!((plan.total(), plan.finish), (10, Finish::Length));
    }

    #[test]
    fn text_starts_with_canary_and_is_deterministic() {
        let make = || {
            let mut source = TextSource::new(7, Some("ANVIL_REQ_x1"));
            let mut reasoning = String::new();
            let mut content = String::new();
            source.push_reasoning(&mut reasoning, 3);
            source.push_content(&mut content, 1);
            source.push_content(&mut content, 2);
            (reasoning, content)
        };
        let (reasoning, content) = make();
        assert_eq!(reasoning.split(' ').count(), 4);
        assert!(content.starts_with("ANVIL_REQ_x1 "));
        assert_eq!(content.split(' ').count(), 3);
        assert_eq!(make(), (reasoning, content));
    }

    #[test]
    fn contamination_replaces_one_token() {
        let content = |foreign: Option<(u32, &str)>, canary| {
            let mut source = TextSource::new(7, canary);
            if let Some((at, marker)) = foreign {
                source.contaminate(at, marker.to_owned());
            }
            let mut text = String::new();
            let first = source.push_content(&mut text, 2);
            let second = source.push_content(&mut text, 3);
            (text, first, second)
        };
        let (clean, ..) = content(None, Some("ANVIL_REQ_own"));
        let (swapped, first, second) = content(Some((0, "ANVIL_REQ_other")), Some("ANVIL_REQ_own"));
        assert!((first, second) == (true, false));
        assert_eq!(swapped, clean.replacen("ANVIL_REQ_own", "ANVIL_REQ_other", 1));
        let (merged, first, second) = content(Some((3, "ANVIL_REQ_other")), Some("ANVIL_REQ_own"));
        assert!((first, second) == (false, true));
        assert!(merged.starts_with("ANVIL_REQ_own "));
        let words: Vec<_> = merged.split(' ').collect();
        assert_eq!(words.len(), 5);
        assert_eq!(words[3], "ANVIL_REQ_other");
        assert_eq!(clean.split(' ').nth(4), words.get(4).copied(), "later words unchanged");
        let (no_canary, ..) = content(Some((0, "ANVIL_REQ_other")), None);
        assert!(no_canary.starts_with("ANVIL_REQ_other "));
    }
}
