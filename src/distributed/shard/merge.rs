//! The one place a finished sharded run hands its gathered records files to the merge.
//!
//! `merge(paths, out)` is what the coordinator calls once every shard's records have arrived:
//! the merge proper (`crate::after_run::rebuild::merge::merge`). When it fails, the message names the
//! gathered files and the `anvil-load merge` command, so the files are never silently left behind.
//! A run of several levels also gets its merged sweep file, as one process would have written it.

use std::path::{Path, PathBuf};

use crate::results::aggregate::summary::LevelSummary;
use crate::results::console::sweep::write_sweep;

/// What became of the gathered records files: the merged artifacts, one per level with its
/// summary, and for a run of several levels the merged sweep file.
#[derive(Debug, Clone)]
pub struct Merged {
    pub run_id: String,
    pub levels: Vec<(LevelSummary, PathBuf)>,
    /// `RUN_ID-sweep.json`, the same shape as a one-process sweep's (several levels only).
    pub sweep: Option<PathBuf>,
    /// The merged records file and time series.
    pub files: Vec<PathBuf>,
}

impl Merged {
    /// One line for the console and for every shard: where the merged results are.
    pub fn describe(&self) -> String {
        let dir =
            self.levels.first().and_then(|(_, p)| p.parent()).map(|d| d.display().to_string()).unwrap_or_default();
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let artifacts = match self.levels.as_slice() {
            [(_, one)] => name(one),
            levels => format!("{}-*.json ({} levels)", self.run_id, levels.len()),
        };
        let sweep = self.sweep.as_deref().map(|p| format!(", sweep {}", name(p))).unwrap_or_default();
        format!("merged artifacts in {dir}: {artifacts}{sweep}")
    }
}

/// Merge the records files of one run's shards into artifacts under `out`, and for several
/// levels the sweep file a single process would have written.
pub fn merge(paths: &[PathBuf], out: &Path) -> Result<Merged, String> {
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.len() == 0 {
            return Err(format!("{}: empty; its shard sent no records", path.display()));
        }
    }
    let mut notices = Vec::new();
    let merged =
        crate::after_run::rebuild::merge::merge(paths, out, false, std::time::Duration::from_secs(60), &mut notices);
    for notice in &notices {
        eprintln!("{notice}");
    }
    let merged = merged.map_err(|e| e.to_string())?;
    let run_id = merged.runs.first().map(|r| r.run_id.clone()).unwrap_or_default();
    let levels: Vec<(LevelSummary, PathBuf)> = merged.levels.into_iter().map(|l| (l.summary, l.artifact)).collect();
    let sweep = if levels.len() > 1 {
        Some(write_sweep(out, &run_id, &run_id, levels.iter().map(|(a, p)| (a, p.as_path())))?)
    } else {
        None
    };
    Ok(Merged { run_id, levels, sweep, files: merged.files })
}

/// The command that merges `paths` into `out` by hand.
pub fn command(paths: &[PathBuf], out: &Path) -> String {
    let mut command = String::from("anvil-load merge");
    for path in paths {
        command.push(' ');
        command.push_str(&shell_quote(&path.display().to_string()));
    }
    command.push_str(" --out ");
    command.push_str(&shell_quote(&out.display().to_string()));
    command
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_part_is_named_and_the_command_quotes_paths() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("r.shard0of2.records.ndjson");
        let b = dir.path().join("r.shard1of2.records.ndjson");
        std::fs::write(&a, "").unwrap();
        assert!(merge(&[a.clone(), b.clone()], dir.path()).unwrap_err().contains("shard0of2"));
        let command = command(&[a, b], Path::new("my results"));
        assert!(command.starts_with("anvil-load merge "), "{command}");
        assert!(
            command.contains("shard0of2") && command.contains("shard1of2") && command.ends_with("--out 'my results'")
        );
    }
}
