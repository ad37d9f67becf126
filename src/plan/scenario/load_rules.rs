//! Validation of `[load]` (closed or open loop, levels, arrivals, overload, capacity search) and
//! `[slo]` (objectives for search and goodput).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bounds::{BURSTINESS, MAX_RATE, MIN_RATE, fmt_number};
use super::checker::Checker;
use super::raw::{self, RawLoadMode};
use super::{Arrival, Bound, Load, Overload, Pacing, ScenarioError, Search, SearchBy, Slo, SloCriterion};
use crate::contract::{Objective, Stat, Worse};

/// One client process can hold about this many streams; above it a level is a typo.
const MAX_CONCURRENCY: f64 = 100_000.0;

/// A rate, or why it is not one (in the order a reader checks: a number, not too small, not
/// too large).
fn check_rate(c: &Checker, key: &str, r: f64) -> Result<f64, ScenarioError> {
    if r.is_finite() && (MIN_RATE..=MAX_RATE).contains(&r) {
        return Ok(r);
    }
    Err(c.err(
        key,
        format!("{} is not a usable rate", fmt_number(r)),
        format!("give requests per second from {MIN_RATE} (one per 1,000 s) to {}", fmt_number(MAX_RATE)),
    ))
}

/// The client's runtime wakes a task within about a millisecond when it has CPU to spare (the
/// timer's resolution); ten times that means reads were stamped late by as much.
pub const DEFAULT_MAX_CLIENT_LATENESS: Duration = Duration::from_millis(10);

pub(super) fn load(c: &Checker, l: &raw::RawLoad) -> Result<Load, ScenarioError> {
    let open = match (l.mode, l.search) {
        (Some(RawLoadMode::Open), _) | (None, Some(SearchBy::Rate)) => true,
        (Some(RawLoadMode::Closed), _) | (None, _) => false,
    };
    // Keys that only make sense in the other mode are errors, not silently ignored.
    let misplaced: &[(&str, bool)] = if open {
        &[("load.concurrency", l.concurrency.is_some()), ("load.max_rate", l.max_rate.is_some())]
    } else {
        &[
            ("load.rate", l.rate.is_some()),
            ("load.arrival", l.arrival.is_some()),
            ("load.burstiness", l.burstiness.is_some()),
            ("load.ramp", l.ramp.is_some()),
            ("load.max_in_flight", l.max_in_flight.is_some()),
            ("load.overload", l.overload.is_some()),
        ]
    };
    if let Some((key, _)) = misplaced.iter().find(|(_, set)| *set) {
        let mode = if open { "open" } else { "closed" };
        return Err(c.err(
            key,
            format!("does not apply to mode = \"{mode}\""),
            "remove it, or set load.mode to the mode it belongs to",
        ));
    }
    let search = search(c, l, open)?;
    let pacing = if open { open_pacing(c, l, search.is_some())? } else { closed_pacing(c, l, search.is_some())? };
    let max_dispatch_lag =
        c.duration("load.max_dispatch_lag", l.max_dispatch_lag.as_deref(), Duration::from_millis(5))?;
    let max_client_lateness =
        c.duration("load.max_client_lateness", l.max_client_lateness.as_deref(), DEFAULT_MAX_CLIENT_LATENESS)?;
    Ok(Load { pacing, search, max_dispatch_lag, max_client_lateness, reset_cache: Default::default() })
}

fn levels(
    c: &Checker,
    key: &str,
    value: &Option<raw::Levels>,
    default: Option<f64>,
) -> Result<Vec<f64>, ScenarioError> {
    let values = match value {
        None => default.into_iter().collect(),
        Some(raw::Levels::One(n)) => vec![*n],
        Some(raw::Levels::Many(v)) => v.clone(),
    };
    if values.is_empty() {
        return Err(c.err(key, "is missing or an empty list", "give at least one level, e.g. [1, 2, 4]"));
    }
    let mut seen = BTreeSet::new();
    for &v in &values {
        if !seen.insert(v.to_bits()) {
            return Err(c.err(key, format!("level {} appears twice", fmt_number(v)), "list each level once"));
        }
    }
    Ok(values)
}

