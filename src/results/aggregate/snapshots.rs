//! Interval snapshots for long runs: every `snapshot_interval`, one line of window statistics to a
//! time-series file (`<level>.timeseries.ndjson`) and one interval per metric to an HdrHistogram
//! interval log (`<level>.hlog`, the standard V2 format, values in microseconds, tagged `ttft`,
//! `tpot`, `e2e`, `schedule_lag`), so any window can be re-read with standard HdrHistogram tools.
//! Window percentiles come from the HDR histograms (three significant digits); the exact summaries
//! remain the artifact's.
//!
//! Files are written by a dedicated thread and only once a level has lasted a full interval, so a
//! short run leaves no snapshot files behind.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

pub use super::drift::{Change, Drift};
use super::sample::{FailureSample, Sample};
use super::{LiveStats, histogram, us};

/// One window's statistics: a line of the time-series file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub level: String,
    /// Window bounds, from the level start.
    pub start_s: f64,
    pub end_s: f64,
    pub completed: u64,
    pub failed: u64,
    /// Failures in the window by `error_kind`.
    pub errors: BTreeMap<String, u64>,
    pub output_tokens: u64,
    pub request_rate: f64,
    pub throughput_tok_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub schedule_lag_p99_ms: Option<f64>,
    /// Requests in flight at the end of the window.
    pub in_flight: u64,
    /// Mean `cached_tokens / prompt_tokens` of the window's completed requests.
    pub cache_hit_rate: Option<f64>,
    /// Totals since the level started, for the status line.
    pub total_completed: u64,
    pub total_failed: u64,
}

/// Where snapshots go and how often.
#[derive(Debug, Clone)]
pub struct SnapshotConfig {
    pub interval: Duration,
    /// `<dir>/<level>` without extension: `.timeseries.ndjson` and `.hlog` are added.
    pub path_stem: PathBuf,
    /// Print one status line per window (when there is no progress bar).
    pub status_lines: bool,
}

struct Current {
    ttft: Histogram<u64>,
    tpot: Histogram<u64>,
    e2e: Histogram<u64>,
    lag: Histogram<u64>,
    completed: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    output_tokens: u64,
    hit_sum: f64,
    hit_n: u64,
}

impl Current {
    fn new() -> Self {
        Current {
            ttft: histogram(),
            tpot: histogram(),
            e2e: histogram(),
            lag: histogram(),
            completed: 0,
            failed: 0,
            errors: BTreeMap::new(),
            output_tokens: 0,
            hit_sum: 0.0,
            hit_n: 0,
        }
    }
}

/// The snapshot state of one level.
pub struct Snapshots {
    config: Option<SnapshotConfig>,
    level: String,
    level_start: Instant,
    window_start: Instant,
    in_flight: Arc<AtomicU64>,
    current: Current,
    windows: Vec<Window>,
    writer: Option<WindowWriter>,
    writer_failed: bool,
    wall_start: SystemTime,
}

impl Snapshots {
    pub fn new(config: Option<SnapshotConfig>, level: &str, level_start: Instant, in_flight: Arc<AtomicU64>) -> Self {
        Snapshots {
            config,
            level: level.to_string(),
            level_start,
            window_start: level_start,
            in_flight,
            current: Current::new(),
            windows: Vec::new(),
            writer: None,
            writer_failed: false,
            wall_start: SystemTime::now(),
        }
    }

    /// Resolves when the current window is over (never, with snapshots off).
    pub async fn tick(&self) {
        match &self.config {
            Some(c) => tokio::time::sleep_until(self.window_start + c.interval).await,
            None => std::future::pending().await,
        }
    }

