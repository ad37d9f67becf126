//! Media in request bodies: each API's spelling of an image or audio content part, built once
//! per encoded item, and the splice that turns a text prompt into content parts.
//!
//! Spellings (media.md cites the references):
//! - chat: `{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,…"}}` and
//!   `{"type":"input_audio","input_audio":{"data":"…","format":"wav"}}`;
//! - Responses: `{"type":"input_image","image_url":"data:…"}` beside `input_text`;
//! - Messages: `{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"…"}}`.
//!
//! A part is a complete JSON object in bytes (`Bytes`, shared by every request that carries the
//! item). The body is serialised as usual with the prompt as one string; `splice` then finds
//! that string (the first `content` key for chat and Messages, `input` for Responses) by a
//! scan that follows JSON strings, and copies the body around it with the parts added: a few
//! copies of bytes, no base64 and no JSON encoding per request.

use bytes::Bytes;

use crate::plan::scenario::Api;

/// An image's content part for `api`, from its base64 (`data`) and MIME type.
pub fn image_part(api: Api, mime: &str, data: &str) -> Bytes {
    let s = match api {
        Api::Responses => format!(r#"{{"type":"input_image","image_url":"data:{mime};base64,{data}"}}"#),
        Api::Messages => {
            format!(r#"{{"type":"image","source":{{"type":"base64","media_type":"{mime}","data":"{data}"}}}}"#)
        }
        _ => format!(r#"{{"type":"image_url","image_url":{{"url":"data:{mime};base64,{data}"}}}}"#),
    };
    Bytes::from(s)
}

/// A WAV clip's content part (chat only: validation refuses audio elsewhere).
pub fn audio_part(data: &str) -> Bytes {
    Bytes::from(format!(r#"{{"type":"input_audio","input_audio":{{"data":"{data}","format":"wav"}}}}"#))
}

/// An image's content part for `api` that names its `url` (an engine fetches it).
pub fn image_url_part(api: Api, url: &str) -> Bytes {
    let url = serde_json::Value::from(url).to_string();
    let s = match api {
        Api::Responses => format!(r#"{{"type":"input_image","image_url":{url}}}"#),
        Api::Messages => format!(r#"{{"type":"image","source":{{"type":"url","url":{url}}}}}"#),
        _ => format!(r#"{{"type":"image_url","image_url":{{"url":{url}}}}}"#),
    };
    Bytes::from(s)
}

/// An audio clip's part that names its `url` (vLLM's `audio_url`; chat only).
pub fn audio_url_part(url: &str) -> Bytes {
    Bytes::from(format!(r#"{{"type":"audio_url","audio_url":{{"url":{}}}}}"#, serde_json::Value::from(url)))
}

/// `body` with its prompt string turned into a text part followed by `parts`. `None` when the
/// body has no prompt string where `api` puts it (then it is sent as it is).
pub fn splice(api: Api, body: &[u8], parts: &[&Bytes]) -> Option<Vec<u8>> {
    if parts.is_empty() {
        return None;
    }
    let key: &[u8] = if api == Api::Responses { b"input" } else { b"content" };
    let (start, end) = find_string_value(body, key)?;
    let text = &body[start..end];
    let (open, text_type, close): (&[u8], &[u8], &[u8]) = match api {
        Api::Responses => (b"[{\"role\":\"user\",\"content\":[", b"input_text", b"]}]"),
        _ => (b"[", b"text", b"]"),
    };
    let extra: usize = parts.iter().map(|p| p.len() + 1).sum();
    let mut out = Vec::with_capacity(body.len() + extra + 64);
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(open);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(text_type);
    out.extend_from_slice(b"\",\"text\":");
    out.extend_from_slice(text);
    out.push(b'}');
    for p in parts {
        out.push(b',');
        out.extend_from_slice(p);
    }
    out.extend_from_slice(close);
    out.extend_from_slice(&body[end..]);
    Some(out)
}

/// `body` with its last `content` string (the last message of a dataset's conversation) turned
/// into a text part followed by `parts`; a body without one (a Responses prompt as one
/// `input` string) as `splice` does it.
pub fn splice_last(api: Api, body: &[u8], parts: &[&Bytes]) -> Option<Vec<u8>> {
    let Some((start, end)) = find_string_value_from(body, b"content", true) else { return splice(api, body, parts) };
    let text_type: &[u8] = if api == Api::Responses { b"input_text" } else { b"text" };
    let extra: usize = parts.iter().map(|p| p.len() + 1).sum();
    let mut out = Vec::with_capacity(body.len() + extra + 32);
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(b"[{\"type\":\"");
    out.extend_from_slice(text_type);
    out.extend_from_slice(b"\",\"text\":");
    out.extend_from_slice(&body[start..end]);
    out.push(b'}');
    for p in parts {
        out.push(b',');
        out.extend_from_slice(p);
    }
    out.push(b']');
    out.extend_from_slice(&body[end..]);
    Some(out)
}

/// The byte range (quotes included) of the string value of the first object key `key` in
/// compact JSON. Strings are followed so that text inside a value never matches.
fn find_string_value(b: &[u8], key: &[u8]) -> Option<(usize, usize)> {
    find_string_value_from(b, key, false)
}

/// As `find_string_value`, the last such value when `last`.
fn find_string_value_from(b: &[u8], key: &[u8], last: bool) -> Option<(usize, usize)> {
    let mut found = None;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let close = string_end(b, i)?;
        if &b[i + 1..close] == key && b.get(close + 1) == Some(&b':') && b.get(close + 2) == Some(&b'"') {
            let value_end = string_end(b, close + 2)?;
            found = Some((close + 2, value_end + 1));
            if !last {
                return found;
            }
            i = value_end + 1;
            continue;
        }
        i = close + 1;
    }
    found
}

/// The index of the quote closing the string opened at `open`.
fn string_end(b: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[at] == b'"' {
            return Some(at);
        }
        i = at + 2;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn chat_messages_and_responses_bodies_get_their_parts() {
        let part = image_part(Api::Chat, "image/png", "QUJD");
        let body =
            br#"{"model":"m \"content\":\"x","messages":[{"role":"user","content":"say \"hi\" \\"}],"stream":true}"#;
        let out: Value = serde_json::from_slice(&splice(Api::Chat, body, &[&part, &part]).unwrap()).unwrap();
        let content = &out["messages"][0]["content"];
        assert_eq!(content[0]["text"], "say \"hi\" \\");
        assert_eq!(content[1]["image_url"]["url"], "data:image/png;base64,QUJD");
        assert_eq!(content.as_array().unwrap().len(), 3);
        assert_eq!(out["model"], "m \"content\":\"x");

        let part = image_part(Api::Messages, "image/jpeg", "QUJD");
        let body = br#"{"max_tokens":5,"messages":[{"content":"p","role":"user"}],"model":"m"}"#;
        let out: Value = serde_json::from_slice(&splice(Api::Messages, body, &[&part]).unwrap()).unwrap();
        assert_eq!(out["messages"][0]["content"][1]["source"]["media_type"], "image/jpeg");

        let part = image_part(Api::Responses, "image/jpeg", "QUJD");
        let body = br#"{"input":"p","model":"m"}"#;
        let out: Value = serde_json::from_slice(&splice(Api::Responses, body, &[&part]).unwrap()).unwrap();
        assert_eq!(out["input"][0]["content"][0]["type"], "input_text");
        assert_eq!(out["input"][0]["content"][1]["image_url"], "data:image/jpeg;base64,QUJD");

        let audio = audio_part("UklG");
        let out: Value =
            serde_json::from_slice(&splice(Api::Chat, br#"{"messages":[{"content":"a"}]}"#, &[&audio]).unwrap())
                .unwrap();
        assert_eq!(out["messages"][0]["content"][1]["input_audio"]["format"], "wav");

        // A dataset's conversation: the image joins its last message.
        let part = image_part(Api::Chat, "image/png", "QUJD");
        let body = br#"{"messages":[{"content":"sys","role":"system"},{"content":"look","role":"user"}]}"#;
        let out: Value = serde_json::from_slice(&splice_last(Api::Chat, body, &[&part]).unwrap()).unwrap();
        assert_eq!(out["messages"][0]["content"], "sys");
        assert_eq!(out["messages"][1]["content"][0]["text"], "look");
        assert_eq!(out["messages"][1]["content"][1]["type"], "image_url");
    }
}
