//! The results side above the records: collect, then finish the level.
//!
//! `collect` is one task that receives every outcome through a bounded channel. It turns each
//! outcome into its record (appended to the records file at once), keeps the compact sample the
//! exact summaries need, and feeds the live HDR histograms behind the progress line and the
//! interval snapshots. "All done" is the channel closing when the last worker drops its sender.
//! `finish_level` then turns a level's samples and records into its typed `LevelSummary` — the
//! only place numbers are computed, whether the level was just run, rebuilt from its records
//! file or merged from a sharded run's; the renderers (`artifact`, `console`) read its fields.

pub mod agent_sessions;
mod collected;
pub mod conversations;
pub mod drift;
mod finish;
pub mod gaps;
mod in_flight;
pub mod load;
pub mod media;
pub mod models;
mod output_warnings;
pub mod replicas;
pub mod sample;
pub mod slo;
pub mod snapshots;
pub mod stats;
pub mod steady;
pub mod structured;
mod summarise;
pub mod summary;
pub mod tool_calls;
pub mod warning_groups;
pub mod warnings;

pub use collected::{AsWritten, Collected};
pub use finish::{Origin, ShardLevel, Shards, finish_level};
pub use summarise::LevelInput;

use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use crate::request::record::Outcome;
use crate::request::record::file::RecordLine;
use crate::request::record::writer::RecordSink;
use crate::request::record::{DroppedRecord, Exclusions, FailureRecord, RequestTiming};
use sample::{FailureSample, Sample};
use snapshots::Snapshots;

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

/// One hour in µs at three significant digits: a few tens of KiB per histogram.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats {
            completed: 0,
            failed: 0,
            dropped: 0,
            output_tokens: 0,
            ttft_us: histogram(),
            tpot_us: histogram(),
            e2e_us: histogram(),
            schedule_lag_us: histogram(),
        }
    }
}

pub fn us(ms: f64) -> u64 {
    (ms * 1000.0).round().max(0.0) as u64
}

impl LiveStats {
    fn record_completed(&mut self, s: &Sample) {
        self.completed += 1;
        self.output_tokens = self.output_tokens.saturating_add(s.output_tokens());
        if let Some(t) = s.ttft_ms() {
            self.ttft_us.saturating_record(us(t));
        }
        self.e2e_us.saturating_record(us(s.e2e_ms()));
        if let Some(t) = s.tpot_ms() {
            self.tpot_us.saturating_record(us(t));
        }
        if let Some(lag) = s.schedule_lag_ms() {
            self.schedule_lag_us.saturating_record(us(lag));
        }
    }

    fn record_failed(&mut self, f: &FailureSample) {
        self.failed += 1;
        if let Some(lag) = f.schedule_lag_ms() {
            self.schedule_lag_us.saturating_record(us(lag));
        }
    }

    /// A quantile of TTFT from the live histogram (approximate, for display only).
    pub fn ttft_quantile(&self, q: f64) -> Option<Duration> {
        (!self.ttft_us.is_empty()).then(|| Duration::from_micros(self.ttft_us.value_at_quantile(q)))
    }
}

/// Where one level's outcomes go besides memory.
pub struct LevelSink<'a> {
    pub records: &'a RecordSink,
    pub level: &'a str,
    /// Phases and exclusions known before the level (cool-down is decided at the end).
    pub rules: Exclusions,
    /// The run's live metrics, when something reads them (`/metrics`, a push); nothing is
    /// counted without them.
    pub live: Option<crate::results::live::LevelMetrics>,
}

/// Receive outcomes until every sender is gone. `on_update` sees the live counters after every
/// outcome and every snapshot (the console's progress line).
pub async fn collect(
    mut rx: mpsc::Receiver<Outcome>,
    sink: LevelSink<'_>,
    mut on_update: impl FnMut(&LiveStats, Option<&snapshots::Window>),
    mut snapshots: Snapshots,
) -> Collected {
    let mut out = Collected::default();
    let mut written = AsWritten { rules: sink.rules, gaps: gaps::GapHistograms::default() };
    let mut live = LiveStats::default();
    let level = sink.level.to_string();
    loop {
        let outcome = tokio::select! {
            outcome = rx.recv() => outcome,
            () = snapshots.tick() => {
                snapshots.take(&live).await;
                on_update(&live, snapshots.current());
                continue;
            }
        };
        let Some(outcome) = outcome else { break };
        match outcome {
            Outcome::Completed(c) => {
                let record = RequestTiming::from_completed(&c, &sink.rules);
                let sample = Sample::from_record(&record);
                if record.performance_eligible {
                    written.gaps.add(&record);
                }
                live.record_completed(&sample);
                if let Some(m) = &sink.live {
                    m.completed(&record);
                }
                snapshots.record_completed(&sample);
                out.samples.push(sample);
                sink.records.write(&RecordLine::Request { level: level.clone(), record: Box::new(record) }).await;
            }
            Outcome::Failed(f) => {
                let record = FailureRecord::from_failed(&f, &sink.rules);
                let sample = FailureSample::from_record(&record);
                live.record_failed(&sample);
                if let Some(m) = &sink.live {
                    m.failed(&record);
                }
                snapshots.record_failed(&sample);
                out.failures.push(sample);
                sink.records.write(&RecordLine::Failure { level: level.clone(), record: Box::new(record) }).await;
            }
            Outcome::Dropped(d) => {
                live.dropped += 1;
                out.dropped += 1;
                let record = DroppedRecord::from_dropped(&d);
                if let Some(m) = &sink.live {
                    m.dropped(sink.rules.phase(record.request_index, record.intended_offset_ms));
                }
                sink.records.write(&RecordLine::Dropped { level: level.clone(), record }).await;
            }
        }
        on_update(&live, snapshots.current());
    }
    snapshots.take(&live).await;
    out.windows = snapshots.finish();
    out.as_written = Some(written);
    out
}
