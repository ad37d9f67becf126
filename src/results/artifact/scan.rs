//! An artifact read as a stream, at the speed of parsing from memory. serde_json reading from an
//! `io::Read` goes a byte at a time through the reader and parses at less than half its speed
//! over a slice (247 against 582 MB/s, skipping a 121 MB artifact, release build); reading the
//! whole file into memory first costs its size (2 GB at 2 M requests). So the document is
//! scanned here: each record of `request_timings` and `failures` is cut out on its own — its
//! bytes found by counting brackets outside strings — parsed from that slice and handed on, and
//! every other member is copied into a small document parsed once at the end.
//!
//! The scan checks only what it must to find where a value ends; serde_json checks the rest,
//! on each record and on the head. Anything that is not one JSON object of members is refused,
//! as are a repeated record list, a record over [`RECORD_LIMIT`] and bytes after the object.

use std::io::{self, BufRead};

/// The largest record accepted: far beyond any real one (about a kilobyte), small enough that a
/// hostile file cannot make one record take the memory.
pub const RECORD_LIMIT: usize = 16 << 20;

/// Why a scan stopped.
#[derive(Debug)]
pub enum ScanError {
    Io(io::Error),
    /// Not an artifact: what was wrong and at which byte offset.
    Syntax(String),
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Io(e) => write!(f, "{e}"),
            ScanError::Syntax(s) => f.write_str(s),
        }
    }
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> Self {
        ScanError::Io(e)
    }
}

