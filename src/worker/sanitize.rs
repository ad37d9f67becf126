//! Server and library strings made safe to store: one line, bounded, URLs without credentials,
//! and withheld entirely when they quote the prompt or carry a secret (the API key, or a
//! password or token from the base URL, which a hostile server can echo in any field).

use std::fmt;
use std::sync::Arc;

use crate::record::redact::redact_urls_in;

/// Longest failure message kept.
const MESSAGE_CHARS: usize = 200;
/// Longest short server label kept (`finish_reason`, an error's type or code).
pub const FIELD_CHARS: usize = 64;

/// The secrets of a run that must never be written: the API key, and the password and
/// secret-looking query values of the base URL (as written and percent-decoded).
/// Shared, so cloning a client (once per request in an open loop) copies no string.
#[derive(Clone, Default)]
pub struct Secrets(Arc<[String]>);

impl Secrets {
    pub fn new(api_key: Option<&str>, base_url: &str) -> Self {
        let mut all: Vec<String> = api_key.into_iter().map(str::to_string).collect();
        if let Ok(url) = reqwest::Url::parse(base_url) {
            if let Some(password) = url.password() {
                all.push(password.to_string());
            }
            if !url.username().is_empty() && url.password().is_none() {
                // `http://token@host`: the user name is the credential.
                all.push(url.username().to_string());
            }
            for (name, value) in url.query_pairs() {
                if crate::record::redact::is_secret_param(&name) {
                    all.push(value.into_owned());
                }
            }
            if let Some(query) = url.query() {
                for pair in query.split('&') {
                    if let Some((name, value)) = pair.split_once('=') {
                        if crate::record::redact::is_secret_param(name) {
                            all.push(value.to_string());
                        }
                    }
                }
            }
            // An endpoint path appended to a base URL that ends in a query lands in the last
            // value (`?key=tok/chat/completions`): the token is what precedes the path.
            let cut: Vec<String> =
                all.iter().filter_map(|s| s.split_once('/').map(|(head, _)| head.to_string())).collect();
            all.extend(cut);
            let decoded: Vec<String> = all.iter().filter_map(|s| percent_decode(s)).collect();
            all.extend(decoded);
        }
        all.retain(|s| !s.is_empty());
        all.sort();
        all.dedup();
        Secrets(all.into())
    }

    /// Whether `text` holds any of the secrets.
    pub fn found_in(&self, text: &str) -> bool {
        self.0.iter().any(|s| text.contains(s.as_str()))
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets([{} hidden])", self.0.len())
    }
}

/// `%XX` sequences decoded, when there are any and the result is UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl Secrets {
    /// A server or library message made safe to store: one line, at most `MESSAGE_CHARS`, URLs
    /// without credentials, and withheld entirely if it quotes the prompt (servers echo input in
    /// validation errors) or holds a secret.
    pub fn message(&self, text: &str) -> String {
        bounded(text, |t| self.found_in(t), MESSAGE_CHARS)
    }

    /// The same for a short server label (`finish_reason`, an error's type or code): at most
    /// `FIELD_CHARS` characters.
    pub fn field(&self, text: &str) -> String {
        // The labels every response ends with (`stop`, `length`, `tool_calls`): one word of
        // lowercase letters, digits and `_` holds no URL, no control character and no prompt
        // text, so only a secret could be withheld from it.
        if is_label(text) && !self.found_in(text) {
            return text.to_owned();
        }
        bounded(text, |t| self.found_in(t), FIELD_CHARS)
    }
}

