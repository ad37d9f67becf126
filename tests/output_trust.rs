//! Outputs that cannot lie, through the real binary: a `compare --max-regress` gate the
//! comparison cannot test exits 2 and is named on stderr and in text, Markdown and JSON (0 with
//! `--allow-untested`, never under a ✅); an artifact whose summaries disagree with its records
//! is refused; `report --out -` and `--out` naming a link (to this process's stdout, a FIFO,
//! `/dev/null`) or a FIFO write there and leave the link a link; a model name carrying
//! `\n# Regression: none` starts no heading in a Markdown report or comparison; and every file a
//! run and a report create follows the process umask.
//!
//! The links stand in for `/dev/stdout` inside a temporary directory, so a regression replaces
//! nothing but a link the test made.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{anvil, artifacts, check_artifact, check_records, manifest_dir, read_json, run, text};
use serde_json::Value;

/// A small closed-loop run of the embedded simulator.
fn scenario(model: &str, gpu: &str, levels: &str, requests: u32) -> String {
    format!(
        "[target]\nmodel = {}\ngpu = {}\nsimulator = \"fast\"\n\
         [run]\nrequests = {requests}\nseed = 7\n\
         [load]\nconcurrency = {levels}\n\
         [workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 48\n",
        toml_string(model),
        toml_string(gpu)
    )
}

/// A TOML basic string holding `s` exactly.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Run `toml` into `dir/name` (records kept), check every artifact and the records file, and
/// return the output directory.
async fn measure(dir: &Path, name: &str, toml: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, toml).unwrap();
    let out = dir.join(name);
    let records = dir.join(format!("{name}.records.ndjson"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--out").arg(&out).arg("--records").arg(&records).arg("--quiet");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{name}: {}", text(&result.stderr));
    for a in artifacts(&out) {
        check_artifact(&a);
    }
    check_records(&records);
    out
}

