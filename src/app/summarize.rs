//! `anvil-load summarize RECORDS`: rebuild a run's artifacts from its records file alone, with
//! the same numbers a clean finish would have written. A level whose end is missing (the run
//! was killed) is marked interrupted and covers the requests recorded before the kill.
//!
//! The file is checked as it is read (`record::integrity`): a line no run writes stops the
//! rebuild with exit 2 naming it; a level whose records differ from what its end says was
//! written stops it with exit 1 naming what is missing, unless `--allow-partial`, whose artifacts
//! then say so and are not performance-eligible.

use std::collections::BTreeMap;
use std::path::Path;

use super::{AppError, write};
use crate::aggregate::Collected;
use crate::aggregate::gaps::add_gap_distributions;
use crate::aggregate::sample::{FailureSample, Sample};
use crate::aggregate::summarise::{LevelInput, add_conversations, summarise};
use crate::aggregate::warnings::Warning;
use crate::artifact;
use crate::cli::{SummarizeArgs, exit};
use crate::record::file::{self as records, RecordLine};
use crate::record::integrity::Verdict;
use crate::record::{Issued, LevelPacing};
use crate::record::{RunInfo, Stamp};
use crate::report;

/// What a level's end line said.
struct LevelEnd {
    issued: Issued,
    finished_ns: u64,
    interrupted: bool,
    simulator: Option<serde_json::Value>,
    server_metrics: Option<crate::server_metrics::LevelServerMetrics>,
    client: Option<crate::record::ClientLoad>,
}

struct Level {
    /// The run this level belongs to (a file can hold several runs appended one after another).
    run: usize,
    pacing: LevelPacing,
    started_ns: u64,
    collected: Collected,
    /// Latest request end seen (ns since the Unix epoch), for a level that never finished.
    last_end_ns: u64,
    end: Option<LevelEnd>,
}

