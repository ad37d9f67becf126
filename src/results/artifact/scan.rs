//! An artifact read as a stream, at the speed of parsing from memory. serde_json reading from an
//! `io::Read` goes a byte at a time through the reader and parses at less than half its speed
//! over a slice (247 against 582 MB/s, skipping a 121 MB artifact, release build); reading the
//! whole file into memory first costs its size (2 GB at 2 M requests). So the file is read into
//! a buffer of its own here, and each record of `request_timings` and `failures` is parsed by
//! serde_json straight from that buffer, which also says where the record ended; a record cut
//! by the buffer's end is parsed again once more of the file is in. Every other member is
//! copied into a small document parsed once at the end.
//!
//! The scan checks only what it must to find where a member ends; serde_json checks the rest,
//! on each record and on the head. Anything that is not one JSON object of members is refused,
//! as are a repeated record list, a record over [`RECORD_LIMIT`] and bytes after the object.

use std::io::{self, Read};

use serde::de::DeserializeOwned;

/// The largest record accepted: far beyond any real one (about a kilobyte), small enough that a
/// hostile file cannot make one record take the memory.
pub const RECORD_LIMIT: usize = 16 << 20;

/// The read buffer: a few hundred records.
const BUFFER: usize = 1 << 20;

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

/// Parse one `T` from the start of `bytes`: the value and the bytes it took, or `None` when
/// more bytes may complete it. `whole` says no more will come (the end of the file, or a record
/// at its size limit); until then a value cut by the buffer's end is not an error (serde_json
/// calls `12.` an invalid number, not a short one), and a number or literal that takes every
/// byte there is may go on past them (`12` of `123`), so it counts only with a byte after it.
pub fn one<T: DeserializeOwned>(bytes: &[u8], whole: bool) -> Result<Option<(T, usize)>, String> {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<T>();
    match values.next() {
        Some(Ok(v)) => {
            let used = values.byte_offset();
            let delimited = matches!(bytes[..used].last(), Some(b'}' | b']' | b'"'));
            Ok((used < bytes.len() || delimited || whole).then_some((v, used)))
        }
        Some(Err(e)) if whole => Err(e.to_string()),
        Some(Err(_)) | None => Ok(None),
    }
}

/// Scan one JSON object from `r`: the elements of the arrays named in `lists` go one at a time
/// to `each(list index, bytes, whole)`, which parses the element at the start of `bytes` (with
/// [`one`]) and says how many bytes it took, or `None` when more may complete it (it is then
/// called again with more); the other members are returned as one JSON object's text.
pub fn scan<R: Read>(
    r: R,
    lists: &[&str],
    each: impl FnMut(usize, &[u8], bool) -> Result<Option<usize>, String>,
) -> Result<Vec<u8>, ScanError> {
    scan_with(r, BUFFER, lists, each)
}

