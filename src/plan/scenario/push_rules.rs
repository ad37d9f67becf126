//! Validation of the push keys: `run.remote_write`, `run.otlp`, `run.push_interval` and
//! `run.push_token_env` (the flags `--remote-write` and `--otlp` set the first two).
//!
//! The keys live in `[run]`, not `[output]` as a peer's `output.*` would: in a scenario
//! `[output]` is the model's output (`ignore_eos`, `min_tokens`). Where the run pushes its
//! live metrics changes nothing it measures: the settings stay out of the serialized scenario
//! (so out of the artifact and the configuration fingerprint), and a URL's credentials are
//! used, never written.

use std::time::Duration;

use super::ScenarioError;
use super::checker::Checker;
use super::raw;

/// A push every this long, by default: Prometheus' own remote write batches every few
/// seconds, k6 pushes every 5 s; 10 s resolves a soak's curves at a few kilobytes a push.
pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(10);
/// Below this a push (a few kilobytes, a POST) would compete with the run it reports.
pub const MIN_PUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Above this a dashboard has nothing worth the name; the final push still happens.
pub const MAX_PUSH_INTERVAL: Duration = Duration::from_secs(600);

/// Where the live metrics are pushed, and how often.
#[derive(Debug, Clone, PartialEq)]
pub struct PushSettings {
    /// Prometheus remote write 1.0 (`…/api/v1/write`); may hold `user:password@` for basic auth.
    pub remote_write: Option<String>,
    /// OTLP/HTTP metrics (`…/v1/metrics`); may hold `user:password@` for basic auth.
    pub otlp: Option<String>,
    pub interval: Duration,
    /// A bearer token for both endpoints, read from `run.push_token_env` at validation.
    pub token: Option<PushToken>,
}

/// The push token. Its `Debug` never shows the value.
#[derive(Clone, PartialEq)]
pub struct PushToken(String);

impl PushToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PushToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PushToken([hidden])")
    }
}

pub(super) fn push(c: &Checker, r: &raw::RawRun) -> Result<Option<PushSettings>, ScenarioError> {
    let remote_write = r.remote_write.as_deref().map(|u| url(c, "run.remote_write", u, "/api/v1/write")).transpose()?;
    let otlp = r.otlp.as_deref().map(|u| url(c, "run.otlp", u, "/v1/metrics")).transpose()?;
    if remote_write.is_none() && otlp.is_none() {
        for (key, set) in
            [("run.push_interval", r.push_interval.is_some()), ("run.push_token_env", r.push_token_env.is_some())]
        {
            if set {
                return Err(c.err(
                    key,
                    "is set but nothing is pushed",
                    "add run.remote_write = \"http://host:9090/api/v1/write\" (or --remote-write URL), run.otlp = \"http://host:4318/v1/metrics\" (or --otlp URL), or remove the key",
                ));
            }
        }
        return Ok(None);
    }
    let interval = c.duration("run.push_interval", r.push_interval.as_deref(), DEFAULT_PUSH_INTERVAL)?;
    if !(MIN_PUSH_INTERVAL..=MAX_PUSH_INTERVAL).contains(&interval) {
        return Err(c.err(
            "run.push_interval",
            format!("{} is outside 100ms–10m", humantime::format_duration(interval)),
            "give a duration such as \"5s\" or \"10s\" (the default)",
        ));
    }
    let token = match r.push_token_env.as_deref() {
        None => None,
        Some(var) if var.trim().is_empty() => {
            return Err(c.err(
                "run.push_token_env",
                "is empty",
                "name an environment variable, e.g. push_token_env = \"PUSH_TOKEN\", or remove the key",
            ));
        }
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.is_empty() && http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() => {
                return Err(c.err(
                    "run.push_token_env",
                    format!(
                        "the token in the environment variable {var} holds a line break or another control character, which an HTTP header cannot carry"
                    ),
                    format!("export it without them, e.g. export {var}=\"$(printf %s \"${var}\" | tr -d '\\r\\n')\""),
                ));
            }
            Ok(token) if !token.is_empty() => Some(PushToken(token)),
            _ => {
                return Err(c.err(
                    "run.push_token_env",
                    format!("names the environment variable {var}, which is not set or empty"),
                    format!("export {var}=<the receiver's token> before running, or remove push_token_env"),
                ));
            }
        },
    };
    // Both would be an `Authorization` header: one request cannot carry two.
    let with_userinfo = |u: &String| reqwest::Url::parse(u).is_ok_and(|u| !u.username().is_empty());
    if token.is_some() && remote_write.iter().chain(&otlp).any(with_userinfo) {
        return Err(c.err(
            "run.push_token_env",
            "is set while a push URL holds user:password@ (basic auth)",
            "keep one way to authenticate: remove push_token_env, or the credentials from the URL",
        ));
    }
    Ok(Some(PushSettings { remote_write, otlp, interval, token }))
}

