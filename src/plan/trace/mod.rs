//! Production traces: read a trace file in one of the published formats, normalise every row to
//! one record (`TraceRow`), check it, and select what a run replays.
//!
//! Formats (`TraceFormat`), with their units made explicit here once:
//! - `mooncake`: JSONL `timestamp` (milliseconds since the first request), `input_length`,
//!   `output_length`, `hash_ids` (512-token blocks);
//! - `azure`: CSV `TIMESTAMP` (a datetime with up to 7 fractional digits), `ContextTokens`,
//!   `GeneratedTokens`;
//! - `burstgpt`: CSV `Timestamp` (seconds), `Model`, `Request tokens`, `Response tokens`,
//!   `Total tokens`, `Log Type`; failed requests (0 response tokens) are skipped and counted;
//! - `bailian`: JSONL `chat_id`, `parent_chat_id` (−1 for a conversation's first request),
//!   `timestamp` (seconds), `input_length` (history already included), `output_length`, `turn`,
//!   `hash_ids` (16-token blocks);
//! - `jsonl`: this tool's own JSONL: `offset_ms`, `input_tokens`, `output_tokens`, optional
//!   `hash_ids` (blocks of `block_size`), `session`, `turn`.
//!
//! Rows must be in time order; a row out of order, a negative time, a bad value, or hash ids that
//! cannot cover the row's input length is an error naming the row. Every time is bounded before
//! it becomes a `Duration` (`MAX_TIME_NS`, `MAX_TRACE_SPAN`, `MAX_REPLAY`), and messages quote it
//! as the file writes it. The file is read one line at a time (`lines`). Nothing here knows about
//! prompts or HTTP: `workload` turns rows into requests, `schedule` sends them.

mod csv;
mod jsonl;
mod lines;
mod select;
mod stats;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use lines::MAX_LINE_BYTES;
pub use select::Selection;
pub use stats::{Quantiles, TraceStats};

/// The longest a trace's own clock may run from its first row to a row: a year and a day. The
/// published traces span hours to a few months; beyond this a time is in the wrong unit
/// (nanoseconds read as milliseconds) or damaged, and would become a wait no run ends.
pub const MAX_TRACE_SPAN: Duration = Duration::from_secs(366 * 86_400);

/// The latest a replayed row may be sent after the replay's start (window, gap cap and
/// `time_scale` applied): the longest run, as for every other duration a scenario sets.
pub const MAX_REPLAY: Duration = Duration::from_secs(30 * 86_400);

/// The bound of the times a row may give, in nanoseconds from its clock's zero (2^64, 584
/// years; a time must be below it): every time read is checked against it before it is
/// converted, so no value saturates.
pub const MAX_TIME_NS: f64 = 18_446_744_073_709_551_616.0;

/// The trace file formats this tool reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    Mooncake,
    Azure,
    Burstgpt,
    Bailian,
    Jsonl,
}

impl TraceFormat {
    pub const NAMES: &'static [&'static str] = &["mooncake", "azure", "burstgpt", "bailian", "jsonl"];

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "mooncake" => TraceFormat::Mooncake,
            "azure" => TraceFormat::Azure,
            "burstgpt" => TraceFormat::Burstgpt,
            "bailian" => TraceFormat::Bailian,
            "jsonl" => TraceFormat::Jsonl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::Azure => "azure",
            TraceFormat::Burstgpt => "burstgpt",
            TraceFormat::Bailian => "bailian",
            TraceFormat::Jsonl => "jsonl",
        }
    }

    /// Tokens per hash id, as the format defines it (`None`: the format has no hash ids, or, for
    /// this tool's own JSONL, the scenario must say).
    pub fn default_block_size(self) -> Option<u32> {
        match self {
            TraceFormat::Mooncake => Some(512),
            TraceFormat::Bailian => Some(16),
            TraceFormat::Azure | TraceFormat::Burstgpt | TraceFormat::Jsonl => None,
        }
    }
}

/// One request of a trace, whatever the format.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    /// 1-based data row of the file (CSV headers and blank lines not counted).
    pub row: u64,
    /// Time since the trace's first row (after selection: since the first replayed row, with
    /// idle gaps capped; not yet scaled).
    pub offset: Duration,
    /// Prompt tokens the server should count (history included, for session traces).
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Leading prompt blocks of `block_size` tokens; equal ids are equal blocks. A boxed slice:
    /// no spare capacity kept per row of a trace of millions.
    pub hash_ids: Box<[u64]>,
    /// The conversation this row belongs to (Bailian: the root `chat_id`).
    pub session: Option<String>,
    pub turn: Option<u32>,
}

/// A problem with a trace file. `row`/`line` are set when one row is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub row: Option<u64>,
    pub line: Option<u64>,
    pub problem: String,
    pub fix: String,
}

impl TraceError {
    pub fn file(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        TraceError { row: None, line: None, problem: problem.into(), fix: fix.into() }
    }

    pub fn at(row: u64, line: u64, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        TraceError { row: Some(row), line: Some(line), problem: problem.into(), fix: fix.into() }
    }

    /// A line at fault before it could be read as a row (too long, not text).
    pub fn line(line: u64, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        TraceError { row: None, line: Some(line), problem: problem.into(), fix: fix.into() }
    }

    /// `row 12 (line 13): …`, `line 13: …` or the bare problem.
    pub fn located(&self) -> String {
        match (self.row, self.line) {
            (Some(row), Some(line)) if row == line => format!("row {row}: {}", self.problem),
            (Some(row), Some(line)) => format!("row {row} (line {line}): {}", self.problem),
            (None, Some(line)) => format!("line {line}: {}", self.problem),
            _ => self.problem.clone(),
        }
    }
}

