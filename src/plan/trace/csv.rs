//! CSV traces: Azure LLM inference (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`) and
//! BurstGPT (`Timestamp`, `Model`, `Request tokens`, `Response tokens`, `Total tokens`,
//! `Log Type`). Columns are found by their header names; quoted fields (`"a,b"`, `""`) are read
//! as RFC 4180 says. The first line is the header; blank lines are skipped. Rows are read one
//! line at a time.

use super::lines::Lines;
use super::select::{RawRow, Selection, fmt_span};
use super::{MAX_TIME_NS, TraceError};

/// Azure: `TIMESTAMP` is a datetime (`2023-11-16 18:15:46.6805900`, up to 9 fractional digits).
pub(super) fn read_azure(lines: &mut Lines, out: &mut Selection) -> Result<(), TraceError> {
    let mut table = Table::new(lines, &["TIMESTAMP", "ContextTokens", "GeneratedTokens"])?;
    while let Some((row, line, fields)) = table.next_row(lines)? {
        let f = Row { fields: &fields, row, line, table: &table };
        let field = f.get(0)?;
        let stamp = clip(field);
        let time_ns = parse_datetime(field).ok_or_else(|| {
            f.err(
                format!("TIMESTAMP {stamp:?} is not a datetime"),
                "write it like 2023-11-16 18:15:46.6805900 (years 1 to 9999)",
            )
        })?;
        out.push(RawRow {
            row,
            line,
            time_ns,
            time_written: format!("TIMESTAMP {stamp:?}"),
            input_tokens: f.tokens(1, false)?,
            output_tokens: f.tokens(2, true)?,
            hash_ids: Vec::new(),
            session: None,
            turn: None,
        })?;
    }
    Ok(())
}

/// BurstGPT: `Timestamp` in seconds; rows of failed requests (`Response tokens` = 0) are counted
/// and skipped.
pub(super) fn read_burstgpt(lines: &mut Lines, out: &mut Selection) -> Result<(), TraceError> {
    let mut table = Table::new(lines, &["Timestamp", "Request tokens", "Response tokens"])?;
    while let Some((row, line, fields)) = table.next_row(lines)? {
        let f = Row { fields: &fields, row, line, table: &table };
        let field = f.get(0)?;
        let stamp = clip(field);
        let seconds: f64 = field.parse().ok().filter(|s: &f64| s.is_finite()).ok_or_else(|| {
            f.err(format!("Timestamp {stamp:?} is not a number of seconds"), "seconds, e.g. 5 or 5.25")
        })?;
        if seconds < 0.0 {
            return Err(f.err(format!("Timestamp {stamp} is negative"), "times count from the trace's start"));
        }
        if seconds * 1e9 >= MAX_TIME_NS {
            return Err(f.err(
                format!(
                    "Timestamp {stamp} (seconds) is {}, beyond any trace's clock (584 years at most)",
                    fmt_span(seconds * 1e9)
                ),
                "Timestamp counts seconds from the trace's start; check the column's unit and the row",
            ));
        }
        out.push(RawRow {
            row,
            line,
            time_ns: (seconds * 1e9).round() as i128,
            time_written: format!("Timestamp {stamp} (seconds)"),
            input_tokens: f.tokens(1, false)?,
            output_tokens: f.tokens(2, true)?,
            hash_ids: Vec::new(),
            session: None,
            turn: None,
        })?;
    }
    Ok(())
}

/// A field for a message: as read, or its start when longer than any time a trace writes.
fn clip(field: &str) -> String {
    match field.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &field[..at]),
        None => field.to_string(),
    }
}

/// A CSV file with the columns a format needs located in its header.
struct Table {
    /// Position of each wanted column in a row.
    columns: Vec<usize>,
    names: Vec<&'static str>,
    /// Data rows read so far.
    rows: u64,
}