fn scan_with<R: Read>(
    r: R,
    buffer: usize,
    lists: &[&str],
    mut each: impl FnMut(usize, &[u8], bool) -> Result<Option<usize>, String>,
) -> Result<Vec<u8>, ScanError> {
    let mut s = Scanner { r, buf: vec![0; buffer.max(1)], pos: 0, end: 0, offset: 0, eof: false };
    let mut head = Vec::with_capacity(1 << 16);
    let mut seen = vec![false; lists.len()];
    let mut key = Vec::new();
    s.expect(b'{')?;
    head.push(b'{');
    let mut first = true;
    if s.next_non_ws()? == Some(b'}') {
        s.pos += 1;
    } else {
        loop {
            key.clear();
            if s.next_non_ws()? != Some(b'"') {
                return Err(s.syntax("expected a member name"));
            }
            s.value(&mut key)?;
            s.expect(b':')?;
            let name: String = serde_json::from_slice(&key).map_err(|e| s.syntax(&format!("a member name: {e}")))?;
            if let Some(list) = lists.iter().position(|l| *l == name) {
                if std::mem::replace(&mut seen[list], true) {
                    return Err(s.syntax(&format!("duplicate field `{name}`")));
                }
                s.list(&name, |e, whole| each(list, e, whole))?;
            } else {
                if !first {
                    head.push(b',');
                }
                first = false;
                head.extend_from_slice(&key);
                head.push(b':');
                s.value(&mut head)?;
            }
            match s.next_non_ws()? {
                Some(b',') => s.pos += 1,
                Some(b'}') => {
                    s.pos += 1;
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

/// The file through a buffer of its own: `buf[pos..end]` is read and not yet taken.
struct Scanner<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// The file offset of `buf[0]`, for messages.
    offset: u64,
    eof: bool,
}

fn whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

impl<R: Read> Scanner<R> {
    fn syntax(&self, what: &str) -> ScanError {
        ScanError::Syntax(format!("{what} at byte {}", self.offset + self.pos as u64))
    }

    /// Read more of the file after what is not taken yet, the buffer doubled when that fills
    /// it; `false` at the end of the file.
    fn more(&mut self) -> Result<bool, ScanError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.offset += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            let grown = self.buf.len() * 2;
            self.buf.resize(grown, 0);
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The next byte that is not whitespace, not taken; `None` at the end.
    fn next_non_ws(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            if let Some(i) = self.buf[self.pos..self.end].iter().position(|&b| !whitespace(b)) {
                self.pos += i;
                return Ok(Some(self.buf[self.pos]));
            }
            self.pos = self.end;
            if !self.more()? {
                return Ok(None);
            }
        }
    }

    fn expect(&mut self, want: u8) -> Result<(), ScanError> {
        if self.next_non_ws()? != Some(want) {
            return Err(self.syntax(&format!("expected `{}`", want as char)));
        }
        self.pos += 1;
        Ok(())
    }

    /// The elements of an array, each parsed by `each` where it lies in the buffer.
    fn list(
        &mut self,
        name: &str,
        mut each: impl FnMut(&[u8], bool) -> Result<Option<usize>, String>,
    ) -> Result<(), ScanError> {
        self.expect(b'[')?;
        if self.next_non_ws()? == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        for n in 0u64.. {
            if self.next_non_ws()?.is_none() {
                return Err(self.syntax(&format!("unexpected end of the file at {name}[{n}]")));
            }
            loop {
                let bytes = &self.buf[self.pos..self.end];
                let whole = self.eof || bytes.len() >= RECORD_LIMIT;
                let parsed = each(bytes, whole).map_err(|e| self.syntax(&format!("{name}[{n}]: {e}")))?;
                let too_long = || self.syntax(&format!("{name}[{n}] is over {} MiB", RECORD_LIMIT >> 20));
                match parsed {
                    Some(used) if used <= RECORD_LIMIT => {
                        self.pos += used;
                        break;
                    }
                    // The buffer doubles, so a record may be whole before it is seen too long.
                    Some(_) => return Err(too_long()),
                    None if self.eof => {
                        return Err(self.syntax(&format!("unexpected end of the file in {name}[{n}]")));
                    }
                    None if whole => return Err(too_long()),
                    // At the end of the file the next round is `whole`.
                    None => {
                        self.more()?;
                    }
                }
            }
            match self.next_non_ws()? {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax(&format!("expected `,` or `]` after {name}[{n}]"))),
            }
        }
        Ok(())
    }

    /// Copy one JSON value's bytes into `out`: a string to its closing quote, an object or an
    /// array to its matching bracket, anything else to the next delimiter.
    fn value(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        let start = out.len();
        let Some(first) = self.next_non_ws()? else {
            return Err(self.syntax("unexpected end of the file"));
        };
        let scalar = !matches!(first, b'"' | b'{' | b'[');
        let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
        loop {
            let buf = &self.buf[self.pos..self.end];
            let mut end = None;
            for (i, &b) in buf.iter().enumerate() {
                if scalar {
                    if matches!(b, b',' | b'}' | b']') || whitespace(b) {
                        end = Some(i);
                        break;
                    }
                } else if in_string {
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
                } else {
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
            }
            let take = end.unwrap_or(buf.len());
            out.extend_from_slice(&buf[..take]);
            self.pos += take;
            if end.is_some() {
                return if out.len() > start { Ok(()) } else { Err(self.syntax("expected a value")) };
            }
            if !self.more()? {
                if scalar && out.len() > start {
                    return Ok(());
                }
                return Err(self.syntax("unexpected end of the file inside a value"));
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
        // A tiny buffer: every value crosses the buffer's end, and the buffer grows for them.
        let head = scan_with(text.as_bytes(), 3, &["a", "b"], |i, bytes, whole| {
            Ok(one::<Value>(bytes, whole)?.map(|(v, used)| {
                got.push((i, v));
                used
            }))
        })
        .map_err(|e| e.to_string())?;
        Ok((serde_json::from_slice(&head).map_err(|e| e.to_string())?, got))
    }

    #[test]
    fn lists_go_element_by_element_and_the_rest_is_kept_whole() {
        let text = r#" { "x" : 1.5e3 , "a": [ {"s": "}]\"[{", "n": [1.25e-3, {"k": null}]}, 7, "q\\"],
            "y": {"z": [true, false]}, "b": [], "w": "v" } "#;
        let (head, got) = run(text).unwrap();
        assert_eq!(head, serde_json::json!({"x": 1.5e3, "y": {"z": [true, false]}, "w": "v"}));
        assert_eq!(
            got,
            [
                (0, serde_json::json!({"s": "}]\"[{", "n": [1.25e-3, {"k": null}]})),
                (0, serde_json::json!(7)),
                (0, serde_json::json!("q\\"))
            ]
        );
        assert_eq!(run("{}").unwrap().0, serde_json::json!({}));
        // A number split by the buffer's end is read whole.
        assert_eq!(run(r#"{"a": [12345, 6]}"#).unwrap().1, [(0, serde_json::json!(12345)), (0, serde_json::json!(6))]);
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
            (r#"{"a": [12"#, "after a[0]"),
            (r#"{"a": [{"k": 1"#, "a[0]: EOF while parsing an object"),
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
        let e = run(&text).err().unwrap_or_default();
        assert!(e.contains("a[0] is over 16 MiB"), "{}", &e[..e.len().min(200)]);
    }
}
