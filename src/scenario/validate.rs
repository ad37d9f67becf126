//! Raw TOML → typed `Scenario`, once, with errors a user can act on.
//!
//! Every error names the file, the key path (`load.concurrency`), what is wrong and how to fix
//! it. Command-line overrides are applied before validation, so a bad `--concurrency` is caught
//! by the same rules and the message says which option set the value.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::bounds::fmt_duration;
use super::raw::{self, RawScenario};
use super::{
    Api, ApiKey, ClientSettings, Dialect, Endpoint, Overrides, Phase, ReasoningEffort, RetryPolicy, RunLimits,
    Sampling, Scenario, ServeFlags, Target, ThinkingMode,
};
use super::{url_rules, wording};
use crate::contract::ErrorKind;

/// A scenario that cannot be run. Exit code 2; nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// Key path such as `load.concurrency`; empty when the whole file is at fault.
    pub key: String,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)?;
        } else {
            write!(f, "{}: `{}`: {}", self.file, self.key, self.problem)?;
        }
        if !self.fix.is_empty() {
            write!(f, "\n  fix: {}", self.fix)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

impl ScenarioError {
    pub(super) fn unreadable(path: &Path, e: &std::io::Error) -> Self {
        // A file that exists but is not text needs a different fix than a wrong path.
        let (problem, fix) = if e.kind() == std::io::ErrorKind::InvalidData {
            (
                "the scenario file is not UTF-8 text".to_string(),
                "save it as UTF-8 (TOML files are UTF-8); check that it is the scenario and not another file",
            )
        } else {
            (format!("cannot read the scenario file: {e}"), "check the path; example scenarios live in scenarios/")
        };
        ScenarioError { file: path.display().to_string(), key: String::new(), problem, fix: fix.into() }
    }
}

/// Largest context anyone serves today is ~10M tokens; above this a value is a typo.
pub(super) const CONTEXT_SANITY_LIMIT: i64 = 16 * 1024 * 1024;

pub(super) struct Checker<'a> {
    pub(super) file: String,
    /// Keys whose values came from the command line, with the option that set them.
    overridden: Vec<(&'static str, &'a str)>,
}

impl Checker<'_> {
    pub(super) fn err(&self, key: &str, problem: impl Into<String>, fix: impl Into<String>) -> ScenarioError {
        let mut problem = problem.into();
        if let Some((_, origin)) = self.overridden.iter().find(|(k, _)| *k == key) {
            problem.push_str(&format!(" (value set by {origin})"));
        }
        ScenarioError { file: self.file.clone(), key: key.to_string(), problem, fix: fix.into() }
    }

    /// ` (set by --option)` when the key's value came from the command line.
    pub(super) fn origin(&self, key: &str) -> String {
        self.overridden.iter().find(|(k, _)| *k == key).map(|(_, o)| format!(" (set by {o})")).unwrap_or_default()
    }

    pub(super) fn duration(
        &self,
        key: &str,
        value: Option<&str>,
        default: Duration,
    ) -> Result<Duration, ScenarioError> {
        let Some(text) = value else { return Ok(default) };
        let (min, max) = super::bounds::duration_range(key);
        let range = format!("{} to {}", fmt_duration(min), fmt_duration(max));
        let d = humantime::parse_duration(text.trim()).map_err(|e| {
            self.err(
                key,
                format!("{text:?} is not a duration ({e})"),
                format!("write it like \"90s\", \"10m\" or \"1h 30m\", from {range}"),
            )
        })?;
        if d.is_zero() {
            return Err(self.err(key, "must be longer than zero", format!("give a duration from {range}")));
        }
        if d < min || d > max {
            return Err(self.err(
                key,
                format!("{text:?} is outside the allowed range ({range})"),
                format!("give a duration from {range}"),
            ));
        }
        Ok(d)
    }
}

