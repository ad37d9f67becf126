//! The common shape of a chat or completions chunk, read in one validating pass.
//!
//! Nearly every payload of a stream is a text delta: `{"id":…,"choices":[{"index":0,
//! "delta":{"content":"…"},"finish_reason":null}],…}`, some with a `usage` object (the last, or
//! every one under vLLM's `continuous_usage_stats`). serde_json spent about 4,300
//! instructions on each of them, most of it in the machinery around the few fields we use.
//! This scanner walks the payload once, checks every byte against the JSON grammar (the fields
//! it skips included), and borrows the strings it keeps.
//!
//! It is a shortcut, never a second opinion: anything outside the common shape — an `error`
//! field, a count that is not a plain unsigned integer, a `\u` escape, a duplicate field, a
//! field of an unexpected type, deep nesting, anything invalid — returns `None`, and the caller
//! parses the payload with serde as before, so accepted and rejected payloads, their results
//! and their error messages are exactly serde's.
//! The property test `tests::edited_payloads_agree_with_serde` holds it to that on thousands
//! of edited real payloads.

use std::borrow::Cow;

use super::chunk::{Delta, StreamEvent, Usage};

/// Deeper than this, the general parser decides (serde_json refuses past 128).
const MAX_DEPTH: u32 = 64;

/// The event of `text` when it has the common shape; `None` sends it to the general parser.
pub(super) fn chat_chunk(text: &str) -> Option<StreamEvent<'_>> {
    let mut s = Scanner { b: text.as_bytes(), i: 0, text };
    s.ws();
    let event = s.chunk()?;
    s.ws();
    (s.i == s.b.len()).then_some(event)
}

/// A string value from its first byte past the opening quote: the text and the index just past
/// its closing quote (`None` where the scanner would decline: a control character, a `\u`
/// escape, no closing quote).
pub(super) fn string_value(text: &str) -> Option<(Cow<'_, str>, usize)> {
    let mut s = Scanner { b: text.as_bytes(), i: 0, text };
    let value = s.string_body()?;
    Some((value, s.i))
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    text: &'a str,
}

