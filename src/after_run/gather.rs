//! The result files `report` and `compare` take, read back typed and grouped into runs: level
//! artifacts, sweep summaries (`<run_id>-sweep.json`), capacity-search traces
//! (`<run_id>-search.json`), soak time series (`<level>.timeseries.ndjson`, picked up beside
//! their artifact), or directories holding any of them (searched down to a few levels of subdirectories).
//!
//! A run is a single level, a sweep (several levels of one configuration) or a capacity search
//! (its probes). Artifacts a summary or trace names are found where it says or, when the
//! directory was moved, beside it. Artifacts no summary names are grouped by configuration
//! fingerprint and run id (`<run_id>-c8`, `<run_id>-r50` are levels of `<run_id>`), so a
//! directory of levels whose summary was lost is still a sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::results::aggregate::snapshots::Window;
use crate::results::artifact::{self, ArtifactFile, Keep};

pub const SWEEP_SCHEMA: &str = "anvil-load.sweep/v1";
pub const SEARCH_SCHEMA: &str = "anvil-load.search/v1";
const TIMESERIES_SUFFIX: &str = ".timeseries.ndjson";

/// What kind of run a group of levels is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Single,
    Sweep,
    Search,
}

/// One run: its levels in load order and, for a capacity search, the trace.
#[derive(Debug)]
pub struct Run {
    pub run_id: String,
    pub kind: RunKind,
    pub levels: Vec<LevelFile>,
    pub search: Option<SearchTrace>,
    /// Which of the paths given it was found under (their index): runs are ordered by it, so
    /// `report BASE NEW` keeps BASE first whatever ran first.
    pub source: usize,
}

/// One level's artifact, where it was read from, and its snapshot windows (empty without a
/// time-series file beside it).
#[derive(Debug)]
pub struct LevelFile {
    pub path: PathBuf,
    pub artifact: ArtifactFile,
    pub windows: Vec<Window>,
}

