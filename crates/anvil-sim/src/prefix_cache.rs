//! Prefix-cache simulation: which leading part of a prompt an engine would find already
//! computed, from hashes of earlier prompts' prefixes. Also the prompt hash that seeds each
//! request's deterministic output.

use std::collections::HashSet;
use std::sync::Mutex;

use super::tokenize::{Prompt, Step};

/// Engines cache in blocks; a prefix is recorded where the running token count crosses a
/// multiple of this.
const BLOCK_TOKENS: u32 = 16;
/// Past this many recorded prefixes the whole set is dropped: a crude eviction that bounds
/// memory during long runs (about 100 MB at the limit) without bookkeeping per entry.
const MAX_ENTRIES: usize = 4_000_000;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a 64: the hash of a prefix extends to the hash of a longer prefix without
/// rehashing, so every position of a long prompt costs only its own bytes.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds one walk step with a tag and its length, so that different step sequences
    /// cannot produce the same byte stream.
    fn feed_step(&mut self, step: &Step<'_>) {
        self.feed(&[if step.header { 1 } else { 2 }]);
        self.feed(step.bytes);
        let len = u32::try_from(step.bytes.len()).unwrap_or(u32::MAX);
        self.feed(&len.to_le_bytes());
    }
}

/// Hash of the whole prompt: seeds the request's output so the same prompt always yields
/// the same lengths and words.
pub(crate) fn prompt_seed(prompt: &Prompt<'_>) -> u64 {
    let mut hash = Fnv(FNV_OFFSET);
    prompt.walk(|step| hash.feed_step(&step));
    hash.0
}

/// Hash and token count of the prompt after one walk step.
struct Position {
    hash: u64,
    tokens: u32,
    /// The step crossed a multiple of [`BLOCK_TOKENS`].
    boundary: bool,
}

/// Recorded prefix hashes of earlier prompts.
#[derive(Default)]
pub(crate) struct PrefixCache {
    recorded: Mutex<HashSet<u64>>,
}

impl PrefixCache {
    pub fn new() -> PrefixCache {
        PrefixCache::default()
    }

    /// Forget every prefix (an engine's cache reset).
    pub fn clear(&self) {
        if let Ok(mut recorded) = self.recorded.lock() {
            recorded.clear();
        }
    }

    /// Returns how many leading tokens of `prompt` earlier prompts already computed (at most
    /// `prompt_tokens - 1`: engines always recompute the last prompt token), then records
    /// this prompt's block-boundary prefixes and its full length.
    #[cfg(test)]
    pub fn lookup_and_insert(&self, prompt: &Prompt<'_>, prompt_tokens: u32) -> u32 {
        self.lookup_and_insert_answered(prompt, prompt_tokens, "")
    }

    /// As `lookup_and_insert`, and the generated `answer` (its words, in the order generated)
    /// is recorded as a continuation of the prompt: an engine holds the KV of the tokens it
    /// generated, so the next turn of a conversation, whose prompt repeats this prompt and then
    /// this answer as the assistant message, finds both.
    pub fn lookup_and_insert_answered(&self, prompt: &Prompt<'_>, prompt_tokens: u32, answer: &str) -> u32 {
        let mut positions = positions(prompt);
        let prompt_steps = positions.len();
        if let Some(last) = positions.last() {
            let (mut hash, mut tokens) = (Fnv(last.hash), last.tokens);
            for word in answer.split_whitespace() {
                let step = Step { header: false, bytes: word.as_bytes(), tokens: prompt.word_tokens(word) };
                hash.feed_step(&step);
                let before = tokens;
                tokens = tokens.saturating_add(step.tokens);
                positions.push(Position {
                    hash: hash.0,
                    tokens,
                    boundary: tokens / BLOCK_TOKENS > before / BLOCK_TOKENS,
                });
            }
        }
        // The end of the prompt is recorded too, so that the next turn of a conversation
        // (which repeats this prompt) hits it exactly, as a real engine's cache would.
        let inserts: Vec<u64> = positions
            .iter()
            .enumerate()
            .filter(|(i, p)| p.boundary || *i + 1 == positions.len() || *i + 1 == prompt_steps)
            .map(|(_, p)| p.hash)
            .collect();

        let hit = {
            // Poisoning only means another request panicked mid-update of a plain set of
            // hashes; the set is still usable.
            let mut recorded = self.recorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let hit = longest_hit(&positions[..prompt_steps], &recorded);
            if recorded.len() + inserts.len() > MAX_ENTRIES {
                recorded.clear();
            }
            recorded.extend(inserts);
            hit
        };
        hit.min(prompt_tokens.saturating_sub(1))
    }
}

fn positions(prompt: &Prompt<'_>) -> Vec<Position> {
    let mut out = Vec::new();
    let mut hash = Fnv(FNV_OFFSET);
    let mut tokens = 0u32;
    prompt.walk(|step| {
        hash.feed_step(&step);
        let before = tokens;
        tokens = tokens.saturating_add(step.tokens);
        out.push(Position { hash: hash.0, tokens, boundary: tokens / BLOCK_TOKENS > before / BLOCK_TOKENS });
    });
    out
}