/// An http(s) URL with a host; `path` is the usual one, for the fix.
fn url(c: &Checker, key: &str, text: &str, path: &str) -> Result<String, ScenarioError> {
    let text = text.trim_matches(' ');
    super::url_rules::check(text).map_err(|problem| c.err(key, problem, super::url_rules::FIX))?;
    let fix = format!("write it like \"http://127.0.0.1:9090{path}\"");
    let url = reqwest::Url::parse(text)
        .map_err(|e| c.err(key, format!("{:?} is not a URL ({e})", crate::redact::redact_url(text)), &fix))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(c.err(key, format!("{:?} is not an http:// or https:// URL", url.scheme()), &fix));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(c.err(key, "has no host", &fix));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::scenario::{Overrides, Scenario};

    const BASE: &str = "[target]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n";
    const WORKLOAD: &str = "[workload]\ncontext_tokens = 512\nmax_context_tokens = 4096\nmax_tokens = 16\n";

    fn load(run_extra: &str) -> Result<Scenario, ScenarioError> {
        let text = format!("{BASE}\n[run]\nrequests = 1\n{run_extra}\n{WORKLOAD}");
        Scenario::from_toml(Path::new("s.toml"), &text, &Overrides::default())
    }

    #[test]
    fn off_by_default() {
        assert_eq!(load("").expect("valid").run.push, None);
    }

    #[test]
    fn urls_are_kept_with_their_credentials_and_never_serialized() {
        let s = load(
            "remote_write = \"http://u:secret@10.0.0.5:9090/api/v1/write\"\notlp = \"https://otel:4318/v1/metrics\"\npush_interval = \"2s\"",
        )
        .expect("valid");
        let p = s.run.push.clone().expect("on");
        assert_eq!(p.remote_write.as_deref(), Some("http://u:secret@10.0.0.5:9090/api/v1/write"));
        assert_eq!(p.otlp.as_deref(), Some("https://otel:4318/v1/metrics"));
        assert_eq!(p.interval, Duration::from_secs(2));
        let json = serde_json::to_string(&s).expect("serialize");
        assert!(!json.contains("secret") && !json.contains("10.0.0.5") && !json.contains("otel"), "{json}");
        let alone = load("").expect("valid");
        assert_eq!(
            serde_json::to_value(&alone).expect("serialize"),
            serde_json::to_value(&s).expect("serialize"),
            "where the live metrics go is not part of what was measured (nor of the fingerprint)"
        );
    }

    #[test]
    fn one_endpoint_is_enough_and_the_interval_defaults_to_ten_seconds() {
        let p = load("otlp = \"http://127.0.0.1:4318/v1/metrics\"").expect("valid").run.push.expect("on");
        assert_eq!((p.remote_write, p.interval), (None, DEFAULT_PUSH_INTERVAL));
    }

    #[test]
    fn the_token_comes_from_the_environment_and_never_shows() {
        // A variable every test process has, read as the token would be.
        let path = std::env::var("PATH").expect("PATH is set");
        let p = load("remote_write = \"http://h:9090/api/v1/write\"\npush_token_env = \"PATH\"")
            .expect("valid")
            .run
            .push
            .expect("on");
        assert_eq!(p.token.as_ref().map(PushToken::expose), Some(path.as_str()));
        assert!(!format!("{p:?}").contains(&path));
    }

    #[test]
    fn bad_values_name_the_key_with_a_fix() {
        let cases = [
            ("remote_write = \"ftp://h/api/v1/write\"", "run.remote_write"),
            ("remote_write = \"not a url\"", "run.remote_write"),
            ("remote_write = \"http://h/a\\nb\"", "run.remote_write"),
            ("otlp = \"file:///tmp/x\"", "run.otlp"),
            ("otlp = 5", "run.otlp"),
            ("push_interval = \"5s\"", "run.push_interval"),
            ("push_token_env = \"X\"", "run.push_token_env"),
            ("otlp = \"http://h:4318/v1/metrics\"\npush_interval = \"10ms\"", "run.push_interval"),
            ("otlp = \"http://h:4318/v1/metrics\"\npush_interval = \"1h\"", "run.push_interval"),
            ("otlp = \"http://h:4318/v1/metrics\"\npush_interval = \"soon\"", "run.push_interval"),
            ("otlp = \"http://h:4318/v1/metrics\"\npush_token_env = \"\"", "run.push_token_env"),
            ("otlp = \"http://u:p@h:4318/v1/metrics\"\npush_token_env = \"PATH\"", "run.push_token_env"),
            (
                "otlp = \"http://h:4318/v1/metrics\"\npush_token_env = \"ANVIL_TEST_PUSH_TOKEN_UNSET\"",
                "run.push_token_env",
            ),
        ];
        for (run, key) in cases {
            let err = load(run).expect_err(&format!("{run} must be refused"));
            assert!(err.key == key || err.to_string().contains(key), "{run}: {err}");
            assert!(!err.fix.is_empty(), "{err}");
        }
        let err = load("remote_write = \"http://u:hunter2@h/api/v1/write x\"").expect_err("a space");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
