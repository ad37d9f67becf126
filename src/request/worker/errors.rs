//! Reading what went wrong: HTTP-client errors classified, error chains put on one line,
//! context-overflow wordings, `Retry-After` and redirect answers read without trusting them,
//! answers that came compressed, and why a client could not be set up at all (`ClientError`).

use std::time::Duration;

use reqwest::header::{CONTENT_ENCODING, HeaderMap, LOCATION, RETRY_AFTER};

use super::transport::SendError;
use crate::contract::ErrorKind;
use crate::redact::redact_url;

/// Why a client could not be set up, naming the scenario key at fault. Validation refuses each of
/// these first; the client checks again rather than trust that it did.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint does not parse as a URL, or as the URI a request is sent to (the parser's
    /// words, which never repeat the URL).
    #[error("target.base_url: {0}")]
    Url(String),
    /// A value that goes into a header holds what a header cannot carry (the value, a key
    /// perhaps, is never shown).
    #[error("{key}: holds a line break or another character an HTTP header cannot carry")]
    Header { key: &'static str },
    /// `[target.tls]` could not become a TLS configuration.
    #[error("{0}")]
    Tls(String),
}

/// Longest wait before a retry, whatever `Retry-After` or the backoff say.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// The error and each of its causes, outermost first.
fn causes<'a>(e: &'a (dyn std::error::Error + 'static)) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |err| err.source())
}

/// Whether an I/O error of `kind` is among the causes of `e`.
fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    causes(e).any(|err| err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == kind))
}

/// A send that failed on an already-open connection that was closed under us.
pub fn is_stale_connection(e: &SendError) -> bool {
    if e.is_connect() || has_io_kind(e, std::io::ErrorKind::TimedOut) {
        return false;
    }
    causes(e).any(|err| {
        use std::io::ErrorKind as K;
        err.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(io.kind(), K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted | K::UnexpectedEof)
        }) || err.downcast_ref::<hyper::Error>().is_some_and(|h| h.is_incomplete_message() || h.is_canceled())
    })
}

/// What a failed send was: no connection (in time), or a connection that failed under the
/// request.
pub fn send_error_kind(e: &SendError) -> ErrorKind {
    let timed_out = has_io_kind(e, std::io::ErrorKind::TimedOut);
    match (e.is_connect(), timed_out) {
        (true, true) => ErrorKind::ConnectTimeout,
        (true, false) => ErrorKind::ConnectFailed,
        (false, true) => ErrorKind::FirstByteTimeout,
        (false, false) => ErrorKind::StreamBroken,
    }
}

/// The error and its causes on one line (an HTTP client's top-level message alone says little).
/// Errors of the measured path name no URL; reqwest's are passed `without_url()`, since a URL may
/// carry query tokens (the target is known anyway).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    for cause in causes(e).skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// A 400 that says the prompt does not fit (OpenAI, vLLM, SGLang and llama.cpp wordings).
pub fn is_context_overflow(server_type: Option<&str>, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    matches!(server_type, Some("context_length_exceeded" | "exceed_context_size_error"))
        || m.contains("maximum context length")
        || m.contains("context length")
        || m.contains("context size")
        || m.contains("context window")
}

/// `Retry-After` in seconds, capped at `MAX_RETRY_WAIT`. Any value, however extreme or
/// malformed (`1e20`, `inf`, `-1`, an HTTP date), yields a usable wait or `None` (the backoff
/// applies), never a panic.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(secs.min(MAX_RETRY_WAIT.as_secs_f64())).ok()
}

/// The wait before retry number `n + 1`: `backoff × 2ⁿ`, saturating, at most `MAX_RETRY_WAIT`.
pub fn backoff_wait(backoff: Duration, n: u32) -> Duration {
    backoff.checked_mul(2u32.saturating_pow(n)).unwrap_or(MAX_RETRY_WAIT).min(MAX_RETRY_WAIT)
}

/// What a redirect answer says, naming where it pointed without credentials.
pub fn redirect_message(status: u16, headers: &HeaderMap) -> String {
    match headers.get(LOCATION) {
        Some(location) => format!(
            "HTTP {status} redirect to {} (not followed: set base_url to the address that serves the API)",
            redact_url(&String::from_utf8_lossy(location.as_bytes()))
        ),
        None => format!("HTTP {status} redirect without a Location header (not followed)"),
    }
}

