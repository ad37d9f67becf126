//! GPU telemetry and other metrics endpoints through the real binary: `target.metrics_urls`
//! lists the simulator's DCGM-exporter endpoint (`/dcgm/metrics`) beside its own `/metrics`;
//! the artifact keeps the two apart, its GPU figures equal what the endpoint served (read back
//! from the endpoint's own scrape file), its energy equals the simulator's output tokens × the
//! energy it charges per token, and `summarize` of the records rebuilds the same. Bad values
//! exit 2 with nothing sent; an endpoint that cannot be reached is a warning naming it.

mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

fn root(server: &MockServer) -> String {
    server.base_url().trim_end_matches("/v1").to_string()
}

fn scenario(dir: &Path, target_extra: &str) -> PathBuf {
    let path = dir.join("gpu.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"anvil-sim\"\nmetrics = true\n{target_extra}\n[run]\nrequests = 24\nseed = 4\n\
             metrics_interval = \"200ms\"\n[load]\nconcurrency = 4\n[workload]\ncontext_tokens = 512\n\
             max_context_tokens = 8192\nmax_tokens = 32\n"
        ),
    )
    .unwrap();
    path
}

/// The series `name{…}` of every successful scrape line of a scrape file, with its time.
fn served(file: &Path, name: &str) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["ok"] == true)
        .map(|l| {
            let raw = l["raw"].as_object().unwrap();
            let (_, v) = raw.iter().find(|(k, _)| k.starts_with(&format!("{name}{{"))).expect(name);
            (l["t_s"].as_f64().unwrap(), v.as_f64().unwrap())
        })
        .collect()
}

