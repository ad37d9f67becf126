//! Validation of the server-metrics keys: `target.metrics_url`, `target.metrics`,
//! `target.metrics_urls` and `run.metrics_interval`.

use std::time::Duration;

use super::checker::Checker;
use super::raw;
use super::{Endpoint, MetricsEndpoint, ScenarioError, ServerMetricsSettings, Target};

/// Scrapes between the start and the end of a level, by default. AIPerf scrapes every 100 ms
/// and llm-d every 15 s; 5 s resolves a level of a minute or more at a negligible cost.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(5);
/// Below this a scrape of a large vLLM exposition (tens of kilobytes) would compete with the
/// server's own work.
pub const MIN_METRICS_INTERVAL: Duration = Duration::from_millis(100);
/// Above this a level has no time series worth the name; start and end scrapes still happen.
pub const MAX_METRICS_INTERVAL: Duration = Duration::from_secs(600);
/// `target.metrics_urls` entries, at most: each is scraped every interval on its own
/// connection and writes its own file per level (bounded like the server's), so a node's GPUs
/// and a few replicas fit and a pasted inventory does not.
pub const MAX_METRICS_URLS: usize = 16;

pub(super) fn server_metrics(
    c: &Checker,
    t: &raw::RawTarget,
    r: &raw::RawRun,
    target: &Target,
) -> Result<Option<ServerMetricsSettings>, ScenarioError> {
    let endpoint = match (&t.metrics_url, t.metrics) {
        (Some(_), Some(true)) => {
            return Err(c.err(
                "target.metrics",
                "is set together with target.metrics_url",
                "keep metrics_url to scrape that URL, or metrics = true to scrape /metrics beside the base URL",
            ));
        }
        (Some(_), Some(false)) => {
            return Err(c.err(
                "target.metrics",
                "is false while target.metrics_url is set",
                "remove metrics_url to turn scraping off, or remove metrics = false",
            ));
        }
        (Some(url), None) => Some(MetricsEndpoint::Url { url: metrics_url(c, url)? }),
        (None, Some(true)) => Some(MetricsEndpoint::BesideBaseUrl),
        (None, Some(false) | None) => None,
    };
    let Some(endpoint) = endpoint else {
        if t.metrics_urls.is_some() {
            return Err(c.err(
                "target.metrics_urls",
                "is set but the server's own metrics are not scraped",
                "add target.metrics = true (the server's /metrics beside the base URL) or target.metrics_url; \
                 the listed endpoints are kept beside the server's, in server_metrics.endpoints[]",
            ));
        }
        if r.metrics_interval.is_some() {
            return Err(c.err(
                "run.metrics_interval",
                "is set but no server metrics are scraped",
                "add target.metrics = true (or target.metrics_url = \"http://host:port/metrics\"), or remove the key",
            ));
        }
        return Ok(None);
    };
    let interval = c.duration("run.metrics_interval", r.metrics_interval.as_deref(), DEFAULT_METRICS_INTERVAL)?;
    if !(MIN_METRICS_INTERVAL..=MAX_METRICS_INTERVAL).contains(&interval) {
        return Err(c.err(
            "run.metrics_interval",
            format!("{} is outside 100ms–10m", humantime::format_duration(interval)),
            "give a duration such as \"1s\" or \"5s\" (the default)",
        ));
    }
    let endpoints = match &t.metrics_urls {
        Some(urls) => metrics_urls(c, urls, &endpoint, target)?,
        None => Vec::new(),
    };
    Ok(Some(ServerMetricsSettings { endpoint, interval, endpoints }))
}

fn metrics_url(c: &Checker, text: &str) -> Result<String, ScenarioError> {
    checked_url(c, "target.metrics_url", text)
}

fn checked_url(c: &Checker, key: &str, text: &str) -> Result<String, ScenarioError> {
    // Spaces around a pasted URL are harmless; every other hidden character is refused.
    let text = text.trim_matches(' ');
    super::url_rules::check(text).map_err(|problem| c.err(key, problem, super::url_rules::FIX))?;
    let fix = "write it like \"http://127.0.0.1:8000/metrics\"";
    let url = reqwest::Url::parse(text)
        .map_err(|e| c.err(key, format!("{:?} is not a URL ({e})", crate::redact::redact_url(text)), fix))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(c.err(key, format!("{:?} is not an http:// or https:// URL", url.scheme()), fix));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(c.err(key, "has no host", fix));
    }
    Ok(url.to_string())
}

