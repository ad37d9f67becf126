//! The per-request records file: one JSON object per line, appended and flushed as each request
//! ends, so a run killed with `kill -9` loses at most the requests in flight.
//!
//! Line types (`"type"`): `run` (the run's fixed description, first line), `level` (a load level
//! starts), `request` / `failure` / `dropped` (one per request, fields as in the artifact's
//! `request_timings`, `failures` and `dropped`, tagged with their `level`), `level_end` (the level
//! finished, with what the pacing knew and what the level wrote). Artifacts stream their records
//! from this file, and `anvil-load summarize` rebuilds them from it alone, after `read_checked`
//! has checked that the file holds what each level wrote.
//!
//! Lines are written by `writer`, on a dedicated thread, so disk latency never stalls the async
//! runtime.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::integrity::{Verdict, Verifier};
use super::timing::{DroppedRecord, FailureRecord, RequestTiming};
use super::{Issued, LevelPacing, RunInfo};
use crate::request::server_metrics::LevelServerMetrics;

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
        /// The salt this level's prompts were built with (16 hex digits; the run's when prompts
        /// are reproducible). Absent in records written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_salt: Option<String>,
        /// `load.reset_cache`: the reset called before the level and its answer. Absent without.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_reset: Option<Box<crate::request::cache_reset::CacheResetRecord>>,
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
        /// What the level wrote: its record lines per kind and their digest, filled in by the
        /// writer as the line goes out (see `integrity`). Absent in older records, whose
        /// completeness cannot be checked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        written: Option<super::integrity::Written>,
    },
}

/// Make `path` ready to take more lines: a new or empty file is fine; an existing one must be a
/// records file (its first line a `run` line), and a last line cut short by a kill is removed so
/// the next line starts on a line of its own. Checked before anything is sent. Only a regular
/// file is taken: the run reads its records back from it, and a FIFO or a device would block or
/// lose them.
pub fn prepare_for_append(path: &Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    match crate::sys::require_regular_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    }
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
    read_filtered(path, None)
}

/// `read`, for a reader that wants only the lines of `level` of the given kinds (`request`,
/// `failure`, `dropped`, …): the others are skipped after reading their first bytes, unparsed.
/// Lines whose start is not the way this tool writes them are parsed and handed on, so the
/// caller still matches what it gets.
pub fn read_level(
    path: &Path,
    level: &str,
    kinds: &'static [&'static str],
) -> std::io::Result<impl Iterator<Item = Result<RecordLine, String>>> {
    read_filtered(path, Some((level.to_owned(), kinds)))
}

/// The records of `level` of one `kind` (`request`, `failure` or `dropped`), each as the JSON
/// text of its record, copied from its line as written (without the line's `type` and `level`)
/// and not checked again: only for a file this process wrote, whose records are then exactly
/// what serializing them again gives. A line not started the way this tool writes it is
/// parsed, matched and serialized instead.
pub fn read_level_verbatim(
    path: &Path,
    level: &str,
    kind: &'static [&'static str],
) -> std::io::Result<impl Iterator<Item = Result<String, String>>> {
    let wanted = level.to_owned();
    let lines = read_filtered_with(path, Some((level.to_owned(), kind)), move |line, head, terminated| {
        // A last line without its line end may have been cut short: it is parsed.
        if let Some(json) = record_json(line, head).filter(|_| terminated) {
            return Ok(Some(json));
        }
        match parse_line(line, head)?.record_serialized() {
            Some((k, l, json)) if l == wanted && kind.contains(&k) => json.map(Some),
            _ => Ok(None),
        }
    })?;
    Ok(lines.filter_map(Result::transpose))
}

impl RecordLine {
    /// A per-request line's kind, level and record, the record serialized on its own (as the
    /// artifact lists it); `None` for the other lines.
    fn record_serialized(&self) -> Option<(&'static str, &str, serde_json::Result<String>)> {
        use serde_json::to_string;
        match self {
            RecordLine::Request { level, record } => Some(("request", level, to_string(record))),
            RecordLine::Failure { level, record } => Some(("failure", level, to_string(record))),
            RecordLine::Dropped { level, record } => Some(("dropped", level, to_string(record))),
            _ => None,
        }
    }
}

