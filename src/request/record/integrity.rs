//! What a level wrote to the records file, and the check that a file still holds it.
//!
//! The writer tallies each level's record lines as they reach the file and puts the tally in the
//! level's `level_end` line (`written`: lines per kind and a digest). `summarize` and `merge`
//! tally the lines they read the same way and compare: a line deleted, added or edited after
//! the run shows as a count or digest that differs, named by kind, count, level and file. The
//! same pass refuses what no run of this tool writes: a record outside any level, after its
//! level's end, twice in a level, outside its shard's residue class, or with a negative or
//! non-finite timing, and a run line whose fingerprint is not its scenario's.
//!
//! The digest is SHA-256 over the level's record lines (`request`, `failure`, `dropped`) in file
//! order, each with its `\n`. Over the lines rather than over the set of request indices: an
//! index set shows a line deleted or added, but not one whose timings were edited, and those
//! are the numbers the artifacts are made of. The writer holds each line's exact bytes anyway,
//! every reader streams the file in order, and nothing reorders a level's lines (the coordinator
//! gathers them verbatim; `merge` writes its own end over the lines it wrote), so the check costs
//! one hash pass and no memory. It is a check against loss and edits, not a signature: whoever
//! rewrites the file can rewrite its ends too (lines in transit are authenticated separately).

use std::collections::{HashMap, HashSet};

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};

use super::file::RecordLine;
use super::{LevelPacing, RunInfo};

/// What a level wrote, as its `level_end` line carries it (`written`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The level's place in its run (0 for the first): a level deleted whole shows as a gap.
    pub level_index: u64,
    pub requests: u64,
    pub failures: u64,
    pub dropped: u64,
    /// `sha256:` and the hex digest of the level's record lines, in file order, each with its
    /// line end.
    pub digest: String,
}

/// The kinds of per-request lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Failure,
    Dropped,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Failure => "failure",
            Kind::Dropped => "dropped",
        }
    }
}

/// A level's record lines as they go by: counts per kind and the running digest.
#[derive(Clone)]
pub struct Tally {
    level_index: u64,
    requests: u64,
    failures: u64,
    dropped: u64,
    digest: Context,
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new(0)
    }
}

impl Tally {
    /// The tally of the run's level number `level_index` (0 for the first).
    pub fn new(level_index: u64) -> Self {
        Tally { level_index, requests: 0, failures: 0, dropped: 0, digest: Context::new(&SHA256) }
    }

    /// One record line, without its line end.
    pub fn add(&mut self, kind: Kind, line: &[u8]) {
        match kind {
            Kind::Request => self.requests += 1,
            Kind::Failure => self.failures += 1,
            Kind::Dropped => self.dropped += 1,
        }
        self.digest.update(line);
        self.digest.update(b"\n");
    }

    pub fn written(self) -> Written {
        let digest = self.digest.finish();
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Written {
            level_index: self.level_index,
            requests: self.requests,
            failures: self.failures,
            dropped: self.dropped,
            digest: format!("sha256:{hex}"),
        }
    }
}

/// A level of the file being read.
struct Open {
    /// The run (its ordinal in the file) that started it.
    run: usize,
    tally: Tally,
    /// The line that opened it.
    line: usize,
    started_ns: u64,
    ended: bool,
    /// Request indices seen so far (dropped when the level ends: a record after it is refused).
    indices: HashSet<u64>,
}

/// What reading a whole file found that is not a reason to refuse it outright.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Levels whose records differ from what their end says was written: (level, problem).
    pub incomplete: Vec<(String, String)>,
    /// Levels whose end carries no tally (written before the tally existed).
    pub unchecked: Vec<String>,
    /// A last line cut short (the process was killed while writing it), left out: its number.
    pub cut_line: Option<usize>,
}

impl Verdict {
    /// The problems of `level`, for its artifact's warning.
    pub fn problems_of(&self, level: &str) -> Vec<String> {
        self.incomplete.iter().filter(|(l, _)| l == level).map(|(_, p)| p.clone()).collect()
    }
}

/// The checks of one file, fed every line in order. Each `Err` is a line no run of this tool
/// writes, naming it; `finish` gives what remains to say.
#[derive(Default)]
pub struct Verifier {
    /// The current run's shard (index, count).
    shard: Option<(u32, u32)>,
    /// Run lines so far (a file may hold several runs, appended one after another).
    runs: usize,
    /// Levels the current run started so far.
    levels_in_run: u64,
    levels: HashMap<String, Open>,
    verdict: Verdict,
}

