//! Values given on the command line (or in the environment) that replace the scenario file's,
//! and how they replace them: before validation, so the same rules check them and a refusal
//! names the option that set the value.
//!
//! Two steps. Plain keys (`--set`, `--input-tokens`, `--slo`, …) go into the TOML document
//! before it is read, so a file may leave out a key a flag gives and the parser's own checks
//! (types, unknown keys) name the flag. The options that choose the pacing (`--rate`,
//! `--concurrency`) then rewrite the read `[load]`, dropping the other mode's settings.

use super::checker::Checker;
use super::raw::{self, RawScenario};
use super::{ScenarioError, SearchBy};

/// Values given on the command line (or in the environment) that replace the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub base_url: Option<String>,
    /// Where `base_url` came from, for error messages (`--base-url` or `ANVIL_BASE_URL`).
    pub base_url_origin: Option<&'static str>,
    /// `--base-url` given several times: the replicas (`target.base_urls`).
    pub base_urls: Vec<String>,
    pub model: Option<String>,
    /// `--concurrency`: closed-loop levels; with `--rate`, the open loop's in-flight cap.
    pub concurrency: Option<Vec<u32>>,
    /// `--rate`: open-loop rates; `inf` releases every request at once.
    pub rate: Option<Vec<f64>>,
    pub requests: Option<u64>,
    /// `--output-tokens` (or `--max-tokens`): the output budget.
    pub max_tokens: Option<u32>,
    /// `--input-tokens` (or `--prompt-tokens`): the planned prompt size.
    pub input_tokens: Option<u32>,
    /// `--ignore-eos`.
    pub ignore_eos: bool,
    /// `--duration`, as written.
    pub duration: Option<String>,
    /// `--api-key-env`: the variable holding the key.
    pub api_key_env: Option<String>,
    /// `--slo KEY=VALUE`, as written.
    pub slo: Vec<String>,
    /// `--set SECTION.KEY=VALUE`, as written.
    pub set: Vec<String>,
    pub seed: Option<u64>,
    pub simulator: Option<String>,
    /// `--tokenizer`: `estimate`, `calibrate` or a path.
    pub tokenizer: Option<String>,
    /// `--header 'NAME: VALUE'`, as written (added to `target.headers`).
    pub headers: Vec<String>,
    /// `--remote-write URL` (`run.remote_write`).
    pub remote_write: Option<String>,
    /// `--otlp URL` (`run.otlp`).
    pub otlp: Option<String>,
    /// `--metrics-listen ADDR` (`run.metrics_listen`) and `--metrics-linger DURATION`
    /// (`run.metrics_linger`).
    pub metrics_listen: Option<String>,
    pub metrics_linger: Option<String>,
    /// `--images N`, `--image-size WxH` and `--audio-seconds S` (`[workload.media]`).
    pub images: Option<u32>,
    pub image_size: Option<String>,
    pub audio_seconds: Option<u32>,
}

/// The plain keys the command line sets, put into the TOML document before it is read: every
/// `--set` in order, then the named flags (so a flag wins over a `--set` of the same key).
pub(super) fn apply_to_table(table: &mut toml::Table, o: &Overrides, c: &mut Checker) -> Result<(), ScenarioError> {
    for item in &o.set {
        let (key, value) = split_assignment(c, "--set", item, "--set workload.max_context_tokens=32768")?;
        put(table, c, &key, toml_value(&value), format!("--set {key}"))?;
    }
    for item in &o.slo {
        let (key, value) = split_assignment(c, "--slo", item, "--slo ttft_p99_ms=500")?;
        if key.contains('.') {
            return Err(c.err(
                "slo",
                format!("--slo {item:?}: an objective is one name such as ttft_p99_ms, not a key path"),
                "write --slo ttft_p99_ms=500 (or --set slo.ttft_p99_ms=500)",
            ));
        }
        put(table, c, &format!("slo.{key}"), toml_value(&value), format!("--slo {key}"))?;
    }
    let text = |v: &Option<String>| v.clone().map(toml::Value::String);
    let flags: [(&str, Option<toml::Value>, &str); 12] = [
        ("workload.context_tokens", o.input_tokens.map(|n| toml::Value::Integer(i64::from(n))), "--input-tokens"),
        ("workload.max_tokens", o.max_tokens.map(|n| toml::Value::Integer(i64::from(n))), "--output-tokens"),
        ("output.ignore_eos", o.ignore_eos.then_some(toml::Value::Boolean(true)), "--ignore-eos"),
        ("run.duration", o.duration.clone().map(toml::Value::String), "--duration"),
        ("target.api_key_env", o.api_key_env.clone().map(toml::Value::String), "--api-key-env"),
        ("run.remote_write", o.remote_write.clone().map(toml::Value::String), "--remote-write"),
        ("run.otlp", o.otlp.clone().map(toml::Value::String), "--otlp"),
        ("run.metrics_listen", text(&o.metrics_listen), "--metrics-listen"),
        ("run.metrics_linger", text(&o.metrics_linger), "--metrics-linger"),
        ("workload.media.images.count", o.images.map(|n| toml::Value::Integer(i64::from(n))), "--images"),
        ("workload.media.images.size", text(&o.image_size), "--image-size"),
        (
            "workload.media.audio.seconds",
            o.audio_seconds.map(|n| toml::Value::Integer(i64::from(n))),
            "--audio-seconds",
        ),
    ];
    for (key, value, flag) in flags {
        if let Some(value) = value {
            put(table, c, key, value, flag)?;
        }
    }
    Ok(())
}

