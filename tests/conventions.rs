//! The conventions of a command-line tool, held on the real binary: shell completions and a man
//! page, "did you mean" for a mistyped subcommand (nothing sent, no scenario read), `--version`
//! naming the commit and build date (the same in the artifact's `client`), and `-` meaning
//! standard output for every output file (refused, naming the option, where a directory is
//! expected).

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Output;

use common::{anvil, artifacts, check_artifact, manifest_dir, scenario, text};

fn anvil_in(dir: &Path, args: &[&str]) -> Output {
    anvil().current_dir(dir).args(args).output().expect("the binary starts")
}

#[test]
fn completions_print_a_script_naming_the_subcommands_and_options_for_every_shell() {
    let out = anvil().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(
        script.contains("complete -F _anvil-load") || script.contains("_anvil__load"),
        "a bash completion function"
    );
    for word in ["report", "compare", "validate", "summarize", "merge", "mock", "--base-url", "--concurrency"] {
        assert!(script.contains(word), "the bash script names {word}");
    }
    for (shell, marker) in [
        ("zsh", "#compdef anvil-load"),
        ("fish", "complete -c anvil-load"),
        ("elvish", "anvil-load"),
        ("powershell", "anvil-load"),
    ] {
        let out = anvil().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker) && script.contains("base-url"), "{shell}: {script:.200}");
    }
    let out = anvil().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bash"), "the shells it knows are listed: {}", text(&out.stderr));
}

#[test]
fn man_prints_roff_and_writes_one_page_per_command_into_a_directory() {
    let out = anvil().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.lines().any(|l| l.starts_with(".TH anvil-load 1")), "{page:.300}");
    assert!(page.contains(".SH SYNOPSIS") && page.contains("base\\-url"), "{page:.300}");

    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let out = anvil().args(["man", "--dir"]).arg(&pages).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for name in ["anvil-load.1", "anvil-load-report.1", "anvil-load-compare.1", "anvil-load-deploy-kubernetes.1"] {
        let body = std::fs::read_to_string(pages.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(body.contains(".TH "), "{name} is roff");
        assert!(text(&out.stdout).contains(name), "the page written is named: {}", text(&out.stdout));
    }
}

/// A listener nobody should connect to: the proof that a refused command sent nothing.
fn untouched_server() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    (listener, url)
}

fn assert_untouched(listener: &TcpListener) {
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a refused command connected to the server: {other:?}"),
    }
}

