//! `anvil-load merge`: the records files of one sharded run become the artifacts a single
//! client would have written, every number recomputed from the union of the records.
//!
//! The parts must belong together (same run, configuration fingerprint, seed and shard count;
//! every shard index once; no request index twice). Each shard's level clock started at the
//! instant the shards agreed on, so their `start_offset_ms` share one origin and are taken as
//! they are. Per level, the union of the records goes through `summarise` (nearest-rank
//! percentiles, CI95, totals, throughput over the global window, validity over every request
//! sent); the time series is recomputed window by window from the same records (exact, not from
//! histograms). A missing, failed or interrupted shard stops the merge, naming it, unless the
//! caller allows a partial merge, whose artifacts say `partial` and are not performance-eligible.
//!
//! Each part is checked as it is read (`record::integrity`): its run line's fingerprint must be
//! its scenario's, every request index its shard's, and each level must hold the records its end
//! says it wrote; a shard whose records are not all there makes the merge partial like a missing
//! one. The merged records file is written under a temporary name and renamed once complete, so
//! a merge that stops leaves none half-written.
//!
//! Memory: one compact sample per request (as in a run); the records themselves are streamed
//! into one merged records file, which the artifacts' lists are read from.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::aggregate::Collected;
use crate::aggregate::gaps::add_gap_distributions;
use crate::aggregate::sample::{FailureSample, Sample};
use crate::aggregate::snapshots::{self, Window};
use crate::aggregate::summarise::{LevelInput, add_conversations, summarise};
use crate::aggregate::summary::LevelSummary;
use crate::aggregate::warnings::Warning;
use crate::artifact;
use crate::record::file::{self as records, RecordLine};
use crate::record::integrity::{Kind, Tally, Verdict};
use crate::record::{ClientLoad, Issued, LevelPacing, RunInfo, ShardInfo, ShardPart, ShardsBlock, Stamp};

/// One shard's records file, read through once for its description.
struct Part {
    path: PathBuf,
    info: RunInfo,
    shard: ShardInfo,
    /// What the check of its lines found (levels not holding what they wrote, …).
    verdict: Verdict,
    /// Level id → (pacing, start, end as recorded).
    levels: BTreeMap<String, PartLevel>,
    /// Levels in the order this shard ran them.
    order: Vec<String>,
}

struct PartLevel {
    pacing: LevelPacing,
    started_ns: u64,
    /// The level's prompt salt, as its level line recorded it (the same in every shard).
    prompt_salt: Option<String>,
    end: Option<(Issued, u64, bool, Option<ClientLoad>)>,
    requests: u64,
    failures: u64,
}

/// Why a merge cannot go on.
#[derive(Debug)]
pub enum MergeError {
    /// The inputs are not the parts of one run (exit 2).
    NotOneRun(String),
    /// A shard is missing, failed or was interrupted (exit 1), naming it.
    Incomplete(String),
    /// A file could not be read or written (exit 1).
    Io(String),
}

impl std::fmt::Display for MergeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MergeError::NotOneRun(m) | MergeError::Incomplete(m) | MergeError::Io(m) => f.write_str(m),
        }
    }
}

/// Records files among `inputs`: files as given, directories searched for `*.records.ndjson`.
pub fn records_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, MergeError> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .map_err(|e| MergeError::Io(format!("{}: {e}", input.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".records.ndjson"))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(MergeError::NotOneRun(format!("{}: no *.records.ndjson file in it", input.display())));
            }
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

