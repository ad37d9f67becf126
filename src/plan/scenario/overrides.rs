//! Values given on the command line (or in the environment) that replace the scenario file's,
//! and how they replace them: before validation, so the same rules check them and a refusal
//! names the option that set the value.

use super::checker::Checker;
use super::raw::{self, RawScenario};
use super::{ScenarioError, SearchBy};

/// Values given on the command line (or in the environment) that replace the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub base_url: Option<String>,
    /// Where `base_url` came from, for error messages (`--base-url` or `ANVIL_BASE_URL`).
    pub base_url_origin: Option<&'static str>,
    pub model: Option<String>,
    pub concurrency: Option<Vec<u32>>,
    /// `--rate`: open-loop rates.
    pub rate: Option<Vec<f64>>,
    pub requests: Option<u64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    pub simulator: Option<String>,
    /// `--tokenizer`: `estimate`, `calibrate` or a path.
    pub tokenizer: Option<String>,
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
        c.set_by("target.base_url", o.base_url_origin.unwrap_or("--base-url"));
    }
    if let Some(model) = &o.model {
        raw.target.model = model.clone();
        c.set_by("target.model", "--model");
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
            c.set_by("load.sessions", "--concurrency");
        } else {
            raw.load.concurrency = levels;
            c.set_by("load.concurrency", "--concurrency");
        }
        c.set_by("load.mode", "--concurrency");
        if !replaced.is_empty() {
            notes.push(format!("--concurrency runs a closed loop; it replaces the scenario's {}", replaced.join(", ")));
        }
    }
    if let Some(rates) = &o.rate {
        let replaced = switch_mode(&mut raw.load, raw::RawLoadMode::Open);
        raw.load.rate = Some(raw::Levels::Many(rates.clone()));
        c.set_by("load.rate", "--rate");
        c.set_by("load.mode", "--rate");
        if !replaced.is_empty() {
            notes.push(format!("--rate runs an open loop; it replaces the scenario's {}", replaced.join(", ")));
        }
    }
    if let Some(n) = o.requests {
        raw.run.requests = Some(n);
        c.set_by("run.requests", "--requests");
    }
    if let Some(n) = o.max_tokens {
        raw.workload.max_tokens = i64::from(n);
        c.set_by("workload.max_tokens", "--max-tokens");
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