/// The `search` block of a capacity-search trace.
#[derive(Debug, Clone, Deserialize)]
pub struct SearchTrace {
    pub by: String,
    pub min: f64,
    pub max: f64,
    pub probes: Vec<ProbeFile>,
    pub best: Option<f64>,
    pub finished: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ProbeFile {
    pub level: f64,
    pub passed: bool,
    pub goodput_rps: Option<f64>,
    pub artifact: Option<String>,
}

#[derive(Deserialize)]
struct SearchDoc {
    run_id: String,
    search: SearchTrace,
}

#[derive(Deserialize)]
struct SweepDoc {
    run_id: String,
    levels: Vec<SweepRowRef>,
}

#[derive(Deserialize)]
struct SweepRowRef {
    artifact: String,
}

/// Only the `schema` key, to tell the files apart without building them.
#[derive(Deserialize)]
struct SchemaPeek {
    schema: Option<String>,
    #[serde(flatten)]
    _rest: BTreeMap<String, IgnoredAny>,
}

/// Everything the paths hold, grouped into runs (in the order they started), with notes about
/// files passed over.
#[derive(Debug, Default)]
pub struct Gathered {
    pub runs: Vec<Run>,
    /// Files in a directory that are no result of this tool, and lines of a time series that
    /// could not be read.
    pub notes: Vec<String>,
}

impl Gathered {
    /// Every level of every run.
    pub fn levels(&self) -> impl Iterator<Item = &LevelFile> {
        self.runs.iter().flat_map(|r| r.levels.iter())
    }
}

/// Read and group everything the paths name, every artifact with its timeline. Errors name the
/// file and the problem.
pub fn gather(paths: &[PathBuf]) -> Result<Gathered, String> {
    gather_keeping(paths, Keep::Timeline)
}

/// [`gather`], keeping of each record what `keep` says.
pub fn gather_keeping(paths: &[PathBuf], keep: Keep) -> Result<Gathered, String> {
    let mut out = Gathered::default();
    let mut artifacts: BTreeMap<PathBuf, ArtifactFile> = BTreeMap::new();
    let mut sweeps: Vec<(PathBuf, SweepDoc)> = Vec::new();
    let mut searches: Vec<(PathBuf, SearchDoc)> = Vec::new();
    for (path, explicit) in expand(paths)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(stem) = name.strip_suffix(TIMESERIES_SUFFIX) {
            // A time series stands for the level whose artifact is beside it.
            let beside = path.with_file_name(format!("{stem}.json"));
            if !beside.exists() {
                if explicit {
                    return Err(format!(
                        "{}: a time series is read with its level's artifact, and {} is not there; pass the directory holding both",
                        path.display(),
                        beside.display()
                    ));
                }
                continue;
            }
            load_artifact(&mut artifacts, &beside, keep)?;
            continue;
        }
        // Artifacts name their schema first: one that reads as an artifact is scanned once, not
        // also to tell what it is (a fifth of `compare`'s time at 200,000 requests). What does
        // not read as one goes the general way below, and is told apart as before.
        if leading_schema(&path).as_deref() == Some(artifact::SCHEMA)
            && load_artifact(&mut artifacts, &path, keep).is_ok()
        {
            continue;
        }
        // The document without its records: an artifact's head, or a whole summary or trace.
        let bytes = head_of(&path)?;
        let schema = serde_json::from_slice::<SchemaPeek>(&bytes).ok().and_then(|p| p.schema);
        match schema.as_deref() {
            Some(artifact::SCHEMA) => {
                load_artifact(&mut artifacts, &path, keep)?;
            }
            Some(SWEEP_SCHEMA) => {
                let doc = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{}: not a readable {SWEEP_SCHEMA} summary ({e})", path.display()))?;
                sweeps.push((path, doc));
            }
            Some(SEARCH_SCHEMA) => {
                let doc = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{}: not a readable {SEARCH_SCHEMA} trace ({e})", path.display()))?;
                searches.push((path, doc));
            }
            other if explicit => {
                return Err(format!(
                    "{}: not a result of anvil-load (schema {}); give artifacts ({}), sweep summaries, search traces or a directory of them",
                    path.display(),
                    other.map_or_else(|| "missing".to_string(), |s| format!("{s:?}")),
                    artifact::SCHEMA
                ));
            }
            _ => out.notes.push(format!("{}: passed over (not a result of anvil-load)", path.display())),
        }
    }

    // Summaries and traces claim their levels first; what is left is grouped by run id.
    let mut claimed: BTreeSet<PathBuf> = BTreeSet::new();
    let mut runs: Vec<(String, RunKind, Vec<PathBuf>, Option<SearchTrace>)> = Vec::new();
    for (path, doc) in searches {
        let files = doc.search.probes.iter().filter_map(|p| p.artifact.as_deref());
        let files = resolve_all(&path, files, &mut artifacts, keep)?;
        runs.push((doc.run_id, RunKind::Search, files, Some(doc.search)));
    }
    for (path, doc) in sweeps {
        let files = resolve_all(&path, doc.levels.iter().map(|r| r.artifact.as_str()), &mut artifacts, keep)?;
        match runs.iter_mut().find(|r| r.0 == doc.run_id) {
            // A search writes a sweep summary too: the same levels.
            Some(run) => run.2.extend(files),
            None => runs.push((doc.run_id, RunKind::Sweep, files, None)),
        }
    }
    for run in &mut runs {
        run.2.sort();
        run.2.dedup();
        claimed.extend(run.2.iter().cloned());
    }
    let mut loose: BTreeMap<(String, String), Vec<PathBuf>> = BTreeMap::new();
    for (path, a) in &artifacts {
        if !claimed.contains(path) {
            let key = (a.configuration_fingerprint.clone(), run_prefix(a).to_string());
            loose.entry(key).or_default().push(path.clone());
        }
    }
    for ((_, prefix), files) in loose {
        let kind = if files.len() > 1 { RunKind::Sweep } else { RunKind::Single };
        let run_id = if files.len() > 1 { prefix } else { artifacts[&files[0]].run_id.clone() };
        runs.push((run_id, kind, files, None));
    }

