//! `anvil-load summarize RECORDS`: rebuild a run's artifacts from its records file alone, with
//! the same numbers a clean finish would have written. A level whose end is missing (the run
//! was killed) is marked interrupted and covers the requests recorded before the kill.
//!
//! The file is checked as it is read (`levels`): a line no run writes stops the rebuild (bad
//! input) naming it; a level whose records differ from what its end says was written stops it
//! (`Incomplete`) naming what is missing, unless `allow_partial`, whose artifacts then say so
//! and are not performance-eligible.

use std::path::Path;

use super::levels::{self, Keep, ReadError};
use super::{Notice, RebuildError, Rebuilt, RebuiltLevel};
use crate::request::record::Stamp;
use crate::request::record::integrity::Verdict;
use crate::results::aggregate::{self, LevelInput, Origin};
use crate::results::artifact;

/// Rebuild the artifacts of the records file `records` into `out`. What the check of the file
/// found that does not stop the rebuild goes to `notices`, also when something else stops it.
pub fn summarize(
    records: &Path,
    out: &Path,
    allow_partial: bool,
    notices: &mut Vec<Notice>,
) -> Result<Rebuilt, RebuildError> {
    let file = levels::read(records, Keep::Samples).map_err(|e| match e {
        ReadError::Open(e) => RebuildError::BadInput(format!("{}: cannot read it ({e})", records.display())),
        ReadError::Refused(m) => RebuildError::BadInput(m),
    })?;
    check_verdict(records, &file.verdict, allow_partial, notices)?;
    if file.levels.is_empty() {
        return Err(RebuildError::BadInput(format!(
            "{}: the run recorded here never started a load level (it stopped during setup), so there is nothing to summarize",
            records.display()
        )));
    }
    artifact::ensure_writable_dir(out)
        .map_err(|e| RebuildError::BadInput(format!("--out {}: cannot write there ({e})", out.display())))?;
    let mut rebuilt = Rebuilt { runs: file.runs, levels: Vec::new(), files: Vec::new() };
    for mut level in file.levels {
        let end = level.end_or_cut();
        let info = &rebuilt.runs[level.run];
        let input = LevelInput {
            info,
            level_id: level.id.clone(),
            pacing: level.pacing,
            issued: end.issued,
            started: Stamp::from_unix_ns(level.started_ns),
            finished: Stamp::from_unix_ns(end.finished_ns),
            collected: level.collected,
            interrupted: end.interrupted,
            simulator: end.simulator,
            server_metrics: end.server_metrics,
            client: end.client,
        };
        let origin = Origin::Rebuilt { missing: file.verdict.problems_of(&level.id) };
        let mut summary = aggregate::finish_level(input, origin, records).map_err(RebuildError::BadInput)?;
        summary.cache_reset = level.cache_reset.take();
        let artifact = artifact::build(info, &summary, records);
        let name = format!("{}.json", level.id);
        let path = artifact::write_json_atomic(out, &name, &artifact)
            .map_err(|e| RebuildError::Io(format!("cannot write {name} to {}: {e}", out.display())))?;
        rebuilt.levels.push(RebuiltLevel { run: level.run, summary, artifact: path });
    }
    Ok(rebuilt)
}

/// Say what the check of the file found that does not stop the rebuild (a last line cut short,
/// levels written before their ends carried a tally), and stop it when a level does not hold
/// what it wrote, unless `allow_partial`.
fn check_verdict(
    path: &Path,
    verdict: &Verdict,
    allow_partial: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), RebuildError> {
    let shown = path.display();
    super::verdict_notices(&shown.to_string(), verdict, "run", Notice::Note, notices);
    if verdict.incomplete.is_empty() {
        return Ok(());
    }
    let problems: Vec<&str> = verdict.incomplete.iter().map(|(_, p)| p.as_str()).collect();
    if !allow_partial {
        return Err(RebuildError::Incomplete(format!(
            "{shown}: the records file does not hold what the run wrote: {}; nothing was rebuilt. Rebuild what there is with --allow-partial (the artifacts are then marked partial and not performance-eligible)",
            problems.join("; ")
        )));
    }
    notices.push(Notice::Warning(format!(
        "{shown}: the records file does not hold what the run wrote: {}; the artifacts of these levels are marked partial (records_incomplete) and not performance-eligible",
        problems.join("; ")
    )));
    Ok(())
}