pub(super) fn validate(path: &Path, text: &str, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let mut raw = parse(&file, text)?;
    let mut c = Checker { file, overridden: Vec::new() };
    let notes = apply_overrides(&mut raw, overrides, &mut c)?;

    let mut target = target(&c, &raw.target)?;
    super::api_rules::check_sources(&c, &raw, &target)?;
    // A trace, or a number of conversations, bounds a level by itself: requests and duration
    // become optional.
    let conversations = raw.workload.sessions.as_ref().is_some_and(|s| s.conversations.is_some());
    let run = run(&c, &raw.run, raw.workload.trace.is_some() || conversations)?;
    target.metrics = super::metrics_rules::server_metrics(&c, &raw.target, &raw.run)?;
    // Traces and conversations pace themselves: their `[load]` is read once they are known.
    let load = if raw.workload.trace.is_some() || raw.workload.sessions.is_some() {
        None
    } else {
        super::session_rules::reject_load_keys(&c, &raw.load)?;
        Some(super::load_rules::load(&c, &raw.load)?)
    };
    let mut workload = super::workload_rules::workload(&c, &raw.workload, path, run.seed)?;
    let mut output = super::workload_rules::output(&c, &raw.output, &workload, target.dialect)?;
    let load = match load {
        Some(load) => load,
        None => match super::trace_rules::is_trace(&workload) {
            Some(trace) => {
                super::session_rules::reject_load_keys(&c, &raw.load)?;
                output = super::trace_rules::output(&c, &output, target.dialect)?;
                super::trace_rules::load(&c, &raw.load, trace)?
            }
            None => match super::session_rules::spec_of(&mut workload) {
                Some(spec) => {
                    output = super::session_rules::output(&c, &output, target.dialect)?;
                    super::session_rules::load(&c, &raw.load, spec)?
                }
                None => super::load_rules::load(&c, &raw.load)?,
            },
        },
    };
    let sampling = sampling(&c, &raw.sampling)?;
    let serve = serve(&c, &raw.serve)?;
    check_thinking_api(&c, &target, &raw.serve)?;
    super::api_rules::check(&c, &raw, &target, &mut workload, &output, &serve)?;
    let first_byte =
        c.duration("client.first_byte_timeout", raw.client.first_byte_timeout.as_deref(), Duration::from_secs(600))?;
    let request_given = match raw.client.request_timeout.as_deref() {
        None => None,
        Some(text) => Some(c.duration("client.request_timeout", Some(text), Duration::ZERO)?),
    };
    let client = ClientSettings {
        connect: c.duration(
            "client.connect_timeout",
            raw.client.connect_timeout.as_deref(),
            Duration::from_secs(10),
        )?,
        first_byte,
        idle: c.duration("client.idle_timeout", raw.client.idle_timeout.as_deref(), Duration::from_secs(120))?,
        request: request_given
            .unwrap_or_else(|| ClientSettings::default_request_timeout(first_byte, workload.max_tokens)),
        request_given,
        retry: retry_policy(&c, &raw.client)?,
        http2: raw.client.http2.unwrap_or(false),
    };
    super::workload_rules::check_extra_body(&c, &target, &serve)?;
    let slo = super::load_rules::slo(&c, &raw.slo, &load)?;
    Ok(Scenario { path: path.to_path_buf(), target, run, load, workload, sampling, serve, output, slo, client, notes })
}

