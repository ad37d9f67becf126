//! `finish_level`: the one way a level ends, whether this process just ran it, `summarize`
//! rebuilt it from its records file or `merge` joined a sharded run's parts of it.
//!
//! Three steps, in this order: the samples are summarised (`summarise`); then what the compact
//! samples do not hold is read back from the level's records, in one pass: its conversations
//! (for a conversation workload) and its gap distributions — unless the gaps `collect` gathered
//! as it wrote the records still hold under the level's final rules, which a live level's
//! usually do; last, where the records came from (`Origin`) decides what only it knows: each
//! shard's own validity and whether a merge is partial, or that a records file does not hold
//! what its run wrote. Those verdicts come last so their warnings follow the level's own.

use std::ops::Range;
use std::path::Path;

use super::conversations;
use super::gaps::{GapHistograms, of_histogram};
use super::load;
use super::summarise::{LevelInput, summarise};
use super::summary::LevelSummary;
use super::tool_calls;
use super::warnings::Warning;
use super::{models, replicas, structured};
use crate::contract::Metric;
use crate::request::record::file::{RecordLine, read_level};
use crate::request::record::{ClientLoad, FailureRecord, Issued, RequestTiming, RunInfo, ShardPart, ShardsBlock};

/// Below this share of the expected cached tokens, a conversation's cache did not hold.
const CACHE_EFFECTIVE_MIN: f64 = 0.9;

/// Where a level's records came from.
pub enum Origin {
    /// This process ran the level and wrote its records.
    Run,
    /// Read back from a records file; `missing` is what the file's check found this level's
    /// records lack (nothing when they are whole).
    Rebuilt { missing: Vec<String> },
    /// The union of the records of a sharded run's parts.
    Merged(Shards),
}

/// The shards a level was merged from.
pub struct Shards {
    pub count: u32,
    /// Shard indices that gave no records file.
    pub missing: Vec<u32>,
    /// How the shards agreed on start instants (`coordinator` or `start_at`).
    pub sync: String,
    /// Some shard is missing, or did not finish this level whole.
    pub partial: bool,
    /// Every reason the merge is partial, named (for a partial level's warning).
    pub problems: Vec<String>,
    /// The parts present, in the order their records were added to the level's samples.
    pub parts: Vec<ShardLevel>,
}

/// One shard's part of a merged level.
pub struct ShardLevel {
    /// As the artifact lists it; its own validity verdict is decided here.
    pub part: ShardPart,
    /// What the shard's pacing issued, and how late its client was.
    pub issued: Issued,
    pub client: Option<ClientLoad>,
    /// Its records among the level's: ranges of the input's samples and failures.
    pub samples: Range<usize>,
    pub failures: Range<usize>,
}