/// The record's own JSON in a line whose head was read: `{` and what follows the level.
fn record_json(line: &str, head: Option<(&str, Option<&str>)>) -> Option<String> {
    let level = head?.1?;
    // `level` lies in `line`, followed by its closing quote.
    let after = (level.as_ptr() as usize - line.as_ptr() as usize) + level.len() + 1;
    let rest = &line[after..];
    let fields = rest.strip_prefix(',').or_else(|| rest.starts_with('}').then_some(rest))?;
    let mut json = String::with_capacity(fields.len() + 1);
    json.push('{');
    json.push_str(fields);
    Some(json)
}

fn read_filtered(
    path: &Path,
    wanted: Option<(String, &'static [&'static str])>,
) -> std::io::Result<impl Iterator<Item = Result<RecordLine, String>>> {
    read_filtered_with(path, wanted, |line, head, _| parse_line(line, head))
}

/// The lines wanted, each converted by `convert`, given the line, its head and whether it
/// ended with a line end.
///
/// Lines are read as bytes into one reused buffer, and a line is checked as text only once its
/// head says it is wanted: a level's artifact reads the file once per record kind, so nearly
/// every line a pass meets is one it skips. A last line without its line end that does not
/// parse was cut short by a kill and ends the iteration; any other line that does not parse is
/// an error naming it.
fn read_filtered_with<T>(
    path: &Path,
    wanted: Option<(String, &'static [&'static str])>,
    convert: impl Fn(&str, Option<(&str, Option<&str>)>, bool) -> serde_json::Result<T>,
) -> std::io::Result<impl Iterator<Item = Result<T, String>>> {
    let mut lines = Lines::open(path)?;
    Ok(std::iter::from_fn(move || {
        loop {
            let Line { n, bytes: line, terminated } = match lines.next() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            if line.trim_ascii().is_empty() {
                return if terminated { Some(Err(format!("line {n}: empty"))) } else { None };
            }
            let head = head(line);
            if let (Some((kind, line_level)), Some((level, kinds))) = (head, &wanted) {
                if !kinds.contains(&kind) || line_level.is_some_and(|l| l != level) {
                    continue;
                }
            }
            let text = match std::str::from_utf8(line) {
                Ok(text) => text,
                Err(_) if !terminated => return None,
                Err(_) => return Some(Err(format!("line {n}: stream did not contain valid UTF-8"))),
            };
            return match convert(text, head, terminated) {
                Ok(record) => Some(Ok(record)),
                Err(_) if !terminated => None,
                Err(e) => Some(Err(format!("line {n}: {e}"))),
            };
        }
    }))
}

/// Read a records file once, checking every line (see `integrity`): each item is a line, or the
/// error that stops the reading, naming its line; `finish` then says which levels do not hold
/// what they wrote, which could not be checked, and whether a last line cut short by a kill
/// was left out.
pub fn read_checked(path: &Path) -> std::io::Result<Checked> {
    Ok(Checked { lines: Lines::open(path)?, verifier: Verifier::default() })
}

/// The reader `read_checked` returns.
pub struct Checked {
    lines: Lines,
    verifier: Verifier,
}

impl Checked {
    pub fn finish(self) -> Verdict {
        self.verifier.finish()
    }
}

impl Iterator for Checked {
    type Item = Result<RecordLine, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let Checked { lines, verifier } = self;
        let Line { n, bytes: line, terminated } = match lines.next() {
            Ok(Some(line)) => line,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let parsed = if line.trim_ascii().is_empty() {
            Err("empty".to_string())
        } else {
            std::str::from_utf8(line)
                .map_err(|_| "stream did not contain valid UTF-8".to_string())
                .and_then(|text| parse_line(text, head(line)).map_err(|e| e.to_string()))
        };
        match parsed {
            // Only the last line can lack its line end: a kill cut it short.
            Err(_) if !terminated => {
                verifier.cut(n);
                None
            }
            Err(e) => Some(Err(format!("line {n}: {e}"))),
            Ok(record) => Some(verifier.line(n, line, &record).map(|()| record).map_err(|e| format!("line {n}: {e}"))),
        }
    }
}

/// The longest line a reader takes: the run line holds the scenario and a request line its gap
/// histograms, both far below this; a file with a longer line is not one this tool wrote, and
/// reading it whole could exhaust memory.
const MAX_LINE: usize = 64 << 20;

/// One line of a file: its number (1-based), its bytes without the line end, and whether it had
/// one (only a last line cut short has none).
struct Line<'a> {
    n: usize,
    bytes: &'a [u8],
    terminated: bool,
}

