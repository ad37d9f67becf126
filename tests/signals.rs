//! Signals as `timeout` and impatient users send them: two SIGTERMs in quick succession still
//! write the artifact (in-flight requests cut, recorded as interrupted); a third quits at once
//! and names the records file and the command that rebuilds the artifacts.

#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{anvil, artifacts, check_artifact, check_records, text};

fn scenario(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("long.toml");
    // Long responses on the realistic profile: requests are in flight when the signals come.
    std::fs::write(
        &path,
        "[target]\nmodel = \"m\"\nsimulator = \"realistic\"\n[run]\nrequests = 400\ngrace = \"30s\"\nsnapshot_interval = \"0s\"\n\
         [load]\nconcurrency = 8\n[workload]\ncontext_tokens = 1024\nmax_context_tokens = 32768\nmax_tokens = 2000\ntokenizer = \"estimate\"\n\
         [output]\nignore_eos = true\n",
    )
    .unwrap();
    path
}

fn start(dir: &Path) -> Child {
    anvil()
        .arg(scenario(dir))
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until the run has started its level (the hidden records file holds its level line).
fn wait_for_requests(out: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(out)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("\"type\":\"level\"")));
        if found {
            return;
        }
        assert!(Instant::now() < deadline, "the run never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn term(child: &Child) {
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
}

#[test]
fn two_sigterms_in_a_row_still_write_the_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path());
    wait_for_requests(&dir.path().join("out"));
    let lines = stderr_lines(&mut child);
    term(&child);
    wait_for_line(&lines, "stopping: no new requests");
    term(&child);
    let started = Instant::now();
    wait_for_line(&lines, "cutting in-flight requests now");
    let status = child.wait().unwrap();
    let stderr: String = lines.iter().collect::<Vec<_>>().join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "the second signal did not cut the 30 s grace");
    let a = check_artifact(&artifacts(&dir.path().join("out"))[0]);
    assert_eq!(a["interrupted"], true);
    assert!(
        a["error_counts"]["interrupted"].as_u64().unwrap() > 0,
        "in-flight requests were cut: {}",
        a["error_counts"]
    );
}

#[test]
fn a_third_signal_quits_at_once_and_names_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path());
    let out = dir.path().join("out");
    wait_for_requests(&out);
    // Signals of one kind that arrive together are one signal (the kernel keeps one pending bit
    // per kind): each next one is sent once the previous one was acted on, as a user would.
    let lines = stderr_lines(&mut child);
    term(&child);
    wait_for_line(&lines, "stopping: no new requests");
    term(&child);
    wait_for_line(&lines, "cutting in-flight requests now");
    term(&child);
    let status = child.wait().unwrap();
    let stderr: String = lines.iter().collect::<Vec<_>>().join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    if !artifacts(&out).is_empty() {
        // The artifacts were finished before the third signal arrived: nothing to name.
        eprintln!("the artifacts were written before the third signal");
        check_artifact(&artifacts(&out)[0]);
        return;
    }
    // Quit before the artifacts were written: the exit names the records that hold the data.
    assert!(stderr.contains("quitting now, without writing the artifacts"), "{stderr}");
    assert!(stderr.contains("anvil-load summarize"), "{stderr}");
    let hidden: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".records.ndjson.tmp"))
        .collect();
    assert_eq!(hidden.len(), 1, "the records file is kept");
    assert!(stderr.contains(&hidden[0].display().to_string()), "{stderr}");
    check_records(&hidden[0]);
    let rebuilt = dir.path().join("rebuilt");
    let o = anvil().arg("summarize").arg(&hidden[0]).arg("--out").arg(&rebuilt).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "an interrupted level: {}", text(&o.stderr));
    check_artifact(&artifacts(&rebuilt)[0]);
}

/// The child's stderr, line by line, as it is written.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(wanted) => return,
            Ok(_) => {}
            Err(e) => panic!("no line with {wanted:?}: {e}"),
        }
    }
}
