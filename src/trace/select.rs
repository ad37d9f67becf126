//! From parsed rows to the rows a run replays: the checks every format shares (time order, hash
//! ids covering the input), then the window, whole-session sampling, rows that cannot fit the
//! server, and idle gaps capped, with offsets re-based to the first replayed row.

use std::time::Duration;

use super::{Skipped, TraceError, TraceOptions, TraceRow, chain};

/// A row as a parser read it, its time in the format's own clock (nanoseconds).
#[derive(Debug)]
pub(super) struct RawRow {
    pub row: u64,
    pub line: u64,
    pub time_ns: i128,
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
    first_ns: Option<i128>,
    previous: Option<(u64, i128)>,
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
            first_ns: None,
            previous: None,
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
        let first = *self.first_ns.get_or_insert(raw.time_ns);
        self.check_blocks(&raw)?;
        let offset_ns = raw.time_ns - first;
        let offset = Duration::from_nanos(u64::try_from(offset_ns).unwrap_or(u64::MAX));
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
        self.rows.push(TraceRow {
            row: raw.row,
            offset,
            input_tokens: raw.input_tokens,
            output_tokens: raw.output_tokens,
            hash_ids: raw.hash_ids,
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
        let base = rows[0].offset;
        let mut gaps_capped = 0;
        let mut previous_original = base;
        let mut previous_new = Duration::ZERO;
        for row in &mut rows {
            let gap = row.offset - previous_original;
            let kept = match self.options.max_gap {
                Some(cap) if gap > cap => {
                    gaps_capped += 1;
                    cap
                }
                _ => gap,
            };
            previous_original = row.offset;
            previous_new += kept;
            row.offset = previous_new;
        }
        Ok(Selected { rows, rows_in_file: self.rows_in_file, skipped: self.skipped, gaps_capped })
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
