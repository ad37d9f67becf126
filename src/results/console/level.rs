//! One level as people read it: its answer box (the headline numbers and verdicts), the compact
//! line a sweep prints as each level ends, and the detail table under the answer.

use std::fmt::Write as _;

use crate::contract::{Metric, Stat};
use crate::numbers::{self, TimeUnit};
use crate::plan::scenario::Bound;
use crate::request::record::RunInfo;
use crate::request::server_metrics::{LevelServerMetrics, Norm};
use crate::results::aggregate::slo::SloResult;
use crate::results::aggregate::summary::LevelSummary;

/// The end-of-level summary (stdout).
pub fn level_summary(a: &LevelSummary, info: &RunInfo) -> String {
    let mut s = String::new();
    let engine = info.engine.as_deref().unwrap_or("unlabelled engine");
    let load = match a.load.rate {
        Some(rate) => format!(
            "open loop {} req/s {} (achieved {} req/s)",
            numbers::rate(rate),
            a.load.arrival.unwrap_or_default(),
            numbers::rate(a.load.achieved_rate.unwrap_or(0.0))
        ),
        None => format!("concurrency {}", a.load.concurrency),
    };
    let _ = writeln!(s, "\n{} · {} · {} · {load}", a.level_id, info.model, engine);
    let mut canaries = if info.request_canaries {
        format!(", canaries {}/{} passed", a.canaries.passed, a.canaries.samples)
    } else {
        String::new()
    };
    if let Some(so) = &a.structured_output {
        canaries.push_str(&format!(", {}", schema_words(so)));
    }
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
        numbers::duration_ms(a.wall_clock_ms),
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
    detail_table(&mut s, a);
    match &a.unstreamed {
        // Embeddings and rerank generate nothing: their throughput is the input they took.
        Some(u) => {
            let _ = writeln!(
                s,
                "throughput {} input tok/s · {} req/s",
                numbers::rate(u.input_throughput_tok_s.unwrap_or(0.0)),
                numbers::rate(a.rates.request_throughput_rps.unwrap_or(0.0))
            );
        }
        None => {
            let _ = writeln!(
                s,
                "throughput {} output tok/s · {} req/s",
                numbers::rate(a.rates.throughput_tok_s.unwrap_or(0.0)),
                numbers::rate(a.rates.request_throughput_rps.unwrap_or(0.0))
            );
        }
    }
    if let Some(st) = &a.steady_state {
        let p = |d: Option<&crate::results::aggregate::stats::Summary>, stat: Stat| {
            d.map_or_else(|| "–".to_string(), |d| numbers::duration_ms(d.stat(stat)))
        };
        // The level's wall clock and its steady part in one unit.
        let wall = TimeUnit::for_max_ms(a.wall_clock_ms);
        let _ = writeln!(
            s,
            "steady state {} of {} ({}): {} output tok/s · TTFT p50 {} p99 {} · TPOT p50 {} p99 {}",
            wall.show(st.duration_ms()),
            wall.show(a.wall_clock_ms),
            numbers::percent(st.share_of_level),
            numbers::rate(st.throughput_tok_s),
            p(st.ttft.as_ref(), Stat::P50),
            p(st.ttft.as_ref(), Stat::P99),
            p(st.tpot.as_ref(), Stat::P50),
            p(st.tpot.as_ref(), Stat::P99)
        );
    }
    if a.load.rate.is_some() {
        let lag = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::duration_ms);
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
        let cpu = v
            .client_cpu_share
            .map(|c| format!(" · process CPU {} of its cores", numbers::percent(c)))
            .unwrap_or_default();
        let unit = TimeUnit::for_max_ms(max);
        let _ = writeln!(
            s,
            "client lateness p50 {} · p99 {} · max {}{cpu}",
            unit.show(p50),
            unit.show(p99),
            unit.show(max)
        );
    }
    if let Some(slo) = &a.slo {
        let parts: Vec<String> = slo
            .criteria
            .iter()
            .map(|c| {
                let observed = c.observed.map_or_else(|| "–".to_string(), |v| observed(&c.key, v));
                format!(
                    "{} {observed} {} {}",
                    c.key,
                    if c.passed { "ok" } else { "MISSED" },
                    numbers::significant(c.threshold, 6)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "SLO {}: {}; goodput {} req/s",
            if slo.passed { "met" } else { "missed" },
            parts.join(", "),
            numbers::rate(a.rates.goodput.and_then(|g| g.rps).unwrap_or(0.0))
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
        if let Some(g) = &m.gpu_telemetry {
            let _ = writeln!(s, "{}", gpu_line(g));
        }
    }
    if let Some(c) = &a.conversations {
        conversation_lines(s, c);
    }
    if let Some(rows) = &a.replicas {
        replica_lines(s, rows);
    }
    super::models::lines(s, a);
    if let Some(t) = &a.tool_calls {
        let _ = writeln!(s, "{}", tool_line(t));
    }
    if let Some(m) = &a.media {
        let _ = writeln!(s, "{}", crate::results::aggregate::media::line(m));
    }
}

/// Structured output: `schema valid 97.0% (97/100; 2 invalid, 1 cut by max_tokens)`.
fn schema_words(so: &crate::results::aggregate::structured::StructuredSummary) -> String {
    let rate = so.schema_valid_rate.map_or("n/a".to_string(), |r| format!("{:.1}%", r * 100.0));
    let mut s = format!("schema valid {rate} ({}/{}", so.valid, so.checked);
    if so.invalid > 0 {
        s.push_str(&format!("; {} invalid", so.invalid));
    }
    if so.truncated > 0 {
        s.push_str(&format!("; {} cut by max_tokens", so.truncated));
    }
    if so.unchecked > 0 {
        s.push_str(&format!("; {} too long to check", so.unchecked));
    }
    s.push(')');
    if !so.passed {
        s.push_str(" — above max_invalid_rate");
    }
    s
}

/// Tool calls in one line: calls, the valid share with the reasons of the others, and the time
/// to the first tool call.
fn tool_line(t: &crate::results::aggregate::tool_calls::ToolCallSummary) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::duration_ms);
    let mut line = format!("tool calls {} in {} of {} responses", t.calls, t.requests_with_calls, t.requests);
    if let Some(rate) = t.valid_rate {
        let _ = write!(line, " · {} valid", numbers::percent(rate));
        if !t.invalid_by_reason.is_empty() {
            let _ = write!(line, " (invalid: {})", counts(&t.invalid_by_reason));
        }
        let f = &t.time_to_first_tool_call_ms;
        let _ = write!(line, " · time to first tool call p50 {} p99 {}", ms(f.p50), ms(f.p99));
    }
    line
}