/// `target.metrics_urls`: each entry checked like `metrics_url`; none twice, and none the
/// server's own endpoint (the one `metrics_url` names, or `/metrics` beside a base URL when
/// `metrics = true`), which is scraped already and would be counted twice.
fn metrics_urls(
    c: &Checker,
    urls: &[String],
    server: &MetricsEndpoint,
    target: &Target,
) -> Result<Vec<String>, ScenarioError> {
    const KEY: &str = "target.metrics_urls";
    if urls.is_empty() {
        return Err(c.err(
            KEY,
            "is an empty list",
            "list the endpoints to scrape beside the server's, or remove the key",
        ));
    }
    if urls.len() > MAX_METRICS_URLS {
        return Err(c.err(
            KEY,
            format!("lists {} endpoints, more than {MAX_METRICS_URLS}", urls.len()),
            "scrape the endpoints that matter to this run (the GPUs' DCGM exporter, a node exporter), or aggregate them in Prometheus",
        ));
    }
    let mut server_urls: Vec<String> = Vec::new();
    match server {
        MetricsEndpoint::Url { url } => server_urls.push(url.clone()),
        MetricsEndpoint::BesideBaseUrl => {
            let mut bases: Vec<&str> = Vec::new();
            if let Endpoint::Remote { base_url } = &target.endpoint {
                bases.push(base_url);
            }
            if let Some(r) = &target.replicas {
                bases.extend(r.base_urls.iter().map(String::as_str));
            }
            server_urls.extend(bases.into_iter().filter_map(beside));
        }
    }
    let server_keys: Vec<String> = server_urls.iter().filter_map(|u| same_endpoint_key(u)).collect();
    let mut seen: Vec<String> = Vec::with_capacity(urls.len());
    let mut checked = Vec::with_capacity(urls.len());
    for (i, text) in urls.iter().enumerate() {
        let key = format!("{KEY}[{i}]");
        let url = checked_url(c, &key, text)?;
        let same = same_endpoint_key(&url).unwrap_or_else(|| url.clone());
        if let Some(j) = seen.iter().position(|s| *s == same) {
            return Err(c.err(
                &key,
                format!("{:?} is listed twice (also at [{j}])", crate::redact::redact_url(&url)),
                "list each endpoint once",
            ));
        }
        if server_keys.contains(&same) {
            return Err(c.err(
                &key,
                format!("{:?} is the server's own metrics endpoint, scraped already", crate::redact::redact_url(&url)),
                "remove it from metrics_urls: the server's metrics are in server_metrics itself",
            ));
        }
        seen.push(same);
        checked.push(url);
    }
    Ok(checked)
}

/// `/metrics` beside a base URL, as the run derives it.
fn beside(base_url: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(base_url).ok()?;
    url.set_path("/metrics");
    url.set_query(None);
    url.set_fragment(None);
    Some(url.to_string())
}