/// A file's lines, read as bytes into one reused buffer.
struct Lines {
    reader: BufReader<File>,
    buf: Vec<u8>,
    n: usize,
}

impl Lines {
    fn open(path: &Path) -> std::io::Result<Lines> {
        let file = crate::sys::open_input(path)?;
        Ok(Lines { reader: BufReader::with_capacity(64 * 1024, file), buf: Vec::new(), n: 0 })
    }

    /// The next line (its end is `\n` or `\r\n`); `None` at the end.
    fn next(&mut self) -> Result<Option<Line<'_>>, String> {
        self.n += 1;
        let n = self.n;
        match next_line(&mut self.reader, &mut self.buf) {
            Ok(Some((bytes, terminated))) => Ok(Some(Line { n, bytes, terminated })),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("line {n}: {e}")),
        }
    }
}

/// The next line of `reader` in `buf`, without its line end (`\n` or `\r\n`), and whether it had
/// one; `None` at the end.
fn next_line<'a>(reader: &mut impl BufRead, buf: &'a mut Vec<u8>) -> std::io::Result<Option<(&'a [u8], bool)>> {
    buf.clear();
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            break;
        }
        if let Some(at) = memchr::memchr(b'\n', available) {
            buf.extend_from_slice(&available[..at + 1]);
            reader.consume(at + 1);
            break;
        }
        let all = available.len();
        buf.extend_from_slice(available);
        reader.consume(all);
        if buf.len() > MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("longer than {} MiB; no run writes such a line", MAX_LINE >> 20),
            ));
        }
    }
    if buf.is_empty() {
        return Ok(None);
    }
    let mut line = buf.as_slice();
    let terminated = match line.strip_suffix(b"\n") {
        Some(rest) => {
            line = rest.strip_suffix(b"\r").unwrap_or(rest);
            true
        }
        None => false,
    };
    Ok(Some((line, terminated)))
}

