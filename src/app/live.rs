//! The client's own `/metrics` over one run: the address bound before anything is sent (an
//! address in use refuses the run with exit code 2), served from the run's registry from then
//! on, and kept up `run.metrics_linger` after the run so that a last scrape sees the end.

use std::time::Duration;

use super::AppError;
use crate::plan::scenario::{Scenario, ScenarioError};
use crate::results::live::Registry;
use crate::results::live::serve::{Bound, Exporter};

/// The run's live metrics and their `/metrics`.
pub(super) struct Live {
    pub(super) registry: Registry,
    exporter: Exporter,
    linger: Duration,
}

/// Bind `run.metrics_listen` and serve it, when the scenario asks; the bound URL is printed once.
pub(super) async fn start(scenario: &Scenario) -> Result<Option<Live>, AppError> {
    let Some(addr) = scenario.run.metrics_listen else { return Ok(None) };
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
    let registry = Registry::new();
    let exporter = bound.serve(registry.clone());
    eprintln!("client metrics: {}", crate::redact::redact_url(exporter.url()));
    Ok(Some(Live { registry, exporter, linger: scenario.run.metrics_linger }))
}

impl Live {
    /// Serve the final counts for the linger, then stop.
    pub(super) async fn finish(self) {
        if !self.linger.is_zero() {
            eprintln!(
                "client metrics: kept up {} for a last scrape (run.metrics_linger)",
                humantime::format_duration(self.linger)
            );
        }
        self.exporter.finish(self.linger).await;
    }
}