/// What to take from a trace and how to pace it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceOptions {
    pub format: TraceFormat,
    /// Tokens per hash id; `None` takes the format's own.
    pub block_size: Option<u32>,
    /// Intended send time = start + `time_scale` × offset.
    pub time_scale: f64,
    /// Idle gaps longer than this (on the trace's clock) are shortened to it.
    pub max_gap: Option<Duration>,
    /// Only rows whose offset lies in `[start, end)` of the trace's clock.
    pub window: Option<(Duration, Duration)>,
    /// Keep this fraction of sessions (rows without a session are sessions of one), chosen by
    /// the seed.
    pub sample: Option<f64>,
    pub seed: u64,
    /// Rows asking for more than this (prompt plus output) are skipped and counted.
    pub max_context_tokens: u32,
    /// Rows asking for more output than this are skipped and counted.
    pub max_output_tokens: u32,
}

/// Rows not replayed, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Rows with no output tokens (BurstGPT's failed requests): nothing to replay.
    pub no_output: u64,
    /// Outside `window`.
    pub outside_window: u64,
    /// Sessions left out by `sample`.
    pub sampled_out: u64,
    /// Prompt plus output above `max_context_tokens`, or output above `max_tokens`.
    pub oversized: u64,
}

/// A loaded trace: the rows a run replays, in dispatch order, and what was left out.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    pub file: PathBuf,
    pub format: TraceFormat,
    /// Tokens per hash id (0 when the trace has none).
    pub block_size: u32,
    pub time_scale: f64,
    #[serde(with = "opt_duration")]
    pub max_gap: Option<Duration>,
    /// Data rows in the file.
    pub rows_in_file: u64,
    pub skipped: Skipped,
    /// Idle gaps shortened by `max_gap`.
    pub gaps_capped: u64,
    pub stats: TraceStats,
    #[serde(skip)]
    pub rows: Vec<TraceRow>,
}

impl Trace {
    /// Read, check and select. Errors name the row at fault.
    /// The file is read one line at a time: only the rows kept stay in memory.
    pub fn load(path: &Path, options: &TraceOptions) -> Result<Trace, TraceError> {
        let mut lines = lines::Lines::open(path)?;
        let block_size = match options.block_size.or(options.format.default_block_size()) {
            Some(0) => return Err(TraceError::file("block_size is 0", "give the tokens per hash id, e.g. 512")),
            other => other,
        };
        let mut selection = Selection::new(options, block_size.unwrap_or(0));
        match options.format {
            TraceFormat::Mooncake => jsonl::read_mooncake(&mut lines, &mut selection)?,
            TraceFormat::Bailian => jsonl::read_bailian(&mut lines, &mut selection)?,
            TraceFormat::Jsonl => jsonl::read_own(&mut lines, block_size, &mut selection)?,
            TraceFormat::Azure => csv::read_azure(&mut lines, &mut selection)?,
            TraceFormat::Burstgpt => csv::read_burstgpt(&mut lines, &mut selection)?,
        }
        let selected = selection.finish()?;
        let stats = TraceStats::compute(&selected.rows, block_size.unwrap_or(0), options.time_scale);
        Ok(Trace {
            file: path.to_path_buf(),
            format: options.format,
            block_size: block_size.unwrap_or(0),
            time_scale: options.time_scale,
            max_gap: options.max_gap,
            rows_in_file: selected.rows_in_file,
            skipped: selected.skipped,
            gaps_capped: selected.gaps_capped,
            stats,
            rows: selected.rows,
        })
    }

    /// When row `i` is meant to be sent, from the level's start.
    pub fn scaled_offset(&self, i: usize) -> Option<Duration> {
        self.rows.get(i).map(|r| r.offset.mul_f64(self.time_scale))
    }

    /// Mean arrivals per second of the replay (after scaling): the level's `rate`.
    pub fn planned_rate(&self) -> f64 {
        let n = self.rows.len();
        let span = self.scaled_offset(n.saturating_sub(1)).unwrap_or_default().as_secs_f64();
        if n >= 2 && span > 0.0 { (n - 1) as f64 / span } else { n.max(1) as f64 }
    }

    /// Rows sent within the first `d` of the replay.
    pub fn rows_within(&self, d: Duration) -> u64 {
        self.rows.iter().take_while(|r| r.offset.mul_f64(self.time_scale) < d).count() as u64
    }
}

/// Which hash-id blocks a row shares with rows before it, by the prefix rule: block `j` is
/// reusable only when blocks `0..=j` all appeared, in that order, at the start of an earlier
/// row. Returns the number of leading blocks of each row that earlier rows already held.
pub fn reusable_blocks(rows: &[TraceRow]) -> Vec<u32> {
    let mut seen = std::collections::HashSet::new();
    rows.iter()
        .map(|row| {
            let mut key = 0xcbf2_9ce4_8422_2325u64;
            let mut shared = 0u32;
            let mut matching = true;
            for &id in &row.hash_ids {
                key = chain(key, id);
                if matching && seen.contains(&key) {
                    shared += 1;
                } else {
                    matching = false;
                }
                seen.insert(key);
            }
            shared
        })
        .collect()
}

/// The key of a block given the key of everything before it.
pub fn chain(key: u64, id: u64) -> u64 {
    let mut z = key ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

mod opt_duration {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests;
