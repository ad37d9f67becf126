//! `anvil-load merge`: the records files of one sharded run become the artifacts a single
//! client would have written, every number recomputed from the union of the records.
//!
//! The parts must belong together (same run, configuration fingerprint, seed and shard count;
//! every shard index once; no request index twice). Each shard's level clock started at the
//! instant the shards agreed on, so their `start_offset_ms` share one origin and are taken as
//! they are. Per level, the union of the records goes through `finish_level` (nearest-rank
//! percentiles, CI95, totals, throughput over the global window, validity over every request
//! sent, each shard's own validity); the time series is recomputed window by window from the
//! same records (exact, not from histograms). A missing, failed or interrupted shard stops the
//! merge, naming it, unless the caller allows a partial merge, whose artifacts say `partial` and
//! are not performance-eligible.
//!
//! Each part is checked as it is read (`levels`): its run line's fingerprint must be its
//! scenario's, every request index its shard's, and each level must hold the records its end
//! says it wrote; a shard whose records are not all there makes the merge partial like a missing
//! one. The merged records file is written under a temporary name and renamed once complete, so
//! a merge that stops leaves none half-written.
//!
//! Memory: one compact sample per request of one level at a time (as in a run); the records
//! themselves are streamed into one merged records file, which the artifacts' lists are read
//! from.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::levels::{self, Keep, LevelEnd, ReadError, RecordedLevel, RecordsFile};
use super::pending::{Pending, write_line};
use super::{Notice, RebuildError, Rebuilt, RebuiltLevel};
use crate::request::record::file::{self as records, RecordLine};
use crate::request::record::integrity::{Kind, Tally};
use crate::request::record::{ClientLoad, Issued, RunInfo, ShardInfo, ShardPart, Stamp};
use crate::results::aggregate::sample::{FailureSample, Sample};
use crate::results::aggregate::snapshots::{self, Window};
use crate::results::aggregate::{self, Collected, LevelInput, Origin, ShardLevel, Shards};
use crate::results::artifact;

/// One shard's records file, read through once for its description.
struct Part {
    file: RecordsFile,
    info: RunInfo,
    shard: ShardInfo,
}

impl Part {
    fn path(&self) -> &Path {
        &self.file.path
    }

    fn level(&self, id: &str) -> Option<&RecordedLevel> {
        self.file.levels.iter().find(|l| l.id == id)
    }
}

/// Records files among `inputs`: files as given, directories searched for `*.records.ndjson`.
pub fn records_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, RebuildError> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .map_err(|e| RebuildError::Io(format!("{}: {e}", input.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".records.ndjson"))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(RebuildError::BadInput(format!("{}: no *.records.ndjson file in it", input.display())));
            }
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

fn read_part(path: &Path) -> Result<Part, RebuildError> {
    let mut file = levels::read(path, Keep::Counts).map_err(|e| match e {
        ReadError::Open(e) => {
            let problem = format!("{}: cannot read it ({e})", path.display());
            if crate::sys::is_not_regular(&e) { RebuildError::BadInput(problem) } else { RebuildError::Io(problem) }
        }
        ReadError::Refused(m) => RebuildError::BadInput(m),
    })?;
    if file.runs.len() > 1 {
        return Err(RebuildError::BadInput(format!(
            "{}: holds several runs; give each run's shard files on their own",
            path.display()
        )));
    }
    let info = file.runs.remove(0);
    let shard = info.shard.clone().ok_or_else(|| {
        RebuildError::BadInput(format!(
            "{}: not a shard's records (no shard in its run line); `anvil-load summarize` rebuilds an unsharded run",
            path.display()
        ))
    })?;
    Ok(Part { file, info, shard })
}