fn closed_pacing(c: &Checker, l: &raw::RawLoad, searching: bool) -> Result<Pacing, ScenarioError> {
    const KEY: &str = "load.concurrency";
    let values =
        if searching && l.concurrency.is_none() { vec![1.0] } else { levels(c, KEY, &l.concurrency, Some(1.0))? };
    let mut out = Vec::with_capacity(values.len());
    for n in values {
        if n.is_nan() || n < 1.0 || n.fract() != 0.0 {
            return Err(c.err(
                KEY,
                format!("{} is not a valid level: concurrency must be a whole number of at least 1", fmt_number(n)),
                "use positive integers, e.g. concurrency = 4 or concurrency = [1, 2, 4, 8]",
            ));
        }
        if n > MAX_CONCURRENCY {
            return Err(c.err(
                KEY,
                format!("{} is above the supported maximum of {MAX_CONCURRENCY}", fmt_number(n)),
                "use a smaller level",
            ));
        }
        out.push(n as u32);
    }
    let max_rate = match l.max_rate {
        Some(r) => Some(check_rate(c, "load.max_rate", r)?),
        None => None,
    };
    Ok(Pacing::Closed { levels: out, max_rate })
}

fn open_pacing(c: &Checker, l: &raw::RawLoad, searching: bool) -> Result<Pacing, ScenarioError> {
    const KEY: &str = "load.rate";
    let rates = if searching && l.rate.is_none() {
        vec![1.0]
    } else {
        if l.rate.is_none() {
            return Err(c.err(KEY, "is required with mode = \"open\"", "add e.g. rate = 200 (requests per second)"));
        }
        levels(c, KEY, &l.rate, None)?
    };
    for &r in &rates {
        check_rate(c, KEY, r)?;
    }
    let arrival = match (l.arrival.unwrap_or(raw::RawArrival::Poisson), l.burstiness) {
        (raw::RawArrival::Gamma, Some(b)) if (BURSTINESS.0..=BURSTINESS.1).contains(&b) => {
            Arrival::Gamma { burstiness: b }
        }
        (raw::RawArrival::Gamma, Some(b)) => {
            return Err(c.err(
                "load.burstiness",
                format!("{} is outside {}–{}", fmt_number(b), BURSTINESS.0, fmt_number(BURSTINESS.1)),
                "1 is Poisson; 0.5 is burstier; 4 is smoother",
            ));
        }
        (raw::RawArrival::Gamma, None) => {
            return Err(c.err("load.burstiness", "is required with arrival = \"gamma\"", "add e.g. burstiness = 0.5"));
        }
        (_, Some(_)) => {
            return Err(c.err(
                "load.burstiness",
                "only applies with arrival = \"gamma\"",
                "set arrival = \"gamma\" or remove it",
            ));
        }
        (raw::RawArrival::Poisson, None) => Arrival::Poisson,
        (raw::RawArrival::Constant, None) => Arrival::Constant,
    };
    let ramp = match &l.ramp {
        None => None,
        Some(text) => Some(c.duration("load.ramp", Some(text), Duration::ZERO)?),
    };
    let max_in_flight = match l.max_in_flight {
        None => None,
        Some(n) if n >= 1 && (n as f64) <= MAX_CONCURRENCY => Some(n as u32),
        Some(n) => {
            return Err(c.err(
                "load.max_in_flight",
                format!("{n} is not a usable cap"),
                "give a positive number of requests, or remove it",
            ));
        }
    };
    let overload = match (l.overload, max_in_flight) {
        (Some(_), None) => {
            return Err(c.err(
                "load.overload",
                "only applies with load.max_in_flight",
                "set max_in_flight = N, or remove it",
            ));
        }
        (overload, _) => overload.unwrap_or(Overload::Queue),
    };
    Ok(Pacing::Open { rates, arrival, ramp, max_in_flight, overload })
}

fn search(c: &Checker, l: &raw::RawLoad, open: bool) -> Result<Option<Search>, ScenarioError> {
    let keys_without = [
        ("load.search_min", l.search_min.is_some()),
        ("load.search_max", l.search_max.is_some()),
        ("load.search_steps", l.search_steps.is_some()),
    ];
    let Some(by) = l.search else {
        if let Some((key, _)) = keys_without.iter().find(|(_, set)| *set) {
            return Err(c.err(
                key,
                "only applies with load.search",
                "add search = \"concurrency\" or \"rate\", or remove it",
            ));
        }
        return Ok(None);
    };
    let by = match (by, open) {
        (SearchBy::Concurrency, false) | (SearchBy::Rate, true) => by,
        (SearchBy::Concurrency, true) => {
            return Err(c.err(
                "load.search",
                "\"concurrency\" searches a closed loop, but mode = \"open\"",
                "use search = \"rate\" for an open loop",
            ));
        }
        (SearchBy::Rate, false) => {
            return Err(c.err(
                "load.search",
                "\"rate\" searches an open loop, but mode = \"closed\"",
                "set mode = \"open\" or search = \"concurrency\"",
            ));
        }
    };
    if l.concurrency.is_some() || l.rate.is_some() {
        let key = if open { "load.rate" } else { "load.concurrency" };
        return Err(c.err(
            key,
            "conflicts with load.search, which chooses the levels",
            "remove it; use search_min and search_max to bound the search",
        ));
    }
    let min = l.search_min.unwrap_or(1.0);
    let max = l.search_max.unwrap_or(1024.0);
    let (lowest, limit) = if open { (MIN_RATE, MAX_RATE) } else { (1.0, MAX_CONCURRENCY) };
    if !(min >= lowest && min < max && max <= limit) || (!open && (min.fract() != 0.0 || max.fract() != 0.0)) {
        return Err(c.err(
            "load.search_min",
            format!("the search range {}–{} is not usable", fmt_number(min), fmt_number(max)),
            format!("give {lowest} ≤ search_min < search_max ≤ {limit} (whole numbers for concurrency)"),
        ));
    }
    let max_steps = match l.search_steps {
        None => 12,
        Some(n) if (2..=64).contains(&n) => n as u32,
        Some(n) => {
            return Err(c.err(
                "load.search_steps",
                format!("{n} is outside 2–64"),
                "give a step budget between 2 and 64",
            ));
        }
    };
    Ok(Some(Search { by, min, max, max_steps }))
}