fn read_part(path: &Path) -> Result<Part, MergeError> {
    let mut lines = records::read_checked(path).map_err(|e| {
        let problem = format!("{}: cannot read it ({e})", path.display());
        if crate::sys::is_not_regular(&e) { MergeError::NotOneRun(problem) } else { MergeError::Io(problem) }
    })?;
    let mut info: Option<RunInfo> = None;
    let mut levels: BTreeMap<String, PartLevel> = BTreeMap::new();
    let mut order = Vec::new();
    for line in &mut lines {
        let line = line.map_err(|e| MergeError::NotOneRun(format!("{}: {e}", path.display())))?;
        match line {
            RecordLine::Run { info: i, .. } => {
                if info.is_some() {
                    return Err(MergeError::NotOneRun(format!(
                        "{}: holds several runs; give each run's shard files on their own",
                        path.display()
                    )));
                }
                info = Some(*i);
            }
            RecordLine::Level { level, pacing, started_at_unix_ns, prompt_salt } => {
                order.push(level.clone());
                levels.insert(
                    level,
                    PartLevel {
                        pacing,
                        started_ns: started_at_unix_ns,
                        prompt_salt,
                        end: None,
                        requests: 0,
                        failures: 0,
                    },
                );
            }
            RecordLine::Request { level, .. } => {
                if let Some(l) = levels.get_mut(&level) {
                    l.requests += 1;
                }
            }
            RecordLine::Failure { level, .. } => {
                if let Some(l) = levels.get_mut(&level) {
                    l.failures += 1;
                }
            }
            RecordLine::Dropped { .. } => {}
            RecordLine::LevelEnd { level, issued, finished_at_unix_ns, interrupted, client, .. } => {
                if let Some(l) = levels.get_mut(&level) {
                    l.end = Some((issued, finished_at_unix_ns, interrupted, client));
                }
            }
        }
    }
    let verdict = lines.finish();
    let info =
        info.ok_or_else(|| MergeError::NotOneRun(format!("{}: not a records file (no run line)", path.display())))?;
    let shard = info.shard.clone().ok_or_else(|| {
        MergeError::NotOneRun(format!(
            "{}: not a shard's records (no shard in its run line); `anvil-load summarize` rebuilds an unsharded run",
            path.display()
        ))
    })?;
    Ok(Part { path: path.to_path_buf(), info, shard, verdict, levels, order })
}