/// Check that the parts are one run's, and which shard indices are missing.
fn check_together(parts: &[Part]) -> Result<Vec<u32>, RebuildError> {
    let first = &parts[0];
    for p in &parts[1..] {
        let differs = |what: &str, a: &dyn std::fmt::Display, b: &dyn std::fmt::Display| {
            RebuildError::BadInput(format!(
                "{} and {} are not parts of one run: their {what} differ ({a} against {b})",
                first.path().display(),
                p.path().display()
            ))
        };
        if p.info.run_id != first.info.run_id {
            return Err(differs("run ids", &first.info.run_id, &p.info.run_id));
        }
        if p.info.configuration_fingerprint != first.info.configuration_fingerprint {
            return Err(differs(
                "configuration fingerprints",
                &first.info.configuration_fingerprint,
                &p.info.configuration_fingerprint,
            ));
        }
        if p.info.context_seed != first.info.context_seed {
            return Err(differs("seeds", &first.info.context_seed, &p.info.context_seed));
        }
        // Equal fingerprints say equal scenarios only where the fingerprint could be recomputed
        // (not behind a redacted base URL), and say nothing of the rest of the run line: the
        // parts of one run describe it alike but for their shard and their own prompt sizing.
        if let Some(key) = differing_key(&first.info, &p.info) {
            return Err(RebuildError::BadInput(format!(
                "{} and {} are not parts of one run: their run lines differ in `{key}` (the parts of one run describe it alike, but for their shard and prompt sizing)",
                first.path().display(),
                p.path().display()
            )));
        }
        if p.shard.count != first.shard.count {
            return Err(differs("shard counts", &first.shard.count, &p.shard.count));
        }
    }
    let mut seen = BTreeSet::new();
    for p in parts {
        if p.shard.index >= p.shard.count {
            return Err(RebuildError::BadInput(format!(
                "{}: shard index {} of {}",
                p.path().display(),
                p.shard.index,
                p.shard.count
            )));
        }
        if !seen.insert(p.shard.index) {
            return Err(RebuildError::BadInput(format!(
                "shard {} is given twice (one of them {}); give each shard's records file once",
                p.shard.index,
                p.path().display()
            )));
        }
    }
    Ok((0..first.shard.count).filter(|i| !seen.contains(i)).collect())
}

/// The first key of the run lines' descriptions in which two parts differ, besides their shard
/// and prompt sizing (each shard sizes its prompts itself).
fn differing_key(a: &RunInfo, b: &RunInfo) -> Option<String> {
    let described = |info: &RunInfo| {
        let mut v = serde_json::to_value(info).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.remove("shard");
            o.remove("prompt_sizing");
        }
        v
    };
    let (a, b) = (described(a), described(b));
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => a.keys().chain(b.keys()).find(|k| a.get(*k) != b.get(*k)).cloned(),
        _ => (a != b).then(|| "description".to_string()),
    }
}

