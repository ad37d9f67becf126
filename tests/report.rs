//! `anvil-load report` on committed artifacts and on small runs against the embedded simulator:
//! HTML with plots and no URL, Markdown with the headline tables, the answer before anything else,
//! warnings once per kind, numbers as people read them, two runs overlaid, directories searched
//! below, and paths that hold no results refused with exit 2 (the browser's view of real runs is
//! `report_browser.rs`).

mod common;

use std::path::{Path, PathBuf};

use common::{anvil, artifacts, check_artifact, manifest_dir, text};

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

// Reports of real runs against the embedded simulator: small, bounded, each artifact checked.

const BASE: &str = "[target]\nmodel = \"anvil-sim\"\nsimulator = \"fast\"\n\
[workload]\ncontext_tokens = 256\nmax_context_tokens = 32768\nmax_tokens = 48\ncanaries = false\n";

/// Run `scenario` (TOML text) into `dir/name`, check every artifact, return the directory.
async fn measure(dir: &Path, name: &str, scenario: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, scenario).unwrap();
    let out = dir.join(name);
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--quiet");
    let result = common::run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{name}: {}", text(&result.stderr));
    let written = artifacts(&out);
    assert!(!written.is_empty(), "{name}: no artifact");
    for a in written {
        check_artifact(&a);
    }
    out
}

/// `report PATHS… --out OUT [--format md]`, which must succeed; the report's text.
fn report(paths: &[&Path], out: &Path, md: bool) -> String {
    let mut cmd = anvil();
    cmd.arg("report").args(paths).arg("--out").arg(out);
    if md {
        cmd.args(["--format", "md"]);
    }
    let result = cmd.output().unwrap();
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    std::fs::read_to_string(out).unwrap()
}

/// The page without its plots (their coordinates are numbers nobody reads).
fn prose(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(at) = rest.find("<svg") {
        out.push_str(&rest[..at]);
        rest = rest[at..].split_once("</svg>").map_or("", |(_, r)| r);
    }
    out.push_str(rest);
    out
}

/// Numbers printed with six or more significant digits after a point (`5.114754098360656`,
/// `1.000000`): raw floats, not numbers chosen for people.
fn raw_floats(text: &str) -> Vec<String> {
    let words = text.split(|c: char| !(c.is_ascii_digit() || c == '.'));
    let raw = |w: &&str| w.contains('.') && w.replace('.', "").trim_start_matches('0').len() >= 6;
    words.filter(raw).map(str::to_string).collect()
}