    for (run_id, kind, files, search) in runs {
        let mut levels = Vec::new();
        for path in files {
            let Some(artifact) = artifacts.remove(&path) else { continue };
            let windows = read_windows(&path, &mut out.notes);
            levels.push(LevelFile { path, artifact, windows });
        }
        levels.sort_by(|a, b| a.artifact.level().total_cmp(&b.artifact.level()));
        if levels.is_empty() {
            continue;
        }
        let source = source_of(paths, &levels[0].path);
        out.runs.push(Run { run_id, kind, levels, search, source });
    }
    out.runs.sort_by_key(|r| (r.source, r.levels.first().map_or(0, |l| l.artifact.started_at_unix_ns)));
    if out.runs.is_empty() {
        let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "{}: no anvil-load results there; give artifacts, sweep summaries, search traces or a directory holding them",
            named.join(", ")
        ));
    }
    Ok(out)
}

/// How deep `report DIR` looks below each directory it is given: results sit in `DIR/` or a
/// few levels down (`results/<gpu>/<engine>/<run>/`); deeper is more likely a home directory.
pub const MAX_DEPTH: usize = 4;

/// Directories become their result files, found in them and in their subdirectories down to
/// [`MAX_DEPTH`], in a fixed order (sorted by path). Hidden entries are left out, and symbolic
/// links to directories are not followed, so a link loop cannot make the walk endless.
fn expand(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>, String> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
        if meta.is_file() {
            out.push((path.clone(), true));
            continue;
        }
        if !meta.is_dir() {
            // A FIFO or a device would block the read or never end.
            return Err(format!(
                "{}: it is {}, not a regular file or a directory; give artifacts, sweep summaries, search traces or a directory of them",
                path.display(),
                crate::sys::kind_in_words(&meta.file_type())
            ));
        }
        let mut files = Vec::new();
        walk(path, 0, &mut files)?;
        files.sort();
        out.extend(files.into_iter().map(|p| (p, false)));
    }
    Ok(out)
}

/// The `.json` files of `dir` and of its subdirectories down to [`MAX_DEPTH`]. The directory
/// given must be listable; a subdirectory that is not is passed over (it may be another user's).
fn walk(dir: &Path, depth: usize, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if depth == 0 => return Err(format!("{}: cannot list it ({e})", dir.display())),
        Err(_) => return Ok(()),
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        // The entry's own type: a symbolic link is a link here, never the directory it names.
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() {
            if depth < MAX_DEPTH {
                walk(&path, depth + 1, files)?;
            }
        } else if name.ends_with(".json") && path.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

/// The index of the first path given that holds `level` (a directory above it, or a file beside
/// it: a summary's levels sit next to the summary); past the end when none does.
fn source_of(paths: &[PathBuf], level: &Path) -> usize {
    paths
        .iter()
        .position(|p| {
            let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            let dir = if p.is_file() { p.parent().map(Path::to_path_buf).unwrap_or_default() } else { p };
            level.starts_with(dir)
        })
        .unwrap_or(paths.len())
}

fn load_artifact(artifacts: &mut BTreeMap<PathBuf, ArtifactFile>, path: &Path, keep: Keep) -> Result<PathBuf, String> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if !artifacts.contains_key(&key) {
        let a = ArtifactFile::read_keeping(path, keep)?;
        artifacts.insert(key.clone(), a);
    }
    Ok(key)
}

