//! What each request asks for: its planned context, its prompt, its canary marker, its body.
//!
//! Everything here is a pure function of the scenario and the request index, so the same seed
//! gives the same prompts whatever the scheduling order, and request `i` can be prepared by any
//! worker without shared state.
//!
//! Prompt sizing uses a built-in token estimate (`estimate_tokens`): a dictionary word of up to
//! eight ASCII letters is one token (true of common English words in every BPE vocabulary in
//! use), anything else counts one token per four bytes, and the chat template adds
//! `CHAT_TEMPLATE_TOKENS`. The server's own count differs by a few percent; the artifact records
//! both (`prompt_target_tokens`, `prompt_tokens`).

use bytes::Bytes;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::openai::{self, RequestParams};
use crate::scenario::{ContextDistribution, Scenario};

/// Estimated tokens a chat template wraps around one user message (role markers, turn
/// separators, the assistant prefix).
pub const CHAT_TEMPLATE_TOKENS: u32 = 8;
/// Completions prompts get a beginning-of-sequence token.
pub const COMPLETIONS_OVERHEAD_TOKENS: u32 = 1;

/// Prefix of every canary marker; any occurrence in a response is counted.
pub const CANARY_PREFIX: &str = "ANVIL_REQ_";

/// One request, ready to send. Built before the request's clock starts.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub index: u64,
    pub planned_context_tokens: u32,
    /// Prompt size the text was built to, by the built-in estimate, template included.
    pub prompt_target_tokens: u32,
    /// The marker the response must start with, when canaries are on.
    pub canary: Option<String>,
    /// Serialized JSON request body.
    pub body: Bytes,
}

/// Builds requests for one scenario.
#[derive(Debug, Clone)]
pub struct Workload {
    seed: u64,
    context: ContextDistribution,
    canaries: bool,
    params: RequestParams,
}

impl Workload {
    pub fn new(scenario: &Scenario) -> Self {
        Workload {
            seed: scenario.run.seed,
            context: scenario.workload.context.clone(),
            canaries: scenario.workload.canaries,
            params: RequestParams::from_scenario(scenario),
        }
    }

    /// The planned context of request `index` (a seeded draw, independent of other requests).
    pub fn planned_context(&self, index: u64) -> u32 {
        draw_context(&self.context, &mut request_rng(self.seed, index, Stream::Context))
    }

    pub fn prepare(&self, index: u64) -> PreparedRequest {
        let planned = self.planned_context(index);
        let canary = self.canaries.then(|| canary_marker(self.seed, index));
        let overhead = match self.params.api {
            crate::scenario::Api::Chat => CHAT_TEMPLATE_TOKENS,
            crate::scenario::Api::Completions => COMPLETIONS_OVERHEAD_TOKENS,
        };
        let prompt = build_prompt(self.seed, index, planned.saturating_sub(overhead), canary.as_deref());
        let body = openai::request_body(&self.params, &prompt);
        PreparedRequest {
            index,
            planned_context_tokens: planned,
            prompt_target_tokens: estimate_tokens(&prompt) + overhead,
            canary,
            body: Bytes::from(body),
        }
    }
}

/// `ANVIL_REQ_<seed>_<index:05>`.
pub fn canary_marker(seed: u64, index: u64) -> String {
    format!("{CANARY_PREFIX}{seed}_{index:05}")
}

/// Independent random streams per request, so adding a draw to one never shifts another.
#[derive(Clone, Copy)]
enum Stream {
    Context = 1,
    Text = 2,
}

