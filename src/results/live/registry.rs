//! The one registry of a run's live metrics: counters and fixed-bucket histograms that the
//! aggregator feeds as it collects, and the gauges read at the instant of a reading.
//!
//! One `Mutex` over plain integers, taken once per outcome (a few additions and at most a few
//! dozen bucket increments for a response's gap sketch) and once per reading. The aggregator is
//! one task, so the lock is contended only while a scrape or a push copies it out, which is a
//! few microseconds; atomics per bucket would make every reading a torn one (a `_count` that
//! disagrees with its buckets) for no measurable gain (see `make bench`, the `/metrics` row).
//!
//! What is counted, and when, so that the figures and the artifact agree:
//! - `anvil_requests_total{outcome}` counts every request that ended, any phase: completed,
//!   failed, dropped (open loop, an arrival never sent).
//! - The phase is the one known while collecting: `warmup` for requests inside `run.warmup`,
//!   else `measured`. Cool-down is decided when the level ends (it depends on where the level
//!   stopped), so its requests are counted as `measured` here, while the artifact moves them out.
//! - Time histograms count a completed request unless the artifact excludes it for a reason
//!   other than its phase (a failed canary, implausible usage, a broken schema, a missed
//!   controlled output, the prefix warm-up request): with no cool-down, `_count{phase="measured"}`
//!   is the artifact's count of that metric. `itl_chunk` counts every gap of those requests'
//!   gap sketches (each gap at its sketch value, within 0.4 % of the gap). Schedule lag and queue
//!   wait count every request sent, completed or failed, as the artifact does.
//! - Token counters add every completed request's `prompt_tokens` and `output_tokens` as its
//!   record states them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use super::names;
use super::snapshot::{Buckets, Family, Kind, Series, Snapshot, Value};
use crate::contract::{ErrorKind, Metric};
use crate::request::record::timing::{Exclusion, FailureRecord, Phase, RequestTiming};

/// The run's live metrics: cheap to clone, one per run, shared by every level and every reader.
#[derive(Clone, Default)]
pub struct Registry {
    state: Arc<Mutex<State>>,
    /// The client's lateness, µs: the worst probe of the last second (see `lateness`).
    lateness_us: Arc<AtomicU64>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    constant_labels: Vec<(&'static str, String)>,
    in_flight: Option<Arc<AtomicU64>>,
    /// Every level run so far, in the order they were first run.
    levels: Vec<LevelCounts>,
    /// The level running (or the last one run): its place in `levels`, and its ordinal among the
    /// levels started (a capacity search may run one level twice).
    current: Option<(usize, u64)>,
    started: u64,
}

/// The label values of `phase`, in `PhaseCounts` order.
const PHASES: [&str; 2] = ["warmup", "measured"];
/// The label values of `outcome`, in `PhaseCounts::outcomes` order.
const OUTCOMES: [&str; 3] = ["completed", "failed", "dropped"];

struct LevelCounts {
    label: String,
    phases: [PhaseCounts; 2],
    errors: BTreeMap<ErrorKind, u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
}

#[derive(Default)]
struct PhaseCounts {
    outcomes: [u64; 3],
    /// In `names::HISTOGRAMS` order.
    histograms: [Histogram; names::HISTOGRAMS.len()],
}

/// Observations per bucket (not cumulative; the last one is above every bound), and their sum.
#[derive(Clone, Copy)]
struct Histogram {
    counts: [u64; names::BUCKETS_SECONDS.len() + 1],
    sum_seconds: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; names::BUCKETS_SECONDS.len() + 1], sum_seconds: 0.0 }
    }
}

impl Histogram {
    fn observe_n(&mut self, seconds: f64, n: u64) {
        // `le` is "less than or equal": the first bound not below the value.
        let i = names::BUCKETS_SECONDS.partition_point(|&b| b < seconds);
        self.counts[i] += n;
        self.sum_seconds += seconds * n as f64;
    }

    fn observe_ms(&mut self, ms: Option<f64>) {
        if let Some(ms) = ms.filter(|v| v.is_finite()) {
            self.observe_n(ms.max(0.0) / 1000.0, 1);
        }
    }

    fn reading(&self) -> Buckets {
        let mut seen = 0;
        let cumulative = names::BUCKETS_SECONDS
            .iter()
            .zip(self.counts)
            .map(|(&bound, n)| {
                seen += n;
                (bound, seen)
            })
            .collect();
        let count = self.counts.iter().sum();
        Buckets { cumulative, count, sum: self.sum_seconds }
    }
}