/// Scan one JSON object from `r`: the members named in `lists` are arrays whose elements go one
/// at a time, as their bytes, to `each(list index, element)` (which parses them); the other
/// members are returned as one JSON object's text.
pub fn scan<R: BufRead>(
    r: R,
    lists: &[&str],
    mut each: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> Result<Vec<u8>, ScanError> {
    let mut s = Scanner { r, offset: 0 };
    let mut head = Vec::with_capacity(1 << 16);
    let mut seen = vec![false; lists.len()];
    let mut key = Vec::new();
    let mut element = Vec::new();
    s.expect(b'{')?;
    head.push(b'{');
    let mut first = true;
    if s.next_non_ws()? == Some(b'}') {
        s.consume(1);
    } else {
        loop {
            key.clear();
            if s.next_non_ws()? != Some(b'"') {
                return Err(s.syntax("expected a member name"));
            }
            s.value(&mut key, usize::MAX)?;
            s.expect(b':')?;
            let name: String = serde_json::from_slice(&key).map_err(|e| s.syntax(&format!("a member name: {e}")))?;
            if let Some(list) = lists.iter().position(|l| *l == name) {
                if std::mem::replace(&mut seen[list], true) {
                    return Err(s.syntax(&format!("duplicate field `{name}`")));
                }
                s.list(&name, &mut element, |e| each(list, e))?;
            } else {
                if !first {
                    head.push(b',');
                }
                first = false;
                head.extend_from_slice(&key);
                head.push(b':');
                s.value(&mut head, usize::MAX)?;
            }
            match s.next_non_ws()? {
                Some(b',') => s.consume(1),
                Some(b'}') => {
                    s.consume(1);
                    break;
                }
                _ => return Err(s.syntax("expected `,` or `}` after a member")),
            }
        }
    }
    if s.next_non_ws()?.is_some() {
        return Err(s.syntax("trailing characters after the artifact"));
    }
    head.push(b'}');
    Ok(head)
}

struct Scanner<R> {
    r: R,
    /// Bytes consumed, for messages.
    offset: u64,
}

impl<R: BufRead> Scanner<R> {
    fn syntax(&self, what: &str) -> ScanError {
        ScanError::Syntax(format!("{what} at byte {}", self.offset))
    }

    fn consume(&mut self, n: usize) {
        self.r.consume(n);
        self.offset += n as u64;
    }

    /// The next byte that is not whitespace, not consumed; `None` at the end.
    fn next_non_ws(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                return Ok(None);
            }
            match buf.iter().position(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t')) {
                Some(i) => {
                    let b = buf[i];
                    self.consume(i);
                    return Ok(Some(b));
                }
                None => {
                    let n = buf.len();
                    self.consume(n);
                }
            }
        }
    }

    fn expect(&mut self, want: u8) -> Result<(), ScanError> {
        if self.next_non_ws()? != Some(want) {
            return Err(self.syntax(&format!("expected `{}`", want as char)));
        }
        self.consume(1);
        Ok(())
    }

    /// The elements of an array, each cut out into `element` and handed to `each`.
    fn list(
        &mut self,
        name: &str,
        element: &mut Vec<u8>,
        mut each: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), ScanError> {
        self.expect(b'[')?;
        if self.next_non_ws()? == Some(b']') {
            self.consume(1);
            return Ok(());
        }
        for n in 0u64.. {
            element.clear();
            self.value(element, RECORD_LIMIT)?;
            each(element).map_err(|e| self.syntax(&format!("{name}[{n}]: {e}")))?;
            match self.next_non_ws()? {
                Some(b',') => self.consume(1),
                Some(b']') => {
                    self.consume(1);
                    return Ok(());
                }
                _ => return Err(self.syntax(&format!("expected `,` or `]` after {name}[{n}]"))),
            }
        }
        Ok(())
    }

    /// Copy one JSON value's bytes into `out`: a string to its closing quote, an object or an
    /// array to its matching bracket, anything else to the next delimiter. At most `limit` bytes.
    fn value(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), ScanError> {
        let start = out.len();
        let Some(first) = self.next_non_ws()? else {
            return Err(self.syntax("unexpected end of the file"));
        };
        let mut depth: u32 = 0;
        let mut in_string = false;
        let mut escaped = false;
        let scalar = !matches!(first, b'"' | b'{' | b'[');
        loop {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                if scalar && out.len() > start {
                    return Ok(());
                }
                return Err(self.syntax("unexpected end of the file inside a value"));
            }
            let mut end = None;
            for (i, &b) in buf.iter().enumerate() {
                if scalar {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        end = Some(i);
                        break;
                    }
                    continue;
                }
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let take = end.unwrap_or(buf.len());
            if out.len() - start + take > limit {
                return Err(self.syntax(&format!("a value of over {} MiB", limit >> 20)));
            }
            out.extend_from_slice(&buf[..take]);
            self.consume(take);
            if end.is_some() {
                if scalar && out.len() == start {
                    return Err(self.syntax("expected a value"));
                }
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn run(text: &str) -> Result<(Value, Vec<(usize, Value)>), String> {
        let mut got = Vec::new();
        // A tiny buffer: every value crosses buffer boundaries.
        let r = io::BufReader::with_capacity(3, text.as_bytes());
        let head = scan(r, &["a", "b"], |i, bytes| {
            got.push((i, serde_json::from_slice(bytes).map_err(|e| e.to_string())?));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok((serde_json::from_slice(&head).map_err(|e| e.to_string())?, got))
    }

    #[test]
    fn lists_go_element_by_element_and_the_rest_is_kept_whole() {
        let text = r#" { "x" : 1.5e3 , "a": [ {"s": "}]\"[{", "n": [1, {"k": null}]}, 7, "q\\"],
            "y": {"z": [true, false]}, "b": [], "w": "v" } "#;
        let (head, got) = run(text).unwrap();
        assert_eq!(head, serde_json::json!({"x": 1.5e3, "y": {"z": [true, false]}, "w": "v"}));
        assert_eq!(
            got,
            [
                (0, serde_json::json!({"s": "}]\"[{", "n": [1, {"k": null}]})),
                (0, serde_json::json!(7)),
                (0, serde_json::json!("q\\"))
            ]
        );
        assert_eq!(run("{}").unwrap().0, serde_json::json!({}));
    }

    #[test]
    fn what_is_not_one_object_is_refused_with_where() {
        for (text, says) in [
            ("[1]", "expected `{`"),
            (r#"{"a": [1, 2"#, "after a[1]"),
            (r#"{"a": [1], "a": [2]}"#, "duplicate field `a`"),
            (r#"{"x": 1} {"#, "trailing characters"),
            (r#"{"x": "open"#, "end of the file"),
            (r#"{"x" 1}"#, "expected `:`"),
            (r#"{"a": [{"k": tru}]}"#, "a[0]: expected ident"),
            (r#"{"a": {"k": 1}}"#, "expected `[`"),
            (r#"{"x": 1,}"#, "expected a member name"),
        ] {
            let e = run(text).unwrap_err();
            assert!(e.contains(says) && e.contains("at byte"), "{text}: {e}");
        }
        // Malformed head members are serde_json's to refuse.
        assert!(run(r#"{"x": 1e}"#).is_err());
    }

    #[test]
    fn a_record_beyond_the_limit_is_refused_before_it_is_held() {
        let text = format!(r#"{{"a": ["{}"]}}"#, "x".repeat(RECORD_LIMIT + 1));
        let e = run(&text).unwrap_err();
        assert!(e.contains("over 16 MiB"), "{e}");
    }
}
