//! `anvil-load validate FILE`: the resolved plan in words, nothing sent. Every setting that
//! changes what is sent, how it is paced, or what is recorded, section by section as in the
//! scenario reference, and request 0 as the workload builds it.

use std::fmt::Write as _;

use super::{AppError, load_scenario};
use crate::cli::{RunArgs, exit};
use crate::plan::scenario::bounds::{fmt_duration, fmt_number};
use crate::plan::scenario::{
    Api, Arrival, Bound, Endpoint, MetricsEndpoint, Pacing, PhaseLength, PromptCache, PromptEncoding, PromptSource,
    Scenario, SizingMode,
};
use crate::redact::{redact_url, redact_urls_in};
use crate::request::workload::sizing::default_overhead;
use crate::request::workload::{Sizer, Workload};

/// Validate the scenario (with the command line's overrides) and print its plan.
pub(super) fn run(args: &RunArgs) -> Result<u8, AppError> {
    let scenario = load_scenario(args)?;
    // Every URL the plan names (a trace or dataset path given as one included) through the one
    // redaction.
    print!("{}", redact_urls_in(&describe(&scenario)));
    println!("valid; nothing was sent");
    Ok(exit::OK)
}

/// What set a key, in words: an option, a `--set`, or the environment.
fn provenance_origin(origin: &str) -> String {
    if origin.starts_with('-') { format!("command line ({origin})") } else { format!("environment (${origin})") }
}

fn phase(p: Option<PhaseLength>) -> String {
    match p {
        None => "none".to_string(),
        Some(PhaseLength::Requests(n)) => format!("first {n} requests"),
        Some(PhaseLength::Time(t)) => format!("{} of sending", fmt_duration(t)),
    }
}

fn label(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("none")
}

/// The plan of a validated scenario, for people.
pub fn describe(s: &Scenario) -> String {
    let mut out = String::new();
    if s.built_in {
        let _ = writeln!(
            out,
            "scenario: the built-in one (scenarios/default.toml); every key below not listed under \"set by\" is its default"
        );
    } else {
        let _ = writeln!(out, "scenario: {}", s.path.display());
    }
    if !s.provenance.is_empty() {
        let _ = writeln!(out, "set by, instead of the {}:", if s.built_in { "built-in scenario" } else { "file" });
        let width = s.provenance.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, origin) in &s.provenance {
            let _ = writeln!(out, "  {key:<width$}  {}", provenance_origin(origin));
        }
    }
    for note in &s.notes {
        let _ = writeln!(out, "note: {note}");
    }
    target(&mut out, s);
    load(&mut out, s);
    limits(&mut out, s);
    workload(&mut out, s);
    client(&mut out, s);
    first_request(&mut out, s);
    out
}

