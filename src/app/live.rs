//! The run's live metrics: one registry the aggregator feeds, served at the client's own
//! `/metrics` (`run.metrics_listen`: bound before anything is sent, an address in use refuses
//! the run with exit code 2, kept up `run.metrics_linger` after the run so that a last scrape
//! sees the end) and pushed (`run.remote_write`, `run.otlp`: a push every interval from the
//! first level on, the final one after the last request, its failures counted and warned about
//! once per endpoint).

use std::sync::Arc;
use std::time::Duration;

use super::AppError;
use crate::distributed::shard::Shard;
use crate::plan::scenario::{Scenario, ScenarioError};
use crate::results::live::Registry;
use crate::results::live::otlp::Source;
use crate::results::live::push::{EndpointReport, Pusher};
use crate::results::live::serve::{Bound, Exporter};

/// The run's live metrics, its `/metrics` and its pushes.
pub(super) struct Live {
    pub(super) registry: Registry,
    exporter: Option<Exporter>,
    pusher: Option<Pusher>,
    linger: Duration,
}

/// The registry when the scenario serves or pushes its live metrics; `/metrics` bound and
/// served from now on (its URL printed once).
pub(super) async fn start(scenario: &Scenario) -> Result<Option<Live>, AppError> {
    if scenario.run.metrics_listen.is_none() && scenario.run.push.is_none() {
        return Ok(None);
    }
    let registry = Registry::new();
    let exporter = match scenario.run.metrics_listen {
        None => None,
        Some(addr) => {
            let bound = Bound::bind(addr).await.map_err(|problem| {
                AppError::BadInput(
                    ScenarioError {
                        file: scenario.path.display().to_string(),
                        key: "run.metrics_listen".into(),
                        problem,
                        fix: "choose a free port (port 0 takes one), or stop the process that holds this one".into(),
                    }
                    .to_string(),
                )
            })?;
            let exporter = bound.serve(registry.clone());
            eprintln!("client metrics: {}", crate::redact::redact_url(exporter.url()));
            Some(exporter)
        }
    };
    Ok(Some(Live { registry, exporter, pusher: None, linger: scenario.run.metrics_linger }))
}

impl Live {
    /// Start pushing, when the scenario pushes: once the shard is known (its index labels
    /// every series) and just before the first level.
    pub(super) fn push(&mut self, scenario: &Scenario, shard: &Shard) -> Result<(), String> {
        let Some(settings) = &scenario.run.push else { return Ok(()) };
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let source = Source { run_id: shard.run_id().to_string(), start_unix_ns: since.as_nanos() as u64 };
        self.pusher = Some(Pusher::start(settings, Arc::new(self.registry.clone()), source)?);
        Ok(())
    }

    /// After the last request: the final push (the end state), then a line for every endpoint
    /// that missed some.
    pub(super) async fn push_final(&mut self) -> Vec<EndpointReport> {
        let Some(pusher) = self.pusher.take() else { return Vec::new() };
        let reports = pusher.finish().await;
        for line in reports.iter().filter_map(EndpointReport::warning) {
            eprintln!("warning: {line}");
        }
        reports
    }

    /// Serve the final counts for the linger, then stop.
    pub(super) async fn finish(mut self) {
        self.push_final().await;
        let Some(exporter) = self.exporter else { return };
        if !self.linger.is_zero() {
            eprintln!(
                "client metrics: kept up {} for a last scrape (run.metrics_linger)",
                humantime::format_duration(self.linger)
            );
        }
        exporter.finish(self.linger).await;
    }
}
