//! The toolbox every rule file reports through: `ScenarioError` (file, key, problem, fix), the
//! `Checker` that words it and knows which values the command line set, and the rules the rule
//! files share (durations within their bounds, paths relative to the scenario file, the largest
//! plausible context).
//!
//! It imports no rule file: `validate` calls the rule files, and the rule files use this.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bounds::{duration_range, fmt_duration};

/// A scenario that cannot be run. Exit code 2; nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// Key path such as `load.concurrency`; empty when the whole file is at fault.
    pub key: String,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)?;
        } else {
            write!(f, "{}: `{}`: {}", self.file, self.key, self.problem)?;
        }
        if !self.fix.is_empty() {
            write!(f, "\n  fix: {}", self.fix)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

impl ScenarioError {
    /// The whole file is at fault (it cannot be read, or it is not TOML).
    pub(super) fn of_file(file: &str, problem: String, fix: impl Into<String>) -> Self {
        ScenarioError { file: file.to_string(), key: String::new(), problem, fix: fix.into() }
    }

    pub(super) fn unreadable(path: &Path, e: &std::io::Error) -> Self {
        // A file that exists but is not text needs a different fix than a wrong path.
        let (problem, fix) = if e.kind() == std::io::ErrorKind::InvalidData {
            (
                "the scenario file is not UTF-8 text".to_string(),
                "save it as UTF-8 (TOML files are UTF-8); check that it is the scenario and not another file",
            )
        } else {
            (format!("cannot read the scenario file: {e}"), "check the path; example scenarios live in scenarios/")
        };
        Self::of_file(&path.display().to_string(), problem, fix)
    }
}

/// Largest context anyone serves today is ~10M tokens; above this a value is a typo.
pub(super) const CONTEXT_SANITY_LIMIT: i64 = 16 * 1024 * 1024;

/// Words every refusal of one scenario file: its name, and the keys whose values came from the
/// command line (a bad `--concurrency` is reported as the option's, not the file's).
pub(super) struct Checker<'a> {
    path: &'a Path,
    file: String,
    /// Keys whose values came from the command line, with the option that set them
    /// (`--rate`, `--set load.rate`, `ANVIL_BASE_URL`).
    overridden: Vec<(String, String)>,
}

impl<'a> Checker<'a> {
    pub(super) fn new(path: &'a Path) -> Self {
        Checker { path, file: path.display().to_string(), overridden: Vec::new() }
    }

    /// The scenario file as messages name it.
    pub(super) fn file(&self) -> &str {
        &self.file
    }

    /// Record that `origin` (an option such as `--rate`) set `key`.
    pub(super) fn set_by(&mut self, key: impl Into<String>, origin: impl Into<String>) {
        let key = key.into();
        // The last setting wins (a flag after `--set` of the same key): one origin per key.
        self.overridden.retain(|(k, _)| *k != key);
        self.overridden.push((key, origin.into()));
    }

    /// Every key the command line set, with what set it, in the order they were applied.
    pub(super) fn overridden(&self) -> &[(String, String)] {
        &self.overridden
    }

    pub(super) fn err(&self, key: &str, problem: impl Into<String>, fix: impl Into<String>) -> ScenarioError {
        let mut problem = problem.into();
        if let Some((_, origin)) = self.overridden.iter().find(|(k, _)| k == key) {
            problem.push_str(&format!(" (value set by {origin})"));
        }
        ScenarioError { file: self.file.clone(), key: key.to_string(), problem, fix: fix.into() }
    }

    /// ` (set by --option)` when the key's value came from the command line.
    pub(super) fn origin(&self, key: &str) -> String {
        self.overridden.iter().find(|(k, _)| k == key).map(|(_, o)| format!(" (set by {o})")).unwrap_or_default()
    }

    /// A file the key names: relative to the scenario file when the scenario wrote it, to the
    /// working directory when a command-line option gave it.
    pub(super) fn path(&self, key: &str, file: &str) -> PathBuf {
        let p = PathBuf::from(file);
        if p.is_absolute() || !self.origin(key).is_empty() {
            p
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    /// A duration key, within its bounds (`bounds::duration_range`); `default` when absent.
    pub(super) fn duration(
        &self,
        key: &str,
        value: Option<&str>,
        default: Duration,
    ) -> Result<Duration, ScenarioError> {
        let Some(text) = value else { return Ok(default) };
        let (min, max) = duration_range(key);
        let range = format!("{} to {}", fmt_duration(min), fmt_duration(max));
        let d = humantime::parse_duration(text.trim()).map_err(|e| {
            self.err(
                key,
                format!("{text:?} is not a duration ({e})"),
                format!("write it like \"90s\", \"10m\" or \"1h 30m\", from {range}"),
            )
        })?;
        if d.is_zero() {
            return Err(self.err(key, "must be longer than zero", format!("give a duration from {range}")));
        }
        if d < min || d > max {
            return Err(self.err(
                key,
                format!("{text:?} is outside the allowed range ({range})"),
                format!("give a duration from {range}"),
            ));
        }
        Ok(d)
    }
}
