//! JSON Lines traces: Mooncake, Qwen Bailian, and this tool's own format. One object per line;
//! blank lines are skipped and not counted as rows. Each line is parsed, checked and handed to
//! the selection before the next is read.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::lines::Lines;
use super::select::{RawRow, Selection, fmt_span};
use super::{MAX_TIME_NS, TraceError};

/// Mooncake: `timestamp` in milliseconds since the first request, `input_length`,
/// `output_length`, `hash_ids`.
pub(super) fn read_mooncake(lines: &mut Lines, out: &mut Selection) -> Result<(), TraceError> {
    let mut objects = Objects::default();
    while let Some((row, line, obj, text)) = objects.next(lines)? {
        let f = Fields { obj: &obj, text, row, line };
        let (time_ns, time_written) = f.time("timestamp", 1e6, "milliseconds")?;
        out.push(RawRow {
            row,
            line,
            time_ns,
            time_written,
            input_tokens: f.tokens("input_length")?,
            output_tokens: f.tokens_or_zero("output_length")?,
            hash_ids: f.hash_ids("hash_ids", true)?,
            session: None,
            turn: None,
        })?;
    }
    Ok(())
}

/// Qwen Bailian: `chat_id`, `parent_chat_id` (−1 for a first request), `timestamp` in seconds,
/// `input_length` (the retained history included), `output_length`, `turn`, `hash_ids`. A row's
/// session is the `chat_id` of its conversation's first request.
pub(super) fn read_bailian(lines: &mut Lines, out: &mut Selection) -> Result<(), TraceError> {
    let mut roots: HashMap<String, String> = HashMap::new();
    let mut objects = Objects::default();
    while let Some((row, line, obj, text)) = objects.next(lines)? {
        let f = Fields { obj: &obj, text, row, line };
        let chat = f.id("chat_id")?.ok_or_else(|| f.err("has no chat_id", "every Bailian row has a chat_id"))?;
        let root = match f.id("parent_chat_id")? {
            None => chat.clone(),
            Some(parent) if parent == "-1" => chat.clone(),
            // A parent cut off by the file's start: its conversation is still one session.
            Some(parent) => roots.get(&parent).cloned().unwrap_or(parent),
        };
        roots.insert(chat, root.clone());
        let (time_ns, time_written) = f.time("timestamp", 1e9, "seconds")?;
        out.push(RawRow {
            row,
            line,
            time_ns,
            time_written,
            input_tokens: f.tokens("input_length")?,
            output_tokens: f.tokens_or_zero("output_length")?,
            hash_ids: f.hash_ids("hash_ids", true)?,
            session: Some(root),
            turn: f.turn("turn")?,
        })?;
    }
    Ok(())
}

/// This tool's own: `offset_ms`, `input_tokens`, `output_tokens`, optional `hash_ids`,
/// `session` (string or integer) and `turn`.
pub(super) fn read_own(lines: &mut Lines, block_size: Option<u32>, out: &mut Selection) -> Result<(), TraceError> {
    let mut objects = Objects::default();
    while let Some((row, line, obj, text)) = objects.next(lines)? {
        let f = Fields { obj: &obj, text, row, line };
        let hash_ids = f.hash_ids("hash_ids", false)?;
        if !hash_ids.is_empty() && block_size.is_none() {
            return Err(f.err("has hash_ids, but the scenario gives no block size", "set workload.trace.block_size"));
        }
        let (time_ns, time_written) = f.time("offset_ms", 1e6, "milliseconds")?;
        out.push(RawRow {
            row,
            line,
            time_ns,
            time_written,
            input_tokens: f.tokens("input_tokens")?,
            output_tokens: f.tokens_or_zero("output_tokens")?,
            hash_ids,
            session: f.id("session")?,
            turn: f.turn("turn")?,
        })?;
    }
    Ok(())
}

/// A line's object with its row and line numbers, and the line's text.
type Numbered<'a> = (u64, u64, Map<String, Value>, &'a str);

/// The non-blank lines of a file as JSON objects, one at a time, with their row and line numbers.
#[derive(Default)]
struct Objects {
    row: u64,
}

impl Objects {
    fn next<'a>(&mut self, lines: &'a mut Lines) -> Result<Option<Numbered<'a>>, TraceError> {
        while let Some(line_no) = lines.advance()? {
            if lines.text().trim().is_empty() {
                continue;
            }
            let line = lines.text();
            self.row += 1;
            let row = self.row;
            return match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(obj)) => Ok(Some((row, line_no, obj, line))),
                Ok(_) => Err(TraceError::at(row, line_no, "is not a JSON object", "one object per line")),
                Err(e) => Err(TraceError::at(row, line_no, format!("is not JSON ({e})"), "one object per line")),
            };
        }
        Ok(None)
    }
}

