//! Other metrics endpoints (`target.metrics_urls`: a DCGM exporter, a node exporter, a replica
//! the run does not send to), each scraped like the server's by its own `Scraper`, into its own
//! file (`<level>.endpoint<i>.server-metrics.ndjson`, `i` its index in the list), and kept apart
//! in the level's `server_metrics.endpoints[]`, in the scenario's order.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::{LevelScraper, LevelServerMetrics, PreparedLevel, Scraper, file_name};

/// The scrapers of the listed endpoints.
#[derive(Clone, Default)]
pub struct EndpointScrapers {
    scrapers: Vec<Scraper>,
}

impl EndpointScrapers {
    /// One scraper per URL, each like the server's (the same interval, bounds and sanitizing;
    /// never the run's headers, which belong to the API's server).
    pub fn new(urls: &[String], interval: Duration, redact: bool) -> Result<Self, String> {
        let scrapers = urls.iter().map(|u| Scraper::new(u, interval, redact)).collect::<Result<_, _>>()?;
        Ok(EndpointScrapers { scrapers })
    }

    /// Each scraper withholds `secrets` too.
    pub fn with_secrets(self, secrets: &crate::redact::Secrets) -> Self {
        EndpointScrapers { scrapers: self.scrapers.into_iter().map(|s| s.with_secrets(secrets)).collect() }
    }

    /// The file of endpoint `i` beside the level's artifact `stem`.
    pub fn file(stem: &str, i: usize) -> String {
        file_name(&format!("{stem}.endpoint{i}"))
    }

    /// The start scrapes of the level, each writing beside `stem`'s artifact in `dir`.
    pub async fn prepare(&self, level: &str, dir: &Path, stem: &str) -> PreparedEndpoints {
        let prepared =
            self.scrapers.iter().enumerate().map(|(i, s)| s.prepare(level, Some(dir.join(Self::file(stem, i)))));
        PreparedEndpoints(futures::future::join_all(prepared).await)
    }
}

/// The endpoints' levels, prepared.
pub struct PreparedEndpoints(Vec<PreparedLevel>);

impl PreparedEndpoints {
    pub fn start(self, level_start: Instant) -> ScrapingEndpoints {
        ScrapingEndpoints(self.0.into_iter().map(|p| p.start(level_start)).collect())
    }
}

/// The endpoints' levels, being scraped.
pub struct ScrapingEndpoints(Vec<LevelScraper>);

impl ScrapingEndpoints {
    /// The end scrapes, together; `server` (the server's summary) gets every endpoint's in
    /// `endpoints`. Nothing changes without endpoints.
    pub async fn finish(self, server: Option<LevelServerMetrics>) -> Option<LevelServerMetrics> {
        let ends = futures::future::join_all(self.0.into_iter().map(LevelScraper::finish)).await;
        let mut server = server?;
        server.endpoints = ends;
        Some(server)
    }
}