fn index_of(m: Metric) -> usize {
    names::HISTOGRAMS.iter().position(|&h| h == m).unwrap_or(0)
}

fn phase_index(p: Phase) -> usize {
    match p {
        Phase::Warmup => 0,
        // Cool-down is decided at the level's end; while collecting it is measurement.
        Phase::Measure | Phase::Cooldown => 1,
    }
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A reader that panicked leaves plain integers behind: still a valid reading.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Labels every series carries, fixed for the run (`shard` in a sharded run).
    pub fn set_constant_labels(&self, labels: Vec<(&'static str, String)>) {
        self.lock().constant_labels = labels;
    }

    /// The client's count of requests in flight, read at every reading.
    pub fn watch_in_flight(&self, in_flight: Arc<AtomicU64>) {
        self.lock().in_flight = Some(in_flight);
    }

    /// Where the lateness probe publishes its figure (µs).
    pub fn lateness_us(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.lateness_us)
    }

    /// A level starts: its outcomes are counted under `label` (`c8`, `r2.5`). A label run
    /// before (a capacity search back at a level) goes on counting where it stopped, so no
    /// counter ever goes down.
    pub fn start_level(&self, label: &str) -> LevelMetrics {
        let mut s = self.lock();
        let index = match s.levels.iter().position(|l| l.label == label) {
            Some(i) => i,
            None => {
                s.levels.push(LevelCounts {
                    label: label.to_string(),
                    phases: Default::default(),
                    errors: BTreeMap::new(),
                    prompt_tokens: 0,
                    completion_tokens: 0,
                });
                s.levels.len() - 1
            }
        };
        s.current = Some((index, s.started));
        s.started += 1;
        LevelMetrics { registry: self.clone(), index }
    }

    /// Every family at this instant (taken under the lock, rendered outside it).
    pub fn snapshot(&self) -> Snapshot {
        let taken_unix_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let lateness = self.lateness_us.load(Ordering::Relaxed) as f64 / 1e6;
        let s = self.lock();
        let level = |l: &LevelCounts| ("level", l.label.clone());
        let mut requests = Vec::new();
        let mut errors = Vec::new();
        let mut prompt = Vec::new();
        let mut completion = Vec::new();
        let mut histograms: Vec<Vec<Series>> = vec![Vec::new(); names::HISTOGRAMS.len()];
        for l in &s.levels {
            for (p, counts) in PHASES.iter().zip(&l.phases) {
                for (o, &n) in OUTCOMES.iter().zip(&counts.outcomes) {
                    let labels = vec![level(l), ("phase", p.to_string()), ("outcome", o.to_string())];
                    requests.push(Series { labels, value: Value::Number(n as f64) });
                }
                for (out, h) in histograms.iter_mut().zip(&counts.histograms) {
                    let labels = vec![level(l), ("phase", p.to_string())];
                    out.push(Series { labels, value: Value::Histogram(h.reading()) });
                }
            }
            for (kind, &n) in &l.errors {
                errors.push(Series {
                    labels: vec![level(l), ("kind", kind.to_string())],
                    value: Value::Number(n as f64),
                });
            }
            prompt.push(Series { labels: vec![level(l)], value: Value::Number(l.prompt_tokens as f64) });
            completion.push(Series { labels: vec![level(l)], value: Value::Number(l.completion_tokens as f64) });
        }
        let current = s.current.and_then(|(i, ordinal)| s.levels.get(i).map(|l| (level(l), ordinal)));
        let in_flight = match (&current, &s.in_flight) {
            (Some((label, _)), Some(n)) => {
                vec![Series { labels: vec![label.clone()], value: Value::Number(n.load(Ordering::Relaxed) as f64) }]
            }
            _ => Vec::new(),
        };
        let level_gauge = current
            .map(|(label, ordinal)| Series { labels: vec![label], value: Value::Number(ordinal as f64) })
            .into_iter()
            .collect();
        let family =
            |name: String, help: &'static str, kind: Kind, series: Vec<Series>| Family { name, help, kind, series };
        let mut families = vec![
            family(names::REQUESTS.into(), "Requests that ended, by outcome.", Kind::Counter, requests),
            family(names::ERRORS.into(), "Failed requests by error kind.", Kind::Counter, errors),
            family(names::IN_FLIGHT.into(), "Requests sent and not yet ended.", Kind::Gauge, in_flight),
            family(names::LEVEL.into(), "The level running: its ordinal in the run, from 0.", Kind::Gauge, level_gauge),
            family(
                names::LATENESS.into(),
                "The client's own lateness: the worst timer overshoot of the last second.",
                Kind::Gauge,
                vec![Series { labels: Vec::new(), value: Value::Number(lateness) }],
            ),
        ];
        for (m, series) in names::TOKEN_COUNTERS.into_iter().zip([prompt, completion]) {
            let help = match m {
                Metric::PromptTokens => "Prompt tokens of completed requests, as the server counted them.",
                _ => "Output tokens of completed requests.",
            };
            families.push(family(names::token_counter(m), help, Kind::Counter, series));
        }
        for (m, series) in names::HISTOGRAMS.into_iter().zip(histograms) {
            families.push(family(names::histogram(m), histogram_help(m), Kind::Histogram, series));
        }
        Snapshot { taken_unix_ms, constant_labels: s.constant_labels.clone(), families }
    }
}