/// The level's summary, every number computed (see the module doc). `records` is the file that
/// holds the level's records; an error is one it could not be read back from.
pub fn finish_level(mut input: LevelInput<'_>, origin: Origin, records: &Path) -> Result<LevelSummary, String> {
    let info = input.info;
    let (shards, missing) = match origin {
        Origin::Run => (None, Vec::new()),
        Origin::Rebuilt { missing } => (None, missing),
        Origin::Merged(shards) => (Some(judge_parts(&input, shards)), Vec::new()),
    };
    let as_written = input.collected.as_written.take();
    let mut summary = summarise(input);

    // Read back from the records file only what the samples do not hold.
    let sessions = info.prompt_cache_mode == "sessions";
    let live = as_written.as_ref().filter(|w| w.rules == summary.rules).map(|w| &w.gaps);
    let mut tally = (info.replicas.len() > 1).then(|| replicas::Tally::new(info.replicas.len()));
    let mut per_model = models::Tally::new(&info.models, info.reset_cache.is_some());
    let max_invalid = structured::max_invalid_rate(info);
    let mut schemas = max_invalid.map(|_| structured::Tally::default());
    let mut tallies: Vec<&mut dyn RecordTally> = Vec::new();
    if let Some(t) = tally.as_mut() {
        tallies.push(t);
    }
    if per_model.wanted() {
        tallies.push(&mut per_model);
    }
    if let Some(t) = schemas.as_mut() {
        tallies.push(t);
    }
    let mut tools = info.scenario.pointer("/workload/tools").is_some().then(tool_calls::Tally::default);
    if let Some(t) = tools.as_mut() {
        tallies.push(t);
    }
    let mut media = info.scenario.pointer("/workload/media").is_some().then(super::media::Tally::default);
    if let Some(t) = media.as_mut() {
        tallies.push(t);
    }
    let back = read_back(records, &summary, sessions, live.is_none(), &mut tallies)?;
    let (rows, not_reset) = per_model.finish(summary.wall_clock_ms);
    summary.models = rows;
    summary.warnings.extend(not_reset);
    summary.tool_calls = tools.and_then(tool_calls::Tally::finish);
    summary.media = media.map(super::media::Tally::finish);
    if let Some(tally) = tally {
        let rows = tally.finish(&info.replicas, summary.wall_clock_ms);
        summary.warnings.extend(replicas::differ(&rows));
        summary.replicas = Some(rows);
    }
    if let (Some(t), Some(max)) = (schemas, max_invalid) {
        let block = t.finish(max);
        summary.warnings.extend(structured::warnings(&block));
        if let Some(reason) = structured::validity_reason(&block) {
            summary.performance_eligible = false;
            summary.load.validity.valid = false;
            summary.load.validity.reasons.push(reason);
        }
        summary.structured_output = Some(block);
    }
    if sessions {
        add_conversations(&mut summary, &back.requests, &back.failures, info);
    }
    let gaps = live.unwrap_or(&back.gaps);
    summary.distributions.set(Metric::ItlChunk, of_histogram(&gaps.chunk));
    summary.distributions.set(Metric::ItlToken, of_histogram(&gaps.token));
    summary.records_as_written = as_written.map(|w| w.rules);

    if let Some((block, problems)) = shards {
        let invalid: Vec<String> =
            block.parts.iter().filter(|p| p.valid == Some(false)).map(|p| p.index.to_string()).collect();
        if !invalid.is_empty() {
            summary.load.validity.valid = false;
            summary.load.validity.reasons.push(format!(
                "shard(s) {} failed their own validity check (see shards.parts[].validity_reasons)",
                invalid.join(", ")
            ));
        }
        if block.partial {
            summary.performance_eligible = false;
            summary.warnings.push(Warning::PartialMerge { problems });
        }
        summary.shards = Some(block);
    }
    if !missing.is_empty() {
        summary.performance_eligible = false;
        summary.warnings.push(Warning::RecordsIncomplete { problems: missing });
    }
    Ok(summary)
}

/// The `shards` block, each part with its own validity verdict (its dispatch lag and lateness,
/// over its own records), and the merge's problems.
fn judge_parts(input: &LevelInput<'_>, shards: Shards) -> (ShardsBlock, Vec<String>) {
    let (samples, failures) = (&input.collected.samples, &input.collected.failures);
    let parts = shards
        .parts
        .into_iter()
        .map(|p| {
            let own = load::load_record(
                input.info,
                input.pacing,
                p.issued,
                samples.get(p.samples.clone()).unwrap_or_default(),
                failures.get(p.failures.clone()).unwrap_or_default(),
                0,
                p.client,
            );
            ShardPart { valid: Some(own.validity.valid), validity_reasons: own.validity.reasons, ..p.part }
        })
        .collect();
    let block =
        ShardsBlock { count: shards.count, partial: shards.partial, missing: shards.missing, sync: shards.sync, parts };
    (block, shards.problems)
}

