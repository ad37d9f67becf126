//! What the user sees: the live progress line, methodology warnings, the end-of-level summary
//! and the sweep table. Progress and warnings go to stderr; summaries and artifact paths to
//! stdout, so `anvil-load ... > summary.txt` keeps the results and drops the chatter.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::contract::{Metric, Stat};
use crate::request::record::RunInfo;
use crate::request::server_metrics::{LevelServerMetrics, Norm};
use crate::results::aggregate::LiveStats;
use crate::results::aggregate::snapshots::Window;
use crate::results::aggregate::summary::LevelSummary;
use crate::results::aggregate::warnings::Warning;

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
        let mut msg = format!("{:.1} req/s {:.0} tok/s", done as f64 / secs, live.output_tokens as f64 / secs);
        // The last window's p99 describes now; before the first window, the run so far.
        match window.and_then(|w| w.ttft_p99_ms) {
            Some(p99) => {
                let _ = write!(msg, " · TTFT p99 {} (window)", fmt_ms(p99));
            }
            None => {
                if let Some(p99) = live.ttft_quantile(0.99) {
                    let _ = write!(msg, " · TTFT p99 {}", fmt_ms(p99.as_secs_f64() * 1e3));
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

pub fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("warning: {}", w.message());
    }
}

pub fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.0} µs", ms * 1000.0)
    }
}

