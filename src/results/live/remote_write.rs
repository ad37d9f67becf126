//! A reading of the live metrics as a Prometheus remote write 1.0 request
//! (<https://prometheus.io/docs/specs/remote_write_spec/>): a `WriteRequest` protobuf, snappy
//! block-compressed, POSTed with the spec's three headers.
//!
//! The messages are the four of `prompb` the spec names (`WriteRequest`, `TimeSeries`, `Label`,
//! `Sample`), written with `prost`'s derive: no build script, no `protoc`, and the same crate
//! encodes OTLP (`otlp`) and decodes both in the tests. Each series carries `__name__` and its
//! labels sorted by name, one sample at the reading's time. Counters keep their `_total` name;
//! a histogram becomes its classic series, `_bucket{le="…"}` (cumulative, `+Inf` last),
//! `_sum` and `_count`, as a scrape of `/metrics` would store them.

use super::snapshot::{Kind, Snapshot, Value};

/// `Content-Type` of a push.
pub const CONTENT_TYPE: &str = "application/x-protobuf";
/// `Content-Encoding` of a push: the snappy block format (not the framed one).
pub const CONTENT_ENCODING: &str = "snappy";
/// `X-Prometheus-Remote-Write-Version`: 1.0 of the spec sends `0.1.0`.
pub const VERSION_HEADER: (&str, &str) = ("X-Prometheus-Remote-Write-Version", "0.1.0");

/// The NaN bit pattern that marks a series as ended (`value.StaleNaN` in Prometheus): a sender
/// must send it when a series will no longer be appended to.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// `prometheus.WriteRequest`; fields 2 and 3 are reserved in 1.0.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: labels sorted by name, samples in time order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// One value at a time, milliseconds since the Unix epoch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The write request of one reading, every sample at `snapshot.taken_unix_ms`.
pub fn write_request(snapshot: &Snapshot) -> WriteRequest {
    let mut timeseries = Vec::new();
    let at = snapshot.taken_unix_ms;
    for family in &snapshot.families {
        for series in &family.series {
            let labels = |name: &str, le: Option<String>| {
                let mut labels: Vec<Label> = snapshot
                    .constant_labels
                    .iter()
                    .chain(&series.labels)
                    .map(|(name, value)| Label { name: (*name).to_string(), value: value.clone() })
                    .chain(le.map(|le| Label { name: "le".into(), value: le }))
                    .chain(std::iter::once(Label { name: "__name__".into(), value: name.to_string() }))
                    .collect();
                // The spec: sorted by name, byte-wise (`__name__` sorts first: `_` < `a`).
                labels.sort_by(|a, b| a.name.cmp(&b.name));
                labels
            };
            let mut push = |name: &str, le: Option<String>, value: f64| {
                timeseries
                    .push(TimeSeries { labels: labels(name, le), samples: vec![Sample { value, timestamp: at }] });
            };
            match (&series.value, family.kind) {
                (Value::Number(v), Kind::Counter | Kind::Gauge) => push(&family.name, None, *v),
                (Value::Histogram(h), Kind::Histogram) => {
                    let bucket = format!("{}_bucket", family.name);
                    for (bound, count) in &h.cumulative {
                        push(&bucket, Some(le(*bound)), *count as f64);
                    }
                    push(&bucket, Some("+Inf".into()), h.count as f64);
                    push(&format!("{}_sum", family.name), None, h.sum);
                    push(&format!("{}_count", family.name), None, h.count as f64);
                }
                // A reading pairs a family's kind with its values; a mismatch is a bug upstream,
                // and a pushed series of the wrong type would mislead: it is left out.
                _ => debug_assert!(false, "{} holds a value of another kind", family.name),
            }
        }
    }
    WriteRequest { timeseries }
}

/// The same series, each with one stale marker at `at_unix_ms`: sent after the last push so a
/// graph ends where the run did instead of holding the last value for five minutes.
pub fn stale_markers(last: &WriteRequest, at_unix_ms: i64) -> WriteRequest {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let timeseries = last
        .timeseries
        .iter()
        .map(|t| TimeSeries { labels: t.labels.clone(), samples: vec![Sample { value: stale, timestamp: at_unix_ms }] })
        .collect();
    WriteRequest { timeseries }
}

/// The body of a push: the protobuf bytes, snappy block-compressed.
pub fn body(request: &WriteRequest) -> Vec<u8> {
    let bytes = prost::Message::encode_to_vec(request);
    // Only fails for inputs over ~4 GiB; a reading is a few kilobytes.
    snap::raw::Encoder::new().compress_vec(&bytes).unwrap_or_default()
}

/// A bucket's upper bound as the `le` label: the shortest decimal that reads back as the same
/// number (`0.0025`, `1`, `600`), as Prometheus' Go clients write it.
pub fn le(bound: f64) -> String {
    if bound == f64::INFINITY { "+Inf".to_string() } else { format!("{bound}") }
}

#[cfg(test)]
pub(super) mod tests {
    use prost::Message;

    use super::*;
    use crate::results::live::snapshot::{Buckets, Family, Series};