/// The `type` and `level` of a line as this tool writes it (`{"type":"request","level":"…",`),
/// read from its first bytes, which need not be checked as text first; `None` for any other
/// start (a level with escapes, say, or one that is not UTF-8).
fn head<L: AsRef<[u8]> + ?Sized>(line: &L) -> Option<(&str, Option<&str>)> {
    let text = |bytes| std::str::from_utf8(bytes).ok();
    let rest = line.as_ref().strip_prefix(br#"{"type":""#)?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    let (kind, rest) = (text(&rest[..end])?, rest[end..].strip_prefix(b"\"")?);
    let Some(rest) = rest.strip_prefix(br#","level":""#) else { return Some((kind, None)) };
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    rest[end..].starts_with(b"\"").then_some(())?;
    Some((kind, Some(text(&rest[..end])?)))
}

/// One line. Request, failure and dropped lines (nearly every line of a file) are read straight
/// into their record: parsed as the tagged `RecordLine`, serde would first copy the whole line
/// into an intermediate tree (an internally tagged enum with a flattened field), which cost
/// more than the rest of writing the artifact. Their `type` and `level` keys are then unknown
/// fields the record ignores.
fn parse_line(line: &str, head: Option<(&str, Option<&str>)>) -> serde_json::Result<RecordLine> {
    match head {
        Some(("request", Some(level))) => {
            Ok(RecordLine::Request { level: level.to_owned(), record: serde_json::from_str(line)? })
        }
        Some(("failure", Some(level))) => {
            Ok(RecordLine::Failure { level: level.to_owned(), record: serde_json::from_str(line)? })
        }
        Some(("dropped", Some(level))) => {
            Ok(RecordLine::Dropped { level: level.to_owned(), record: serde_json::from_str(line)? })
        }
        _ => serde_json::from_str(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_only_when_written_our_way() {
        assert_eq!(head(r#"{"type":"request","level":"c16","request_index":1}"#), Some(("request", Some("c16"))));
        assert_eq!(head(r#"{"type":"run","schema":"x"}"#), Some(("run", None)));
        assert_eq!(head(r#"{"type":"request","level":"a\"b","x":1}"#), None);
        assert_eq!(head(r#"{"level":"c16","type":"request"}"#), None);
        assert_eq!(head(r#"{"type":"req"#), None);
    }

    /// Line ends, a last line cut short, and text errors: a wanted line that is not UTF-8 is an
    /// error naming it; a line skipped by its head is not read further.
    #[test]
    fn lines_are_read_as_bytes_and_checked_when_wanted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ndjson");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize");
        let text = std::fs::read_to_string(fixtures.join("open.records.ndjson")).unwrap();
        let level = text
            .lines()
            .find_map(|l| match head(l) {
                Some(("request", Some(level))) => Some(level.to_owned()),
                _ => None,
            })
            .unwrap();
        let requests = |path: &Path| -> Vec<Result<String, String>> {
            read_level_verbatim(path, &level, &["request"]).unwrap().collect()
        };
        let expected = requests(&fixtures.join("open.records.ndjson"));
        assert!(expected.len() > 10 && expected.iter().all(Result::is_ok));
        // CRLF line ends, and the last request line cut short (a killed run): the records before
        // it, no error.
        let lines: Vec<&str> = text.lines().collect();
        let last = lines.iter().rposition(|l| l.starts_with(r#"{"type":"request""#)).unwrap();
        let cut = format!("{}\r\n{}", lines[..last].join("\r\n"), &lines[last][..60]);
        std::fs::write(&path, cut).unwrap();
        assert_eq!(requests(&path), expected[..expected.len() - 1]);
        // Invalid UTF-8 after the head: an error naming the line when the line is wanted, nothing
        // when another kind is read.
        let mut bytes = text.into_bytes();
        let at = bytes.windows(22).position(|w| w == br#"{"type":"request","lev"#).unwrap();
        let line_no = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        bytes[at + 120] = 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let got = requests(&path);
        let error = format!("line {line_no}: stream did not contain valid UTF-8");
        assert!(got.contains(&Err(error)), "{:?}", got.iter().find(|r| r.is_err()));
        assert!(read_level_verbatim(&path, &level, &["failure"]).unwrap().all(|r| r.is_ok()));
    }

    /// Every line of the committed records files reads the same by the shortcut as by the
    /// tagged enum.
    #[test]
    fn the_shortcut_reads_what_the_tagged_enum_reads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize");
        let mut shortcuts = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".records.ndjson") {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let fast = parse_line(line, head(line)).unwrap();
                let tagged: RecordLine = serde_json::from_str(line).unwrap();
                assert_eq!(serde_json::to_string(&fast).unwrap(), serde_json::to_string(&tagged).unwrap());
                shortcuts += usize::from(matches!(head(line), Some(("request" | "failure" | "dropped", Some(_)))));
            }
        }
        assert!(shortcuts > 100, "{shortcuts} lines took the shortcut");
    }

    /// A record copied from its line is the JSON serializing the parsed record gives; lines
    /// written another way are parsed and serialized, and other levels and kinds left out.
    #[test]
    fn records_copied_as_written_are_the_records_serialized() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ndjson");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize");
        let mut text = std::fs::read_to_string(fixtures.join("open.records.ndjson")).unwrap();
        // The same records again, with the keys of their heads the other way round.
        let swapped: Vec<String> = text
            .lines()
            .filter(|l| head(l).is_some_and(|(kind, _)| kind == "request"))
            .take(3)
            .map(|l| {
                l.replacen(r#"{"type":"request","level":"#, r#"{"level":"#, 1).replacen(",", r#","type":"request","#, 1)
            })
            .collect();
        assert!(swapped.iter().all(|l| head(l).is_none() && serde_json::from_str::<RecordLine>(l).is_ok()));
        text.push_str(&(swapped.join("\n") + "\n"));
        std::fs::write(&path, &text).unwrap();
        let mut levels = Vec::new();
        for line in read(&path).unwrap() {
            if let RecordLine::Level { level, .. } = line.unwrap() {
                levels.push(level);
            }
        }
        let mut copied = 0;
        for level in &levels {
            for (kind, tag) in [(&["request"], "request"), (&["failure"], "failure"), (&["dropped"], "dropped")] {
                let as_written: Vec<String> =
                    read_level_verbatim(&path, level, kind).unwrap().map(Result::unwrap).collect();
                let serialized: Vec<String> = read_level(&path, level, kind)
                    .unwrap()
                    .filter_map(|line| match line.unwrap().record_serialized() {
                        Some((k, l, json)) if k == tag && l == level => Some(json.unwrap()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(as_written, serialized, "{level} {tag}");
                copied += as_written.len();
            }
        }
        assert!(copied > 100 && levels.len() == 1, "{copied} records, levels {levels:?}");
    }
}
