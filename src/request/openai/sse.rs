//! Server-sent events framing: bytes in, one `data` payload per event out.
//!
//! Written for the hot path rather than taken from an SSE crate: an event that arrives whole in
//! one read (the usual case) is handed out as a slice of that read, with no copy and no
//! allocation; only events split across reads are assembled in a buffer that is reused. Lines may
//! end in `\n`, `\r\n` or `\r` (the SSE grammar), data lines of one event are joined with `\n`,
//! comments and fields other than `data` (`event`, `id`, `retry`) are skipped, since no OpenAI
//! engine puts timing-relevant information there.

use memchr::memchr2;

/// One event may not exceed this; a server that sends more is broken, not slow.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE event exceeded {MAX_EVENT_BYTES} bytes without ending")]
    EventTooLarge,
    /// A line that is no SSE field at all. The SSE grammar would skip it, but in an LLM stream it
    /// means corruption, and skipping it would silently lose a chunk.
    #[error("malformed SSE line: {0:?}")]
    MalformedLine(String),
    /// The body starts with gzip's magic bytes: compressed on the way (by the server or a
    /// proxy) without a `Content-Encoding` header to say so.
    #[error(
        "the stream is gzip-compressed (it starts with gzip's magic bytes 1f 8b) without a Content-Encoding header: the server or a proxy compressed it; turn compression off for this route"
    )]
    Compressed,
}