/// Several replicas: one line each, its requests, failures, TTFT and TPOT p50/p99, throughput.
fn replica_lines(s: &mut String, rows: &[crate::results::aggregate::replicas::ReplicaSummary]) {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::duration_ms);
    for r in rows {
        let _ = writeln!(
            s,
            "replica {} {}: {} requests, {} failed · TTFT p50 {} p99 {} · TPOT p50 {} p99 {} · {} tok/s",
            r.index,
            r.url,
            r.requests,
            r.failures,
            ms(r.ttft_ms.p50),
            ms(r.ttft_ms.p99),
            ms(r.tpot_ms.p50),
            ms(r.tpot_ms.p99),
            r.output_tokens_per_s.map_or_else(|| "–".to_string(), numbers::rate)
        );
    }
}

/// Conversations: one line per turn (cold first turn against warm later ones), then sessions.
fn conversation_lines(s: &mut String, c: &crate::results::aggregate::summary::SessionSummary) {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::duration_ms);
    for t in &c.by_turn {
        let _ = writeln!(
            s,
            "turn {:>2}: {:>5} done {:>3} failed · TTFT p50 {} p99 {} · cache {}",
            t.turn,
            t.completed,
            t.failed,
            ms(t.ttft_ms.as_ref().map(|x| x.stat(Stat::P50))),
            ms(t.ttft_ms.as_ref().map(|x| x.stat(Stat::P99))),
            t.cache.ratio.map_or_else(|| "–".to_string(), |r| format!("{} of the history", numbers::percent(r)))
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
    let counter = |n: Norm| m.counter(n).map(|v| numbers::count(v.round()));
    if let (Some(p), Some(g)) = (counter(Norm::PromptTokens), counter(Norm::GenerationTokens)) {
        parts.push(format!("prompt {p} / generated {g} tokens"));
    }
    for (label, norm) in [("running", Norm::Running), ("waiting", Norm::Waiting), ("KV cache", Norm::KvCacheUsage)] {
        if let Some(g) = m.gauges.get(&norm) {
            parts.push(format!(
                "{label} max {} mean {}",
                numbers::significant(g.max, 3),
                numbers::significant(g.mean, 3)
            ));
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

/// The level's GPU telemetry in one line: `GPU (1 GPU, DCGM) · utilisation mean 37.4 % max 75 %
/// · memory peak 26,624 MiB · power mean 190 W max 310 W · energy 3,166 J (counter) · 0.5 J per
/// output token`.
fn gpu_line(g: &crate::request::server_metrics::GpuTelemetry) -> String {
    let plural = if g.gpu_count == 1 { "" } else { "s" };
    let mut parts = vec![format!("GPU ({} GPU{plural}, DCGM)", g.gpu_count)];
    let sig = |v: f64| numbers::significant(v, 3);
    if let (Some(mean), Some(max)) = (g.utilization_mean_pct, g.utilization_max_pct) {
        parts.push(format!("utilisation mean {} % max {} %", sig(mean), sig(max)));
    }
    if let Some(peak) = g.memory_used_peak_mib {
        parts.push(format!("memory peak {} MiB", numbers::count(peak.round())));
    }
    if let (Some(mean), Some(max)) = (g.power_mean_w, g.power_max_w) {
        parts.push(format!("power mean {} W max {} W", sig(mean), sig(max)));
    }
    if let (Some(e), Some(source)) = (g.energy_j, g.energy_source) {
        let source = match source {
            crate::request::server_metrics::EnergySource::Counter => "counter",
            crate::request::server_metrics::EnergySource::PowerIntegral => "power integrated",
            crate::request::server_metrics::EnergySource::Mixed => "counter and power",
        };
        parts.push(format!("energy {} J ({source})", numbers::count(e.round())));
    }
    if let Some(j) = g.joules_per_output_token {
        parts.push(format!("{} J per output token", sig(j)));
    }
    parts.join(" · ")
}

/// The distributions, one row per metric: each time row in one unit chosen from its own range
/// (named in the label, so no cell carries a suffix), counts as counts, rates as rates.
fn detail_table(s: &mut String, a: &LevelSummary) {
    let _ = writeln!(s, "{:<27}{:>11}{:>11}{:>11}{:>11}{:>9}", "", "mean", "p50", "p90", "p99", "samples");
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
        let stats = [Stat::Mean, Stat::P50, Stat::P90, Stat::P99].map(|stat| a.distributions.stat(metric, stat));
        let unit = TimeUnit::for_column(stats.iter().flatten().copied());
        let cell = |v: Option<f64>, mean: bool| match v {
            None => "–".to_string(),
            Some(v) if metric.ms_suffix() => unit.number(v),
            // Token counts are integers but for their mean; rates and ratios take a few digits.
            Some(v) if matches!(metric, Metric::PromptTokens | Metric::CompletionTokens) => {
                if mean {
                    numbers::count(v)
                } else {
                    numbers::count(v.round())
                }
            }
            Some(v) if matches!(metric, Metric::DecodeTokS) => numbers::rate(v),
            Some(v) => numbers::significant(v, 3),
        };
        let label = if metric.ms_suffix() { format!("{label} ({})", unit.suffix()) } else { label.to_string() };
        let _ = writeln!(
            s,
            "{label:<27}{:>11}{:>11}{:>11}{:>11}{:>9}",
            cell(stats[0], true),
            cell(stats[1], false),
            cell(stats[2], false),
            cell(stats[3], false),
            numbers::thousands(a.distributions.samples(metric) as u64)
        );
    }
}

/// An objective's observed value in its key's unit: `_ms` keys as durations, rates and shares
/// with a few significant digits.
pub fn observed(key: &str, v: f64) -> String {
    if key.ends_with("_ms") { numbers::duration_ms(v) } else { numbers::significant(v, 3) }
}

/// `✓ ttft_p99_ms ≤ 500: 7.24 ms`, as k6 marks its thresholds.
pub fn objective_mark(c: &SloResult) -> String {
    let bound = match c.bound {
        Bound::AtMost => "≤",
        Bound::AtLeast => "≥",
    };
    let observed = c.observed.map_or_else(|| "no samples".to_string(), |v| observed(&c.key, v));
    format!(
        "{} {} {bound} {}: {observed}",
        if c.passed { "✓" } else { "✗" },
        c.key,
        numbers::significant(c.threshold, 6)
    )
}

/// A level as a line names it: `c=4`, or `rate 2.5 req/s` (so the offered rate is not read as
/// the achieved one next to it).
pub fn name(a: &LevelSummary) -> String {
    match a.load.rate {
        Some(_) => format!("rate {}", a.pacing.label()),
        None => a.pacing.label(),
    }
}

/// What a level's verdicts add up to in a word or two: `valid`, `INVALID`, `interrupted`.
pub fn validity(a: &LevelSummary) -> &'static str {
    if a.interrupted {
        "interrupted"
    } else if a.population.performance_eligible_requests == 0 {
        "no figure"
    } else if a.load.validity.valid {
        "valid"
    } else {
        "INVALID"
    }
}

/// The line a sweep or a search prints as each level ends:
/// `c=4  32/32 ok  429 req/s  14,212 tok/s  TTFT p99 7.24 ms  valid`.
pub fn level_line(a: &LevelSummary) -> String {
    let mut s = format!("{:<7} {}/{} ok", name(a), numbers::thousands(a.completed), numbers::thousands(a.requests));
    if a.failed > 0 {
        let _ = write!(s, " ({} failed)", numbers::thousands(a.failed));
    }
    if a.population.performance_eligible_requests > 0 {
        let rps = a.rates.request_throughput_rps.map_or_else(|| "–".to_string(), numbers::rate);
        let _ = write!(s, "  {rps} req/s");
        match (&a.unstreamed, a.rates.throughput_tok_s) {
            (Some(u), _) => {
                let _ = write!(
                    s,
                    "  {} input tok/s",
                    u.input_throughput_tok_s.map_or_else(|| "–".to_string(), numbers::rate)
                );
            }
            (None, Some(t)) => {
                let _ = write!(s, "  {} tok/s", numbers::rate(t));
            }
            (None, None) => {}
        }
        let latency = match a.distributions.stat(Metric::Ttft, Stat::P99) {
            Some(v) if a.unstreamed.is_none() => Some(("TTFT", v)),
            _ => a.distributions.stat(Metric::E2e, Stat::P99).map(|v| ("E2E", v)),
        };
        if let Some((name, v)) = latency {
            let _ = write!(s, "  {name} p99 {}", numbers::duration_ms(v));
        }
    }
    if let Some(slo) = &a.slo {
        let _ = write!(s, "  SLOs {}", if slo.passed { "met" } else { "missed" });
    }
    let _ = write!(s, "  {}", validity(a));
    s
}

/// The answer box of a single level: its headline (throughput, TTFT and TPOT p50/p99, goodput,
/// validity, failures and canaries) and every objective marked, before the detail table.
pub fn level_answer(a: &LevelSummary, info: &RunInfo) -> String {
    let engine = info.engine.as_deref().map(|e| format!(" · {e}")).unwrap_or_default();
    let title = format!("{} · {}{engine}", a.pacing.label(), info.model);
    let mut lines = Vec::new();
    if a.population.performance_eligible_requests == 0 {
        lines.push("no latency or throughput figure: no request is in the distributions (see below)".to_string());
    } else {
        let mut rates =
            vec![format!("{} req/s", a.rates.request_throughput_rps.map_or_else(|| "–".to_string(), numbers::rate))];
        match &a.unstreamed {
            Some(u) => rates.push(format!(
                "{} input tok/s",
                u.input_throughput_tok_s.map_or_else(|| "–".to_string(), numbers::rate)
            )),
            None => rates.push(format!(
                "{} output tok/s",
                a.rates.throughput_tok_s.map_or_else(|| "–".to_string(), numbers::rate)
            )),
        }
        if let Some(g) = a.rates.goodput.and_then(|g| g.rps) {
            rates.push(format!("goodput {} req/s", numbers::rate(g)));
        }
        lines.push(rates.join(" · "));
        let pair = |m: Metric, name: &str| {
            let (p50, p99) = (a.distributions.stat(m, Stat::P50), a.distributions.stat(m, Stat::P99));
            let unit = TimeUnit::for_column([p50, p99].into_iter().flatten());
            let show = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| unit.show(v));
            format!("{name} p50 {} · p99 {}", show(p50), show(p99))
        };
        lines.push(if a.unstreamed.is_some() {
            pair(Metric::E2e, "E2E")
        } else {
            format!("{} · {}", pair(Metric::Ttft, "TTFT"), pair(Metric::Tpot, "TPOT"))
        });
    }
    let mut verdict = vec![
        validity(a).to_string(),
        format!("{}/{} completed", numbers::thousands(a.completed), numbers::thousands(a.requests)),
        format!("{} failed", numbers::thousands(a.failed)),
    ];
    if info.request_canaries {
        verdict.push(format!("canaries {}/{} passed", a.canaries.passed, a.canaries.samples));
    }
    if let Some(so) = &a.structured_output {
        verdict.push(schema_words(so));
    }
    if !a.load.validity.valid && !a.load.validity.reasons.is_empty() {
        verdict.push(a.load.validity.reasons.join("; "));
    }
    lines.push(verdict.join(" · "));
    if let Some(slo) = &a.slo {
        lines.extend(slo.criteria.iter().map(objective_mark));
    }
    boxed(&title, &lines)
}

/// A titled box of lines: `┌ title`, `│ line`, `└ last line`.
pub fn boxed(title: &str, lines: &[String]) -> String {
    let mut s = format!("\n┌ {title}\n");
    for (i, line) in lines.iter().enumerate() {
        let edge = if i + 1 == lines.len() { '└' } else { '│' };
        let _ = writeln!(s, "{edge} {line}");
    }
    s
}