/// Token count of the longest position of this prompt that some earlier prompt recorded.
///
/// Hashes chain, so an earlier prompt that shares the prefix up to some position also
/// recorded every block boundary before it. The longest hit is therefore either the longest
/// matching boundary or an earlier prompt's *end* lying between that boundary and the next
/// one; only that gap needs a position-by-position look.
fn longest_hit(positions: &[Position], recorded: &HashSet<u64>) -> u32 {
    let boundary_hit =
        positions.iter().enumerate().rev().find(|(_, p)| p.boundary && recorded.contains(&p.hash)).map(|(i, _)| i);
    let gap_start = boundary_hit.map_or(0, |i| i + 1);
    let mut best = boundary_hit.map_or(0, |i| positions[i].tokens);
    for position in &positions[gap_start..] {
        if position.boundary {
            break;
        }
        if recorded.contains(&position.hash) {
            best = position.tokens;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn chat(user: &str) -> Value {
        json!({"messages": [{"role": "user", "content": user}]})
    }

    fn words(prefix: &str, n: usize) -> String {
        (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>().join(" ")
    }

    fn run(cache: &PrefixCache, body: &Value) -> (u32, u32) {
        let prompt = Prompt::from_chat(body).expect("valid prompt");
        let tokens = prompt.token_count();
        (cache.lookup_and_insert(&prompt, tokens), tokens)
    }

    #[test]
    fn repeated_prompt_hits_all_but_last_token() {
        let cache = PrefixCache::new();
        let body = chat(&words("w", 100));
        let (first, _) = run(&cache, &body);
        assert_eq!(first, 0);
        let (second, tokens) = run(&cache, &body);
        assert_eq!(second, tokens - 1);
    }

    #[test]
    fn shared_64_token_prefix_is_found_at_block_granularity() {
        let cache = PrefixCache::new();
        // Words of 1 token each ("a0".."a9" and up to "a99" are at most 3 bytes): 3 template
        // tokens plus 61 words make a 64-token shared prefix.
        let shared = words("a", 61);
        run(&cache, &chat(&format!("{shared} {}", words("x", 80))));
        let (cached, _) = run(&cache, &chat(&format!("{shared} {}", words("y", 80))));
        assert!((48..=64).contains(&cached), "cached {cached}");
    }

    #[test]
    fn unrelated_prompt_misses() {
        let cache = PrefixCache::new();
        run(&cache, &chat(&words("p", 200)));
        let (cached, _) = run(&cache, &chat(&words("q", 200)));
        assert_eq!(cached, 0);
    }

    #[test]
    fn next_conversation_turn_hits_the_previous_prompt() {
        let cache = PrefixCache::new();
        // 5 words, so the previous prompt ends between block boundaries.
        let turn1 = json!({"messages": [{"role": "user", "content": "one two three four five"}]});
        let (_, tokens1) = run(&cache, &turn1);
        let turn2 = json!({"messages": [
            {"role": "user", "content": "one two three four five"},
            {"role": "assistant", "content": "reply"},
            {"role": "user", "content": "more"},
        ]});
        let (cached, _) = run(&cache, &turn2);
        assert_ne!(tokens1 % BLOCK_TOKENS, 0);
        assert_eq!(cached, tokens1);
    }

    #[test]
    fn an_answer_recorded_with_its_prompt_is_found_by_the_next_turn() {
        let cache = PrefixCache::new();
        let turn1 = json!({"messages": [{"role": "user", "content": words("u", 40)}]});
        let prompt = Prompt::from_chat(&turn1).expect("valid");
        let tokens1 = prompt.token_count();
        let answer = "ANVIL_REQ_1_S00001_T1 the model answer is here";
        assert_eq!(cache.lookup_and_insert_answered(&prompt, tokens1, answer), 0);
        let turn2 = json!({"messages": [
            {"role": "user", "content": words("u", 40)},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and then"},
        ]});
        let (cached, _) = run(&cache, &turn2);
        let answer_tokens: u32 = answer.split_whitespace().map(piece).sum();
        // The previous prompt (its assistant opening included) and the whole answer.
        assert_eq!(cached, tokens1 + answer_tokens);
        // A different answer in the history (a recorded one) finds only the prompt.
        let turn2b = json!({"messages": [
            {"role": "user", "content": words("u", 40)},
            {"role": "assistant", "content": "something else entirely"},
            {"role": "user", "content": "and then"},
        ]});
        let (cached, _) = run(&cache, &turn2b);
        assert_eq!(cached, tokens1);
    }

    fn piece(word: &str) -> u32 {
        crate::count_text_tokens(word)
    }

    #[test]
    fn seed_depends_on_the_whole_prompt() {
        let a = chat("same words here");
        let b = chat("same words there");
        let seed = |v: &Value| prompt_seed(&Prompt::from_chat(v).expect("valid"));
        assert_eq!(seed(&a), seed(&a.clone()));
        assert_ne!(seed(&a), seed(&b));
    }
}