impl Verifier {
    /// Check one complete line `n` (1-based), `raw` its bytes without the line end.
    pub fn line(&mut self, n: usize, raw: &[u8], line: &RecordLine) -> Result<(), String> {
        match line {
            RecordLine::Run { info, .. } => self.run(info),
            RecordLine::Level { level, pacing, started_at_unix_ns, .. } => {
                self.level(n, level, pacing, *started_at_unix_ns)
            }
            RecordLine::Request { level, record } => {
                check_timings(&request_timings(record))?;
                self.record(raw, Kind::Request, level, record.request_index)
            }
            RecordLine::Failure { level, record } => {
                check_timings(&failure_timings(record))?;
                self.record(raw, Kind::Failure, level, record.request_index)
            }
            RecordLine::Dropped { level, record } => {
                check_timings(&[("intended_offset_ms", Some(record.intended_offset_ms), Sign::Positive)])?;
                self.record(raw, Kind::Dropped, level, record.request_index)
            }
            RecordLine::LevelEnd { level, written, finished_at_unix_ns, .. } => {
                self.level_end(n, level, written.as_ref(), *finished_at_unix_ns)
            }
        }
    }

    /// Note that line `n`, the last, was cut short and left out.
    pub fn cut(&mut self, n: usize) {
        self.verdict.cut_line = Some(n);
    }

    pub fn finish(self) -> Verdict {
        self.verdict
    }

    fn run(&mut self, info: &RunInfo) -> Result<(), String> {
        check_name("run id", &info.run_id)?;
        check_fingerprint(info)?;
        self.shard = match &info.shard {
            Some(s) if s.count == 0 || s.index >= s.count => {
                return Err(format!("the run line names shard {} of {}, which no split has", s.index, s.count));
            }
            Some(s) => Some((s.index, s.count)),
            None => None,
        };
        self.runs += 1;
        self.levels_in_run = 0;
        Ok(())
    }

    fn level(&mut self, n: usize, level: &str, pacing: &LevelPacing, started_ns: u64) -> Result<(), String> {
        if self.runs == 0 {
            return Err(format!("level {level} starts before any run line; this is not a records file"));
        }
        check_name("level id", level)?;
        match *pacing {
            LevelPacing::Closed { concurrency: 0, .. } => {
                return Err(format!("level {level} has a concurrency of 0, which no run has"));
            }
            LevelPacing::Closed { max_rate: Some(r), .. } if !(r.is_finite() && r > 0.0) => {
                return Err(format!("level {level} has a max_rate of {r}, which no run has"));
            }
            LevelPacing::Open { rate, .. } if !(rate.is_finite() && rate > 0.0) => {
                return Err(format!("level {level} has a rate of {rate}, which no run has"));
            }
            _ => {}
        }
        if let Some(open) = self.levels.get(level) {
            return Err(format!(
                "level {level} starts a second time (it started at line {}); a run starts each level once",
                open.line
            ));
        }
        // A run writes each level's end before it starts the next one (a stopped level too):
        // a level of this run left without one lost its end line after the run.
        let runs = self.runs;
        for (name, open) in self.levels.iter_mut().filter(|(_, o)| o.run == runs && !o.ended) {
            open.ended = true;
            self.verdict.incomplete.push((
                name.clone(),
                format!("level {name}: its end line is missing, yet its run went on to level {level} (line {n})"),
            ));
        }
        let open = Open {
            run: self.runs,
            tally: Tally::new(self.levels_in_run),
            line: n,
            started_ns,
            ended: false,
            indices: HashSet::new(),
        };
        self.levels.insert(level.to_owned(), open);
        self.levels_in_run += 1;
        Ok(())
    }

    fn record(&mut self, raw: &[u8], kind: Kind, level: &str, index: u64) -> Result<(), String> {
        let what = kind.name();
        let Some(open) = self.levels.get_mut(level) else {
            return Err(format!("a {what} line of level {level}, which no level line started before it"));
        };
        if open.ended {
            return Err(format!(
                "a {what} line (request {index}) of level {level} after the level's end; lines were added to the file"
            ));
        }
        if open.run != self.runs {
            return Err(format!(
                "a {what} line (request {index}) of level {level}, which an earlier run in this file started; lines were moved"
            ));
        }
        if let Some((shard, count)) = self.shard {
            if index % u64::from(count) != u64::from(shard) {
                return Err(format!(
                    "request {index} of level {level} is not shard {shard} of {count}'s: a shard sends the indices j with j mod {count} = {shard}, and {index} mod {count} = {}",
                    index % u64::from(count)
                ));
            }
        }
        if !open.indices.insert(index) {
            return Err(format!("request {index} of level {level} is recorded twice; each request has one line"));
        }
        open.tally.add(kind, raw);
        Ok(())
    }

