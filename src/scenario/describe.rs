//! The resolved plan in words, for `anvil-load validate`.

use std::fmt::Write as _;

use super::{Endpoint, Scenario};
use crate::workload::Workload;

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
    let levels: Vec<String> = s.load.levels().iter().map(u32::to_string).collect();
    let _ = writeln!(out, "load: closed loop, concurrency {}", levels.join(", "));
    let limit = match (s.run.requests, s.run.duration) {
        (Some(n), Some(d)) => format!("{n} requests or {}, whichever comes first", humantime::format_duration(d)),
        (Some(n), None) => format!("{n} requests"),
        (None, Some(d)) => format!("{} of issuing", humantime::format_duration(d)),
        (None, None) => "unbounded".to_string(),
    };
    let _ = writeln!(out, "per level: {limit}; seed {}", s.run.seed);
    let context: Vec<String> = s.workload.context.choices.iter().map(|(t, w)| format!("{t} ×{w}")).collect();
    let _ = writeln!(
        out,
        "context: {} tokens; max_context_tokens {}; max_tokens {}",
        if s.workload.context.is_single() { s.workload.context.largest().to_string() } else { context.join(", ") },
        s.workload.max_context_tokens,
        s.workload.max_tokens
    );
    let _ = writeln!(
        out,
        "prompt cache: {}; canaries: {}",
        s.workload.prompt_cache.as_str(),
        if s.workload.canaries { "on" } else { "off" }
    );
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
    let first = Workload::new(s).prepare(0);
    let _ = writeln!(
        out,
        "request 0: planned context {} tokens, prompt target {} tokens (built-in estimate), body {} bytes{}",
        first.planned_context_tokens,
        first.prompt_target_tokens,
        first.body.len(),
        first.canary.map(|m| format!(", canary {m}")).unwrap_or_default()
    );
    out
}
