//! The level's per-gap distributions: `itl_chunk` (every gap between output chunks of the
//! eligible requests) and `itl_token` (every such gap divided by the tokens its chunk
//! delivered). Read from the records' gap sketches once the level's final rules are known (so
//! cool-down and every other exclusion apply exactly), in one pass over the records file that
//! reads only each request's eligibility facts and sketches (`GapLine`), into two HDR histograms: memory is two fixed-size histograms however long the run.
//!
//! Percentiles are nearest-rank over the histogram's buckets, each bucket standing for its
//! middle value (within 0.4 % of every gap in it); mean and standard deviation are over the same
//! bucket values. The live run, `summarize` and `merge` all come through here.

use std::path::Path;

use hdrhistogram::Histogram;

use super::stats::{PERCENTILES, Summary};
use super::summary::{LevelSummary, Metric};
use serde::Deserialize;

use crate::record::gaps::{GapSketch, gap_histogram};
use crate::record::timing::ExclusionFacts;

/// The two gap histograms of a level, in µs.
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
    pub fn add(&mut self, r: &GapLine) {
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

/// What the gap distributions read of a request record (`RequestTiming`'s fields of the same
/// names): its eligibility facts and its gaps. The rest of each line is skipped, not built.
#[derive(Debug, Deserialize)]
pub struct GapLine {
    request_index: u64,
    start_offset_ms: f64,
    request_canary: Option<Passed>,
    controlled_output: Option<Matched>,
    #[serde(default)]
    streamed_tokens: Option<u64>,
    #[serde(default)]
    tokens_per_chunk: Option<f64>,
    #[serde(default)]
    chunk_gaps_us: Option<GapSketch>,
    #[serde(default)]
    token_gaps_us: Option<GapSketch>,
}

#[derive(Debug, Deserialize)]
struct Passed {
    passed: bool,
}

#[derive(Debug, Deserialize)]
struct Matched {
    exact: bool,
    truncated: bool,
}

impl GapLine {
    /// What the exclusion rules read (as `RequestTiming::facts`).
    fn facts(&self) -> ExclusionFacts {
        ExclusionFacts {
            index: self.request_index,
            start_offset_ms: self.start_offset_ms,
            canary_failed: self.request_canary.as_ref().is_some_and(|c| !c.passed),
            controlled_miss: self.controlled_output.as_ref().is_some_and(|o| !o.exact || o.truncated),
        }
    }
}

/// Fill `itl_chunk` and `itl_token` from the level's records in `records`.
pub fn add_gap_distributions(summary: &mut LevelSummary, records: &Path) -> Result<(), String> {
    let mut h = GapHistograms::default();
    let lines = crate::record::file::read_requests_as::<GapLine>(records, &summary.level_id)
        .map_err(|e| format!("{}: {e}", records.display()))?;
    for line in lines {
        let line = line?;
        if summary.rules.exclusion(line.facts()).is_none() {
            h.add(&line);
        }
    }
    summary.distributions.set(Metric::ItlChunk, of_histogram(&h.chunk));
    summary.distributions.set(Metric::ItlToken, of_histogram(&h.token));
    Ok(())
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
        let rank = (u64::from(p) * n).div_ceil(100).max(1);
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
    use crate::record::file::RecordLine;
    use crate::record::gaps::quantize_us;
    use crate::record::timing::{Exclusions, RequestTiming};

    /// The committed closed-loop records with gap sketches added (per-chunk counts on some
    /// requests, a mean on the others), and some requests' canaries failed.
    fn records_with_gaps(dir: &Path) -> (std::path::PathBuf, String) {
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/summarize/closed.records.ndjson");
        let mut out = String::new();
        let mut level = String::new();
        for (i, line) in std::fs::read_to_string(fixture).unwrap().lines().enumerate() {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["type"] != "request" {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            {
                level = v["level"].as_str().unwrap().to_owned();
                let us = 1000 + 37 * i as u64;
                v["chunk_gaps_us"] = serde_json::json!([[quantize_us(us), 3], [quantize_us(us * 3), 1]]);
                if i % 2 == 0 {
                    v["streamed_tokens"] = serde_json::json!(9);
                    v["token_gaps_us"] = serde_json::json!([[quantize_us(us / 2), 4]]);
                } else {
                    v["tokens_per_chunk"] = serde_json::json!(1.5);
                }
                if i % 7 == 0 {
                    v["request_canary"]["passed"] = serde_json::json!(false);
                }
            }
            // Written as the tool writes them, `type` and `level` first (every third line
            // otherwise, for the reader's other path).
            let map = v.as_object_mut().unwrap();
            map.remove("type");
            map.remove("level");
            let rest = serde_json::to_string(&v).unwrap();
            if i % 3 == 0 {
                out.push_str(&format!("{{\"level\":{level:?},\"type\":\"request\",{}", &rest[1..]));
            } else {
                out.push_str(&format!("{{\"type\":\"request\",\"level\":{level:?},{}", &rest[1..]));
            }
            out.push('\n');
        }
        let path = dir.join("gaps.records.ndjson");
        std::fs::write(&path, out).unwrap();
        (path, level)
    }

    /// The light read of each request line gives the histograms the whole records give.
    #[test]
    fn reading_only_the_gap_fields_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (path, level) = records_with_gaps(dir.path());
        let rules = Exclusions { warmup_below_index: Some(3), cooldown_from_index: Some(40), ..Exclusions::default() };
        let (mut light, mut whole, mut kept) = (GapHistograms::default(), GapHistograms::default(), 0);
        for line in crate::record::file::read_requests_as::<GapLine>(&path, &level).unwrap() {
            let line = line.unwrap();
            if rules.exclusion(line.facts()).is_none() {
                light.add(&line);
            }
        }
        for line in crate::record::file::read_level(&path, &level, &["request"]).unwrap() {
            let RecordLine::Request { mut record, level: of } = line.unwrap() else { continue };
            if of != level {
                continue;
            }
            rules.apply(&mut record);
            if record.performance_eligible {
                kept += 1;
                whole.add(&serde_json::from_value(serde_json::to_value(&*record as &RequestTiming).unwrap()).unwrap());
            }
        }
        assert!(kept > 10 && !whole.chunk.is_empty() && !whole.token.is_empty(), "{kept}");
        assert_eq!((light.chunk.len(), light.token.len()), (whole.chunk.len(), whole.token.len()));
        assert!(light.chunk == whole.chunk && light.token == whole.token);
    }

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
