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
    buf: Vec<u8>,
    line_no: u64,
}

impl Lines {
    pub(super) fn open(path: &Path) -> Result<Lines, TraceError> {
        let file = File::open(path).map_err(|e| {
            TraceError::file(format!("cannot read it: {e}"), "check the path (relative to the scenario)")
        })?;
        Ok(Lines { reader: BufReader::with_capacity(256 * 1024, file), buf: Vec::new(), line_no: 0 })
    }

    /// The next line without its line break (`\n` or `\r\n`, as `str::lines` splits), with its
    /// number; `None` at the end of the file.
    pub(super) fn next_line(&mut self) -> Result<Option<(u64, &str)>, TraceError> {
        self.buf.clear();
        let read = (&mut self.reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut self.buf).map_err(|e| {
            TraceError::file(format!("cannot read it after line {}: {e}", self.line_no), "check the file")
        })?;
        if read == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let line_no = self.line_no;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if read as u64 > MAX_LINE_BYTES {
            return Err(TraceError::line(
                line_no,
                format!("is longer than {} MiB", MAX_LINE_BYTES / (1024 * 1024)),
                "a trace holds one row per line; check that the file is the trace and in the format given",
            ));
        }
        let text = std::str::from_utf8(&self.buf).map_err(|e| {
            TraceError::line(
                line_no,
                format!("is not UTF-8 text (an invalid byte at column {})", e.valid_up_to() + 1),
                "save the trace as UTF-8 text; check that the file is the trace and not another file",
            )
        })?;
        Ok(Some((line_no, text)))
    }
}