/// A short word of lowercase ASCII letters, digits and `_`.
fn is_label(text: &str) -> bool {
    text.len() <= FIELD_CHARS && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `Secrets::message` for callers that know only the API key.
pub fn sanitize_message(message: &str, secret: Option<&str>) -> String {
    bounded(message, |t| secret.is_some_and(|s| !s.is_empty() && t.contains(s)), MESSAGE_CHARS)
}

fn bounded(text: &str, holds_secret: impl Fn(&str) -> bool, max_chars: usize) -> String {
    if holds_secret(text) {
        return "[withheld: it contained a secret]".to_string();
    }
    if quotes_prompt(text) {
        return "[withheld: it quoted the prompt]".to_string();
    }
    let text = redact_urls_in(text);
    let mut out: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max_chars).collect();
    if text.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// Synthetic prompts are runs of dictionary words and carry `ANVIL_REQ_` instructions; a message
/// holding the instruction text or six dictionary words in a row is quoting one.
fn quotes_prompt(message: &str) -> bool {
    if message.contains("reference text") || message.contains("Task: ") {
        return true;
    }
    let mut run = 0;
    for word in message.split_whitespace() {
        if crate::workload::is_filler_word(word) {
            run += 1;
            if run >= 6 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A label is what the general path makes of it, secrets included.
    #[test]
    fn labels_take_the_short_way_to_the_same_answer() {
        use proptest::prelude::*;
        let key = Secrets::new(Some("sk1"), "http://h/v1");
        proptest!(ProptestConfig::with_cases(1_000), |(text in "[a-z0-9_]{0,70}|[a-z]{0,5}sk1[a-z_]{0,5}")| {
            prop_assert!(is_label(&text) || text.len() > FIELD_CHARS);
            prop_assert_eq!(key.field(&text), bounded(&text, |t| key.found_in(t), FIELD_CHARS));
        });
        assert!(key.field("stopsk1").contains("withheld"));
        assert!(!is_label("Stop") && !is_label("a b") && !is_label("http://x"));
    }

    #[test]
    fn messages_are_bounded_and_never_quote_prompts_or_keys() {
        let none = Secrets::default();
        let long = "x".repeat(500);
        assert_eq!(none.message(&long).chars().count(), MESSAGE_CHARS + 1);
        assert_eq!(none.message("a\nb"), "a b");
        let key = Secrets::new(Some("sk-123"), "http://h/v1");
        assert!(key.message("bad token sk-123 in header").contains("withheld"));
        assert!(none.message("invalid input: the river of the city was north").contains("withheld"));
        assert_eq!(none.message("maximum context length is 4096 tokens"), "maximum context length is 4096 tokens");
    }

    #[test]
    fn fields_are_bounded_and_scrubbed_like_messages() {
        let key = Secrets::new(Some("sk-live-abc"), "http://h/v1");
        assert_eq!(key.field("stop"), "stop");
        assert!(key.field("length sk-live-abc").contains("withheld"));
        let huge = "y".repeat(10_000);
        assert_eq!(key.field(&huge).chars().count(), FIELD_CHARS + 1);
        assert_eq!(key.field("a\r\nb\u{7}"), "a  b ");
    }

    #[test]
    fn base_url_credentials_are_secrets_too() {
        let s = Secrets::new(None, "http://alice:hunter%2F2@h/v1?api-version=2024&api_key=tok123/chat/completions");
        for echoed in ["hunter%2F2", "hunter/2", "tok123"] {
            assert!(s.message(&format!("you sent {echoed}")).contains("withheld"), "{echoed}");
        }
        assert_eq!(s.message("version 2024"), "version 2024");
        assert!(format!("{s:?}").contains("hidden") && !format!("{s:?}").contains("tok123"));
        let user_only = Secrets::new(None, "http://sk-token@h/v1");
        assert!(user_only.found_in("echo sk-token"));
    }

    #[test]
    fn the_key_only_form_still_works() {
        assert!(sanitize_message("echo sk-1", Some("sk-1")).contains("withheld"));
        assert_eq!(sanitize_message("a\tb", None), "a b");
    }

    #[test]
    fn urls_in_messages_lose_their_credentials() {
        let m = Secrets::default().message("error sending request for url (http://u:p@h/v1?token=t)");
        assert_eq!(m, "error sending request for url (http://h/v1?token=[redacted])");
    }
}