fn request_rng(seed: u64, index: u64, stream: Stream) -> Xoshiro256PlusPlus {
    // SplitMix-style mixing so that nearby (seed, index) pairs give unrelated streams.
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (stream as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Xoshiro256PlusPlus::seed_from_u64(z ^ (z >> 31))
}

fn draw_context(dist: &ContextDistribution, rng: &mut Xoshiro256PlusPlus) -> u32 {
    if let [(tokens, _)] = dist.choices.as_slice() {
        return *tokens;
    }
    let total: u64 = dist.choices.iter().map(|&(_, w)| u64::from(w)).sum();
    let mut pick = rng.random_range(0..total);
    for &(tokens, weight) in &dist.choices {
        if pick < u64::from(weight) {
            return tokens;
        }
        pick -= u64::from(weight);
    }
    dist.largest()
}

/// The built-in token estimate (see the module docs).
pub fn estimate_tokens(text: &str) -> u32 {
    text.split_whitespace()
        .map(|word| {
            if word.len() <= 8 && word.bytes().all(|b| b.is_ascii_alphabetic()) {
                1
            } else {
                word.len().div_ceil(4) as u32
            }
        })
        .sum()
}

/// A prompt of `target` estimated tokens: a unique header (so no two requests share a cached
/// prefix), seeded filler words, and the task (with the canary instruction when enabled).
fn build_prompt(seed: u64, index: u64, target: u32, canary: Option<&str>) -> String {
    let header = format!("Request {seed}-{index} reference text:");
    let task = match canary {
        Some(marker) => format!(
            "\n\nTask: begin your reply with the exact text {marker} and then summarise the reference text in one sentence."
        ),
        None => "\n\nTask: summarise the reference text in one sentence.".to_string(),
    };
    let fixed = estimate_tokens(&header) + estimate_tokens(&task);
    let filler_words = target.saturating_sub(fixed) as usize;
    let mut prompt = String::with_capacity(header.len() + task.len() + filler_words * 6);
    prompt.push_str(&header);
    let mut rng = request_rng(seed, index, Stream::Text);
    for _ in 0..filler_words {
        prompt.push(' ');
        prompt.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    prompt.push_str(&task);
    prompt
}

/// Whether `word` is one of the filler words synthetic prompts are made of.
pub fn is_filler_word(word: &str) -> bool {
    WORDS.contains(&word)
}

/// Common English words, each a single token in the tokenizers of current open models.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
    "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "she", "other", "its", "may", "these", "what", "them", "than", "some", "him", "time", "into", "only", "do",
    "could", "new", "about", "two", "then", "first", "also", "after", "any", "like", "should", "made", "well", "such",
    "where", "most", "over", "years", "through", "between", "used", "many", "before", "must", "people", "very",
    "state", "being", "under", "three", "same", "work", "water", "world", "because", "great", "while", "place",
    "river", "house", "small", "large", "light", "night", "north", "south", "early", "later", "power", "school",
    "system", "number", "city", "group", "music", "field", "order", "point", "court", "paper", "story", "market",
    "family", "public", "study", "road", "book", "land", "line", "life", "game", "hand", "part", "case", "week",
    "company", "country", "general", "history", "island", "garden", "forest", "winter", "summer", "letter", "energy",
    "design", "season", "station", "member", "report", "service", "version", "process", "problem", "result", "program",
    "level", "model", "value",
];

/// What the canary check found in one response.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CanaryCheck {
    pub marker: String,
    /// The visible content (after leading whitespace) starts with this request's marker.
    pub marker_at_start: bool,
    /// Occurrences of this request's marker.
    pub observed_marker_count: u32,
    /// Occurrences of any other `ANVIL_REQ_` marker (cross-request contamination).
    pub foreign_marker_count: u32,
    /// The whole visible response was captured (not cut by the capture cap or a broken stream).
    pub capture_complete: bool,
    pub passed: bool,
}