fn position(page: &str, needle: &str) -> usize {
    page.find(needle).unwrap_or_else(|| panic!("no {needle:?} in the page"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_report_leads_with_the_capacity_and_says_each_warning_once() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = format!(
        "{BASE}[run]\nrequests = 12\nseed = 3\n[load]\nsearch = \"concurrency\"\nsearch_min = 1\nsearch_max = 8\nsearch_steps = 4\nmax_client_lateness = \"1s\"\n[slo]\nttft_p99_ms = 5000\ntpot_p99_ms = 500\n"
    );
    let results = measure(dir.path(), "search", &scenario).await;
    let trace = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-search.json"))
        .expect("a search trace");
    let trace = common::read_json(&trace);
    let best = trace["search"]["best"].as_f64().expect("these objectives are met at some level");
    let probes = trace["search"]["probes"].as_array().unwrap().len();
    assert!(probes >= 3, "{trace}");

    let page = report(&[&results], &dir.path().join("r.html"), false);
    // The answer box first: before the warnings, the provenance and the sweep.
    let answer = position(&page, "<div class=\"answer\">");
    let capacity = format!("<span class=\"label\">capacity</span><span class=\"value\">c={best}</span>");
    assert!(
        page[answer..].starts_with("<div class=\"answer\">\n<p class=\"main\">") && page.contains(&capacity),
        "{page}"
    );
    assert!(answer < position(&page, "<ul class=\"warnings grouped\">"));
    assert!(answer < position(&page, "<h3>Provenance</h3>"));
    assert!(answer < position(&page, "<h2>Throughput and latency</h2>"));
    assert!(page.contains("<li class=\"met\">✓ tpot_p99_ms: "), "objectives marked in the box");
    // Each kind of warning once, with the levels it applies to; the simulator is never a server.
    let codes: Vec<&str> =
        page.split("<li><code>").skip(1).filter_map(|rest| rest.split_once("</code>").map(|(code, _)| code)).collect();
    for code in &codes {
        assert_eq!(codes.iter().filter(|c| *c == code).count(), 1, "{code} said more than once: {page}");
    }
    assert!(codes.contains(&"simulated_target"), "{page}");
    assert!(page.contains("<code>simulated_target</code><span class=\"applies\">every level</span>"), "{page}");
    assert!(page.contains("describe the simulator, not a server"));
    assert!(!page.contains("describe the server"), "a simulator run described as a server");
    // Numbers: no raw float; one unit per latency column, named in its heading.
    assert_eq!(raw_floats(&prose(&page)), Vec::<String>::new());
    assert!(page.contains("TTFT p50 (ms)</th>") || page.contains("TTFT p50 (µs)</th>"), "{page}");
    // The probe table states levels as integers (`1`, not `1.000`).
    assert!(page.contains("<td class=\"num\">1</td>") && !page.contains(">1.000<"), "{page}");

    let md = report(&[&results], &dir.path().join("r.md"), true);
    let answer = position(&md, "**capacity: c=");
    assert!(answer < position(&md, "### Methodology warnings"), "{md}");
    assert_eq!(md.matches("`simulated\\_target`").count() + md.matches("`simulated_target`").count(), 1, "{md}");
    assert!(md.contains("- ✓ tpot\\_p99\\_ms: "), "{md}");
    assert_eq!(raw_floats(&md), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_level_opens_with_its_headline_and_a_fractional_rate_reads_as_people_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = format!(
        "{BASE}[run]\nrequests = 6\nseed = 4\n[load]\nmode = \"open\"\nrate = 5.114754098360656\nmax_client_lateness = \"1s\"\n"
    );
    let results = measure(dir.path(), "open", &scenario).await;
    let md = report(&[&results], &dir.path().join("r.md"), true);
    assert!(md.contains("**at 5.11 req/s: "), "the level's headline leads: {md}");
    assert!(md.find("**at 5.11 req/s").unwrap() < md.find("## Headline").unwrap(), "{md}");
    for figure in ["TTFT p50 / p99", "TPOT p50 / p99", "valid"] {
        assert!(md.contains(figure), "no {figure} in the box: {md}");
    }
    assert!(!md.contains("5.114754"), "a raw float: {md}");
    assert_eq!(raw_floats(&md), Vec::<String>::new());
    // Token counts are counts: the prompt's percentiles are integers.
    let prompt = md.lines().find(|l| l.starts_with("| prompt tokens |")).expect("a prompt row");
    let p50 = prompt.split('|').nth(4).unwrap().trim();
    assert!(!p50.contains('.'), "{prompt}");
    // One unit per row: a latency row names its unit and no cell carries another.
    let ttft = md.lines().find(|l| l.starts_with("| TTFT (")).expect("a TTFT row");
    assert!(!ttft.contains(" ms |") && !ttft.contains(" s |"), "{ttft}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_are_overlaid_base_first_with_a_delta_per_shared_level() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = format!("{BASE}[run]\nrequests = 8\nseed = 5\n[load]\nconcurrency = [1, 2]\n");
    // NEW runs first: BASE is the first path given, not the first run.
    let new = measure(dir.path(), "candidate", &sweep).await;
    let base = measure(dir.path(), "baseline", &sweep).await;
    let page = report(&[&base, &new], &dir.path().join("r.html"), false);
    let side = position(&page, "<h2>Runs side by side</h2>");
    assert!(side < position(&page, "<div class=\"answer\">"), "the comparison opens the page");
    assert!(page.contains("BASE is baseline, the first path given"), "{page}");
    assert!(page.contains("<h3>candidate against baseline (BASE)</h3>"), "{page}");
    let table = &page[position(&page, "<h3>candidate against baseline (BASE)</h3>")..];
    let table = &table[..table.find("</table>").unwrap()];
    for level in ["<td>c=1</td>", "<td>c=2</td>"] {
        assert!(table.contains(level), "no {level} in {table}");
    }
    assert!(table.contains(" %</td>"), "{table}");
    assert!(position(&page, "<th class=\"num\">req/s</th>") < position(&page, "<th class=\"num\">E2E p99</th>"));
    // One axis per metric, one line per run and level, labelled by run.
    for slug in ["ttft", "tpot", "e2e"] {
        let id = format!("id=\"plot-runs-{slug}-cdf\"");
        let fig = &page[position(&page, &id)..];
        let fig = &fig[..fig.find("</figure>").unwrap()];
        assert_eq!(fig.matches("<polyline class=\"data\"").count(), 4, "{slug}: 2 runs × 2 levels");
        for label in ["baseline c=1", "candidate c=2"] {
            assert!(fig.contains(&format!("</span>{label}</li>")), "{slug}: no {label}");
        }
    }
    // Each run's own sections follow, BASE first.
    assert!(position(&page, "id=\"r0-overview\"") < position(&page, "id=\"r1-overview\""));
    assert!(page[position(&page, "id=\"r0-overview\"")..].starts_with("id=\"r0-overview\">\n<h2>baseline: "));

    let md = report(&[&base, &new], &dir.path().join("r.md"), true);
    assert!(md.contains("### candidate against baseline (BASE)\n\n| level | req/s | output tok/s |"), "{md}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_is_searched_below_bounded_and_in_a_fixed_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("results");
    let single = format!("{BASE}[run]\nrequests = 4\nseed = 6\n[load]\nconcurrency = 2\n");
    std::fs::create_dir_all(root.join("h100/vllm")).unwrap();
    std::fs::create_dir_all(root.join("a/b/c/d/e")).unwrap();
    let near = measure(&root.join("h100/vllm"), "run", &single).await;
    let deep = measure(&root.join("a/b/c/d/e"), "run", &single).await;
    assert_eq!((artifacts(&near).len(), artifacts(&deep).len()), (1, 1));
    // A link back to the top would make an unbounded walk loop for ever.
    #[cfg(unix)]
    std::os::unix::fs::symlink(&root, root.join("h100/loop")).unwrap();

    let out = dir.path().join("r.md");
    let first = report(&[&root], &out, true);
    // results/h100/vllm/run is 3 deep and found; results/a/b/c/d/e/run is 6 deep and is not.
    assert!(first.contains("single level"), "{first}");
    let near_id = common::read_json(&artifacts(&near)[0])["run_id"].as_str().unwrap().to_string();
    let deep_id = common::read_json(&artifacts(&deep)[0])["run_id"].as_str().unwrap().to_string();
    let plain = first.replace('\\', "");
    assert!(plain.contains(&near_id) && !plain.contains(&deep_id), "{first}");
    // The same report again: the walk's order is fixed.
    assert_eq!(report(&[&root], &out, true), first);
    // Its default place is the directory given.
    let result = anvil().arg("report").arg(&root).output().unwrap();
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    assert!(root.join("report.html").is_file());
    // Two runs found below one directory are one report of two runs.
    std::fs::create_dir_all(root.join("h100/sglang")).unwrap();
    measure(&root.join("h100/sglang"), "run", &single).await;
    let both = report(&[&root], &out, true);
    assert!(both.contains("# anvil-load report: 2 runs"), "{both}");
}
