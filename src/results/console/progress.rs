//! The live line while a level runs (stderr, terminals only), and durations as messages say them.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::numbers;
use crate::results::aggregate::LiveStats;
use crate::results::aggregate::snapshots::Window;

/// The live line while a level runs; invisible when disabled or stderr is not a terminal (then
/// the snapshots print one status line per interval instead).
pub struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    duration: Option<Duration>,
}

impl Progress {
    pub fn new(enabled: bool, total: Option<u64>, duration: Option<Duration>, label: &str) -> Self {
        let bar = (enabled && Self::terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr_with_hz(4));
            let template = if total.is_some() {
                "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}"
            } else {
                "{prefix} [{elapsed_precise}] {pos} requests {msg}"
            };
            bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
            bar.set_prefix(label.to_string());
            bar
        });
        Progress { bar, started: Instant::now(), duration }
    }

    /// Whether a progress bar can be drawn at all.
    pub fn terminal() -> bool {
        std::io::stderr().is_terminal()
    }

    pub fn visible(&self) -> bool {
        self.bar.is_some()
    }

    pub fn update(&self, live: &LiveStats, window: Option<&Window>) {
        let Some(bar) = &self.bar else { return };
        let done = live.completed + live.failed;
        bar.set_position(done);
        let elapsed = self.started.elapsed();
        let secs = elapsed.as_secs_f64().max(1e-3);
        let mut msg = format!(
            "{} req/s {} tok/s",
            numbers::rate(done as f64 / secs),
            numbers::rate(live.output_tokens as f64 / secs)
        );
        // The last window's p99 describes now; before the first window, the run so far.
        match window.and_then(|w| w.ttft_p99_ms) {
            Some(p99) => {
                let _ = write!(msg, " · TTFT p99 {} (window)", numbers::duration_ms(p99));
            }
            None => {
                if let Some(p99) = live.ttft_quantile(0.99) {
                    let _ = write!(msg, " · TTFT p99 {}", numbers::duration_ms(p99.as_secs_f64() * 1e3));
                }
            }
        }
        if live.failed > 0 {
            let _ = write!(msg, " · {} failed", live.failed);
        }
        if live.dropped > 0 {
            let _ = write!(msg, " · {} dropped", live.dropped);
        }
        if let Some(d) = self.duration {
            let _ = write!(msg, " · {} left", fmt_duration(d.saturating_sub(elapsed)));
        }
        bar.set_message(msg);
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Seconds as the user reads them in messages.
pub fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}