/// Where requests go, in which API and dialect, with which key and extra fields.
fn target(out: &mut String, s: &Scenario) {
    let t = &s.target;
    match &t.endpoint {
        Endpoint::Remote { base_url } => {
            let _ = writeln!(
                out,
                "target: {} ({:?} API){}",
                redact_url(&crate::plan::scenario::url_rules::endpoint(base_url, t.api.path())),
                t.api,
                if t.redact_base_url { "; written to the artifact as [redacted]" } else { "" }
            );
            if let Some(r) = &t.replicas {
                let urls: Vec<String> = r.base_urls.iter().map(|u| redact_url(u)).collect();
                let _ = writeln!(
                    out,
                    "replicas: {} ({}), balance {}; the first is checked and calibrated against",
                    r.base_urls.len(),
                    urls.join(", "),
                    r.balance.name()
                );
            }
        }
        Endpoint::Simulator { profile, time_per_output_token_ms } => {
            let tpot = time_per_output_token_ms.map_or_else(String::new, |ms| format!(", {ms} ms per output token"));
            let _ = writeln!(out, "target: embedded simulator, profile {profile}{tpot} ({:?} API)", t.api);
        }
    }
    let dialect = format!("{:?}", t.dialect).to_lowercase();
    if let Some(mix) = &t.models {
        let shares: Vec<String> =
            mix.names.iter().zip(&mix.shares).map(|(n, s)| format!("{n} {:.1}%", s * 100.0)).collect();
        let _ = writeln!(
            out,
            "models: {} ({}, sticky per conversation); dialect {dialect}",
            shares.join(", "),
            mix.assignment.name()
        );
    } else if t.model_named {
        let _ = writeln!(out, "model: {}; dialect {dialect}", t.model);
    } else if matches!(t.endpoint, Endpoint::Simulator { .. }) {
        let _ = writeln!(out, "model: not named; the simulator's own ({}); dialect {dialect}", t.model);
    } else {
        let _ = writeln!(
            out,
            "model: not named; read from the server's /models list before the run (not known now: nothing is sent to validate), used when it lists exactly one, else give --model; dialect {dialect}"
        );
    }
    let _ = writeln!(out, "labels: engine {}, gpu {}", label(&t.engine), label(&t.gpu));
    if let Some(var) = &t.api_key_env {
        let header = if t.api == Api::Messages {
            " (sent as a bearer token and as x-api-key)"
        } else if t.dialect == crate::plan::scenario::Dialect::Azure {
            " (sent as api-key)"
        } else {
            ""
        };
        let _ = writeln!(out, "api key: from ${var} (set){header}");
    }
    if !t.headers.is_empty() {
        let names: Vec<&str> = t.headers.names().collect();
        let _ = writeln!(out, "headers on every request: {} (values never shown)", names.join(", "));
    }
    if !t.query.is_empty() {
        let names: Vec<&str> = t.query.names().collect();
        let _ = writeln!(out, "query parameters on every request: {} (values never shown)", names.join(", "));
    }
    if let Some(command) = &t.api_key_command {
        let again = command.refresh.map_or_else(String::new, |d| format!(", again every {}", fmt_duration(d)));
        let _ = writeln!(
            out,
            "api key: printed by {} (not run to validate; run before the run{again}, and once after a 401)",
            command.program
        );
    }
    if let Some(version) = &t.anthropic_version {
        let _ = writeln!(out, "anthropic-version: {version}");
    }
    if let Some(m) = &t.metrics {
        let from = match &m.endpoint {
            MetricsEndpoint::Url { url } => redact_url(url),
            MetricsEndpoint::BesideBaseUrl => "/metrics beside the base URL".to_string(),
        };
        let _ = writeln!(out, "server metrics: scraped from {from} every {}", fmt_duration(m.interval));
    }
    if !t.extra_body.is_empty() {
        let fields: Vec<String> = t.extra_body.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = writeln!(out, "extra request fields: {}", fields.join(", "));
    }
    if t.continuous_usage_stats {
        let _ = writeln!(out, "usage on every chunk: stream_options.continuous_usage_stats = true");
    }
}

/// How levels are paced, searched and judged.
fn load(out: &mut String, s: &Scenario) {
    let levels: Vec<String> = s.load.pacing.levels().iter().map(|l| fmt_number(l.level())).collect();
    let load = match &s.load.pacing {
        Pacing::Closed { max_rate, .. } => format!(
            "closed loop, concurrency {}{}",
            levels.join(", "),
            max_rate.map(|r| format!(", at most {} starts/s", fmt_number(r))).unwrap_or_default()
        ),
        Pacing::Open { arrival: Arrival::Trace { time_scale }, max_in_flight, overload, .. } => format!(
            "trace replay: each row at start + {time_scale} × its offset (mean {:.3} req/s){}",
            s.load.pacing.levels().first().map_or(0.0, |l| l.level()),
            max_in_flight
                .map(|m| format!(", at most {m} in flight ({overload:?} beyond)").to_lowercase())
                .unwrap_or_default()
        ),
        Pacing::Open { arrival, ramp, max_in_flight, overload, .. } => format!(
            "open loop, {} arrivals{} at {} req/s{}{}",
            arrival.name(),
            match arrival {
                Arrival::Gamma { burstiness } => format!(" (burstiness {})", fmt_number(*burstiness)),
                _ => String::new(),
            },
            levels.join(", "),
            ramp.map(|r| format!(", ramp {}", fmt_duration(r))).unwrap_or_default(),
            max_in_flight
                .map(|m| format!(", at most {m} in flight ({overload:?} beyond)").to_lowercase())
                .unwrap_or_else(|| ", in flight uncapped".to_string())
        ),
    };
    let load = match (&s.workload.prompts, &s.load.pacing) {
        (PromptSource::Sessions(spec), Pacing::Closed { .. }) => format!(
            "conversations: {} held at once, each through its think time{}",
            levels.join(", "),
            spec.in_flight.map(|m| format!(", at most {m} requests in flight across them")).unwrap_or_default()
        ),
        (PromptSource::Sessions(_), Pacing::Open { arrival, max_in_flight, .. }) => format!(
            "conversations arriving open loop ({}) at {} per second, turns closed loop inside each{}",
            arrival.name(),
            levels.join(", "),
            max_in_flight.map(|m| format!(", at most {m} requests in flight")).unwrap_or_default()
        ),
        _ => load,
    };
    let _ = writeln!(
        out,
        "load: {load}; invalid above a dispatch lag p99 of {} or a client lateness p99 of {}",
        fmt_duration(s.load.max_dispatch_lag),
        fmt_duration(s.load.max_client_lateness)
    );
    if !s.load.reset_cache.is_none() {
        let _ = writeln!(
            out,
            "cache reset ({}) on every replica before each level; a failed reset stops the run",
            s.load.reset_cache.name()
        );
    }
    if let Some(search) = s.load.search {
        let _ = writeln!(
            out,
            "capacity search by {:?} from {} to {} in at most {} steps",
            search.by,
            fmt_number(search.min),
            fmt_number(search.max),
            search.max_steps,
        );
    }
    if !s.slo.criteria.is_empty() {
        let criteria: Vec<String> = s
            .slo
            .criteria
            .iter()
            .map(|c| {
                let op = if c.bound == Bound::AtMost { "≤" } else { "≥" };
                format!("{} {op} {}", c.objective.key(), fmt_number(c.threshold))
            })
            .collect();
        let _ = writeln!(out, "objectives: {}", criteria.join(", "));
    }
}

