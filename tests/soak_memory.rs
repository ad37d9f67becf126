//! Every command after the run at soak scale, in bounded memory: 200,000 requests written as a
//! records file, then `summarize`, `report` (HTML and Markdown), `compare` and `export` run over
//! it, each with its address space limited to 1 GiB (`ulimit -v`). Before artifacts were read
//! as streams, `report` and `compare` held 1.66 and 1.87 GiB resident at this size (the whole
//! document parsed into serde's buffered form), so neither would have run.

#[path = "common/soak_records.rs"]
mod soak_records;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use soak_records::{CLIENT, template_run, write_records};

const REQUESTS: u64 = 200_000;
/// `ulimit -v`, KiB.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;

/// `CLIENT args…` with its address space limited.
fn limited(args: &[&Path]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""))
        .arg(CLIENT)
        .args(args)
        .output()
        .expect("bash runs")
}

fn ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed under a {ADDRESS_SPACE_KIB} KiB address space: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_after_the_run_holds_200000_requests_in_a_gibibyte() {
    // The limit is in force: 1.5 GiB cannot be had under it.
    let control = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB} && exec python3 -c 'bytearray(3 << 29)'"))
        .output()
        .expect("bash runs");
    assert!(!control.status.success(), "1.5 GiB was allocated under a {ADDRESS_SPACE_KIB} KiB limit");

    let dir = tempfile::tempdir().unwrap();
    let template = template_run(dir.path()).await;
    let records = dir.path().join("soak.records.ndjson");
    write_records(&template, &records, REQUESTS).await;
    let out = dir.path().join("out");

    ok("summarize", &limited(&[Path::new("summarize"), &records, Path::new("--out"), &out]));
    let artifact: PathBuf = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().ends_with("-sweep.json"))
        .expect("summarize wrote an artifact");
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&artifact).unwrap()).unwrap();
    assert_eq!((a["requests"].as_u64(), a["completed"].as_u64()), (Some(REQUESTS), Some(REQUESTS)));
    assert_eq!(a["request_timings"].as_array().map(Vec::len), Some(REQUESTS as usize));
    drop(a);

    let html = out.join("report.html");
    ok("report", &limited(&[Path::new("report"), &artifact, Path::new("--out"), &html]));
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("200,000"), "the report does not count the 200,000 requests");
    let md = out.join("report.md");
    let args = [Path::new("report"), &artifact, Path::new("--format"), Path::new("md"), Path::new("--out"), &md];
    ok("report --format md", &limited(&args));

    let compared = limited(&[Path::new("compare"), &artifact, &artifact]);
    ok("compare", &compared);
    let table = String::from_utf8_lossy(&compared.stdout);
    assert!(table.contains("n=200000+200000"), "{table}");

    let csv = out.join("requests.csv");
    ok("export", &limited(&[Path::new("export"), &artifact, Path::new("--out"), &csv]));
    let rows = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(rows as u64, REQUESTS + 1, "a header and one row per request");
}
