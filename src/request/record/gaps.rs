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
    /// Count one gap of `us` microseconds (the one-by-one reference `add_all_us` is tested
    /// against).
    #[cfg(test)]
    pub fn add_us(&mut self, us: u64) {
        self.add_quantized(quantize_us(us), 1);
    }

    /// Count every gap in `pending` (µs, any order), and leave it empty: a stream's gaps are
    /// gathered a few dozen at a time and merged here at once, so that counting a gap is a push
    /// instead of a search and a shift of the sorted list.
    pub fn add_all_us(&mut self, pending: &mut Vec<u32>) {
        if pending.is_empty() {
            return;
        }
        for v in pending.iter_mut() {
            // Quantized values never exceed `MAX_GAP_US`, which fits in 32 bits.
            *v = u32::try_from(quantize_us(u64::from(*v))).unwrap_or(u32::MAX);
        }
        pending.sort_unstable();
        let mut merged = Vec::with_capacity(self.0.len() + pending.len());
        let mut old = self.0.iter().copied().peekable();
        for run in pending.chunk_by(|a, b| a == b) {
            let (value, count) = (u64::from(run[0]), u32::try_from(run.len()).unwrap_or(u32::MAX));
            while let Some(entry) = old.next_if(|&(v, _)| v < value) {
                merged.push(entry);
            }
            match old.next_if(|&(v, _)| v == value) {
                Some((v, c)) => merged.push((v, c.saturating_add(count))),
                None => merged.push((value, count)),
            }
        }
        merged.extend(old);
        self.0 = merged;
        pending.clear();
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
    fn merging_a_batch_equals_adding_one_by_one() {
        let (mut plain, mut batched, mut pending) = (GapSketch::default(), GapSketch::default(), Vec::new());
        let gaps = (0..5000u64).map(|i| (i * 7919) % 40_000 / (1 + i % 5)).chain([3, 3, 3, 0, 0, 3_999_999_999]);
        for (i, us) in gaps.enumerate() {
            plain.add_us(us);
            pending.push(u32::try_from(us).unwrap());
            if i % 97 == 0 {
                batched.add_all_us(&mut pending);
                assert!(pending.is_empty());
            }
        }
        batched.add_all_us(&mut pending);
        assert_eq!(plain, batched);
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