/// When a level ends, what is kept out of its distributions, and what is recorded.
fn limits(out: &mut String, s: &Scenario) {
    let r = &s.run;
    let limit = match (r.requests, r.duration) {
        (Some(n), Some(d)) => format!("{n} requests or {}, whichever comes first", fmt_duration(d)),
        (Some(n), None) => format!("{n} requests"),
        (None, Some(d)) => format!("{} of issuing", fmt_duration(d)),
        (None, None) => match &s.workload.prompts {
            PromptSource::Trace(t) => format!("every replayed row ({})", t.rows.len()),
            PromptSource::Sessions(spec) => match spec.conversations {
                Some(n) => format!("{n} conversations"),
                None => "unbounded".to_string(),
            },
            _ => "unbounded".to_string(),
        },
    };
    let _ = writeln!(out, "per level: {limit}; seed {}; grace {}", r.seed, fmt_duration(r.grace));
    let _ = writeln!(out, "excluded from the distributions: warm-up {}, cool-down {}", phase(r.warmup), {
        match r.cooldown {
            Some(PhaseLength::Time(t)) => format!("last {} of sending", fmt_duration(t)),
            Some(PhaseLength::Requests(n)) => format!("last {n} requests"),
            None => "none".to_string(),
        }
    });
    let _ = writeln!(
        out,
        "recording: snapshots {}; records file {}",
        r.snapshot_interval.map_or_else(|| "off".to_string(), |i| format!("every {}", fmt_duration(i))),
        if r.keep_records { "kept (<out>/<run_id>.records.ndjson)" } else { "temporary (--records FILE keeps it)" }
    );
    let _ = writeln!(
        out,
        "artifact labels: protocol {}, tier {}, clock domain {}",
        label(&r.protocol),
        label(&r.tier),
        label(&r.clock_domain_id)
    );
}

