//! The one reader of a whole records file: its runs and its levels, each with what its level
//! line and its end said and what it recorded in between, read through once and checked line by
//! line (`record::integrity`, through `record::file::read_checked`). A line no run writes stops
//! the reading, naming it; what the check found that does not (levels that lack records, ends
//! without a tally, a last line cut short) is the file's `verdict`.
//!
//! `summarize` keeps every level's compact samples as it reads (`Keep::Samples`); `merge` only
//! describes each part (`Keep::Counts`) and reads one level's records at a time later, so its
//! memory holds one level of the run at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::request::record::file::{self as records, RecordLine};
use crate::request::record::integrity::Verdict;
use crate::request::record::{ClientLoad, Issued, LevelPacing, RunInfo};
use crate::request::server_metrics::LevelServerMetrics;
use crate::results::aggregate::Collected;
use crate::results::aggregate::sample::{FailureSample, Sample};

/// What to keep of each level's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Their compact samples, for summaries.
    Samples,
    /// Their counts only.
    Counts,
}

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It could not be opened (missing, unreadable, not a regular file).
    Open(std::io::Error),
    /// It is not a records file this tool wrote, or holds a line no run writes: the message names
    /// the file and the line.
    Refused(String),
}

/// A records file, read through and checked.
pub struct RecordsFile {
    pub path: PathBuf,
    /// Its runs, in order (a file can hold several runs appended one after another).
    pub runs: Vec<RunInfo>,
    /// Its levels, in the order they started.
    pub levels: Vec<RecordedLevel>,
    /// What the check of its lines found that is no reason to refuse it outright.
    pub verdict: Verdict,
}

/// One level as the file holds it.
pub struct RecordedLevel {
    pub id: String,
    /// The run it belongs to: an index into `RecordsFile::runs`.
    pub run: usize,
    pub pacing: LevelPacing,
    pub started_ns: u64,
    /// The level's prompt salt, as its level line recorded it.
    pub prompt_salt: Option<String>,
    /// `load.reset_cache`: the reset called before the level, as its level line recorded it.
    pub cache_reset: Option<crate::request::cache_reset::CacheResetRecord>,
    /// Request and failure lines.
    pub requests: u64,
    pub failures: u64,
    /// The latest end of a recorded request (ns since the Unix epoch), for a level that never
    /// finished.
    pub last_end_ns: u64,
    /// Its samples (with `Keep::Samples`; empty otherwise).
    pub collected: Collected,
    /// What its end line said; none when the run was killed before the level ended.
    pub end: Option<LevelEnd>,
}

/// What a level's end line said.
#[derive(Debug, Clone)]
pub struct LevelEnd {
    pub issued: Issued,
    pub finished_ns: u64,
    pub interrupted: bool,
    pub simulator: Option<serde_json::Value>,
    pub server_metrics: Option<LevelServerMetrics>,
    pub client: Option<ClientLoad>,
}

impl RecordedLevel {
    /// Its end, or for a level that never ended (the run was killed), an interrupted end at its
    /// last recorded request's.
    pub fn end_or_cut(&mut self) -> LevelEnd {
        self.end.take().unwrap_or(LevelEnd {
            issued: Issued::default(),
            finished_ns: self.last_end_ns,
            interrupted: true,
            simulator: None,
            server_metrics: None,
            client: None,
        })
    }

    /// Where the level's clock stands `offset_ms` after its start (ns since the Unix epoch).
    fn at(&self, offset_ms: f64) -> u64 {
        self.started_ns.saturating_add((offset_ms * 1e6) as u64)
    }
}

/// Read `path` through once, checking every line.
pub fn read(path: &Path, keep: Keep) -> Result<RecordsFile, ReadError> {
    let mut lines = records::read_checked(path).map_err(ReadError::Open)?;
    let refused = |e: String| ReadError::Refused(format!("{}: {e}", path.display()));
    let mut runs: Vec<RunInfo> = Vec::new();
    let mut levels: Vec<RecordedLevel> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for line in &mut lines {
        match line.map_err(refused)? {
            RecordLine::Run { info, .. } => runs.push(*info),
            RecordLine::Level { level, pacing, started_at_unix_ns, prompt_salt, cache_reset } => {
                let Some(run) = runs.len().checked_sub(1) else {
                    return Err(refused("not a records file (a level line comes before any run line)".into()));
                };
                by_id.insert(level.clone(), levels.len());
                levels.push(RecordedLevel {
                    id: level,
                    run,
                    pacing,
                    started_ns: started_at_unix_ns,
                    prompt_salt,
                    cache_reset: cache_reset.map(|r| *r),
                    requests: 0,
                    failures: 0,
                    last_end_ns: started_at_unix_ns,
                    collected: Collected::default(),
                    end: None,
                });
            }
            // The check has refused a record of a level no level line started.
            RecordLine::Request { level, record } => {
                if let Some(l) = by_id.get(&level).map(|&i| &mut levels[i]) {
                    l.requests += 1;
                    l.last_end_ns = l.last_end_ns.max(l.at(record.start_offset_ms + record.e2e_ms));
                    if keep == Keep::Samples {
                        l.collected.samples.push(Sample::from_record(&record));
                    }
                }
            }
            RecordLine::Failure { level, record } => {
                if let Some(l) = by_id.get(&level).map(|&i| &mut levels[i]) {
                    l.failures += 1;
                    l.last_end_ns = l.last_end_ns.max(l.at(record.start_offset_ms + record.elapsed_ms));
                    if keep == Keep::Samples {
                        l.collected.failures.push(FailureSample::from_record(&record));
                    }
                }
            }
            RecordLine::Dropped { level, .. } => {
                if let Some(l) = by_id.get(&level).map(|&i| &mut levels[i]) {
                    l.collected.dropped += 1;
                }
            }
            RecordLine::LevelEnd {
                level,
                issued,
                finished_at_unix_ns,
                interrupted,
                simulator,
                server_metrics,
                client,
                written: _,
            } => {
                if let Some(l) = by_id.get(&level).map(|&i| &mut levels[i]) {
                    l.end = Some(LevelEnd {
                        issued,
                        finished_ns: finished_at_unix_ns,
                        interrupted,
                        simulator,
                        server_metrics: server_metrics.map(|m| *m),
                        client,
                    });
                }
            }
        }
    }
    if runs.is_empty() {
        return Err(refused("not a records file (no run line)".into()));
    }
    Ok(RecordsFile { path: path.to_path_buf(), runs, levels, verdict: lines.finish() })
}