/// The end-of-level summary (stdout).
pub fn level_summary(a: &LevelSummary, info: &RunInfo) -> String {
    let mut s = String::new();
    let engine = info.engine.as_deref().unwrap_or("unlabelled engine");
    let load = match a.load.rate {
        Some(rate) => format!(
            "open loop {rate} req/s {} (achieved {:.2} req/s)",
            a.load.arrival.unwrap_or_default(),
            a.load.achieved_rate.unwrap_or(0.0)
        ),
        None => format!("concurrency {}", a.load.concurrency),
    };
    let _ = writeln!(s, "\n{} · {} · {} · {load}", a.level_id, info.model, engine);
    let canaries = if info.request_canaries {
        format!(", canaries {}/{} passed", a.canaries.passed, a.canaries.samples)
    } else {
        String::new()
    };
    let excluded: u64 = a.excluded_by_reason.values().sum();
    let excluded = if excluded > 0 {
        format!(" · excluded {excluded} ({})", counts(&a.excluded_by_reason))
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "requests {} · completed {} · failed {}{excluded}{} · wall {}{}",
        a.requests,
        a.completed,
        a.failed,
        canaries,
        fmt_ms(a.wall_clock_ms),
        if a.interrupted { " · INTERRUPTED" } else { "" }
    );
    if a.population.performance_eligible_requests == 0 {
        // No figure describes the server: none is printed, not even a zero.
        let mut why = Vec::new();
        if a.failed > 0 {
            why.push(format!("{} failed ({})", a.failed, counts(&a.error_counts)));
        }
        if !a.excluded_by_reason.is_empty() {
            let n: u64 = a.excluded_by_reason.values().sum();
            why.push(format!("{n} excluded ({})", counts(&a.excluded_by_reason)));
        }
        let _ = writeln!(
            s,
            "no request is in the distributions ({}): there is no latency or throughput figure for this level",
            why.join(", ")
        );
        failure_lines(&mut s, a);
        return s;
    }
    let _ = writeln!(s, "{:<22}{:>12}{:>12}{:>12}{:>12}{:>9}", "", "mean", "p50", "p90", "p99", "samples");
    for (label, metric) in [
        ("TTFT", Metric::Ttft),
        ("time to first output", Metric::TimeToFirstOutput),
        ("TPOT", Metric::Tpot),
        ("E2E", Metric::E2e),
        ("prompt tokens", Metric::PromptTokens),
        ("output tokens", Metric::CompletionTokens),
        ("decode tok/s", Metric::DecodeTokS),
        ("ITL per chunk", Metric::ItlChunk),
        ("ITL per token", Metric::ItlToken),
        ("tokens per chunk", Metric::TokensPerChunk),
        ("longest stall", Metric::MaxStall),
        ("TPOT corrected", Metric::TpotCorrected),
    ] {
        // The per-token rows only when the responses gave them (corrected TPOT needs per-chunk
        // usage; records written before the families existed have no gaps).
        if a.distributions.samples(metric) == 0
            && matches!(metric, Metric::ItlChunk | Metric::ItlToken | Metric::MaxStall | Metric::TpotCorrected)
        {
            continue;
        }
        let cell = |stat: Stat| match a.distributions.stat(metric, stat) {
            Some(v) if metric.ms_suffix() => fmt_ms(v),
            Some(v) => format!("{v:.1}"),
            None => "–".to_string(),
        };
        let samples = a.distributions.samples(metric);
        let _ = writeln!(
            s,
            "{label:<22}{:>12}{:>12}{:>12}{:>12}{samples:>9}",
            cell(Stat::Mean),
            cell(Stat::P50),
            cell(Stat::P90),
            cell(Stat::P99)
        );
    }
    match &a.unstreamed {
        // Embeddings and rerank generate nothing: their throughput is the input they took.
        Some(u) => {
            let _ = writeln!(
                s,
                "throughput {:.1} input tok/s · {:.2} req/s",
                u.input_throughput_tok_s.unwrap_or(0.0),
                a.rates.request_throughput_rps.unwrap_or(0.0)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "throughput {:.1} output tok/s · {:.2} req/s",
                a.rates.throughput_tok_s.unwrap_or(0.0),
                a.rates.request_throughput_rps.unwrap_or(0.0)
            );
        }
    }
    if let Some(st) = &a.steady_state {
        let p = |d: Option<&crate::results::aggregate::stats::Summary>, stat: Stat| {
            d.map_or_else(|| "–".to_string(), |d| fmt_ms(d.stat(stat)))
        };
        let _ = writeln!(
            s,
            "steady state {} of {} ({:.0}%): {:.1} output tok/s · TTFT p50 {} p99 {} · TPOT p50 {} p99 {}",
            fmt_ms(st.duration_ms()),
            fmt_ms(a.wall_clock_ms),
            st.share_of_level * 100.0,
            st.throughput_tok_s,
            p(st.ttft.as_ref(), Stat::P50),
            p(st.ttft.as_ref(), Stat::P99),
            p(st.tpot.as_ref(), Stat::P50),
            p(st.tpot.as_ref(), Stat::P99)
        );
    }
    if a.load.rate.is_some() {
        let lag = |v: Option<f64>| v.map_or_else(|| "–".to_string(), fmt_ms);
        let d = &a.distributions;
        let _ = writeln!(
            s,
            "schedule lag p50 {} · p99 {} · max {}; dropped {}; TTFT from intended p99 {}",
            lag(d.stat(Metric::ScheduleLag, Stat::P50)),
            lag(d.stat(Metric::ScheduleLag, Stat::P99)),
            lag(d.stat(Metric::ScheduleLag, Stat::Max)),
            a.load.dropped_arrivals,
            lag(d.stat(Metric::TtftFromIntended, Stat::P99))
        );
    }
    let v = &a.load.validity;
    if let (Some(p50), Some(p99), Some(max)) =
        (v.client_lateness_p50_ms, v.client_lateness_p99_ms, v.client_lateness_max_ms)
    {
        let cpu =
            v.client_cpu_share.map(|c| format!(" · process CPU {:.0}% of its cores", c * 100.0)).unwrap_or_default();
        let _ = writeln!(s, "client lateness p50 {} · p99 {} · max {}{cpu}", fmt_ms(p50), fmt_ms(p99), fmt_ms(max));
    }
    if let Some(slo) = &a.slo {
        let parts: Vec<String> = slo
            .criteria
            .iter()
            .map(|c| {
                let observed = c.observed.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"));
                format!("{} {observed} {} {}", c.key, if c.passed { "ok" } else { "MISSED" }, c.threshold)
            })
            .collect();
        let _ = writeln!(
            s,
            "SLO {}: {}; goodput {:.2} req/s",
            if slo.passed { "met" } else { "missed" },
            parts.join(", "),
            a.rates.goodput.and_then(|g| g.rps).unwrap_or(0.0)
        );
    }
    failure_lines(&mut s, a);
    s
}

