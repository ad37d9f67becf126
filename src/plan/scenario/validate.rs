//! Raw TOML → typed `Scenario`, once, with errors a user can act on.
//!
//! Every error names the file, the key path (`load.concurrency`), what is wrong and how to fix
//! it. Command-line overrides are applied before validation, so a bad `--concurrency` is caught
//! by the same rules and the message says which option set the value.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::checker::Checker;
use super::raw::{self, RawScenario};
use super::{
    Api, ApiKey, ClientSettings, Dialect, Endpoint, Load, OutputControl, Overrides, PhaseLength, PromptSource,
    RetryPolicy, RunLimits, Sampling, Scenario, ScenarioError, ServeFlags, Target, ThinkingMode, Workload,
};
use super::{load_rules, overrides, session_rules, trace_rules, url_rules, wording, workload_rules};
use crate::contract::ErrorKind;

impl Scenario {
    /// Read, override and validate a scenario file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        let text = crate::sys::read_input_to_string(path).map_err(|e| ScenarioError::unreadable(path, &e))?;
        Self::from_toml(path, &text, overrides)
    }

    /// The built-in scenario (`scenarios/default.toml`), with the command line's overrides: what
    /// runs when no scenario file is given.
    pub fn built_in(overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        let mut s = Self::from_toml(Path::new(super::BUILT_IN_NAME), super::BUILT_IN, overrides)?;
        s.built_in = true;
        Ok(s)
    }

    /// A scenario read from standard input (`-`): at most `STDIN_MAX` bytes, refused when
    /// standard input is a terminal (nothing piped in) or empty.
    pub fn from_stdin(overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        use std::io::{IsTerminal, Read};
        const STDIN_MAX: u64 = 4 << 20;
        let name = super::STDIN_NAME;
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Err(ScenarioError::of_file(
                name,
                "the scenario `-` is read from standard input, but standard input is a terminal".into(),
                "pipe the scenario in (anvil-load - < scenario.toml), or give the file's path",
            ));
        }
        let mut bytes = Vec::new();
        stdin.lock().take(STDIN_MAX + 1).read_to_end(&mut bytes).map_err(|e| {
            ScenarioError::of_file(name, format!("cannot read standard input: {e}"), "pipe a TOML scenario in")
        })?;
        if bytes.len() as u64 > STDIN_MAX {
            return Err(ScenarioError::of_file(
                name,
                format!("the scenario on standard input is longer than {} MiB", STDIN_MAX >> 20),
                "a scenario is a few kilobytes: check that the right file is piped in",
            ));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            ScenarioError::of_file(name, "the scenario on standard input is not UTF-8 text".into(), "pipe a TOML file")
        })?;
        if text.trim().is_empty() {
            return Err(ScenarioError::of_file(
                name,
                "standard input is empty".into(),
                "pipe a scenario in (anvil-load - < scenario.toml), or give no scenario for the built-in one",
            ));
        }
        Self::from_toml(Path::new(name), &text, overrides)
    }

    /// Validate scenario text; `path` is only used in messages.
    pub fn from_toml(path: &Path, text: &str, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
        validate(path, text, overrides)
    }
}

fn validate(path: &Path, text: &str, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
    let mut c = Checker::new(path);
    let mut table = parse_table(c.file(), text)?;
    overrides::apply_to_table(&mut table, overrides, &mut c)?;
    super::headers::add_flags(&mut table, &overrides.headers, &mut c)?;
    let mut raw = parse(&c, table)?;
    let notes = overrides::apply(&mut raw, overrides, &mut c)?;
    let provenance = c.overridden().to_vec();

    // Before the key's variable is read: both keys set is the first thing to say.
    let key_command = super::key_command::key_command(&c, &raw.target)?;
    let mut target = target(&c, &raw.target)?;
    target.api_key_command = key_command;
    super::model_rules::apply(&c, &raw.target, &mut target)?;
    super::api_rules::check_sources(&c, &raw, &target)?;
    // A trace, or a number of conversations, bounds a level by itself: requests and duration
    // become optional.
    let conversations = raw.workload.sessions.as_ref().is_some_and(|s| s.conversations.is_some());
    let run = run(&c, &raw.run, raw.workload.trace.is_some() || conversations)?;
    target.metrics = super::metrics_rules::server_metrics(&c, &raw.target, &raw.run, &target)?;
    let mut workload = super::workload_rules::workload(&c, &raw.workload, run.seed)?;
    if let Some(tools) = &raw.workload.tools {
        workload.tools = Some(Arc::new(super::tools_rules::tools(
            &c,
            tools,
            target.api,
            run.seed,
            raw.workload.sessions.is_some(),
        )?));
    }
    let output = super::workload_rules::output(&c, &raw.output, &workload, target.dialect)?;
    let (mut load, output) = pacing(&c, &raw.load, &mut workload, output, target.dialect)?;
    load.reset_cache = super::model_rules::reset_cache(&c, raw.load.reset_cache.as_deref(), &target)?;
    let sampling = sampling(&c, &raw.sampling)?;
    let serve = serve(&c, &raw.serve)?;
    check_thinking_api(&c, &target, &raw.serve)?;
    super::api_rules::check(&c, &raw, &target, &mut workload, &output, &serve)?;
    workload.response_format = super::structured_rules::response_format(
        &c,
        raw.workload.response_format.as_ref(),
        &target,
        raw.workload.canaries,
        output.response_words,
    )?
    .map(Arc::new);
    workload.media = super::media_rules::media(&c, &raw, &target, &workload)?.map(Arc::new);
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
        tls: target.tls.clone(),
        unix_socket: target.unix_socket.clone(),
    };
    super::workload_rules::check_extra_body(&c, &target, &serve)?;
    let slo = super::load_rules::slo(&c, &raw.slo, &load)?;
    Ok(Scenario {
        path: path.to_path_buf(),
        target,
        run,
        load,
        workload,
        sampling,
        serve,
        output,
        slo,
        client,
        notes,
        provenance,
        built_in: false,
    })
}

