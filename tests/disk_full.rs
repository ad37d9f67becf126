//! A disk that fills during a run, for real: a small tmpfs mounted for the test (CI runs as root;
//! without root the test says so and fails, it never passes silently). A disk full for a few
//! seconds loses no record and the artifact agrees with itself; a disk that stays full stops the
//! run, exits 1 and names the records file and the command that rebuilds the artifacts.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{anvil, artifacts, check_artifact, check_records, text};

/// A tmpfs of `mb` megabytes, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mb: u32) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "cannot mount a tmpfs (this test needs root, as CI has): the disk-full behaviour would go untested"
        );
        Tmpfs { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fill the file system with one file until it refuses more; returns the file.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let _ = f.flush();
    path
}

fn scenario(dir: &Path, limit: &str) -> PathBuf {
    let path = dir.join("s.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\nsimulator = \"fast\"\n[run]\n{limit}\nseed = 3\nsnapshot_interval = \"0s\"\n\
             [load]\nconcurrency = 8\n[workload]\ncontext_tokens = 256\nmax_context_tokens = 8192\nmax_tokens = 16\ntokenizer = \"estimate\"\n"
        ),
    )
    .unwrap();
    path
}

/// Wait until the records file holds at least `bytes`.
fn wait_for(path: &Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(path).map_or(0, |m| m.len()) < bytes {
        assert!(Instant::now() < deadline, "the run never wrote {bytes} bytes of records");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_disk_full_for_two_seconds_loses_no_record() {
    let fs = Tmpfs::mount(72);
    let work = tempfile::tempdir().unwrap();
    let out = fs.path().join("out");
    let records = fs.path().join("run.records.ndjson");
    let child = anvil()
        .arg(scenario(work.path(), "requests = 3000"))
        .arg("--out")
        .arg(&out)
        .arg("--records")
        .arg(&records)
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    wait_for(&records, 200_000);
    let filler = fill(fs.path());
    std::thread::sleep(Duration::from_secs(2));
    std::fs::remove_file(filler).unwrap();
    let result = child.wait_with_output().expect("finishes");
    assert!(result.status.success(), "{}", text(&result.stderr));
    assert!(text(&result.stderr).contains("nothing was lost"), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    assert_eq!(a["requests"], 3000);
    assert_eq!(a["request_timings"].as_array().unwrap().len() as u64, a["completed"].as_u64().unwrap());
    // The server's own count: every request it received is in the artifact.
    assert_eq!(a["simulator"]["requests_received"].as_u64(), Some(3000), "{}", a["simulator"]);
    check_records(&records);
    let lines = std::fs::read_to_string(&records).unwrap();
    let requests =
        lines.lines().filter(|l| l.contains("\"type\":\"request\"") || l.contains("\"type\":\"failure\"")).count();
    assert_eq!(requests, 3000);
}

#[test]
fn a_disk_that_stays_full_stops_the_run_and_names_the_records() {
    let fs = Tmpfs::mount(72);
    let work = tempfile::tempdir().unwrap();
    let out = fs.path().join("out");
    let records = fs.path().join("run.records.ndjson");
    let child = anvil()
        .arg(scenario(work.path(), "duration = \"120s\""))
        .arg("--out")
        .arg(&out)
        .arg("--records")
        .arg(&records)
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    wait_for(&records, 200_000);
    let filler = fill(fs.path());
    let started = Instant::now();
    let result = child.wait_with_output().expect("finishes");
    assert!(started.elapsed() < Duration::from_secs(60), "the run did not stop");
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write the records file"), "{stderr}");
    assert!(stderr.contains(&format!("anvil-load summarize {}", records.display())), "{stderr}");
    // With space again, the records rebuild a consistent (partial, interrupted) artifact.
    std::fs::remove_file(filler).unwrap();
    check_records(&records);
    let rebuilt = work.path().join("rebuilt");
    let summarize = anvil().arg("summarize").arg(&records).arg("--out").arg(&rebuilt).output().unwrap();
    assert_eq!(summarize.status.code(), Some(1), "interrupted levels exit 1: {}", text(&summarize.stderr));
    let a = check_artifact(&artifacts(&rebuilt)[0]);
    assert_eq!(a["interrupted"], true);
    assert!(a["requests"].as_u64().unwrap() > 0);
}