/// TOML syntax first (with line and column), then shape (with the key path).
fn parse(file: &str, text: &str) -> Result<RawScenario, ScenarioError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let at = e
            .span()
            .map(|s| line_col(text, s.start))
            .map(|(l, c)| format!(" at line {l}, column {c}"))
            .unwrap_or_default();
        ScenarioError {
            file: file.to_string(),
            key: String::new(),
            problem: format!("not valid TOML{at}: {}", wording::humanize(e.message())),
            fix: "fix the syntax; see the scenario reference in README.md".into(),
        }
    })?;
    serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        if let Some((key, of_tables)) = wording::table_given_as_list(&table, e.path()) {
            let (problem, fix) = if of_tables {
                (
                    format!("is written as a list of tables ([[{key}]]), but a scenario has one [{key}] table"),
                    format!("write [{key}] with single brackets, once, with its keys below it"),
                )
            } else {
                (
                    format!("is a list, but a scenario has one [{key}] table"),
                    format!("write [{key}] on a line of its own with its keys below it; README.md's scenario reference lists them"),
                )
            };
            return ScenarioError { file: file.to_string(), key, problem, fix };
        }
        let key = e.path().to_string();
        let inner = e.into_inner();
        let raw_message = inner.message().trim().to_string();
        // A key with a fixed set of values: name the values rather than the parser's types.
        let choices = (!raw_message.starts_with("unknown field") && !raw_message.starts_with("missing field"))
            .then(|| wording::choices(&table, &key))
            .flatten();
        let message = match &choices {
            Some(choices) if !raw_message.starts_with("unknown variant") => format!(
                "{} is not one of {choices}",
                wording::value_at(&table, &key).unwrap_or_else(|| "the value".into())
            ),
            _ => wording::humanize(&raw_message),
        };
        let fix = if let Some(choices) = choices {
            format!("use one of {choices}")
        } else if message.starts_with("unknown field") {
            "remove or rename the key; README.md lists every key the scenario accepts".to_string()
        } else if message.starts_with("missing field") {
            "add the key; README.md's scenario reference shows an example".to_string()
        } else if message.ends_with("expected a table") {
            format!("write [{key}] on a line of its own with its keys below it; README.md's scenario reference lists them")
        } else {
            "see README.md's scenario reference for the expected type".to_string()
        };
        ScenarioError {
            file: file.to_string(),
            key: if key == "." { String::new() } else { key },
            problem: message,
            fix,
        }
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Command-line values replace the file's. `--rate` and `--concurrency` also choose the mode
/// (the README says they set it): the file's settings of the other mode are dropped, and the
/// returned notes say which, for `validate` and the console.
fn apply_overrides<'a>(
    raw: &mut RawScenario,
    o: &'a Overrides,
    c: &mut Checker<'a>,
) -> Result<Vec<String>, ScenarioError> {
    let mut notes = Vec::new();
    let overridden = &mut c.overridden;
    if let Some(url) = &o.base_url {
        raw.target.base_url = Some(url.clone());
        overridden.push(("target.base_url", o.base_url_origin.unwrap_or("--base-url")));
    }
    if let Some(model) = &o.model {
        raw.target.model = model.clone();
        overridden.push(("target.model", "--model"));
    }
    if o.rate.is_some() && o.concurrency.is_some() {
        return Err(c.err(
            "load.mode",
            "--rate and --concurrency contradict each other: --rate runs an open loop, --concurrency a closed one",
            "give only one of them",
        ));
    }
    if let Some(levels) = &o.concurrency {
        let replaced = switch_mode(&mut raw.load, raw::RawLoadMode::Closed);
        let levels = Some(raw::Levels::Many(levels.iter().map(|&l| f64::from(l)).collect()));
        // For conversations, the closed-loop concurrency is the conversations held at once.
        if raw.workload.sessions.is_some() {
            raw.load.sessions = levels;
            overridden.push(("load.sessions", "--concurrency"));
        } else {
            raw.load.concurrency = levels;
            overridden.push(("load.concurrency", "--concurrency"));
        }
        overridden.push(("load.mode", "--concurrency"));
        if !replaced.is_empty() {
            notes.push(format!("--concurrency runs a closed loop; it replaces the scenario's {}", replaced.join(", ")));
        }
    }
    if let Some(rates) = &o.rate {
        let replaced = switch_mode(&mut raw.load, raw::RawLoadMode::Open);
        raw.load.rate = Some(raw::Levels::Many(rates.clone()));
        overridden.push(("load.rate", "--rate"));
        overridden.push(("load.mode", "--rate"));
        if !replaced.is_empty() {
            notes.push(format!("--rate runs an open loop; it replaces the scenario's {}", replaced.join(", ")));
        }
    }
    if let Some(n) = o.requests {
        raw.run.requests = Some(n);
        overridden.push(("run.requests", "--requests"));
    }
    if let Some(n) = o.max_tokens {
        raw.workload.max_tokens = i64::from(n);
        overridden.push(("workload.max_tokens", "--max-tokens"));
    }
    if let Some(seed) = o.seed {
        raw.run.seed = Some(seed);
        overridden.push(("run.seed", "--seed"));
    }
    if let Some(profile) = &o.simulator {
        raw.target.simulator = Some(profile.clone());
        overridden.push(("target.simulator", "--simulator"));
    }
    if let Some(tokenizer) = &o.tokenizer {
        raw.workload.tokenizer = Some(tokenizer.clone());
        overridden.push(("workload.tokenizer", "--tokenizer"));
    }
    Ok(notes)
}

