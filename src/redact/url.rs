//! Credentials out of URLs before anything is written: one redaction for every URL the tool
//! writes (the base URL, the metrics URL, a redirect's `Location`, URLs quoted in error
//! messages, URLs in the scenario block).
//!
//! - The user-info part (`http://user:pass@host/v1`) is removed.
//! - **Every** query value is replaced by `[redacted]`, whatever its parameter's name, except
//!   `api-version` (Azure OpenAI's, which selects the API's behaviour) when it looks like a
//!   version. A list of secret-looking names (`token`, `key`, `sig`, …) always misses one
//!   (`?k=`, `?s=`, a vendor's own spelling), while the host and path already say which server
//!   was measured: a query value is almost never needed to read a result, so none is kept.
//! - A bare query item without `=` (`?sk-live-123`) is kept only when it is a short word of
//!   letters (a flag such as `?stream`); anything else is replaced.
//! - A fragment holding `name=value` pairs (OAuth puts `#access_token=…` there) is treated like
//!   a query.
//!
//! A URL without user-info, query values or such a fragment comes back unchanged, byte for byte,
//! so the configuration fingerprint of a scenario without them does not change.

/// What replaces a secret query value.
pub const REDACTED: &str = "[redacted]";

/// Query parameter names (lowercase substrings) whose values are secrets whatever their
/// length: they are also withheld wherever a server echoes them (see `worker::Secrets`).
const SECRET_PARAMS: &[&str] = &[
    "key",
    "token",
    "secret",
    "sig",
    "auth",
    "pass",
    "pwd",
    "credential",
    "session",
    "code",
    "jwt",
    "bearer",
    "cookie",
];

/// Query parameters whose value is kept when it looks like a version (`2024-02-01-preview`).
const KEPT_PARAMS: &[&str] = &["api-version", "api_version"];

/// `url` with user-info removed and every query value (but a version) replaced. Works on text,
/// so a URL that does not parse is cleaned all the same.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    // The authority ends at the first `/`, `?` or `#`; user-info is what precedes its last `@`.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = authority.rfind('@').map_or(authority, |at| &authority[at + 1..]);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    out.push_str(host);
    let (path, fragment) = match tail.find('#') {
        Some(i) => (&tail[..i], Some(&tail[i + 1..])),
        None => (tail, None),
    };
    match path.split_once('?') {
        None => out.push_str(path),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            push_pairs(&mut out, query);
        }
    }
    if let Some(fragment) = fragment {
        out.push('#');
        if fragment.contains('=') {
            push_pairs(&mut out, fragment);
        } else {
            out.push_str(fragment);
        }
    }
    out
}

/// `a=1&b=2` with every value replaced (but a version), names kept.
fn push_pairs(out: &mut String, query: &str) {
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((name, value)) if value.is_empty() || keeps_value(name, value) => out.push_str(pair),
            Some((name, _)) => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            None if is_flag(pair) => out.push_str(pair),
            None => out.push_str(REDACTED),
        }
    }
}

/// `api-version=2024-02-01-preview`: a known harmless parameter with a version-shaped value,
/// which `redact_url` keeps.
pub fn keeps_value(name: &str, value: &str) -> bool {
    KEPT_PARAMS.iter().any(|k| name.eq_ignore_ascii_case(k))
        && !is_secret_param(name)
        && (1..=32).contains(&value.len())
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// A bare query item that is a flag (`?stream`), not a token.
fn is_flag(item: &str) -> bool {
    item.is_empty() || (item.len() <= 16 && item.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'-'))
}

/// Whether a query parameter of this name is secret whatever its value's length.
pub fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|s| name.contains(s))
}

