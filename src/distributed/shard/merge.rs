//! The one place a finished sharded run hands its gathered records files to the merge.
//!
//! `merge(paths, out)` is what the coordinator calls once every shard's records have arrived:
//! the merge proper (`crate::after_run::rebuild::merge::merge`). When it fails, the message names the
//! gathered files and the `anvil-load merge` command, so the files are never silently left behind.

use std::path::{Path, PathBuf};

/// What became of the gathered records files.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeOutcome {
    /// Merged artifacts written.
    Written(Vec<PathBuf>),
}

impl MergeOutcome {
    /// One line for the console and for every shard.
    pub fn describe(&self) -> String {
        match self {
            MergeOutcome::Written(paths) => {
                let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                format!("merged artifacts: {}", list.join(", "))
            }
        }
    }
}

/// Merge the records files of one run's shards into artifacts under `out`.
pub fn merge(paths: &[PathBuf], out: &Path) -> Result<MergeOutcome, String> {
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
    Ok(MergeOutcome::Written(merged.levels.into_iter().map(|l| l.artifact).collect()))
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
