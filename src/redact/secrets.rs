//! The one sanitizer for every string that came from the server or the configuration and is
//! written anywhere (artifact, records, the server-metrics file, the console): one line, bounded,
//! without control, bidi or other invisible formatting characters, URLs redacted
//! (`redact::url`), and never a secret of the run (the API key, the credentials and query
//! values of the base and metrics URLs, as written and percent-decoded), which a hostile server
//! can echo in any field, header, model id or metric label.
//!
//! Three shapes: [`Secrets::message`] (a failure message: withheld entirely when it holds a
//! secret or quotes the prompt), [`Secrets::field`] (a short label such as `finish_reason`, a
//! model id or the backend header), and [`Secrets::label`] (a metric name or label value: each
//! secret replaced in place, so series stay apart).
//!
//! Secrets obtained during a run (each token a `target.api_key_command` printed) are learned
//! through a [`SecretLog`] shared by every `Secrets` built with it: a token obtained after a
//! `Secrets` was made is withheld by it all the same.

use std::fmt;
use std::sync::{Arc, RwLock};

use super::url::{REDACTED, redact_urls_in, url_credentials};

/// Longest failure message kept.
const MESSAGE_CHARS: usize = 200;
/// Longest short server label kept (`finish_reason`, an error's type or code).
pub const FIELD_CHARS: usize = 64;
/// Secrets shorter than this are not looked for in a configuration document (see
/// [`Secrets::scrub_json`]).
pub const SCRUB_MIN_CHARS: usize = 8;
/// What a message or field holding a secret becomes.
const WITHHELD_SECRET: &str = "[withheld: it contained a secret]";

/// The secrets of a run that must never be written: the API key, and the credentials and query
/// values of the base and metrics URLs (as written and percent-decoded), longest first.
/// Shared, so cloning a client (once per request in an open loop) copies no string.
#[derive(Clone, Default)]
pub struct Secrets(Arc<[String]>, Option<SecretLog>);

/// Secrets learned while a run goes on (tokens a key command printed), shared by every
/// [`Secrets`] given it (`Secrets::learning`). Only ever grows; its `Debug` shows a count.
#[derive(Clone, Default)]
pub struct SecretLog(Arc<RwLock<Arc<[String]>>>);

impl SecretLog {
    /// Withhold `secret` from now on, wherever a `Secrets` with this log looks.
    pub fn learn(&self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        let mut all = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.iter().any(|s| s == secret) {
            return;
        }
        let mut grown: Vec<String> = all.iter().cloned().chain(std::iter::once(secret.to_string())).collect();
        grown.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        *all = grown.into();
    }