pub fn summarize(args: &SummarizeArgs) -> Result<u8, AppError> {
    let path = &args.records;
    let mut lines = records::read_checked(path)
        .map_err(|e| AppError::BadInput(format!("{}: cannot read it ({e})", path.display())))?;
    let mut runs: Vec<RunInfo> = Vec::new();
    let mut levels: BTreeMap<String, Level> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for line in &mut lines {
        let line = line.map_err(|e| AppError::BadInput(format!("{}: {e}", path.display())))?;
        match line {
            RecordLine::Run { info, .. } => runs.push(*info),
            RecordLine::Level { level, pacing, started_at_unix_ns, .. } => {
                let Some(run) = runs.len().checked_sub(1) else {
                    return Err(AppError::BadInput(format!(
                        "{}: not a records file (a level line comes before any run line)",
                        path.display()
                    )));
                };
                order.push(level.clone());
                levels.insert(
                    level,
                    Level {
                        run,
                        pacing,
                        started_ns: started_at_unix_ns,
                        collected: Collected::default(),
                        last_end_ns: started_at_unix_ns,
                        end: None,
                    },
                );
            }
            RecordLine::Request { level, record } => {
                if let Some(l) = levels.get_mut(&level) {
                    let end = l.started_ns.saturating_add(((record.start_offset_ms + record.e2e_ms) * 1e6) as u64);
                    l.last_end_ns = l.last_end_ns.max(end);
                    l.collected.samples.push(Sample::from_record(&record));
                }
            }
            RecordLine::Failure { level, record } => {
                if let Some(l) = levels.get_mut(&level) {
                    let end = l.started_ns.saturating_add(((record.start_offset_ms + record.elapsed_ms) * 1e6) as u64);
                    l.last_end_ns = l.last_end_ns.max(end);
                    l.collected.failures.push(FailureSample::from_record(&record));
                }
            }
            RecordLine::Dropped { level, .. } => {
                if let Some(l) = levels.get_mut(&level) {
                    l.collected.dropped += 1;
                }
            }
            RecordLine::LevelEnd {
                level,
                issued,
                finished_at_unix_ns,
                interrupted,
                simulator,
                server_metrics,
                client,
                written: _,
            } => {
                if let Some(l) = levels.get_mut(&level) {
                    l.end = Some(LevelEnd {
                        issued,
                        finished_ns: finished_at_unix_ns,
                        interrupted,
                        simulator,
                        server_metrics: server_metrics.map(|m| *m),
                        client,
                    });
                }
            }
        }
    }
    if runs.is_empty() {
        return Err(AppError::BadInput(format!("{}: not a records file (no run line)", path.display())));
    }
    let verdict = lines.finish();
    report_verdict(path, &verdict, args.allow_partial)?;
    if order.is_empty() {
        return Err(AppError::BadInput(format!(
            "{}: the run recorded here never started a load level (it stopped during setup), so there is nothing to summarize",
            path.display()
        )));
    }
    artifact::ensure_writable_dir(&args.out)
        .map_err(|e| AppError::BadInput(format!("--out {}: cannot write there ({e})", args.out.display())))?;
    let mut any_interrupted = false;
    for level_id in order {
        let Some(level) = levels.remove(&level_id) else { continue };
        let LevelEnd { issued, finished_ns, interrupted, simulator, server_metrics, client } =
            level.end.unwrap_or(LevelEnd {
                issued: Issued::default(),
                finished_ns: level.last_end_ns,
                interrupted: true,
                simulator: None,
                server_metrics: None,
                client: None,
            });
        any_interrupted |= interrupted;
        let info = &runs[level.run];
        let mut summary = summarise(LevelInput {
            info,
            level_id: level_id.clone(),
            pacing: level.pacing,
            issued,
            started: Stamp::from_unix_ns(level.started_ns),
            finished: Stamp::from_unix_ns(finished_ns),
            collected: level.collected,
            interrupted,
            simulator,
            server_metrics,
            client,
        });
        add_conversations(&mut summary, info, path).map_err(AppError::BadInput)?;
        add_gap_distributions(&mut summary, path).map_err(AppError::BadInput)?;
        let problems = verdict.problems_of(&level_id);
        if !problems.is_empty() {
            summary.performance_eligible = false;
            summary.warnings.push(Warning::RecordsIncomplete { problems });
        }
        let artifact = artifact::build(info, &summary, path);
        let out = write(&args.out, &format!("{level_id}.json"), &artifact)?;
        print!("{}", report::level_summary(&summary, info));
        report::print_warnings(&summary.warnings);
        println!("artifact: {}", out.display());
    }
    Ok(if any_interrupted { exit::ABORTED } else { exit::OK })
}

/// Say on stderr what the check of the file found that does not stop the rebuild (a last line
/// cut short, levels written before their ends carried a tally), and stop it (exit 1) when a
/// level does not hold what it wrote, unless `allow_partial`.
fn report_verdict(path: &Path, verdict: &Verdict, allow_partial: bool) -> Result<(), AppError> {
    let shown = path.display();
    if let Some(n) = verdict.cut_line {
        eprintln!(
            "note: {shown}: line {n}, the last, was cut short (the run was killed while writing it); it is left out"
        );
    }
    if !verdict.unchecked.is_empty() {
        eprintln!(
            "warning: {shown}: the end of level(s) {} does not say what the level wrote (records written by an older anvil-load): whether every record is still there cannot be checked",
            verdict.unchecked.join(", ")
        );
    }
    if verdict.incomplete.is_empty() {
        return Ok(());
    }
    let problems: Vec<&str> = verdict.incomplete.iter().map(|(_, p)| p.as_str()).collect();
    if !allow_partial {
        return Err(AppError::Aborted(format!(
            "{shown}: the records file does not hold what the run wrote: {}; nothing was rebuilt. Rebuild what there is with --allow-partial (the artifacts are then marked partial and not performance-eligible)",
            problems.join("; ")
        )));
    }
    eprintln!(
        "warning: {shown}: the records file does not hold what the run wrote: {}; the artifacts of these levels are marked partial (records_incomplete) and not performance-eligible",
        problems.join("; ")
    );
    Ok(())
}
