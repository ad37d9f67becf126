//! From parsed rows to the rows a run replays: the checks every format shares (time order, hash
//! ids covering the input), then the window, whole-session sampling, rows that cannot fit the
//! server, and idle gaps capped, with offsets re-based to the first replayed row.

use std::time::Duration;

use super::{MAX_REPLAY, MAX_TRACE_SPAN, Skipped, TraceError, TraceOptions, TraceRow, chain};
use crate::text::{fmt_duration, fmt_number};

/// A row as a parser read it, its time in the format's own clock (nanoseconds).
#[derive(Debug)]
pub(super) struct RawRow {
    pub row: u64,
    pub line: u64,
    /// Never negative and below `MAX_TIME_NS` (the parsers check both).
    pub time_ns: i128,
    /// The time as the file writes it, with its column and unit (`timestamp 1e300
    /// (milliseconds)`): messages show what the user can find in the file.
    pub time_written: String,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub hash_ids: Vec<u64>,
    pub session: Option<String>,
    pub turn: Option<u32>,
}

/// Rows kept so far, and the counts of those left out.
#[derive(Debug)]
pub struct Selection {
    options: TraceOptions,
    block_size: u32,
    /// The first row's time and number: offsets count from it.
    first: Option<(i128, u64)>,
    previous: Option<(u64, i128)>,
    /// The original offset and the replay offset (gaps capped, not scaled) of the last row kept.
    last_kept: Option<(Duration, Duration)>,
    gaps_capped: u64,
    rows_in_file: u64,
    skipped: Skipped,
    rows: Vec<TraceRow>,
}

/// What `Selection::finish` hands back.
#[derive(Debug)]
pub(super) struct Selected {
    pub rows: Vec<TraceRow>,
    pub rows_in_file: u64,
    pub skipped: Skipped,
    pub gaps_capped: u64,
}

impl Selection {
    pub(super) fn new(options: &TraceOptions, block_size: u32) -> Self {
        Selection {
            options: options.clone(),
            block_size,
            first: None,
            previous: None,
            last_kept: None,
            gaps_capped: 0,
            rows_in_file: 0,
            skipped: Skipped::default(),
            rows: Vec::new(),
        }
    }

    /// Check one row and keep it if it is replayed.
    pub(super) fn push(&mut self, raw: RawRow) -> Result<(), TraceError> {
        self.rows_in_file += 1;
        if let Some((previous_row, previous_ns)) = self.previous {
            if raw.time_ns < previous_ns {
                return Err(TraceError::at(
                    raw.row,
                    raw.line,
                    format!(
                        "its time is {} earlier than row {previous_row}'s (a negative gap: rows out of order)",
                        fmt_ns(previous_ns - raw.time_ns)
                    ),
                    "sort the trace by its timestamp column",
                ));
            }
        }
        self.previous = Some((raw.row, raw.time_ns));
        let (first_ns, first_row) = *self.first.get_or_insert((raw.time_ns, raw.row));
        self.check_blocks(&raw)?;
        let offset = trace_clock_offset(&raw, raw.time_ns - first_ns, first_row)?;
        if raw.output_tokens == 0 {
            self.skipped.no_output += 1;
            return Ok(());
        }
        if self.options.window.is_some_and(|(start, end)| offset < start || offset >= end) {
            self.skipped.outside_window += 1;
            return Ok(());
        }
        if let Some(fraction) = self.options.sample {
            let key = raw.session.as_deref().map_or_else(|| format!("row {}", raw.row), str::to_string);
            if !keep(self.options.seed, &key, fraction) {
                self.skipped.sampled_out += 1;
                return Ok(());
            }
        }
        let total = u64::from(raw.input_tokens) + u64::from(raw.output_tokens);
        if total > u64::from(self.options.max_context_tokens) || raw.output_tokens > self.options.max_output_tokens {
            self.skipped.oversized += 1;
            return Ok(());
        }
        let replay_offset = self.replay_offset(&raw, offset)?;
        self.rows.push(TraceRow {
            row: raw.row,
            offset: replay_offset,
            input_tokens: raw.input_tokens,
            output_tokens: raw.output_tokens,
            hash_ids: raw.hash_ids.into_boxed_slice(),
            session: raw.session,
            turn: raw.turn,
        });
        Ok(())
    }

