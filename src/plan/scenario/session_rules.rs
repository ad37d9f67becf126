//! Validation of `[workload.sessions]` (multi-turn conversations) and of the `[load]` keys that
//! pace them: `load.sessions = N` conversations held through their think time (a sweep when a
//! list), `load.in_flight = M` requests across them, or open-loop conversation arrivals
//! (`mode = "open"`, `rate` in conversations per second).

use std::sync::Arc;
use std::time::Duration;

use super::bounds::{fmt_duration, fmt_number};
use super::checker::{CONTEXT_SANITY_LIMIT, Checker};
use super::raw::{self, Levels, RawLoad, RawLoadMode, RawSessions};
use super::{Load, Overload, Pacing, PromptSource, ScenarioError, SearchBy};
use crate::plan::session::{Dist, History, ReasoningHistory, SessionSpec};

/// Why `output.min_tokens` and `output.response_words` do not apply to conversations.
pub(super) const SETS_OUTPUT: &str = "conversations: workload.sessions.output_tokens sets each turn's output";

const TIME_FIX: &str = "write a duration from 0s to 24h such as \"2s\" (or seconds, 2), { uniform = [\"1s\", \"3s\"] }, { normal = [mean, sd], min = lo, max = hi } or { lognormal = [mean, sd], min = lo, max = hi }";

const DIST_FIX: &str = "write a number, { uniform = [lo, hi] }, { normal = [mean, sd], min = lo, max = hi } or { lognormal = [mean, sd], min = lo, max = hi }";

/// One value of a distribution as read: a number, a value that cannot be one (with the reason,
/// in the user's words), or not a single value at all (a table or a list).
enum Scalar {
    Number(f64),
    Bad(String),
    Composite,
}

