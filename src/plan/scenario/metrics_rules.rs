//! Validation of the server-metrics keys: `target.metrics_url`, `target.metrics` and
//! `run.metrics_interval`.

use std::time::Duration;

use super::checker::Checker;
use super::raw;
use super::{MetricsEndpoint, ScenarioError, ServerMetricsSettings};

/// Scrapes between the start and the end of a level, by default. AIPerf scrapes every 100 ms
/// and llm-d every 15 s; 5 s resolves a level of a minute or more at a negligible cost.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(5);
/// Below this a scrape of a large vLLM exposition (tens of kilobytes) would compete with the
/// server's own work.
pub const MIN_METRICS_INTERVAL: Duration = Duration::from_millis(100);
/// Above this a level has no time series worth the name; start and end scrapes still happen.
pub const MAX_METRICS_INTERVAL: Duration = Duration::from_secs(600);

pub(super) fn server_metrics(
    c: &Checker,
    t: &raw::RawTarget,
    r: &raw::RawRun,
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
    Ok(Some(ServerMetricsSettings { endpoint, interval }))
}

fn metrics_url(c: &Checker, text: &str) -> Result<String, ScenarioError> {
    // Spaces around a pasted URL are harmless; every other hidden character is refused.
    let text = text.trim_matches(' ');
    super::url_rules::check(text).map_err(|problem| c.err("target.metrics_url", problem, super::url_rules::FIX))?;
    let fix = "write it like \"http://127.0.0.1:8000/metrics\"";
    let url = reqwest::Url::parse(text).map_err(|e| {
        c.err("target.metrics_url", format!("{:?} is not a URL ({e})", crate::redact::redact_url(text)), fix)
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(c.err("target.metrics_url", format!("{:?} is not an http:// or https:// URL", url.scheme()), fix));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(c.err("target.metrics_url", "has no host", fix));
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
}