/// The artifacts a summary or trace names: where it says, or beside it when the directory moved.
fn resolve_all<'a>(
    summary: &Path,
    named: impl Iterator<Item = &'a str>,
    artifacts: &mut BTreeMap<PathBuf, ArtifactFile>,
    keep: Keep,
) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for name in named {
        let as_written = PathBuf::from(name);
        let beside = as_written.file_name().map(|f| summary.with_file_name(f));
        let found = beside.iter().chain(std::iter::once(&as_written)).find(|p| p.is_file()).cloned();
        let Some(found) = found else {
            return Err(format!(
                "{}: names the artifact {name}, which is neither there nor beside the summary; keep the artifacts beside it or pass them directly",
                summary.display()
            ));
        };
        out.push(load_artifact(artifacts, &found, keep)?);
    }
    Ok(out)
}

/// How a level is named for people: `c=8` (closed loop) or `50 req/s` (open loop).
pub fn level_label(a: &ArtifactFile) -> String {
    match a.rate {
        // A planned rate is shown as people write it (`5.11 req/s`), never as a raw float.
        Some(rate) => format!("{} req/s", crate::numbers::significant(rate, 3)),
        None => format!("c={}", a.concurrency),
    }
}

/// The run id a level belongs to: `<run_id>` of `<run_id>-c8` or `<run_id>-r50`.
fn run_prefix(a: &ArtifactFile) -> &str {
    let suffix = match a.rate {
        Some(rate) => format!("-r{rate}"),
        None => format!("-c{}", a.concurrency),
    };
    a.run_id.strip_suffix(&suffix).unwrap_or(&a.run_id)
}

/// The schema a JSON document names as its first member, read from its first 4 KiB; `None`
/// when it does not start that way.
fn leading_schema(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    crate::sys::open_input(path).ok()?.take(4096).read_to_end(&mut head).ok()?;
    let rest = head.trim_ascii_start().strip_prefix(b"{")?.trim_ascii_start();
    let rest = rest.strip_prefix(b"\"schema\"")?.trim_ascii_start().strip_prefix(b":")?.trim_ascii_start();
    artifact::scan::one::<String>(rest, false).ok()?.map(|(schema, _)| schema)
}