async fn anvil_with(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = anvil();
    cmd.args(args);
    let result = run(cmd).await;
    (result.status.code(), text(&result.stdout), text(&result.stderr))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_cannot_be_tested_exits_2_and_is_named_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let toml = scenario("anvil-sim", "none", "4", 40);
    let (base, new) = (measure(dir.path(), "base", &toml).await, measure(dir.path(), "new", &toml).await);
    // A p99 needs 574 requests per side; a throughput is one number per run, and one run per
    // side can never be significant. Neither gate can fire.
    let gates = "ttft_p99=10%,output_tok_s=5%";
    let names = [
        "ttft_p99_ms at c=4: the gate --max-regress ttft_p99=10% could not be tested",
        "throughput_tok_s at c=4: the gate --max-regress output_tok_s=5% could not be tested",
    ];
    for format in ["text", "md", "json"] {
        let (code, out, err) =
            anvil_with(&["compare", s(&base), s(&new), "--max-regress", gates, "--format", format]).await;
        assert_eq!(code, Some(2), "--format {format}:\n{out}{err}");
        for name in names {
            assert!(err.contains(&format!("untested: {name}")), "--format {format}: {err}");
        }
        assert!(err.contains("--allow-untested"), "{err}");
        match format {
            "text" => {
                assert!(out.contains("no verdict: 2 --max-regress gate(s) could not be tested"), "{out}");
                assert!(names.iter().all(|n| out.contains(n)), "{out}");
                assert!(!out.contains("no significant regression"), "{out}");
            }
            "md" => {
                assert!(!out.contains('✅') && out.contains("⚠️"), "{out}");
                let escaped = |n: &str| n.replace('_', "\\_");
                assert!(names.iter().all(|n| out.contains(&escaped(n))), "{out}");
            }
            _ => {
                let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
                assert_eq!(j["exit_code"], 2);
                assert_eq!(j["allow_untested"], false);
                let untested: Vec<&str> =
                    j["untested_gates"].as_array().unwrap().iter().map(|u| u["gate"].as_str().unwrap()).collect();
                assert_eq!(untested, ["ttft_p99", "output_tok_s"], "{out}");
                assert!(j["breaches"].as_array().unwrap().is_empty());
            }
        }
    }
    // Accepted untested: exit 0, still named everywhere, and still no ✅.
    let (code, out, err) =
        anvil_with(&["compare", s(&base), s(&new), "--max-regress", gates, "--format", "md", "--allow-untested"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains('✅') && out.contains("⚠️ **no significant regression beyond a --max-regress threshold among the gates tested; 2 gate(s) could not be tested (accepted with --allow-untested)**"), "{out}");
    assert!(names.iter().all(|n| err.contains(n)), "{err}");
    // The control: a gate the comparison can test passes, under a ✅ (the base against itself,
    // so two runs on a busy machine cannot differ by more than the threshold).
    let (code, out, err) =
        anvil_with(&["compare", s(&base), s(&base), "--max-regress", "ttft_p50=50%", "--format", "md"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("✅ **no significant regression beyond a --max-regress threshold**"), "{out}");
    assert!(!err.contains("untested"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_that_disagree_with_their_records_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = measure(dir.path(), "base", &scenario("anvil-sim", "none", "4", 40)).await;
    let original = artifacts(&base)[0].clone();
    let forge = |name: &str, edit: &dyn Fn(&mut Value)| -> PathBuf {
        let mut a = read_json(&original);
        edit(&mut a);
        let side = dir.path().join(name);
        std::fs::create_dir_all(&side).unwrap();
        let path = side.join(original.file_name().unwrap());
        std::fs::write(&path, serde_json::to_vec_pretty(&a).unwrap()).unwrap();
        side
    };
    // The control: a copy as written compares, unchanged.
    let same = forge("same", &|_| {});
    let (code, out, err) = anvil_with(&["compare", s(&base), s(&same)]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    type Edit<'a> = &'a dyn Fn(&mut Value);
    let cases: [(&str, Edit<'_>, &str); 3] = [
        (
            "faster",
            &|a| {
                let v = a["metrics"]["ttft_p50_ms"].as_f64().unwrap();
                a["metrics"]["ttft_p50_ms"] = Value::from(v * 0.7);
            },
            "metrics.ttft_p50_ms states",
        ),
        (
            "busier",
            &|a| {
                let v = a["metrics"]["throughput_tok_s"].as_f64().unwrap();
                a["metrics"]["throughput_tok_s"] = Value::from(v * 1.4);
            },
            "metrics.throughput_tok_s states",
        ),
        (
            "cut",
            &|a| {
                let kept: Vec<Value> = a["request_timings"].as_array().unwrap().iter().step_by(2).cloned().collect();
                a["request_timings"] = Value::from(kept);
            },
            "states",
        ),
    ];
    for (name, edit, key) in cases {
        let forged = forge(name, edit);
        let (code, out, err) = anvil_with(&["compare", s(&base), s(&forged)]).await;
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(out.is_empty(), "{name}: nothing is shown: {out}");
        assert!(err.contains("NEW: ") && err.contains(name) && err.contains(key), "{name}: {err}");
        assert!(err.contains("disagree with its own records") && err.contains("anvil-load summarize"), "{err}");
    }
}

fn fixture(dir: &str) -> PathBuf {
    manifest_dir().join("tests/fixtures/summarize").join(dir)
}

/// `report FIXTURE --format md --out OUT` from `cwd`.
fn report_to(cwd: &Path, out: &Path) -> std::process::Output {
    anvil()
        .current_dir(cwd)
        .arg("report")
        .arg(fixture("closed"))
        .args(["--format", "md", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

fn is_link_to(path: &Path, target: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::read_link(path).is_ok_and(|t| t == target)
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success());
}

/// Read a FIFO on another thread while `write` runs, and return what came through. The reading
/// end is opened first and without blocking, so the writer never waits for it; and the reader
/// stops when the writer closes or, if nothing ever opened the FIFO for writing, once `write` has
/// returned — never hanging the test.
#[cfg(unix)]
fn through_fifo<T>(fifo: &Path, write: impl FnOnce() -> T) -> (String, T) {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(fifo).expect("open the FIFO");
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let reader = std::thread::spawn(move || {
        let (mut got, mut buf) = (Vec::new(), [0u8; 8192]);
        loop {
            match file.read(&mut buf) {
                Ok(0) if !got.is_empty() || finished.load(Ordering::SeqCst) => break,
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => panic!("{e}"),
                _ if finished.load(Ordering::SeqCst) => break,
                _ => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        String::from_utf8(got).unwrap()
    });
    let result = write();
    done.store(true, Ordering::SeqCst);
    (reader.join().unwrap(), result)
}

#[cfg(target_os = "linux")]
#[test]
fn stdout_fifos_and_links_are_written_in_place_and_stay_what_they_were() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();

    // `-` is standard output: the report alone, its note on stderr, no file named `-`.
    let out = report_to(cwd, Path::new("-"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = text(&out.stdout);
    assert!(md.starts_with("# anvil-sim") && md.contains("## Overview"), "{md}");
    assert!(!md.contains("report:"), "{md}");
    assert!(text(&out.stderr).contains("report: written to standard output"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(cwd).unwrap().count(), 0, "nothing written beside");

    // A link to this process's standard output, as /dev/stdout is: written through, kept a link.
    let stdout_link = cwd.join("stdout");
    let fd1 = Path::new("/proc/self/fd/1");
    std::os::unix::fs::symlink(fd1, &stdout_link).unwrap();
    let out = report_to(cwd, &stdout_link);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), md, "the same report, through the link");
    assert!(is_link_to(&stdout_link, fd1), "the link is still a link");

    // A link to a FIFO, and the FIFO itself: a reader gets the report, both stay as they were.
    let fifo = cwd.join("fifo");
    mkfifo(&fifo);
    let fifo_link = cwd.join("to-fifo");
    std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
    for target in [&fifo_link, &fifo] {
        let (read, out) = through_fifo(&fifo, || report_to(cwd, target));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(read, md, "the reader got the report");
        assert_eq!(text(&out.stdout).trim(), format!("report: {}", target.display()));
    }
    assert!(is_link_to(&fifo_link, &fifo));
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

    // A link to /dev/null.
    let null_link = cwd.join("null");
    std::os::unix::fs::symlink("/dev/null", &null_link).unwrap();
    let out = report_to(cwd, &null_link);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(is_link_to(&null_link, Path::new("/dev/null")));
    assert!(std::fs::symlink_metadata("/dev/null").unwrap().file_type().is_char_device());

    // Refused, exit 2, nothing created: a directory, a link to nothing.
    let out = report_to(cwd, cwd);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("a directory"), "{}", text(&out.stderr));
    let dangling = cwd.join("dangling");
    std::os::unix::fs::symlink(cwd.join("nowhere.md"), &dangling).unwrap();
    let out = report_to(cwd, &dangling);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("does not exist"), "{}", text(&out.stderr));
    assert!(!cwd.join("nowhere.md").exists());
    let left: Vec<String> =
        std::fs::read_dir(cwd).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left.len(), 5, "no temporary file left behind: {left:?}");

    // A run's outputs are several files: `-` is refused before anything is sent.
    let toml = cwd.join("s.toml");
    std::fs::write(&toml, scenario("anvil-sim", "none", "1", 2)).unwrap();
    for args in [["--out", "-"], ["--records", "-"]] {
        let out = anvil().current_dir(cwd).arg(&toml).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("standard output"), "{}", text(&out.stderr));
        assert!(!cwd.join("-").exists() && !cwd.join("results").exists());
    }
    let out = anvil().current_dir(cwd).args(["merge", "shard.records.ndjson", "--out", "-"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("standard output"), "{}", text(&out.stderr));
    assert!(!cwd.join("-").exists());
}

/// Lines of Markdown that open a block: headings, list items, quotes, table rows, HTML.
fn block_openers(md: &str) -> Vec<&str> {
    md.lines()
        .map(str::trim_start)
        .filter(|l| ["#", "- ", "* ", "+ ", ">", "<"].iter().any(|p| l.starts_with(p)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_from_the_scenario_start_no_heading_or_list_in_markdown_or_html() {
    let dir = tempfile::tempdir().unwrap();
    let model = "anvil-sim\n# Regression: none, ship it\n- [x] approved\n<script>alert(1)</script>";
    let gpu = "H100\r\n## Verdict: ✅ \u{2028}> quoted";
    let out = measure(dir.path(), "forged", &scenario(model, gpu, "2", 16)).await;

    let md_path = dir.path().join("report.md");
    let (code, _, err) = anvil_with(&["report", s(&out), "--format", "md", "--out", s(&md_path)]).await;
    assert_eq!(code, Some(0), "{err}");
    let md = std::fs::read_to_string(&md_path).unwrap();
    let openers = block_openers(&md);
    assert!(!openers.iter().any(|l| l.starts_with("# Regression") || l.starts_with("## Verdict")), "{md}");
    assert!(!openers.iter().any(|l| l.starts_with("- [x]") || l.starts_with("<script") || l.starts_with("> quoted")));
    // The strings are shown, as text: in the title (one `# ` line) and the provenance table.
    assert_eq!(md.lines().filter(|l| l.starts_with("# ")).count(), 1, "{md}");
    let title = md.lines().next().unwrap();
    assert!(
        title.contains("anvil-sim\\\\n\\# Regression: none, ship it\\\\n- \\[x\\] approved\\\\n\\<script\\>"),
        "{title}"
    );
    for forged in ["# Regression", "## Verdict", "- [x]", "<script", "> quoted"] {
        assert!(!md.lines().any(|l| l.trim_start().starts_with(forged)), "{forged}: {md}");
    }
    assert!(!md.contains('\r') && !md.contains('\u{2028}'), "{md}");

    let html_path = dir.path().join("report.html");
    let (code, _, err) = anvil_with(&["report", s(&out), "--out", s(&html_path)]).await;
    assert_eq!(code, Some(0), "{err}");
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert_eq!(html.matches("<h1>").count(), 1);
    assert!(!html.contains("<script") && html.contains("&lt;script&gt;"), "the page holds no script");
    assert!(html.contains("anvil-sim\\n# Regression: none, ship it\\n- [x] approved"), "shown as text");
    assert!(!html.contains('\u{2028}') && !html.contains('\r'));

    // compare --format md of the run against itself, and against a copy whose run id is forged.
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for a in artifacts(&out) {
        let mut v = read_json(&a);
        v["run_id"] = Value::from(format!("{}\n# Regression: none\n- [x] approved", v["run_id"].as_str().unwrap()));
        std::fs::write(copy.join(a.file_name().unwrap()), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    for (base, new) in [(&out, &out), (&out, &copy)] {
        let (code, md, err) = anvil_with(&["compare", s(base), s(new), "--format", "md"]).await;
        assert_eq!(code, Some(0), "{md}{err}");
        let openers = block_openers(&md);
        let headings: Vec<&&str> = openers.iter().filter(|l| l.starts_with('#')).collect();
        assert!(
            headings.iter().all(|l| **l == "## anvil-load compare" || l.starts_with("### c=")),
            "{headings:#?}\n{md}"
        );
        assert!(!openers.iter().any(|l| l.starts_with("- [x]")), "{md}");
        let (code, txt, _) = anvil_with(&["compare", s(base), s(new)]).await;
        assert_eq!(code, Some(0));
        assert!(!txt.lines().any(|l| l.starts_with("# Regression") || l.starts_with("- [x]")), "{txt}");
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_a_run_and_a_report_create_follows_the_umask() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, scenario("anvil-sim", "none", "[1, 2]", 12)).unwrap();
    let out = dir.path().join("out");
    let records = out.join("run.records.ndjson");
    // The shell sets the umask and becomes the binary.
    let with_umask = |mask: &str| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("umask {mask} && exec \"$0\" \"$@\"")).arg(env!("CARGO_BIN_EXE_anvil-load"));
        cmd.env_remove("ANVIL_BASE_URL").env("RUST_LOG", "warn");
        cmd
    };
    let mut cmd = with_umask("027");
    cmd.arg(&file).arg("--out").arg(&out).arg("--records").arg(&records).arg("--quiet");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    for a in artifacts(&out) {
        check_artifact(&a);
    }
    check_records(&records);
    let mut cmd = with_umask("027");
    cmd.arg("report").arg(&out).arg("--out").arg(out.join("report.html"));
    assert_eq!(run(cmd).await.status.code(), Some(0));

    let mut files: Vec<(String, u32)> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            )
        })
        .collect();
    files.sort();
    let named = |suffix: &str| files.iter().filter(|(n, _)| n.ends_with(suffix)).count();
    // Two artifacts, the sweep summary, the records and the report.
    assert_eq!(named(".json"), 3, "{files:?}");
    assert!(named(".records.ndjson") == 1 && named("report.html") == 1, "{files:?}");
    for (name, mode) in &files {
        assert_eq!(*mode, 0o640, "{name} is {mode:o} under umask 027: {files:?}");
    }

    // Another umask, another mode: the report's is the umask's, not a constant.
    let mut cmd = with_umask("002");
    cmd.arg("report").arg(&out).arg("--out").arg(out.join("report.html"));
    assert_eq!(run(cmd).await.status.code(), Some(0));
    let mode = std::fs::metadata(out.join("report.html")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o664);
}
