//! Per-request gap sketches: the gaps between one response's output chunks, kept as a sparse
//! histogram so the level's inter-chunk and per-token latency percentiles can be recomputed
//! from the records file alone, without a per-gap list that would grow with every token.
//!
//! Each gap (µs) is quantized to the middle of its bucket in an HDR histogram of
//! `SIGNIFICANT_DIGITS` significant digits (bucket width at most 1/128 of the value, so a
//! reported value is within 0.4 % of every gap it stands for). A sketch is the sorted list of
//! `[value_us, count]` pairs: a response whose gaps cluster (as decode steps do) needs a few
//! dozen pairs however long it is. Recording the quantized values into the level's HDR
//! histogram (same configuration) lands every gap in the bucket its raw value would have.

use std::sync::LazyLock;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Precision of the gap histograms, per request and per level.
pub const SIGNIFICANT_DIGITS: u8 = 2;
/// Largest gap recorded (one hour in µs); longer gaps are clamped to it.
pub const MAX_GAP_US: u64 = 3_600_000_000;

/// The histogram configuration every gap value is quantized by.
pub fn gap_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_GAP_US, SIGNIFICANT_DIGITS).expect("static histogram bounds are valid")
}

/// One empty histogram, only for its bucket arithmetic (never recorded into).
static SHAPE: LazyLock<Histogram<u64>> = LazyLock::new(gap_histogram);

/// Below this many µs every bucket is one µs wide (2 significant digits give 256 unit buckets):
/// a value there is its own quantization, without the histogram's arithmetic.
const UNIT_BUCKETS_BELOW: u64 = 256;

/// A gap in µs, quantized to the middle of its histogram bucket.
pub fn quantize_us(us: u64) -> u64 {
    if us < UNIT_BUCKETS_BELOW {
        return us;
    }
    SHAPE.median_equivalent(us.min(MAX_GAP_US))
}

/// A sparse histogram of quantized gaps: `[value_us, count]`, ascending by value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GapSketch(pub Vec<(u64, u32)>);

impl GapSketch {
    /// Count one gap of `us` microseconds.
    pub fn add_us(&mut self, us: u64) {
        self.add_quantized(quantize_us(us), 1);
    }

    /// `add_us` for a stream of gaps, where `hint` (0 at first, then left to this method)
    /// remembers the entry the last gap went to: gaps cluster, so most land in the same bucket
    /// as the one before and skip the search.
    pub fn add_us_hinted(&mut self, us: u64, hint: &mut usize) {
        let value = quantize_us(us);
        if let Some(entry) = self.0.get_mut(*hint).filter(|(v, _)| *v == value) {
            entry.1 = entry.1.saturating_add(1);
            return;
        }
        *hint = match self.0.binary_search_by_key(&value, |&(v, _)| v) {
            Ok(i) => {
                self.0[i].1 = self.0[i].1.saturating_add(1);
                i
            }
            Err(i) => {
                self.0.insert(i, (value, 1));
                i
            }
        };
    }

    fn add_quantized(&mut self, value: u64, count: u32) {
        match self.0.binary_search_by_key(&value, |&(v, _)| v) {
            Ok(i) => self.0[i].1 = self.0[i].1.saturating_add(count),
            Err(i) => self.0.insert(i, (value, count)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Gaps counted.
    pub fn gaps(&self) -> u64 {
        self.0.iter().map(|&(_, c)| u64::from(c)).sum()
    }

    /// Every gap divided by `tokens` (the mean tokens per chunk when the engine does not
    /// report per-chunk counts), quantized again.
    pub fn scaled(&self, tokens: f64) -> GapSketch {
        let mut out = GapSketch::default();
        if tokens > 0.0 {
            for &(v, c) in &self.0 {
                out.add_quantized(quantize_us((v as f64 / tokens).round() as u64), c);
            }
        }
        out
    }

    /// Add every gap of the sketch to a level histogram.
    pub fn record_into(&self, h: &mut Histogram<u64>) {
        for &(v, c) in &self.0 {
            h.saturating_record_n(v, u64::from(c));
        }
    }
}

/// What one response's chunk stream showed, beyond its counts: handed from the worker to the
/// record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkFacts {
    /// The longest gap between two output chunks.
    pub max_stall: Option<std::time::Duration>,
    /// Gaps between consecutive output chunks (reasoning or content).
    pub chunk_gaps: GapSketch,
    /// Per-chunk token counts (cumulative `usage.completion_tokens` on every output chunk):
    /// the tokens of the first output chunk, the tokens streamed, and each gap divided by the
    /// tokens its chunk delivered.
    pub per_chunk: Option<PerChunkCounts>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerChunkCounts {
    pub first_chunk_tokens: u32,
    /// The cumulative count on the last output chunk.
    pub streamed_tokens: u64,
    pub token_gaps: GapSketch,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_is_within_half_a_percent_and_idempotent() {
        for us in [1, 7, 99, 1_000, 12_345, 987_654, 3_000_000_000] {
            let q = quantize_us(us);
            assert!((q as f64 - us as f64).abs() <= us as f64 * 0.004 + 1.0, "{us} -> {q}");
            assert_eq!(quantize_us(q), q);
        }
        assert_eq!(quantize_us(0), 0);
    }

    #[test]
    fn the_unit_bucket_shortcut_is_the_histograms_own_quantization() {
        for us in 1..UNIT_BUCKETS_BELOW + 64 {
            assert_eq!(quantize_us(us), SHAPE.median_equivalent(us), "{us}");
        }
    }

    #[test]
    fn a_hinted_sketch_equals_a_plain_one() {
        let (mut plain, mut hinted, mut hint) = (GapSketch::default(), GapSketch::default(), 0);
        for us in (0..5000u64).map(|i| (i * 7919) % 40_000 / (1 + i % 5)).chain([3, 3, 3, 0, 0, 9_999_999_999]) {
            plain.add_us(us);
            hinted.add_us_hinted(us, &mut hint);
        }
        assert_eq!(plain, hinted);
    }

    #[test]
    fn a_sketch_merges_equal_buckets_and_stays_sorted() {
        let mut s = GapSketch::default();
        for us in [20_000, 10_000, 20_010, 40_000, 10_001] {
            s.add_us(us);
        }
        assert_eq!(s.gaps(), 5);
        assert_eq!(s.0.len(), 3, "{s:?}");
        assert!(s.0.windows(2).all(|w| w[0].0 < w[1].0));
        let halves = s.scaled(2.0);
        assert_eq!(halves.gaps(), 5);
        assert!((halves.0[0].0 as f64 - 5_000.0).abs() < 30.0);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.starts_with("[["), "{json}");
        assert_eq!(serde_json::from_str::<GapSketch>(&json).unwrap(), s);
    }

    #[test]
    fn recording_quantized_values_lands_in_the_raw_values_buckets() {
        let (mut raw, mut sketched) = (gap_histogram(), gap_histogram());
        let mut s = GapSketch::default();
        for us in (1..2000u64).map(|i| i * 37 % 50_000 + 3) {
            raw.record(us).unwrap();
            s.add_us(us);
        }
        s.record_into(&mut sketched);
        for q in [0.25, 0.5, 0.9, 0.99] {
            assert_eq!(raw.value_at_quantile(q), sketched.value_at_quantile(q));
        }
    }
}