/// `key n, key n`.
fn counts<K: std::fmt::Display>(by: &std::collections::BTreeMap<K, u64>) -> String {
    by.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// Failures by kind, the server's own view and the conversations: what a level says whether or
/// not anything is in its distributions.
fn failure_lines(s: &mut String, a: &LevelSummary) {
    if !a.error_counts.is_empty() {
        let _ = writeln!(s, "failures by kind: {}", counts(&a.error_counts));
    }
    if let Some(m) = &a.server_metrics {
        let _ = writeln!(s, "{}", server_line(m));
    }
    if let Some(c) = &a.conversations {
        conversation_lines(s, c);
    }
}

/// Conversations: one line per turn (cold first turn against warm later ones), then sessions.
fn conversation_lines(s: &mut String, c: &crate::results::aggregate::summary::SessionSummary) {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), fmt_ms);
    for t in &c.by_turn {
        let _ = writeln!(
            s,
            "turn {:>2}: {:>5} done {:>3} failed · TTFT p50 {} p99 {} · cache {}",
            t.turn,
            t.completed,
            t.failed,
            ms(t.ttft_ms.as_ref().map(|x| x.stat(Stat::P50))),
            ms(t.ttft_ms.as_ref().map(|x| x.stat(Stat::P99))),
            t.cache.ratio.map_or_else(|| "–".to_string(), |r| format!("{:.0}% of the history", r * 100.0))
        );
    }
    let mut line = format!("conversations {} ({} without failures)", c.totals.sessions, c.totals.without_failures);
    if let Some(g) = &c.goodput {
        let _ = write!(line, " · {} of {} met every objective on every turn", g.good_sessions, g.sessions);
    }
    if let Some((one, of)) = c.sessions_on_one_backend {
        let _ = write!(line, " · {one} of {of} stayed on one backend");
    }
    let _ = writeln!(s, "{line}");
}

/// The server's own view in one line: its counters and the gauges that explain latency.
fn server_line(m: &LevelServerMetrics) -> String {
    let engine = m.engine.map_or("unrecognised engine", |e| e.as_str());
    let mut parts = vec![format!("server ({engine}, {} scrapes)", m.scrapes)];
    let counter = |n: Norm| m.counter(n).map(|v| format!("{v:.0}"));
    if let (Some(p), Some(g)) = (counter(Norm::PromptTokens), counter(Norm::GenerationTokens)) {
        parts.push(format!("prompt {p} / generated {g} tokens"));
    }
    for (label, norm) in [("running", Norm::Running), ("waiting", Norm::Waiting), ("KV cache", Norm::KvCacheUsage)] {
        if let Some(g) = m.gauges.get(&norm) {
            parts.push(format!("{label} max {:.2} mean {:.2}", g.max, g.mean));
        }
    }
    if let Some(rate) = m.prefix_cache_hit_rate {
        parts.push(format!("prefix-cache hit rate {rate:.3}"));
    }
    if let Some(spec) = &m.spec_decode {
        if let Some(rate) = spec.acceptance_rate {
            parts.push(format!("draft acceptance {rate:.3}"));
        }
    }
    parts.join(" · ")
}

/// One row of the sweep summary.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub load_mode: &'static str,
    /// Closed loop: the concurrency; open loop: the in-flight cap (0 when uncapped).
    pub concurrency: u32,
    pub rate: Option<f64>,
    pub achieved_rate: Option<f64>,
    pub goodput_rps: Option<f64>,
    pub slo_passed: Option<bool>,
    pub valid: bool,
    pub run_id: String,
    pub artifact: String,
    pub requests: u64,
    pub failed: u64,
    pub request_throughput_rps: Option<f64>,
    pub output_throughput_tok_s: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub tpot_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub performance_eligible: bool,
}

