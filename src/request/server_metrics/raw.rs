//! The `raw` part of a scrape line: the series the server exported, as `name{labels}` → value,
//! made safe and bounded before anything is stored.
//!
//! - **Safe**: every name, label name and label value goes through the run's sanitizer
//!   (`Secrets::label`): a gateway that labels its series per API key, or a server that echoes
//!   the metrics URL's `?token=`, gets `[redacted]` in its place; control, bidi and invisible
//!   characters become spaces; URLs in values are redacted.
//! - **Bounded per scrape**: at most [`MAX_RAW_SERIES`] series are kept, the known engines'
//!   series first (those the normalised set reads, then the rest of their prefix), then the
//!   others, each group in key order so the same series are kept scrape after scrape. The rest
//!   are counted (`raw_left_out`). A real engine exports hundreds of series (vLLM's histograms
//!   included, some thousands with eight data-parallel engines); a 150,000-series exposition
//!   would otherwise write tens of megabytes a minute.
//! - **Bounded per key**: a key longer than [`MAX_KEY_BYTES`] is cut and ends in `…#` and 16 hex
//!   digits of the SHA-256 of the whole sanitized key, so two long keys stay apart.
//! - **Bounded per level**: once a level's file holds [`RAW_BUDGET_BYTES`], later lines carry
//!   the normalised values only, and say how many series they left out.
//!
//! Only what is written is bounded: the counters and gauges of the level's summary are read
//! from every series of every scrape.

use std::collections::BTreeMap;
use std::time::Duration;

use super::names::{Engine, lookup};
use super::parse::Series;
use crate::redact::Secrets;

/// Series kept in one scrape line's `raw`.
pub const MAX_RAW_SERIES: usize = 4096;
/// Longest key kept whole, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest name or label value kept, in characters, before the key's own bound.
const MAX_PART_CHARS: usize = 128;
/// Bytes of one level's scrape file after which lines no longer carry `raw`.
pub const RAW_BUDGET_BYTES: u64 = 64 << 20;
/// The most one line can take: every kept key at its bound, escaped, with its value.
const MAX_LINE_BYTES: u64 = MAX_RAW_SERIES as u64 * (2 * MAX_KEY_BYTES as u64 + 32) + 4096;
/// A line without `raw`: its phase, times and the normalised values.
const SMALL_LINE_BYTES: u64 = 1024;

/// What one scrape writes of its series.
#[derive(Debug, Default)]
pub struct Raw {
    pub series: BTreeMap<String, f64>,
    /// Series of the scrape not in `series`.
    pub left_out: usize,
}

/// The series of one scrape to write: sanitized, the known engines' first, at most
/// [`MAX_RAW_SERIES`].
pub fn raw_series(series: &[Series], secrets: &Secrets) -> Raw {
    let mut ranked: Vec<(u8, String, usize)> = series.iter().enumerate().map(|(i, s)| (rank(s), s.key(), i)).collect();
    let left_out = ranked.len().saturating_sub(MAX_RAW_SERIES);
    if left_out > 0 {
        ranked.select_nth_unstable(MAX_RAW_SERIES - 1);
        ranked.truncate(MAX_RAW_SERIES);
    }
    let mut out = BTreeMap::new();
    for (_, _, i) in ranked {
        let s = &series[i];
        // Two series that differ only in what was redacted become one key: their values add
        // up, as `sum by` the remaining labels would.
        *out.entry(safe_key(s, secrets)).or_insert(0.0) += s.value;
    }
    Raw { series: out, left_out }
}

/// Which series are kept first: 0 those the normalised set reads, 1 the rest of a known
/// engine's, 2 any other.
fn rank(s: &Series) -> u8 {
    if lookup(&s.name).is_some() || super::gpu::field(&s.name).is_some() {
        0
    } else if Engine::of_name(&s.name).is_some() {
        1
    } else {
        2
    }
}

/// `name{label="value",…}` with every part sanitized, labels sorted as exposed, at most
/// [`MAX_KEY_BYTES`].
fn safe_key(s: &Series, secrets: &Secrets) -> String {
    let mut labels: Vec<&(String, String)> = s.labels.iter().collect();
    labels.sort();
    let mut key = secrets.label(&s.name, MAX_PART_CHARS);
    if !labels.is_empty() {
        let inner: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{}=\"{}\"", secrets.label(k, MAX_PART_CHARS), secrets.label(v, MAX_PART_CHARS)))
            .collect();
        key.push('{');
        key.push_str(&inner.join(","));
        key.push('}');
    }
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    let suffix = format!("…#{hex}");
    let mut cut = MAX_KEY_BYTES - suffix.len();
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    key.truncate(cut);
    key.push_str(&suffix);
    key
}