/// `[load]` as the workload reads it, with the output control it implies. A trace sets every
/// send time and conversations pace themselves through their think time, so their `[load]`
/// is read once they are known; both also set each request's output length. Any other workload
/// is paced by `[load]` alone.
fn pacing(
    c: &Checker,
    l: &raw::RawLoad,
    workload: &mut Workload,
    output: OutputControl,
    dialect: Dialect,
) -> Result<(Load, OutputControl), ScenarioError> {
    if !matches!(workload.prompts, PromptSource::Sessions(_)) {
        session_rules::reject_load_keys(c, l)?;
    }
    Ok(match &mut workload.prompts {
        PromptSource::Trace(trace) => {
            let output = workload_rules::output_set_by_workload(c, &output, dialect, trace_rules::SETS_OUTPUT)?;
            (trace_rules::load(c, l, trace)?, output)
        }
        PromptSource::Sessions(spec) => {
            let output = workload_rules::output_set_by_workload(c, &output, dialect, session_rules::SETS_OUTPUT)?;
            (session_rules::load(c, l, Arc::make_mut(spec))?, output)
        }
        PromptSource::Synthetic { .. } | PromptSource::Dataset(_) => (load_rules::load(c, l)?, output),
    })
}

/// TOML syntax, with line and column.
fn parse_table(file: &str, text: &str) -> Result<toml::Table, ScenarioError> {
    text.parse().map_err(|e: toml::de::Error| {
        let at = e
            .span()
            .map(|s| line_col(text, s.start))
            .map(|(l, c)| format!(" at line {l}, column {c}"))
            .unwrap_or_default();
        ScenarioError::of_file(
            file,
            format!("not valid TOML{at}: {}", wording::humanize(e.message())),
            "fix the syntax; see the scenario reference in docs/scenario.md",
        )
    })
}