    pub fn record_completed(&mut self, s: &Sample) {
        let c = &mut self.current;
        c.completed += 1;
        c.output_tokens = c.output_tokens.saturating_add(s.output_tokens());
        if let Some(t) = s.ttft_ms() {
            c.ttft.saturating_record(us(t));
        }
        if let Some(t) = s.tpot_ms() {
            c.tpot.saturating_record(us(t));
        }
        c.e2e.saturating_record(us(s.e2e_ms()));
        if let Some(lag) = s.schedule_lag_ms() {
            c.lag.saturating_record(us(lag));
        }
        if let (Some(cached), Some(prompt)) = (s.cached_tokens(), s.prompt_tokens()) {
            if prompt > 0 {
                c.hit_sum += cached as f64 / prompt as f64;
                c.hit_n += 1;
            }
        }
    }

    pub fn record_failed(&mut self, f: &FailureSample) {
        self.current.failed += 1;
        *self.current.errors.entry(f.kind.to_string()).or_default() += 1;
        if let Some(lag) = f.schedule_lag_ms() {
            self.current.lag.saturating_record(us(lag));
        }
    }

    /// The last finished window, for the progress line.
    pub fn current(&self) -> Option<&Window> {
        self.windows.last()
    }

    /// Close the current window: summarise it, write it, start the next.
    pub async fn take(&mut self, live: &LiveStats) {
        let Some(config) = self.config.clone() else { return };
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.window_start);
        let full = elapsed >= config.interval;
        // A trailing partial window is kept only when full windows came before it.
        if !full && self.windows.is_empty() {
            return;
        }
        if elapsed.is_zero() {
            return;
        }
        let c = std::mem::replace(&mut self.current, Current::new());
        let ms = |h: &Histogram<u64>, q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
        let secs = elapsed.as_secs_f64();
        let window = Window {
            level: self.level.clone(),
            start_s: self.window_start.saturating_duration_since(self.level_start).as_secs_f64(),
            end_s: now.saturating_duration_since(self.level_start).as_secs_f64(),
            completed: c.completed,
            failed: c.failed,
            errors: c.errors.clone(),
            output_tokens: c.output_tokens,
            request_rate: c.completed as f64 / secs,
            throughput_tok_s: c.output_tokens as f64 / secs,
            ttft_p50_ms: ms(&c.ttft, 0.5),
            ttft_p99_ms: ms(&c.ttft, 0.99),
            tpot_p50_ms: ms(&c.tpot, 0.5),
            tpot_p99_ms: ms(&c.tpot, 0.99),
            e2e_p50_ms: ms(&c.e2e, 0.5),
            e2e_p99_ms: ms(&c.e2e, 0.99),
            schedule_lag_p99_ms: ms(&c.lag, 0.99),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            cache_hit_rate: (c.hit_n > 0).then(|| c.hit_sum / c.hit_n as f64),
            total_completed: live.completed,
            total_failed: live.failed,
        };
        if config.status_lines {
            eprintln!("{}", status_line(&window));
        }
        if self.writer.is_none() && !self.writer_failed {
            match WindowWriter::start(&config, self.wall_start) {
                Ok(writer) => self.writer = Some(writer),
                Err(e) => {
                    // Said once; the windows still reach the artifact's drift summary.
                    eprintln!(
                        "warning: cannot write the snapshot files {}.timeseries.ndjson/.hlog ({e}); the artifact is unaffected",
                        config.path_stem.display()
                    );
                    self.writer_failed = true;
                }
            }
        }
        if let Some(writer) = &self.writer {
            let start = self.window_start.saturating_duration_since(self.level_start);
            writer.send(window.clone(), start, elapsed, [c.ttft, c.tpot, c.e2e, c.lag]).await;
        }
        self.windows.push(window);
        self.window_start = now;
    }

    /// End of the level: the windows taken, with the files closed.
    pub fn finish(mut self) -> Vec<Window> {
        if let Some(writer) = self.writer.take() {
            writer.finish();
        }
        self.windows
    }
}