/// Merge the shards' records files into artifacts under `out`. What the check of the parts
/// found that does not stop the merge goes to `notices`.
pub fn merge(
    inputs: &[PathBuf],
    out: &Path,
    allow_partial: bool,
    window: Duration,
    notices: &mut Vec<Notice>,
) -> Result<Rebuilt, RebuildError> {
    let files = records_files(inputs)?;
    let mut parts = files.iter().map(|f| read_part(f)).collect::<Result<Vec<_>, _>>()?;
    parts.sort_by_key(|p| p.shard.index);
    let missing = check_together(&parts)?;
    let count = parts[0].shard.count;
    // Levels in the order the first shard ran them, then any only others ran.
    let mut order: Vec<String> = Vec::new();
    for l in parts.iter().flat_map(|p| &p.file.levels) {
        if !order.contains(&l.id) {
            order.push(l.id.clone());
        }
    }
    let (problems, incomplete) = problems(&parts, &order, &missing, notices);
    if !problems.is_empty() && !allow_partial {
        return Err(RebuildError::Incomplete(format!(
            "cannot merge: {}; merge what there is with --allow-partial (the artifacts are then marked partial and not performance-eligible)",
            problems.join("; ")
        )));
    }
    artifact::ensure_writable_dir(out)
        .map_err(|e| RebuildError::Io(format!("--out {}: cannot write there ({e})", out.display())))?;

    // The merged run's description: shard 0's (or the lowest present), without a shard.
    let mut info = parts[0].info.clone();
    info.shard = None;
    let run_id = info.run_id.clone();
    let merged_path = out.join(format!("{run_id}.merged.records.ndjson"));
    let mut pending = Pending::create(&merged_path)
        .map_err(|e| RebuildError::Io(format!("{}: cannot write it ({e})", merged_path.display())))?;
    let io = |e: std::io::Error| RebuildError::Io(format!("{}: {e}", merged_path.display()));
    write_line(
        &mut pending.file,
        &RecordLine::Run { schema: records::RECORDS_SCHEMA.into(), info: Box::new(info.clone()) },
    )
    .map_err(io)?;

    let mut series: Vec<Window> = Vec::new();
    let mut summaries = Vec::new();
    for (level_index, level) in order.iter().enumerate() {
        let present: Vec<(&Part, &RecordedLevel)> =
            parts.iter().filter_map(|p| p.level(level).map(|l| (p, l))).collect();
        let first = present[0].1;
        let started_ns = present.iter().map(|(_, l)| l.started_ns).min().unwrap_or(first.started_ns);
        write_line(
            &mut pending.file,
            &RecordLine::Level {
                level: level.clone(),
                pacing: first.pacing,
                started_at_unix_ns: started_ns,
                prompt_salt: first.prompt_salt.clone(),
                cache_reset: first.cache_reset.clone().map(Box::new),
            },
        )
        .map_err(io)?;
        let mut tally = Tally::new(level_index as u64);
        let mut collected = Collected::default();
        let mut shard_levels = Vec::new();
        let mut seen = BTreeSet::new();
        for &(p, l) in &present {
            let (samples, failures) = (collected.samples.len(), collected.failures.len());
            copy_level(p, level, &mut collected, &mut seen, &mut tally, &mut pending.file, &merged_path)?;
            let end = l.end.as_ref();
            shard_levels.push(ShardLevel {
                part: ShardPart {
                    index: p.shard.index,
                    host: p.shard.host.clone(),
                    records: p.path().display().to_string(),
                    clock_offset_ms: p.shard.clock_offset_ms,
                    clock_offset_uncertainty_ms: p.shard.clock_offset_uncertainty_ms,
                    requests: l.requests,
                    failed: l.failures,
                    complete: end.is_some_and(|e| !e.interrupted),
                    valid: None,
                    validity_reasons: Vec::new(),
                },
                issued: end.map(|e| e.issued).unwrap_or_default(),
                client: end.and_then(|e| e.client),
                samples: samples..collected.samples.len(),
                failures: failures..collected.failures.len(),
            });
        }
        // What the pacing issued, summed over the shards (each planned its own part); the
        // window is the whole schedule's on every shard.
        let ends: Vec<&LevelEnd> = present.iter().filter_map(|(_, l)| l.end.as_ref()).collect();
        // The merged level is as late as its latest shard.
        let client = ClientLoad::worst(ends.iter().filter_map(|e| e.client));
        let issued = Issued {
            planned_arrivals: ends.iter().map(|e| e.issued.planned_arrivals).sum(),
            planned_window: ends.iter().filter_map(|e| e.issued.planned_window).max(),
        };
        let partial = present.len() < count as usize
            || ends.len() < present.len()
            || ends.iter().any(|e| e.interrupted)
            || incomplete.contains(level.as_str());
        let finished_ns = ends.iter().map(|e| e.finished_ns).max().unwrap_or(started_ns);
        collected.windows = snapshots::windows_from_samples(level, &collected.samples, &collected.failures, window);
        series.extend(collected.windows.iter().cloned());
        write_line(
            &mut pending.file,
            &RecordLine::LevelEnd {
                level: level.clone(),
                issued,
                finished_at_unix_ns: finished_ns,
                interrupted: partial,
                simulator: None,
                server_metrics: None,
                client,
                written: Some(tally.written()),
            },
        )
        .map_err(io)?;
        pending.file.flush().map_err(io)?;
        let input = LevelInput {
            info: &info,
            level_id: level.clone(),
            pacing: first.pacing,
            issued,
            started: Stamp::from_unix_ns(started_ns),
            finished: Stamp::from_unix_ns(finished_ns),
            collected,
            interrupted: partial,
            simulator: None,
            server_metrics: None,
            client,
        };
        let shards = Shards {
            count,
            missing: missing.clone(),
            sync: parts[0].shard.sync.clone(),
            partial,
            problems: problems.clone(),
            parts: shard_levels,
        };
        let mut summary =
            aggregate::finish_level(input, Origin::Merged(shards), &pending.tmp).map_err(RebuildError::Io)?;
        // Every shard reset the servers before the level; the first shard's answer stands for it.
        summary.cache_reset = first.cache_reset.clone();
        summaries.push(summary);
    }
    // Every level is in it: the merged records file takes its name.
    pending.persist().map_err(io)?;
    let mut rebuilt = Rebuilt { runs: vec![info], levels: Vec::new(), files: Vec::new() };
    for summary in summaries {
        let a = artifact::build(&rebuilt.runs[0], &summary, &merged_path);
        let path = artifact::write_json_atomic(out, &format!("{}.json", summary.level_id), &a)
            .map_err(|e| RebuildError::Io(format!("cannot write {} to {}: {e}", summary.level_id, out.display())))?;
        rebuilt.levels.push(RebuiltLevel { run: 0, summary, artifact: path });
    }
    if !series.is_empty() {
        let path = out.join(format!("{run_id}.merged.timeseries.ndjson"));
        super::pending::write_lines(&path, &series)
            .map_err(|e| RebuildError::Io(format!("{}: {e}", path.display())))?;
        rebuilt.files.push(path);
    }
    rebuilt.files.push(merged_path);
    Ok(rebuilt)
}

