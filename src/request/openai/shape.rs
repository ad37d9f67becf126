//! A stream's last text chunk, split around its text: the next one is read by comparing.
//!
//! Within one stream every text chunk repeats the one before it except for the text (the id,
//! the model, the created time and the empty fields are the stream's). A payload that starts
//! with the bytes before the last chunk's text and ends with the bytes after it is read by
//! checking only what lies between: one string body (UTF-8, escapes checked) whose closing
//! quote is exactly the first byte of the known end.
//!
//! That is exact, not a guess. A JSON parser's state after a run of bytes depends only on
//! those bytes, and after a string value it does not depend on what the string held. The
//! payload is therefore read as the learned one was, step for step, with another string in
//! the same place: same validity, same fields, other text. Anything that differs elsewhere
//! (another shape, a finish reason, a usage object, an `error`) takes the full reader.
//! The property test `tests::edited_payloads_read_as_without_a_shape` holds it to that.

use std::borrow::Cow;
use std::ops::Range;

use super::chunk::{Delta, StreamEvent};

/// The last text chunk of a stream, learned from a payload the full reader accepted.
#[derive(Debug, Default, Clone)]
pub struct ChunkShape {
    /// That payload; empty when nothing is learned.
    payload: Vec<u8>,
    /// Its text, quotes excluded.
    text: Range<usize>,
    /// The text was reasoning (not visible content).
    reasoning: bool,
}

impl ChunkShape {
    /// `data`'s event when it is the learned chunk with other text; `None` otherwise.
    pub(super) fn read<'a>(&self, data: &'a [u8]) -> Option<StreamEvent<'a>> {
        if self.payload.is_empty() {
            return None;
        }
        let (head, tail) = (&self.payload[..self.text.start], &self.payload[self.text.end..]);
        if data.len() < head.len() + tail.len() || !data.starts_with(head) || !data.ends_with(tail) {
            return None;
        }
        // `head` ends at an opening quote and `tail` starts at a closing one, both ASCII and
        // both checked when learned: the payload is UTF-8 when the text and that quote are.
        let text_and_quote = std::str::from_utf8(&data[head.len()..=data.len() - tail.len()]).ok()?;
        let (text, past_quote) = super::scan::string_value(text_and_quote)?;
        if past_quote != text_and_quote.len() {
            return None; // the string ended inside the text
        }
        let delta = if self.reasoning {
            Delta { content: None, reasoning: Some(text), tools: Vec::new() }
        } else {
            Delta { content: Some(text), reasoning: None, tools: Vec::new() }
        };
        Some(StreamEvent::Chunk { delta, finish_reason: None, usage: None })
    }

    /// Learn `data`, whose event is `event`, when it is a plain text chunk: one text, taken
    /// from the payload as it stands (no escapes), no finish reason, no usage.
    pub(super) fn learn(&mut self, data: &[u8], event: &StreamEvent<'_>) {
        let StreamEvent::Chunk { delta, finish_reason: None, usage: None } = event else { return };
        if !delta.tools.is_empty() {
            return; // a tool call's chunk is never the stream's text shape
        }
        let (text, reasoning) = match (&delta.content, &delta.reasoning) {
            (Some(Cow::Borrowed(t)), None) => (*t, false),
            (None, Some(Cow::Borrowed(t))) => (*t, true),
            _ => return,
        };
        // Where the text lies in the payload: it borrows from it, between quotes (checked all
        // the same, since a shape around anything else would mean nothing).
        let start = (text.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
        let Some(end) = start.checked_add(text.len()) else { return };
        if start == 0 || end >= data.len() || data[start - 1] != b'"' || data[end] != b'"' {
            return;
        }
        self.payload.clear();
        self.payload.extend_from_slice(data);
        self.text = start..end;
        self.reasoning = reasoning;
    }
}

#[cfg(test)]
mod tests {
    use super::super::chunk::parse_event;
    use super::*;

    const PLAIN: &str = r#"{"id":"chatcmpl-b414","object":"chat.completion.chunk","created":1796084446,"model":"bench","choices":[{"index":0,"delta":{"content":" first"},"logprobs":null,"finish_reason":null}]}"#;

    /// The shape learned from `payload` (none when it does not parse).
    fn learned(payload: &str) -> ChunkShape {
        let mut shape = ChunkShape::default();
        if let Ok(event) = parse_event(payload.as_bytes()) {
            shape.learn(payload.as_bytes(), &event);
        }
        shape
    }

    /// With the shape or without it, a payload reads the same (an error included).
    fn reads_as_without(shape: &ChunkShape, data: &[u8]) -> bool {
        match shape.read(data) {
            None => true,
            Some(fast) => parse_event(data).is_ok_and(|full| full == fast),
        }
    }

