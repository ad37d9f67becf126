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
    let load = match (&s.workload.prompts, &s.load.pacing) {
        (super::PromptSource::Sessions(spec), Pacing::Closed { .. }) => format!(
            "conversations: {} held at once, each through its think time{}",
            levels.join(", "),
            spec.in_flight.map(|m| format!(", at most {m} requests in flight across them")).unwrap_or_default()
        ),
        (super::PromptSource::Sessions(_), Pacing::Open { arrival, max_in_flight, .. }) => format!(
            "conversations arriving open loop ({}) at {} per second, turns closed loop inside each{}",
            arrival.name(),
            levels.join(", "),
            max_in_flight.map(|m| format!(", at most {m} requests in flight")).unwrap_or_default()
        ),
        _ => load,
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
            super::PromptSource::Sessions(spec) => match spec.conversations {
                Some(n) => format!("{n} conversations"),
                None => "unbounded".to_string(),
            },
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
    if let super::PromptSource::Sessions(spec) = &s.workload.prompts {
        let _ = write!(out, "{}", sessions_text(spec, s));
    }
    let sizing = match &s.workload.sizing {
        SizingMode::Tokenizer { path, .. } => {
            format!("exact counts with {} (one probe measures the template)", path.display())
        }
        SizingMode::Calibrate => "calibrated against the server with a few probe requests before the run".to_string(),
        SizingMode::Estimate => "built-in estimate, no probe".to_string(),
    };
    let _ = writeln!(out, "prompt sizing: {sizing}");
    let cache = match (&s.workload.prompts, s.workload.prompt_cache) {
        (super::PromptSource::Trace(_), _) => {
            "blocks shared as the trace's hash ids say, a unique tail per request".to_string()
        }
        (super::PromptSource::Sessions(_), _) => {
            "a conversation's turns share its history, a group's conversations their system prompt".to_string()
        }
        (_, PromptCache::Unique { .. }) => "unique prefix per request".to_string(),
        (_, PromptCache::SharedPrefix { tokens, burst, .. }) => {
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

/// A conversation workload's shape and policies.
fn sessions_text(spec: &crate::session::SessionSpec, s: &Scenario) -> String {
    let mut out = String::new();
    let output = spec.output_tokens.map_or_else(|| "the recorded answer's length".to_string(), |d| d.describe(""));
    let _ = writeln!(
        out,
        "conversations: output {output} tokens a turn (max_tokens{}), think time {}",
        if s.output.ignore_eos { " with ignore_eos" } else { ", a ceiling with the openai dialect" },
        spec.think_time_s.describe(" s")
    );
    if spec.system_prompt_tokens > 0 {
        let _ = writeln!(
            out,
            "  system prompt: {} tokens, {} groups chosen {}",
            spec.system_prompt_tokens,
            spec.system_prompt_groups,
            spec.system_prompt_zipf
                .map_or_else(|| "uniformly".to_string(), |a| format!("with Zipf weights (exponent {a})"))
        );
    }
    let _ = writeln!(
        out,
        "  history: {:?} answers, reasoning {:?}; oldest turns dropped to fit max_context_tokens {}",
        spec.history, spec.history_reasoning, s.workload.max_context_tokens
    );
    let _ = writeln!(
        out,
        "  headers: session id in [{}]{}{}",
        spec.affinity_headers.join(", "),
        spec.echo_header.as_ref().map(|h| format!("; {h} echoed back")).unwrap_or_default(),
        spec.backend_header.as_ref().map(|h| format!("; backend recorded from {h}")).unwrap_or_default()
    );
    out.to_lowercase()
}
