//! Validation of `[workload.trace]`: a production trace replayed row by row. The trace file is
//! read and checked here, once, so a bad row stops the run before anything is sent; the trace
//! then decides the prompts (sizes and shared blocks), the output lengths and the arrivals.

use std::sync::Arc;
use std::time::Duration;

use super::bounds::{fmt_duration, fmt_number};
use super::checker::Checker;
use super::raw::{self, RawLoad, RawTrace};
use super::{Arrival, Load, Pacing, PromptSource, ScenarioError};
use crate::plan::trace::{MAX_TRACE_SPAN, Trace, TraceFormat, TraceOptions};

/// Why `output.min_tokens` and `output.response_words` do not apply to a trace replay.
pub(super) const SETS_OUTPUT: &str = "a trace replay: the trace sets every request's output length";

/// Read and check the trace; the prompt source it becomes.
pub(super) fn source(
    c: &Checker,
    t: &RawTrace,
    w: &raw::RawWorkload,
    limits: (u32, u32),
    seed: u64,
) -> Result<PromptSource, ScenarioError> {
    for (key, set) in
        [("workload.context_tokens", w.context_tokens.is_some()), ("workload.prompts", w.prompts.is_some())]
    {
        if set {
            return Err(c.err(
                key,
                "does not apply to a trace replay: the trace sets every prompt's length",
                "remove it, or remove [workload.trace]",
            ));
        }
    }
    if w.prompt_cache != raw::RawPromptCache::Unique {
        return Err(c.err(
            "workload.prompt_cache",
            "\"shared-prefix\" does not apply to a trace replay: the trace's hash ids say which prompts share blocks",
            "remove prompt_cache, or remove [workload.trace]",
        ));
    }
    let format = TraceFormat::parse(t.format.trim()).ok_or_else(|| {
        c.err(
            "workload.trace.format",
            format!("{:?} is not a trace format", t.format),
            format!("use one of: {}", TraceFormat::NAMES.join(", ")),
        )
    })?;
    let block_size = match t.block_size {
        None => None,
        Some(n) if (1..=1_048_576).contains(&n) => Some(n as u32),
        Some(n) => {
            return Err(c.err(
                "workload.trace.block_size",
                format!("{n} is not a block size"),
                "tokens per hash id, e.g. 512",
            ));
        }
    };
    let time_scale = match t.time_scale {
        None => 1.0,
        // A million times faster at most: below that every gap is below a timer's resolution.
        Some(s) if (1e-6..=1000.0).contains(&s) => s,
        Some(s) => {
            return Err(c.err(
                "workload.trace.time_scale",
                format!("{} is not a usable time scale (0.000001 to 1000)", fmt_number(s)),
                "give a positive factor: 1 replays in real time, 0.1 ten times faster",
            ));
        }
    };
    let max_gap = match &t.max_gap {
        None => None,
        Some(text) => Some(c.duration("workload.trace.max_gap", Some(text), Duration::ZERO)?),
    };
    let window = match t.window.as_deref() {
        None => None,
        Some([start, end]) => {
            let parse = |text: &str| {
                let d = humantime::parse_duration(text.trim()).map_err(|e| {
                    c.err(
                        "workload.trace.window",
                        format!("{text:?} is not a duration ({e})"),
                        "write [\"10m\", \"20m\"]",
                    )
                })?;
                // On the trace's clock, which spans at most MAX_TRACE_SPAN.
                if d > MAX_TRACE_SPAN {
                    return Err(c.err(
                        "workload.trace.window",
                        format!("{text:?} is beyond the longest trace clock ({})", fmt_duration(MAX_TRACE_SPAN)),
                        "give offsets from the trace's first row, e.g. [\"10m\", \"20m\"]",
                    ));
                }
                Ok(d)
            };
            let (start, end) = (parse(start)?, parse(end)?);
            if start >= end {
                return Err(c.err(
                    "workload.trace.window",
                    "its start is not before its end",
                    "write [start, end] on the trace's clock, e.g. [\"10m\", \"20m\"]",
                ));
            }
            Some((start, end))
        }
        Some(_) => {
            return Err(c.err("workload.trace.window", "must hold two durations", "write [\"10m\", \"20m\"]"));
        }
    };
    let sample = match t.sample {
        None => None,
        Some(f) if f > 0.0 && f <= 1.0 => Some(f),
        Some(f) => {
            return Err(c.err(
                "workload.trace.sample",
                format!("{} is not a fraction in (0, 1]", fmt_number(f)),
                "e.g. sample = 0.25 replays a quarter of the sessions",
            ));
        }
    };
    match t.replay.as_deref().map(str::trim) {
        None | Some("open") => {}
        Some(other) => {
            return Err(c.err(
                "workload.trace.replay",
                format!("{other:?} is not a replay mode this version has"),
                "use \"open\": each row at its own time",
            ));
        }
    }
    let (max_context_tokens, max_output_tokens) = limits;
    let options = TraceOptions {
        format,
        block_size,
        time_scale,
        max_gap,
        window,
        sample,
        seed,
        max_context_tokens,
        max_output_tokens,
    };
    let path = c.path("workload.trace.file", &t.file);
    let trace = Trace::load(&path, &options)
        .map_err(|e| c.err("workload.trace.file", format!("{}: {}", path.display(), e.located()), e.fix.clone()))?;
    Ok(PromptSource::Trace(Arc::new(trace)))
}

/// `[load]` of a trace replay: the trace sets the arrivals; an in-flight cap, its overload
/// policy and the dispatch-lag threshold still apply.
pub(super) fn load(c: &Checker, l: &RawLoad, trace: &Trace) -> Result<Load, ScenarioError> {
    let misplaced = [
        ("load.concurrency", l.concurrency.is_some()),
        ("load.max_rate", l.max_rate.is_some()),
        ("load.rate", l.rate.is_some()),
        ("load.arrival", l.arrival.is_some()),
        ("load.burstiness", l.burstiness.is_some()),
        ("load.ramp", l.ramp.is_some()),
        ("load.search", l.search.is_some()),
        ("load.mode", l.mode == Some(raw::RawLoadMode::Closed)),
    ];
    if let Some((key, _)) = misplaced.iter().find(|(_, set)| *set) {
        return Err(c.err(
            key,
            "does not apply to a trace replay: the trace sets when each request is sent",
            "remove it; workload.trace.time_scale speeds the replay up or slows it down",
        ));
    }
    // The open loop's own rules check the in-flight cap, the overload policy and the threshold.
    let open = RawLoad {
        mode: Some(raw::RawLoadMode::Open),
        rate: Some(raw::Levels::One(1.0)),
        max_in_flight: l.max_in_flight,
        overload: l.overload,
        max_dispatch_lag: l.max_dispatch_lag.clone(),
        max_client_lateness: l.max_client_lateness.clone(),
        ..RawLoad::default()
    };
    let mut load = super::load_rules::load(c, &open)?;
    if let Pacing::Open { rates, arrival, .. } = &mut load.pacing {
        *rates = vec![trace.planned_rate()];
        *arrival = Arrival::Trace { time_scale: trace.time_scale };
    }
    Ok(load)
}
