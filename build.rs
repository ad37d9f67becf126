//! Build metadata for `--version` and the artifact's `client`: the commit the binary was built
//! from and the build date (UTC).
//!
//! - The commit: `ANVIL_BUILD_COMMIT` when set (a container build, an sdist, anything without
//!   `.git`), otherwise `git rev-parse` in the source tree, with `-dirty` when tracked files had
//!   changes; `unknown` when neither is there (a tarball, a registry download).
//! - The date: `SOURCE_DATE_EPOCH` when set (reproducible builds), otherwise the build's own
//!   clock.
//!
//! The script reruns only when the checked-out commit changes (and on those two variables), so
//! an ordinary edit-and-build does not rebuild everything for a new date; the dirty marker is
//! therefore the tree's state when the commit was first built (`touch build.rs` refreshes it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=ANVIL_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // Without any rerun-if-changed path cargo reruns the script on every change to the
    // package; this one keeps it to the paths below.
    println!("cargo:rerun-if-changed=build.rs");
    let commit = match std::env::var("ANVIL_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => sanitize(c.trim()),
        _ => git_commit().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=ANVIL_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=ANVIL_BUILD_DATE={}", build_date());
}

/// `git rev-parse --short=12 HEAD`, `-dirty` appended when tracked files differ from it; the
/// repository's HEAD and the branch it points at are watched for the rerun.
fn git_commit() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(&manifest).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // A worktree keeps HEAD in its own git directory, and the branches in the common one.
    let git_dir = absolute(&manifest, &git(&["rev-parse", "--git-dir"])?);
    let common_dir =
        git(&["rev-parse", "--git-common-dir"]).map_or_else(|| git_dir.clone(), |d| absolute(&manifest, &d));
    watch(&git_dir.join("HEAD"));
    watch(&common_dir.join("packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&common_dir.join(branch));
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty())?;
    // Untracked files (build outputs, results) do not make a build dirty; edits to tracked
    // files do.
    // --no-optional-locks: status must not rewrite the index of the tree it looks at.
    let dirty =
        git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{commit}-dirty") } else { commit })
}

fn absolute(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// A commit given from outside: hex digits, letters, `-` and `.` only, at most 40 characters,
/// so nothing else can reach the version line.
fn sanitize(c: &str) -> String {
    let kept: String = c.chars().filter(|ch| ch.is_ascii_alphanumeric() || *ch == '-' || *ch == '.').take(40).collect();
    if kept.is_empty() { "unknown".to_string() } else { kept }
}

/// YYYY-MM-DD (UTC) of `SOURCE_DATE_EPOCH`, or of now.
fn build_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