/// The values `redact_url` removes from `url` (user-info, query and fragment values), as
/// written: what a server must not be able to make the tool write by echoing it.
pub fn url_credentials(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let rest = url.find("://").map_or(url, |i| &url[i + 3..]);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if let Some(at) = authority.rfind('@') {
        let userinfo = &authority[..at];
        match userinfo.split_once(':') {
            // `http://token@host`: the user name is the credential; with a password, the
            // password is.
            Some((_, password)) => out.push(password.to_string()),
            None => out.push(userinfo.to_string()),
        }
    }
    let (path, fragment) = match tail.find('#') {
        Some(i) => (&tail[..i], Some(&tail[i + 1..])),
        None => (tail, None),
    };
    let query = path.split_once('?').map(|(_, q)| q);
    for part in query.into_iter().chain(fragment.filter(|f| f.contains('='))) {
        for pair in part.split('&') {
            match pair.split_once('=') {
                // A value under a secret-looking name is a secret whatever its length; any
                // other only from 8 characters on (`?stream=1` must not make every message
                // holding a `1` withheld).
                Some((name, value))
                    if !value.is_empty()
                        && !keeps_value(name, value)
                        && (is_secret_param(name) || value.chars().count() >= 8) =>
                {
                    out.push(value.to_string());
                }
                None if !is_flag(pair) => out.push(pair.to_string()),
                _ => {}
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Every URL inside a free-form message (an error chain, a `Location` header) redacted. Text
/// without `://` is returned as is without copying work beyond one search.
pub fn redact_urls_in(text: &str) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The URL starts at the scheme: the run of letters, digits, `+`, `-`, `.` before `://`.
        let scheme_start = rest[..i]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map_or(i, |(j, _)| j);
        // It ends at whitespace or a character that delimits URLs in prose.
        let end = rest[i..].find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')'));
        let end = end.map_or(rest.len(), |e| i + e);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_query_values_are_removed() {
        assert_eq!(redact_url("http://user:pass@host:8000/v1"), "http://host:8000/v1");
        assert_eq!(redact_url("https://a%40b:p@ss@host/v1"), "https://host/v1");
        assert_eq!(
            redact_url("http://host/v1?api_key=sk-1&api-version=2024-02-01"),
            "http://host/v1?api_key=[redacted]&api-version=2024-02-01"
        );
        assert_eq!(redact_url("http://host/v1?Token=x#frag"), "http://host/v1?Token=[redacted]#frag");
        assert_eq!(redact_url("http://u@host/v1?sig=abc&stream"), "http://host/v1?sig=[redacted]&stream");
        // Names no list of secret-looking names would hold.
        assert_eq!(
            redact_url("http://h/m?k=abc&s=1&x-goog-s=zz"),
            "http://h/m?k=[redacted]&s=[redacted]&x-goog-s=[redacted]"
        );
        assert_eq!(redact_url("http://h/m?sk-live-123"), "http://h/m?[redacted]");
        assert_eq!(
            redact_url("http://h/cb#access_token=abc&state=1"),
            "http://h/cb#access_token=[redacted]&state=[redacted]"
        );
        // A version that is not one is a value like any other.
        assert_eq!(redact_url("http://h/v1?api-version=sk-secret%2Fx"), "http://h/v1?api-version=[redacted]");
    }

    #[test]
    fn urls_without_credentials_are_unchanged() {
        for url in [
            "http://127.0.0.1:8000/v1",
            "https://api.example.com/v1?api-version=2024-02-01",
            "host/v1",
            "",
            "http://h/a#top",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn the_credentials_redaction_removes_are_listed() {
        let found =
            url_credentials("http://u:pw-1@h/v1?token=t&api-version=2024-02-01&stream=1&x=longvalue1#a=frag12345");
        assert_eq!(found, ["pw-1", "t", "longvalue1", "frag12345"]);
        assert_eq!(url_credentials("http://tok@h/v1?sk-bare-123"), ["tok", "sk-bare-123"]);
        assert!(url_credentials("http://h/v1").is_empty());
    }

    #[test]
    fn urls_inside_messages() {
        assert_eq!(
            redact_urls_in("error sending request for url (http://u:p@h/v1/chat/completions?key=s): closed"),
            "error sending request for url (http://h/v1/chat/completions?key=[redacted]): closed"
        );
        assert_eq!(redact_urls_in("redirected to https://x:y@other/v1 now"), "redirected to https://other/v1 now");
        assert_eq!(redact_urls_in("no url here"), "no url here");
    }
}
