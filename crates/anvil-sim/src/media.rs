//! Media in a generation request: images and audio read from the body the way an engine reads
//! them, counted as prompt tokens by a fixed rule, and kept as ground truth.
//!
//! Parts read (in chat `messages[].content[]`, Messages `messages[].content[]` and Responses
//! `input[].content[]`): chat `image_url` (`{"url": …}`) and `input_audio` (`{"data", "format"}`);
//! Responses `input_image` (`image_url`); Messages `image` with a `base64` source. An image is
//! a `data:` URL (or Messages' base64 source) decoded and sniffed: a JPEG's SOF marker or a
//! PNG's IHDR gives its size. Audio is base64 WAV: its `fmt ` and `data` chunks give its length.
//! A URL the simulator does not fetch (`http://…`, `audio_url`, `video_url`), or bytes that are
//! not a JPEG, PNG or WAV, is refused with 400, as an engine refuses media it cannot load.
//!
//! Tokens, Qwen2-VL's rule for images: one token per 28×28 patch, each side rounded up,
//! `ceil(w/28) · ceil(h/28)`; audio: `AUDIO_TOKENS_PER_SECOND` per second, rounded up.

use base64::Engine;
use serde_json::Value;

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
}

/// Reads every media part of `body`; an error is the message of a 400 answer.
pub(crate) fn scan(body: &Value) -> Result<MediaCount, String> {
    let mut count = MediaCount::default();
    for key in ["messages", "input"] {
        let Some(Value::Array(items)) = body.get(key) else { continue };
        for item in items {
            let Some(Value::Array(parts)) = item.get("content") else { continue };
            for part in parts {
                read_part(part, &mut count)?;
            }
        }
    }
    Ok(count)
}

fn s(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

fn read_part(part: &Value, count: &mut MediaCount) -> Result<(), String> {
    match s(part.get("type")) {
        Some("image_url") => {
            let url = s(part.get("image_url").and_then(|u| u.get("url"))).or(s(part.get("image_url")));
            image(data_url(url.ok_or("an image_url part needs image_url.url")?)?, count)
        }
        Some("input_image") => {
            image(data_url(s(part.get("image_url")).ok_or("an input_image part needs image_url")?)?, count)
        }
        Some("image") => {
            let source = part.get("source").ok_or("an image block needs a source")?;
            match s(source.get("type")) {
                Some("base64") => image(decode(s(source.get("data")).ok_or("a base64 source needs data")?)?, count),
                _ => Err("the simulator reads base64 image sources only (it fetches no URL)".into()),
            }
        }
        Some("input_audio") => {
            let audio = part.get("input_audio").ok_or("an input_audio part needs input_audio")?;
            if s(audio.get("format")) != Some("wav") {
                return Err("the simulator reads input_audio with format \"wav\" only".into());
            }
            wav(decode(s(audio.get("data")).ok_or("input_audio needs data")?)?, count)
        }
        Some(kind @ ("audio_url" | "video_url" | "input_video")) => {
            Err(format!("the simulator does not read {kind} parts (it fetches no URL and decodes no video)"))
        }
        _ => Ok(()),
    }
}

fn data_url(url: &str) -> Result<Vec<u8>, String> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Err("the simulator reads data: URLs only (it fetches no URL)".into());
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
        let c = scan(&body).unwrap();
        assert_eq!((c.images, c.audio), (1, 1));
        assert_eq!(c.tokens, 4 * 3 + 25, "ceil(100/28)·ceil(57/28) + one second");
        let url = json!({"messages": [{"content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]});
        assert!(scan(&url).is_err());
    }
}