/// Check a response's visible content against its marker. Fails closed on an incomplete capture.
pub fn check_canary(marker: &str, visible: &str, capture_complete: bool) -> CanaryCheck {
    let mut own = 0u32;
    let mut foreign = 0u32;
    let mut rest = visible;
    while let Some(at) = rest.find(CANARY_PREFIX) {
        let tail = &rest[at..];
        // A marker is the prefix plus the longest run of [A-Za-z0-9_], so `..._0001` never
        // matches inside `..._00012`.
        let len = CANARY_PREFIX.len()
            + tail[CANARY_PREFIX.len()..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
        if &tail[..len] == marker {
            own += 1;
        } else {
            foreign += 1;
        }
        rest = &tail[len..];
    }
    let start = visible.trim_start();
    let marker_at_start = start.starts_with(marker)
        && !start[marker.len()..].bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    CanaryCheck {
        marker: marker.to_string(),
        marker_at_start,
        observed_marker_count: own,
        foreign_marker_count: foreign,
        capture_complete,
        passed: marker_at_start && own == 1 && foreign == 0 && capture_complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_dictionary_words_as_one_token() {
        assert_eq!(estimate_tokens("the river system"), 3);
        assert_eq!(estimate_tokens("ANVIL_REQ_1717_00000"), 5);
        assert_eq!(estimate_tokens("sentence."), 3);
        assert_eq!(estimate_tokens("  \n "), 0);
    }

    #[test]
    fn prompt_hits_its_target_by_the_estimate() {
        for target in [64, 1000, 65_536 - CHAT_TEMPLATE_TOKENS] {
            let p = build_prompt(7, 3, target, Some("ANVIL_REQ_7_00003"));
            assert_eq!(estimate_tokens(&p), target, "target {target}");
        }
    }

    #[test]
    fn prompts_are_seeded_and_unique_per_request() {
        assert_eq!(build_prompt(1, 0, 500, None), build_prompt(1, 0, 500, None));
        assert_ne!(build_prompt(1, 0, 500, None), build_prompt(1, 1, 500, None));
        assert_ne!(build_prompt(1, 0, 500, None), build_prompt(2, 0, 500, None));
        // The first words already differ, so no cache block can be shared.
        let a = build_prompt(1, 0, 500, None);
        let b = build_prompt(1, 1, 500, None);
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common < 16, "shared prefix of {common} bytes");
    }

    #[test]
    fn mixture_draws_follow_weights_and_seed() {
        let dist = ContextDistribution { choices: vec![(1024, 3), (8192, 1)] };
        let draw = |seed| {
            (0..4000).map(|i| draw_context(&dist, &mut request_rng(seed, i, Stream::Context))).collect::<Vec<_>>()
        };
        let a = draw(5);
        assert_eq!(a, draw(5));
        let small = a.iter().filter(|&&t| t == 1024).count();
        // Binomial(4000, 0.75): mean 3000, sd 27.4; ±4 sd.
        assert!((2890..=3110).contains(&small), "{small}");
    }

    #[test]
    fn canary_passes_only_on_a_clean_response() {
        let m = "ANVIL_REQ_1717_00001";
        assert!(check_canary(m, "ANVIL_REQ_1717_00001 The text is about rivers.", true).passed);
        assert!(check_canary(m, "\n ANVIL_REQ_1717_00001 ok", true).passed);
        let late = check_canary(m, "Sure! ANVIL_REQ_1717_00001", true);
        assert!(!late.marker_at_start && !late.passed && late.observed_marker_count == 1);
        let swapped = check_canary(m, "ANVIL_REQ_1717_00002 text", true);
        assert_eq!(
            (swapped.marker_at_start, swapped.observed_marker_count, swapped.foreign_marker_count),
            (false, 0, 1)
        );
        let merged = check_canary(m, "ANVIL_REQ_1717_00001 text ANVIL_REQ_1717_00007 more", true);
        assert_eq!((merged.observed_marker_count, merged.foreign_marker_count, merged.passed), (1, 1, false));
        let twice = check_canary(m, "ANVIL_REQ_1717_00001 ANVIL_REQ_1717_00001", true);
        assert_eq!((twice.observed_marker_count, twice.passed), (2, false));
        // A longer marker that merely starts with ours is foreign.
        let longer = check_canary(m, "ANVIL_REQ_1717_000012 x", true);
        assert_eq!((longer.marker_at_start, longer.observed_marker_count, longer.foreign_marker_count), (false, 0, 1));
        assert!(!check_canary(m, "ANVIL_REQ_1717_00001 cut", false).passed);
    }
}
