//! Media in a generation request: images and audio read from the body the way an engine reads
//! them, counted as prompt tokens by a fixed rule, and kept as ground truth.
//!
//! Parts read (in chat `messages[].content[]`, Messages `messages[].content[]` and Responses
//! `input[].content[]`): chat `image_url` (`{"url": …}`) and `input_audio` (`{"data", "format"}`);
//! Responses `input_image` (`image_url`); Messages `image` with a `base64` source. An image is
//! a `data:` URL (or Messages' base64 source) decoded and sniffed: a JPEG's SOF marker or a
//! PNG's IHDR gives its size. Audio is base64 WAV: its `fmt ` and `data` chunks give its length.
//! An `http://` URL (chat `image_url` and vLLM's `audio_url`, Responses `input_image`, Messages'
//! `url` source) is fetched first, as an engine fetches from an object store (`fetch_urls`:
//! plain HTTP/1.1, at most `MAX_ITEM_BYTES` each, within `FETCH_TIMEOUT`). A URL it cannot
//! fetch, a `video_url`, or bytes that are not a JPEG, PNG or WAV, is refused with 400, as an
//! engine refuses media it cannot load.
//!
//! Tokens, Qwen2-VL's rule for images: one token per 28×28 patch, each side rounded up,
//! `ceil(w/28) · ceil(h/28)`; audio: `AUDIO_TOKENS_PER_SECOND` per second, rounded up.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Files fetched for one request, by URL.
pub(crate) type Fetched = HashMap<String, Vec<u8>>;

/// The longest one fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// An image token covers a square of this many pixels a side.
pub const PATCH: u64 = 28;
/// Audio tokens per second of sound.
pub const AUDIO_TOKENS_PER_SECOND: f64 = 25.0;
/// Largest decoded media item accepted, in bytes.
pub const MAX_ITEM_BYTES: usize = 64 << 20;

/// The media of one request.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MediaCount {
    pub images: u64,
    pub audio: u64,
    pub tokens: u64,
    /// Decoded bytes of the media files.
    pub bytes: u64,
    /// Bytes fetched over HTTP (files served by URL).
    pub fetched: u64,
}

/// Reads every media part of `body`; an error is the message of a 400 answer.
pub(crate) fn scan(body: &Value, fetched: &Fetched) -> Result<MediaCount, String> {
    let mut count = MediaCount { fetched: fetched.values().map(|f| f.len() as u64).sum(), ..MediaCount::default() };
    for key in ["messages", "input"] {
        let Some(Value::Array(items)) = body.get(key) else { continue };
        for item in items {
            let Some(Value::Array(parts)) = item.get("content") else { continue };
            for part in parts {
                read_part(part, fetched, &mut count)?;
            }
        }
    }
    Ok(count)
}