/// Time-weighted mean (each value held until the next) and max, as the summary defines them.
fn mean_max(points: &[(f64, f64)]) -> (f64, f64) {
    let area: f64 = points.windows(2).map(|w| w[0].1 * (w[1].0 - w[0].0)).sum();
    let span = points.last().unwrap().0 - points[0].0;
    (area / span, points.iter().map(|p| p.1).fold(f64::MIN, f64::max))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dcgm_endpoint_is_kept_apart_and_its_figures_equal_what_it_served() {
    // 5 ms per output token: each request (16 tokens or more) takes at least 80 ms whatever the machine, so the
    // six waves of the run outlast two 200 ms scrape intervals (the fast profile's 200 µs let a
    // quick machine finish between the start and the first interval scrape).
    let paced =
        Profile { time_per_output_token: std::time::Duration::from_millis(5), ..Profile::named("fast").unwrap() };
    let server = MockServer::start(paced).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dcgm = format!("{}/dcgm/metrics", root(&server));
    let (out, records, rebuilt) =
        (dir.path().join("out"), dir.path().join("run.records.ndjson"), dir.path().join("re"));
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), &format!("metrics_urls = [\"{dcgm}\"]")))
        .args(["--base-url", &server.base_url(), "--out"])
        .arg(&out)
        .arg("--records")
        .arg(&records);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    let m = &a["server_metrics"];

    // Kept apart: the server's block is the engine's, the endpoint's the GPU's.
    assert_eq!(m["engine"], "vllm");
    assert!(m.get("gpu").is_none(), "the engine's /metrics carries no GPU fields: {m}");
    let endpoints = m["endpoints"].as_array().expect("endpoints[]");
    assert_eq!(endpoints.len(), 1);
    let e = &endpoints[0];
    assert_eq!(e["url"], dcgm.as_str());
    assert_eq!((e["engine"].is_null(), e["complete"].as_bool()), (true, Some(true)), "{e}");
    assert!(e["counters"].as_object().unwrap().is_empty(), "{e}");
    let gpu = &e["gpu"];
    assert_eq!(gpu["gpu_count"], 1);
    let g = &gpu["gpus"][0];
    assert_eq!((g["gpu"].as_str(), g["Hostname"].as_str()), (Some("0"), Some("anvil-sim")));

    // Equal to what the endpoint served, read back from its own scrape file.
    let file = out.join(e["file"].as_str().unwrap());
    assert!(file.to_string_lossy().ends_with(".endpoint0.server-metrics.ndjson"), "{}", file.display());
    let util = served(&file, "DCGM_FI_DEV_GPU_UTIL");
    assert!(util.len() >= 3, "start, end and at least one interval scrape: {util:?}");
    let (util_mean, util_max) = mean_max(&util);
    assert!(close(g["utilization_mean_pct"].as_f64().unwrap(), util_mean), "{g} vs {util_mean}");
    assert_eq!(g["utilization_max_pct"].as_f64(), Some(util_max));
    assert!(util_max > 0.0, "the load kept slots busy at some scrape: {util:?}");
    let used = served(&file, "DCGM_FI_DEV_FB_USED");
    assert_eq!(g["memory_used_peak_mib"].as_f64(), Some(mean_max(&used).1));
    let (power_mean, power_max) = mean_max(&served(&file, "DCGM_FI_DEV_POWER_USAGE"));
    assert!(close(g["power_mean_w"].as_f64().unwrap(), power_mean) && g["power_max_w"].as_f64() == Some(power_max));
    let energy = served(&file, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION");
    let delta_j = (energy.last().unwrap().1 - energy[0].1) / 1000.0;
    assert_eq!(g["energy_source"], "counter");
    assert!(close(g["energy_j"].as_f64().unwrap(), delta_j), "{g} vs {delta_j}");

    // The level's energy per output token: the energy over the client's output tokens, and
    // the simulator charges exactly MJ_PER_OUTPUT_TOKEN for each token it generated.
    let level = &m["gpu_telemetry"];
    let output_tokens: u64 =
        a["request_timings"].as_array().unwrap().iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(level["output_tokens"].as_u64(), Some(output_tokens));
    assert!(close(level["energy_j"].as_f64().unwrap(), delta_j));
    assert!(close(level["joules_per_output_token"].as_f64().unwrap(), delta_j / output_tokens as f64));
    // The server's own generation counter over the level, from its own /metrics.
    let generated = m["counters"]["generation_tokens"].as_f64().unwrap();
    assert_eq!(generated as u64, output_tokens, "the server generated what the client counted");
    let per_token = anvil_sim::gpu::MJ_PER_OUTPUT_TOKEN as f64 / 1000.0;
    assert!(close(delta_j, per_token * generated), "{delta_j} J for {generated} tokens");
    // One console line for the level's GPUs; no "unrecognised engine" warning for an exporter.
    let console = text(&result.stdout) + &text(&result.stderr);
    assert!(console.contains("GPU (1 GPU, DCGM)") && console.contains("J per output token"), "{console}");
    let codes: Vec<&str> = a["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap()).collect();
    assert!(!codes.contains(&"server_metrics_unrecognised"), "{codes:?}");

    // The records carry every block: summarize rebuilds the same figures.
    common::check_records(&records);
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&rebuilt).output().expect("the binary starts");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let b = check_artifact(&artifacts(&rebuilt)[0]);
    assert_eq!(b["server_metrics"], a["server_metrics"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_cannot_be_reached_is_a_warning_naming_it() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A port nobody listens on: bound, then released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}/metrics");
    let mut cmd = anvil();
    cmd.arg(scenario(dir.path(), &format!("metrics_urls = [\"{url}\"]")))
        .args(["--base-url", &server.base_url(), "--out"])
        .arg(dir.path().join("out"));
    let result = run(cmd).await;
    assert!(result.status.success(), "a failed scrape never fails the run: {}", text(&result.stderr));
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    let e = &a["server_metrics"]["endpoints"][0];
    assert_eq!((e["scrapes"].as_u64(), e["failed_scrapes"].as_u64()), (e["scrapes"].as_u64(), e["scrapes"].as_u64()));
    assert!(e.get("gpu").is_none());
    assert!(a["server_metrics"].get("gpu_telemetry").is_none());
    let failed = a["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "server_metrics_scrape_failed")
        .expect("a scrape-failed warning");
    assert!(failed["message"].as_str().unwrap().contains(&url), "{failed}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_metrics_urls_exit_2_naming_the_key_with_nothing_sent() {
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let dcgm = format!("{}/dcgm/metrics", root(&server));
    let own = format!("{}/metrics", root(&server));
    let cases = [
        (format!("metrics_urls = [\"{dcgm}\", \"ftp://gpu-node/metrics\"]"), "target.metrics_urls[1]", "http://"),
        (format!("metrics_urls = [\"{dcgm}\", \"{dcgm}\"]"), "target.metrics_urls[1]", "twice"),
        (format!("metrics_urls = [\"{own}\"]"), "target.metrics_urls[0]", "server's own"),
        ("metrics_urls = []".to_string(), "target.metrics_urls", "empty"),
        ("metrics_urls = \"http://gpu-node:9400/metrics\"".to_string(), "target.metrics_urls", "expected a list"),
    ];
    for (extra, key, problem) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = anvil();
        // The base URL goes in the file, so the server's own endpoint is known when checking.
        cmd.arg(scenario(dir.path(), &format!("base_url = \"{}\"\n{extra}", server.base_url())))
            .arg("--out")
            .arg(dir.path().join("out"));
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(key) && stderr.contains(problem), "{extra}: {stderr}");
        assert!(stderr.contains("fix") || stderr.contains("Fix"), "{extra}: {stderr}");
    }
    // Without the server's own metrics scraped, the list is refused too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"anvil-sim\"\nbase_url = \"{}\"\nmetrics_urls = [\"{dcgm}\"]\n[run]\nrequests = 2\n\
             [workload]\ncontext_tokens = 64\nmax_context_tokens = 8192\nmax_tokens = 4\n",
            server.base_url()
        ),
    )
    .unwrap();
    let result = run({
        let mut cmd = anvil();
        cmd.arg(&path).arg("--out").arg(dir.path().join("out"));
        cmd
    })
    .await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("target.metrics_urls") && stderr.contains("metrics = true"), "{stderr}");
    assert_eq!(server.stats().requests_received, 0, "nothing sent");
    server.shutdown().await;
}
