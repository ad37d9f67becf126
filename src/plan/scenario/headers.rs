//! `target.headers` (and `--header 'K: V'`): headers sent with every request, their values
//! written in the scenario or read once from an environment variable (`{ env = "NAME" }`).
//!
//! A header value is a secret (a gateway's key, a tenant token): the scenario as written into
//! artifacts and records keeps the names only ([`NamedValues`] serializes as a list of names), and
//! every value joins the run's `Secrets`, so that nothing written carries it. The headers the
//! tool or the HTTP client owns are refused, each with the key that owns it.

use std::fmt;

use serde::Serialize;

use super::ScenarioError;
use super::checker::Checker;

/// A value that is never shown: its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct Hidden(String);

impl Hidden {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

/// One name and its value; `secret` unless the value is public (a version-shaped `api-version`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    name: String,
    value: Hidden,
    secret: bool,
}

/// Shorter values under a name that does not look secret are not looked for in the server's
/// answers (see `NamedValues::echo_checked`).
pub const ECHO_MIN_CHARS: usize = 4;

/// Names and values in the order given, names as written. Serialized as the list of the names,
/// never a value, so the configuration's fingerprint does not depend on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedValues(Vec<Entry>);

impl NamedValues {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(name, value)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|e| (e.name.as_str(), e.value.expose()))
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|e| e.name.as_str())
    }

    /// The values nothing written may carry.
    pub fn secret_values(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().filter(|e| e.secret).map(|e| e.value.expose().to_string())
    }

    /// Whether a name is present, ignoring ASCII case.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|e| e.name.eq_ignore_ascii_case(name))
    }

    /// Whether a value is looked for in what the server sends back: under a secret-looking name
    /// (`…key`, `…token`, `…auth…`) always, else from [`ECHO_MIN_CHARS`] characters on (a flag
    /// such as `1` or `on` would withhold every message holding it). No value is ever written by
    /// the tool, whatever its length.
    pub(super) fn echo_checked(name: &str, value: &str) -> bool {
        crate::redact::is_secret_param(name) || value.chars().count() >= ECHO_MIN_CHARS
    }

    pub(super) fn push(&mut self, name: String, value: String, secret: bool) {
        self.0.push(Entry { name, value: Hidden(value), secret });
    }
}

impl Serialize for NamedValues {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

/// A value of `target.headers` or `target.query`: text, or `{ env = "NAME" }` read now. `key` is
/// the entry's key path for messages. The value itself is never quoted in a message.
pub(super) fn value_of(c: &Checker, key: &str, value: &toml::Value) -> Result<String, ScenarioError> {
    const FIX: &str = "write the value as text, or as { env = \"NAME\" } to read it from an environment variable";
    match value {
        toml::Value::String(text) if text.is_empty() => {
            Err(c.err(key, "is empty", "give a value, or remove the entry"))
        }
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Table(t) => {
            let var = match (t.get("env"), t.len()) {
                (Some(toml::Value::String(var)), 1) if !var.trim().is_empty() => var,
                _ => return Err(c.err(key, "is a table, but not { env = \"NAME\" }", FIX)),
            };
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => Ok(v),
                _ => Err(c.err(
                    key,
                    format!("names the environment variable {var}, which is not set or empty"),
                    format!("export {var}=<value> before running, or remove the entry"),
                )),
            }
        }
        other => Err(c.err(key, format!("is a {}, not text", other.type_str()), FIX)),
    }
}

/// Whether `name` is an RFC 9110 token: one or more of letters, digits and ``!#$%&'*+-.^_`|~``.
fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Which key headers the run sends itself: `x-api-key` (the messages API with a key) and
/// `api-key` (the azure dialect with a key).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KeyHeaders {
    pub x_api_key: bool,
    pub api_key: bool,
}

/// Why the tool refuses a header of this name, and the fix: the client or the tool sets it.
fn owned(name: &str, keys: KeyHeaders) -> Option<(&'static str, &'static str)> {
    const REMOVE: &str = "remove it: the HTTP client manages it for each connection";
    Some(match name.to_ascii_lowercase().as_str() {
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "te" | "trailer" | "upgrade" => {
            ("is a hop-by-hop header, which belongs to each connection, not to the request", REMOVE)
        }
        "host" => (
            "is set by the HTTP client from the base URL",
            "put the host in target.base_url (a gateway routing on Host is reached by its own name)",
        ),
        "content-length" => ("is set by the HTTP client from each request's body", "remove it"),
        "content-type" | "accept" => {
            ("is set by the tool for the API it speaks (target.api)", "remove it; target.api chooses the API")
        }
        "authorization" => (
            "carries the API key, which target.api_key_env owns (sent as a bearer token)",
            "put the key in an environment variable and name it: api_key_env = \"MY_KEY\"",
        ),
        "x-api-key" if keys.x_api_key => (
            "carries the API key of the messages API, which target.api_key_env owns",
            "remove it; the key of target.api_key_env is sent as x-api-key",
        ),
        "api-key" if keys.api_key => (
            "carries the key of the azure dialect, which target.api_key_env owns",
            "remove it; the key of target.api_key_env is sent as api-key",
        ),
        "anthropic-version" => {
            ("is owned by target.anthropic_version", "set anthropic_version = \"2023-06-01\" instead")
        }
        _ => return None,
    })
}

