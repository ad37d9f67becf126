//! Prompt blocks: deterministic text for an id at a position (a trace's hash id, a shared system
//! prompt), so that two requests naming the same block carry exactly the same text and a prefix
//! cache can find it.
//!
//! Block text is *length-stratified*: the filler words are grouped by byte length, and word `j`
//! of the prompt's block region is taken from the group furthest behind its share of the list
//! (a low-discrepancy sequence of period `filler_words().len()`). Block `k` of a prompt continues
//! that sequence where block `k − 1` ended, and holds `round((k+1)·w) − round(k·w)` words for `w`
//! words per block, so any run of blocks from the start holds each group within one word of its
//! share and counts, on any tokenizer that charges by length, at the calibrated average rate to
//! within a token or two: a block boundary lands where the trace says it is, and requests sharing
//! k blocks share k·block_size tokens. Which words of a group appear, in which order, is drawn
//! from the block's id, so different ids give different text at once.

use std::sync::OnceLock;

use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;

use crate::text::{self, Stream};

/// The filler list grouped by byte length, and the stratified sequence of groups over one period
/// (the list's length: after it every group has been taken exactly its size).
struct Strata {
    groups: Vec<Vec<&'static str>>,
    sequence: Vec<usize>,
}

fn strata() -> &'static Strata {
    static STRATA: OnceLock<Strata> = OnceLock::new();
    STRATA.get_or_init(|| {
        let words = text::filler_words();
        let mut lengths: Vec<usize> = words.iter().map(|w| w.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        let groups: Vec<Vec<&'static str>> =
            lengths.iter().map(|&n| words.iter().copied().filter(|w| w.len() == n).collect()).collect();
        let shares: Vec<f64> = groups.iter().map(|g| g.len() as f64 / words.len() as f64).collect();
        let mut taken = vec![0usize; groups.len()];
        let sequence = (0..words.len())
            .map(|j| {
                // The group furthest behind its share; ties to the first.
                let mut best = 0;
                let mut best_deficit = f64::MIN;
                for (g, share) in shares.iter().enumerate() {
                    let deficit = share * (j + 1) as f64 - taken[g] as f64;
                    if deficit > best_deficit + 1e-12 {
                        best = g;
                        best_deficit = deficit;
                    }
                }
                taken[best] += 1;
                best
            })
            .collect();
        Strata { groups, sequence }
    })
}

/// The random stream of block `id` of `size` tokens in a run salted with `salt`.
pub fn block_rng(seed: u64, salt: u64, id: u64, size: u32) -> Xoshiro256PlusPlus {
    text::rng(seed ^ u64::from(size).rotate_left(40), salt, id, Stream::Block)
}

/// Where block `position` starts in the stratified sequence and how many words a whole one has,
/// for blocks of `size` tokens at `per_word` tokens a word.
pub fn block_span(position: usize, size: u32, per_word: f64) -> (usize, usize) {
    let ideal = f64::from(size) / per_word.max(1e-3);
    let at = |k: usize| (k as f64 * ideal).round() as usize;
    (at(position), at(position + 1) - at(position))
}

/// Append `words` words of the block starting at `phase` (each preceded by a space); `rng` is
/// the block's own stream (`block_rng`), so a shorter call gives a prefix of a longer one. Each
/// group is walked in an order of the block's own: a random start and a random stride coprime
/// with the group's size (a permutation, drawn without shuffling or allocating).
pub fn push_block(out: &mut String, phase: usize, words: usize, rng: &mut Xoshiro256PlusPlus) {
    let s = strata();
    let walks: Vec<(usize, usize)> = s
        .groups
        .iter()
        .map(|g| {
            let n = g.len();
            let strides: Vec<usize> = (1..n.max(2)).filter(|k| gcd(*k, n) == 1).collect();
            (rng.random_range(0..n), strides.get(rng.random_range(0..strides.len().max(1))).copied().unwrap_or(1))
        })
        .collect();
    let mut used = vec![0usize; s.groups.len()];
    let period = s.sequence.len();
    for j in phase..phase + words {
        let g = s.sequence[j % period];
        let (start, stride) = walks[g];
        let group = &s.groups[g];
        out.push(' ');
        out.push_str(group[(start + used[g] * stride) % group.len()]);
        used[g] += 1;
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_sim::count_text_tokens;

    #[test]
    fn blocks_are_pure_functions_of_their_id() {
        let block = |id| {
            let mut rng = block_rng(1, 2, id, 512);
            let mut s = String::new();
            push_block(&mut s, 0, 400, &mut rng);
            s
        };
        assert_eq!(block(7), block(7));
        assert_ne!(block(7), block(8));
        let (a, b) = (block(7), block(8));
        let common = a.split(' ').zip(b.split(' ')).skip(1).take_while(|(x, y)| x == y).count();
        assert!(common < 3, "different ids diverge at once ({common} common words)");
    }

    #[test]
    fn any_run_of_blocks_counts_at_the_average_rate() {
        // The simulator charges by byte length; its rate over the whole list is the average.
        let words = text::filler_words();
        let list: String = words.iter().map(|w| format!(" {w}")).collect();
        let rate = f64::from(count_text_tokens(&list)) / words.len() as f64;
        for size in [16, 64, 512] {
            let mut prompt = String::new();
            let mut planned = 0usize;
            for position in 0..40 {
                let (phase, n) = block_span(position, size, rate);
                push_block(&mut prompt, phase, n, &mut block_rng(3, 0, 1000 + position as u64, size));
                planned += n;
                let off = f64::from(count_text_tokens(&prompt)) - f64::from(size) * (position + 1) as f64;
                assert!(off.abs() <= 1.5, "size {size}: after {} blocks off by {off}", position + 1);
            }
            assert_eq!(prompt.split_whitespace().count(), planned);
        }
    }

    #[test]
    fn a_shorter_block_is_a_prefix_of_the_whole() {
        let make = |n| {
            let mut s = String::new();
            push_block(&mut s, 37, n, &mut block_rng(1, 1, 9, 512));
            s
        };
        assert!(make(400).starts_with(&make(123)));
    }
}