    fn level_end(&mut self, n: usize, level: &str, written: Option<&Written>, finished_ns: u64) -> Result<(), String> {
        let Some(open) = self.levels.get_mut(level) else {
            return Err(format!("the end of level {level}, which no level line started before it"));
        };
        if open.ended {
            return Err(format!("level {level} ends a second time (line {n})"));
        }
        if open.run != self.runs {
            return Err(format!(
                "the end of level {level}, which an earlier run in this file started; lines were moved"
            ));
        }
        if finished_ns < open.started_ns {
            return Err(format!(
                "level {level} ends before it starts (finished_at_unix_ns {finished_ns} < started_at_unix_ns {})",
                open.started_ns
            ));
        }
        open.ended = true;
        open.indices = HashSet::new();
        let found = std::mem::take(&mut open.tally).written();
        match written {
            None => self.verdict.unchecked.push(level.to_owned()),
            Some(w) => {
                let mut problems = Vec::new();
                let (was, seen) = (w.level_index, found.level_index);
                if was > seen {
                    let n = was - seen;
                    problems.push(format!(
                        "it was level {} of its run, but the file holds {seen} of the run's levels before it: {n} {} deleted whole",
                        was + 1,
                        if n == 1 { "level" } else { "levels" }
                    ));
                } else if was < seen {
                    problems.push(format!(
                        "it was level {} of its run, but the file holds {seen} of the run's levels before it: levels were added",
                        was + 1
                    ));
                }
                for (what, want, got) in [
                    ("request", w.requests, found.requests),
                    ("failure", w.failures, found.failures),
                    ("dropped", w.dropped, found.dropped),
                ] {
                    let lines = |n: u64| if n == 1 { "line" } else { "lines" };
                    if got < want {
                        let n = want - got;
                        problems.push(format!("{n} {what} {} missing ({want} written, {got} in the file)", lines(n)));
                    } else if got > want {
                        let n = got - want;
                        problems.push(format!(
                            "{n} {what} {} more than were written ({want} written, {got} in the file)",
                            lines(n)
                        ));
                    }
                }
                let same_counts =
                    (w.requests, w.failures, w.dropped) == (found.requests, found.failures, found.dropped);
                if same_counts && found.digest != w.digest {
                    problems.push(
                        "its record lines differ from those written (their digest is not the level end's): lines were edited"
                            .to_string(),
                    );
                }
                for p in problems {
                    self.verdict.incomplete.push((level.to_owned(), format!("level {level}: {p}")));
                }
            }
        }
        Ok(())
    }
}

/// The fingerprint the run line states must be the one its scenario gives. A scenario whose base
/// URL was redacted (`target.redact_base_url`) was fingerprinted with the URL the file does not
/// hold: that fingerprint cannot be recomputed (`merge` still requires every shard's scenario to
/// be the same).
pub fn check_fingerprint(info: &RunInfo) -> Result<(), String> {
    let redacted = info.scenario.pointer("/target/redact_base_url").and_then(|v| v.as_bool()) == Some(true);
    if redacted {
        return Ok(());
    }
    let recomputed = super::fingerprint(&info.scenario);
    if recomputed != info.configuration_fingerprint {
        return Err(format!(
            "the run line's configuration_fingerprint {} is not its scenario's ({recomputed}): the scenario or the fingerprint was changed after the run",
            info.configuration_fingerprint
        ));
    }
    Ok(())
}

/// Run and level ids name the files rebuilt from them (`<level>.json`, `<run>.merged.…`): only
/// the shape this tool gives them (letters, digits, `-`, `_`, `.`, not first) is taken, so a
/// file cannot make a reader write outside its `--out`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if fine {
        Ok(())
    } else {
        Err(format!(
            "the {what} {name:?} is not one this tool makes (letters, digits, '-', '_' and '.', at most 200, starting with a letter or digit)"
        ))
    }
}

/// Which values a timing may take.
#[derive(Clone, Copy)]
enum Sign {
    /// A duration or offset: zero or more.
    Positive,
    /// A difference (schedule lag, sizing error): any finite value.
    Any,
}

/// The longest duration a record can hold: no level lasts a year (the scenario's durations stop
/// at 30 days), and below it every sum over a level stays finite.
const LONGEST_MS: f64 = 365.0 * 24.0 * 3600.0 * 1000.0;

