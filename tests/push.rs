//! The live metrics pushed for real: the binary against its embedded simulator pushing to a
//! receiver in the test (remote write and OTLP, decoded here with the messages written out from
//! the specs, not the client's), to a receiver that fails, and to Prometheus itself
//! (`--web.enable-remote-write-receiver`, queried with PromQL). The final push's counts equal
//! the artifact's.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{anvil, artifacts, check_artifact, run, scenario, text};
use prost::Message;
use serde_json::Value;

/// `prometheus.WriteRequest` and its parts, from the remote write 1.0 spec's proto.
mod prompb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }
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
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// The part of `opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest` read here.
mod otlp {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Request {
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
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(string, tag = "1")]
        pub string_value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeMetrics {
        #[prost(message, repeated, tag = "2")]
        pub metrics: Vec<Metric>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metric {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "7")]
        pub sum: Option<Sum>,
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
    pub struct NumberDataPoint {
        #[prost(message, repeated, tag = "7")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(double, tag = "4")]
        pub as_double: f64,
    }
}

/// What the receiver got: each POST's path, headers and body.
#[derive(Clone, Default)]
struct Received {
    posts: Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>,
    status: Arc<Mutex<u16>>,
}

async fn receiver(status: u16) -> (SocketAddr, Received) {
    let received = Received { status: Arc::new(Mutex::new(status)), ..Received::default() };
    let keep = |path: &'static str| {
        move |State(r): State<Received>, headers: HeaderMap, body: Bytes| async move {
            r.posts.lock().expect("lock").push((path.to_string(), headers, body));
            StatusCode::from_u16(*r.status.lock().expect("lock")).expect("status")
        }
    };
    let app = Router::new()
        .route("/api/v1/write", post(keep("/api/v1/write")))
        .route("/v1/metrics", post(keep("/v1/metrics")))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

fn run_pushing(dir: &Path, remote_write: &str, otlp: Option<&str>, interval: &str) -> Command {
    let mut cmd = anvil();
    cmd.arg(scenario("smoke.toml"))
        .args(["--tokenizer", "estimate", "--requests", "40", "--concurrency", "2", "--seed", "3"])
        .args(["--remote-write", remote_write])
        .args(["--set", &format!("run.push_interval=\"{interval}\"")])
        .arg("--out")
        .arg(dir.join("out"));
    if let Some(url) = otlp {
        cmd.args(["--otlp", url]);
    }
    cmd
}

fn the_artifact(dir: &Path) -> Value {
    let paths = artifacts(&dir.join("out"));
    assert_eq!(paths.len(), 1, "{paths:?}");
    check_artifact(&paths[0])
}

fn label<'a>(t: &'a prompb::TimeSeries, name: &str) -> Option<&'a str> {
    t.labels.iter().find(|l| l.name == name).map(|l| l.value.as_str())
}