/// `KEY=VALUE` of `--set` or `--slo`, both sides trimmed.
fn split_assignment(c: &Checker, flag: &str, item: &str, example: &str) -> Result<(String, String), ScenarioError> {
    match item.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && key.split('.').all(|k| !k.trim().is_empty()) => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(c.err(
            "",
            format!("{flag} {item:?} is not KEY=VALUE"),
            format!("write it as {example} (quote the whole argument when the value has spaces)"),
        )),
    }
}

/// A value as TOML reads it (`8`, `true`, `[1, 2]`, `{ uniform = [512, 2048] }`, `"text"`), or
/// the text itself when it is not a TOML value: `--set target.model=Qwen/Qwen3-8B` needs no quotes.
fn toml_value(text: &str) -> toml::Value {
    match format!("v = {text}").parse::<toml::Table>() {
        Ok(mut t) if t.len() == 1 => t.remove("v").unwrap_or_else(|| toml::Value::String(text.to_string())),
        _ => toml::Value::String(text.to_string()),
    }
}

/// Put `value` at the dotted `key`, creating the tables on the way.
fn put(
    table: &mut toml::Table,
    c: &mut Checker,
    key: &str,
    value: toml::Value,
    origin: impl Into<String>,
) -> Result<(), ScenarioError> {
    let origin = origin.into();
    let segments: Vec<&str> = key.split('.').map(str::trim).collect();
    let Some((last, parents)) = segments.split_last() else { return Ok(()) };
    let mut slot = table;
    for (i, segment) in parents.iter().enumerate() {
        let entry = slot.entry(segment.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        slot = match entry {
            toml::Value::Table(t) => t,
            _ => {
                let at = segments[..=i].join(".");
                return Err(c.err(
                    &at,
                    format!("{origin} sets a key inside `{at}`, but `{at}` is a value, not a table"),
                    "check the key path; docs/scenario.md lists every key",
                ));
            }
        };
    }
    slot.insert(last.to_string(), value);
    c.set_by(key.to_string(), origin);
    Ok(())
}

/// Command-line values replace the file's. `--rate` and `--concurrency` also choose the mode
/// (docs/command-line.md says they set it): the file's settings of the other mode are dropped, and the
/// returned notes say which, for `validate` and the console.
pub(super) fn apply<'a>(
    raw: &mut RawScenario,
    o: &'a Overrides,
    c: &mut Checker<'a>,
) -> Result<Vec<String>, ScenarioError> {
    let mut notes = Vec::new();
    if let Some(url) = &o.base_url {
        raw.target.base_url = Some(url.clone());
        raw.target.base_urls = None;
        c.set_by("target.base_url", o.base_url_origin.unwrap_or("--base-url"));
    }
    if !o.base_urls.is_empty() {
        raw.target.base_urls = Some(o.base_urls.clone());
        raw.target.base_url = None;
        c.set_by("target.base_urls", "--base-url");
    }
    if let Some(model) = &o.model {
        raw.target.model = Some(model.clone());
        c.set_by("target.model", "--model");
    }
    if let Some(n) = o.requests {
        raw.run.requests = Some(n);
        c.set_by("run.requests", "--requests");
    }
    match (&o.rate, &o.concurrency) {
        (Some(rates), concurrency) if rates.iter().any(|r| r.is_infinite() && *r > 0.0) => {
            notes.push(all_at_once(raw, rates, concurrency.as_deref(), c)?);
        }
        (Some(rates), Some(cap)) => {
            let &[cap] = cap.as_slice() else {
                return Err(c.err(
                    "load.max_in_flight",
                    "with --rate, --max-concurrency is one cap on the requests in flight, not a sweep",
                    "give one number, e.g. --rate 10 --max-concurrency 4, or sweep --concurrency without --rate",
                ));
            };
            open_loop(raw, rates, c, &mut notes);
            raw.load.max_in_flight = Some(i64::from(cap));
            c.set_by("load.max_in_flight", "--max-concurrency");
            notes.push(format!(
                "--rate with --max-concurrency: an open loop with at most {cap} requests in flight; later arrivals wait for a slot (load.overload = \"queue\"), as vllm bench serve's --max-concurrency"
            ));
        }
        (Some(rates), None) => open_loop(raw, rates, c, &mut notes),
        (None, Some(levels)) => closed_loop(raw, levels, "--concurrency", c, &mut notes),
        (None, None) => {}
    }
    if let Some(seed) = o.seed {
        raw.run.seed = Some(seed);
        c.set_by("run.seed", "--seed");
    }
    if let Some(profile) = &o.simulator {
        raw.target.simulator = Some(profile.clone());
        c.set_by("target.simulator", "--simulator");
    }
    if let Some(tokenizer) = &o.tokenizer {
        raw.workload.tokenizer = Some(tokenizer.clone());
        c.set_by("workload.tokenizer", "--tokenizer");
    }
    Ok(notes)
}