/// A distribution of counts (tokens, turns): bounds default to `[floor, ceiling]`.
pub(super) fn count_dist(
    c: &Checker,
    key: &str,
    v: &toml::Value,
    floor: f64,
    ceiling: f64,
) -> Result<Dist, ScenarioError> {
    let range = Range { floor, ceiling, show: &fmt_number, fix: DIST_FIX };
    dist(c, key, v, &range, &|x: &toml::Value| match x {
        toml::Value::Integer(i) => Scalar::Number(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Scalar::Number(*f),
        toml::Value::Float(f) => Scalar::Bad(format!("{f} is not a count")),
        toml::Value::String(text) => {
            Scalar::Bad(format!("{text:?} is a string; a count is written as a number, without quotes"))
        }
        toml::Value::Boolean(b) => Scalar::Bad(format!("{b} is not a count")),
        _ => Scalar::Composite,
    })
}

/// A distribution of durations, in seconds: `"2s"`, or numbers of seconds.
pub(super) fn time_dist(c: &Checker, key: &str, v: &toml::Value) -> Result<Dist, ScenarioError> {
    // Whole hours as hours ("24h", not "1day"), as the fix writes them.
    let show = |x: f64| match Duration::try_from_secs_f64(x) {
        Ok(d) if d.as_secs() >= 3600 && d.as_secs() % 3600 == 0 && d.subsec_nanos() == 0 => {
            format!("{}h", d.as_secs() / 3600)
        }
        Ok(d) => fmt_duration(d),
        Err(_) => format!("{} s", fmt_number(x)),
    };
    let range = Range { floor: 0.0, ceiling: 86_400.0, show: &show, fix: TIME_FIX };
    dist(c, key, v, &range, &|x: &toml::Value| match x {
        toml::Value::String(text) => match humantime::parse_duration(text.trim()) {
            Ok(d) => Scalar::Number(d.as_secs_f64()),
            // humantime reads "-1s" as an unknown character; say what is wrong.
            Err(_) if text.trim().starts_with('-') => Scalar::Bad(format!("{text:?} is negative")),
            Err(e) => Scalar::Bad(format!("{text:?} is not a duration ({e})")),
        },
        toml::Value::Integer(i) => Scalar::Number(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Scalar::Number(*f),
        toml::Value::Float(f) => Scalar::Bad(format!("{f} is not a number of seconds")),
        toml::Value::Boolean(b) => Scalar::Bad(format!("{b} is not a duration")),
        _ => Scalar::Composite,
    })
}

/// The range every value of a distribution must lie in, how a value is shown, and the fix.
struct Range<'a> {
    floor: f64,
    ceiling: f64,
    show: &'a dyn Fn(f64) -> String,
    fix: &'a str,
}

fn dist(
    c: &Checker,
    key: &str,
    v: &toml::Value,
    r: &Range,
    read: &dyn Fn(&toml::Value) -> Scalar,
) -> Result<Dist, ScenarioError> {
    let (floor, ceiling, show, fix) = (r.floor, r.ceiling, r.show, r.fix);
    let in_range = |x: f64| (floor..=ceiling).contains(&x);
    let range = format!("{} to {}", show(floor), show(ceiling));
    // A single number (`None`: a table or a list), or the message saying why it is not one.
    let number = |at: &str, x: &toml::Value| -> Result<Option<f64>, ScenarioError> {
        match read(x) {
            Scalar::Number(x) => Ok(Some(x)),
            Scalar::Bad(problem) => Err(c.err(at, format!("{problem}; give a value from {range}"), fix)),
            Scalar::Composite => Ok(None),
        }
    };
    let ranged = |at: &str, x: f64| -> Result<f64, ScenarioError> {
        if in_range(x) {
            Ok(x)
        } else {
            Err(c.err(at, format!("{} is outside {range}", show(x)), format!("give a value from {range}")))
        }
    };
    if let Some(x) = number(key, v)? {
        return Ok(Dist::constant(ranged(key, x)?));
    }
    let toml::Value::Table(t) = v else {
        let what = if v.is_array() { "a list".to_string() } else { format!("a {}", v.type_str()) };
        return Err(c.err(key, format!("{what} is not a distribution"), fix));
    };
    let pair = |name: &str| -> Result<(f64, f64), ScenarioError> {
        let at = format!("{key}.{name}");
        match t.get(name).and_then(toml::Value::as_array).map(Vec::as_slice) {
            Some([a, b]) => match (number(&at, a)?, number(&at, b)?) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(c.err(&at, "must hold two values", fix)),
            },
            _ => Err(c.err(&at, "must be a list of two values", fix)),
        }
    };
    let bound = |name: &str, default: f64| -> Result<f64, ScenarioError> {
        let at = format!("{key}.{name}");
        match t.get(name) {
            None => Ok(default),
            Some(x) => match number(&at, x)? {
                Some(x) => ranged(&at, x),
                None => Err(c.err(&at, format!("must be a value from {range}"), fix)),
            },
        }
    };
    let kinds: Vec<&str> = ["uniform", "normal", "lognormal"].into_iter().filter(|k| t.contains_key(*k)).collect();
    let extra = t.keys().find(|k| !["uniform", "normal", "lognormal", "min", "max"].contains(&k.as_str()));
    if kinds.len() != 1 || extra.is_some() {
        return Err(c.err(key, "names no single distribution (or an unknown key)", fix));
    }
    let d = match kinds[0] {
        "uniform" => {
            let (lo, hi) = pair("uniform")?;
            if !(in_range(lo) && in_range(hi) && lo <= hi) || t.contains_key("min") || t.contains_key("max") {
                return Err(c.err(
                    key,
                    format!("uniform [{}, {}] is not a range within {range}", show(lo), show(hi)),
                    fix,
                ));
            }
            Dist::Uniform { lo, hi }
        }
        kind => {
            let (mean, sd) = pair(kind)?;
            let (min, max) = (bound("min", floor)?, bound("max", ceiling)?);
            if !(mean > 0.0 && sd > 0.0 && min <= max && in_range(mean)) {
                return Err(c.err(
                    key,
                    format!("{kind} needs a positive mean from {range}, a positive sd and min ≤ max"),
                    fix,
                ));
            }
            if kind == "normal" { Dist::Normal { mean, sd, min, max } } else { Dist::Lognormal { mean, sd, min, max } }
        }
    };
    Ok(d)
}