/// The document's shape, with the key path; a key the command line set is named as its option's.
fn parse(c: &Checker, table: toml::Table) -> Result<RawScenario, ScenarioError> {
    let file = c.file();
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
                    format!("write [{key}] on a line of its own with its keys below it; docs/scenario.md lists them"),
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
            let hint = wording::did_you_mean(&raw_message).map(|k| format!("did you mean `{k}`? ")).unwrap_or_default();
            format!("{hint}remove or rename the key; docs/scenario.md lists every key the scenario accepts")
        } else if message.starts_with("missing field") {
            "add the key; docs/scenario.md shows an example".to_string()
        } else if message.ends_with("expected a table") {
            format!("write [{key}] on a line of its own with its keys below it; docs/scenario.md lists them")
        } else {
            "see docs/scenario.md for the expected type".to_string()
        };
        let key = if key == "." { String::new() } else { key };
        let origin = c.origin(&key);
        let problem = if origin.is_empty() { message } else { format!("{message}{origin}") };
        ScenarioError { file: file.to_string(), key, problem, fix }
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn target(c: &Checker, t: &raw::RawTarget) -> Result<Target, ScenarioError> {
    if t.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(c.err(
            "target.model",
            "is empty",
            "set the model name the server serves, e.g. model = \"Qwen/Qwen3-8B\", or remove the key to use the one the server lists",
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
    let azure = t.dialect == Some(Dialect::Azure);
    let query = super::query::query(c, t.query.as_ref(), t.base_url.as_deref())?;
    let replicas = super::replica_rules::replicas(c, t)?;
    if azure && replicas.is_some() {
        return Err(c.err(
            "target.base_urls",
            "cannot be used with the azure dialect: each Azure deployment is its own endpoint",
            "give one base_url per run with dialect = \"azure\"",
        ));
    }
    let endpoint = match (&t.base_url, &replicas) {
        (_, Some(r)) => Endpoint::Remote { base_url: r.base_urls[0].clone() },
        (Some(url), None) if azure => {
            let normalized = url_rules::base_url(c, url)?;
            Endpoint::Remote {
                base_url: super::azure::base_url(c, url, &normalized, t.model.as_deref(), t.api, &query)?,
            }
        }
        (Some(url), None) => Endpoint::Remote { base_url: url_rules::base_url(c, url)? },
        (None, None) if azure => {
            return Err(c.err(
                "target.base_url",
                "is not set: the azure dialect needs the Azure OpenAI resource's endpoint",
                "write base_url = \"https://NAME.openai.azure.com\" in [target], or give --base-url",
            ));
        }
        (None, None) => {
            let profile = t.simulator.clone().unwrap_or_else(|| "realistic".to_string());
            if !anvil_sim::PROFILE_NAMES.contains(&profile.as_str()) {
                return Err(c.err(
                    "target.simulator",
                    format!("unknown simulator profile {profile:?}"),
                    format!("use one of: {}", anvil_sim::PROFILE_NAMES.join(", ")),
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
    let keys = super::headers::KeyHeaders {
        x_api_key: t.api == Api::Messages && api_key.is_some(),
        api_key: azure && api_key.is_some(),
    };
    let headers = super::headers::headers(c, t.headers.as_ref(), keys)?;
    // No model named: the embedded simulator answers to any name (its own is used); a server's
    // is read from its /models list before the run (`app::setup::preflight`).
    let model = match (&t.model, &endpoint) {
        (Some(m), _) => m.clone(),
        (None, Endpoint::Simulator { .. }) => anvil_sim::DEFAULT_MODEL.to_string(),
        (None, Endpoint::Remote { .. }) => String::new(),
    };
    let tls = super::tls_rules::tls(c, t.tls.as_ref(), &endpoint)?.map(std::sync::Arc::new);
    let unix_socket = super::socket_rules::unix_socket(c, t.unix_socket.as_deref(), &endpoint)?;
    if unix_socket.is_some() && replicas.is_some() {
        return Err(c.err(
            "target.unix_socket",
            "cannot be used with target.base_urls: every request would go through the one socket",
            "give one base_url with unix_socket, or remove unix_socket to spread over the replicas",
        ));
    }
    Ok(Target {
        model_named: t.model.is_some(),
        endpoint,
        model,
        api: t.api,
        api_key_env: t.api_key_env.clone(),
        api_key,
        api_key_command: None,
        engine: t.engine.clone(),
        gpu: t.gpu.clone(),
        redact_base_url: t.redact_base_url,
        continuous_usage_stats: t.continuous_usage_stats,
        dialect: t.dialect.unwrap_or(Dialect::Generic),
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
        headers,
        query,
        tls,
        replicas,
        unix_socket,
        models: None,
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
    let phase = |key: &str, p: &Option<raw::RawPhaseLength>| -> Result<Option<PhaseLength>, ScenarioError> {
        match p {
            None => Ok(None),
            Some(raw::RawPhaseLength::Requests(n)) if *n >= 0 => Ok(Some(PhaseLength::Requests(*n as u64))),
            Some(raw::RawPhaseLength::Requests(n)) => {
                Err(c.err(key, format!("{n} is negative"), "give a number of requests (20) or a duration (\"30s\")"))
            }
            Some(raw::RawPhaseLength::Time(text)) => {
                Ok(Some(PhaseLength::Time(c.duration(key, Some(text), Duration::ZERO)?)))
            }
        }
    };
    let (metrics_listen, metrics_linger) = super::exporter_rules::exporter(c, r)?;
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
        metrics_listen,
        metrics_linger,
        push: super::push_rules::push(c, r)?,
        records_format: r.records_format.unwrap_or_default(),
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
            c.err(
                "client.retry_on",
                e,
                "use error kinds from docs/artifact.md (connect_failed, http_503, stream_broken, …)",
            )
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
    } else if s.thinking_mode != ThinkingMode::Default {
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
    if s.no_thinking && s.thinking_mode == ThinkingMode::Enabled {
        return Err(c.err("serve.no_thinking", "contradicts serve.thinking_mode = \"enabled\"", "keep one of the two"));
    }
    Ok(ServeFlags { thinking_mode: s.thinking_mode, reasoning_effort: s.reasoning_effort, no_thinking: s.no_thinking })
}