/// Windows of `interval` over a level, computed exactly from its records (nearest-rank over the
/// requests that ended in each window), as the live snapshots would have taken them. A merge of
/// shards uses it: every shard's requests fall into one set of windows on the shared timeline.
pub fn windows_from_samples(
    level: &str,
    samples: &[Sample],
    failures: &[FailureSample],
    interval: Duration,
) -> Vec<Window> {
    let step = interval.as_secs_f64() * 1000.0;
    let end_of = |s: &Sample| s.start_offset_ms + s.e2e_ms();
    let last =
        samples.iter().map(end_of).chain(failures.iter().map(|f| f.start_offset_ms + f.elapsed_ms)).fold(0.0, f64::max);
    if step <= 0.0 || last <= 0.0 {
        return Vec::new();
    }
    let count = (last / step).ceil().max(1.0) as usize;
    let p = |mut v: Vec<f64>, q: u32| {
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| crate::contract::nearest_rank(&v, q))
    };
    let (mut total_completed, mut total_failed) = (0, 0);
    (0..count)
        .map(|k| {
            let (lo, hi) = (k as f64 * step, ((k + 1) as f64 * step).min(last.max(step)));
            let hi = if k + 1 == count { last } else { hi };
            let inside = |t: f64| t >= lo && (t < hi || (k + 1 == count && t <= hi));
            let done: Vec<&Sample> = samples.iter().filter(|s| inside(end_of(s))).collect();
            let failed: Vec<&FailureSample> =
                failures.iter().filter(|f| inside(f.start_offset_ms + f.elapsed_ms)).collect();
            total_completed += done.len() as u64;
            total_failed += failed.len() as u64;
            let mut errors = BTreeMap::new();
            for f in &failed {
                *errors.entry(f.kind.to_string()).or_default() += 1;
            }
            let secs = ((hi - lo) / 1000.0).max(1e-9);
            let output_tokens = done.iter().map(|s| s.output_tokens()).fold(0, u64::saturating_add);
            let ratios: Vec<f64> = done
                .iter()
                .filter_map(|s| match (s.cached_tokens(), s.prompt_tokens()) {
                    (Some(c), Some(p)) if p > 0 => Some(c as f64 / p as f64),
                    _ => None,
                })
                .collect();
            let in_flight = samples
                .iter()
                .map(|s| (s.start_offset_ms, end_of(s)))
                .chain(failures.iter().map(|f| (f.start_offset_ms, f.start_offset_ms + f.elapsed_ms)))
                .filter(|&(start, end)| start <= hi && end > hi)
                .count() as u64;
            Window {
                level: level.to_string(),
                start_s: lo / 1000.0,
                end_s: hi / 1000.0,
                completed: done.len() as u64,
                failed: failed.len() as u64,
                errors,
                output_tokens,
                request_rate: done.len() as f64 / secs,
                throughput_tok_s: output_tokens as f64 / secs,
                ttft_p50_ms: p(done.iter().filter_map(|s| s.ttft_ms()).collect(), 50),
                ttft_p99_ms: p(done.iter().filter_map(|s| s.ttft_ms()).collect(), 99),
                tpot_p50_ms: p(done.iter().filter_map(|s| s.tpot_ms()).collect(), 50),
                tpot_p99_ms: p(done.iter().filter_map(|s| s.tpot_ms()).collect(), 99),
                e2e_p50_ms: p(done.iter().map(|s| s.e2e_ms()).collect(), 50),
                e2e_p99_ms: p(done.iter().map(|s| s.e2e_ms()).collect(), 99),
                schedule_lag_p99_ms: p(
                    done.iter()
                        .filter_map(|s| s.schedule_lag_ms())
                        .chain(failed.iter().filter_map(|f| f.schedule_lag_ms()))
                        .collect(),
                    99,
                ),
                in_flight,
                cache_hit_rate: (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64),
                total_completed,
                total_failed,
            }
        })
        .collect()
}

