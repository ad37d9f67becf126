//! The aggregator: one task that receives every outcome through a bounded channel and owns all
//! samples. Live views (the progress line) come from HDR histograms; the artifact's summaries are
//! computed at the end from the exact per-request values (`metrics`). "All done" is the channel
//! closing when the last worker drops its sender.

pub mod metrics;
pub mod stats;
pub mod timing;

use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use crate::report::Progress;
use crate::worker::{Completed, Dropped, Failed, Outcome};

/// Everything one load level produced.
#[derive(Debug, Default)]
pub struct Collected {
    pub completed: Vec<Completed>,
    pub failed: Vec<Failed>,
    pub dropped: Vec<Dropped>,
    pub live: LiveStats,
}

/// Running counters and HDR histograms (microseconds) for the live view.
#[derive(Debug)]
pub struct LiveStats {
    pub completed: u64,
    pub failed: u64,
    pub dropped: u64,
    pub output_tokens: u64,
    pub ttft_us: Histogram<u64>,
    pub tpot_us: Histogram<u64>,
    pub e2e_us: Histogram<u64>,
    /// Open loop: how late each request started against its schedule.
    pub schedule_lag_us: Histogram<u64>,
}

impl Default for LiveStats {
    fn default() -> Self {
        // One hour in µs at three significant digits: a few tens of KiB per histogram.
        let h = || Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid");
        LiveStats {
            completed: 0,
            failed: 0,
            dropped: 0,
            output_tokens: 0,
            ttft_us: h(),
            tpot_us: h(),
            e2e_us: h(),
            schedule_lag_us: h(),
        }
    }
}

impl LiveStats {
    fn record(&mut self, outcome: &Outcome) {
        let us = |d: Duration| d.as_micros().min(u128::from(u64::MAX)) as u64;
        let lag = match outcome {
            Outcome::Completed(c) => c.intended_offset.map(|i| c.start_offset.saturating_sub(i)),
            Outcome::Failed(f) => f.intended_offset.map(|i| f.start_offset.saturating_sub(i)),
            Outcome::Dropped(_) => None,
        };
        if let Some(lag) = lag {
            self.schedule_lag_us.saturating_record(us(lag));
        }
        match outcome {
            Outcome::Completed(c) => {
                self.completed += 1;
                self.output_tokens += c.output_tokens;
                if let Some(t) = c.first_content {
                    self.ttft_us.saturating_record(us(t));
                }
                self.e2e_us.saturating_record(us(c.end));
                if c.output_tokens > 1 {
                    let tpot = c.end.saturating_sub(c.first_output) / (c.output_tokens - 1) as u32;
                    self.tpot_us.saturating_record(us(tpot));
                }
            }
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Dropped(_) => self.dropped += 1,
        }
    }

    /// A quantile of TTFT from the live histogram (approximate, for display only).
    pub fn ttft_quantile(&self, q: f64) -> Option<Duration> {
        (!self.ttft_us.is_empty()).then(|| Duration::from_micros(self.ttft_us.value_at_quantile(q)))
    }
}

/// Receive outcomes until every sender is gone.
pub async fn collect(mut rx: mpsc::Receiver<Outcome>, progress: &Progress) -> Collected {
    let mut out = Collected::default();
    while let Some(outcome) = rx.recv().await {
        out.live.record(&outcome);
        match outcome {
            Outcome::Completed(c) => out.completed.push(c),
            Outcome::Failed(f) => out.failed.push(f),
            Outcome::Dropped(d) => out.dropped.push(d),
        }
        progress.update(&out.live);
    }
    out
}