/// Copy one part's records of `level` into the merged file (`tally` counts them as written
/// there), keeping their compact samples in `collected`; a request index already `seen` in
/// another part is an error.
fn copy_level(
    p: &Part,
    level: &str,
    collected: &mut Collected,
    seen: &mut BTreeSet<u64>,
    tally: &mut Tally,
    merged: &mut impl Write,
    merged_path: &Path,
) -> Result<(), RebuildError> {
    let io = |e: std::io::Error| RebuildError::Io(format!("{}: {e}", merged_path.display()));
    for line in records::read_level(p.path(), level, &["request", "failure", "dropped"])
        .map_err(|e| RebuildError::Io(format!("{}: {e}", p.path().display())))?
    {
        let line = line.map_err(|e| RebuildError::BadInput(format!("{}: {e}", p.path().display())))?;
        let index = match &line {
            RecordLine::Request { level: l, record } if l == level => {
                collected.samples.push(Sample::from_record(record));
                Some((Kind::Request, record.request_index))
            }
            RecordLine::Failure { level: l, record } if l == level => {
                collected.failures.push(FailureSample::from_record(record));
                Some((Kind::Failure, record.request_index))
            }
            RecordLine::Dropped { level: l, record } if l == level => {
                collected.dropped += 1;
                Some((Kind::Dropped, record.request_index))
            }
            _ => None,
        };
        let Some((kind, index)) = index else { continue };
        if !seen.insert(index) {
            return Err(RebuildError::BadInput(format!(
                "request {index} of level {level} is in two shards' records (one is {}): these are not disjoint parts of one run",
                p.path().display()
            )));
        }
        // The merged file's own level end tallies the lines as this merge writes them.
        let mut bytes = serde_json::to_vec(&line).map_err(|e| io(e.into()))?;
        tally.add(kind, &bytes);
        bytes.push(b'\n');
        merged.write_all(&bytes).map_err(io)?;
    }
    Ok(())
}

/// Why the merge is partial (a shard missing, a level some shard did not finish or does not
/// hold whole), and which levels some shard's file does not hold whole; what does not make it
/// partial goes to `notices`.
fn problems<'a>(
    parts: &'a [Part],
    order: &[String],
    missing: &[u32],
    notices: &mut Vec<Notice>,
) -> (Vec<String>, BTreeSet<&'a str>) {
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("shard(s) {} of {} gave no records file", join(missing), parts[0].shard.count));
    }
    let mut incomplete = BTreeSet::new();
    for p in parts {
        let (index, file, verdict) = (p.shard.index, p.path().display(), &p.file.verdict);
        for (level, problem) in &verdict.incomplete {
            incomplete.insert(level.as_str());
            problems.push(format!("shard {index}'s records ({file}) do not hold what it wrote: {problem}"));
        }
        super::verdict_notices(&file.to_string(), verdict, "shard", Notice::Warning, notices);
    }
    for level in order {
        for p in parts {
            match p.level(level).map(|l| l.end.as_ref()) {
                None => problems.push(format!("shard {} never ran level {level}", p.shard.index)),
                Some(None) => problems.push(format!(
                    "shard {} did not finish level {level} (killed or failed: its records end early)",
                    p.shard.index
                )),
                Some(Some(end)) if end.interrupted => {
                    problems.push(format!("shard {} was interrupted in level {level}", p.shard.index))
                }
                Some(Some(_)) => {}
            }
        }
    }
    (problems, incomplete)
}

fn join(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
