//! What a run prints once its levels are over: for a sweep or a search the answer box, the table
//! and the warnings grouped by kind; then where the files are; with `--format json`, the JSON
//! summary on stdout. A sharded run answers with the merged levels on the shard that merged
//! them, and with one line saying where they are on the others.

use std::path::{Path, PathBuf};

use crate::cli::RunArgs;
use crate::distributed::shard::RunEnd;
use crate::plan::search::CapacitySearch;
use crate::request::record::RunInfo;
use crate::results::aggregate::summary::LevelSummary;
use crate::results::console::{self, Out, SweepRow};

/// What a level prints as it ends: a level alone its answer box, detail table and warnings; a
/// level of a sweep or a search (`several`) one line (its detail with `--verbose`), its warnings
/// grouped with the others' at the end; a shard's part (`part`) one line, the merged run
/// answering at the end.
pub(super) fn level_end(args: &RunArgs, info: &RunInfo, summary: &LevelSummary, several: bool, part: bool) {
    let out = Out::new(&args.console);
    let alone = !several && !part;
    let verbose = args.console.verbose;
    if !args.quiet {
        if alone {
            out.print(&console::level::level_answer(summary, info));
        }
        if alone || verbose {
            out.print(&console::level_summary(summary, info));
        } else {
            let part = if part { "this shard's part: " } else { "" };
            out.line(&format!("{part}{}", console::level::level_line(summary)));
        }
    }
    if alone || verbose {
        console::print_warnings(&summary.warnings);
    }
}

pub(super) struct Ending<'a> {
    pub args: &'a RunArgs,
    pub info: &'a RunInfo,
    pub out: Out,
    pub search: Option<&'a CapacitySearch>,
}

impl Ending<'_> {
    pub fn print(&self, own: &[(LevelSummary, PathBuf)], written: &[PathBuf], end: &RunEnd) {
        let quiet = self.args.quiet;
        // The levels that answer: this process's, or the merged ones.
        let (levels, mut files): (&[(LevelSummary, PathBuf)], Vec<PathBuf>) = match end {
            RunEnd::Merged(m) => {
                let mut files: Vec<PathBuf> = m.sweep.iter().cloned().collect();
                files.extend(m.files.iter().cloned());
                (&m.levels, files)
            }
            _ => (own, Vec::new()),
        };
        files.extend(written.iter().cloned());
        let summaries: Vec<&LevelSummary> = levels.iter().map(|(a, _)| a).collect();
        let several = levels.len() > 1;
        let answer = several.then(|| console::answer::answer(&summaries, self.search));
        match end {
            RunEnd::MergedElsewhere(line) => {
                // This shard's part is in its own files; the run's answer is the merged one.
                if !quiet {
                    eprint!("{}", console::answer::grouped_warnings(&summaries));
                }
                self.paths(own, written);
                self.out.line(&format!("shards: {line}"));
                return self.json(own, None, written);
            }
            RunEnd::Alone => {}
            // A shard's single level printed one line as it ended: the whole (merged) level, or
            // this shard's part when started at an instant, answers here.
            RunEnd::Merged(_) | RunEnd::Part => {
                if let (Some((a, _)), false, false) = (levels.first(), quiet, several) {
                    self.out.print(&console::level::level_answer(a, self.info));
                    self.out.print(&console::level_summary(a, self.info));
                    console::print_warnings(&a.warnings);
                }
            }
        }
        if several {
            if let (Some(answer), false) = (&answer, quiet) {
                let engine = self.info.engine.as_deref().map(|e| format!(" · {e}")).unwrap_or_default();
                let merged = if matches!(end, RunEnd::Merged(_)) { " · merged from every shard" } else { "" };
                let title = format!("{} levels · {}{engine}{merged}", levels.len(), self.info.model);
                self.out.print(&console::answer::run_answer(&summaries, answer, &title));
                let mut rows: Vec<SweepRow> = levels.iter().map(|(a, p)| SweepRow::from_summary(a, p)).collect();
                // A search probes out of order; its table reads by load.
                if self.search.is_some() {
                    rows.sort_by(|a, b| row_level(a).total_cmp(&row_level(b)));
                }
                self.out.print(&console::sweep_table(&rows));
                if let (Some(search), true) = (self.search, self.args.console.verbose) {
                    self.out.print(&console::search_table(search));
                }
            }
            if !self.args.console.verbose {
                eprint!("{}", console::answer::grouped_warnings(&summaries));
            }
        }
        if let RunEnd::Merged(m) = end {
            self.out.line(&format!("shards: {}", m.describe()));
        }
        self.paths(levels, &files);
        self.json(levels, answer.as_ref(), &files);
    }

    /// The artifacts' paths: under `--quiet` one `artifact: PATH` line per level (for logs that
    /// collect them), otherwise one line with the directory and the names; then every other file.
    fn paths(&self, levels: &[(LevelSummary, PathBuf)], written: &[PathBuf]) {
        let paths: Vec<&Path> = levels.iter().map(|(_, p)| p.as_path()).collect();
        if self.args.quiet || paths.len() == 1 {
            for path in &paths {
                self.out.line(&format!("artifact: {}", path.display()));
            }
        } else if !paths.is_empty() {
            self.out.line(&format!("artifacts: {}", pattern(&paths)));
        }
        for path in written {
            self.out.line(&format!("written: {}", path.display()));
        }
    }

    fn json(&self, levels: &[(LevelSummary, PathBuf)], answer: Option<&console::answer::Answer>, files: &[PathBuf]) {
        if !self.out.json {
            return;
        }
        let levels: Vec<(&LevelSummary, &Path)> = levels.iter().map(|(a, p)| (a, p.as_path())).collect();
        let summary = console::json::summary(&self.info.run_id, &levels, answer, files);
        println!("{summary}");
    }
}

