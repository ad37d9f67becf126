//! The chunk clock of one response: the gap between consecutive output chunks (reasoning or
//! content deltas), the longest of them, and — when the engine puts a cumulative
//! `usage.completion_tokens` on every chunk (vLLM's `continuous_usage_stats`) — the tokens each
//! chunk delivered. Gaps go straight into sparse sketches (see `record::gaps`): no per-chunk
//! list is kept, so a long response costs a few dozen sketch entries, not one per token.
//!
//! Events decoded from the same read share its instant, so a chunk that arrived in the same
//! read as the one before it has a gap of zero: that is what the client observed.

use std::time::Duration;

use crate::request::record::gaps::{ChunkFacts, GapSketch, PerChunkCounts};

#[derive(Debug, Default)]
pub struct ChunkClock {
    last_at: Option<Duration>,
    max_gap: Option<Duration>,
    chunk_gaps: GapSketch,
    token_gaps: GapSketch,
    /// The cumulative completion count on the previous output chunk.
    cumulative: u64,
    first_chunk_tokens: Option<u32>,
    /// Every output chunk so far carried a cumulative count.
    counted: bool,
    chunks: u64,
    /// Gaps (µs) not yet merged into the sketches (see `GapSketch::add_all_us`).
    chunk_pending: Vec<u32>,
    token_pending: Vec<u32>,
}

/// Gaps gathered before they are merged into a sketch: 256 bytes per stream, a few merges per
/// response.
const PENDING_GAPS: usize = 64;

impl ChunkClock {
    /// One output chunk arrived at `at`; `cumulative` is the `usage.completion_tokens` it
    /// carried, if any.
    pub fn chunk(&mut self, at: Duration, cumulative: Option<u64>) {
        self.chunks += 1;
        if self.chunks == 1 {
            self.counted = cumulative.is_some();
        } else if cumulative.is_none() {
            self.counted = false;
        }
        let delivered = cumulative.map(|c| c.saturating_sub(self.cumulative));
        if let Some(c) = cumulative {
            self.cumulative = self.cumulative.max(c);
        }
        if self.chunks == 1 {
            self.first_chunk_tokens = delivered.map(|d| u32::try_from(d).unwrap_or(u32::MAX));
        }
        if let Some(last) = self.last_at {
            let gap = at.saturating_sub(last);
            self.max_gap = Some(self.max_gap.map_or(gap, |m| m.max(gap)));
            // Gaps beyond an hour are clamped to it by the sketch; 32 bits hold more than that.
            let us = u32::try_from(gap.as_micros()).unwrap_or(u32::MAX);
            push_gap(&mut self.chunk_gaps, &mut self.chunk_pending, us);
            // A chunk that delivered no new token (text held back by detokenization) has no
            // per-token gap.
            if let Some(k) = delivered.filter(|&k| k > 0 && self.counted) {
                push_gap(&mut self.token_gaps, &mut self.token_pending, (f64::from(us) / k as f64).round() as u32);
            }
        }
        self.last_at = Some(at);
    }

    /// What the stream showed, once it ended.
    pub fn facts(mut self) -> ChunkFacts {
        self.chunk_gaps.add_all_us(&mut self.chunk_pending);
        self.token_gaps.add_all_us(&mut self.token_pending);
        let per_chunk = (self.counted && self.chunks > 0).then(|| PerChunkCounts {
            first_chunk_tokens: self.first_chunk_tokens.unwrap_or(0),
            streamed_tokens: self.cumulative,
            token_gaps: self.token_gaps,
        });
        ChunkFacts { max_stall: self.max_gap, chunk_gaps: self.chunk_gaps, per_chunk }
    }
}

fn push_gap(sketch: &mut GapSketch, pending: &mut Vec<u32>, us: u32) {
    if pending.len() == PENDING_GAPS {
        sketch.add_all_us(pending);
    }
    pending.push(us);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn gaps_stall_and_per_chunk_counts() {
        let mut c = ChunkClock::default();
        for (t, cum) in [(10, 3), (40, 6), (50, 7), (130, 9)] {
            c.chunk(MS * t, Some(cum));
        }
        let f = c.facts();
        assert_eq!(f.max_stall, Some(MS * 80));
        assert_eq!(f.chunk_gaps.gaps(), 3);
        let p = f.per_chunk.unwrap();
        assert_eq!((p.first_chunk_tokens, p.streamed_tokens), (3, 9));
        // 30/3, 10/1, 80/2 ms.
        let values: Vec<u64> = p.token_gaps.0.iter().map(|&(v, _)| v).collect();
        assert_eq!(values.len(), 2, "{values:?}");
        assert!((values[0] as f64 - 10_000.0).abs() < 40.0 && (values[1] as f64 - 40_000.0).abs() < 160.0);
        assert_eq!(p.token_gaps.0[0].1, 2);
    }

    #[test]
    fn one_chunk_without_a_count_loses_the_per_chunk_counts() {
        let mut c = ChunkClock::default();
        c.chunk(MS, Some(1));
        c.chunk(MS * 2, None);
        c.chunk(MS * 3, Some(3));
        let f = c.facts();
        assert!(f.per_chunk.is_none());
        assert_eq!(f.chunk_gaps.gaps(), 2);
        let single = {
            let mut c = ChunkClock::default();
            c.chunk(MS, None);
            c.facts()
        };
        assert_eq!((single.max_stall, single.chunk_gaps.gaps()), (None, 0));
    }
}
