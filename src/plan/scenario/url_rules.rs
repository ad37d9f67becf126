//! The characters a URL or a `host:port` address the tool takes may hold.
//!
//! The HTTP client reads a URL by the WHATWG rules: it drops tabs and line breaks anywhere,
//! strips leading and trailing spaces and control characters, reads `\` as `/`, and resolves
//! `.` and `..` path segments. A URL holding any of these is measured at one address while the
//! artifact names another (`/v1\nx` written, `/v1x` measured). Such URLs are refused, with every
//! other character that cannot be seen or that reorders what is seen (whitespace, bidi controls,
//! zero-width characters): what a reader sees in the artifact is then what was measured.
//! `target.base_url` is also normalised here (`/v1` appended to a bare host).

use super::ScenarioError;
use super::checker::Checker;

/// Why `c` may not appear in a URL, or `None` when it may.
fn refused(c: char) -> Option<&'static str> {
    Some(match c {
        '\n' => "a line feed",
        '\r' => "a carriage return",
        '\t' => "a tab",
        ' ' => "a space",
        '\\' => "a backslash",
        '\u{85}' => "a next-line character (NEL)",
        '\u{2028}' => "a line separator",
        '\u{2029}' => "a paragraph separator",
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            "a bidirectional-text control"
        }
        '\u{ad}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' => {
            "an invisible character"
        }
        c if c.is_control() => "a control character",
        c if c.is_whitespace() => "a whitespace character",
        _ => return None,
    })
}

/// `text` with every refused character written as an escape (`\n`, `\u{202e}`), so that a
/// message shows what the value holds.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match (c, refused(c)) {
            ('\n', _) => out.push_str("\\n"),
            ('\r', _) => out.push_str("\\r"),
            ('\t', _) => out.push_str("\\t"),
            (' ' | '\\', _) | (_, None) => out.push(c),
            (c, Some(_)) => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
        }
    }
    out
}

/// A URL for a message: escaped, without `user:password@`, and with every query value replaced
/// by `…` (a query may carry a token). Works on text that does not parse as a URL.
pub fn shown(text: &str) -> String {
    let (scheme, rest) = match text.find("://") {
        Some(at) => text.split_at(at + 3),
        None => ("", text),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("…@{}", &authority[at + 1..]),
        None => authority.to_string(),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = query.split_once('#').map_or((query, None), |(q, f)| (q, Some(f)));
            let redacted: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) => format!("{name}=…"),
                    None => pair.to_string(),
                })
                .collect();
            let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
            (path, format!("?{}{fragment}", redacted.join("&")))
        }
        None => (tail, String::new()),
    };
    escaped(&format!("{scheme}{host}{path}{query}"))
}

/// The first character of `text` a URL may not hold, as a problem: `holds a line feed
/// (U+000A)`.
pub fn bad_character(text: &str) -> Option<String> {
    text.chars().find_map(|c| refused(c).map(|what| format!("holds {what} (U+{:04X})", u32::from(c))))
}

/// A `.` or `..` path segment (also percent-encoded, as `%2e`), which the client resolves: the
/// request would go to another path than the one written.
pub fn dot_segment(text: &str) -> bool {
    let after_scheme = text.find("://").map_or(text, |at| &text[at + 3..]);
    let path = after_scheme.find('/').map_or("", |at| &after_scheme[at..]);
    let path = path.split(['?', '#']).next().unwrap_or("");
    path.split('/').any(|segment| {
        let s = segment.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    })
}

/// Checks a URL's characters and path: the problem, for a message that names the key.
pub fn check(text: &str) -> Result<(), String> {
    if let Some(problem) = bad_character(text) {
        return Err(format!(
            "\"{}\" {problem}, which a URL cannot carry: the HTTP client would drop or rewrite it (a backslash is read as /), or a reader would not see it, and the run would measure another address than the one written",
            shown(text)
        ));
    }
    if dot_segment(text) {
        return Err(format!(
            "\"{}\" has a \".\" or \"..\" path segment, which the HTTP client resolves: it would measure another path than the one written",
            shown(text)
        ));
    }
    Ok(())
}

/// The URL of `path` (`/chat/completions`, `/models`) under a base URL: the path goes before the
/// base URL's query, if it has one (`http://h/v1?api-version=1` → `http://h/v1/models?api-version=1`),
/// so that what is requested is the path the artifact names.
pub fn endpoint(base_url: &str, path: &str) -> String {
    match base_url.split_once('?') {
        Some((root, query)) => format!("{root}{path}?{query}"),
        None => format!("{base_url}{path}"),
    }
}

/// The fix that goes with `check`'s problems.
pub const FIX: &str = "write the URL on one line, with no spaces, invisible characters, backslashes or dot segments, e.g. \"http://127.0.0.1:8000/v1\"";

/// `http://host:port` gets `/v1` appended (the OpenAI API root); a trailing slash is dropped; a
/// query is kept at the end (see `endpoint`).
/// The URL must be the one the client requests: no character the client drops or rewrites
/// (`url_rules`), no fragment (the endpoint's path is appended to it).
pub(super) fn base_url(c: &Checker, url: &str) -> Result<String, ScenarioError> {
    base_url_at(c, "target.base_url", url)
}