fn histogram_help(m: Metric) -> &'static str {
    match m {
        Metric::Ttft => "Time to the first visible content token, seconds.",
        Metric::TimeToFirstOutput => "Time to the first output token, reasoning included, seconds.",
        Metric::Tpot => "Time per output token after the first, seconds.",
        Metric::ItlChunk => "Every gap between output chunks, seconds.",
        Metric::E2e => "Request latency from send to the last byte, seconds.",
        Metric::ScheduleLag => "Open loop: how late a request was sent against its schedule, seconds.",
        Metric::QueueWait => "Open loop with an in-flight cap: the wait for a slot, seconds.",
        _ => "Seconds.",
    }
}

/// Where one level's outcomes are counted.
#[derive(Clone)]
pub struct LevelMetrics {
    registry: Registry,
    index: usize,
}

impl std::fmt::Debug for LevelMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelMetrics").field("index", &self.index).finish_non_exhaustive()
    }
}

impl LevelMetrics {
    fn with(&self, f: impl FnOnce(&mut LevelCounts)) {
        let mut s = self.registry.lock();
        if let Some(l) = s.levels.get_mut(self.index) {
            f(l);
        }
    }

    /// A completed request, as its record says (see the module doc for what each family counts).
    pub fn completed(&self, r: &RequestTiming) {
        // Phase exclusions are the label; every other exclusion keeps the times out.
        let in_distributions = matches!(r.exclusion_reason, None | Some(Exclusion::Warmup | Exclusion::Cooldown));
        self.with(|l| {
            l.prompt_tokens = l.prompt_tokens.saturating_add(r.prompt_tokens.unwrap_or(0));
            l.completion_tokens = l.completion_tokens.saturating_add(r.output_tokens);
            let p = &mut l.phases[phase_index(r.phase)];
            p.outcomes[0] += 1;
            let h = &mut p.histograms;
            h[index_of(Metric::ScheduleLag)].observe_ms(r.schedule_lag_ms);
            h[index_of(Metric::QueueWait)].observe_ms(r.queue_wait_ms);
            if !in_distributions {
                return;
            }
            h[index_of(Metric::Ttft)].observe_ms(r.ttft_ms);
            h[index_of(Metric::TimeToFirstOutput)].observe_ms(Some(r.time_to_first_output_ms));
            h[index_of(Metric::Tpot)].observe_ms(r.tpot_ms);
            h[index_of(Metric::E2e)].observe_ms(Some(r.e2e_ms));
            if let Some(gaps) = &r.chunk_gaps_us {
                let itl = &mut h[index_of(Metric::ItlChunk)];
                for &(us, n) in &gaps.0 {
                    itl.observe_n(us as f64 / 1e6, u64::from(n));
                }
            }
        });
    }

    /// A failed request: its outcome, its kind, and the lag of its sending.
    pub fn failed(&self, f: &FailureRecord) {
        self.with(|l| {
            *l.errors.entry(f.error_kind).or_insert(0) += 1;
            let p = &mut l.phases[phase_index(f.phase)];
            p.outcomes[1] += 1;
            p.histograms[index_of(Metric::ScheduleLag)].observe_ms(f.schedule_lag_ms);
            p.histograms[index_of(Metric::QueueWait)].observe_ms(f.queue_wait_ms);
        });
    }

    /// An open-loop arrival dropped before it was sent.
    pub fn dropped(&self, phase: Phase) {
        self.with(|l| l.phases[phase_index(phase)].outcomes[2] += 1);
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