    /// A row's hash ids name the blocks its prompt is made of: as many as its input fills
    /// (the last one may be partial).
    fn check_blocks(&self, raw: &RawRow) -> Result<(), TraceError> {
        let (n, bs, ids) = (u64::from(raw.input_tokens), u64::from(self.block_size), raw.hash_ids.len() as u64);
        if bs == 0 {
            if ids > 0 {
                return Err(TraceError::at(
                    raw.row,
                    raw.line,
                    "has hash_ids but the trace has no block size",
                    "set workload.trace.block_size to the tokens per hash id",
                ));
            }
            return Ok(());
        }
        let (least, most) = (n / bs, n.div_ceil(bs));
        if ids < least || ids > most {
            let need = if least == most { format!("{least}") } else { format!("{least} or {most}") };
            return Err(TraceError::at(
                raw.row,
                raw.line,
                format!("{ids} hash ids of {bs} tokens cannot make up input length {n} (it takes {need})"),
                "check workload.trace.block_size against the trace's block size, or fix the row",
            ));
        }
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Selected, TraceError> {
        if self.rows.is_empty() {
            let s = self.skipped;
            return Err(TraceError::file(
                format!(
                    "no row is left to replay ({} rows in the file; {} with no output, {} outside the window, {} sampled out, {} too large for the context or max_tokens)",
                    self.rows_in_file, s.no_output, s.outside_window, s.sampled_out, s.oversized
                ),
                "widen workload.trace.window, raise workload.trace.sample, or raise max_context_tokens / max_tokens",
            ));
        }
        let mut rows = self.rows;
        rows.shrink_to_fit();
        Ok(Selected { rows, rows_in_file: self.rows_in_file, skipped: self.skipped, gaps_capped: self.gaps_capped })
    }

    /// A kept row's offset from the first kept row, with idle gaps above `max_gap` shortened;
    /// refused when the replay would send it later than the longest run lasts.
    fn replay_offset(&mut self, raw: &RawRow, offset: Duration) -> Result<Duration, TraceError> {
        let replay = match self.last_kept {
            None => Duration::ZERO,
            Some((previous_original, previous_replay)) => {
                let gap = offset.saturating_sub(previous_original);
                let kept = match self.options.max_gap {
                    Some(cap) if gap > cap => {
                        self.gaps_capped += 1;
                        cap
                    }
                    _ => gap,
                };
                previous_replay + kept
            }
        };
        self.last_kept = Some((offset, replay));
        // Both factors are bounded (a year of trace clock, a scale of at most 1000): no overflow.
        let sent = replay.as_secs_f64() * self.options.time_scale;
        if sent > MAX_REPLAY.as_secs_f64() {
            return Err(TraceError::at(
                raw.row,
                raw.line,
                format!(
                    "{} would be sent {} after the replay's first row (time_scale {}{}), later than the longest run lasts ({})",
                    raw.time_written,
                    fmt_span(sent * 1e9),
                    fmt_number(self.options.time_scale),
                    match self.options.max_gap {
                        Some(cap) => format!(", idle gaps capped at {}", fmt_duration(cap)),
                        None => String::new(),
                    },
                    fmt_span(MAX_REPLAY.as_secs_f64() * 1e9),
                ),
                "replay a part of the trace with workload.trace.window, shorten idle gaps with workload.trace.max_gap, or replay faster with a workload.trace.time_scale below 1",
            ));
        }
        Ok(replay)
    }
}

/// A row's offset from the trace's first row on the trace's own clock, at most `MAX_TRACE_SPAN`.
fn trace_clock_offset(raw: &RawRow, offset_ns: i128, first_row: u64) -> Result<Duration, TraceError> {
    match u64::try_from(offset_ns) {
        Ok(ns) if Duration::from_nanos(ns) <= MAX_TRACE_SPAN => Ok(Duration::from_nanos(ns)),
        _ => Err(TraceError::at(
            raw.row,
            raw.line,
            format!(
                "{} is {} after row {first_row}, the trace's first row; a trace spans at most {}",
                raw.time_written,
                fmt_span(offset_ns as f64),
                fmt_span(MAX_TRACE_SPAN.as_secs_f64() * 1e9)
            ),
            "check the time column's unit against the format, and that the row is not damaged",
        )),
    }
}

/// A span in nanoseconds for people: `40m 3s`, `31 days`, `27.4 years`, `3.17e289 years`.
pub(super) fn fmt_span(ns: f64) -> String {
    let days = ns / 86_400e9;
    if days < 1.0 {
        fmt_duration(Duration::from_secs(ns.max(0.0).div_euclid(1e9) as u64))
    } else if days < 1000.0 {
        format!("{} days", fmt_number((days * 10.0).round() / 10.0))
    } else {
        let years = days / 365.25;
        let rounded: f64 = format!("{years:.3e}").parse().unwrap_or(years);
        format!("{} years", fmt_number(rounded))
    }
}

/// Deterministic whole-session sampling: the same seed keeps the same sessions.
fn keep(seed: u64, key: &str, fraction: f64) -> bool {
    let mut h = chain(seed, 0x5A3D_1E5E);
    for byte in key.bytes() {
        h = chain(h, u64::from(byte));
    }
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

fn fmt_ns(ns: i128) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 1000.0 { format!("{:.3} s", ms / 1000.0) } else { format!("{ms:.3} ms") }
}
