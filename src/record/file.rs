//! The per-request records file: one JSON object per line, appended and flushed as each request
//! ends, so a run killed with `kill -9` loses at most the requests in flight.
//!
//! Line types (`"type"`): `run` (the run's fixed description, first line), `level` (a load level
//! starts), `request` / `failure` / `dropped` (one per request, fields as in the artifact's
//! `request_timings`, `failures` and `dropped`, tagged with their `level`), `level_end` (the level
//! finished, with what the pacing knew). Artifacts stream their records from this file, and
//! `anvil-load summarize` rebuilds them from it alone.
//!
//! Lines are written by `writer`, on a dedicated thread, so disk latency never stalls the async
//! runtime.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::timing::{DroppedRecord, FailureRecord, RequestTiming};
use super::{Issued, LevelPacing, RunInfo};
use crate::server_metrics::LevelServerMetrics;

pub const RECORDS_SCHEMA: &str = "anvil-load.records/v1";

/// One line of the records file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RecordLine {
    Run {
        schema: String,
        info: Box<RunInfo>,
    },
    Level {
        level: String,
        pacing: LevelPacing,
        started_at_unix_ns: u64,
    },
    Request {
        level: String,
        #[serde(flatten)]
        record: Box<RequestTiming>,
    },
    Failure {
        level: String,
        #[serde(flatten)]
        record: Box<FailureRecord>,
    },
    Dropped {
        level: String,
        #[serde(flatten)]
        record: DroppedRecord,
    },
    LevelEnd {
        level: String,
        issued: Issued,
        finished_at_unix_ns: u64,
        interrupted: bool,
        simulator: Option<Value>,
        /// The server's own view of the level, when its metrics were scraped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_metrics: Option<Box<LevelServerMetrics>>,
        /// How late the client's own runtime was, and its CPU (absent in older records).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<super::ClientLoad>,
    },
}

/// Make `path` ready to take more lines: a new or empty file is fine; an existing one must be a
/// records file (its first line a `run` line), and a last line cut short by a kill is removed so
/// the next line starts on a line of its own. Checked before anything is sent.
pub fn prepare_for_append(path: &Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let not_ours = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it exists and is not an anvil-load records file (its first line is not a run line); choose a new file name",
        )
    };
    let mut first = String::new();
    // The run line holds the scenario; a megabyte is far more than any real one.
    BufReader::new((&mut file).take(1 << 20)).read_line(&mut first).map_err(|_| not_ours())?;
    match serde_json::from_str::<RecordLine>(first.trim_end()) {
        Ok(RecordLine::Run { schema, .. }) if schema == RECORDS_SCHEMA => {}
        _ => return Err(not_ours()),
    }
    // Find the last newline; anything after it is a line cut short.
    let mut end = len;
    let mut buf = [0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = memchr::memrchr(b'\n', chunk) {
            let keep = start + at as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(());
        }
        end = start;
    }
    Err(not_ours())
}

/// Read a records file line by line. A final line cut short (the process was killed mid-write)
/// ends the iteration quietly; any other unreadable line is an error naming its number.
pub fn read(path: &Path) -> std::io::Result<impl Iterator<Item = Result<RecordLine, String>>> {
    let file = File::open(path)?;
    let mut lines = BufReader::new(file).lines().enumerate().peekable();
    Ok(std::iter::from_fn(move || {
        let (n, line) = lines.next()?;
        let line = match line {
            Ok(line) => line,
            Err(e) => return Some(Err(format!("line {}: {e}", n + 1))),
        };
        if line.trim().is_empty() {
            return Some(Err(format!("line {}: empty", n + 1)));
        }
        match serde_json::from_str::<RecordLine>(&line) {
            Ok(record) => Some(Ok(record)),
            Err(_) if lines.peek().is_none() => None,
            Err(e) => Some(Err(format!("line {}: {e}", n + 1))),
        }
    }))
}
