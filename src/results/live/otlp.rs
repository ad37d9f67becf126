//! A reading of the live metrics as an OTLP/HTTP metrics export
//! (<https://opentelemetry.io/docs/specs/otlp/#otlphttp>): an `ExportMetricsServiceRequest`
//! protobuf POSTed to `/v1/metrics` with `Content-Type: application/x-protobuf`.
//!
//! Protobuf, not the JSON mapping: every OTLP receiver takes it (Prometheus' own OTLP receiver
//! took nothing else at first), the messages are the same `prost` derives as remote write's,
//! and the JSON mapping's rules (64-bit integers as strings, enums as numbers, lowerCamelCase
//! keys) would be more code, and more to get wrong, than the dozen messages below, copied by
//! field number from `opentelemetry/proto/metrics/v1/metrics.proto`.
//!
//! One resource (`service.name = "anvil-load"`, `service.version`, `service.instance.id` and
//! `anvil.run_id` = the run's id, and the reading's constant labels such as `shard`), one scope,
//! one metric per family. Counters are monotonic cumulative Sums from the run's start, gauges
//! Gauges, histograms explicit-bucket Histograms: OTLP counts each bucket on its own
//! (`bucket_counts`, one more than `explicit_bounds`, the last above the last bound), where
//! Prometheus counts cumulatively. The names are the exposition's (`anvil_ttft_seconds`), unit
//! included, so one dashboard reads both paths: an OpenTelemetry Collector's Prometheus
//! exporter adds no second `_seconds` or `_total`. The constant labels are also every data
//! point's attributes, so `shard` stays a label where resource attributes are not promoted.

use super::snapshot::{Kind, Snapshot, Value};

/// `Content-Type` of a push.
pub const CONTENT_TYPE: &str = "application/x-protobuf";

/// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const CUMULATIVE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// Only the string form is sent: every attribute here is a name or an id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(string, tag = "1")]
    pub string_value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    /// UCUM: `s` for times, `{request}`-like annotations for counts.
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "Data", tags = "5, 7, 9")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Histogram),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

/// `as_double` (field 4) of the `value` oneof; `as_int` (6) is never sent.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(double, optional, tag = "4")]
    pub as_double: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    /// Per bucket, not cumulative: one more than `explicit_bounds`.
    #[prost(fixed64, repeated, tag = "6")]
    pub bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
}

/// Who pushes: the resource every point belongs to.
#[derive(Debug, Clone)]
pub struct Source {
    pub run_id: String,
    /// When the cumulative counts started (the run's start), nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
}

/// The export request of one reading.
pub fn export_request(snapshot: &Snapshot, source: &Source) -> ExportMetricsServiceRequest {
    let string = |key: &str, value: &str| KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { string_value: value.to_string() }),
    };
    let constant: Vec<KeyValue> = snapshot.constant_labels.iter().map(|(k, v)| string(k, v)).collect();
    let mut resource = vec![
        string("service.name", "anvil-load"),
        string("service.version", env!("CARGO_PKG_VERSION")),
        string("service.instance.id", &source.run_id),
        string("anvil.run_id", &source.run_id),
    ];
    resource.extend(constant.iter().cloned());
    let time_unix_nano = u64::try_from(snapshot.taken_unix_ms).unwrap_or(0).saturating_mul(1_000_000);
    let start_unix_nano = source.start_unix_ns.min(time_unix_nano);
    let metrics = snapshot
        .families
        .iter()
        .map(|family| {
            let attributes = |labels: &[(&'static str, String)]| -> Vec<KeyValue> {
                constant.iter().cloned().chain(labels.iter().map(|(k, v)| string(k, v))).collect()
            };
            let numbers = || -> Vec<NumberDataPoint> {
                family
                    .series
                    .iter()
                    .filter_map(|s| match &s.value {
                        Value::Number(v) => Some(NumberDataPoint {
                            attributes: attributes(&s.labels),
                            start_time_unix_nano: start_unix_nano,
                            time_unix_nano,
                            as_double: Some(*v),
                        }),
                        Value::Histogram(_) => None,
                    })
                    .collect()
            };
            let data = match family.kind {
                Kind::Counter => {
                    Data::Sum(Sum { data_points: numbers(), aggregation_temporality: CUMULATIVE, is_monotonic: true })
                }
                Kind::Gauge => Data::Gauge(Gauge { data_points: numbers() }),
                Kind::Histogram => Data::Histogram(Histogram {
                    aggregation_temporality: CUMULATIVE,
                    data_points: family
                        .series
                        .iter()
                        .filter_map(|s| match &s.value {
                            Value::Histogram(h) => Some(HistogramDataPoint {
                                attributes: attributes(&s.labels),
                                start_time_unix_nano: start_unix_nano,
                                time_unix_nano,
                                count: h.count,
                                sum: Some(h.sum),
                                bucket_counts: per_bucket(&h.cumulative, h.count),
                                explicit_bounds: h.cumulative.iter().map(|(bound, _)| *bound).collect(),
                            }),
                            Value::Number(_) => None,
                        })
                        .collect(),
                }),
            };
            Metric {
                name: family.name.clone(),
                description: family.help.to_string(),
                unit: unit(&family.name).to_string(),
                data: Some(data),
            }
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes: resource }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "anvil-load".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                metrics,
            }],
        }],
    }
}