/// What each request asks for: prompts, their sizing and caching, output, sampling, serve flags.
fn workload(out: &mut String, s: &Scenario) {
    let w = &s.workload;
    let _ = writeln!(
        out,
        "context: {}; max_context_tokens {}; max_tokens {}",
        w.prompts.describe(),
        w.max_context_tokens,
        w.max_tokens
    );
    if let PromptSource::Trace(t) = &s.workload.prompts {
        let _ = write!(out, "{}", trace_text(t, s));
    }
    if let PromptSource::Sessions(spec) = &s.workload.prompts {
        let _ = write!(out, "{}", sessions_text(spec, s));
    }
    let sizing = match &w.sizing {
        SizingMode::Tokenizer { path, .. } => {
            format!("exact counts with {} (probes measure the template)", path.display())
        }
        SizingMode::Calibrate => "calibrated against the server with a few probe requests before the run".to_string(),
        SizingMode::Estimate => "built-in estimate, no probe".to_string(),
    };
    let _ = writeln!(out, "prompt sizing: {sizing}");
    if let Some(n) = s.workload.batch_size {
        let what = if s.target.api == Api::Rerank { "documents" } else { "inputs" };
        let _ = writeln!(out, "batch: {n} {what} per request, each a prompt of the planned context");
    }
    if s.workload.prompt_encoding == PromptEncoding::TokenIds {
        let _ = writeln!(out, "prompt encoding: token ids of the local tokenizer, exactly the planned length");
    }
    let cache = match (&w.prompts, w.prompt_cache) {
        (PromptSource::Trace(_), _) => {
            "blocks shared as the trace's hash ids say, a unique tail per request".to_string()
        }
        (PromptSource::Sessions(_), _) => {
            "a conversation's turns share its history, a group's conversations their system prompt".to_string()
        }
        (_, PromptCache::Unique { .. }) => "unique prefix per request".to_string(),
        (_, PromptCache::SharedPrefix { tokens, burst, .. }) => {
            format!("{tokens} shared prefix tokens{}", if burst { ", one warm-up request then a burst" } else { "" })
        }
    };
    let levels_share = w.prompt_cache.reproducible() && (s.load.pacing.levels().len() > 1 || s.load.search.is_some());
    let _ = writeln!(
        out,
        "prompt cache: {cache}; prompts {}; canaries {}",
        match (w.prompt_cache.reproducible(), levels_share) {
            (true, true) => "identical across runs (reproducible), and every level sends the same prompts",
            (true, false) => "identical across runs (reproducible)",
            (false, _) => "salted per run and per level",
        },
        if w.canaries { "on" } else { "off" }
    );
    if let Some(rf) = &w.response_format {
        let _ = writeln!(out, "{}", crate::plan::scenario::structured_rules::describe(rf));
    }
    let o = &s.output;
    let _ = writeln!(
        out,
        "output: ignore_eos {}, min_tokens {}, response_words {} ({})",
        o.ignore_eos,
        o.min_tokens.map_or_else(|| "not sent".to_string(), |n| n.to_string()),
        o.response_words.map_or_else(|| "not asked".to_string(), |n| n.to_string()),
        o.policy.as_str()
    );
    let fmt_opt = |v: Option<f64>| v.map_or_else(|| "server default".to_string(), fmt_number);
    let _ =
        writeln!(out, "sampling: temperature {}, top_p {}", fmt_opt(s.sampling.temperature), fmt_opt(s.sampling.top_p));
    let _ = writeln!(
        out,
        "serve: enable_thinking {}, reasoning_effort {}",
        s.serve.enable_thinking().map_or_else(|| "not sent".to_string(), |b| b.to_string()),
        s.serve.reasoning_effort.map_or_else(|| "not sent".to_string(), |e| format!("{e:?}").to_lowercase())
    );
}

/// The client's protocol, timeouts and retries.
fn client(out: &mut String, s: &Scenario) {
    let c = &s.client;
    let _ = writeln!(
        out,
        "client: {}; timeouts connect {}, first output {}, idle {}, whole request {}{}",
        if c.http2 { "HTTP/2 (prior knowledge)" } else { "HTTP/1.1 with keep-alive" },
        fmt_duration(c.connect),
        fmt_duration(c.first_byte),
        fmt_duration(c.idle),
        fmt_duration(c.request),
        if c.request_given.is_some() { "" } else { " (first output + 1 s per max_tokens)" }
    );
    let retry = &c.retry;
    let _ = if retry.max_retries == 0 {
        writeln!(out, "retries: none")
    } else {
        let kinds: Vec<String> = retry.on.iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "retries: up to {} on {}, back-off {} doubling",
            retry.max_retries,
            kinds.join(", "),
            fmt_duration(retry.backoff)
        )
    };
}

/// Request 0 as the workload builds it.
fn first_request(out: &mut String, s: &Scenario) {
    // Before calibration the plan can only show the built-in estimate.
    let api = s.target.api;
    let sizer = match &s.workload.sizing {
        SizingMode::Tokenizer { tokenizer, .. } => {
            Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead: default_overhead(api) }
        }
        _ => Sizer::Estimate { overhead: default_overhead(api) },
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
}

/// A trace's statistics and what was left out of it.
fn trace_text(t: &crate::plan::trace::Trace, s: &Scenario) -> String {
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
fn sessions_text(spec: &crate::plan::session::SessionSpec, s: &Scenario) -> String {
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
