//! Several replicas (`target.base_urls`) with `target.metrics = true`: every replica's own
//! `/metrics` (beside its base URL) scraped through the level, each by its own `Scraper` into its
//! own file (`<level>.replica<i>.server-metrics.ndjson` for the replicas after the first), and
//! kept apart: the level's `server_metrics` is the first replica's, as for one server, and its
//! `replicas[]` holds every replica's summary in order, the first included. A `metrics_url`
//! names one endpoint, which is scraped alone.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::{LevelScraper, LevelServerMetrics, PreparedLevel, Scraper, file_name};

/// The scrapers of the replicas after the first (whose scraper is the run's own).
#[derive(Clone, Default)]
pub struct ReplicaScrapers {
    scrapers: Vec<Scraper>,
}

impl ReplicaScrapers {
    /// One scraper per URL (replicas 1, 2, …), each like the run's own.
    pub fn new(urls: &[String], interval: Duration, redact: bool) -> Result<Self, String> {
        let scrapers = urls.iter().map(|u| Scraper::new(u, interval, redact)).collect::<Result<_, _>>()?;
        Ok(ReplicaScrapers { scrapers })
    }

    /// Each scraper withholds `secrets` too.
    pub fn with_secrets(self, secrets: &crate::redact::Secrets) -> Self {
        ReplicaScrapers { scrapers: self.scrapers.into_iter().map(|s| s.with_secrets(secrets)).collect() }
    }

    /// The start scrapes of the level, each writing beside `stem`'s artifact in `dir`.
    pub async fn prepare(&self, level: &str, dir: &std::path::Path, stem: &str) -> PreparedReplicas {
        let mut prepared = Vec::with_capacity(self.scrapers.len());
        for (i, s) in self.scrapers.iter().enumerate() {
            let file: PathBuf = dir.join(file_name(&format!("{stem}.replica{}", i + 1)));
            prepared.push(s.prepare(level, Some(file)).await);
        }
        PreparedReplicas(prepared)
    }
}

/// The replicas' levels, prepared.
pub struct PreparedReplicas(Vec<PreparedLevel>);

impl PreparedReplicas {
    pub fn start(self, level_start: Instant) -> ScrapingReplicas {
        ScrapingReplicas(self.0.into_iter().map(|p| p.start(level_start)).collect())
    }
}

/// The replicas' levels, being scraped.
pub struct ScrapingReplicas(Vec<LevelScraper>);

impl ScrapingReplicas {
    /// The end scrapes; `first` (the run's own scraper's summary) gets every replica's in
    /// `replicas`, itself first. Nothing changes without other replicas.
    pub async fn finish(self, first: Option<LevelServerMetrics>) -> Option<LevelServerMetrics> {
        let mut first = first?;
        if self.0.is_empty() {
            return Some(first);
        }
        let mut all = vec![first.clone()];
        for s in self.0 {
            all.push(s.finish().await);
        }
        first.replicas = all;
        Some(first)
    }
}
