//! Soak drift compares full-length measurement windows only: a soak against the simulator whose
//! first window is warm-up and whose last is a drain stub (arrivals stopped, the last answers
//! finishing) reports drift between the full windows in between, says which, and says there is
//! no drift when fewer than two such windows remain. The report marks what drift left out.

mod common;

use std::path::{Path, PathBuf};

use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

/// Open-loop arrivals on the `realistic` profile (answers take one to two seconds, so the level
/// drains for that long after arrivals stop), 3 s windows, a 3 s warm-up.
fn soak(dir: &Path, duration_s: u32) -> PathBuf {
    let path = dir.join("soak.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"anvil-sim\"\nsimulator = \"realistic\"\n\
             [run]\nduration = \"{duration_s}s\"\nwarmup = \"3s\"\nsnapshot_interval = \"3s\"\nseed = 8\n\
             [load]\nmode = \"open\"\nrate = 4\narrival = \"poisson\"\nmax_client_lateness = \"1s\"\n\
             [workload]\ncontext_tokens = 1024\nmax_context_tokens = 32768\nmax_tokens = 1024\n"
        ),
    )
    .expect("write the scenario");
    path
}

/// Run it; the artifact, the level's windows and the HTML report.
async fn measure(duration_s: u32) -> (Value, Vec<Value>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(soak(dir.path(), duration_s)).arg("--out").arg(&out).arg("--quiet");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let written = artifacts(&out);
    assert_eq!(written.len(), 1);
    let a = check_artifact(&written[0]);
    let series = std::fs::read_dir(&out)
        .expect("out dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".timeseries.ndjson"))
        .expect("a time series");
    let windows: Vec<Value> = std::fs::read_to_string(series)
        .expect("time series readable")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a window line"))
        .collect();
    let html = dir.path().join("report.html");
    let report = anvil().arg("report").arg(&out).arg("--out").arg(&html).output().expect("report runs");
    assert!(report.status.success(), "{}", text(&report.stderr));
    (a, windows, std::fs::read_to_string(html).expect("report written"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_leaves_out_the_warm_up_window_and_the_drain_stub() {
    let (a, windows, html) = measure(9).await;
    let d = &a["drift"];
    // The last window is a stub: shorter than the interval, after arrivals stopped.
    let last = windows.last().expect("windows");
    let stub = f(&last["end_s"]) - f(&last["start_s"]);
    assert!(stub < 2.85 && f(&last["start_s"]) >= 8.9, "the last window is no drain stub: {last}");
    // Compared: the full windows between the warm-up (0–3 s) and the end of arrivals (9 s).
    assert_eq!(d["basis"], "first_vs_last_10pct_windows", "{d}");
    assert_eq!(d["measurement_windows"], 2, "{d}");
    assert_eq!(d["windows_compared"], 1, "{d}");
    assert_eq!(d["excluded_windows"]["warmup"], 1, "{d}");
    assert!(d["excluded_windows"]["drain"].as_u64().is_some_and(|n| n >= 1), "{d}");
    let (first, last_span) = (&d["first_span_s"], &d["last_span_s"]);
    assert!((f(&first[0]) - 3.0).abs() < 0.2 && (f(&first[1]) - 6.0).abs() < 0.2, "{d}");
    assert!((f(&last_span[0]) - 6.0).abs() < 0.2 && (f(&last_span[1]) - 9.0).abs() < 0.2, "{d}");
    // The numbers are those windows' own: the second window's throughput first, the third's last.
    let by_start = |s: f64| windows.iter().find(|w| (f(&w["start_s"]) - s).abs() < 0.2).expect("window");
    assert_eq!(f(&d["throughput_tok_s"]["first"]), f(&by_start(3.0)["throughput_tok_s"]), "{d}");
    assert_eq!(f(&d["throughput_tok_s"]["last"]), f(&by_start(6.0)["throughput_tok_s"]), "{d}");
    // The report marks what drift left out, and says which windows it compared.
    assert!(html.contains("warm-up ends") && html.contains(">drain<"), "the plots do not mark warm-up and drain");
    assert!(html.contains("full-length measurement windows only: windows 3–6 s against 6–9 s"), "no spans said");
    assert!(html.contains("<th>drift</th>"), "no drift table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_than_two_full_measurement_windows_report_no_drift() {
    let (a, _, html) = measure(6).await;
    let d = &a["drift"];
    assert_eq!(d["basis"], "none", "{d}");
    assert_eq!((d["measurement_windows"].as_u64(), d["windows_compared"].as_u64()), (Some(1), Some(0)), "{d}");
    for k in ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "throughput_tok_s"] {
        assert!(d[k]["change_pct"].is_null(), "{k}: a number where there is no drift: {d}");
    }
    assert!(html.contains("No drift to report"), "the report does not say there is no drift");
    assert!(!html.contains("<th>drift</th>"), "a drift table without drift");
}