/// The body of a push.
pub fn body(request: &ExportMetricsServiceRequest) -> Vec<u8> {
    prost::Message::encode_to_vec(request)
}

/// Prometheus' cumulative counts (`≤ bound`) as OTLP's per-bucket counts, the last bucket
/// above the last bound. A count below the one before it (never, from one reading) gives 0.
pub fn per_bucket(cumulative: &[(f64, u64)], count: u64) -> Vec<u64> {
    let mut below = 0;
    let mut counts: Vec<u64> = cumulative
        .iter()
        .map(|(_, c)| {
            let n = c.saturating_sub(below);
            below = below.max(*c);
            n
        })
        .collect();
    counts.push(count.saturating_sub(below));
    counts
}

/// The UCUM unit the name's suffix states.
fn unit(name: &str) -> &'static str {
    if name.ends_with("_seconds") || name.ends_with("_seconds_total") {
        "s"
    } else if name.ends_with("tokens_total") {
        "{token}"
    } else if name.contains("request") {
        "{request}"
    } else {
        "1"
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn decoded() -> ExportMetricsServiceRequest {
        let source = Source { run_id: "anvil-20250101T000000Z-abcd".into(), start_unix_ns: 1_699_999_990_000_000_000 };
        let bytes = body(&export_request(&super::super::remote_write::tests::reading(), &source));
        ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("an ExportMetricsServiceRequest")
    }

    fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
        attributes.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref()).map(|v| v.string_value.as_str())
    }

    fn metric<'a>(r: &'a ExportMetricsServiceRequest, name: &str) -> &'a Metric {
        let scope = &r.resource_metrics[0].scope_metrics[0];
        scope.metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn the_resource_names_the_service_the_run_and_the_shard() {
        let r = decoded();
        assert_eq!(r.resource_metrics.len(), 1);
        let resource = r.resource_metrics[0].resource.as_ref().expect("resource");
        assert_eq!(attr(&resource.attributes, "service.name"), Some("anvil-load"));
        assert_eq!(attr(&resource.attributes, "anvil.run_id"), Some("anvil-20250101T000000Z-abcd"));
        assert_eq!(attr(&resource.attributes, "shard"), Some("1"));
        let scope = r.resource_metrics[0].scope_metrics[0].scope.as_ref().expect("scope");
        assert_eq!(scope.name, "anvil-load");
    }

    #[test]
    fn counters_are_monotonic_cumulative_sums_from_the_run_start() {
        let r = decoded();
        let m = metric(&r, "anvil_requests_total");
        assert_eq!(m.unit, "{request}");
        let Some(Data::Sum(sum)) = &m.data else { panic!("a Sum: {m:?}") };
        assert!(sum.is_monotonic);
        assert_eq!(sum.aggregation_temporality, CUMULATIVE);
        assert_eq!(sum.data_points.len(), 2);
        let completed =
            sum.data_points.iter().find(|p| attr(&p.attributes, "outcome") == Some("completed")).expect("completed");
        assert_eq!(completed.as_double, Some(7.0));
        assert_eq!(attr(&completed.attributes, "level"), Some("c4"));
        assert_eq!(attr(&completed.attributes, "shard"), Some("1"), "constant labels on every point");
        assert_eq!(completed.time_unix_nano, 1_700_000_000_123_000_000);
        assert_eq!(completed.start_time_unix_nano, 1_699_999_990_000_000_000);
        let Some(Data::Gauge(g)) = &metric(&r, "anvil_requests_in_flight").data else { panic!("a Gauge") };
        assert_eq!(g.data_points[0].as_double, Some(3.0));
    }

    #[test]
    fn histograms_count_each_bucket_on_its_own_with_one_above_the_last_bound() {
        let r = decoded();
        let m = metric(&r, "anvil_ttft_seconds");
        assert_eq!(m.unit, "s");
        let Some(Data::Histogram(h)) = &m.data else { panic!("a Histogram: {m:?}") };
        assert_eq!(h.aggregation_temporality, CUMULATIVE);
        let p = &h.data_points[0];
        // Cumulative 1, 4, 6 of 7 → per bucket 1, 3, 2, and 1 above 1 s.
        assert_eq!(p.explicit_bounds, [0.0025, 0.1, 1.0]);
        assert_eq!(p.bucket_counts, [1, 3, 2, 1]);
        assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
        assert_eq!((p.count, p.sum), (7, Some(2.5)));
    }

    #[test]
    fn per_bucket_never_goes_negative() {
        assert_eq!(per_bucket(&[], 3), [3]);
        assert_eq!(per_bucket(&[(1.0, 2), (2.0, 2)], 2), [2, 0, 0]);
        assert_eq!(per_bucket(&[(1.0, 5), (2.0, 4)], 4), [5, 0, 0]);
    }

    #[test]
    fn the_start_is_never_after_the_point() {
        let source = Source { run_id: "r".into(), start_unix_ns: u64::MAX };
        let r = export_request(&super::super::remote_write::tests::reading(), &source);
        let Some(Data::Sum(sum)) = &r.resource_metrics[0].scope_metrics[0].metrics[0].data else { panic!("sum") };
        assert!(sum.data_points[0].start_time_unix_nano <= sum.data_points[0].time_unix_nano);
    }
}
