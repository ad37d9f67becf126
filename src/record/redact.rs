//! Credentials out of URLs before anything is written: the user-info part
//! (`http://user:pass@host/v1`) is removed and the values of query parameters that look like
//! secrets (`?api_key=…`, `?token=…`, `?sig=…`) are replaced by `[redacted]`.
//!
//! A URL without either comes back unchanged, byte for byte, so the configuration fingerprint of
//! a scenario without credentials does not change.

/// What replaces a secret query value.
pub const REDACTED: &str = "[redacted]";

/// Query parameter names (lowercase substrings) whose values are treated as secrets.
const SECRET_PARAMS: &[&str] =
    &["key", "token", "secret", "sig", "auth", "pass", "pwd", "credential", "session", "code", "jwt", "bearer"];

/// `url` with user-info removed and secret-looking query values replaced. Works on text, so a
/// URL that does not parse is cleaned all the same.
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
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    match path.split_once('?') {
        None => out.push_str(path),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((name, value)) if is_secret_param(name) && !value.is_empty() => {
                        out.push_str(name);
                        out.push('=');
                        out.push_str(REDACTED);
                    }
                    _ => out.push_str(pair),
                }
            }
        }
    }
    out.push_str(fragment);
    out
}

/// Whether a query parameter of this name holds a secret.
pub fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|s| name.contains(s))
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
    fn credentials_and_query_tokens_are_removed() {
        assert_eq!(redact_url("http://user:pass@host:8000/v1"), "http://host:8000/v1");
        assert_eq!(redact_url("https://a%40b:p@ss@host/v1"), "https://host/v1");
        assert_eq!(
            redact_url("http://host/v1?api_key=sk-1&api-version=2024"),
            "http://host/v1?api_key=[redacted]&api-version=2024"
        );
        assert_eq!(redact_url("http://host/v1?Token=x#frag"), "http://host/v1?Token=[redacted]#frag");
        assert_eq!(redact_url("http://u@host/v1?sig=abc&x"), "http://host/v1?sig=[redacted]&x");
    }

    #[test]
    fn urls_without_credentials_are_unchanged() {
        for url in ["http://127.0.0.1:8000/v1", "https://api.example.com/v1?api-version=2024-02-01", "host/v1", ""] {
            assert_eq!(redact_url(url), url);
        }
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