/// Set `mode`, dropping the scenario's settings that belong to the other mode and any capacity
/// search (fixed levels from the command line replace it). Returns the keys dropped.
fn switch_mode(l: &mut raw::RawLoad, mode: raw::RawLoadMode) -> Vec<&'static str> {
    let mut dropped = Vec::new();
    let mut take = |key: &'static str, set: bool| {
        if set {
            dropped.push(key);
        }
    };
    let was_open =
        l.mode == Some(raw::RawLoadMode::Open) || (l.mode.is_none() && l.search == Some(raw::RawSearch::Rate));
    match mode {
        raw::RawLoadMode::Open => {
            take("load.mode = \"closed\"", l.mode == Some(raw::RawLoadMode::Closed));
            take("load.concurrency", l.concurrency.take().is_some());
            take("load.max_rate", l.max_rate.take().is_some());
            take("load.sessions", l.sessions.take().is_some());
            take("load.in_flight", l.in_flight.take().is_some());
        }
        raw::RawLoadMode::Closed => {
            take("load.mode = \"open\"", was_open && l.mode.is_some());
            take("load.rate", l.rate.take().is_some());
            take("load.arrival", l.arrival.take().is_some());
            take("load.burstiness", l.burstiness.take().is_some());
            take("load.ramp", l.ramp.take().is_some());
            take("load.max_in_flight", l.max_in_flight.take().is_some());
            take("load.overload", l.overload.take().is_some());
        }
    }
    take("load.search", l.search.take().is_some());
    take("load.search_min", l.search_min.take().is_some());
    take("load.search_max", l.search_max.take().is_some());
    take("load.search_steps", l.search_steps.take().is_some());
    l.mode = Some(mode);
    dropped
}

fn target(c: &Checker, t: &raw::RawTarget) -> Result<Target, ScenarioError> {
    if t.model.trim().is_empty() {
        return Err(c.err(
            "target.model",
            "is empty",
            "set the model name the server serves, e.g. model = \"Qwen/Qwen3-8B\"",
        ));
    }
    // Checked whatever the endpoint, so a typo surfaces before it matters; used only by the
    // embedded simulator.
    let time_per_output_token_ms = match t.simulator_time_per_output_token_ms {
        None => None,
        Some(ms) if (0.0..=60_000.0).contains(&ms) => Some(ms),
        Some(ms) => {
            return Err(c.err(
                "target.simulator_time_per_output_token_ms",
                format!("{ms} is not a time per token"),
                "give milliseconds between 0 and 60000, e.g. simulator_time_per_output_token_ms = 5.16",
            ));
        }
    };
    let endpoint = match &t.base_url {
        Some(url) => Endpoint::Remote { base_url: url_rules::base_url(c, url)? },
        None => {
            let profile = t.simulator.clone().unwrap_or_else(|| "realistic".to_string());
            if !crate::mock::PROFILE_NAMES.contains(&profile.as_str()) {
                return Err(c.err(
                    "target.simulator",
                    format!("unknown simulator profile {profile:?}"),
                    format!("use one of: {}", crate::mock::PROFILE_NAMES.join(", ")),
                ));
            }
            Endpoint::Simulator { profile, time_per_output_token_ms }
        }
    };
    let api_key = match &t.api_key_env {
        None => None,
        Some(var) if var.trim().is_empty() => {
            return Err(c.err(
                "target.api_key_env",
                "is empty",
                "name an environment variable, e.g. api_key_env = \"OPENAI_API_KEY\", or remove the key",
            ));
        }
        Some(var) => match std::env::var(var) {
            // The key goes into a header: a line break (a `$(cat keyfile)` habit) would only
            // fail at the first request. Checked by the same rule the HTTP client applies.
            Ok(key) if !key.is_empty() && HeaderValue::from_str(&format!("Bearer {key}")).is_err() => {
                return Err(c.err(
                    "target.api_key_env",
                    format!(
                        "the key in the environment variable {var} holds a line break or another control character, which an HTTP header cannot carry"
                    ),
                    format!("export it without them, e.g. export {var}=\"$(printf %s \"${var}\" | tr -d '\\r\\n')\""),
                ));
            }
            Ok(key) if !key.is_empty() => Some(ApiKey::new(key)),
            _ => {
                return Err(c.err(
                    "target.api_key_env",
                    format!("names the environment variable {var}, which is not set or empty"),
                    format!("export {var}=<your key> before running, or remove api_key_env if the server needs no key"),
                ));
            }
        },
    };
    Ok(Target {
        endpoint,
        model: t.model.clone(),
        api: match t.api {
            raw::RawApi::Chat => Api::Chat,
            raw::RawApi::Completions => Api::Completions,
            raw::RawApi::Responses => Api::Responses,
            raw::RawApi::Messages => Api::Messages,
            raw::RawApi::Embeddings => Api::Embeddings,
            raw::RawApi::Rerank => Api::Rerank,
        },
        api_key_env: t.api_key_env.clone(),
        api_key,
        engine: t.engine.clone(),
        gpu: t.gpu.clone(),
        redact_base_url: t.redact_base_url,
        continuous_usage_stats: t.continuous_usage_stats,
        dialect: match t.dialect {
            None | Some(raw::RawDialect::Generic) => Dialect::Generic,
            Some(raw::RawDialect::Vllm) => Dialect::Vllm,
            Some(raw::RawDialect::Sglang) => Dialect::Sglang,
            Some(raw::RawDialect::Llamacpp) => Dialect::Llamacpp,
            Some(raw::RawDialect::Openai) => Dialect::Openai,
        },
        extra_body: match &t.extra_body {
            None => serde_json::Map::new(),
            Some(table) => match serde_json::to_value(table) {
                Ok(serde_json::Value::Object(map)) => map,
                _ => {
                    return Err(c.err(
                        "target.extra_body",
                        "cannot be expressed as JSON",
                        "use plain TOML values (strings, numbers, booleans, arrays, tables)",
                    ));
                }
            },
        },
        anthropic_version: t.anthropic_version.clone(),
        metrics: None,
    })
}

