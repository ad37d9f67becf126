//! The level's per-gap distributions: `itl_chunk` (every gap between output chunks of the
//! eligible requests) and `itl_token` (every such gap divided by the tokens its chunk
//! delivered). Read from the records' gap sketches once the level's final rules are known (so
//! cool-down and every other exclusion apply exactly), in one pass over the records file, into
//! two HDR histograms: memory is two fixed-size histograms however long the run. A live level
//! feeds the same histograms as its requests end, under the rules it started with, and reads
//! the records back only when the end of the level changed those rules.
//!
//! Percentiles are nearest-rank over the histogram's buckets, each bucket standing for its
//! middle value (within 0.4 % of every gap in it); mean and standard deviation are over the same
//! bucket values. Every level's end comes through here (`finish_level`).

use hdrhistogram::Histogram;

use super::stats::{PERCENTILES, Summary};
use crate::contract::nearest_rank_position;
use crate::request::record::RequestTiming;
use crate::request::record::gaps::gap_histogram;

/// The two gap histograms of a level, in µs.
#[derive(Debug)]
pub struct GapHistograms {
    pub chunk: Histogram<u64>,
    pub token: Histogram<u64>,
}

impl Default for GapHistograms {
    fn default() -> Self {
        GapHistograms { chunk: gap_histogram(), token: gap_histogram() }
    }
}

impl GapHistograms {
    /// Add one eligible request's gaps. Without per-chunk counts, each gap is divided by the
    /// request's mean tokens per chunk.
    pub fn add(&mut self, r: &RequestTiming) {
        let Some(chunk) = &r.chunk_gaps_us else { return };
        chunk.record_into(&mut self.chunk);
        match (&r.token_gaps_us, r.streamed_tokens) {
            (Some(token), _) => token.record_into(&mut self.token),
            // Per-chunk counts, but no chunk delivered a new token after the first.
            (None, Some(_)) => {}
            (None, None) => {
                if let Some(k) = r.tokens_per_chunk {
                    chunk.scaled(k).record_into(&mut self.token);
                }
            }
        }
    }
}

/// A distribution summary of a histogram of µs values, in ms (see the module doc).
pub fn of_histogram(h: &Histogram<u64>) -> Option<Summary> {
    let n = h.len();
    if n == 0 {
        return None;
    }
    let buckets: Vec<(f64, u64)> = h
        .iter_recorded()
        .map(|v| (h.median_equivalent(v.value_iterated_to()) as f64 / 1000.0, v.count_at_value()))
        .collect();
    let mean = buckets.iter().map(|&(v, c)| v * c as f64).sum::<f64>() / n as f64;
    let stddev = if n > 1 {
        (buckets.iter().map(|&(v, c)| (v - mean).powi(2) * c as f64).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let half = if n > 1 { 1.96 * stddev / (n as f64).sqrt() } else { 0.0 };
    let at_rank = |p: u32| {
        let rank = nearest_rank_position(p, n);
        let mut seen = 0;
        for &(v, c) in &buckets {
            seen += c;
            if seen >= rank {
                return v;
            }
        }
        buckets[buckets.len() - 1].0
    };
    Some(Summary {
        samples: usize::try_from(n).unwrap_or(usize::MAX),
        mean,
        stddev,
        mean_ci95_low: mean - half,
        mean_ci95_high: mean + half,
        min: buckets[0].0,
        max: buckets[buckets.len() - 1].0,
        percentiles: PERCENTILES.map(at_rank),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::record::gaps::quantize_us;

    #[test]
    fn nearest_rank_over_buckets() {
        let mut h = gap_histogram();
        for us in 1..=100u64 {
            h.record(quantize_us(us * 1000)).unwrap();
        }
        h.record(0).unwrap();
        let s = of_histogram(&h).unwrap();
        assert_eq!(s.samples, 101);
        assert_eq!(s.min, 0.0);
        // Rank ⌈0.5·101⌉ = 51: the 50th of 1..=100 ms after the zero gap.
        assert!((s.percentiles[1] - 50.0).abs() < 0.2, "{s:?}");
        assert!((s.max - 100.0).abs() < 0.4 && (s.mean - 5050.0 / 101.0).abs() < 0.2);
        assert!(of_histogram(&gap_histogram()).is_none());
    }
}