/// One status line per window, for logs and CI.
pub fn status_line(w: &Window) -> String {
    // TTFT p50 and p99 share one unit, TPOT p99 has its own; counts and rates as people read them.
    let ttft = crate::numbers::TimeUnit::for_column([w.ttft_p50_ms, w.ttft_p99_ms].into_iter().flatten());
    let number = |unit: crate::numbers::TimeUnit, v: Option<f64>| v.map_or_else(|| "–".to_string(), |x| unit.number(x));
    let tpot = crate::numbers::TimeUnit::for_column(w.tpot_p99_ms);
    format!(
        "[{} {:>7.0}s] done {} failed {} · {} req/s {} tok/s · TTFT p50/p99 {}/{} {} · TPOT p99 {} {} · in flight {}{}",
        w.level,
        w.end_s,
        crate::numbers::thousands(w.total_completed),
        crate::numbers::thousands(w.total_failed),
        crate::numbers::rate(w.request_rate),
        crate::numbers::rate(w.throughput_tok_s),
        number(ttft, w.ttft_p50_ms),
        number(ttft, w.ttft_p99_ms),
        ttft.suffix(),
        number(tpot, w.tpot_p99_ms),
        tpot.suffix(),
        w.in_flight,
        if w.errors.is_empty() {
            String::new()
        } else {
            format!(" · errors {}", w.errors.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "))
        }
    )
}

type Interval = (Window, Duration, Duration, [Histogram<u64>; 4]);

/// The thread that owns the time-series file and the interval log.
struct WindowWriter {
    tx: tokio::sync::mpsc::Sender<Interval>,
    thread: std::thread::JoinHandle<()>,
}

const TAGS: [&str; 4] = ["ttft", "tpot", "e2e", "schedule_lag"];

impl WindowWriter {
    fn start(config: &SnapshotConfig, wall_start: SystemTime) -> std::io::Result<Self> {
        let stem = config.path_stem.to_string_lossy().into_owned();
        let mut series = crate::sys::no_follow(std::fs::OpenOptions::new().create(true).append(true))
            .open(format!("{stem}.timeseries.ndjson"))?;
        let mut hlog = crate::sys::no_follow(std::fs::OpenOptions::new().create(true).write(true).truncate(true))
            .open(format!("{stem}.hlog"))?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Interval>(64);
        let thread = std::thread::Builder::new().name("anvil-snapshots".into()).spawn(move || {
            use std::io::Write;
            crate::sys::lower_thread_priority();
            let mut serializer = V2DeflateSerializer::new();
            let mut builder = IntervalLogWriterBuilder::new();
            builder
                .add_comment("anvil-load interval log: values in microseconds; tags ttft, tpot, e2e, schedule_lag")
                .with_start_time(wall_start)
                .with_base_time(wall_start)
                .with_max_value_divisor(1000.0);
            let mut log = match builder.begin_log_with(&mut hlog, &mut serializer) {
                Ok(log) => Some(log),
                Err(e) => {
                    tracing::warn!("cannot start the interval log: {e}");
                    None
                }
            };
            while let Some((window, start, length, histograms)) = rx.blocking_recv() {
                if let Ok(mut line) = serde_json::to_vec(&window) {
                    line.push(b'\n');
                    if let Err(e) = series.write_all(&line).and_then(|()| series.flush()) {
                        tracing::warn!("cannot write the time series: {e}");
                    }
                }
                if let Some(log) = &mut log {
                    for (tag, h) in TAGS.iter().zip(histograms.iter()) {
                        if h.is_empty() {
                            continue;
                        }
                        if let Err(e) = log.write_histogram(h, start, length, Tag::new(tag)) {
                            tracing::warn!("cannot write the interval log: {e}");
                        }
                    }
                }
            }
        })?;
        Ok(WindowWriter { tx, thread })
    }

    async fn send(&self, window: Window, start: Duration, length: Duration, histograms: [Histogram<u64>; 4]) {
        let _ = self.tx.send((window, start, length, histograms)).await;
    }

    fn finish(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_a_snapshot_file_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("level.hlog")).unwrap();
        let config = SnapshotConfig {
            interval: Duration::from_secs(1),
            path_stem: dir.path().join("level"),
            status_lines: false,
        };
        assert!(WindowWriter::start(&config, SystemTime::now()).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    }
}
