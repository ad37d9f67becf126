//! A `Snapshot` as a scrape body: the Prometheus text format 0.0.4, or OpenMetrics 1.0.0 text
//! when the scraper's `Accept` asks for it (Prometheus itself does, first).
//!
//! Written here rather than with the `prometheus-client` crate: its text encoder writes
//! OpenMetrics only (no 0.0.4, the format every scraper reads and the project's own parser
//! reads), it appends `_total` to counter names itself while our names carry it already (the
//! names are fixed once, in `names`), and what it would replace is the hundred lines below.
//!
//! The formats: <https://prometheus.io/docs/instrumenting/exposition_formats/> and
//! <https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md>. The
//! two differ here only in three ways: OpenMetrics names a counter's family without its
//! `_total` (the samples keep it), states the unit of `_seconds` families (`# UNIT`), and ends
//! with `# EOF`.

use std::fmt::Write;

use super::snapshot::{Family, Kind, Series, Snapshot, Value};

/// Which text format a scrape gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it is named at all (a scraper
    /// that names it reads it), else the Prometheus text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.to_ascii_lowercase().contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The whole body.
pub fn render(s: &Snapshot, format: Format) -> String {
    let mut out = String::with_capacity(16 * 1024);
    for f in &s.families {
        family(&mut out, s, f, format);
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

fn family(out: &mut String, s: &Snapshot, f: &Family, format: Format) {
    let kind = match f.kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    };
    let described = match (format, f.kind) {
        (Format::OpenMetrics, Kind::Counter) => f.name.strip_suffix("_total").unwrap_or(&f.name),
        _ => &f.name,
    };
    let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {described} {help}");
    let _ = writeln!(out, "# TYPE {described} {kind}");
    if format == Format::OpenMetrics && described.ends_with("_seconds") {
        let _ = writeln!(out, "# UNIT {described} seconds");
    }
    for series in &f.series {
        match &series.value {
            Value::Number(v) => sample(out, &f.name, s, series, None, *v),
            Value::Histogram(b) => {
                let bucket = format!("{}_bucket", f.name);
                for &(bound, n) in &b.cumulative {
                    sample(out, &bucket, s, series, Some(&number(bound)), n as f64);
                }
                sample(out, &bucket, s, series, Some("+Inf"), b.count as f64);
                sample(out, &format!("{}_sum", f.name), s, series, None, b.sum);
                sample(out, &format!("{}_count", f.name), s, series, None, b.count as f64);
            }
        }
    }
}

fn sample(out: &mut String, name: &str, s: &Snapshot, series: &Series, le: Option<&str>, value: f64) {
    out.push_str(name);
    let labels = s.constant_labels.iter().chain(&series.labels).map(|(k, v)| (*k, v.as_str()));
    let labels: Vec<(&str, &str)> = labels.chain(le.map(|le| ("le", le))).collect();
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", number(value));
}

/// A float as both formats read it: integers without a fraction, `+Inf`/`-Inf`/`NaN` spelled
/// as the formats spell them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::live::snapshot::Buckets;

    fn snapshot() -> Snapshot {
        Snapshot {
            taken_unix_ms: 0,
            constant_labels: vec![("shard", "1".into())],
            families: vec![
                Family {
                    name: "anvil_requests_total".into(),
                    help: "Requests.\nAll of them.",
                    kind: Kind::Counter,
                    series: vec![Series { labels: vec![("level", "c\"8\\".into())], value: Value::Number(3.0) }],
                },
                Family {
                    name: "anvil_ttft_seconds".into(),
                    help: "TTFT.",
                    kind: Kind::Histogram,
                    series: vec![Series {
                        labels: vec![("level", "c8".into())],
                        value: Value::Histogram(Buckets {
                            cumulative: vec![(0.001, 1), (0.5, 2)],
                            count: 3,
                            sum: 1.25,
                        }),
                    }],
                },
            ],
        }
    }

    #[test]
    fn the_text_format_has_every_sample_with_escaped_labels() {
        let body = render(&snapshot(), Format::Prometheus);
        let expected = "# HELP anvil_requests_total Requests.\\nAll of them.\n\
                        # TYPE anvil_requests_total counter\n\
                        anvil_requests_total{shard=\"1\",level=\"c\\\"8\\\\\"} 3\n\
                        # HELP anvil_ttft_seconds TTFT.\n\
                        # TYPE anvil_ttft_seconds histogram\n\
                        anvil_ttft_seconds_bucket{shard=\"1\",level=\"c8\",le=\"0.001\"} 1\n\
                        anvil_ttft_seconds_bucket{shard=\"1\",level=\"c8\",le=\"0.5\"} 2\n\
                        anvil_ttft_seconds_bucket{shard=\"1\",level=\"c8\",le=\"+Inf\"} 3\n\
                        anvil_ttft_seconds_sum{shard=\"1\",level=\"c8\"} 1.25\n\
                        anvil_ttft_seconds_count{shard=\"1\",level=\"c8\"} 3\n";
        assert_eq!(body, expected);
        let parsed = crate::request::server_metrics::parse(body.as_bytes()).expect("our own parser reads it");
        assert_eq!(parsed.skipped_lines, 0);
        assert_eq!(parsed.series.len(), 6, "{:?}", parsed.series);
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_states_units_and_ends() {
        let body = render(&snapshot(), Format::OpenMetrics);
        assert!(body.contains("# TYPE anvil_requests counter\n"), "{body}");
        assert!(body.contains("\nanvil_requests_total{"), "{body}");
        assert!(body.contains("# UNIT anvil_ttft_seconds seconds\n"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[test]
    fn accept_chooses_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
        assert_eq!(number(600.0), "600");
        assert_eq!(number(0.0025), "0.0025");
        assert_eq!(number(f64::INFINITY), "+Inf");
    }
}