impl SweepRow {
    pub fn from_summary(a: &LevelSummary, path: &std::path::Path) -> Self {
        let d = &a.distributions;
        SweepRow {
            load_mode: a.load.load_mode,
            concurrency: a.load.concurrency,
            rate: a.load.rate,
            achieved_rate: a.load.achieved_rate,
            goodput_rps: a.rates.goodput.and_then(|g| g.rps),
            slo_passed: a.slo.as_ref().map(|r| r.passed),
            valid: a.load.validity.valid,
            run_id: a.level_id.clone(),
            artifact: path.display().to_string(),
            requests: a.requests,
            failed: a.failed,
            request_throughput_rps: a.rates.request_throughput_rps,
            output_throughput_tok_s: a.rates.throughput_tok_s,
            ttft_p50_ms: d.stat(Metric::Ttft, Stat::P50),
            ttft_p99_ms: d.stat(Metric::Ttft, Stat::P99),
            tpot_p50_ms: d.stat(Metric::Tpot, Stat::P50),
            tpot_p99_ms: d.stat(Metric::Tpot, Stat::P99),
            e2e_p50_ms: d.stat(Metric::E2e, Stat::P50),
            e2e_p99_ms: d.stat(Metric::E2e, Stat::P99),
            performance_eligible: a.performance_eligible,
        }
    }
}

pub fn sweep_table(rows: &[SweepRow]) -> String {
    let mut s = String::new();
    let open = rows.iter().any(|r| r.rate.is_some());
    let _ = writeln!(
        s,
        "\n{:>11}{:>10}{:>14}{:>12}{:>12}{:>12}{:>12}{:>9}{:>8}",
        if open { "rate" } else { "concurrency" },
        "req/s",
        "output tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "failed",
        "valid"
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), fmt_ms);
    for r in rows {
        let level = match r.rate {
            Some(rate) => format!("{rate}"),
            None => r.concurrency.to_string(),
        };
        let _ = writeln!(
            s,
            "{:>11}{:>10}{:>14}{:>12}{:>12}{:>12}{:>12}{:>9}{:>8}",
            level,
            r.request_throughput_rps.map_or_else(|| "–".into(), |v| format!("{v:.2}")),
            r.output_throughput_tok_s.map_or_else(|| "–".into(), |v| format!("{v:.1}")),
            ms(r.ttft_p50_ms),
            ms(r.ttft_p99_ms),
            ms(r.tpot_p50_ms),
            ms(r.tpot_p99_ms),
            r.failed,
            if r.valid { "yes" } else { "NO" }
        );
    }
    s
}

/// The capacity search, probe by probe, and its answer.
pub fn search_table(search: &crate::plan::search::CapacitySearch) -> String {
    let mut s = String::new();
    let by = match search.by {
        crate::plan::scenario::SearchBy::Concurrency => "concurrency",
        crate::plan::scenario::SearchBy::Rate => "rate",
    };
    let _ = writeln!(s, "\ncapacity search by {by}:");
    let _ = writeln!(s, "{:>6}{:>12}{:>10}{:>14}", "step", by, "SLOs", "goodput/s");
    for (i, p) in search.probes.iter().enumerate() {
        let goodput = p.goodput_rps.map_or_else(|| "–".to_string(), |g| format!("{g:.2}"));
        let _ =
            writeln!(s, "{:>6}{:>12}{:>10}{:>14}", i + 1, p.level, if p.passed { "met" } else { "missed" }, goodput);
    }
    match search.best {
        Some(best) => {
            let _ = writeln!(s, "highest {by} meeting every SLO: {best} ({})", search.finished.unwrap_or("done"));
        }
        None => {
            let _ = writeln!(s, "no {by} probed met every SLO ({})", search.finished.unwrap_or("done"));
        }
    }
    s
}

/// Seconds as the user reads them in messages.
pub fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}