/// What makes two metrics URLs the same endpoint: scheme, host, port, path and query, whatever
/// credentials each carries.
fn same_endpoint_key(url: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(url).ok()?;
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::scenario::{Overrides, Scenario};

    const BASE: &str = "[target]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n";
    const WORKLOAD: &str = "[workload]\ncontext_tokens = 512\nmax_context_tokens = 4096\nmax_tokens = 16\n";

    fn load(target_extra: &str, run_extra: &str) -> Result<Scenario, ScenarioError> {
        let text = format!("{BASE}{target_extra}\n[run]\nrequests = 1\n{run_extra}\n{WORKLOAD}");
        Scenario::from_toml(Path::new("s.toml"), &text, &Overrides::default())
    }

    #[test]
    fn off_by_default_and_absent_from_the_serialized_scenario() {
        let s = load("", "").expect("valid");
        assert_eq!(s.target.metrics, None);
        let json = serde_json::to_value(&s).expect("serialize");
        assert!(json["target"].get("metrics").is_none(), "{json}");
    }

    #[test]
    fn metrics_true_scrapes_beside_the_base_url_every_five_seconds() {
        let s = load("metrics = true", "").expect("valid");
        let m = s.target.metrics.expect("on");
        assert_eq!(m.endpoint, MetricsEndpoint::BesideBaseUrl);
        assert_eq!(m.interval, Duration::from_secs(5));
    }

    #[test]
    fn metrics_url_is_kept_and_serialized_without_credentials() {
        let s = load("metrics_url = \"http://u:secret@10.0.0.5:9000/metrics\"", "metrics_interval = \"250ms\"")
            .expect("valid");
        let m = s.target.metrics.clone().expect("on");
        assert_eq!(m.endpoint, MetricsEndpoint::Url { url: "http://u:secret@10.0.0.5:9000/metrics".into() });
        assert_eq!(m.interval, Duration::from_millis(250));
        let json = serde_json::to_string(&s).expect("serialize");
        assert!(!json.contains("secret"), "{json}");
        assert!(json.contains("http://10.0.0.5:9000/metrics"), "{json}");
    }

    #[test]
    fn bad_combinations_and_values_name_the_key() {
        let cases = [
            ("metrics_url = \"http://h/metrics\"\nmetrics = true", "", "target.metrics"),
            ("metrics_url = \"http://h/metrics\"\nmetrics = false", "", "target.metrics"),
            ("metrics_url = \"ftp://h/metrics\"", "", "target.metrics_url"),
            ("metrics_url = \"not a url\"", "", "target.metrics_url"),
            ("", "metrics_interval = \"5s\"", "run.metrics_interval"),
            ("metrics = true", "metrics_interval = \"10ms\"", "run.metrics_interval"),
            ("metrics = true", "metrics_interval = \"1h\"", "run.metrics_interval"),
            ("metrics = true", "metrics_interval = \"often\"", "run.metrics_interval"),
            ("metrics = true", "metrics_interval = \"0s\"", "run.metrics_interval"),
        ];
        for (target, run, key) in cases {
            let err = load(target, run).expect_err(&format!("{target} / {run} must be refused"));
            assert_eq!(err.key, key, "{err}");
            assert!(!err.fix.is_empty(), "{err}");
        }
        let err = load("metrics = false", "metrics_interval = \"5s\"").expect_err("interval without scraping");
        assert_eq!(err.key, "run.metrics_interval");
    }

    #[test]
    fn metrics_urls_are_kept_in_order_and_serialized_without_credentials() {
        let s = load(
            "metrics = true\nmetrics_urls = [\"http://gpu-node:9400/metrics\", \"http://u:pw@10.0.0.5:9100/metrics\"]",
            "",
        )
        .expect("valid");
        let m = s.target.metrics.clone().expect("on");
        assert_eq!(m.endpoints, ["http://gpu-node:9400/metrics", "http://u:pw@10.0.0.5:9100/metrics"]);
        let json = serde_json::to_value(&s).expect("serialize");
        assert_eq!(
            json["target"]["metrics"]["endpoints"],
            serde_json::json!(["http://gpu-node:9400/metrics", "http://10.0.0.5:9100/metrics"])
        );
        assert!(!json.to_string().contains("pw@"), "{json}");
        let without = load("metrics = true", "").expect("valid");
        let json = serde_json::to_value(&without).expect("serialize");
        assert!(json["target"]["metrics"].get("endpoints").is_none(), "{json}");
    }

    #[test]
    fn bad_metrics_urls_name_the_entry_and_the_fix() {
        let cases = [
            ("metrics_urls = [\"http://g:9400/metrics\"]", "target.metrics_urls"),
            ("metrics = false\nmetrics_urls = [\"http://g:9400/metrics\"]", "target.metrics_urls"),
            ("metrics = true\nmetrics_urls = []", "target.metrics_urls"),
            ("metrics = true\nmetrics_urls = [\"http://g:9400/metrics\", \"ftp://g/m\"]", "target.metrics_urls[1]"),
            ("metrics = true\nmetrics_urls = [\"not a url\"]", "target.metrics_urls[0]"),
            (
                "metrics = true\nmetrics_urls = [\"http://g:9400/metrics\", \"http://u:p@g:9400/metrics\"]",
                "target.metrics_urls[1]",
            ),
            ("metrics = true\nmetrics_urls = [\"http://127.0.0.1:8000/metrics\"]", "target.metrics_urls[0]"),
            ("metrics_url = \"http://h:1/m\"\nmetrics_urls = [\"http://h:1/m\"]", "target.metrics_urls[0]"),
        ];
        for (target, key) in cases {
            let err = load(target, "").expect_err(&format!("{target} must be refused"));
            assert_eq!(err.key, key, "{target}: {err}");
            assert!(!err.fix.is_empty(), "{err}");
        }
        let many: Vec<String> = (0..=MAX_METRICS_URLS).map(|i| format!("\"http://g{i}:9400/metrics\"")).collect();
        let err = load(&format!("metrics = true\nmetrics_urls = [{}]", many.join(", ")), "").expect_err("too many");
        assert_eq!(err.key, "target.metrics_urls");
    }
}