fn s(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

/// Every `http://` URL a media part of `body` names.
fn urls(body: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    for key in ["messages", "input"] {
        let Some(Value::Array(items)) = body.get(key) else { continue };
        for part in items.iter().filter_map(|i| i.get("content")).filter_map(Value::as_array).flatten() {
            let url = match s(part.get("type")) {
                Some("image_url") => s(part.get("image_url").and_then(|u| u.get("url"))),
                Some("audio_url") => s(part.get("audio_url").and_then(|u| u.get("url"))),
                Some("input_image") => s(part.get("image_url")),
                Some("image") => s(part.get("source").and_then(|u| u.get("url"))),
                _ => None,
            };
            out.extend(url.filter(|u| u.starts_with("http://")));
        }
    }
    out
}

/// Fetches every `http://` media URL of `body`; an error is the message of a 400 answer.
pub(crate) async fn fetch_urls(body: &Value) -> Result<Fetched, String> {
    let mut out = Fetched::new();
    for url in urls(body) {
        if out.contains_key(url) {
            continue;
        }
        let bytes = tokio::time::timeout(FETCH_TIMEOUT, get(url))
            .await
            .map_err(|_| format!("fetching {url} took longer than {FETCH_TIMEOUT:?}"))??;
        out.insert(url.to_string(), bytes);
    }
    Ok(out)
}

/// One plain HTTP/1.1 GET, the body by `Content-Length` or to the connection's close.
async fn get(url: &str) -> Result<Vec<u8>, String> {
    let fail = |e: std::io::Error| format!("could not fetch {url}: {e}");
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs are fetched")?;
    let (authority, path) = rest.split_once('/').map_or((rest, String::from("/")), |(a, p)| (a, format!("/{p}")));
    let mut stream = tokio::net::TcpStream::connect(authority).await.map_err(fail)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(fail)?;
    let mut raw = Vec::new();
    stream.take(MAX_ITEM_BYTES as u64 + 65_536).read_to_end(&mut raw).await.map_err(fail)?;
    let end = memchr::memmem::find(&raw, b"\r\n\r\n").ok_or_else(|| format!("{url}: no HTTP answer"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") && !head.starts_with("http/1.0 200") {
        return Err(format!("{url}: {}", head.lines().next().unwrap_or("no status")));
    }
    if head.contains("transfer-encoding: chunked") {
        return Err(format!("{url}: a chunked answer (the simulator reads Content-Length bodies)"));
    }
    let body = raw.split_off(end + 4);
    if body.len() > MAX_ITEM_BYTES {
        return Err(format!("{url}: larger than {MAX_ITEM_BYTES} bytes"));
    }
    Ok(body)
}

/// A `data:` URL decoded, or a fetched `http://` URL's bytes.
fn load(url: &str, fetched: &Fetched) -> Result<Vec<u8>, String> {
    if url.starts_with("http://") {
        return fetched.get(url).cloned().ok_or_else(|| format!("{url} was not fetched"));
    }
    data_url(url)
}

fn read_part(part: &Value, fetched: &Fetched, count: &mut MediaCount) -> Result<(), String> {
    match s(part.get("type")) {
        Some("image_url") => {
            let url = s(part.get("image_url").and_then(|u| u.get("url"))).or(s(part.get("image_url")));
            image(load(url.ok_or("an image_url part needs image_url.url")?, fetched)?, count)
        }
        Some("input_image") => {
            image(load(s(part.get("image_url")).ok_or("an input_image part needs image_url")?, fetched)?, count)
        }
        Some("audio_url") => {
            let url =
                s(part.get("audio_url").and_then(|u| u.get("url"))).ok_or("an audio_url part needs audio_url.url")?;
            wav(load(url, fetched)?, count)
        }
        Some("image") => {
            let source = part.get("source").ok_or("an image block needs a source")?;
            match s(source.get("type")) {
                Some("base64") => image(decode(s(source.get("data")).ok_or("a base64 source needs data")?)?, count),
                Some("url") => image(load(s(source.get("url")).ok_or("a url source needs url")?, fetched)?, count),
                _ => Err("an image source must be base64 or url".into()),
            }
        }
        Some("input_audio") => {
            let audio = part.get("input_audio").ok_or("an input_audio part needs input_audio")?;
            if s(audio.get("format")) != Some("wav") {
                return Err("the simulator reads input_audio with format \"wav\" only".into());
            }
            wav(decode(s(audio.get("data")).ok_or("input_audio needs data")?)?, count)
        }
        Some(kind @ ("video_url" | "input_video")) => {
            Err(format!("the simulator does not read {kind} parts (it decodes no video)"))
        }
        _ => Ok(()),
    }
}

fn data_url(url: &str) -> Result<Vec<u8>, String> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Err("media URLs must be data: or http:// URLs".into());
    };
    let (_, data) = rest.split_once(";base64,").ok_or("a data: URL must be base64 (\";base64,\")")?;
    decode(data)
}

fn decode(data: &str) -> Result<Vec<u8>, String> {
    if data.len() / 4 * 3 > MAX_ITEM_BYTES {
        return Err(format!("a media item is larger than {MAX_ITEM_BYTES} bytes"));
    }
    base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("media data is not base64: {e}"))
}