/// The conversations a scenario describes, checked against the context window.
pub(super) fn source(
    c: &Checker,
    s: &RawSessions,
    w: &raw::RawWorkload,
    (max_context, max_tokens): (u32, u32),
) -> Result<PromptSource, ScenarioError> {
    for (key, set) in [
        ("workload.context_tokens", w.context_tokens.is_some()),
        ("workload.prompts", w.prompts.is_some()),
        ("workload.trace", w.trace.is_some()),
    ] {
        if set {
            return Err(c.err(
                key,
                "does not apply to conversations ([workload.sessions]): they set every prompt",
                "remove it, or remove [workload.sessions]",
            ));
        }
    }
    if w.prompt_cache != raw::RawPromptCache::Unique {
        return Err(c.err(
            "workload.prompt_cache",
            "\"shared-prefix\" does not apply to conversations: use workload.sessions.system_prompt_tokens",
            "remove prompt_cache",
        ));
    }
    let k = |name: &str| format!("workload.sessions.{name}");
    let limit = CONTEXT_SANITY_LIMIT as f64;
    let dataset = match &s.dataset {
        None => None,
        Some(file) => {
            for (name, set) in [
                ("turns", s.turns.is_some()),
                ("first_tokens", s.first_tokens.is_some()),
                ("user_tokens", s.user_tokens.is_some()),
            ] {
                if set {
                    return Err(c.err(
                        &k(name),
                        "does not apply to dataset conversations: the file sets it",
                        "remove it",
                    ));
                }
            }
            let path = c.path(&k("dataset"), file);
            let set = crate::plan::session::dataset::load(&path).map_err(|e| {
                c.err(
                    &k("dataset"),
                    format!("{}: {e}", path.display()),
                    "give a ShareGPT JSON array or JSON Lines of {\"messages\": [...]}",
                )
            })?;
            Some(Arc::new(set))
        }
    };
    let required = |name: &str, v: &Option<toml::Value>| {
        v.clone().ok_or_else(|| {
            c.err(&k(name), "is required for synthetic conversations", "add it, e.g. 4, or give a dataset")
        })
    };
    let (turns, first_tokens, user_tokens) = if dataset.is_some() {
        (Dist::constant(1.0), Dist::constant(0.0), Dist::constant(0.0))
    } else {
        (
            count_dist(c, &k("turns"), &required("turns", &s.turns)?, 1.0, 10_000.0)?,
            count_dist(c, &k("first_tokens"), &required("first_tokens", &s.first_tokens)?, 64.0, limit)?,
            match &s.user_tokens {
                None => Dist::constant(128.0),
                Some(v) => count_dist(c, &k("user_tokens"), v, 16.0, limit)?,
            },
        )
    };
    let output_tokens = match &s.output_tokens {
        None if dataset.is_some() => None,
        None => Some(Dist::constant(f64::from(max_tokens))),
        Some(v) => Some(count_dist(c, &k("output_tokens"), v, 1.0, f64::from(max_tokens))?),
    };
    let think_time_s = match &s.think_time {
        None => Dist::constant(0.0),
        Some(v) => time_dist(c, &k("think_time"), v)?,
    };
    let system_prompt_tokens = match s.system_prompt_tokens {
        None => 0,
        Some(n) if (0..=CONTEXT_SANITY_LIMIT).contains(&n) => n as u32,
        Some(n) => return Err(c.err(&k("system_prompt_tokens"), format!("{n} is not a token count"), "e.g. 1024")),
    };
    let system_prompt_groups = match s.system_prompt_groups {
        None => 1,
        Some(n) if (1..=1_000_000).contains(&n) => n as u32,
        Some(n) => return Err(c.err(&k("system_prompt_groups"), format!("{n} is not a number of groups"), "e.g. 8")),
    };
    if let Some(a) = s.system_prompt_zipf {
        if !(a > 0.0 && a.is_finite()) {
            return Err(c.err(&k("system_prompt_zipf"), format!("{a} must be positive"), "e.g. 1.1"));
        }
    }
    let history = match s.history.as_deref().map(str::trim) {
        None | Some("live") => History::Live,
        Some("recorded") => History::Recorded,
        Some(other) => {
            return Err(c.err(&k("history"), format!("{other:?} is not a history mode"), "\"live\" or \"recorded\""));
        }
    };
    let history_reasoning = match s.history_reasoning.as_deref().map(str::trim) {
        None | Some("drop") => ReasoningHistory::Drop,
        Some("keep") => ReasoningHistory::Keep,
        Some(other) => {
            return Err(c.err(&k("history_reasoning"), format!("{other:?} is not a policy"), "\"drop\" or \"keep\""));
        }
    };
    let header = |name: &str, h: &str| -> Result<String, ScenarioError> {
        let valid = !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !valid {
            return Err(c.err(&k(name), format!("{h:?} is not a header name"), "letters, digits, - and _"));
        }
        Ok(h.to_ascii_lowercase())
    };
    let affinity_headers = match &s.affinity_headers {
        None => vec!["x-session-id".to_string()],
        Some(list) => list.iter().map(|h| header("affinity_headers", h)).collect::<Result<_, _>>()?,
    };
    let echo_header = s.echo_header.as_deref().map(|h| header("echo_header", h)).transpose()?;
    let backend_header = s.backend_header.as_deref().map(|h| header("backend_header", h)).transpose()?;
    let conversations = match s.conversations {
        None => None,
        Some(n) if (1..=100_000_000).contains(&n) => Some(n as u64),
        Some(n) => return Err(c.err(&k("conversations"), format!("{n} is not a number of conversations"), "e.g. 64")),
    };
    // Every turn must fit: the first prompt with its answer, and a later turn with its answer
    // once the history is dropped (the system prompt and the new message stay).
    let out_max = output_tokens.map_or(f64::from(max_tokens), |d| d.max());
    if dataset.is_none() {
        let room = f64::from(max_context) - out_max;
        if first_tokens.max() > room || f64::from(system_prompt_tokens) + user_tokens.max() + 64.0 > room {
            return Err(c.err(
                &k("first_tokens"),
                format!(
                    "a turn of up to {} prompt tokens plus {out_max} output tokens does not fit max_context_tokens ({max_context})",
                    first_tokens.max().max(f64::from(system_prompt_tokens) + user_tokens.max() + 64.0)
                ),
                "lower the token counts, or raise workload.max_context_tokens to the server's window",
            ));
        }
        if f64::from(system_prompt_tokens) + 64.0 > first_tokens.min() {
            return Err(c.err(
                &k("system_prompt_tokens"),
                format!(
                    "{system_prompt_tokens} leaves no room for the first user message in first_tokens ({})",
                    first_tokens.describe("")
                ),
                "keep first_tokens at least 64 tokens above the system prompt",
            ));
        }
    }
    Ok(PromptSource::Sessions(Arc::new(SessionSpec {
        conversations,
        turns,
        first_tokens,
        user_tokens,
        output_tokens,
        think_time_s,
        system_prompt_tokens,
        system_prompt_groups,
        system_prompt_zipf: s.system_prompt_zipf,
        history,
        history_reasoning,
        in_flight: None,
        affinity_headers,
        echo_header,
        backend_header,
        dataset,
    })))
}