/// `--rate`: an open loop at these rates.
fn open_loop(raw: &mut RawScenario, rates: &[f64], c: &mut Checker, notes: &mut Vec<String>) {
    let replaced = switch_mode(&mut raw.load, raw::RawLoadMode::Open);
    raw.load.rate = Some(raw::Levels::Many(rates.to_vec()));
    c.set_by("load.rate", "--rate");
    c.set_by("load.mode", "--rate");
    if !replaced.is_empty() {
        notes.push(format!("--rate runs an open loop; it replaces the scenario's {}", replaced.join(", ")));
    }
}

/// `--concurrency` (or `--rate inf`): a closed loop at these levels.
fn closed_loop(raw: &mut RawScenario, levels: &[u32], origin: &str, c: &mut Checker, notes: &mut Vec<String>) {
    let replaced = switch_mode(&mut raw.load, raw::RawLoadMode::Closed);
    let levels = Some(raw::Levels::Many(levels.iter().map(|&l| f64::from(l)).collect()));
    // For conversations, the closed-loop concurrency is the conversations held at once.
    if raw.workload.sessions.is_some() {
        raw.load.sessions = levels;
        c.set_by("load.sessions", origin.to_string());
    } else {
        raw.load.concurrency = levels;
        c.set_by("load.concurrency", origin.to_string());
    }
    c.set_by("load.mode", origin.to_string());
    if !replaced.is_empty() {
        notes.push(format!("{origin} runs a closed loop; it replaces the scenario's {}", replaced.join(", ")));
    }
}

/// `--rate inf`, as vllm bench serve's `--request-rate inf`: every request released at once.
/// Nothing paces the arrivals, so it is a closed loop: of `--max-concurrency` requests when
/// given, else of every request of the level (which needs a request count).
fn all_at_once(
    raw: &mut RawScenario,
    rates: &[f64],
    cap: Option<&[u32]>,
    c: &mut Checker,
) -> Result<String, ScenarioError> {
    if rates.len() > 1 {
        return Err(c.err(
            "load.rate",
            "--rate inf releases every request at once; it cannot be one level of a sweep",
            "give --rate inf alone, or a sweep of finite rates such as --rate 5,10,20",
        ));
    }
    let mut notes = Vec::new();
    if let Some(levels) = cap {
        closed_loop(raw, levels, "--rate inf --max-concurrency", c, &mut notes);
        let shown: Vec<String> = levels.iter().map(u32::to_string).collect();
        notes.insert(
            0,
            format!(
                "--rate inf with --max-concurrency: every request is released at once and at most {} are in flight, that is a closed loop at concurrency {}",
                shown.join(", "),
                shown.join(", ")
            ),
        );
        return Ok(notes.join("; "));
    }
    let Some(n) = raw.run.requests else {
        return Err(c.err(
            "load.rate",
            "--rate inf releases every request of the level at once, which needs a number of requests",
            "add -n N (--requests), or --max-concurrency C to keep C requests in flight",
        ));
    };
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    closed_loop(raw, &[n], "--rate inf", c, &mut notes);
    notes.insert(
        0,
        format!(
            "--rate inf: every request is released at once, that is a closed loop of all {n} requests in flight (concurrency {n}); add --max-concurrency C to cap it"
        ),
    );
    Ok(notes.join("; "))
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
    let was_open = l.mode == Some(raw::RawLoadMode::Open) || (l.mode.is_none() && l.search == Some(SearchBy::Rate));
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
