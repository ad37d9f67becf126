//! One run's levels, each from its start to its artifact: the `Session` that holds what every
//! level shares (the client, the workload, the records, the stop signal), the loop over a fixed
//! list of levels or a capacity search, and one level run, recorded, summarised and written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::AppError;
use super::ending;
use super::setup::{self, RunTarget};
use crate::cli::RunArgs;
use crate::distributed::shard::Shard;
use crate::plan::scenario::{LevelPacing, Scenario};
use crate::plan::search::{CapacitySearch, Probe};
use crate::request::record::file::RecordLine;
use crate::request::record::writer::RecordSink;
use crate::request::record::{RunInfo, Stamp};
use crate::request::schedule::lateness::LatenessProbe;
use crate::request::schedule::{self, LevelPlan, RunControl};
use crate::request::server_metrics;
use crate::request::worker::Client;
use crate::request::workload::Workload;
use crate::results::aggregate::snapshots::{SnapshotConfig, Snapshots};
use crate::results::aggregate::summary::LevelSummary;
use crate::results::aggregate::warnings::Warning;
use crate::results::aggregate::{self, LevelInput, LevelSink, Origin};
use crate::results::artifact;
use crate::results::console::{self, Progress};

/// Everything a level needs that stays the same across levels.
pub(super) struct Session<'a> {
    pub(super) args: &'a RunArgs,
    pub(super) scenario: &'a Scenario,
    pub(super) target: RunTarget,
    pub(super) client: Client,
    pub(super) workload: Arc<Workload>,
    pub(super) info: RunInfo,
    pub(super) records: RecordSink,
    pub(super) control: RunControl,
    pub(super) run_id: String,
    pub(super) shard: Shard,
    /// The server's `/metrics`, scraped around every level when the scenario asks.
    pub(super) scraper: Option<server_metrics::Scraper>,
    /// Several replicas scraped beside their base URLs: the replicas after the first.
    pub(super) replica_scrapers: server_metrics::ReplicaScrapers,
    /// The run's live metrics, when `/metrics` serves them or a push sends them.
    pub(super) live: Option<crate::results::live::Registry>,
    /// `target.metrics_urls`: the other endpoints, each kept apart.
    pub(super) endpoint_scrapers: server_metrics::EndpointScrapers,
}

