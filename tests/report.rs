//! `anvil-load report` on committed artifacts: HTML with plots and no URL, Markdown with the
//! headline tables, and paths that hold no results refused with exit 2 (the browser's view of
//! real runs is `report_browser.rs`).

mod common;

use common::{anvil, manifest_dir, text};

fn fixture(dir: &str) -> std::path::PathBuf {
    manifest_dir().join("tests/fixtures/summarize").join(dir)
}

#[test]
fn a_sweep_becomes_one_page_and_one_markdown_file() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let out =
        anvil().arg("report").arg(fixture("closed")).arg(fixture("open")).arg("--out").arg(&html).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("report: {}", html.display()));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("<script"));
    assert!(page.contains("anvil-load report: 2 runs"), "two runs, one page");
    assert!(page.matches("<svg class=\"plot\"").count() >= 8, "CDFs, timelines and sweep curves");
    assert!(page.contains("Throughput and latency") && page.contains("p50 CI95"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&html).unwrap().permissions().mode() & 0o777, 0o644);
    }

    let md = dir.path().join("r.md");
    let out = anvil().arg("report").arg(fixture("closed")).args(["--format", "md", "--out"]).arg(&md).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("| distribution | samples | mean | p50 | p50 CI95 |"), "{md}");
    assert!(md.contains("## Throughput and latency") && md.contains("| level | note |"), "{md}");
    assert!(md.contains("nearest-rank"), "the percentile method is stated: {md}");
    assert!(!md.contains("<svg"), "{md}");
}

#[test]
fn paths_without_results_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = anvil().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no anvil-load results"), "{}", text(&out.stderr));
    let stray = dir.path().join("notes.json");
    std::fs::write(&stray, "{}").unwrap();
    let out = anvil().arg("report").arg(&stray).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("notes.json: not a result of anvil-load"), "{}", text(&out.stderr));
    assert!(!dir.path().join("report.html").exists(), "nothing written");
}