fn check_timings(values: &[(&str, Option<f64>, Sign)]) -> Result<(), String> {
    for &(name, value, sign) in values {
        let Some(v) = value else { continue };
        let bad = match sign {
            _ if !v.is_finite() => Some("is not a finite number"),
            Sign::Positive if v < 0.0 => Some("is negative"),
            Sign::Positive if v > LONGEST_MS && name.ends_with("_ms") => Some("is longer than a year"),
            _ => None,
        };
        if let Some(bad) = bad {
            return Err(format!("{name} {v} {bad}; no run records that"));
        }
    }
    Ok(())
}

fn request_timings(r: &super::RequestTiming) -> [(&'static str, Option<f64>, Sign); 20] {
    use Sign::{Any, Positive};
    [
        ("start_offset_ms", Some(r.start_offset_ms), Positive),
        ("intended_offset_ms", r.intended_offset_ms, Positive),
        ("schedule_lag_ms", r.schedule_lag_ms, Any),
        ("queue_wait_ms", r.queue_wait_ms, Positive),
        ("time_to_first_output_ms", Some(r.time_to_first_output_ms), Positive),
        ("ttft_ms", r.ttft_ms, Positive),
        ("e2e_ms", Some(r.e2e_ms), Positive),
        ("generation_ms", Some(r.generation_ms), Positive),
        ("visible_generation_ms", r.visible_generation_ms, Positive),
        ("tpot_ms", r.tpot_ms, Positive),
        ("mean_time_per_output_token_ms", r.mean_time_per_output_token_ms, Positive),
        ("mean_inter_token_latency_ms", r.mean_inter_token_latency_ms, Positive),
        ("decode_tok_s", r.decode_tok_s, Positive),
        ("effective_prefill_tok_s", r.effective_prefill_tok_s, Positive),
        ("ttft_from_intended_ms", r.ttft_from_intended_ms, Positive),
        ("e2e_from_intended_ms", r.e2e_from_intended_ms, Positive),
        ("prompt_sizing_error_pct", r.prompt_sizing_error_pct, Any),
        ("max_stall_ms", r.max_stall_ms, Positive),
        ("tokens_per_chunk", r.tokens_per_chunk, Positive),
        ("tpot_corrected_ms", r.tpot_corrected_ms, Positive),
    ]
}

fn failure_timings(f: &super::FailureRecord) -> [(&'static str, Option<f64>, Sign); 7] {
    use Sign::{Any, Positive};
    [
        ("start_offset_ms", Some(f.start_offset_ms), Positive),
        ("intended_offset_ms", f.intended_offset_ms, Positive),
        ("schedule_lag_ms", f.schedule_lag_ms, Any),
        ("queue_wait_ms", f.queue_wait_ms, Positive),
        ("elapsed_ms", Some(f.elapsed_ms), Positive),
        ("time_to_first_output_ms", f.time_to_first_output_ms, Positive),
        ("ttft_ms", f.ttft_ms, Positive),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_kinds_and_digests_lines_with_their_ends() {
        let mut a = Tally::default();
        a.add(Kind::Request, b"{\"x\":1}");
        a.add(Kind::Dropped, b"{\"x\":2}");
        let a = a.written();
        assert_eq!((a.requests, a.failures, a.dropped), (1, 0, 1));
        // The digest is SHA-256 of the lines as a file holds them.
        let direct = ring::digest::digest(&SHA256, b"{\"x\":1}\n{\"x\":2}\n");
        let hex: String = direct.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(a.digest, format!("sha256:{hex}"));
        // The same lines in another order are another file.
        let mut b = Tally::default();
        b.add(Kind::Dropped, b"{\"x\":2}");
        b.add(Kind::Request, b"{\"x\":1}");
        assert_ne!(b.written().digest, a.digest);
    }

    #[test]
    fn negative_and_huge_timings_are_named() {
        assert!(check_timings(&[("e2e_ms", Some(1.0), Sign::Positive)]).is_ok());
        assert!(check_timings(&[("schedule_lag_ms", Some(-1.0), Sign::Any)]).is_ok());
        let e = check_timings(&[("ttft_ms", Some(-0.5), Sign::Positive)]).unwrap_err();
        assert!(e.contains("ttft_ms -0.5 is negative"), "{e}");
        let e = check_timings(&[("e2e_ms", Some(1e300), Sign::Positive)]).unwrap_err();
        assert!(e.contains("longer than a year"), "{e}");
        let e = check_timings(&[("e2e_ms", Some(f64::NAN), Sign::Any)]).unwrap_err();
        assert!(e.contains("not a finite number"), "{e}");
    }
}
