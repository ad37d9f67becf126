//! A trace file read one line at a time. Traces run to millions of rows: holding the whole text
//! and every parsed row at once took about ten times the file's size, while a row only needs
//! its own line for as long as it is parsed.
//!
//! A line is bounded (`MAX_LINE_BYTES`) so that a file with no line breaks (a device, a binary
//! file given by mistake) ends in an error naming the line instead of growing without limit.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::TraceError;

/// The longest line a trace may hold. A Bailian row of a 16-million-token prompt lists a
/// million 16-token hash ids, about 8 MiB of text; nothing a format writes comes near twice that.
pub const MAX_LINE_BYTES: u64 = 16 * 1024 * 1024;

/// The lines of a trace file, numbered from 1 as an editor numbers them.
pub(super) struct Lines {
    reader: BufReader<File>,
    /// The current line, without its line break.
    line: String,
    line_no: u64,
}

impl Lines {
    pub(super) fn open(path: &Path) -> Result<Lines, TraceError> {
        let file = crate::sys::open_input(path).map_err(|e| {
            TraceError::file(format!("cannot read it: {e}"), "check the path (relative to the scenario)")
        })?;
        Ok(Lines { reader: BufReader::with_capacity(256 * 1024, file), line: String::new(), line_no: 0 })
    }

    /// The next line without its line break (`\n` or `\r\n`, as `str::lines` splits), with its
    /// number; `None` at the end of the file.
    pub(super) fn next_line(&mut self) -> Result<Option<(u64, &str)>, TraceError> {
        Ok(self.advance()?.map(|n| (n, self.line.as_str())))
    }

    /// Reads the next line (then `text`), and returns its number; `None` at the end of the file.
    pub(super) fn advance(&mut self) -> Result<Option<u64>, TraceError> {
        // The line's buffer is reused from line to line.
        let mut buf = std::mem::take(&mut self.line).into_bytes();
        buf.clear();
        let read = (&mut self.reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut buf).map_err(|e| {
            TraceError::file(format!("cannot read it after line {}: {e}", self.line_no), "check the file")
        })?;
        if read == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let line_no = self.line_no;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if read as u64 > MAX_LINE_BYTES {
            return Err(TraceError::line(
                line_no,
                format!("is longer than {} MiB", MAX_LINE_BYTES / (1024 * 1024)),
                "a trace holds one row per line; check that the file is the trace and in the format given",
            ));
        }
        self.line = String::from_utf8(buf).map_err(|e| {
            TraceError::line(
                line_no,
                format!("is not UTF-8 text (an invalid byte at column {})", e.utf8_error().valid_up_to() + 1),
                "save the trace as UTF-8 text; check that the file is the trace and not another file",
            )
        })?;
        Ok(Some(line_no))
    }

    /// The line `advance` read last.
    pub(super) fn text(&self) -> &str {
        &self.line
    }
}