    pub(crate) fn reading() -> Snapshot {
        Snapshot {
            taken_unix_ms: 1_700_000_000_123,
            constant_labels: vec![("shard", "1".into())],
            families: vec![
                Family {
                    name: "anvil_requests_total".into(),
                    help: "requests",
                    kind: Kind::Counter,
                    series: vec![
                        Series {
                            labels: vec![("outcome", "completed".into()), ("level", "c4".into())],
                            value: Value::Number(7.0),
                        },
                        Series {
                            labels: vec![("outcome", "failed".into()), ("level", "c4".into())],
                            value: Value::Number(2.0),
                        },
                    ],
                },
                Family {
                    name: "anvil_requests_in_flight".into(),
                    help: "in flight",
                    kind: Kind::Gauge,
                    series: vec![Series { labels: vec![("level", "c4".into())], value: Value::Number(3.0) }],
                },
                Family {
                    name: "anvil_ttft_seconds".into(),
                    help: "ttft",
                    kind: Kind::Histogram,
                    series: vec![Series {
                        labels: vec![("level", "c4".into())],
                        value: Value::Histogram(Buckets {
                            cumulative: vec![(0.0025, 1), (0.1, 4), (1.0, 6)],
                            count: 7,
                            sum: 2.5,
                        }),
                    }],
                },
            ],
        }
    }

    fn decoded(body: &[u8]) -> WriteRequest {
        let bytes = snap::raw::Decoder::new().decompress_vec(body).expect("snappy block format");
        WriteRequest::decode(bytes.as_slice()).expect("a WriteRequest")
    }

    fn find<'a>(w: &'a WriteRequest, name: &str, extra: &[(&str, &str)]) -> &'a TimeSeries {
        w.timeseries
            .iter()
            .find(|t| {
                t.labels.iter().any(|l| l.name == "__name__" && l.value == name)
                    && extra.iter().all(|(n, v)| t.labels.iter().any(|l| l.name == *n && l.value == *v))
            })
            .unwrap_or_else(|| panic!("no {name} {extra:?} in {w:?}"))
    }

    #[test]
    fn every_series_has_its_name_first_and_labels_sorted_by_name() {
        let w = decoded(&body(&write_request(&reading())));
        // 2 counters, 1 gauge, and a histogram of 3 bounds: 4 buckets, _sum, _count.
        assert_eq!(w.timeseries.len(), 2 + 1 + 4 + 2);
        for t in &w.timeseries {
            let names: Vec<&str> = t.labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(names, sorted, "sorted and unique: {t:?}");
            assert_eq!(names[0], "__name__");
            assert!(names.contains(&"shard"), "the constant label on every series: {t:?}");
            assert_eq!(t.samples, vec![Sample { value: t.samples[0].value, timestamp: 1_700_000_000_123 }]);
        }
        let completed = find(&w, "anvil_requests_total", &[("outcome", "completed"), ("level", "c4")]);
        assert_eq!(completed.samples[0].value, 7.0);
        let names: Vec<&str> = completed.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "level", "outcome", "shard"]);
        assert_eq!(find(&w, "anvil_requests_in_flight", &[]).samples[0].value, 3.0);
    }

    #[test]
    fn a_histogram_is_its_cumulative_buckets_with_inf_then_sum_and_count() {
        let w = decoded(&body(&write_request(&reading())));
        let bucket = |le: &str| find(&w, "anvil_ttft_seconds_bucket", &[("le", le)]).samples[0].value;
        assert_eq!([bucket("0.0025"), bucket("0.1"), bucket("1"), bucket("+Inf")], [1.0, 4.0, 6.0, 7.0]);
        assert_eq!(find(&w, "anvil_ttft_seconds_sum", &[]).samples[0].value, 2.5);
        assert_eq!(find(&w, "anvil_ttft_seconds_count", &[]).samples[0].value, 7.0);
        let inf = find(&w, "anvil_ttft_seconds_bucket", &[("le", "+Inf")]);
        let names: Vec<&str> = inf.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "le", "level", "shard"]);
        assert!(!w.timeseries.iter().any(|t| t.labels.iter().any(|l| l.value == "anvil_ttft_seconds")));
    }

    #[test]
    fn stale_markers_repeat_every_series_with_prometheus_stale_nan() {
        let last = write_request(&reading());
        let stale = decoded(&body(&stale_markers(&last, 1_700_000_000_200)));
        assert_eq!(stale.timeseries.len(), last.timeseries.len());
        for (s, l) in stale.timeseries.iter().zip(&last.timeseries) {
            assert_eq!(s.labels, l.labels);
            assert_eq!(s.samples.len(), 1);
            assert_eq!(s.samples[0].value.to_bits(), STALE_NAN_BITS, "the exact bits survive the wire");
            assert_eq!(s.samples[0].timestamp, 1_700_000_000_200);
        }
    }

    #[test]
    fn le_reads_back_as_the_same_bound() {
        for bound in crate::results::live::names::BUCKETS_SECONDS {
            assert_eq!(le(bound).parse::<f64>().ok(), Some(bound));
        }
        assert_eq!(le(1.0), "1");
        assert_eq!(le(0.0025), "0.0025");
        assert_eq!(le(f64::INFINITY), "+Inf");
    }

    #[test]
    fn the_body_is_a_snappy_block_not_a_frame() {
        let b = body(&write_request(&reading()));
        // The framed format starts with its stream identifier chunk (0xff "sNaPpY").
        assert_ne!(b.first(), Some(&0xff));
        assert!(snap::raw::decompress_len(&b).is_ok());
    }
}