/// What one pass over the level's records gives back.
#[derive(Default)]
struct ReadBack {
    /// The gap histograms of the requests eligible under the final rules (when asked for).
    gaps: GapHistograms,
    /// Conversation workloads: the level's records, brought in line with its final rules.
    requests: Vec<RequestTiming>,
    failures: Vec<FailureRecord>,
}

/// A per-level table tallied in the one pass over the level's records (replicas, models,
/// structured output, …): every request record, and every failure when it counts those.
trait RecordTally {
    fn request(&mut self, r: &RequestTiming);
    fn failure(&mut self, _f: &FailureRecord) {}
    fn counts_failures(&self) -> bool {
        false
    }
}

impl RecordTally for replicas::Tally {
    fn request(&mut self, r: &RequestTiming) {
        replicas::Tally::request(self, r);
    }
    fn failure(&mut self, f: &FailureRecord) {
        replicas::Tally::failure(self, f);
    }
    fn counts_failures(&self) -> bool {
        true
    }
}

impl RecordTally for models::Tally {
    fn request(&mut self, r: &RequestTiming) {
        models::Tally::request(self, r);
    }
    fn failure(&mut self, f: &FailureRecord) {
        models::Tally::failure(self, f);
    }
    fn counts_failures(&self) -> bool {
        true
    }
}

impl RecordTally for structured::Tally {
    fn request(&mut self, r: &RequestTiming) {
        structured::Tally::request(self, r);
    }
}

impl RecordTally for tool_calls::Tally {
    fn request(&mut self, r: &RequestTiming) {
        tool_calls::Tally::request(self, r);
    }
}

impl RecordTally for super::media::Tally {
    fn request(&mut self, r: &RequestTiming) {
        super::media::Tally::request(self, r);
    }
}

/// One pass over the level's records in `records`, for its gaps and (`sessions`) its
/// conversations; none when neither is needed.
fn read_back(
    records: &Path,
    summary: &LevelSummary,
    sessions: bool,
    gaps: bool,
    tallies: &mut [&mut dyn RecordTally],
) -> Result<ReadBack, String> {
    let mut back = ReadBack::default();
    if !sessions && !gaps && tallies.is_empty() {
        return Ok(back);
    }
    let failures = sessions || tallies.iter().any(|t| t.counts_failures());
    let kinds: &'static [&'static str] = if failures { &["request", "failure"] } else { &["request"] };
    for line in read_level(records, &summary.level_id, kinds).map_err(|e| format!("{}: {e}", records.display()))? {
        match line? {
            RecordLine::Request { level, mut record } if level == summary.level_id => {
                summary.rules.apply(&mut record);
                if gaps && record.performance_eligible {
                    back.gaps.add(&record);
                }
                for t in tallies.iter_mut() {
                    t.request(&record);
                }
                if sessions {
                    back.requests.push(*record);
                }
            }
            RecordLine::Failure { level, mut record } if failures && level == summary.level_id => {
                summary.rules.apply_to_failure(&mut record);
                for t in tallies.iter_mut() {
                    t.failure(&record);
                }
                if sessions {
                    back.failures.push(*record);
                }
            }
            _ => {}
        }
    }
    Ok(back)
}

/// Conversations: the per-turn and per-session summaries (the compact sample store keeps no
/// session facts), and their warnings.
fn add_conversations(
    summary: &mut LevelSummary,
    requests: &[RequestTiming],
    failures: &[FailureRecord],
    info: &RunInfo,
) {
    let Some(c) = conversations::summarise(requests, failures, &info.slo) else { return };
    if c.cross_session_contaminated > 0 {
        summary.warnings.push(Warning::CrossSession { responses: c.cross_session_contaminated });
    }
    if let Some(ratio) = c.cache.ratio.filter(|&r| r < CACHE_EFFECTIVE_MIN) {
        summary.warnings.push(Warning::CacheIneffective { ratio, expected: c.cache.expected_cached_tokens });
    }
    summary.conversations = Some(c);
}