    /// Every secret learned so far, longest first.
    fn all(&self) -> Arc<[String]> {
        Arc::clone(&self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// How many secrets were learned.
    pub fn len(&self) -> usize {
        self.all().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for SecretLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretLog([{} hidden])", self.len())
    }
}

impl Secrets {
    pub fn new(api_key: Option<&str>, base_url: &str) -> Self {
        Secrets::from_parts(api_key.into_iter().map(str::to_string).collect(), &[base_url])
    }

    /// The given secrets (an API key) and the credentials and query values of each URL.
    pub fn with_urls(secrets: Vec<String>, urls: &[&str]) -> Self {
        Secrets::from_parts(secrets, urls)
    }

    /// These secrets and those of `other` (a run has one log: this one's, else `other`'s).
    pub fn and(&self, other: &Secrets) -> Self {
        Secrets::from_parts(self.0.iter().chain(other.0.iter()).cloned().collect(), &[])
            .with_log(self.1.clone().or_else(|| other.1.clone()))
    }

    /// These secrets and the credentials of `url`.
    pub fn and_url(&self, url: &str) -> Self {
        Secrets::from_parts(self.0.to_vec(), &[url]).with_log(self.1.clone())
    }

    /// These secrets and every one `log` learns, before or after this call.
    pub fn learning(&self, log: &SecretLog) -> Self {
        Secrets(Arc::clone(&self.0), Some(log.clone()))
    }

    fn with_log(mut self, log: Option<SecretLog>) -> Self {
        self.1 = log;
        self
    }

    /// The fixed secrets and those learned so far, longest first (for replacing in place).
    fn every(&self) -> Arc<[String]> {
        match self.1.as_ref().map(SecretLog::all).filter(|l| !l.is_empty()) {
            None => Arc::clone(&self.0),
            Some(learned) => {
                let mut all: Vec<String> = self.0.iter().chain(learned.iter()).cloned().collect();
                all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
                all.dedup();
                all.into()
            }
        }
    }

    fn from_parts(mut all: Vec<String>, urls: &[&str]) -> Self {
        let mut from_urls: Vec<String> = urls.iter().flat_map(|u| url_credentials(u)).collect();
        // An endpoint path appended to a base URL that ends in a query lands in the last
        // value (`?key=tok/chat/completions`): the token is what precedes the path.
        let cut: Vec<String> =
            from_urls.iter().filter_map(|s| s.split_once('/').map(|(head, _)| head.to_string())).collect();
        from_urls.extend(cut);
        all.extend(from_urls);
        let decoded: Vec<String> = all.iter().filter_map(|s| percent_decode(s)).collect();
        all.extend(decoded);
        all.retain(|s| !s.is_empty());
        // Longest first: a secret inside another is replaced after it.
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        Secrets(all.into(), None)
    }

    /// Whether `text` holds any of the secrets, as written or percent-encoded.
    pub fn found_in(&self, text: &str) -> bool {
        let learned = self.1.as_ref().map(SecretLog::all).unwrap_or_default();
        if self.0.is_empty() && learned.is_empty() {
            return false;
        }
        let holds = |t: &str| self.0.iter().chain(learned.iter()).any(|s| t.contains(s.as_str()));
        holds(text) || percent_decode(text).is_some_and(|d| holds(&d))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty() && self.1.as_ref().is_none_or(SecretLog::is_empty)
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets([{} hidden])", self.every().len())
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

/// A character that must not reach a file or a terminal as it is: a control character (C0, C1,
/// DEL), a line or paragraph separator, or an invisible formatting character (Unicode's `Cf`:
/// the bidi embeddings, overrides and isolates such as U+202E, zero-width spaces and joiners,
/// the byte-order mark, tag characters), which can reorder or hide what a reader sees.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// `text` with every unsafe character (see [`is_unsafe_char`]) replaced by a space.
pub fn visible(text: &str) -> String {
    text.chars().map(|c| if is_unsafe_char(c) { ' ' } else { c }).collect()
}

impl Secrets {
    /// A server or library message made safe to store: one line, at most `MESSAGE_CHARS`, URLs
    /// redacted, and withheld entirely if it quotes the prompt (servers echo input in
    /// validation errors) or holds a secret.
    pub fn message(&self, text: &str) -> String {
        bounded(text, |t| self.found_in(t), MESSAGE_CHARS)
    }

    /// The same for a short server label (`finish_reason`, an error's type or code, a model id,
    /// the backend header): at most `FIELD_CHARS` characters.
    pub fn field(&self, text: &str) -> String {
        // The labels every response ends with (`stop`, `length`, `tool_calls`): one word of
        // lowercase letters, digits and `_` holds no URL, no control character and no prompt
        // text, so only a secret could be withheld from it.
        if is_label(text) && !self.found_in(text) {
            return text.to_owned();
        }
        bounded(text, |t| self.found_in(t), FIELD_CHARS)
    }

    /// A metric name or label value: each secret replaced by `[redacted]` where it stands (so
    /// two series do not become one), URLs redacted, unsafe characters replaced, at most
    /// `max_chars` characters. Never withheld whole, never quoting a secret.
    pub fn label(&self, text: &str, max_chars: usize) -> String {
        let mut out = if text.contains("://") { redact_urls_in(text) } else { text.to_string() };
        for secret in self.every().iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        if self.found_in(&out) {
            // Only percent-encoded now: there is no place to replace it in.
            return WITHHELD_SECRET.to_string();
        }
        let mut out: String = out.chars().map(|c| if is_unsafe_char(c) { ' ' } else { c }).collect();
        if out.chars().nth(max_chars).is_some() {
            out = out.chars().take(max_chars).collect();
            out.push('…');
        }
        out
    }
}

impl Secrets {
    /// Every string of a configuration document (keys included) with its URLs redacted and each
    /// secret of at least `SCRUB_MIN_CHARS` characters replaced by `[redacted]`: the scenario block of the
    /// artifact and the records file repeats the configuration, and a secret may have been
    /// written into any of its strings. A shorter secret (a test key such as `x`) is left: it
    /// would rewrite field names and values by coincidence, and with them the configuration's
    /// fingerprint, which must not depend on the key.
    pub fn scrub_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        let every = self.every();
        let scrub = |s: &str| -> Option<String> {
            let mut out = if s.contains("://") { redact_urls_in(s) } else { s.to_string() };
            for secret in every.iter().filter(|s| s.chars().count() >= SCRUB_MIN_CHARS) {
                if out.contains(secret.as_str()) {
                    out = out.replace(secret.as_str(), REDACTED);
                }
            }
            (out != s).then_some(out)
        };
        match value {
            Value::String(s) => {
                if let Some(clean) = scrub(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().filter(|k| scrub(k).is_some()).cloned().collect();
                for key in keys {
                    if let Some(v) = map.remove(&key) {
                        map.insert(scrub(&key).unwrap_or(key), v);
                    }
                }
                map.values_mut().for_each(|v| self.scrub_json(v));
            }
            _ => {}
        }
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
        return WITHHELD_SECRET.to_string();
    }
    if quotes_prompt(text) {
        return "[withheld: it quoted the prompt]".to_string();
    }
    let text = redact_urls_in(text);
    // Unsafe characters become spaces, never nothing: removing one could join the two halves
    // of a secret the check above did not see whole.
    let mut out: String = text.chars().map(|c| if is_unsafe_char(c) { ' ' } else { c }).take(max_chars).collect();
    if text.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    if holds_secret(&out) {
        return WITHHELD_SECRET.to_string();
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
        if crate::text::is_filler_word(word) {
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
    fn bidi_overrides_and_invisible_characters_never_pass() {
        let none = Secrets::default();
        for hidden in ['\u{202E}', '\u{2066}', '\u{200B}', '\u{FEFF}', '\u{2028}', '\u{85}', '\u{E0041}', '\u{7F}'] {
            let text = format!("gpt{hidden}-4");
            assert!(!none.field(&text).contains(hidden), "{hidden:?} kept in a field");
            assert!(!none.message(&text).contains(hidden), "{hidden:?} kept in a message");
            assert!(!none.label(&text, 64).contains(hidden), "{hidden:?} kept in a label");
            assert!(is_unsafe_char(hidden));
        }
        for shown in ['a', 'é', '中', '😀', ' '] {
            assert!(!is_unsafe_char(shown), "{shown:?}");
        }
        // A character inside the key cannot hide it: it becomes a space, never nothing.
        let key = Secrets::new(Some("sk-abc-123"), "http://h/v1");
        assert!(!key.field("sk-abc\u{200B}-123").contains("sk-abc-123"));
    }

    #[test]
    fn labels_keep_their_shape_and_lose_the_secret() {
        let s = Secrets::new(Some("sk-live-9"), "http://h/v1?token=qs-token-7");
        assert_eq!(s.label("user_sk-live-9", 64), "user_[redacted]");
        assert_eq!(s.label("qs-token-7", 64), "[redacted]");
        assert_eq!(s.label("http://u:p@h/x?sig=abc", 64), "http://h/x?sig=[redacted]");
        assert_eq!(s.label(&"z".repeat(100), 10).chars().count(), 11);
        assert_eq!(s.label("sk%2Dlive%2D9", 64), "[withheld: it contained a secret]");
        assert!(s.found_in("encoded sk%2Dlive%2D9") && s.message("encoded sk%2Dlive%2D9").contains("withheld"));
    }

    #[test]
    fn every_long_query_value_of_a_url_is_a_secret() {
        let s = Secrets::default().and_url("http://h:9/metrics?x=opaque-value-1&stream=1");
        assert!(s.found_in("echo opaque-value-1"));
        assert!(!s.found_in("stream 1"), "short values of harmless names are not secrets");
        let both = Secrets::new(Some("k-1"), "http://h/v1").and(&s);
        assert!(both.found_in("k-1") && both.found_in("opaque-value-1"));
    }

    #[test]
    fn a_configuration_document_loses_urls_credentials_and_secrets() {
        let s = Secrets::new(Some("sk-conf-1"), "http://h/v1");
        let mut v = serde_json::json!({
            "target": {"metrics_url": "http://h/m?token=t1", "model": "m"},
            "extra": {"auth": "Bearer sk-conf-1", "sk-conf-1": 1},
            "paths": ["s3://u:p@bucket/x", 3]
        });
        s.scrub_json(&mut v);
        let text = v.to_string();
        assert!(!text.contains("t1") && !text.contains("sk-conf-1") && !text.contains("u:p@"), "{text}");
        assert_eq!(v["target"]["model"], "m");
        assert_eq!(v["extra"]["auth"], "Bearer [redacted]");
        assert_eq!(v["extra"]["[redacted]"], 1);
        // A short key does not rewrite the document (nor its fingerprint) by coincidence.
        let short = Secrets::new(Some("x"), "http://h/v1");
        let mut doc = serde_json::json!({"max_tokens": 8, "model": "x1"});
        let before = doc.clone();
        short.scrub_json(&mut doc);
        assert_eq!(doc, before);
    }

    #[test]
    fn secrets_learned_later_are_withheld_by_every_copy() {
        let log = SecretLog::default();
        let s = Secrets::new(Some("sk-fixed-1"), "http://h/v1").learning(&log);
        let combined = Secrets::default().and(&s).and_url("http://h/m?token=qs-tok-9");
        assert!(!s.found_in("tok-7f3a-1"));
        log.learn("tok-7f3a-1");
        log.learn("tok-7f3a-1");
        assert_eq!(log.len(), 1);
        for secrets in [&s, &combined] {
            assert!(secrets.found_in("Bearer tok-7f3a-1") && secrets.found_in("sk-fixed-1"));
            assert!(secrets.message("echo tok-7f3a-1").contains("withheld"));
            assert_eq!(secrets.label("x_tok-7f3a-1", 64), "x_[redacted]");
        }
        assert!(combined.found_in("qs-tok-9"));
        let mut doc = serde_json::json!({"auth": "Bearer tok-7f3a-1"});
        combined.scrub_json(&mut doc);
        assert_eq!(doc["auth"], "Bearer [redacted]");
        assert!(!format!("{log:?}{s:?}").contains("tok-7f3a"));
    }

    #[test]
    fn urls_in_messages_lose_their_credentials() {
        let m = Secrets::default().message("error sending request for url (http://u:p@h/v1?token=t)");
        assert_eq!(m, "error sending request for url (http://h/v1?token=[redacted])");
    }
}