fn run(c: &Checker, r: &raw::RawRun, self_bounded: bool) -> Result<RunLimits, ScenarioError> {
    if r.requests == Some(0) {
        return Err(c.err(
            "run.requests",
            "must be at least 1",
            "set requests to a positive number, e.g. requests = 100",
        ));
    }
    let duration = match &r.duration {
        None => None,
        Some(text) => Some(c.duration("run.duration", Some(text), Duration::ZERO)?),
    };
    if r.requests.is_none() && duration.is_none() && !self_bounded {
        return Err(c.err(
            "run.requests",
            "neither run.requests nor run.duration is set",
            "add requests = N, duration = \"10m\", or both",
        ));
    }
    let phase = |key: &str, p: &Option<raw::Phase>| -> Result<Option<Phase>, ScenarioError> {
        match p {
            None => Ok(None),
            Some(raw::Phase::Requests(n)) if *n >= 0 => Ok(Some(Phase::Requests(*n as u64))),
            Some(raw::Phase::Requests(n)) => {
                Err(c.err(key, format!("{n} is negative"), "give a number of requests (20) or a duration (\"30s\")"))
            }
            Some(raw::Phase::Time(text)) => Ok(Some(Phase::Time(c.duration(key, Some(text), Duration::ZERO)?))),
        }
    };
    Ok(RunLimits {
        requests: r.requests,
        duration,
        seed: r.seed.unwrap_or(0),
        protocol: r.protocol.clone(),
        tier: r.tier.clone(),
        clock_domain_id: r.clock_domain_id.clone(),
        warmup: phase("run.warmup", &r.warmup)?,
        cooldown: phase("run.cooldown", &r.cooldown)?,
        grace: c.duration("run.grace", r.grace.as_deref(), Duration::from_secs(30))?,
        snapshot_interval: match r.snapshot_interval.as_deref().map(str::trim) {
            Some("0" | "0s" | "off") => None,
            other => Some(c.duration("run.snapshot_interval", other, Duration::from_secs(60))?),
        },
        keep_records: r.records.unwrap_or(false),
    })
}