/// `[load]` of a conversation workload.
pub(super) fn load(c: &Checker, l: &RawLoad, spec: &mut SessionSpec) -> Result<Load, ScenarioError> {
    let open = l.mode == Some(RawLoadMode::Open) || l.search == Some(SearchBy::Rate);
    let misplaced: &[(&str, bool, &str)] = if open {
        &[
            ("load.sessions", l.sessions.is_some(), "with mode = \"open\", rate is conversations per second"),
            ("load.in_flight", l.in_flight.is_some(), "use load.max_in_flight with mode = \"open\""),
            ("load.concurrency", l.concurrency.is_some(), "with mode = \"open\", rate is conversations per second"),
        ]
    } else {
        &[
            (
                "load.concurrency",
                l.concurrency.is_some(),
                "use load.sessions: conversations held through their think time",
            ),
            ("load.max_rate", l.max_rate.is_some(), "conversations pace themselves (think time)"),
            ("load.max_in_flight", l.max_in_flight.is_some(), "use load.in_flight"),
            ("load.overload", l.overload.is_some(), "remove it"),
        ]
    };
    if let Some((key, _, fix)) = misplaced.iter().find(|(_, set, _)| *set) {
        return Err(c.err(key, "does not apply to conversations here", *fix));
    }
    if open && l.overload == Some(Overload::Drop) {
        return Err(c.err(
            "load.overload",
            "\"drop\" would cut conversations mid-way",
            "remove it: a turn waits for a slot (\"queue\")",
        ));
    }
    if open {
        return super::load_rules::load(c, l);
    }
    let sessions = match &l.sessions {
        None if l.search.is_some() => None,
        None => {
            return Err(c.err(
                "load.sessions",
                "is required for conversations",
                "add e.g. sessions = 8, or mode = \"open\" with a rate",
            ));
        }
        Some(v) => {
            let values = match v {
                Levels::One(n) => vec![*n],
                Levels::Many(list) => list.clone(),
            };
            if values.is_empty() || values.iter().any(|n| *n < 1.0 || n.fract() != 0.0 || *n > 100_000.0) {
                return Err(c.err(
                    "load.sessions",
                    "holds a level that is not a whole number from 1 to 100000",
                    "e.g. sessions = 8 or [4, 8, 16]",
                ));
            }
            Some(Levels::Many(values))
        }
    };
    spec.in_flight = match l.in_flight {
        None => None,
        Some(n) if (1..=100_000).contains(&n) => Some(n as u32),
        Some(n) => {
            return Err(c.err("load.in_flight", format!("{n} is not a usable cap"), "a positive number of requests"));
        }
    };
    // The closed loop's own rules check the levels, the search and the threshold; a level is a
    // number of conversations.
    let closed = RawLoad {
        mode: Some(RawLoadMode::Closed),
        concurrency: sessions,
        search: l.search,
        search_min: l.search_min,
        search_max: l.search_max,
        search_steps: l.search_steps,
        max_dispatch_lag: l.max_dispatch_lag.clone(),
        max_client_lateness: l.max_client_lateness.clone(),
        ..RawLoad::default()
    };
    let load = super::load_rules::load(c, &closed)?;
    debug_assert!(matches!(load.pacing, Pacing::Closed { .. }));
    Ok(load)
}

/// Conversation keys of `[load]` outside a conversation workload are errors, not ignored.
pub(super) fn reject_load_keys(c: &Checker, l: &RawLoad) -> Result<(), ScenarioError> {
    for (key, set) in [("load.sessions", l.sessions.is_some()), ("load.in_flight", l.in_flight.is_some())] {
        if set {
            return Err(c.err(
                key,
                "only applies to conversations ([workload.sessions])",
                "remove it, or add [workload.sessions]",
            ));
        }
    }
    Ok(())
}