fn image(bytes: Vec<u8>, count: &mut MediaCount) -> Result<(), String> {
    let (w, h) = image_size(&bytes).ok_or("image data is neither a JPEG nor a PNG the simulator can read")?;
    count.images += 1;
    count.tokens += image_tokens(w, h);
    count.bytes += bytes.len() as u64;
    Ok(())
}

fn wav(bytes: Vec<u8>, count: &mut MediaCount) -> Result<(), String> {
    let seconds = wav_seconds(&bytes).ok_or("audio data is not a PCM WAV file")?;
    count.audio += 1;
    count.tokens += audio_tokens(seconds);
    count.bytes += bytes.len() as u64;
    Ok(())
}

/// `ceil(w/28) · ceil(h/28)`.
pub fn image_tokens(w: u32, h: u32) -> u64 {
    u64::from(w).div_ceil(PATCH) * u64::from(h).div_ceil(PATCH)
}

/// `ceil(seconds · 25)`.
pub fn audio_tokens(seconds: f64) -> u64 {
    (seconds * AUDIO_TOKENS_PER_SECOND).ceil() as u64
}

/// Width and height from a PNG's IHDR or a JPEG's first SOF marker.
pub fn image_size(b: &[u8]) -> Option<(u32, u32)> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") && b.get(12..16) == Some(b"IHDR") {
        let w = u32::from_be_bytes(b.get(16..20)?.try_into().ok()?);
        let h = u32::from_be_bytes(b.get(20..24)?.try_into().ok()?);
        return Some((w, h));
    }
    if !b.starts_with(&[0xff, 0xd8]) {
        return None;
    }
    let mut i = 2;
    while i + 4 <= b.len() {
        if b[i] != 0xff {
            return None;
        }
        let marker = b[i + 1];
        if marker == 0xff {
            i += 1;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        let sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
        if sof {
            let h = u16::from_be_bytes([*b.get(i + 5)?, *b.get(i + 6)?]);
            let w = u16::from_be_bytes([*b.get(i + 7)?, *b.get(i + 8)?]);
            return Some((u32::from(w), u32::from(h)));
        }
        i += 2 + len;
    }
    None
}

/// Seconds of a PCM WAV file: its `data` chunk over the byte rate of its `fmt ` chunk.
pub fn wav_seconds(b: &[u8]) -> Option<f64> {
    if b.get(0..4)? != b"RIFF" || b.get(8..12)? != b"WAVE" {
        return None;
    }
    let (mut i, mut byte_rate, mut data) = (12, None, None);
    while i + 8 <= b.len() {
        let id = &b[i..i + 4];
        let len = u32::from_le_bytes(b[i + 4..i + 8].try_into().ok()?) as usize;
        if id == b"fmt " {
            byte_rate = Some(u32::from_le_bytes(b.get(i + 16..i + 20)?.try_into().ok()?));
        } else if id == b"data" {
            data = Some(len.min(b.len() - i - 8));
            break;
        }
        i += 8 + len + (len & 1);
    }
    let rate = byte_rate.filter(|r| *r > 0)?;
    Some(data? as f64 / f64::from(rate))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_png_and_wav_parts_and_refuses_urls() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&100u32.to_be_bytes());
        png.extend_from_slice(&57u32.to_be_bytes());
        let mut wav = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data".to_vec();
        wav.extend_from_slice(&32000u32.to_le_bytes());
        wav.extend(std::iter::repeat_n(0u8, 32000));
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png))}},
            {"type": "input_audio", "input_audio": {"data": b64(&wav), "format": "wav"}},
        ]}]});
        let c = scan(&body, &Fetched::new()).unwrap();
        assert_eq!((c.images, c.audio), (1, 1));
        assert_eq!(c.tokens, 4 * 3 + 25, "ceil(100/28)·ceil(57/28) + one second");
        let url = json!({"messages": [{"content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]});
        assert!(scan(&url, &Fetched::new()).is_err(), "not fetched");
    }
}