/// A number as the file most likely writes it when its text cannot be found: integers in full,
/// other numbers in their shortest form (`1e300`, never `1e+300` or 301 digits).
fn as_written(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_f64() => n.as_f64().map_or_else(|| n.to_string(), crate::text::fmt_number),
        other => other.to_string(),
    }
}

/// The text of `key`'s number in a JSON line (`1e13`, as written), when it is found there and
/// reads back as `value`; for messages only.
fn number_text<'a>(line: &'a str, key: &str, value: f64) -> Option<&'a str> {
    let quoted = format!("\"{key}\"");
    line.match_indices(&quoted).find_map(|(at, _)| {
        let rest = line[at + quoted.len()..].trim_start().strip_prefix(':')?.trim_start();
        let len = rest.find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).unwrap_or(rest.len());
        let text = &rest[..len];
        // A number of a hundred digits is shown in its short form instead.
        (text.len() <= 32 && text.parse::<f64>().ok() == Some(value)).then_some(text)
    })
}

struct Fields<'a> {
    obj: &'a Map<String, Value>,
    /// The line's text, to quote a value as written.
    text: &'a str,
    row: u64,
    line: u64,
}

impl Fields<'_> {
    fn err(&self, problem: impl Into<String>, fix: impl Into<String>) -> TraceError {
        TraceError::at(self.row, self.line, problem, fix)
    }

    /// A time in the format's unit (`ns_per_unit` nanoseconds each), as nanoseconds, with the
    /// time as written; never negative, always below `MAX_TIME_NS`.
    fn time(&self, key: &str, ns_per_unit: f64, unit: &str) -> Result<(i128, String), TraceError> {
        let v = self.obj.get(key).ok_or_else(|| self.err(format!("has no {key}"), format!("add {key}")))?;
        let shown =
            v.as_f64().and_then(|t| number_text(self.text, key, t)).map_or_else(|| as_written(v), str::to_string);
        let written = format!("{key} {shown} ({unit})");
        match v.as_f64() {
            Some(t) if t.is_finite() && t >= 0.0 && t * ns_per_unit < MAX_TIME_NS => {
                Ok(((t * ns_per_unit).round() as i128, written))
            }
            Some(t) if t.is_finite() && t >= 0.0 => Err(self.err(
                format!("{written} is {}, beyond any trace's clock (584 years at most)", fmt_span(t * ns_per_unit)),
                format!("{key} counts {unit} from the trace's start; check the column's unit and the row"),
            )),
            Some(_) => Err(self.err(format!("{key} {shown} is negative"), "times count from the trace's start")),
            None => Err(self.err(format!("{key} {v} is not a number"), format!("{key} is a number"))),
        }
    }

    /// A positive token count.
    fn tokens(&self, key: &str) -> Result<u32, TraceError> {
        match self.tokens_or_zero(key)? {
            0 => Err(self.err(format!("{key} is 0"), "every request has at least one prompt token")),
            n => Ok(n),
        }
    }

    fn tokens_or_zero(&self, key: &str) -> Result<u32, TraceError> {
        let v = self.obj.get(key).ok_or_else(|| self.err(format!("has no {key}"), format!("add {key}")))?;
        v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
            self.err(format!("{key} {v} is not a token count"), format!("{key} is a whole number of tokens"))
        })
    }

    fn hash_ids(&self, key: &str, required: bool) -> Result<Vec<u64>, TraceError> {
        let Some(v) = self.obj.get(key) else {
            return if required {
                Err(self.err(format!("has no {key}"), format!("add {key}")))
            } else {
                Ok(Vec::new())
            };
        };
        let list = v.as_array().ok_or_else(|| self.err(format!("{key} is not a list"), "a list of integers"))?;
        list.iter()
            .map(|id| {
                id.as_u64()
                    .ok_or_else(|| self.err(format!("{key} holds {id}; hash ids are integers ≥ 0"), "fix the row"))
            })
            .collect()
    }

    /// An identifier given as a string or an integer.
    fn id(&self, key: &str) -> Result<Option<String>, TraceError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(n.to_string())),
            Some(v) => Err(self.err(format!("{key} {v} is not an identifier"), "a string or an integer")),
        }
    }

    fn turn(&self, key: &str) -> Result<Option<u32>, TraceError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(self.err(format!("{key} {v} is not a turn number"), "a whole number")),
            },
        }
    }
}