fn row_level(r: &SweepRow) -> f64 {
    r.rate.unwrap_or(f64::from(r.concurrency))
}

/// Several files of one directory as one shell pattern: `DIR/RUN-c{1,2,4,8}.json`.
fn pattern(paths: &[&Path]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let Some(first) = names.first() else { return String::new() };
    let prefix = names
        .iter()
        .fold(first.len(), |n, name| first.bytes().zip(name.bytes()).take(n).take_while(|(a, b)| a == b).count());
    let shortest = names.iter().map(String::len).min().unwrap_or(0);
    let suffix = names.iter().fold(first.len(), |n, name| {
        first.bytes().rev().zip(name.bytes().rev()).take(n).take_while(|(a, b)| a == b).count()
    });
    // The common ends never overlap, and split on character boundaries.
    let suffix = suffix.min(shortest - prefix.min(shortest));
    // ... on character boundaries, and never inside a number (`r{20,40}.json`, not `r{2,4}0.json`).
    // A digit, or a decimal point between digits.
    let bytes = first.as_bytes();
    let digit = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    let number = |i: usize| digit(i) || (bytes[i] == b'.' && i > 0 && digit(i - 1) && digit(i + 1));
    let (mut prefix, mut suffix) = (prefix, suffix);
    while !first.is_char_boundary(prefix) || (prefix > 0 && number(prefix - 1)) {
        prefix -= 1;
    }
    while suffix > 0 && (!first.is_char_boundary(first.len() - suffix) || number(first.len() - suffix)) {
        suffix -= 1;
    }
    let middles: Vec<&str> = names.iter().map(|n| &n[prefix..n.len() - suffix]).collect();
    if middles.iter().any(|m| m.contains([',', '{', '}'])) {
        return names.join(" ");
    }
    format!("{}{{{}}}{}", &first[..prefix], middles.join(","), &first[first.len() - suffix..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pattern_for_a_directory_of_levels() {
        let paths = ["/r/anvil-x-c1.json", "/r/anvil-x-c2.json", "/r/anvil-x-c16.json"].map(Path::new);
        assert_eq!(pattern(&paths), "/r/anvil-x-c{1,2,16}.json");
        let paths = ["/r/a-r0.5.json", "/r/a-r1.json"].map(Path::new);
        assert_eq!(pattern(&paths), "/r/a-r{0.5,1}.json");
        let paths = ["/r/a-r20.json", "/r/a-r40.json", "/r/a-r80.json"].map(Path::new);
        assert_eq!(pattern(&paths), "/r/a-r{20,40,80}.json");
        let paths = ["/r/a-c1.shard0of2.json", "/r/a-c16.shard0of2.json"].map(Path::new);
        assert_eq!(pattern(&paths), "/r/a-c{1,16}.shard0of2.json");
    }
}
