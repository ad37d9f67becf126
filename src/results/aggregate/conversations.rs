//! What a level's records say about its conversations, computed from the per-request records
//! alone (so a rebuild recomputes it from a records file): latency by turn index (turn 1 cold,
//! later turns warm), the expected reusable prefix against the server's cached tokens (a
//! cache-effectiveness ratio, per turn and overall), per-session duration and turns, session
//! goodput (the share of sessions whose every turn met the `[slo]`), per-backend latency and
//! whether sessions stayed on one backend, cross-session contamination, and agent sessions'
//! figures (`agent_sessions`). The result is the
//! level summary's `SessionSummary`.
//!
//! Records without a `session` are ignored; statistics are the level's own (`stats::Summary`:
//! nearest-rank percentiles over exact values), over performance-eligible records.

use std::collections::BTreeMap;

use super::sample::Sample;
use super::slo::meets_request_slos;
use super::stats::Summary;
use super::summary::{BackendSummary, CacheEffectiveness, SessionGoodput, SessionSummary, SessionTotals, TurnSummary};
use crate::plan::scenario::Slo;
use crate::request::record::{FailureRecord, RequestTiming};

impl CacheEffectiveness {
    fn add(&mut self, r: &RequestTiming) {
        if let (Some(expected), Some(cached)) = (r.replay.expected_cached_tokens, r.cached_tokens) {
            self.samples += 1;
            self.expected_cached_tokens = self.expected_cached_tokens.saturating_add(u64::from(expected));
            self.cached_tokens = self.cached_tokens.saturating_add(cached);
        }
    }

    fn finish(mut self) -> Self {
        self.ratio =
            (self.expected_cached_tokens > 0).then(|| self.cached_tokens as f64 / self.expected_cached_tokens as f64);
        self
    }
}

/// The summary of a level's conversations; `None` when no record belongs to one.
pub fn summarise(records: &[RequestTiming], failures: &[FailureRecord], slo: &Slo) -> Option<SessionSummary> {
    let records: Vec<&RequestTiming> = records.iter().filter(|r| r.replay.session.is_some()).collect();
    let failures: Vec<&FailureRecord> = failures.iter().filter(|f| f.replay.session.is_some()).collect();
    if records.is_empty() && failures.is_empty() {
        return None;
    }
    let cache = records.iter().fold(CacheEffectiveness::default(), |mut c, r| {
        c.add(r);
        c
    });
    Some(SessionSummary {
        by_turn: by_turn(&records, &failures),
        cache: cache.finish(),
        totals: totals(&records, &failures),
        goodput: goodput(&records, &failures, slo),
        backends: backends(&records, &failures),
        sessions_on_one_backend: one_backend(&records, &failures),
        cross_session_contaminated: records
            .iter()
            .filter(|r| r.request_canary.as_ref().and_then(|c| c.cross_session_marker_count).is_some_and(|n| n > 0))
            .count() as u64,
        agent: super::agent_sessions::summarise(&records),
    })
}

fn eligible<'a>(records: &'a [&'a RequestTiming]) -> impl Iterator<Item = &'a RequestTiming> + 'a {
    records.iter().copied().filter(|r| r.performance_eligible)
}

fn by_turn(records: &[&RequestTiming], failures: &[&FailureRecord]) -> Vec<TurnSummary> {
    let mut turns: BTreeMap<u32, (Vec<&RequestTiming>, u64)> = BTreeMap::new();
    for r in records {
        turns.entry(r.replay.turn.unwrap_or(0)).or_default().0.push(r);
    }
    for f in failures {
        turns.entry(f.replay.turn.unwrap_or(0)).or_default().1 += 1;
    }
    turns
        .into_iter()
        .map(|(turn, (rs, failed))| {
            let ok: Vec<&RequestTiming> = eligible(&rs).collect();
            let mut cache = CacheEffectiveness::default();
            rs.iter().for_each(|r| cache.add(r));
            TurnSummary {
                turn,
                completed: rs.len() as u64,
                failed,
                ttft_ms: Summary::of(ok.iter().filter_map(|r| r.ttft_ms).collect()),
                tpot_ms: Summary::of(ok.iter().filter_map(|r| r.tpot_ms).collect()),
                e2e_ms: Summary::of(ok.iter().map(|r| r.e2e_ms).collect()),
                prompt_tokens: Summary::of(ok.iter().filter_map(|r| r.prompt_tokens.map(|p| p as f64)).collect()),
                cache: cache.finish(),
            }
        })
        .collect()
}