    #[test]
    fn reads_the_next_chunk_of_the_stream() {
        let shape = learned(PLAIN);
        for (text, expected) in [
            (" second", " second"),
            ("", ""),
            ("é and \u{1F600}", "é and \u{1F600}"),
            (r#"a\"b\\c\nd\/"#, "a\"b\\c\nd/"),
        ] {
            let next = PLAIN.replace(" first", text);
            let Some(StreamEvent::Chunk { delta, finish_reason: None, usage: None }) = shape.read(next.as_bytes())
            else {
                panic!("not read: {next}")
            };
            assert_eq!((delta.content.as_deref(), delta.reasoning), (Some(expected), None));
            assert!(reads_as_without(&shape, next.as_bytes()));
        }
        let reasoning = learned(&PLAIN.replace("content", "reasoning_content"));
        let next = PLAIN.replace("content", "reasoning_content").replace(" first", "hm");
        let Some(StreamEvent::Chunk { delta, .. }) = reasoning.read(next.as_bytes()) else { panic!() };
        assert_eq!((delta.content, delta.reasoning.as_deref()), (None, Some("hm")));
    }

    #[test]
    fn leaves_everything_else_to_the_full_reader() {
        let shape = learned(PLAIN);
        for text in [
            r#"a"b"#,             // the string ends early
            r#"a\"#,              // the closing quote is escaped
            "a\u{1}b",            // a control character
            r#"\u00e9"#,          // `\u` is the full reader's
            r#"x","content":"y"#, // a second field in the gap
        ] {
            let next = PLAIN.replace(" first", text);
            assert!(shape.read(next.as_bytes()).is_none(), "read {next}");
        }
        for other in [
            PLAIN.replace("\"finish_reason\":null", "\"finish_reason\":\"stop\""),
            PLAIN.replace("1796084446", "1796084447"),
            PLAIN.replace("}]}", "}],\"usage\":null}"),
            "[DONE]".to_owned(),
            String::new(),
        ] {
            assert!(shape.read(other.as_bytes()).is_none(), "read {other}");
        }
        let mut invalid = PLAIN.replace(" first", "ab").into_bytes();
        let at = invalid.windows(2).position(|w| w == b"ab").unwrap();
        invalid[at] = 0xff;
        assert!(shape.read(&invalid).is_none());
        assert!(ChunkShape::default().read(PLAIN.as_bytes()).is_none(), "nothing learned");
    }

    #[test]
    fn learns_only_plain_text_chunks() {
        for (payload, learns) in [
            (PLAIN.to_owned(), true),
            (PLAIN.replace(" first", r#"a\nb"#), false),
            (PLAIN.replace("\"finish_reason\":null", "\"finish_reason\":\"stop\""), false),
            (PLAIN.replace("}]}", "}],\"usage\":{\"completion_tokens\":3}}"), false),
            (PLAIN.replace("{\"content\":\" first\"}", "{\"content\":\"a\",\"reasoning\":\"b\"}"), false),
            (PLAIN.replace("\" first\"", "null"), false),
        ] {
            assert_eq!(!learned(&payload).payload.is_empty(), learns, "{payload}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// A shape learned from a captured payload, then that payload edited (from JSON's own
        /// alphabet, near or inside its text most of the time): it reads as the full reader does.
        #[test]
        fn edited_payloads_read_as_without_a_shape(
            pick in 0usize..1000,
            near_text in proptest::bool::weighted(0.8),
            edits in proptest::collection::vec((0usize..400, 0u8..3, proptest::sample::select(
                b"{}[]:,\"\\/ 0123456789-+.eEtrufalsn\nbu\x01\xc3\xa9\xffx".to_vec()
            )), 1..4),
        ) {
            let shaped: Vec<(String, ChunkShape)> = super::super::scan::tests::payloads()
                .into_iter()
                .map(|p| { let shape = learned(&p); (p, shape) })
                .filter(|(_, s)| !s.payload.is_empty())
                .collect();
            let (payload, shape) = &shaped[pick % shaped.len()];
            let mut bytes = payload.clone().into_bytes();
            for (at, op, c) in edits {
                let at = if near_text {
                    let span = shape.text.start.saturating_sub(2)..shape.text.end + 3;
                    span.start + at % (span.end - span.start)
                } else {
                    at
                } % (bytes.len() + 1);
                match op {
                    0 if at < bytes.len() => bytes[at] = c,
                    1 => bytes.insert(at, c),
                    _ if at < bytes.len() => { bytes.remove(at); }
                    _ => {}
                }
            }
            proptest::prop_assert!(reads_as_without(shape, &bytes), "{}", String::from_utf8_lossy(&bytes));
        }
    }
}