impl Session<'_> {
    /// Every level of the run (a fixed list, or a capacity search), its artifact written as it
    /// ends; sweep summaries and search traces go to `written`.
    pub(super) async fn run_levels(
        &self,
        artifacts: &mut Vec<(LevelSummary, PathBuf)>,
        written: &mut Vec<PathBuf>,
    ) -> Result<Option<CapacitySearch>, AppError> {
        let mut searched = None;
        match self.scenario.load.search {
            None => {
                let levels = self.scenario.load.pacing.levels();
                for &pacing in &levels {
                    let (a, path) = self.level(pacing, levels.len() > 1).await?;
                    artifacts.push((a, path));
                    if self.control.stop_issuing.is_cancelled() {
                        break;
                    }
                }
            }
            Some(search) => {
                let mut search = CapacitySearch::new(search);
                while let Some(level) = search.next_level() {
                    let (a, path) = self.level(self.scenario.load.pacing.at(level), true).await?;
                    let passed = a.slo.as_ref().is_some_and(|r| r.passed) && a.load.validity.valid;
                    let goodput_rps = a.rates.goodput.and_then(|g| g.rps);
                    search.record(Probe { level, passed, goodput_rps, artifact: Some(path.display().to_string()) });
                    artifacts.push((a, path));
                    if self.control.stop_issuing.is_cancelled() {
                        break;
                    }
                }
                let trace =
                    serde_json::json!({ "schema": "anvil-load.search/v1", "run_id": self.run_id, "search": search });
                written.push(write(&self.args.out, &format!("{}-search.json", self.run_id), &trace)?);
                searched = Some(search);
            }
        }
        // The table and the answer are printed once the run is over (a sharded run's are the
        // merged ones); the sweep file holds this process's levels.
        if artifacts.len() > 1 {
            let stem = self.shard.stem(&self.run_id);
            let levels = artifacts.iter().map(|(a, p)| (a, p.as_path()));
            written.push(
                console::sweep::write_sweep(&self.args.out, &stem, &self.run_id, levels).map_err(AppError::Aborted)?,
            );
        }
        Ok(searched)
    }

    /// Run one level, write its artifact, print its summary.
    async fn level(&self, pacing: LevelPacing, several: bool) -> Result<(LevelSummary, PathBuf), AppError> {
        let s = self.scenario;
        let level_id = if several { format!("{}-{}", self.run_id, pacing.id_suffix()) } else { self.run_id.clone() };
        let plan = LevelPlan {
            pacing,
            requests: s.run.requests,
            duration: s.run.duration,
            grace: s.run.grace,
            seed: s.run.seed,
            warm_up_first: s.workload.prompt_cache.burst(),
        };
        let progress =
            Progress::new(!self.args.no_progress && !self.args.quiet, s.run.requests, s.run.duration, &pacing.label());
        // The previous level has drained: the server's cache is reset before this one's
        // connections, warm-up and clock (`load.reset_cache`).
        let cache_reset = self.reset_cache().await?;
        let before = self.target.level_start_counts();
        // The level's prompts (its salt, its shared prefix) are ready before its clock starts.
        let workload = Arc::new(self.workload.for_level(pacing.level()));
        // Connections are opened before the clock starts (see `Client::warm_connections`); with
        // several replicas, each gets its share.
        let warm = self.shard.share(pacing.warm_connections());
        match &s.target.replicas {
            None => {
                let models = crate::plan::scenario::url_rules::endpoint(&self.target.base_url, "/models");
                self.client.warm_connections(&models, warm).await;
            }
            Some(r) => {
                for models in r.endpoints("/models", &s.target.query) {
                    self.client.warm_connections(&models, warm.div_ceil(r.base_urls.len())).await;
                }
            }
        }
        // The level's files (artifact, time series, server metrics) carry this shard's name.
        let stem = self.shard.stem(&level_id);
        let scrape = match &self.scraper {
            Some(scraper) => {
                Some(scraper.prepare(&level_id, Some(self.args.out.join(server_metrics::file_name(&stem)))).await)
            }
            None => None,
        };
        let replica_scrape = self.replica_scrapers.prepare(&level_id, &self.args.out, &stem).await;
        let endpoint_scrape = self.endpoint_scrapers.prepare(&level_id, &self.args.out, &stem).await;
        // The level's wall-clock start and its monotonic start are the same instant, so that
        // `started_at_unix_ns + start_offset_ms` places every request on the wall clock (for
        // shards, the instant they agreed on).
        let start = self.shard.start_level(&level_id).await.map_err(AppError::Aborted)?;
        let (started, level_start) = (start.started, start.at);
        let scraping = scrape.map(|s| s.start(level_start));
        let replica_scraping = replica_scrape.start(level_start);
        let endpoint_scraping = endpoint_scrape.start(level_start);
        self.records
            .write(&RecordLine::Level {
                level: level_id.clone(),
                pacing,
                started_at_unix_ns: started.unix_ns(),
                prompt_salt: Some(format!("{:016x}", workload.salt())),
                cache_reset: cache_reset.clone().map(Box::new),
            })
            .await;
        // Bounded: a stalled aggregator slows the workers instead of growing memory.
        let (tx, rx) = mpsc::channel(4096);
        let snapshots = Snapshots::new(
            s.run.snapshot_interval.map(|interval| SnapshotConfig {
                interval,
                path_stem: self.args.out.join(&stem),
                status_lines: !progress.visible(),
            }),
            &level_id,
            level_start,
            self.client.in_flight(),
        );
        let lateness = LatenessProbe::publishing(self.live.as_ref().map(|r| r.lateness_us()));
        let live = self.live.as_ref().map(|r| r.start_level(&pacing.id_suffix()));
        let sink = LevelSink { records: &self.records, level: &level_id, rules: self.info.initial_rules(), live };
        let (issued, collected) = tokio::join!(
            schedule::run_level(plan, start.shard, workload, self.client.clone(), tx, &self.control, level_start),
            aggregate::collect(rx, sink, |live, window| progress.update(live, window), snapshots),
        );
        let client = lateness.finish().await;
        progress.finish();
        let server_metrics = match scraping {
            Some(s) => Some(s.finish().await),
            None => None,
        };
        let server_metrics = replica_scraping.finish(server_metrics).await;
        let server_metrics = endpoint_scraping.finish(server_metrics).await;
        let finished = Stamp::now();
        let interrupted = self.control.stop_issuing.is_cancelled();
        let simulator = self.target.simulator_counts().map(|after| setup::counts_delta(&after, before.as_ref()));
        self.records
            .write(&RecordLine::LevelEnd {
                level: level_id.clone(),
                issued,
                finished_at_unix_ns: finished.unix_ns(),
                interrupted,
                simulator: simulator.clone(),
                server_metrics: server_metrics.clone().map(Box::new),
                client: Some(client),
                // Filled in by the records writer with what the level wrote.
                written: None,
            })
            .await;
        // The artifact streams this level's records from the file: they must all be there, or
        // the artifact would disagree with itself.
        self.records.sync().await.map_err(AppError::Aborted)?;
        let input = LevelInput {
            info: &self.info,
            level_id: level_id.clone(),
            pacing,
            issued,
            started,
            finished,
            collected,
            interrupted,
            simulator,
            server_metrics,
            client: Some(client),
        };
        let mut summary =
            aggregate::finish_level(input, Origin::Run, self.records.path()).map_err(AppError::Aborted)?;
        summary.cache_reset = cache_reset;
        let mut artifact = artifact::build(&self.info, &summary, self.records.path());
        let credentials = self.client.credentials();
        artifact.credential_refreshes = credentials.counts();
        let failed = credentials.take_failures().into_iter();
        artifact.warnings.extend(failed.map(|f| Warning::CredentialRefreshFailed { message: f.message }));
        let path = write(&self.args.out, &format!("{stem}.json"), &artifact)?;
        ending::level_end(self.args, &self.info, &summary, several, self.shard.is_part());
        self.shard.hand_over(&level_id, &self.records, interrupted).await.map_err(AppError::Aborted)?;
        Ok((summary, path))
    }
}

fn write(dir: &Path, name: &str, value: &impl serde::Serialize) -> Result<PathBuf, AppError> {
    artifact::write_json_atomic(dir, name, value)
        .map_err(|e| AppError::Aborted(format!("cannot write {name} to {}: {e}", dir.display())))
}