#[test]
fn a_mistyped_subcommand_is_named_and_nothing_is_read_or_sent() {
    let cwd = tempfile::tempdir().unwrap();
    let (listener, url) = untouched_server();
    for (typed, meant) in [("reprot", "report"), ("comapre", "compare"), ("mokc", "mock"), ("valdate", "validate")] {
        let out = anvil_in(cwd.path(), &["--base-url", &url, typed]);
        assert_eq!(out.status.code(), Some(2), "{typed}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(&format!("unknown command '{typed}'; did you mean '{meant}'?")), "{err}");
        assert!(!err.contains("cannot read the scenario file"), "{err}");
        // Same with the word first and options after it.
        let out = anvil_in(cwd.path(), &[typed, "--base-url", &url, "--requests", "3"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains(&format!("did you mean '{meant}'")), "{}", text(&out.stderr));
    }
    assert_untouched(&listener);

    // A word far from every command stays a scenario path, with the scenario's own error.
    let out = anvil_in(cwd.path(), &["smoke"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("cannot read the scenario file") && !err.contains("did you mean"), "{err}");
    // A file that exists under the mistyped name is what was meant: it is read as the scenario.
    std::fs::write(cwd.path().join("reprot"), "[run]\nrequests = \"many\"\n").unwrap();
    let out = anvil_in(cwd.path(), &["validate", "reprot"]);
    assert!(!text(&out.stderr).contains("did you mean"), "{}", text(&out.stderr));
    let out = anvil_in(cwd.path(), &["reprot"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("reprot") && err.contains("requests") && !err.contains("did you mean"), "{err}");
}

/// The commit `--version` should name: git's view of this checkout, or `unknown` without git.
fn expected_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    out.status.success().then(|| text(&out.stdout).trim().to_string())
}

/// `anvil-load 0.1.0 (COMMIT YYYY-MM-DD)` split into its commit and date.
fn version_parts(line: &str) -> (String, String) {
    let inner = line
        .trim()
        .strip_prefix(concat!("anvil-load ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("version line {line:?}"));
    let (commit, date) = inner.split_once(' ').unwrap_or_else(|| panic!("version line {line:?}"));
    (commit.to_string(), date.to_string())
}

#[test]
fn version_names_the_commit_and_build_date_and_the_artifact_carries_them() {
    let long = anvil().arg("--version").output().unwrap();
    let short = anvil().arg("-V").output().unwrap();
    assert_eq!(long.status.code(), Some(0));
    assert_eq!(long.stdout, short.stdout, "-V and --version say the same");
    let (commit, date) = version_parts(&text(&long.stdout));
    match expected_commit() {
        Some(head) => assert!(commit == head || commit == format!("{head}-dirty"), "{commit} is HEAD {head}"),
        None => assert_eq!(commit, "unknown"),
    }
    let d: Vec<&str> = date.split('-').collect();
    assert!(d.len() == 3 && d[0].len() == 4 && d.iter().all(|p| p.parse::<u32>().is_ok()), "a UTC date: {date}");

    let dir = tempfile::tempdir().unwrap();
    let out = anvil()
        .arg(scenario("smoke.toml"))
        .args(["--simulator", "instant", "--requests", "8", "--quiet", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let files = artifacts(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let artifact = check_artifact(&files[0]);
    assert_eq!(artifact["client"]["name"], "anvil-load");
    assert_eq!(artifact["client"]["commit"], commit.as_str());
    assert_eq!(artifact["client"]["build_date"], date.as_str());
}

#[test]
fn dash_is_standard_output_for_every_output_file_and_refused_where_a_directory_is_expected() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let smoke = scenario("smoke.toml");
    let smoke = smoke.to_str().unwrap();
    let out = anvil_in(
        dir,
        &[
            smoke,
            "--simulator",
            "instant",
            "--requests",
            "6",
            "--quiet",
            "--out",
            "run",
            "--records",
            "run.records.ndjson",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for artifact in artifacts(&dir.join("run")) {
        check_artifact(&artifact);
    }

    // Files: the report (both formats) goes to standard output, and nothing else does.
    for format in ["html", "md"] {
        let out = anvil_in(dir, &["report", "run", "--format", format, "--out", "-"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let body = text(&out.stdout);
        let opening = if format == "html" { "<!DOCTYPE html>" } else { "# " };
        assert!(body.trim_start().starts_with(opening), "{format}: {body:.200}");
        assert!(!body.contains("report: "), "only the report on stdout");
        assert!(text(&out.stderr).contains("standard output"), "{}", text(&out.stderr));
        assert!(!dir.join("-").exists(), "no file named -");
    }

    // Directories and files read back: refused before anything is read, run or sent, naming
    // the option.
    let (listener, url) = untouched_server();
    let refusals: [(&[&str], &str); 5] = [
        (&[smoke, "--base-url", &url, "--out", "-"], "--out"),
        (&[smoke, "--base-url", &url, "--records", "-"], "--records"),
        (&["summarize", "run.records.ndjson", "--out", "-"], "--out"),
        (&["merge", "run.records.ndjson", "--out", "-"], "--out"),
        (&["man", "--dir", "-"], "--dir"),
    ];
    for (args, option) in refusals {
        let out = anvil_in(dir, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(option) && err.contains("standard output"), "{args:?}: {err}");
        assert!(!dir.join("-").exists(), "{args:?}: no file or directory named -");
    }
    assert_untouched(&listener);
}
