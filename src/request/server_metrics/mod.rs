//! The server's own view beside the run: its Prometheus `/metrics` scraped at the start, every
//! `run.metrics_interval` and at the end of each level, mapped per engine to a small
//! normalised set (`names`), written raw (sanitized and bounded: `raw`) and normalised to
//! `<level>.server-metrics.ndjson` (`scraper`), and folded into a per-level summary of counter deltas and gauge statistics
//! (`summary`) with its warnings and the server-versus-client token cross-check (`check`);
//! with several replicas, each replica's own `/metrics`, kept apart (`replicas`); other
//! endpoints (`target.metrics_urls`), each kept apart (`endpoints`); the NVIDIA DCGM exporter's
//! GPU fields wherever they appear, summarised per GPU with the level's energy (`gpu`).
//!
//! # The parser crate
//!
//! The exposition format is parsed by `prom_text_format_parser` (MIT OR Apache-2.0; a winnow
//! grammar of the text format), chosen after reading the source of the candidates:
//! - `prometheus-parse` 0.2.5 matches names with the regex `\w+`, so every name with a colon,
//!   which is every vLLM, SGLang and llama.cpp metric, is silently dropped; label values are
//!   split on `,` and `=` with no escapes. Unusable here.
//! - `openmetrics-parser` 0.5.1 has a complete pest grammar but is LGPL-3.0, which a statically
//!   linked MIT/Apache binary cannot take on lightly.
//! - `prometheus-exposition-format-rs` 0.1.2 is on nom 5 and `assert!`s on input it does not
//!   expect, so a server's bytes could panic the scraper.
//! - `openmetrics` 0.2.1 restricts label values to `[A-Za-z0-9_.]`, so `le="+Inf"` or
//!   `model_name="Qwen/Qwen3-8B"` fail.
//!
//! `prom_text_format_parser` gets names with colons, escaped label values, `NaN`/`±Inf`,
//! timestamps and histogram/summary families right, and its `parse_scrape` returns the families
//! it could assemble besides its errors, which matters: prometheus_client exposes `# HELP`/
//! `# TYPE` with no samples for labelled families not yet used, which the crate reports as an
//! error but still returns every other family. Its one weakness, rejecting a whole body for one
//! line it cannot lex, is handled in `parse` by asking the crate about each line alone and
//! parsing the accepted lines again, so no grammar is written here.

mod check;
mod endpoints;
mod file;
mod gpu;
mod names;
mod parse;
mod raw;
mod replicas;
mod scraper;
mod summary;

pub use check::{
    ClientTokens, CountsDiffer, SERVER_COUNTS_TOLERANCE, ServerMetricsWarning, server_counts_differ, warnings,
};
pub use endpoints::{EndpointScrapers, PreparedEndpoints, ScrapingEndpoints};
pub use gpu::{DCGM_FIELDS, EnergySource, GpuField, GpuSummary, GpuTelemetry};
pub use names::{ALIASES, Alias, DASHBOARD_NAMES, Engine, Norm, Normalised, normalise};
pub use parse::{Parsed, Series, parse};
pub use raw::{MAX_KEY_BYTES, MAX_RAW_SERIES, RAW_BUDGET_BYTES, disk_bytes_per_level};
pub use replicas::{PreparedReplicas, ReplicaScrapers, ScrapingReplicas};
pub use scraper::{LevelScraper, MAX_BODY_BYTES, PreparedLevel, SCRAPE_TIMEOUT, Scraper};
pub use summary::{GaugeSummary, LevelServerMetrics, ScrapePoint, SpecDecode};

use crate::plan::scenario::MetricsEndpoint;

/// The scrape file of a level, beside its artifact.
pub fn file_name(level: &str) -> String {
    format!("{level}.server-metrics.ndjson")
}

/// The URL to scrape: the configured one, or `scheme://host:port/metrics` of the base URL
/// (credentials kept for the request).
pub fn resolve_url(endpoint: &MetricsEndpoint, base_url: &str) -> Result<String, String> {
    match endpoint {
        MetricsEndpoint::Url { url } => Ok(url.clone()),
        MetricsEndpoint::BesideBaseUrl => {
            let mut url = reqwest::Url::parse(base_url).map_err(|e| {
                format!("cannot derive the metrics URL from the base URL ({e}); set target.metrics_url")
            })?;
            url.set_path("/metrics");
            url.set_query(None);
            url.set_fragment(None);
            Ok(url.to_string())
        }
    }
}

/// Whether the metrics URL is on the API's server (same scheme, host and port as the base URL):
/// the run's own headers (a gateway's key or tenant header usually guards `/metrics` too) are
/// sent with the scrape then, and never to another server.
pub fn beside_base_url(metrics_url: &str, base_url: &str) -> bool {
    match (reqwest::Url::parse(metrics_url), reqwest::Url::parse(base_url)) {
        (Ok(m), Ok(b)) => {
            m.scheme() == b.scheme()
                && m.host_str() == b.host_str()
                && m.port_or_known_default() == b.port_or_known_default()
        }
        _ => false,
    }
}

/// A URL fit for files and messages: the one redaction of every URL written
/// (`redact::redact_url`: no user-info, no query value).
pub fn display_url(url: &str) -> String {
    crate::redact::redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_url_sits_beside_the_base_url() {
        let beside = MetricsEndpoint::BesideBaseUrl;
        assert_eq!(resolve_url(&beside, "http://127.0.0.1:8000/v1").as_deref(), Ok("http://127.0.0.1:8000/metrics"));
        assert_eq!(
            resolve_url(&beside, "https://u:p@gpu-1:443/api/v1?x=1").as_deref(),
            Ok("https://u:p@gpu-1/metrics")
        );
        assert!(resolve_url(&beside, "not a url").is_err());
        let given = MetricsEndpoint::Url { url: "http://h:9/m".into() };
        assert_eq!(resolve_url(&given, "http://other/v1").as_deref(), Ok("http://h:9/m"));
    }

    #[test]
    fn display_urls_never_carry_credentials() {
        assert_eq!(display_url("http://user:secret@h:8000/metrics"), "http://h:8000/metrics");
        assert_eq!(display_url("http://h:8000/metrics"), "http://h:8000/metrics");
        assert!(!display_url("ht!tp://user:secret@h").contains("secret"));
        assert_eq!(display_url("http://h:8000/metrics?token=s3cret"), "http://h:8000/metrics?token=[redacted]");
        assert_eq!(file_name("run-c4"), "run-c4.server-metrics.ndjson");
    }
}
