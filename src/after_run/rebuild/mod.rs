//! Records files → artifacts, after a run: `summarize` rebuilds a run's artifacts from its
//! records file, `merge` one set of artifacts from the records files of a sharded run's parts.
//!
//! Both read each file through `levels`, the one reader of a whole records file (checked line by
//! line), and end every level through `aggregate::finish_level`, as the live run does: the same
//! records give the same artifact whichever way they come. They return what they wrote; the
//! command line prints it and chooses the exit code.

pub mod levels;
pub mod merge;
mod pending;
pub mod summarize;

use std::path::PathBuf;

use crate::request::record::RunInfo;
use crate::request::record::integrity::Verdict;
use crate::results::aggregate::summary::LevelSummary;

/// Why a rebuild stopped.
#[derive(Debug)]
pub enum RebuildError {
    /// The inputs are not what they must be: not a records file, a line no run writes, files
    /// that are not the parts of one run, an output directory that cannot be written (summarize).
    BadInput(String),
    /// The records do not hold the whole run (a missing, failed or interrupted shard, records
    /// lost), and a partial rebuild was not asked for.
    Incomplete(String),
    /// A file could not be read or written.
    Io(String),
}

impl std::fmt::Display for RebuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebuildError::BadInput(m) | RebuildError::Incomplete(m) | RebuildError::Io(m) => f.write_str(m),
        }
    }
}

/// Something the reading found that does not stop the rebuild.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    Note(String),
    Warning(String),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::Note(m) => write!(f, "note: {m}"),
            Notice::Warning(m) => write!(f, "warning: {m}"),
        }
    }
}

/// What the check of the records file `shown` found that does not stop a rebuild: its last line,
/// cut short when its `writer` (the run, a shard) was killed while writing it, is left out (`cut`
/// says how loudly); level ends written by an older anvil-load cannot be checked.
fn verdict_notices(shown: &str, verdict: &Verdict, writer: &str, cut: fn(String) -> Notice, notices: &mut Vec<Notice>) {
    if let Some(n) = verdict.cut_line {
        notices.push(cut(format!(
            "{shown}: line {n}, the last, was cut short (the {writer} was killed while writing it); it is left out"
        )));
    }
    if !verdict.unchecked.is_empty() {
        notices.push(Notice::Warning(format!(
            "{shown}: the end of level(s) {} does not say what the level wrote (records written by an older anvil-load): whether every record is still there cannot be checked",
            verdict.unchecked.join(", ")
        )));
    }
}

/// What a rebuild wrote.
pub struct Rebuilt {
    /// The runs the artifacts describe: one, but for a records file holding several runs.
    pub runs: Vec<RunInfo>,
    /// Every level, in the order it ran.
    pub levels: Vec<RebuiltLevel>,
    /// The other files written (a merge's records file and time series).
    pub files: Vec<PathBuf>,
}

/// One level's summary and artifact.
pub struct RebuiltLevel {
    /// The run it belongs to: an index into `Rebuilt::runs`.
    pub run: usize,
    pub summary: LevelSummary,
    pub artifact: PathBuf,
}

impl Rebuilt {
    /// The level's run.
    pub fn info(&self, level: &RebuiltLevel) -> &RunInfo {
        &self.runs[level.run]
    }
}
