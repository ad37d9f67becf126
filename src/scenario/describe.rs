//! The resolved plan in words, for `anvil-load validate`.

use std::fmt::Write as _;

use super::{Endpoint, Pacing, PromptCache, Scenario, SizingMode};
use crate::workload::sizing::default_overhead;
use crate::workload::{Sizer, Workload};

pub fn describe(s: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scenario: {}", s.path.display());
    match &s.target.endpoint {
        Endpoint::Remote { base_url } => {
            let _ = writeln!(out, "target: {base_url}{} ({:?} API)", s.target.api.path(), s.target.api);
        }
        Endpoint::Simulator { profile } => {
            let _ = writeln!(out, "target: embedded simulator, profile {profile} ({:?} API)", s.target.api);
        }
    }
    let _ = writeln!(out, "model: {}", s.target.model);
    if let Some(var) = &s.target.api_key_env {
        let _ = writeln!(out, "api key: from ${var} (set)");
    }
    let levels: Vec<String> = s.load.pacing.levels().iter().map(ToString::to_string).collect();
    let load = match &s.load.pacing {
        Pacing::Closed { max_rate, .. } => format!(
            "closed loop, concurrency {}{}",
            levels.join(", "),
            max_rate.map(|r| format!(", at most {r} starts/s")).unwrap_or_default()
        ),
        Pacing::Open { arrival: super::Arrival::Trace { time_scale }, max_in_flight, overload, .. } => format!(
            "trace replay: each row at start + {time_scale} × its offset (mean {:.3} req/s){}",
            s.load.pacing.levels().first().map_or(0.0, |l| l.value()),
            max_in_flight
                .map(|m| format!(", at most {m} in flight ({overload:?} beyond)").to_lowercase())
                .unwrap_or_default()
        ),
        Pacing::Open { arrival, ramp, max_in_flight, overload, .. } => format!(
            "open loop, {} arrivals at {} req/s{}{}",
            arrival.name(),
            levels.join(", "),
            ramp.map(|r| format!(", ramp {}", humantime::format_duration(r))).unwrap_or_default(),
            max_in_flight
                .map(|m| format!(", at most {m} in flight ({overload:?} beyond)").to_lowercase())
                .unwrap_or_default()
        ),
    };
    let _ = writeln!(out, "load: {load}");
    if let Some(search) = s.load.search {
        let criteria: Vec<String> =
            s.slo.criteria.iter().map(|c| format!("{} {:?} {}", c.key, c.bound, c.threshold)).collect();
        let _ = writeln!(
            out,
            "capacity search by {:?} from {} to {} in at most {} steps; SLOs: {}",
            search.by,
            search.min,
            search.max,
            search.max_steps,
            criteria.join(", ")
        );
    }
    let limit = match (s.run.requests, s.run.duration) {
        (Some(n), Some(d)) => format!("{n} requests or {}, whichever comes first", humantime::format_duration(d)),
        (Some(n), None) => format!("{n} requests"),
        (None, Some(d)) => format!("{} of issuing", humantime::format_duration(d)),
        (None, None) => match &s.workload.prompts {
            super::PromptSource::Trace(t) => format!("every replayed row ({})", t.rows.len()),
            _ => "unbounded".to_string(),
        },
    };
    let _ = writeln!(out, "per level: {limit}; seed {}", s.run.seed);
    let _ = writeln!(
        out,
        "context: {}; max_context_tokens {}; max_tokens {}",
        s.workload.prompts.describe(),
        s.workload.max_context_tokens,
        s.workload.max_tokens
    );
    if let super::PromptSource::Trace(t) = &s.workload.prompts {
        let _ = write!(out, "{}", trace_text(t, s));
    }
    let sizing = match &s.workload.sizing {
        SizingMode::Tokenizer { path, .. } => {
            format!("exact counts with {} (one probe measures the template)", path.display())
        }
        SizingMode::Calibrate => "calibrated against the server with a few probe requests before the run".to_string(),
        SizingMode::Estimate => "built-in estimate, no probe".to_string(),
    };
    let _ = writeln!(out, "prompt sizing: {sizing}");
    let cache = match s.workload.prompt_cache {
        PromptCache::Unique { .. } => "unique prefix per request".to_string(),
        PromptCache::SharedPrefix { tokens, burst, .. } => {
            format!("{tokens} shared prefix tokens{}", if burst { ", one warm-up request then a burst" } else { "" })
        }
    };
    let _ = writeln!(
        out,
        "prompt cache: {cache}; prompts {}; canaries {}",
        if s.workload.prompt_cache.reproducible() { "identical across runs (reproducible)" } else { "salted per run" },
        if s.workload.canaries { "on" } else { "off" }
    );
    let o = &s.output;
    if o.ignore_eos || o.min_tokens.is_some() || o.response_words.is_some() {
        let _ = writeln!(
            out,
            "output: ignore_eos {}, min_tokens {}, response_words {} ({})",
            o.ignore_eos,
            o.min_tokens.map_or_else(|| "not sent".to_string(), |n| n.to_string()),
            o.response_words.map_or_else(|| "not asked".to_string(), |n| n.to_string()),
            o.policy.as_str()
        );
    }
    let fmt_opt = |v: Option<f64>| v.map_or_else(|| "server default".to_string(), |x| x.to_string());
    let _ =
        writeln!(out, "sampling: temperature {}, top_p {}", fmt_opt(s.sampling.temperature), fmt_opt(s.sampling.top_p));
    let _ = writeln!(
        out,
        "serve: enable_thinking {}, reasoning_effort {}",
        s.serve.enable_thinking().map_or_else(|| "not sent".to_string(), |b| b.to_string()),
        s.serve.reasoning_effort.map_or_else(|| "not sent".to_string(), |e| format!("{e:?}").to_lowercase())
    );
    let _ = writeln!(
        out,
        "timeouts: connect {}, first byte {}, idle {}",
        humantime::format_duration(s.client.connect),
        humantime::format_duration(s.client.first_byte),
        humantime::format_duration(s.client.idle)
    );
    // Before calibration the plan can only show the built-in estimate.
    let sizer = match &s.workload.sizing {
        SizingMode::Tokenizer { tokenizer, .. } => {
            Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead: default_overhead(s.target.api) }
        }
        _ => Sizer::Estimate { overhead: default_overhead(s.target.api) },
    };
    let first = Workload::new(s, 0, sizer).prepare(0);
    let _ = writeln!(
        out,
        "request 0: planned context {} tokens, prompt target {} tokens (before calibration), body {} bytes{}",
        first.planned_context_tokens,
        first.prompt_target_tokens,
        first.body.len(),
        first.canary.map(|m| format!(", canary {m}")).unwrap_or_default()
    );
    out
}

/// A trace's statistics and what was left out of it.
fn trace_text(t: &crate::trace::Trace, s: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace: {} ({}), {} rows in the file{}",
        t.file.display(),
        t.format.name(),
        t.rows_in_file,
        if t.block_size > 0 { format!(", hash ids of {} tokens", t.block_size) } else { String::new() }
    );
    let k = t.skipped;
    let _ = writeln!(
        out,
        "  not replayed: {} with no output (failed requests), {} outside the window, {} sampled out, {} too large for max_context_tokens or max_tokens",
        k.no_output, k.outside_window, k.sampled_out, k.oversized
    );
    if let Some(gap) = t.max_gap {
        let _ = writeln!(out, "  {} idle gaps capped at {}", t.gaps_capped, humantime::format_duration(gap));
    }
    let _ = write!(out, "{}", t.stats);
    let _ = writeln!(
        out,
        "  output: each row's output length as max_tokens{}",
        if s.output.ignore_eos {
            " with ignore_eos"
        } else {
            "; the openai dialect cannot force a length, so these are ceilings"
        }
    );
    out
}