/// Per session: (first start, last end, requests, failures).
fn spans(records: &[&RequestTiming], failures: &[&FailureRecord]) -> BTreeMap<String, (f64, f64, u64, u64)> {
    let mut out: BTreeMap<String, (f64, f64, u64, u64)> = BTreeMap::new();
    let mut add = |session: &str, start: f64, end: f64, failed: bool| {
        let e = out.entry(session.to_string()).or_insert((f64::MAX, f64::MIN, 0, 0));
        e.0 = e.0.min(start);
        e.1 = e.1.max(end);
        e.2 += 1;
        e.3 += u64::from(failed);
    };
    for r in records {
        add(r.replay.session.as_deref().unwrap_or_default(), r.start_offset_ms, r.start_offset_ms + r.e2e_ms, false);
    }
    for f in failures {
        add(f.replay.session.as_deref().unwrap_or_default(), f.start_offset_ms, f.start_offset_ms + f.elapsed_ms, true);
    }
    out
}

fn totals(records: &[&RequestTiming], failures: &[&FailureRecord]) -> SessionTotals {
    let spans = spans(records, failures);
    SessionTotals {
        sessions: spans.len() as u64,
        without_failures: spans.values().filter(|s| s.3 == 0).count() as u64,
        duration_ms: Summary::of(spans.values().map(|s| s.1 - s.0).collect()),
        turns: Summary::of(spans.values().map(|s| s.2 as f64).collect()),
    }
}

fn goodput(records: &[&RequestTiming], failures: &[&FailureRecord], slo: &Slo) -> Option<SessionGoodput> {
    if slo.criteria.is_empty() {
        return None;
    }
    let mut good: BTreeMap<&str, bool> = BTreeMap::new();
    for r in records {
        let ok = r.performance_eligible && meets_request_slos(&Sample::from_record(r), slo);
        let e = good.entry(r.replay.session.as_deref().unwrap_or_default()).or_insert(true);
        *e &= ok;
    }
    for f in failures {
        good.insert(f.replay.session.as_deref().unwrap_or_default(), false);
    }
    let sessions = good.len() as u64;
    let good_sessions = good.values().filter(|g| **g).count() as u64;
    Some(SessionGoodput {
        sessions,
        good_sessions,
        ratio: if sessions > 0 { good_sessions as f64 / sessions as f64 } else { 0.0 },
    })
}

fn backends(records: &[&RequestTiming], failures: &[&FailureRecord]) -> Vec<BackendSummary> {
    let mut by: BTreeMap<&str, (Vec<&RequestTiming>, u64)> = BTreeMap::new();
    for r in records {
        if let Some(b) = r.replay.backend.as_deref() {
            by.entry(b).or_default().0.push(r);
        }
    }
    for f in failures {
        if let Some(b) = f.replay.backend.as_deref() {
            by.entry(b).or_default().1 += 1;
        }
    }
    by.into_iter()
        .map(|(backend, (rs, failed))| {
            let ok: Vec<&RequestTiming> = eligible(&rs).collect();
            BackendSummary {
                backend: backend.to_string(),
                completed: rs.len() as u64,
                failed,
                ttft_ms: Summary::of(ok.iter().filter_map(|r| r.ttft_ms).collect()),
                e2e_ms: Summary::of(ok.iter().map(|r| r.e2e_ms).collect()),
            }
        })
        .collect()
}

fn one_backend(records: &[&RequestTiming], failures: &[&FailureRecord]) -> Option<(u64, u64)> {
    let mut seen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let pairs = records
        .iter()
        .map(|r| (r.replay.session.as_deref(), r.replay.backend.as_deref()))
        .chain(failures.iter().map(|f| (f.replay.session.as_deref(), f.replay.backend.as_deref())));
    for (session, backend) in pairs {
        if let (Some(s), Some(b)) = (session, backend) {
            let list = seen.entry(s).or_default();
            if !list.contains(&b) {
                list.push(b);
            }
        }
    }
    (!seen.is_empty()).then(|| (seen.values().filter(|b| b.len() == 1).count() as u64, seen.len() as u64))
}

#[cfg(test)]
mod tests;