/// Why a header value cannot be sent, if it cannot: no line break or NUL (a header would end
/// there), and only what an HTTP header carries (visible ASCII, spaces, tabs).
fn bad_value(value: &str) -> Option<&'static str> {
    if value.contains(['\r', '\n']) {
        Some("holds a line break, which would end the header (a value read with $(cat file) keeps its newline)")
    } else if value.contains('\0') {
        Some("holds a NUL character, which no HTTP header can carry")
    } else if !value.is_ascii() || reqwest::header::HeaderValue::from_str(value).is_err() {
        Some("holds a character an HTTP header cannot carry (only visible ASCII, spaces and tabs)")
    } else if value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']) {
        Some("starts or ends with a space or tab, which HTTP drops")
    } else {
        None
    }
}

/// The validated `target.headers`: every name a token, none the tool owns, none twice (ASCII case
/// ignored), every value sendable. The problems name the entry, never its value.
pub(super) fn headers(
    c: &Checker,
    table: Option<&toml::Table>,
    keys: KeyHeaders,
) -> Result<NamedValues, ScenarioError> {
    let mut out = NamedValues::default();
    let Some(table) = table else { return Ok(out) };
    for (name, value) in table {
        let key = format!("target.headers.{name}");
        if !is_token(name) {
            return Err(c.err(
                &key,
                format!("{:?} is not a header name", super::url_rules::escaped(name)),
                "a header name is letters, digits and !#$%&'*+-.^_`|~ only, e.g. \"X-Tenant\"",
            ));
        }
        if let Some((problem, fix)) = owned(name, keys) {
            return Err(c.err(&key, problem, fix));
        }
        if let Some(first) = out.names().find(|n| n.eq_ignore_ascii_case(name)) {
            return Err(c.err(
                &key,
                format!("is the header {first:?} again (header names ignore case)"),
                "keep one of the two",
            ));
        }
        let value = value_of(c, &key, value)?;
        if let Some(problem) = bad_value(&value) {
            return Err(c.err(&key, format!("the value {problem}"), "give the value on one line of visible ASCII"));
        }
        let secret = NamedValues::echo_checked(name, &value);
        out.push(name.clone(), value, secret);
    }
    Ok(out)
}

/// `--header 'K: V'` into the scenario's `target.headers`: split at the first colon, both sides
/// trimmed. It replaces a header of the same name (ASCII case ignored) the file gives; the same
/// name twice on the command line is refused.
pub(super) fn add_flags(table: &mut toml::Table, flags: &[String], c: &mut Checker) -> Result<(), ScenarioError> {
    if flags.is_empty() {
        return Ok(());
    }
    let target = table.entry("target").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(target) = target.as_table_mut() else { return Ok(()) };
    let headers = target.entry("headers").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(headers) = headers.as_table_mut() else {
        return Err(c.err("target.headers", "is not a table", "write headers = { \"X-Tenant\" = \"team-a\" }"));
    };
    let mut given: Vec<String> = Vec::new();
    for flag in flags {
        let Some((name, value)) = flag.split_once(':') else {
            return Err(c.err(
                "target.headers",
                "a --header is not NAME: VALUE (no colon)",
                "write it as --header 'X-Tenant: team-a'",
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if given.iter().any(|g| g.eq_ignore_ascii_case(name)) {
            return Err(c.err(
                &format!("target.headers.{name}"),
                "is given twice with --header",
                "give each header once",
            ));
        }
        given.push(name.to_string());
        headers.retain(|k, _| !k.eq_ignore_ascii_case(name));
        headers.insert(name.to_string(), toml::Value::String(value.to_string()));
        c.set_by(format!("target.headers.{name}"), "--header");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_tokens_and_owned_headers_are_refused() {
        assert!(is_token("X-Tenant") && is_token("api-key") && !is_token("X Tenant") && !is_token(""));
        assert!(!is_token("X:y") && !is_token("é"));
        let none = KeyHeaders::default();
        for name in ["Connection", "TE", "Host", "content-length", "Accept", "Authorization", "anthropic-version"] {
            assert!(owned(name, none).is_some(), "{name}");
        }
        assert!(owned("x-api-key", none).is_none() && owned("api-key", none).is_none());
        assert!(owned("x-api-key", KeyHeaders { x_api_key: true, api_key: false }).is_some());
        assert!(owned("API-Key", KeyHeaders { x_api_key: false, api_key: true }).is_some());
        assert!(owned("X-Tenant", KeyHeaders { x_api_key: true, api_key: true }).is_none());
    }

    #[test]
    fn values_never_show_and_serialize_as_names() {
        let mut v = NamedValues::default();
        v.push("X-Tenant".into(), "team-a".into(), true);
        assert!(!format!("{v:?}").contains("team-a"));
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"["X-Tenant"]"#);
        assert_eq!(bad_value("a\nb").map(|p| p.contains("line break")), Some(true));
        assert!(bad_value("a\0b").is_some() && bad_value(" a").is_some() && bad_value("é").is_some());
        assert!(bad_value("Bearer x-1").is_none());
    }
}