fn write_request(body: &[u8]) -> prompb::WriteRequest {
    let bytes = snap::raw::Decoder::new().decompress_vec(body).expect("a snappy block");
    prompb::WriteRequest::decode(bytes.as_slice()).expect("a WriteRequest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_pushes_reach_a_receiver_and_the_final_one_is_the_artifact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, received) = receiver(200).await;
    let remote_write = format!("http://pusher:s3cret@{addr}/api/v1/write");
    let otlp_url = format!("http://{addr}/v1/metrics");
    let out = run(run_pushing(dir.path(), &remote_write, Some(&otlp_url), "100ms")).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("s3cret") && !text(&out.stdout).contains("s3cret"));
    let artifact = the_artifact(dir.path());
    let (completed, failed) =
        (artifact["completed"].as_u64().expect("completed"), artifact["failed"].as_u64().expect("failed"));
    assert_eq!(artifact["requests"].as_u64(), Some(completed + failed));
    for entry in std::fs::read_dir(dir.path().join("out")).expect("out") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
        assert!(
            !text(&bytes).contains("s3cret") && !text(&bytes).contains(&addr.to_string()),
            "nothing written names the receiver"
        );
    }

    let posts = received.posts.lock().expect("lock").clone();
    let writes: Vec<_> = posts.iter().filter(|(path, ..)| path == "/api/v1/write").collect();
    let exports: Vec<_> = posts.iter().filter(|(path, ..)| path == "/v1/metrics").collect();
    // The final push and the stale markers at least, and the final OTLP push.
    assert!(writes.len() >= 2 && !exports.is_empty(), "{} writes, {} exports", writes.len(), exports.len());

    for (_, headers, _) in &writes {
        let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert_eq!(h("content-encoding"), "snappy");
        assert_eq!(h("content-type"), "application/x-protobuf");
        assert_eq!(h("x-prometheus-remote-write-version"), "0.1.0");
        // "pusher:s3cret" in base64: the URL's credentials as basic auth.
        assert_eq!(h("authorization"), "Basic cHVzaGVyOnMzY3JldA==");
    }
    let decoded: Vec<prompb::WriteRequest> = writes.iter().map(|(_, _, body)| write_request(body)).collect();
    let mut last_time = i64::MIN;
    for w in &decoded {
        let t = w.timeseries[0].samples[0].timestamp;
        assert!(t > last_time, "every push later than the one before");
        last_time = t;
        for series in &w.timeseries {
            assert_eq!(series.labels[0].name, "__name__");
            assert!(series.labels.windows(2).all(|p| p[0].name < p[1].name), "sorted: {series:?}");
        }
    }
    let (stale, final_push) = (&decoded[decoded.len() - 1], &decoded[decoded.len() - 2]);
    assert!(
        stale.timeseries.iter().all(|t| t.samples[0].value.to_bits() == 0x7ff0_0000_0000_0002),
        "stale markers last"
    );
    assert_eq!(stale.timeseries.len(), final_push.timeseries.len());
    let requests = |outcome: Option<&str>| -> f64 {
        final_push
            .timeseries
            .iter()
            .filter(|t| label(t, "__name__") == Some("anvil_requests_total"))
            .filter(|t| outcome.is_none() || label(t, "outcome") == outcome)
            .map(|t| t.samples[0].value)
            .sum()
    };
    assert_eq!(requests(None), (completed + failed) as f64, "sum(anvil_requests_total) is the artifact's requests");
    assert_eq!(requests(Some("completed")), completed as f64);
    assert_eq!(requests(Some("failed")), failed as f64);
    let tokens: f64 = final_push
        .timeseries
        .iter()
        .filter(|t| label(t, "__name__") == Some("anvil_completion_tokens_total"))
        .map(|t| t.samples[0].value)
        .sum();
    assert_eq!(Some(tokens as u64), artifact["metrics"]["output_tokens"].as_u64());
    // Every series of a level is this run's one level (the run's own, such as the client's
    // lateness, have none).
    assert!(final_push.timeseries.iter().all(|t| label(t, "level").is_none_or(|l| l == "c2")));
    assert!(
        final_push
            .timeseries
            .iter()
            .filter(|t| label(t, "__name__") == Some("anvil_requests_total"))
            .all(|t| label(t, "level") == Some("c2"))
    );
    let names: std::collections::BTreeSet<&str> =
        final_push.timeseries.iter().filter_map(|t| label(t, "__name__")).collect();
    assert!(names.contains("anvil_ttft_seconds_bucket") && names.contains("anvil_requests_in_flight"), "{names:?}");
    assert!(final_push.timeseries.iter().all(|t| label(t, "shard").is_none()), "a run alone has no shard label");

    let (_, headers, body) = exports.last().expect("an OTLP push");
    assert_eq!(headers.get("content-type").and_then(|v| v.to_str().ok()), Some("application/x-protobuf"));
    assert!(headers.get("authorization").is_none());
    let export = otlp::Request::decode(body.as_ref()).expect("an ExportMetricsServiceRequest");
    let rm = &export.resource_metrics[0];
    let attr = |kv: &[otlp::KeyValue], key: &str| {
        kv.iter().find(|a| a.key == key).and_then(|a| a.value.clone()).map(|v| v.string_value)
    };
    let resource = rm.resource.as_ref().expect("a resource");
    assert_eq!(attr(&resource.attributes, "service.name").as_deref(), Some("anvil-load"));
    assert_eq!(attr(&resource.attributes, "anvil.run_id"), artifact["run_id"].as_str().map(String::from));
    let sum = rm.scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == "anvil_requests_total")
        .and_then(|m| m.sum.clone())
        .expect("anvil_requests_total as a Sum");
    assert!(sum.is_monotonic && sum.aggregation_temporality == 2, "monotonic, cumulative");
    let total: f64 = sum.data_points.iter().map(|p| p.as_double).sum();
    assert_eq!(total, (completed + failed) as f64, "the final OTLP push is the artifact's count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_is_counted_and_warned_about_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, received) = receiver(503).await;
    let url = format!("http://u:hunter2@{addr}/api/v1/write?tenant=secret-tenant");
    let out = run(run_pushing(dir.path(), &url, None, "100ms")).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "a failed push never fails the run: {stderr}");
    let artifact = the_artifact(dir.path());
    assert_eq!(artifact["requests"].as_u64(), Some(40));
    assert_eq!(stderr.matches("warning: a remote write push").count(), 1, "warned once: {stderr}");
    assert!(stderr.contains("HTTP 503"), "{stderr}");
    assert!(stderr.contains("the run's end state did not arrive"), "{stderr}");
    assert!(!stderr.contains("hunter2") && !stderr.contains("secret-tenant"), "{stderr}");
    let posts = received.posts.lock().expect("lock").len();
    // Every periodic push once, the final one twice (a 5xx is retried), no stale markers
    // after an end state that did not arrive; a periodic push under way when the run ends gives
    // way to the final one, and may have reached the receiver before it was dropped.
    let failed_line = stderr.lines().find(|l| l.contains("pushes to")).expect("the count line");
    let n: usize = failed_line
        .split_whitespace()
        .nth(3)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("a count in {failed_line:?}"));
    assert!(posts == n + 1 || posts == n + 2, "{posts} posts: {failed_line}");

    // An unreachable receiver: the same, within the push timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(run_pushing(dir.path(), &format!("http://{closed}/api/v1/write"), None, "100ms")).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("connection failed"), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_push_url_exits_2_naming_the_key_before_anything_is_sent() {
    for (flag, value, key) in
        [("--remote-write", "ftp://127.0.0.1:9/api/v1/write", "run.remote_write"), ("--otlp", "not a url", "run.otlp")]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = anvil();
        cmd.arg(scenario("smoke.toml")).args([flag, value]).arg("--out").arg(dir.path().join("out"));
        let out = run(cmd).await;
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(key), "{}", text(&out.stderr));
        assert!(!dir.path().join("out").exists() || artifacts(&dir.path().join("out")).is_empty());
    }
}