/// `base_url`'s rules for the URL under `key` (`target.base_urls[1]`).
pub(super) fn base_url_at(c: &Checker, key: &str, url: &str) -> Result<String, ScenarioError> {
    // Spaces around a pasted URL are harmless; every other hidden character is refused.
    let url = url.trim_matches(' ');
    check(url).map_err(|problem| c.err(key, problem, FIX))?;
    // A query (Azure's `?api-version=…`) stays at the end: endpoint paths go before it.
    let (url, query) = match url.split_once('?') {
        Some((root, query)) => (root, Some(query)),
        None => (url, None),
    };
    let url = url.trim_end_matches('/');
    let shown = shown(url);
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).ok_or_else(|| {
        c.err(
            key,
            format!("\"{shown}\" is not an http:// or https:// URL"),
            "write it like \"http://127.0.0.1:8000/v1\"",
        )
    })?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(c.err(key, format!("\"{shown}\" has no host"), "write it like \"http://127.0.0.1:8000/v1\""));
    }
    // A fragment is never sent, and the endpoint's path appended after it would be dropped too.
    if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(c.err(
            key,
            format!(
                "\"{shown}\" has a fragment (#…), which is never sent: the endpoint's path appended after it would be dropped, and the requests would go to another path than the one written"
            ),
            "give the API root only, e.g. \"http://host:8000/v1\"",
        ));
    }
    if path.contains("chat/completions") || path.ends_with("completions") {
        return Err(c.err(
            key,
            format!("\"{shown}\" includes the endpoint path"),
            "give the API root only (e.g. \"http://host:8000/v1\"); the endpoint follows from target.api",
        ));
    }
    let root = if path.is_empty() { format!("{url}/v1") } else { url.to_string() };
    let normalized = match query {
        Some(query) => format!("{root}?{query}"),
        None => root,
    };
    // The HTTP client parses the URL once more; anything it would refuse (a port above 65535,
    // a character a host cannot hold) is refused here, before anything is sent.
    if let Err(e) = reqwest::Url::parse(&normalized) {
        return Err(c.err(
            key,
            format!("\"{shown}\" is not a usable URL ({e})"),
            "write it like \"http://127.0.0.1:8000/v1\" (a port is 1–65535)",
        ));
    }
    Ok(normalized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_path_goes_before_the_base_urls_query() {
        assert_eq!(endpoint("http://h:8000/v1", "/models"), "http://h:8000/v1/models");
        assert_eq!(
            endpoint("https://h/openai/deployments/d?api-version=2024-06-01", "/chat/completions"),
            "https://h/openai/deployments/d/chat/completions?api-version=2024-06-01"
        );
    }

    #[test]
    fn every_kind_of_hidden_character_is_refused_and_shown_escaped() {
        for (url, shown_as) in [
            ("http://h:8000/v1\nx", "http://h:8000/v1\\nx"),
            ("http://h:8000/v1\rx", "http://h:8000/v1\\rx"),
            ("http://h:8000/v1\tx", "http://h:8000/v1\\tx"),
            ("http://h:8000/v1 x", "http://h:8000/v1 x"),
            ("http://h:8000/v1\u{7f}", "http://h:8000/v1\\u{007f}"),
            ("http://h:8000/v1\u{85}", "http://h:8000/v1\\u{0085}"),
            ("http://h:8000/v1\u{2028}", "http://h:8000/v1\\u{2028}"),
            ("http://h:8000/\u{202e}1v", "http://h:8000/\\u{202e}1v"),
            ("http://h:8000/v1\u{200b}", "http://h:8000/v1\\u{200b}"),
            ("http://h:8000/v1\u{a0}", "http://h:8000/v1\\u{00a0}"),
            ("http://h:8000\\v1", "http://h:8000\\v1"),
            ("\u{0}http://h:8000/v1", "\\u{0000}http://h:8000/v1"),
        ] {
            let e = check(url).expect_err(url);
            assert!(e.contains(shown_as), "{e}");
            assert!(!e.contains(['\n', '\r', '\t', '\u{85}', '\u{2028}', '\u{202e}', '\u{200b}', '\u{7f}']), "{e}");
        }
        for url in ["http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://[::1]:8000/openai/v1"] {
            assert_eq!(check(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn dot_segments_are_refused() {
        for url in ["http://h/v1/../admin", "http://h/./v1", "http://h/v1/%2E%2e", "http://h/.."] {
            assert!(check(url).is_err(), "{url}");
        }
        for url in ["http://h/v1.5", "http://h/.well-known/v1", "http://h/v1?x=.."] {
            assert_eq!(check(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn shown_urls_carry_no_credentials_or_query_values() {
        let s = shown("http://user:pw@h:1/v1?token=SECRET&x=2#f\n");
        assert_eq!(s, "http://…@h:1/v1?token=…&x=…#f\\n");
        assert_eq!(shown("h:1\u{202e}"), "h:1\\u{202e}");
    }
}