/// The most one level's scrape file can take on disk: the raw budget, or fewer full lines when
/// the level's length bounds the scrapes, and the normalised lines after it. `level` is the
/// level's planned length when known.
pub fn disk_bytes_per_level(level: Option<Duration>, interval: Duration) -> u64 {
    let Some(level) = level else { return RAW_BUDGET_BYTES + MAX_LINE_BYTES };
    // Start, end and one per interval.
    let scrapes = (level.as_secs_f64() / interval.as_secs_f64().max(0.001)).ceil() as u64 + 2;
    scrapes
        .saturating_mul(MAX_LINE_BYTES)
        .min(RAW_BUDGET_BYTES + MAX_LINE_BYTES)
        .saturating_add(scrapes.saturating_mul(SMALL_LINE_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
            value,
        }
    }

    #[test]
    fn secrets_in_names_and_labels_are_replaced_where_they_stand() {
        let secrets = Secrets::new(Some("sk-live-42"), "http://h/v1").and_url("http://h/metrics?token=tok-metrics-9");
        let scrape = [
            series("gateway_requests_total", &[("api_key", "sk-live-42"), ("route", "/v1")], 3.0),
            series("gateway_requests_total", &[("api_key", "other-team"), ("route", "/v1")], 4.0),
            series("echo_tok-metrics-9", &[("bidi", "a\u{202E}b\nc")], 1.0),
        ];
        let raw = raw_series(&scrape, &secrets);
        let text = format!("{:?}", raw.series);
        assert!(!text.contains("sk-live-42") && !text.contains("tok-metrics-9"), "{text}");
        assert_eq!(raw.series[r#"gateway_requests_total{api_key="[redacted]",route="/v1"}"#], 3.0);
        assert_eq!(raw.series[r#"gateway_requests_total{api_key="other-team",route="/v1"}"#], 4.0);
        assert_eq!(raw.series[r#"echo_[redacted]{bidi="a b c"}"#], 1.0);
        assert_eq!(raw.left_out, 0);
    }

    #[test]
    fn a_scrape_keeps_at_most_the_bound_the_engines_series_first() {
        let mut scrape: Vec<Series> =
            (0..MAX_RAW_SERIES + 500).map(|i| series("noise", &[("i", &i.to_string())], 1.0)).collect();
        scrape.push(series("vllm:num_requests_running", &[], 2.0));
        scrape.push(series("vllm:some_histogram_bucket", &[("le", "1")], 5.0));
        let raw = raw_series(&scrape, &Secrets::default());
        assert_eq!(raw.series.len(), MAX_RAW_SERIES);
        assert_eq!(raw.left_out, 502);
        assert_eq!(raw.series["vllm:num_requests_running"], 2.0);
        assert_eq!(raw.series[r#"vllm:some_histogram_bucket{le="1"}"#], 5.0);
        // The same series are kept scrape after scrape, whatever order they come in.
        scrape.reverse();
        assert_eq!(
            raw_series(&scrape, &Secrets::default()).series.keys().collect::<Vec<_>>(),
            raw.series.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn long_keys_are_cut_and_stay_apart() {
        let long = "v".repeat(300);
        let a = raw_series(&[series("m", &[("a", &format!("{long}1"))], 1.0)], &Secrets::default());
        let b = raw_series(&[series("m", &[("a", &format!("{long}2")), ("b", "x")], 1.0)], &Secrets::default());
        let (ka, kb) = (a.series.keys().next().unwrap(), b.series.keys().next().unwrap());
        assert!(ka.len() <= MAX_KEY_BYTES && kb.len() <= MAX_KEY_BYTES, "{ka} {kb}");
        assert_ne!(ka, kb);
        let wide = raw_series(&[series(&"名".repeat(200), &[], 1.0)], &Secrets::default());
        assert!(wide.series.keys().next().unwrap().len() <= MAX_KEY_BYTES);
    }

    #[test]
    fn a_levels_file_is_bounded_on_disk() {
        let long = disk_bytes_per_level(None, Duration::from_millis(100));
        assert!(long <= RAW_BUDGET_BYTES + MAX_LINE_BYTES);
        let short = disk_bytes_per_level(Some(Duration::from_secs(10)), Duration::from_secs(5));
        assert_eq!(short, 4 * MAX_LINE_BYTES + 4 * SMALL_LINE_BYTES);
    }
}