/// Debian's `prometheus`, on a free loopback port with a temporary TSDB, as a remote write
/// receiver; killed on drop.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PROMETHEUS: &str = "/usr/bin/prometheus";

impl Prometheus {
    async fn start() -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: install it with `apt-get install prometheus` (.ci/run does)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1h\nscrape_configs: []\n").expect("config");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--web.enable-remote-write-receiver")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus { child, addr, _dir: dir };
        let http = reqwest::Client::new();
        let ready = format!("http://{}/-/ready", prometheus.addr);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ok =
                http.get(&ready).timeout(Duration::from_secs(1)).send().await.is_ok_and(|r| r.status().is_success());
            if ok {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "prometheus was not ready within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    /// An instant query's `data.result`, bounded in time.
    async fn query(&self, promql: &str, at: Option<f64>) -> Vec<Value> {
        let mut params = vec![("query", promql.to_string())];
        params.extend(at.map(|t| ("time", format!("{t:.3}"))));
        let bytes = reqwest::Client::new()
            .get(format!("http://{}/api/v1/query", self.addr))
            .query(&params)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("query sent")
            .bytes()
            .await
            .expect("an answer");
        let body: Value = serde_json::from_slice(&bytes).expect("a JSON answer");
        assert_eq!(body["status"], "success", "{promql}: {body}");
        body["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_receives_the_remote_write_and_promql_counts_the_artifact() {
    let prometheus = Prometheus::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("http://{}/api/v1/write", prometheus.addr);
    let out = run(run_pushing(dir.path(), &url, None, "500ms")).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("push"), "every push accepted: {stderr}");
    let artifact = the_artifact(dir.path());
    let requests = artifact["requests"].as_u64().expect("requests") as f64;

    // The raw samples: the final push is the last of them (stale markers are not returned).
    let raw = prometheus.query("anvil_requests_total[10m]", None).await;
    assert!(!raw.is_empty(), "series stored");
    let last_at = raw.iter().filter_map(|s| s["values"].as_array()?.last()?[0].as_f64()).fold(f64::MIN, f64::max);
    let at_end = prometheus.query("sum(anvil_requests_total)", Some(last_at)).await;
    let value = |result: &[Value]| -> f64 {
        result.first().and_then(|r| r["value"][1].as_str()).and_then(|v| v.parse().ok()).expect("a value")
    };
    assert_eq!(value(&at_end), requests, "sum(anvil_requests_total) at the final push");
    let completed = prometheus.query("sum(anvil_requests_total{outcome=\"completed\"})", Some(last_at)).await;
    assert_eq!(Some(value(&completed) as u64), artifact["completed"].as_u64());
    // After the run the series are ended (stale markers), and the last value stays reachable.
    assert!(prometheus.query("sum(anvil_requests_total)", None).await.is_empty(), "the series ended with the run");
    let last = prometheus.query("sum(last_over_time(anvil_requests_total[10m]))", None).await;
    assert_eq!(value(&last), requests);
}
