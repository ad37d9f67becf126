//! The run's pushes of its live metrics (`run.remote_write`, `run.otlp`): the pusher started
//! before the first level and finished after the last (its final push is the run's end
//! state), and, until the live registry feeds it, each level's running counts as its reading:
//! requests by level and outcome, and completion tokens, as the aggregator counts them.

use std::sync::{Arc, Mutex};

use crate::contract::Metric;
use crate::distributed::shard::Shard;
use crate::plan::scenario::Scenario;
use crate::results::aggregate::LiveStats;
use crate::results::live::names;
use crate::results::live::otlp::Source;
use crate::results::live::push::{self, EndpointReport, Pusher, Readings};
use crate::results::live::snapshot::{Family, Kind, Series, Snapshot, Value};

/// Each level's counts so far, in the order the levels ran.
#[derive(Default)]
pub(super) struct LiveCounts {
    levels: Mutex<Vec<LevelCounts>>,
    constant_labels: Vec<(&'static str, String)>,
}

struct LevelCounts {
    level: String,
    completed: u64,
    failed: u64,
    dropped: u64,
    completion_tokens: u64,
}

impl LiveCounts {
    /// The aggregator's running counts of `level` (called as each outcome is collected).
    pub(super) fn set(&self, level: &str, live: &LiveStats) {
        let mut levels = self.levels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = match levels.iter().position(|l| l.level == level) {
            Some(at) => at,
            None => {
                let fresh =
                    LevelCounts { level: level.to_string(), completed: 0, failed: 0, dropped: 0, completion_tokens: 0 };
                levels.push(fresh);
                levels.len() - 1
            }
        };
        let l = &mut levels[at];
        (l.completed, l.failed, l.dropped, l.completion_tokens) =
            (live.completed, live.failed, live.dropped, live.output_tokens);
    }
}

impl Readings for LiveCounts {
    fn snapshot(&self) -> Snapshot {
        let levels = self.levels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut requests = Vec::new();
        let mut tokens = Vec::new();
        for l in levels.iter() {
            for (outcome, n) in [("completed", l.completed), ("failed", l.failed), ("dropped", l.dropped)] {
                requests.push(Series {
                    labels: vec![("level", l.level.clone()), ("outcome", outcome.to_string())],
                    value: Value::Number(n as f64),
                });
            }
            tokens.push(Series {
                labels: vec![("level", l.level.clone())],
                value: Value::Number(l.completion_tokens as f64),
            });
        }
        Snapshot {
            taken_unix_ms: push::now_unix_ms(),
            constant_labels: self.constant_labels.clone(),
            families: vec![
                Family {
                    name: names::REQUESTS.to_string(),
                    help: "Requests that ended, by level and outcome.",
                    kind: Kind::Counter,
                    series: requests,
                },
                Family {
                    name: names::token_counter(Metric::CompletionTokens),
                    help: "Completion tokens of completed requests, by level.",
                    kind: Kind::Counter,
                    series: tokens,
                },
            ],
        }
    }
}

/// The pusher, when the scenario pushes, and the counts it reads.
pub(super) fn start(scenario: &Scenario, shard: &Shard) -> Result<Option<(Pusher, Arc<LiveCounts>)>, String> {
    let Some(settings) = &scenario.run.push else { return Ok(None) };
    let constant_labels = shard.index().map(|i| vec![("shard", i.to_string())]).unwrap_or_default();
    let counts = Arc::new(LiveCounts { levels: Mutex::default(), constant_labels });
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let source = Source { run_id: shard.run_id().to_string(), start_unix_ns: since.as_nanos() as u64 };
    let pusher = Pusher::start(settings, counts.clone(), source)?;
    Ok(Some((pusher, counts)))
}

/// The final push, then a line for every endpoint that missed some.
pub(super) async fn finish(pusher: Option<Pusher>) -> Vec<EndpointReport> {
    let Some(pusher) = pusher else { return Vec::new() };
    let reports = pusher.finish().await;
    for line in reports.iter().filter_map(EndpointReport::warning) {
        eprintln!("warning: {line}");
    }
    reports
}