/// Longest `Content-Encoding` value quoted in a message.
const ENCODING_CHARS: usize = 32;

/// Why an answer cannot be read when it came compressed (`Content-Encoding` other than
/// `identity`): the client asks for no encoding and reads streams as sent, since a compressing
/// proxy holds chunks back and would be timed with the server. `None` when it came as sent.
pub(super) fn compressed(headers: &HeaderMap) -> Option<String> {
    let encodings: Vec<String> = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty() && v != "identity")
        .collect();
    let first = encodings.first()?;
    let shown: String = first.chars().take(ENCODING_CHARS).collect();
    Some(format!(
        "the server sent the answer compressed (Content-Encoding: {shown}) although the client asked for none and reads it as sent: turn compression off for this route (a proxy's gzip, say)"
    ))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn compressed_answers_are_named_by_their_encoding() {
        let mut h = HeaderMap::new();
        assert_eq!(compressed(&h), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("identity"));
        assert_eq!(compressed(&h), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert!(compressed(&h).is_some_and(|m| m.contains("Content-Encoding: gzip")));
    }

    #[test]
    fn context_overflow_wordings() {
        assert!(is_context_overflow(Some("exceed_context_size_error"), "request exceeds the available context size"));
        assert!(is_context_overflow(Some("BadRequestError"), "This model's maximum context length is 4096 tokens."));
        assert!(!is_context_overflow(Some("invalid_request_error"), "temperature must be positive"));
    }

    #[test]
    fn retry_after_never_panics_and_is_capped() {
        let read = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
            retry_after(&h)
        };
        assert_eq!(read("1e20"), Some(MAX_RETRY_WAIT));
        assert_eq!(read("1.7e308"), Some(MAX_RETRY_WAIT));
        assert_eq!(read("2"), Some(Duration::from_secs(2)));
        assert_eq!(read(" 0.5 "), Some(Duration::from_millis(500)));
        for bad in ["inf", "NaN", "-1", "-0.5e300", "Wed, 21 Oct 2015 07:28:00 GMT", "", "1e20s"] {
            assert_eq!(read(bad), None, "{bad}");
        }
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn backoff_saturates() {
        assert_eq!(backoff_wait(Duration::from_millis(500), 0), Duration::from_millis(500));
        assert_eq!(backoff_wait(Duration::from_millis(500), 2), Duration::from_secs(2));
        assert_eq!(backoff_wait(Duration::from_millis(500), 40), MAX_RETRY_WAIT);
        assert_eq!(backoff_wait(Duration::MAX, 1), MAX_RETRY_WAIT);
    }

    #[test]
    fn redirects_name_the_location_without_credentials() {
        let mut h = HeaderMap::new();
        h.insert(LOCATION, HeaderValue::from_static("http://user:pw@other:9000/v1/chat/completions?token=abc"));
        let m = redirect_message(307, &h);
        assert!(m.contains("http://other:9000/v1/chat/completions?token=[redacted]"), "{m}");
        assert!(!m.contains("pw") && !m.contains("abc"));
        assert!(redirect_message(301, &HeaderMap::new()).contains("without a Location"));
    }

    #[test]
    fn a_client_that_cannot_be_set_up_names_the_key_and_never_the_secret() {
        use crate::plan::scenario::{Api, ApiKey, Scenario};
        use crate::request::worker::Client;
        let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
        let scenario = Scenario::from_toml(std::path::Path::new("t.toml"), text, &Default::default());
        let settings = scenario.unwrap().client;
        let e = Client::new("not a url", None, settings.clone(), 1).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("target.base_url: relative URL without a base"));
        let key = Some(ApiKey::new("sk-secret\nline".into()));
        let e = Client::new("http://127.0.0.1:9/v1/messages", key, settings.clone(), 1).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.starts_with("target.api_key_env: ") && !e.contains("sk-secret")),
            "{e:?}"
        );
        let client = Client::new("http://127.0.0.1:9/v1/messages", None, settings, 1).unwrap();
        let e = client.for_api(Api::Messages, Some("2023\n06")).err().map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.starts_with("target.anthropic_version: ")), "{e:?}");
    }
}