/// The fields of one choice (and of its delta) that the timing reads.
#[derive(Default)]
struct Choice<'a> {
    content: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    finish_reason: Option<Cow<'a, str>>,
    has_delta: bool,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// `{ … }` at the top: `choices` read, `usage` and `error` only when absent or null.
    fn chunk(&mut self) -> Option<StreamEvent<'a>> {
        let mut choice: Option<Choice<'a>> = None;
        let mut usage: Option<Usage> = None;
        let (mut seen_choices, mut seen_usage) = (false, false);
        self.object(|s, key| {
            match key {
                b"choices" if !seen_choices => {
                    seen_choices = true;
                    choice = s.choices()?;
                }
                b"usage" if !seen_usage => {
                    seen_usage = true;
                    s.ws();
                    usage = if s.peek()? == b'n' { s.null().map(|()| None)? } else { Some(s.usage()?) };
                }
                b"choices" | b"usage" | b"error" => return None,
                _ => s.skip(0)?,
            }
            Some(())
        })?;
        let (delta, finish_reason) = match choice {
            None => (Delta::default(), None),
            Some(c) if c.has_delta => (
                Delta {
                    content: c.content.or(c.text),
                    reasoning: c.reasoning_content.or(c.reasoning),
                    tools: Vec::new(),
                },
                c.finish_reason,
            ),
            Some(c) => (Delta { content: c.text, reasoning: None, tools: Vec::new() }, c.finish_reason),
        };
        Some(StreamEvent::Chunk { delta, finish_reason, usage })
    }

    /// A usage object: the counts as unsigned integers (or null), as serde reads them.
    fn usage(&mut self) -> Option<Usage> {
        let (mut prompt, mut completion, mut cached, mut reasoning) = (None, None, None, None);
        let mut seen = [false; 4];
        self.object(|s, key| {
            let slot = match key {
                b"prompt_tokens" => 0,
                b"completion_tokens" => 1,
                b"prompt_tokens_details" => 2,
                b"completion_tokens_details" => 3,
                _ => return s.skip(1),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            match slot {
                0 => prompt = s.opt_u64()?,
                1 => completion = s.opt_u64()?,
                // serde reads both counts of either details object (and refuses either when it
                // is not a count); each object gives the one it is known for.
                2 => cached = s.details()?.0,
                _ => reasoning = s.details()?.1,
            }
            Some(())
        })?;
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: cached,
            reasoning_tokens: reasoning,
            not_a_count: None,
        })
    }

    /// `null` or a details object: its `(cached_tokens, reasoning_tokens)`.
    fn details(&mut self) -> Option<(Option<u64>, Option<u64>)> {
        self.ws();
        if self.peek()? == b'n' {
            return self.null().map(|()| (None, None));
        }
        let (mut cached, mut reasoning, mut seen) = (None, None, [false; 2]);
        self.object(|s, key| {
            let slot = match key {
                b"cached_tokens" => 0,
                b"reasoning_tokens" => 1,
                _ => return s.skip(2),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            let value = s.opt_u64()?;
            if slot == 0 {
                cached = value
            } else {
                reasoning = value
            }
            Some(())
        })?;
        Some((cached, reasoning))
    }

    /// `null` or an unsigned integer that fits in 64 bits (a sign, a fraction, an exponent or
    /// an overflow is serde's to judge).
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        self.ws();
        match self.peek()? {
            b'n' => self.null().map(|()| None),
            b'0' => {
                self.i += 1;
                self.number_end().map(|()| Some(0))
            }
            b'1'..=b'9' => {
                let mut n: u64 = 0;
                while let Some(d) = self.peek().filter(u8::is_ascii_digit) {
                    n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    self.i += 1;
                }
                self.number_end().map(|()| Some(n))
            }
            _ => None,
        }
    }

    /// `null` or an array: its first element read as a choice, the rest checked and skipped.
    fn choices(&mut self) -> Option<Option<Choice<'a>>> {
        self.ws();
        if self.peek()? == b'n' {
            return self.null().map(|()| None);
        }
        let mut first = None;
        self.array(|s, index| {
            match index {
                0 => first = Some(s.choice()?),
                _ => s.skip(1)?,
            }
            Some(())
        })?;
        Some(first)
    }

    fn choice(&mut self) -> Option<Choice<'a>> {
        let mut c = Choice::default();
        let (mut seen_delta, mut seen_text, mut seen_finish) = (false, false, false);
        self.object(|s, key| {
            match key {
                b"delta" if !seen_delta => {
                    seen_delta = true;
                    c.has_delta = true;
                    s.ws();
                    if s.peek()? == b'n' {
                        s.null()?;
                        c.has_delta = false;
                    } else {
                        s.delta(&mut c)?;
                    }
                }
                b"text" if !seen_text => {
                    seen_text = true;
                    c.text = s.opt_str()?;
                }
                b"finish_reason" if !seen_finish => {
                    seen_finish = true;
                    c.finish_reason = s.opt_str()?;
                }
                b"delta" | b"text" | b"finish_reason" => return None,
                _ => s.skip(1)?,
            }
            Some(())
        })?;
        Some(c)
    }

    fn delta(&mut self, c: &mut Choice<'a>) -> Option<()> {
        let (mut seen_content, mut seen_rc, mut seen_r) = (false, false, false);
        self.object(|s, key| {
            match key {
                b"content" if !seen_content => {
                    seen_content = true;
                    c.content = s.opt_str()?;
                }
                b"reasoning_content" if !seen_rc => {
                    seen_rc = true;
                    c.reasoning_content = s.opt_str()?;
                }
                b"reasoning" if !seen_r => {
                    seen_r = true;
                    c.reasoning = s.opt_str()?;
                }
                // A tool call's pieces (and a duplicate text field) are the general parser's.
                b"content" | b"reasoning_content" | b"reasoning" | b"tool_calls" => return None,
                _ => s.skip(2)?,
            }
            Some(())
        })
    }

    /// An object; `field` gets each key (escape-free keys only) with the scanner at its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let key = match self.string_body()? {
                Cow::Borrowed(k) => k.as_bytes(),
                Cow::Owned(_) => return None, // an escaped key: serde decides what it names
            };
            self.eat(b':')?;
            field(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array; `element` gets each element's index with the scanner at it.
    fn array(&mut self, mut element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        let mut index = 0;
        loop {
            element(self, index)?;
            index += 1;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `null` or a string.
    fn opt_str(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.ws();
        match self.peek()? {
            b'n' => self.null().map(|()| None),
            b'"' => {
                self.i += 1;
                self.string_body().map(Some)
            }
            _ => None,
        }
    }

    fn null(&mut self) -> Option<()> {
        self.ws();
        self.literal(b"null")
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(word).then(|| self.i += word.len())
    }

    /// The rest of a string after its opening quote: borrowed when it has no escapes.
    /// Control characters and `\u` escapes end the shortcut.
    fn string_body(&mut self) -> Option<Cow<'a, str>> {
        let start = self.i;
        self.i = string_stop(self.b, self.i)?;
        match self.b[self.i] {
            b'"' => {
                let s = &self.text[start..self.i];
                self.i += 1;
                Some(Cow::Borrowed(s))
            }
            b'\\' => self.escaped_string(start),
            _ => None, // a control character: invalid JSON
        }
    }

    /// A string with escapes, from its first escape at `self.i`.
    fn escaped_string(&mut self, start: usize) -> Option<Cow<'a, str>> {
        let mut out = String::with_capacity(self.i - start + 16);
        out.push_str(&self.text[start..self.i]);
        loop {
            let &c = self.b.get(self.i)?;
            match c {
                b'"' => {
                    self.i += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    let decoded = match self.b.get(self.i + 1)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        _ => return None, // `\u` (surrogates are serde's to judge) or invalid
                    };
                    out.push(decoded);
                    self.i += 2;
                }
                c if c < 0x20 => return None,
                _ => {
                    let run = self.i;
                    self.i = string_stop(self.b, self.i)?;
                    out.push_str(&self.text[run..self.i]);
                }
            }
        }
    }

    /// Check and step over any value.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.skip_string()
            }
            b'{' => self.object(|s, _| s.skip(depth + 1)),
            b'[' => self.array(|s, _| s.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A skipped string: escapes checked, nothing kept.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            self.i = string_stop(self.b, self.i)?;
            let c = self.b[self.i];
            self.i += 1;
            match c {
                b'"' => return Some(()),
                b'\\' => {
                    let &e = self.b.get(self.i)?;
                    if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                        return None;
                    }
                    self.i += 1;
                }
                _ => return None,
            }
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        self.number_end()
    }

    /// A number runs into the next token only through a separator.
    fn number_end(&self) -> Option<()> {
        match self.peek() {
            None | Some(b',' | b']' | b'}' | b' ' | b'\n' | b'\t' | b'\r') => Some(()),
            _ => None,
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }
}