/// Incremental decoder; keep one per response.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// An incomplete line carried over from earlier reads.
    partial: Vec<u8>,
    /// The data of an event whose lines span reads.
    data: Vec<u8>,
    has_data: bool,
    /// The last read ended in `\r`; a `\n` starting the next read belongs to that line ending.
    after_cr: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one read. `on_data` gets each completed event's data; its error stops decoding.
    pub fn feed<E>(&mut self, mut bytes: &[u8], mut on_data: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E>
    where
        E: From<SseError>,
    {
        if self.after_cr {
            self.after_cr = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        if !self.partial.is_empty() {
            // Finish the carried line first; it is the only copied path. Only the new bytes are
            // searched, so a huge line arriving in many reads costs linear time.
            let Some(end) = memchr2(b'\n', b'\r', bytes) else {
                if self.partial.len() + bytes.len() > MAX_EVENT_BYTES {
                    return Err(SseError::EventTooLarge.into());
                }
                self.partial.extend_from_slice(bytes);
                return Ok(());
            };
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&bytes[..end]);
            bytes = self.skip_terminator(bytes, end);
            self.line_owned(&line, &mut on_data)?;
            line.clear();
            self.partial = line; // keep the allocation
        }
        self.feed_lines(bytes, &mut on_data)
    }

    /// End of the stream: an event not closed by a blank line is still delivered, since some
    /// servers end the body right after `data: [DONE]`.
    pub fn finish<E>(&mut self, mut on_data: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E>
    where
        E: From<SseError>,
    {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line_owned(&line, &mut on_data)?;
        }
        self.dispatch(&mut on_data)
    }

    /// Bytes held for an unfinished event.
    pub fn buffered(&self) -> usize {
        self.partial.len() + self.data.len()
    }

    fn feed_lines<E>(&mut self, mut bytes: &[u8], on_data: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E>
    where
        E: From<SseError>,
    {
        // `borrowed` is the data of the current event while it is one line inside this read.
        let mut borrowed: Option<&[u8]> = None;
        while let Some(end) = line_end(bytes) {
            let line = &bytes[..end];
            bytes = self.skip_terminator(bytes, end);
            if line.is_empty() {
                match borrowed.take() {
                    Some(data) => on_data(data)?,
                    None => self.dispatch(on_data)?,
                }
                continue;
            }
            let Some(value) = data_value(line)? else { continue };
            if !self.has_data && borrowed.is_none() {
                borrowed = Some(value);
            } else {
                if let Some(first) = borrowed.take() {
                    self.data.extend_from_slice(first);
                    self.has_data = true;
                }
                self.append_data(value)?;
            }
        }
        if let Some(first) = borrowed {
            self.data.extend_from_slice(first);
            self.has_data = true;
        }
        if !bytes.is_empty() {
            if self.data.len() + bytes.len() > MAX_EVENT_BYTES {
                return Err(SseError::EventTooLarge.into());
            }
            self.partial.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn line_owned<E>(&mut self, line: &[u8], on_data: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E>
    where
        E: From<SseError>,
    {
        if line.is_empty() {
            return self.dispatch(on_data);
        }
        if let Some(value) = data_value(line)? {
            self.append_data(value)?;
        }
        Ok(())
    }

    fn append_data(&mut self, value: &[u8]) -> Result<(), SseError> {
        if self.has_data {
            self.data.push(b'\n');
        }
        if self.data.len() + value.len() > MAX_EVENT_BYTES {
            return Err(SseError::EventTooLarge);
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
        Ok(())
    }

    fn dispatch<E>(&mut self, on_data: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        if self.has_data {
            self.has_data = false;
            let result = on_data(&self.data);
            self.data.clear();
            result?;
        }
        Ok(())
    }

    /// Step over the line ending at `end` (`\n`, `\r\n` or `\r`).
    fn skip_terminator<'b>(&mut self, bytes: &'b [u8], end: usize) -> &'b [u8] {
        if bytes[end] == b'\r' {
            match bytes.get(end + 1) {
                Some(b'\n') => return &bytes[end + 2..],
                None => self.after_cr = true,
                Some(_) => {}
            }
        }
        &bytes[end + 1..]
    }
}

/// Where the first line in `bytes` ends. The blank line that ends an event is found without a
/// search, and nothing is searched once a read is used up: most reads are one event, and each
/// search has a fixed cost well above a byte comparison.
fn line_end(bytes: &[u8]) -> Option<usize> {
    match bytes.first()? {
        b'\n' | b'\r' => Some(0),
        _ => memchr2(b'\n', b'\r', bytes),
    }
}

/// The value of a `data` line (one leading space removed), `None` for the other SSE fields and
/// comments, an error for a line that is no SSE field.
fn data_value(line: &[u8]) -> Result<Option<&[u8]>, SseError> {
    // Nearly every line: no search for the colon.
    if let Some(value) = line.strip_prefix(b"data:") {
        return Ok(Some(value.strip_prefix(b" ").unwrap_or(value)));
    }
    if line[0] == b':' {
        return Ok(None); // comment, e.g. keep-alive pings
    }
    let (field, value) = match memchr::memchr(b':', line) {
        Some(colon) => (&line[..colon], &line[colon + 1..]),
        None => (line, &line[line.len()..]),
    };
    match field {
        b"data" => Ok(Some(value.strip_prefix(b" ").unwrap_or(value))),
        b"event" | b"id" | b"retry" => Ok(None),
        _ if line.starts_with(&[0x1f, 0x8b]) => Err(SseError::Compressed),
        _ => {
            let shown = String::from_utf8_lossy(&line[..line.len().min(40)]).into_owned();
            Err(SseError::MalformedLine(shown))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let mut push = |data: &[u8]| -> Result<(), SseError> {
            out.push(String::from_utf8_lossy(data).into_owned());
            Ok(())
        };
        for chunk in input.chunks(piece.max(1)) {
            d.feed(chunk, &mut push).unwrap();
        }
        d.finish(&mut push).unwrap();
        out
    }

    #[test]
    fn splits_events_whatever_the_read_boundaries() {
        let input = b"data: {\"a\":1}\n\n: ping\n\ndata: two\r\n\r\nevent: x\ndata: l1\ndata: l2\n\ndata:nospace\r\rdata: [DONE]\n\n";
        let want = vec!["{\"a\":1}", "two", "l1\nl2", "nospace", "[DONE]"];
        for piece in [1, 2, 3, 5, 7, 64, input.len()] {
            assert_eq!(decode_in_pieces(input, piece), want, "piece size {piece}");
        }
    }

    #[test]
    fn delivers_an_unterminated_last_event() {
        assert_eq!(decode_in_pieces(b"data: a\n\ndata: [DONE]", 4), vec!["a", "[DONE]"]);
        assert_eq!(decode_in_pieces(b"data: a\n\ndata: [DONE]\n", 100), vec!["a", "[DONE]"]);
    }

    #[test]
    fn refuses_a_line_that_is_no_field() {
        let mut d = SseDecoder::new();
        let r = d.feed(b"data: a\n\ndat {\"x\":1}\n\n", |_| Ok::<(), SseError>(()));
        assert!(matches!(r, Err(SseError::MalformedLine(_))));
        let mut d = SseDecoder::new();
        let gzip = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\x56";
        let r = d.feed(gzip, |_| Ok::<(), SseError>(())).and_then(|()| d.finish(|_| Ok::<(), SseError>(())));
        assert_eq!(r, Err(SseError::Compressed));
    }

    #[test]
    fn refuses_an_endless_event() {
        let mut d = SseDecoder::new();
        let big = vec![b'x'; 1024 * 1024];
        let mut r = d.feed(b"data: ", |_| Ok::<(), SseError>(()));
        for _ in 0..17 {
            r = r.and_then(|_| d.feed(&big, |_| Ok::<(), SseError>(())));
        }
        assert_eq!(r, Err(SseError::EventTooLarge));
    }

    #[test]
    fn fixture_bytes_decode_to_their_events() {
        let input = include_bytes!("../../../tests/fixtures/sse/llamacpp-chat-usage.sse");
        let whole = decode_in_pieces(input, input.len());
        assert_eq!(whole.last().map(String::as_str), Some("[DONE]"));
        assert!(whole[0].contains("\"role\":\"assistant\""));
        for piece in [1, 13, 100] {
            assert_eq!(decode_in_pieces(input, piece), whole);
        }
    }
}
