//! A real Prometheus for the tests: Debian's `prometheus` (`apt-get install prometheus`),
//! started on a free loopback port with its storage in a temporary directory, scraping the
//! targets it is given every second and accepting remote write
//! (`--web.enable-remote-write-receiver`). It is the test's child, killed (by its process) when
//! the [`Prometheus`] is dropped. A machine without it fails the test, saying how to install it.
//!
//! The HTTP API it is queried through: <https://prometheus.io/docs/prometheus/latest/querying/api/>.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BINARY: &str = "/usr/bin/prometheus";

pub struct Prometheus {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

/// A loopback port free now (bound, then released for the process that will listen on it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

impl Prometheus {
    /// Start scraping `targets` (`host:port`, their `/metrics`) every second, and wait until it
    /// is ready (at most 30 s).
    pub async fn start(targets: &[String]) -> Prometheus {
        assert!(
            std::path::Path::new(BINARY).exists(),
            "{BINARY} is missing: install it with `apt-get install prometheus` (.ci/run does); this test never skips"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = free_port();
        let expected = targets.len();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: anvil\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        let config_path: PathBuf = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("the configuration");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("the log file");
        let child = Command::new(BINARY)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .arg("--log.level=warn")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("a client");
        let mut p = Prometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: dir, http };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            let ready = p.http.get(format!("{}/-/ready", p.url)).send().await;
            // Ready, and its targets discovered: discovery hands them over every 5 s at most,
            // so a run started before that would miss its first seconds.
            if ready.is_ok_and(|r| r.status().is_success()) && (expected == 0 || p.discovered().await == expected) {
                return p;
            }
            assert!(Instant::now() < deadline, "prometheus was not ready within 30 s:\n{}", p.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What it logged (warnings and errors), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// How many scrape targets it has discovered.
    async fn discovered(&self) -> usize {
        let Ok(response) = self.http.get(format!("{}/api/v1/targets", self.url)).send().await else { return 0 };
        let body = response.bytes().await.unwrap_or_default();
        let value: Value = serde_json::from_slice(&body).unwrap_or_default();
        value["data"]["activeTargets"].as_array().map_or(0, Vec::len)
    }

    /// Each target's health and last scrape error, for failure messages.
    pub async fn targets(&self) -> String {
        let response = self.http.get(format!("{}/api/v1/targets", self.url)).send().await;
        let body = match response {
            Ok(r) => r.bytes().await.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default(),
            Err(e) => return e.to_string(),
        };
        let value: Value = serde_json::from_str(&body).unwrap_or_default();
        let targets = value["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        let lines: Vec<String> =
            targets.iter().map(|t| format!("{} {} {}", t["scrapeUrl"], t["health"], t["lastError"])).collect();
        format!("targets: {}\n{}", lines.join("; "), self.log())
    }

    /// An instant query: every series of the result as `(labels, value)`.
    pub async fn query(&self, promql: &str) -> Vec<(serde_json::Map<String, Value>, f64)> {
        let response = self
            .http
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", promql)])
            .send()
            .await
            .unwrap_or_else(|e| panic!("{promql}: {e}"));
        let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{promql}: {e}"));
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{promql}: {e}"));
        assert_eq!(body["status"], "success", "{promql}: {body}");
        let result = body["data"]["result"].as_array().cloned().unwrap_or_default();
        result
            .into_iter()
            .map(|r| {
                let labels = r["metric"].as_object().cloned().unwrap_or_default();
                let value = r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect()
    }

    /// The single value of a query that returns one series, `None` while it returns none.
    pub async fn scalar(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql).await;
        assert!(result.len() <= 1, "{promql}: one series expected, got {result:?}");
        result.first().map(|r| r.1)
    }

    /// Poll `promql` until its value is `expected` (at most `limit`); the last value otherwise.
    pub async fn until(&self, promql: &str, expected: f64, limit: Duration) -> Option<f64> {
        let deadline = Instant::now() + limit;
        loop {
            let value = self.scalar(promql).await;
            if value == Some(expected) || Instant::now() > deadline {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
