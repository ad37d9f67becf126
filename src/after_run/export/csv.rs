//! Rows → CSV as RFC 4180 writes it (<https://www.rfc-editor.org/rfc/rfc4180>): a header row of
//! the column names, one record per row, CRLF line ends, a field quoted (its quotes doubled)
//! when it holds a comma, a quote or a line end. A null is an empty field; a flag is `true` or
//! `false`; a number is written in the fewest digits that read back to the same value; an
//! instant as RFC 3339 in UTC with nanoseconds; a list as its JSON text (`["a","b"]`, a gap
//! sketch `[[value_us,count],…]`). A few lines of code, so no crate.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use super::columns::{COLUMNS, Get, Row};

/// A CSV file being written.
pub struct CsvSink<W: Write> {
    out: W,
    /// One record, built before it is written.
    line: String,
    /// One field, built before it is quoted.
    field: String,
}

impl<W: Write> CsvSink<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        let header: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
        out.write_all(header.join(",").as_bytes())?;
        out.write_all(b"\r\n")?;
        Ok(CsvSink { out, line: String::new(), field: String::new() })
    }

    pub fn push(&mut self, row: &Row) -> io::Result<()> {
        self.line.clear();
        for (i, column) in COLUMNS.iter().enumerate() {
            if i > 0 {
                self.line.push(',');
            }
            self.field.clear();
            write_field(&mut self.field, &column.get, row);
            push_quoted(&mut self.line, &self.field);
        }
        self.line.push_str("\r\n");
        self.out.write_all(self.line.as_bytes())
    }

    /// The writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The field's text, unquoted (empty for null). Writing into a `String` cannot fail.
fn write_field(f: &mut String, get: &Get, row: &Row) {
    match get {
        Get::Str(g) => {
            if let Some(s) = g(row) {
                f.push_str(&s);
            }
        }
        Get::U32(g) => {
            if let Some(v) = g(row) {
                let _ = write!(f, "{v}");
            }
        }
        Get::U64(g) => {
            if let Some(v) = g(row) {
                let _ = write!(f, "{v}");
            }
        }
        Get::F64(g) => {
            if let Some(v) = g(row) {
                let _ = write!(f, "{v}");
            }
        }
        Get::Bool(g) => {
            if let Some(v) = g(row) {
                f.push_str(if v { "true" } else { "false" });
            }
        }
        Get::Timestamp(g) => {
            if let Some(ns) = g(row) {
                let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
                let _ = write!(f, "{}", humantime::format_rfc3339_nanos(at));
            }
        }
        Get::StrList(g) => {
            if let Some(words) = g(row) {
                let words: Vec<&str> = words.iter().map(|w| w.as_ref()).collect();
                // A list of strings always serializes.
                f.push_str(&serde_json::to_string(&words).unwrap_or_default());
            }
        }
        Get::Gaps(g) => {
            if let Some(sketch) = g(row) {
                f.push('[');
                for (i, (v, c)) in sketch.0.iter().enumerate() {
                    let _ = write!(f, "{}[{v},{c}]", if i > 0 { "," } else { "" });
                }
                f.push(']');
            }
        }
    }
}

/// `field` as RFC 4180 writes it: quoted, quotes doubled, when it holds a comma, a quote or a
/// line end.
fn push_quoted(line: &mut String, field: &str) {
    if field.contains([',', '"', '\r', '\n']) {
        line.push('"');
        line.push_str(&field.replace('"', "\"\""));
        line.push('"');
    } else {
        line.push_str(field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_as_rfc_4180_says() {
        let mut line = String::new();
        for field in ["plain", "a,b", "say \"hi\"", "two\nlines", ""] {
            push_quoted(&mut line, field);
            line.push('|');
        }
        assert_eq!(line, "plain|\"a,b\"|\"say \"\"hi\"\"\"|\"two\nlines\"||");
    }
}
