//! What a selected trace asks of a server: how many rows over how long, the token lengths, how
//! bursty the arrivals are, and how much of the input a prefix cache could reuse according to
//! the hash ids. Printed by `anvil-load validate` and kept in the artifact's `scenario` block.

use std::fmt;

use serde::Serialize;

use super::{TraceRow, reusable_blocks};
use crate::contract::nearest_rank;

/// Nearest-rank quantiles of a token length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    pub mean: f64,
    pub p50: u32,
    pub p90: u32,
    pub p99: u32,
    pub max: u32,
}

impl Quantiles {
    fn of(mut v: Vec<u32>) -> Self {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_unstable();
        Quantiles {
            mean: v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64,
            p50: nearest_rank(&v, 50),
            p90: nearest_rank(&v, 90),
            p99: nearest_rank(&v, 99),
            max: v[v.len() - 1],
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceStats {
    pub rows: u64,
    /// Distinct sessions (0 when the trace has none).
    pub sessions: u64,
    /// From the first to the last replayed row on the trace's clock (gaps capped), seconds.
    pub duration_s: f64,
    /// The same after `time_scale`: how long the replay issues requests, seconds.
    pub replay_duration_s: f64,
    /// Mean arrivals per second of the replay.
    pub rate_rps: f64,
    pub input_tokens: Quantiles,
    pub output_tokens: Quantiles,
    /// Coefficient of variation of the gaps between arrivals (1 for Poisson arrivals, above 1
    /// burstier, 0 for evenly spaced ones).
    pub gap_cv: Option<f64>,
    /// Rows sent at the same instant as the row before (coarse trace clocks).
    pub simultaneous_rows: u64,
    /// Input tokens in hash-id blocks that an earlier row's prompt started with: what a prefix
    /// cache could reuse, by the trace's own account.
    pub reusable_input_tokens: u64,
    /// `reusable_input_tokens / input tokens`.
    pub prefix_reuse_ratio: f64,
}

impl TraceStats {
    pub fn compute(rows: &[TraceRow], block_size: u32, time_scale: f64) -> Self {
        let n = rows.len() as u64;
        let duration_s = rows.last().map_or(0.0, |r| r.offset.as_secs_f64());
        let gaps: Vec<f64> = rows.windows(2).map(|w| (w[1].offset - w[0].offset).as_secs_f64()).collect();
        let gap_cv = (gaps.len() >= 2).then(|| {
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (gaps.len() - 1) as f64;
            if mean > 0.0 { var.sqrt() / mean } else { 0.0 }
        });
        let reusable: u64 = reusable_blocks(rows)
            .iter()
            .zip(rows)
            .map(|(&blocks, row)| (u64::from(blocks) * u64::from(block_size)).min(u64::from(row.input_tokens)))
            .sum();
        let input_total: u64 = rows.iter().map(|r| u64::from(r.input_tokens)).sum();
        let mut sessions: Vec<&str> = rows.iter().filter_map(|r| r.session.as_deref()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let replay_duration_s = duration_s * time_scale;
        TraceStats {
            rows: n,
            sessions: sessions.len() as u64,
            duration_s,
            replay_duration_s,
            rate_rps: if n >= 2 && replay_duration_s > 0.0 { (n - 1) as f64 / replay_duration_s } else { 0.0 },
            input_tokens: Quantiles::of(rows.iter().map(|r| r.input_tokens).collect()),
            output_tokens: Quantiles::of(rows.iter().map(|r| r.output_tokens).collect()),
            gap_cv,
            simultaneous_rows: gaps.iter().filter(|&&g| g == 0.0).count() as u64,
            reusable_input_tokens: reusable,
            prefix_reuse_ratio: if input_total > 0 { reusable as f64 / input_total as f64 } else { 0.0 },
        }
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q =
            |q: &Quantiles| format!("mean {:.0}, p50 {}, p90 {}, p99 {}, max {}", q.mean, q.p50, q.p90, q.p99, q.max);
        writeln!(
            f,
            "  {} rows{} over {:.3} s of trace time, replayed in {:.3} s ({:.3} req/s)",
            self.rows,
            if self.sessions > 0 { format!(" in {} sessions", self.sessions) } else { String::new() },
            self.duration_s,
            self.replay_duration_s,
            self.rate_rps
        )?;
        writeln!(f, "  input tokens: {}", q(&self.input_tokens))?;
        writeln!(f, "  output tokens: {}", q(&self.output_tokens))?;
        let cv = self.gap_cv.map_or_else(|| "n/a".to_string(), |cv| format!("{cv:.2}"));
        writeln!(
            f,
            "  burstiness: gap coefficient of variation {cv} (1 is Poisson, above 1 burstier); {} rows share the previous row's instant",
            self.simultaneous_rows
        )?;
        writeln!(
            f,
            "  prefix reuse implied by the hash ids: {} input tokens ({:.1} %)",
            self.reusable_input_tokens,
            self.prefix_reuse_ratio * 100.0
        )
    }
}