impl Table {
    fn new(lines: &mut Lines, wanted: &[&'static str]) -> Result<Self, TraceError> {
        let header = loop {
            match lines.next_line()? {
                Some((_, l)) if l.trim().is_empty() => continue,
                Some((_, l)) => break l,
                None => return Err(TraceError::file("is empty", "give a CSV file with a header line")),
            }
        };
        let names: Vec<String> =
            split(header).into_iter().map(|h| h.trim().trim_start_matches('\u{feff}').to_string()).collect();
        let mut columns = Vec::with_capacity(wanted.len());
        for want in wanted {
            let at = names.iter().position(|n| n == want).ok_or_else(|| {
                TraceError::file(
                    format!("the header has no {want:?} column (it has {})", names.join(", ")),
                    "check workload.trace.format against the file",
                )
            })?;
            columns.push(at);
        }
        Ok(Table { columns, names: wanted.to_vec(), rows: 0 })
    }

    /// (row, line, fields) of the next data row.
    fn next_row(&mut self, lines: &mut Lines) -> Result<Option<(u64, u64, Vec<String>)>, TraceError> {
        while let Some((line_no, l)) = lines.next_line()? {
            if l.trim().is_empty() {
                continue;
            }
            self.rows += 1;
            return Ok(Some((self.rows, line_no, split(l))));
        }
        Ok(None)
    }
}

struct Row<'a> {
    fields: &'a [String],
    row: u64,
    line: u64,
    table: &'a Table,
}

impl Row<'_> {
    fn err(&self, problem: impl Into<String>, fix: impl Into<String>) -> TraceError {
        TraceError::at(self.row, self.line, problem, fix)
    }

    /// The wanted column `k`, trimmed.
    fn get(&self, k: usize) -> Result<&str, TraceError> {
        let name = self.table.names[k];
        self.fields
            .get(self.table.columns[k])
            .map(|s| s.trim())
            .ok_or_else(|| self.err(format!("has no {name} field"), "every row has as many fields as the header"))
    }

    fn tokens(&self, k: usize, zero_ok: bool) -> Result<u32, TraceError> {
        let (name, text) = (self.table.names[k], self.get(k)?);
        // Some exports write counts as floats ("128.0").
        let n = text
            .parse::<u64>()
            .ok()
            .or_else(|| {
                // Whole and within u32, checked before the conversion: nothing saturates.
                text.parse::<f64>()
                    .ok()
                    .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
                    .map(|f| f as u64)
            })
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| self.err(format!("{name} {text:?} is not a token count"), "a whole number of tokens"))?;
        if n == 0 && !zero_ok {
            return Err(self.err(format!("{name} is 0"), "every request has at least one prompt token"));
        }
        Ok(n)
    }
}

/// Fields of one CSV line (RFC 4180 quoting; no quoted line breaks).
fn split(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.trim().is_empty() => quoted = true,
            (',', false) => out.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    out.push(field);
    out
}

/// `YYYY-MM-DD HH:MM:SS[.fffffffff]` (or with `T`, optional `Z`) as nanoseconds since the Unix
/// epoch; only differences between rows matter.
pub(super) fn parse_datetime(s: &str) -> Option<i128> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, u32, u32) = (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    // Years as RFC 3339 writes them: a larger one is damage, and would overflow the day count.
    if d.next().is_some() || !(1..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (h, min, sec): (i64, i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    if t.next().is_some() || h > 23 || min > 59 || sec > 60 {
        return None;
    }
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: i128 =
        if frac.is_empty() { 0 } else { frac.parse::<i128>().ok()? * 10i128.pow(9 - frac.len() as u32) };
    let days = days_from_civil(y, m, day);
    Some((i128::from(days) * 86_400 + i128::from(h * 3600 + min * 60 + sec)) * 1_000_000_000 + frac_ns)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_with_seven_fractional_digits() {
        let a = parse_datetime("2023-11-16 18:15:46.6805900").unwrap();
        let b = parse_datetime("2023-11-16 18:15:47.0000001").unwrap();
        assert_eq!(b - a, 319_410_100);
        assert_eq!(parse_datetime("1970-01-02 00:00:00"), Some(86_400_000_000_000));
        // Across a month and a leap day.
        let feb = parse_datetime("2024-02-28T23:59:59Z").unwrap();
        let mar = parse_datetime("2024-03-01 00:00:00").unwrap();
        assert_eq!(mar - feb, (86_400 + 1) * 1_000_000_000);
        for bad in ["2023-13-01 00:00:00", "2023-11-16", "16/11/2023 10:00:00", "2023-11-16 10:00:00.12x"] {
            assert!(parse_datetime(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(split("a,\"b,c\",\"d\"\"e\",,f"), vec!["a", "b,c", "d\"e", "", "f"]);
    }
}