/// Failures that happen before the server has done any work for the request: safe to retry.
const DEFAULT_RETRY_ON: &[&str] =
    &["connect_failed", "connect_timeout", "http_429", "http_502", "http_503", "http_504"];

fn retry_policy(c: &Checker, raw: &raw::RawClient) -> Result<RetryPolicy, ScenarioError> {
    let max_retries = match raw.retries {
        None => 0,
        Some(n) if (0..=100).contains(&n) => n as u32,
        Some(n) => {
            return Err(c.err(
                "client.retries",
                format!("{n} is outside 0–100"),
                "give a small number of retries, or 0",
            ));
        }
    };
    let names: Vec<String> = match &raw.retry_on {
        Some(list) => list.clone(),
        None => DEFAULT_RETRY_ON.iter().map(|s| s.to_string()).collect(),
    };
    let mut on = Vec::with_capacity(names.len());
    for name in &names {
        let kind: ErrorKind = name.parse().map_err(|e: String| {
            c.err("client.retry_on", e, "use error kinds from the README (connect_failed, http_503, stream_broken, …)")
        })?;
        if kind == ErrorKind::Interrupted {
            return Err(c.err("client.retry_on", "interrupted requests cannot be retried", "remove \"interrupted\""));
        }
        on.push(kind);
    }
    let backoff = c.duration("client.retry_backoff", raw.retry_backoff.as_deref(), Duration::from_millis(500))?;
    Ok(RetryPolicy { max_retries, on, backoff })
}

fn sampling(c: &Checker, s: &raw::RawSampling) -> Result<Sampling, ScenarioError> {
    if let Some(t) = s.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(c.err(
                "sampling.temperature",
                format!("{t} is outside 0–2"),
                "use a temperature between 0 and 2, or remove the key for the server default",
            ));
        }
    }
    if let Some(p) = s.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(c.err(
                "sampling.top_p",
                format!("{p} is outside (0, 1]"),
                "use a top_p above 0 and at most 1, or remove the key",
            ));
        }
    }
    Ok(Sampling { temperature: s.temperature, top_p: s.top_p })
}

/// Thinking modes are chat-template arguments: a completions request has no template, so the
/// setting would be recorded but never sent. Refused rather than silently dropped.
fn check_thinking_api(c: &Checker, target: &Target, s: &raw::RawServe) -> Result<(), ScenarioError> {
    if target.api == Api::Chat {
        return Ok(());
    }
    let key = if s.no_thinking {
        "serve.no_thinking"
    } else if s.thinking_mode != raw::RawThinkingMode::Default {
        "serve.thinking_mode"
    } else {
        return Ok(());
    };
    let api = target.api.name();
    Err(c.err(
        key,
        format!(
            "is sent as chat_template_kwargs.enable_thinking, which only chat requests carry; with target.api = \"{api}\" nothing would be sent"
        ),
        if target.api == Api::Completions {
            "remove it (a completions prompt reaches the model as written), or use target.api = \"chat\"".to_string()
        } else {
            format!("remove it (the {api} API has no chat template arguments), or use target.api = \"chat\"")
        },
    ))
}

fn serve(c: &Checker, s: &raw::RawServe) -> Result<ServeFlags, ScenarioError> {
    let thinking_mode = match s.thinking_mode {
        raw::RawThinkingMode::Default => ThinkingMode::Default,
        raw::RawThinkingMode::Enabled => ThinkingMode::Enabled,
        raw::RawThinkingMode::Disabled => ThinkingMode::Disabled,
    };
    if s.no_thinking && thinking_mode == ThinkingMode::Enabled {
        return Err(c.err("serve.no_thinking", "contradicts serve.thinking_mode = \"enabled\"", "keep one of the two"));
    }
    Ok(ServeFlags {
        thinking_mode,
        reasoning_effort: s.reasoning_effort.map(|e| match e {
            raw::RawReasoningEffort::Low => ReasoningEffort::Low,
            raw::RawReasoningEffort::Medium => ReasoningEffort::Medium,
            raw::RawReasoningEffort::High => ReasoningEffort::High,
        }),
        no_thinking: s.no_thinking,
    })
}