/// A JSON document with the records of an artifact skipped (see `artifact::scan`), so that
/// telling what a file is costs no memory for its records; what is not one JSON object comes
/// back empty (and is then no result of anvil-load).
fn head_of(path: &Path) -> Result<Vec<u8>, String> {
    let file = crate::sys::open_input(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
    let skip =
        |_, bytes: &[u8], whole| Ok(artifact::scan::one::<serde::de::IgnoredAny>(bytes, whole)?.map(|(_, used)| used));
    match artifact::scan::scan(file, &["request_timings", "failures"], skip) {
        Ok(head) => Ok(head),
        Err(artifact::scan::ScanError::Io(e)) => Err(format!("{}: cannot read it ({e})", path.display())),
        Err(artifact::scan::ScanError::Syntax(_)) => Ok(Vec::new()),
    }
}

/// The snapshot windows beside an artifact; unreadable lines (a torn last line of a killed run)
/// are noted and left out.
fn read_windows(artifact: &Path, notes: &mut Vec<String>) -> Vec<Window> {
    let name = artifact.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    let path = artifact.with_file_name(format!("{stem}{TIMESERIES_SUFFIX}"));
    let Ok(file) = crate::sys::open_input(&path) else { return Vec::new() };
    let mut windows = Vec::new();
    // Line by line: a day's soak has tens of thousands of windows.
    for (i, line) in std::io::BufRead::lines(std::io::BufReader::new(file)).enumerate() {
        let line = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(e) => {
                notes.push(format!("{}:{}: the rest is left out ({e})", path.display(), i + 1));
                break;
            }
        };
        match serde_json::from_str::<Window>(&line) {
            Ok(w) => windows.push(w),
            Err(e) => notes.push(format!("{}:{}: window left out ({e})", path.display(), i + 1)),
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/summarize").join(dir)
    }

    #[test]
    fn the_leading_schema_is_read_only_where_our_documents_put_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        for (text, want) in [
            (" \n{ \"schema\" :\t\"anvil-serving.benchmark/v1\", \"x\": 1}", Some("anvil-serving.benchmark/v1")),
            ("{\"schema\":\"a\\\"b\"", Some("a\"b")),
            ("{\"run_id\":\"r\",\"schema\":\"anvil-serving.benchmark/v1\"}", None),
            ("{\"schema\":\"anvil-serving.bench", None),
            ("{\"schema\":1}", None),
            ("[\"schema\"]", None),
            ("", None),
        ] {
            std::fs::write(&file, text).unwrap();
            assert_eq!(leading_schema(&file).as_deref(), want, "{text}");
        }
        // A document cut after its schema reads as no artifact, and takes the general way.
        std::fs::write(&file, "{\"schema\":\"anvil-serving.benchmark/v1\",\"request_timings\":[{").unwrap();
        let g = gather(&[dir.path().to_path_buf(), fixture("open")]).unwrap();
        assert_eq!(g.levels().count(), 1);
        assert!(g.notes.iter().any(|n| n.contains("a.json")), "{:?}", g.notes);
    }

    #[test]
    fn loose_levels_of_one_run_are_a_sweep() {
        let g = gather(&[fixture("closed")]).unwrap();
        assert_eq!(g.runs.len(), 1);
        let run = &g.runs[0];
        assert_eq!((run.kind, run.run_id.as_str()), (RunKind::Sweep, "anvil-20261130T175132Z-2fa1"));
        let levels: Vec<f64> = run.levels.iter().map(|l| l.artifact.level()).collect();
        assert_eq!(levels, [2.0, 6.0]);
    }

    #[test]
    fn runs_are_kept_apart_and_summaries_find_moved_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(fixture("closed")).unwrap() {
            let p = entry.unwrap().path();
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
        // The summary names the artifacts where they were written, elsewhere.
        let levels: Vec<serde_json::Value> = ["c2", "c6"]
            .iter()
            .map(|c| serde_json::json!({ "artifact": format!("/gone/anvil-20261130T175132Z-2fa1-{c}.json") }))
            .collect();
        let sweep =
            serde_json::json!({ "schema": SWEEP_SCHEMA, "run_id": "anvil-20261130T175132Z-2fa1", "levels": levels });
        std::fs::write(dir.path().join("x-sweep.json"), sweep.to_string()).unwrap();
        std::fs::write(dir.path().join("notes.json"), "{\"hello\": 1}").unwrap();
        let g = gather(&[dir.path().to_path_buf(), fixture("open")]).unwrap();
        assert_eq!(g.runs.len(), 2);
        assert_eq!(g.runs[0].kind, RunKind::Sweep);
        assert_eq!(g.runs[0].levels.len(), 2);
        assert_eq!(g.runs[1].kind, RunKind::Single);
        assert_eq!(g.levels().count(), 3);
        assert!(g.notes.iter().any(|n| n.contains("notes.json")), "{:?}", g.notes);
        // Named explicitly, a foreign file is an error naming it.
        let err = gather(&[dir.path().join("notes.json")]).unwrap_err();
        assert!(err.contains("notes.json") && err.contains("not a result"), "{err}");
        std::fs::remove_file(dir.path().join("anvil-20261130T175132Z-2fa1-c6.json")).unwrap();
        let err = gather(&[dir.path().to_path_buf()]).unwrap_err();
        assert!(err.contains("x-sweep.json") && err.contains("c6.json"), "{err}");
    }

    #[test]
    fn nothing_there_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(gather(&[dir.path().to_path_buf()]).unwrap_err().contains("no anvil-load results"));
        assert!(gather(&[dir.path().join("missing.json")]).unwrap_err().contains("missing.json"));
        // A device is refused before it is read (a FIFO likewise: its read would block).
        let e = gather(&[PathBuf::from("/dev/null")]).unwrap_err();
        assert!(e.contains("/dev/null: it is a device, not a regular file or a directory"), "{e}");
    }
}
