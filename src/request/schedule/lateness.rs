//! The client's own lateness, measured in every mode. A probe task on the same runtime as the
//! workers asks to be woken every `PROBE_INTERVAL` on an absolute deadline and records how late it
//! was polled. A runtime that wakes the probe late wakes the stream readers late too, and every
//! read they stamp is late by as much: this is the part of each latency the client, not the
//! server, added. Closed loops have no dispatch lag to check; this covers them, and open loops'
//! receive side.
//!
//! The probe costs one timer wake-up per interval; its histogram is fixed-size, so memory stays
//! bounded in soaks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::request::record::ClientLoad;
use crate::request::record::timing::ms;

/// Often enough for a p99 over a second-long level, rarely enough to cost nothing.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(5);
/// The window of the published figure: the worst lateness of the last second.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// A running probe; `finish` stops it and gives the level's figures.
pub struct LatenessProbe {
    stop: CancellationToken,
    task: JoinHandle<Histogram<u64>>,
    started: Instant,
    cpu_start: Option<Duration>,
}

impl LatenessProbe {
    /// Start probing on the current runtime.
    pub fn start() -> Self {
        Self::publishing(None)
    }

    /// Start probing, and store the worst lateness of each second (µs) in `published` as it
    /// ends, for the live metrics.
    pub fn publishing(published: Option<Arc<AtomicU64>>) -> Self {
        let stop = CancellationToken::new();
        let started = Instant::now();
        let cpu_start = crate::sys::process_cpu_time();
        let task = tokio::spawn(probe(stop.clone(), started, published));
        LatenessProbe { stop, task, started, cpu_start }
    }

    pub async fn finish(self) -> ClientLoad {
        self.stop.cancel();
        let wall = self.started.elapsed();
        let cpu = match (self.cpu_start, crate::sys::process_cpu_time()) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => Duration::ZERO,
        };
        let histogram = self.task.await.unwrap_or_else(|_| empty());
        let at = |q: f64| if histogram.is_empty() { 0.0 } else { histogram.value_at_quantile(q) as f64 / 1000.0 };
        ClientLoad {
            probes: histogram.len(),
            probe_interval_ms: ms(PROBE_INTERVAL),
            lateness_p50_ms: at(0.50),
            lateness_p99_ms: at(0.99),
            lateness_max_ms: if histogram.is_empty() { 0.0 } else { histogram.max() as f64 / 1000.0 },
            cpu_ms: ms(cpu),
            wall_ms: ms(wall),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        }
    }
}

/// Microseconds up to an hour: a stall of any length is recorded, not clamped.
fn empty() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

async fn probe(stop: CancellationToken, started: Instant, published: Option<Arc<AtomicU64>>) -> Histogram<u64> {
    let mut histogram = empty();
    let mut deadline = started + PROBE_INTERVAL;
    let (mut window_end, mut window_max) = (started + PUBLISH_EVERY, 0);
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {
                // A level shorter than a window still shows its worst.
                if let Some(published) = &published {
                    published.store(window_max, Ordering::Relaxed);
                }
                return histogram;
            }
            _ = tokio::time::sleep_until(deadline) => {}
        }
        let now = Instant::now();
        let late_us = now.saturating_duration_since(deadline).as_micros() as u64;
        histogram.saturating_record(late_us);
        if let Some(published) = &published {
            window_max = window_max.max(late_us);
            if now >= window_end {
                published.store(window_max, Ordering::Relaxed);
                (window_end, window_max) = (now + PUBLISH_EVERY, 0);
            }
        }
        // A wake-up later than a whole interval counts once: the missed deadlines are not
        // separate samples of the same stall.
        deadline += PROBE_INTERVAL;
        if deadline <= now {
            deadline = now + PROBE_INTERVAL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread runs the test and the probe: blocking it is what a saturated client does.
    #[tokio::test]
    async fn a_blocked_runtime_shows_as_lateness() {
        let probe = LatenessProbe::start();
        tokio::time::sleep(Duration::from_millis(30)).await;
        // Block the only worker thread: the probe cannot be polled until this returns.
        std::thread::sleep(Duration::from_millis(60));
        tokio::time::sleep(Duration::from_millis(30)).await;
        let load = probe.finish().await;
        assert!(load.probes >= 5, "{load:?}");
        assert!(load.lateness_max_ms >= 50.0, "the 60 ms block shows: {load:?}");
        assert!(load.wall_ms >= 100.0, "{load:?}");
    }

    #[tokio::test]
    async fn the_worst_lateness_of_each_second_is_published() {
        let published = Arc::new(AtomicU64::new(0));
        let probe = LatenessProbe::publishing(Some(Arc::clone(&published)));
        tokio::time::sleep(Duration::from_millis(30)).await;
        std::thread::sleep(Duration::from_millis(60));
        tokio::time::sleep(PUBLISH_EVERY + Duration::from_millis(50)).await;
        // The first second's worst, published as it ended.
        assert!(published.load(Ordering::Relaxed) >= 50_000, "{published:?}");
        let _ = probe.finish().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cpu_is_measured_over_the_level() {
        let probe = LatenessProbe::start();
        // Spin until the process has used 50 ms of CPU (on a shared machine a wall-clock spin
        // may get only part of a core), bounded in wall time.
        let start = crate::sys::process_cpu_time().expect("CPU time on this platform");
        let wall = std::time::Instant::now();
        while crate::sys::process_cpu_time().is_some_and(|t| t - start < Duration::from_millis(50))
            && wall.elapsed() < Duration::from_secs(30)
        {
            std::hint::black_box(0u64);
        }
        let load = probe.finish().await;
        assert!(load.cpu_ms >= 50.0, "50 ms of spinning is CPU time: {load:?}");
        assert!(load.cpu_share().is_some_and(|s| s > 0.0 && s <= 1.0), "{load:?}");
    }
}
