//! Text as the tool makes and writes it: synthetic prompt text (seeded filler words, the
//! built-in token estimate, the random streams every per-request draw comes from), and numbers
//! and durations as a person writes them in a message.
//!
//! Filler is *block-balanced*: it is the word list shuffled, then shuffled again, and so on, so
//! every run of `WORDS.len()` words holds each word exactly once. Any server tokenizer therefore
//! counts a long filler at a fixed rate per word, which is what lets a two-parameter calibration
//! size prompts to within a few tokens.

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom;

/// Independent random streams per request, so adding a draw to one never shifts another.
#[derive(Clone, Copy)]
pub enum Stream {
    Context = 1,
    Text = 2,
    SharedPrefix = 3,
    Dataset = 4,
    /// Prompt blocks (`blocks`).
    Block = 5,
}

/// A generator for one `(seed, salt, index, stream)`: the same inputs give the same draws.
pub fn rng(seed: u64, salt: u64, index: u64, stream: Stream) -> Xoshiro256PlusPlus {
    // SplitMix-style mixing so that nearby inputs give unrelated streams.
    let mut z = seed
        ^ salt.rotate_left(17).wrapping_mul(0xA24B_AED4_963E_E407)
        ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (stream as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Xoshiro256PlusPlus::seed_from_u64(z ^ (z >> 31))
}

/// The built-in token estimate: a dictionary word of up to eight ASCII letters is one token (true
/// of common English words in every BPE vocabulary in use); any other whitespace-separated word
/// counts one token per four bytes, rounded up.
pub fn estimate_tokens(text: &str) -> u32 {
    if text.is_ascii() {
        return estimate_ascii(text.as_bytes());
    }
    estimate_words(text)
}

/// The estimate word by word, for any text.
fn estimate_words(text: &str) -> u32 {
    text.split_whitespace().map(|word| word_tokens(word.len(), word.bytes().all(|b| b.is_ascii_alphabetic()))).sum()
}

/// The estimate of one word of `len` bytes, `letters` when they are all ASCII letters.
fn word_tokens(len: usize, letters: bool) -> u32 {
    if len <= 8 && letters { 1 } else { len.div_ceil(4) as u32 }
}

/// `estimate_tokens` of ASCII text, a byte at a time: every prompt is counted as it is built,
/// and splitting on Unicode whitespace cost more than building it. The whitespace is what
/// `char::is_whitespace` takes among ASCII bytes: tab, line feed, vertical tab, form feed,
/// carriage return and space.
fn estimate_ascii(bytes: &[u8]) -> u32 {
    let (mut tokens, mut len, mut letters) = (0u32, 0usize, true);
    let mut end_word = |len: usize, letters: bool| {
        if len > 0 {
            tokens += word_tokens(len, letters);
        }
    };
    for &b in bytes {
        if matches!(b, b'\t'..=b'\r' | b' ') {
            end_word(len, letters);
            (len, letters) = (0, true);
        } else {
            len += 1;
            letters &= b.is_ascii_alphabetic();
        }
    }
    end_word(len, letters);
    tokens
}

/// Append `words` filler words (each preceded by a space), block-balanced and seeded by `rng`.
pub fn push_filler(out: &mut String, words: usize, rng: &mut Xoshiro256PlusPlus) {
    let mut block: Vec<&str> = WORDS.to_vec();
    let mut left = words;
    while left > 0 {
        block.shuffle(rng);
        for word in block.iter().take(left) {
            out.push(' ');
            out.push_str(word);
        }
        left = left.saturating_sub(block.len());
    }
}

/// Whether `word` is one of the filler words synthetic prompts are made of.
pub fn is_filler_word(word: &str) -> bool {
    WORDS.contains(&word)
}

pub fn filler_words() -> &'static [&'static str] {
    WORDS
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

/// A duration for people: `"1ms"`, `"24h"`, `"30days"`.
pub fn fmt_duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A number as a person would write it: `4`, `0.5`, `1e300`, `1e-300` (never 301 digits, never a
/// saturated integer).
pub fn fmt_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        // Display gives the shortest form that reads back to the same value (`0.1`, `4`).
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    #[test]
    fn estimate_counts_dictionary_words_as_one_token() {
        assert_eq!(estimate_tokens("the river system"), 3);
        assert_eq!(estimate_tokens("ANVIL_REQ_1717_00000"), 5);
        assert_eq!(estimate_tokens("sentence."), 3);
        assert_eq!(estimate_tokens("  \n "), 0);
        for w in WORDS {
            assert_eq!(estimate_tokens(w), 1, "{w}");
        }
    }

    /// The byte-wise count is the word-wise one on any ASCII text, control bytes included.
    #[test]
    fn the_ascii_count_is_the_unicode_count() {
        use proptest::prelude::*;
        let word_wise = estimate_words;
        proptest!(ProptestConfig::with_cases(2_000), |(text in "[ -~\t\n\x0b\x0c\r\x00-\x1f]{0,80}")| {
            prop_assert_eq!(estimate_ascii(text.as_bytes()), word_wise(&text));
            prop_assert_eq!(estimate_tokens(&text), word_wise(&text));
        });
        assert_eq!(estimate_tokens("caf\u{e9} au\u{a0}lait"), word_wise("caf\u{e9} au\u{a0}lait"));
    }

    #[test]
    fn filler_is_block_balanced_and_seeded() {
        let mut a = String::new();
        push_filler(&mut a, WORDS.len() * 3, &mut rng(1, 0, 0, Stream::Text));
        let words: Vec<&str> = a.split_whitespace().collect();
        assert_eq!(words.len(), WORDS.len() * 3);
        for block in words.chunks(WORDS.len()) {
            let mut sorted = block.to_vec();
            sorted.sort_unstable();
            let mut all = WORDS.to_vec();
            all.sort_unstable();
            assert_eq!(sorted, all, "each block holds every word once");
        }
        let mut b = String::new();
        push_filler(&mut b, WORDS.len() * 3, &mut rng(1, 0, 0, Stream::Text));
        assert_eq!(a, b);
        let mut c = String::new();
        push_filler(&mut c, WORDS.len() * 3, &mut rng(1, 0, 1, Stream::Text));
        assert_ne!(a, c);
    }

    #[test]
    fn salts_and_streams_are_independent() {
        let draw = |salt, stream| rng(5, salt, 3, stream).random::<u64>();
        assert_ne!(draw(0, Stream::Text), draw(1, Stream::Text));
        assert_ne!(draw(0, Stream::Text), draw(0, Stream::Context));
        assert_eq!(draw(9, Stream::Dataset), draw(9, Stream::Dataset));
    }
}
