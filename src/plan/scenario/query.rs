//! `target.query`: query parameters appended to every request URL (Azure's `api-version`, a
//! gateway's routing parameter), values as in `target.headers` (text or `{ env = "NAME" }`).
//!
//! Their values are secrets, like every query value of the base URL: the scenario keeps the names
//! only, the URLs written have their query values redacted (`redact::url`), and every value but a
//! version-shaped `api-version` (which `redact::url` keeps, since it selects the API's behaviour)
//! and a short flag (`headers::ECHO_MIN_CHARS`) joins the run's `Secrets`. They are appended to the base URL when the run starts
//! ([`with_query`]), after the base URL's own query, so every request (the `/models` check, the
//! probes, the measured requests) carries them.

use super::ScenarioError;
use super::checker::Checker;
use super::headers::{NamedValues, value_of};

/// The validated `target.query`: names non-empty, values without control characters, and no
/// name the base URL's own query already carries.
pub(super) fn query(
    c: &Checker,
    table: Option<&toml::Table>,
    base_url: Option<&str>,
) -> Result<NamedValues, ScenarioError> {
    let mut out = NamedValues::default();
    let Some(table) = table else { return Ok(out) };
    let in_base: Vec<&str> = base_url
        .and_then(|u| u.split_once('?'))
        .map(|(_, q)| q.split('&').map(|pair| pair.split_once('=').map_or(pair, |(n, _)| n)).collect())
        .unwrap_or_default();
    for (name, value) in table {
        let key = format!("target.query.{name}");
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(c.err(&key, "is not a usable parameter name", "name the parameter, e.g. \"api-version\""));
        }
        if in_base.contains(&name.as_str()) {
            return Err(c.err(
                &key,
                format!("the base URL already carries the query parameter {name:?}"),
                "keep it in one place: in target.query, or in target.base_url",
            ));
        }
        let value = value_of(c, &key, value)?;
        if value.chars().any(char::is_control) {
            return Err(c.err(&key, "the value holds a control character", "give the value on one line"));
        }
        let public = crate::redact::keeps_query_value(name, &value);
        let secret = !public && NamedValues::echo_checked(name, &value);
        out.push(name.clone(), value, secret);
    }
    Ok(out)
}

/// `base_url` with the parameters appended (percent-encoded), after any query it has.
pub fn with_query(base_url: &str, query: &NamedValues) -> String {
    if query.is_empty() {
        return base_url.to_string();
    }
    let pairs: Vec<String> = query.iter().map(|(n, v)| format!("{}={}", encode(n), encode(v))).collect();
    let joiner = if base_url.contains('?') { '&' } else { '?' };
    format!("{base_url}{joiner}{}", pairs.join("&"))
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_base_urls_query_encoded() {
        let mut q = NamedValues::default();
        q.push("api-version".into(), "2024-10-21".into(), false);
        q.push("t".into(), "a b&c".into(), true);
        assert_eq!(with_query("http://h/v1", &q), "http://h/v1?api-version=2024-10-21&t=a%20b%26c");
        assert_eq!(with_query("http://h/v1?x=1", &q), "http://h/v1?x=1&api-version=2024-10-21&t=a%20b%26c");
        assert_eq!(with_query("http://h/v1", &NamedValues::default()), "http://h/v1");
        assert_eq!(q.secret_values().collect::<Vec<_>>(), ["a b&c"]);
    }
}
