//! The one place a finished sharded run hands its gathered records files to the merge.
//!
//! `merge(paths, out)` is the interface the coordinator calls once every shard's records have
//! arrived. This build has no merge of its own: it checks that every records file is there
//! and says how to merge them (`anvil-load merge`), so the files are never silently left behind.

use std::path::{Path, PathBuf};

/// What became of the gathered records files.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeOutcome {
    /// Merged artifacts written.
    Written(Vec<PathBuf>),
    /// The records files are complete and kept; this command merges them.
    Deferred { command: String },
}

impl MergeOutcome {
    /// One line for the console and for every shard.
    pub fn describe(&self, gathered: &Path, _out: &Path) -> String {
        match self {
            MergeOutcome::Written(paths) => {
                let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                format!("merged artifacts: {}", list.join(", "))
            }
            MergeOutcome::Deferred { command } => {
                format!("every shard's records are in {}; merge them with: {command}", gathered.display())
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
    let mut command = String::from("anvil-load merge");
    for path in paths {
        command.push(' ');
        command.push_str(&shell_quote(&path.display().to_string()));
    }
    command.push_str(" --out ");
    command.push_str(&shell_quote(&out.display().to_string()));
    Ok(MergeOutcome::Deferred { command })
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
    fn a_deferred_merge_names_every_file_and_refuses_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("r.shard0of2.records.ndjson");
        let b = dir.path().join("r.shard1of2.records.ndjson");
        std::fs::write(&a, "{}\n").unwrap();
        assert!(merge(&[a.clone(), b.clone()], dir.path()).unwrap_err().contains("shard1of2"));
        std::fs::write(&b, "{}\n").unwrap();
        let MergeOutcome::Deferred { command } = merge(&[a, b], Path::new("my results")).unwrap() else {
            panic!("no merge in this build")
        };
        assert!(command.starts_with("anvil-load merge "), "{command}");
        assert!(
            command.contains("shard0of2") && command.contains("shard1of2") && command.ends_with("--out 'my results'")
        );
    }
}