pub(super) fn slo(c: &Checker, table: &toml::Table, load: &Load) -> Result<Slo, ScenarioError> {
    let mut criteria = Vec::with_capacity(table.len());
    for (key, value) in table {
        let path = format!("slo.{key}");
        let threshold = match value {
            toml::Value::Integer(i) => *i as f64,
            toml::Value::Float(f) if f.is_finite() => *f,
            toml::Value::Float(f) => {
                return Err(c.err(&path, format!("{f} is not a usable threshold"), "give a finite number"));
            }
            other => {
                return Err(c.err(
                    &path,
                    format!("{other} is not a number"),
                    "give the threshold as a number, e.g. ttft_p99_ms = 2000",
                ));
            }
        };
        if threshold < 0.0 {
            return Err(c.err(&path, "is negative", "give a threshold of zero or more"));
        }
        criteria.push(criterion(c, key, threshold, &path)?);
    }
    if load.search.is_some() && criteria.is_empty() {
        return Err(c.err(
            "slo",
            "is empty, but load.search needs objectives to search against",
            "add e.g. [slo] ttft_p99_ms = 2000",
        ));
    }
    Ok(Slo { criteria })
}

fn criterion(c: &Checker, key: &str, threshold: f64, path: &str) -> Result<SloCriterion, ScenarioError> {
    let Some(objective) = Objective::parse(key) else {
        let stats: Vec<&str> = Objective::STATS.iter().map(|s| s.name()).collect();
        let examples: Vec<String> =
            Objective::METRICS.iter().map(|&m| Objective::Distribution(m, Stat::P99).key()).collect();
        return Err(c.err(
            path,
            format!("{key:?} is not an objective anvil-load can check"),
            format!(
                "name a metric and statistic ({}) such as {}, or error_rate",
                stats.join(", "),
                examples.join(", ")
            ),
        ));
    };
    if objective == Objective::ErrorRate && threshold > 1.0 {
        return Err(c.err(path, "is a fraction of requests", "write e.g. error_rate = 0.01 for 1 %"));
    }
    let bound = match objective.worse() {
        Worse::WhenHigher => Bound::AtMost,
        Worse::WhenLower => Bound::AtLeast,
    };
    Ok(SloCriterion { objective, threshold, bound })
}

/// A criterion as the scenario echo and the records' run line write it: the key it was given,
/// and the per-request field goodput compares (kept, so the echo, and with it the
/// `configuration_fingerprint` that `compare` matches runs by, stays what it was). Read back, the
/// key is parsed again and the field is not trusted.
#[derive(Serialize, Deserialize)]
pub struct WrittenCriterion {
    key: String,
    threshold: f64,
    bound: Bound,
    request_field: Option<String>,
}

impl From<SloCriterion> for WrittenCriterion {
    fn from(c: SloCriterion) -> Self {
        let request_field = c.objective.request_field();
        WrittenCriterion { key: c.objective.key(), threshold: c.threshold, bound: c.bound, request_field }
    }
}

impl TryFrom<WrittenCriterion> for SloCriterion {
    type Error = String;

    fn try_from(w: WrittenCriterion) -> Result<Self, String> {
        let objective = Objective::parse(&w.key)
            .ok_or_else(|| format!("slo key {:?} is not an objective anvil-load can check", w.key))?;
        Ok(SloCriterion { objective, threshold: w.threshold, bound: w.bound })
    }
}