/// The first byte at or after `i` that a string scan must stop at (see `NEEDS_LOOK`), eight
/// bytes at a time: in each word, a byte equal to `"` or `\\` or below 0x20 sets its top bit in
/// `stop` (a flag above a real one may be spurious, so only the lowest counts).
fn string_stop(b: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    while let Some(word) = b.get(i..).and_then(|rest| rest.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*word);
        let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
        let stop = (zero_byte(w ^ (ONES * u64::from(b'"')))
            | zero_byte(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w))
            & TOPS;
        if stop != 0 {
            return Some(i + stop.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    (i..b.len()).find(|&j| NEEDS_LOOK[usize::from(b[j])])
}

/// Bytes a string scan must stop at: the closing quote, an escape, a control character.
static NEEDS_LOOK: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

#[cfg(test)]
pub(super) mod tests {
    use super::super::chunk::parse_event_general;
    use super::*;

    /// The shortcut either declines or gives exactly what serde gives; it never accepts what
    /// serde refuses.
    pub(crate) fn agrees_with_serde(text: &str) -> bool {
        let general = parse_event_general(text);
        match chat_chunk(text) {
            None => true,
            Some(fast) => general.as_ref().is_ok_and(|g| *g == fast),
        }
    }

    const VLLM: &str = r#"{"id":"chatcmpl-b414","object":"chat.completion.chunk","created":1796084446,"model":"bench","choices":[{"index":0,"delta":{"content":" first"},"logprobs":null,"finish_reason":null}]}"#;

    #[test]
    fn the_word_scan_stops_where_the_byte_scan_does() {
        let mut bytes: Vec<u8> = (0u8..=255).collect();
        bytes.extend_from_slice("plain text é and more plain text".as_bytes());
        for stop_at in 0..bytes.len() {
            for from in 0..=stop_at.min(20) {
                let slow = (from..bytes.len()).find(|&j| NEEDS_LOOK[usize::from(bytes[j])]);
                assert_eq!(string_stop(&bytes, from), slow, "from {from}");
            }
            bytes.rotate_left(1);
        }
        assert_eq!(string_stop(b"abcdefghijklmnop", 0), None);
        assert_eq!(string_stop(b"abcdefghijklmno\"", 3), Some(15));
    }

    #[test]
    fn reads_the_common_shapes() {
        for (text, content, reasoning, finish) in [
            (VLLM, Some(" first"), None, None),
            (r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#, None, Some("hm"), None),
            (r#"{"choices":[{"delta":{"reasoning":"hm","content":null}}]}"#, None, Some("hm"), None),
            (
                r#"{"choices":[{"text":" Paris","index":0,"finish_reason":"length"}]}"#,
                Some(" Paris"),
                None,
                Some("length"),
            ),
            (r#" {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null} "#, None, None, Some("stop")),
            (r#"{"choices":[{"delta":{"content":"a\"b\\c\nd\/e"}}]}"#, Some("a\"b\\c\nd/e"), None, None),
            (r#"{"choices":[]}"#, None, None, None),
            (r#"{"choices":null,"x":[1,-2.5e+3,true,false,{"y":[]}]}"#, None, None, None),
        ] {
            let Some(StreamEvent::Chunk { delta, finish_reason, usage }) = chat_chunk(text) else {
                panic!("declined {text}")
            };
            assert_eq!(delta.content.as_deref(), content, "{text}");
            assert_eq!(delta.reasoning.as_deref(), reasoning, "{text}");
            assert_eq!((finish_reason.as_deref(), usage), (finish, None), "{text}");
            assert!(agrees_with_serde(text), "{text}");
        }
        let text = r#"{"choices":[],"usage":{"prompt_tokens":62327,"completion_tokens":0,"total_tokens":1.5,"prompt_tokens_details":{"cached_tokens":16,"reasoning_tokens":null},"completion_tokens_details":{"reasoning_tokens":18446744073709551615}}}"#;
        let Some(StreamEvent::Chunk { usage, .. }) = chat_chunk(text) else { panic!("declined {text}") };
        let expected = Usage {
            prompt_tokens: Some(62327),
            completion_tokens: Some(0),
            cached_tokens: Some(16),
            reasoning_tokens: Some(u64::MAX),
            not_a_count: None,
        };
        assert_eq!(usage, Some(expected));
        assert!(agrees_with_serde(text));
        let Some(StreamEvent::Chunk { delta, .. }) = chat_chunk(VLLM) else { panic!() };
        assert!(matches!(delta.content, Some(Cow::Borrowed(_))), "plain text is borrowed");
    }

    #[test]
    fn declines_what_it_does_not_cover_or_serde_refuses() {
        for text in [
            r#"{"choices":[],"usage":{"completion_tokens":-3}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3.0}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":1e2}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":18446744073709551616}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":"3"}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3,"completion_tokens":4}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":{"reasoning_tokens":"x"}}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":3}}"#,
            r#"{"choices":[],"usage":[]}"#,
            r#"{"error":{"message":"oom"}}"#,
            r#"{"choices":[{"delta":{"content":"\u00e9"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"delta":{"content":3}}]}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":[{"delta":"x"}]}"#,
            r#"{"x":01,"choices":[]}"#,
            r#"{"x":1.,"choices":[]}"#,
            r#"{"x":-,"choices":[]}"#,
            r#"{"x":tru,"choices":[]}"#,
            r#"{"x":"\q","choices":[]}"#,
            "{\"x\":\"a\u{1}b\",\"choices\":[]}",
            r#"{"choices":[]} x"#,
            r#"{"choices":[],}"#,
            r#"{"choices":[1 2]}"#,
            r#"{"choices":[]"#,
            r#"[[],null,null]"#,
            r#"{"ch\u006fices":[]}"#,
            "",
        ] {
            assert!(chat_chunk(text).is_none(), "accepted {text}");
        }
        let deep = format!("{{\"x\":{}{},\"choices\":[]}}", "[".repeat(100), "]".repeat(100));
        assert!(chat_chunk(&deep).is_none());
    }

    /// Every data payload of the captured and hand-written streams.
    pub(crate) fn payloads() -> Vec<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sse");
        let mut out = vec![VLLM.to_owned()];
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sse") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(text.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned));
            }
        }
        out
    }

    #[test]
    fn takes_the_captured_payloads_as_serde_does() {
        let payloads = payloads();
        let mut taken = 0;
        for p in &payloads {
            assert!(agrees_with_serde(p), "{p}");
            taken += usize::from(chat_chunk(p).is_some());
        }
        assert!(taken * 2 > payloads.len(), "the shortcut took {taken} of {}", payloads.len());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Captured payloads with bytes replaced, inserted or removed (from JSON's own
        /// alphabet, so that most edits stay near-valid): the shortcut never disagrees.
        #[test]
        fn edited_payloads_agree_with_serde(
            pick in 0usize..1000,
            edits in proptest::collection::vec((0usize..400, 0u8..3, proptest::sample::select(
                b"{}[]:,\"\\/ 0123456789-+.eEtrufalsn\nbu\x01\xc3\xa9x".to_vec()
            )), 1..4),
        ) {
            let payloads = payloads();
            let mut bytes = payloads[pick % payloads.len()].clone().into_bytes();
            for (at, op, c) in edits {
                let at = at % (bytes.len() + 1);
                match op {
                    0 if at < bytes.len() => bytes[at] = c,
                    1 => bytes.insert(at, c),
                    _ if at < bytes.len() => { bytes.remove(at); }
                    _ => {}
                }
            }
            if let Ok(text) = std::str::from_utf8(&bytes) {
                proptest::prop_assert!(agrees_with_serde(text), "{}", text);
            }
        }
    }
}