/// Check that the parts are one run's, and which shard indices are missing.
fn check_together(parts: &[Part]) -> Result<Vec<u32>, MergeError> {
    let first = &parts[0];
    for p in &parts[1..] {
        let differs = |what: &str, a: &dyn std::fmt::Display, b: &dyn std::fmt::Display| {
            MergeError::NotOneRun(format!(
                "{} and {} are not parts of one run: their {what} differ ({a} against {b})",
                first.path.display(),
                p.path.display()
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
            return Err(MergeError::NotOneRun(format!(
                "{} and {} are not parts of one run: their run lines differ in `{key}` (the parts of one run describe it alike, but for their shard and prompt sizing)",
                first.path.display(),
                p.path.display()
            )));
        }
        if p.shard.count != first.shard.count {
            return Err(differs("shard counts", &first.shard.count, &p.shard.count));
        }
    }
    let mut seen = BTreeSet::new();
    for p in parts {
        if p.shard.index >= p.shard.count {
            return Err(MergeError::NotOneRun(format!(
                "{}: shard index {} of {}",
                p.path.display(),
                p.shard.index,
                p.shard.count
            )));
        }
        if !seen.insert(p.shard.index) {
            return Err(MergeError::NotOneRun(format!(
                "shard {} is given twice (one of them {}); give each shard's records file once",
                p.shard.index,
                p.path.display()
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

/// What a merge wrote.
pub struct Merged {
    /// The merged run's description (shard 0's, without a shard).
    pub info: RunInfo,
    /// Each level's summary and artifact.
    pub levels: Vec<(LevelSummary, PathBuf)>,
    /// The merged records file and time series.
    pub files: Vec<PathBuf>,
    /// What the check of the parts found that did not stop the merge, for stderr.
    pub notes: Vec<String>,
}

/// Merge the shards' records files into artifacts under `out`.
pub fn merge(inputs: &[PathBuf], out: &Path, allow_partial: bool, window: Duration) -> Result<Merged, MergeError> {
    let files = records_files(inputs)?;
    let mut parts = files.iter().map(|f| read_part(f)).collect::<Result<Vec<_>, _>>()?;
    parts.sort_by_key(|p| p.shard.index);
    let missing = check_together(&parts)?;
    let count = parts[0].shard.count;
    // Levels in the order the first shard ran them, then any only others ran.
    let mut order: Vec<String> = Vec::new();
    for p in &parts {
        for l in &p.order {
            if !order.contains(l) {
                order.push(l.clone());
            }
        }
    }
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("shard(s) {} of {count} gave no records file", join(&missing)));
    }
    // Levels some shard's file does not hold in full: partial like a missing shard.
    let mut incomplete: BTreeSet<&str> = BTreeSet::new();
    let mut notes = Vec::new();
    for p in &parts {
        let (index, file) = (p.shard.index, p.path.display());
        for (level, problem) in &p.verdict.incomplete {
            incomplete.insert(level);
            problems.push(format!("shard {index}'s records ({file}) do not hold what it wrote: {problem}"));
        }
        if let Some(n) = p.verdict.cut_line {
            notes.push(format!(
                "{file}: line {n}, the last, was cut short (the shard was killed while writing it); it is left out"
            ));
        }
        if !p.verdict.unchecked.is_empty() {
            notes.push(format!(
                "{file}: the end of level(s) {} does not say what the level wrote (records written by an older anvil-load): whether every record is still there cannot be checked",
                p.verdict.unchecked.join(", ")
            ));
        }
    }
    for level in &order {
        for p in &parts {
            match p.levels.get(level).map(|l| l.end) {
                None => problems.push(format!("shard {} never ran level {level}", p.shard.index)),
                Some(None) => problems.push(format!(
                    "shard {} did not finish level {level} (killed or failed: its records end early)",
                    p.shard.index
                )),
                Some(Some((_, _, true, _))) => {
                    problems.push(format!("shard {} was interrupted in level {level}", p.shard.index))
                }
                Some(Some(_)) => {}
            }
        }
    }
    let partial = !problems.is_empty();
    if partial && !allow_partial {
        return Err(MergeError::Incomplete(format!(
            "cannot merge: {}; merge what there is with --allow-partial (the artifacts are then marked partial and not performance-eligible)",
            problems.join("; ")
        )));
    }
    artifact::ensure_writable_dir(out)
        .map_err(|e| MergeError::Io(format!("--out {}: cannot write there ({e})", out.display())))?;

    // The merged run's description: shard 0's (or the lowest present), without a shard.
    let mut info = parts[0].info.clone();
    info.shard = None;
    let run_id = info.run_id.clone();
    let merged_path = out.join(format!("{run_id}.merged.records.ndjson"));
    let mut pending = Pending::create(&merged_path)
        .map_err(|e| MergeError::Io(format!("{}: cannot write it ({e})", merged_path.display())))?;
    let io = |e: std::io::Error| MergeError::Io(format!("{}: {e}", merged_path.display()));
    let (writing, merged) = (pending.tmp.clone(), &mut pending.file);
    write_line(merged, &RecordLine::Run { schema: records::RECORDS_SCHEMA.into(), info: Box::new(info.clone()) })
        .map_err(io)?;

    let mut series: Vec<Window> = Vec::new();
    let mut level_summaries = Vec::new();
    for (level_index, level) in order.iter().enumerate() {
        let present: Vec<&Part> = parts.iter().filter(|p| p.levels.contains_key(level)).collect();
        let first = &present[0].levels[level];
        let started_ns = present.iter().map(|p| p.levels[level].started_ns).min().unwrap_or(first.started_ns);
        write_line(
            merged,
            &RecordLine::Level {
                level: level.clone(),
                pacing: first.pacing,
                started_at_unix_ns: started_ns,
                prompt_salt: first.prompt_salt.clone(),
            },
        )
        .map_err(io)?;
        let mut tally = Tally::new(level_index as u64);
        let mut collected = Collected::default();
        let mut seen_index = BTreeSet::new();
        let mut parts_block = Vec::new();
        for p in &present {
            let mut own = Collected::default();
            for line in records::read_level(&p.path, level, &["request", "failure", "dropped"])
                .map_err(|e| MergeError::Io(format!("{}: {e}", p.path.display())))?
            {
                let line = line.map_err(|e| MergeError::NotOneRun(format!("{}: {e}", p.path.display())))?;
                let index = match &line {
                    RecordLine::Request { level: l, record } if l == level => {
                        own.samples.push(Sample::from_record(record));
                        Some((Kind::Request, record.request_index))
                    }
                    RecordLine::Failure { level: l, record } if l == level => {
                        own.failures.push(FailureSample::from_record(record));
                        Some((Kind::Failure, record.request_index))
                    }
                    RecordLine::Dropped { level: l, record } if l == level => {
                        own.dropped += 1;
                        Some((Kind::Dropped, record.request_index))
                    }
                    _ => None,
                };
                let Some((kind, index)) = index else { continue };
                if !seen_index.insert(index) {
                    return Err(MergeError::NotOneRun(format!(
                        "request {index} of level {level} is in two shards' records (one is {}): these are not disjoint parts of one run",
                        p.path.display()
                    )));
                }
                // The merged file's own level end tallies the lines as this merge writes them.
                let mut bytes = serde_json::to_vec(&line).map_err(|e| io(e.into()))?;
                tally.add(kind, &bytes);
                bytes.push(b'\n');
                merged.write_all(&bytes).map_err(io)?;
            }
            let l = &p.levels[level];
            let (issued, finished_ns, interrupted, client) =
                l.end.unwrap_or((Issued::default(), l.started_ns, true, None));
            // The shard's own verdict on its part of the load.
            let own_summary = summarise(LevelInput {
                info: &p.info,
                level_id: level.clone(),
                pacing: l.pacing,
                issued,
                started: Stamp::from_unix_ns(l.started_ns),
                finished: Stamp::from_unix_ns(finished_ns),
                collected: Collected {
                    samples: own.samples.clone(),
                    failures: own.failures.clone(),
                    ..Collected::default()
                },
                interrupted,
                simulator: None,
                server_metrics: None,
                client,
            });
            parts_block.push(ShardPart {
                index: p.shard.index,
                host: p.shard.host.clone(),
                records: p.path.display().to_string(),
                clock_offset_ms: p.shard.clock_offset_ms,
                clock_offset_uncertainty_ms: p.shard.clock_offset_uncertainty_ms,
                requests: l.requests,
                failed: l.failures,
                complete: l.end.is_some_and(|e| !e.2),
                valid: Some(own_summary.load.validity.valid),
                validity_reasons: own_summary.load.validity.reasons.clone(),
            });
            collected.samples.extend(own.samples);
            collected.failures.extend(own.failures);
            collected.dropped += own.dropped;
        }
        // What the pacing issued, summed over the shards (each planned its own part); the
        // window is the whole schedule's on every shard.
        let ends: Vec<(Issued, u64, bool, Option<ClientLoad>)> =
            present.iter().filter_map(|p| p.levels[level].end).collect();
        // The merged level is as late as its latest shard.
        let client = ClientLoad::worst(ends.iter().filter_map(|e| e.3));
        let issued = Issued {
            planned_arrivals: ends.iter().map(|e| e.0.planned_arrivals).sum(),
            planned_window: ends.iter().filter_map(|e| e.0.planned_window).max(),
        };
        let level_partial = present.len() < count as usize
            || ends.len() < present.len()
            || ends.iter().any(|e| e.2)
            || incomplete.contains(level.as_str());
        let finished_ns = ends.iter().map(|e| e.1).max().unwrap_or(started_ns);
        collected.windows = snapshots::windows_from_samples(level, &collected.samples, &collected.failures, window);
        series.extend(collected.windows.iter().cloned());
        write_line(
            merged,
            &RecordLine::LevelEnd {
                level: level.clone(),
                issued,
                finished_at_unix_ns: finished_ns,
                interrupted: level_partial,
                simulator: None,
                server_metrics: None,
                client,
                written: Some(tally.written()),
            },
        )
        .map_err(io)?;
        merged.flush().map_err(io)?;
        let mut summary = summarise(LevelInput {
            info: &info,
            level_id: level.clone(),
            pacing: first.pacing,
            issued,
            started: Stamp::from_unix_ns(started_ns),
            finished: Stamp::from_unix_ns(finished_ns),
            collected,
            interrupted: level_partial,
            simulator: None,
            server_metrics: None,
            client,
        });
        add_conversations(&mut summary, &info, &writing).map_err(MergeError::Io)?;
        add_gap_distributions(&mut summary, &writing).map_err(MergeError::Io)?;
        let invalid: Vec<u32> = parts_block.iter().filter(|p| p.valid == Some(false)).map(|p| p.index).collect();
        if !invalid.is_empty() {
            summary.load.validity.valid = false;
            summary.load.validity.reasons.push(format!(
                "shard(s) {} failed their own validity check (see shards.parts[].validity_reasons)",
                join(&invalid)
            ));
        }
        if level_partial {
            summary.performance_eligible = false;
            summary.warnings.push(Warning::PartialMerge { problems: problems.clone() });
        }
        level_summaries.push((summary, parts_block, level_partial));
    }
    // Every level is in it: the merged records file takes its name.
    pending.persist().map_err(io)?;
    let mut levels = Vec::new();
    for (summary, parts_block, level_partial) in level_summaries {
        let mut a = artifact::build(&info, &summary, &merged_path);
        a.shards = Some(ShardsBlock {
            count,
            partial: level_partial,
            missing: missing.clone(),
            sync: parts[0].shard.sync.clone(),
            parts: parts_block,
        });
        let path = artifact::write_json_atomic(out, &format!("{}.json", summary.level_id), &a)
            .map_err(|e| MergeError::Io(format!("cannot write {} to {}: {e}", summary.level_id, out.display())))?;
        levels.push((summary, path));
    }
    let mut files = Vec::new();
    if !series.is_empty() {
        let path = out.join(format!("{run_id}.merged.timeseries.ndjson"));
        let mut f = std::io::BufWriter::new(
            // Never through a link planted at its name.
            crate::sys::no_follow(std::fs::OpenOptions::new().write(true).create(true).truncate(true))
                .open(&path)
                .map_err(|e| MergeError::Io(format!("{}: {e}", path.display())))?,
        );
        for w in &series {
            write_line(&mut f, w).map_err(|e| MergeError::Io(format!("{}: {e}", path.display())))?;
        }
        f.flush().map_err(|e| MergeError::Io(format!("{}: {e}", path.display())))?;
        files.push(path);
    }
    files.push(merged_path);
    Ok(Merged { info, levels, files, notes })
}

/// The merged records file while it is written: a new file under a temporary name beside its
/// own, renamed to it once every level is in it, and removed if the merge stops before.
struct Pending {
    tmp: PathBuf,
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    done: bool,
}

impl Pending {
    fn create(path: &Path) -> std::io::Result<Pending> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = path.with_file_name(format!(".{name}.{}-{nanos:09}.tmp", std::process::id()));
        // A new file (the umask applies, as to every file the tool writes), never through a
        // link planted at its name.
        let file = crate::sys::no_follow(std::fs::OpenOptions::new().write(true).create_new(true)).open(&tmp)?;
        Ok(Pending { tmp, path: path.to_path_buf(), file: std::io::BufWriter::new(file), done: false })
    }

    fn persist(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_all()?;
        std::fs::rename(&self.tmp, &self.path)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn write_line(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

fn join(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
