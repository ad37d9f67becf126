//! An artifact's per-request records as the commands after the run keep them. Each record is
//! read while the file streams past (see `scan`) and reduced at once to the values the reports draw and
//! `compare` tests, with a few counts; the record itself is dropped. Memory is then a few
//! numbers per request (8 bytes per kept metric), not the record's JSON, whose parsed form
//! costs kilobytes: a 2,000,000-request artifact is about 2 GB of text.
//!
//! The values are the ones `summarise` puts in the distributions: the eligible requests'
//! values, and for the schedule lag every request sent, completed and failed (as
//! [`ArtifactFile::values`](super::ArtifactFile::values) documents). Once the file is read they
//! are sorted in place ([`Completed::finish`]), since everything drawn or tested from them
//! (percentiles, CDFs, rank tests, bootstraps) wants them sorted, and sorting once, in place,
//! spares every reader a copy of its own.

use std::collections::BTreeMap;

use crate::contract::Metric;
use crate::request::record::{FailureRecord, RequestTiming};
use crate::results::aggregate::sample::{FailureSample, Sample};
use crate::results::aggregate::slo::request_value;

/// The distributions whose per-request values are kept: those the reports show and draw and
/// `compare` tests. Another metric's values are not read back (its summary in `metrics` is).
pub const KEPT: [Metric; 8] = [
    Metric::Ttft,
    Metric::TimeToFirstOutput,
    Metric::Tpot,
    Metric::E2e,
    Metric::TtftFromIntended,
    Metric::E2eFromIntended,
    Metric::CompletionTokens,
    Metric::PromptTokens,
];

/// What is kept of each record besides the distributions' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The timeline's points too: `report` draws every request.
    Timeline,
    /// The numbers only: `compare` tests distributions, and a point is 24 bytes a request.
    Numbers,
}

/// `request_timings`, as kept.
#[derive(Debug, Clone, Default)]
pub struct Completed {
    /// Records read.
    pub count: u64,
    /// Of them performance-eligible (in the distributions).
    pub eligible: u64,
    /// Per [`KEPT`] metric, the eligible requests' values: in record order while the file is
    /// read, ascending once it is.
    pub values: [Vec<f64>; KEPT.len()],
    /// Every completed request's schedule lag (open loop); once the file is read, every failed
    /// one's too, ascending.
    pub schedule_lag: Vec<f64>,
    /// Requests left out of the distributions, by reason.
    pub excluded: BTreeMap<&'static str, u64>,
    /// Whether any response streamed reasoning.
    pub reasoning: bool,
    /// Responses carrying another request's canary marker.
    pub foreign_canaries: u64,
    /// The end of the last request, from the level start.
    pub last_end_ms: f64,
    /// (sent at, TTFT, eligible) of every request with a first token, in record order.
    pub ttft_points: Vec<TtftPoint>,
}

/// One dot of the TTFT timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtftPoint {
    pub start_offset_ms: f64,
    pub ttft_ms: f64,
    pub eligible: bool,
}

/// `failures`, as kept.
#[derive(Debug, Clone, Default)]
pub struct Failed {
    pub count: u64,
    /// The error kinds met, in order of first appearance; [`FailurePoint::kind`] indexes it.
    pub kinds: Vec<String>,
    pub points: Vec<FailurePoint>,
    /// Every failed request's schedule lag (open loop), while the file is read; then moved to
    /// [`Completed::schedule_lag`].
    pub schedule_lag: Vec<f64>,
    /// The end of the last failed request, from the level start.
    pub last_end_ms: f64,
}

/// One failed request: its kind, when it was sent and its TTFT when output had begun.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailurePoint {
    pub kind: u32,
    pub start_offset_ms: f64,
    pub ttft_ms: Option<f64>,
}

impl Completed {
    /// Once every record is read: the failed requests' schedule lags join the completed ones',
    /// and every kept array is sorted (ascending, `total_cmp`), in place.
    pub fn finish(&mut self, failed: &mut Failed) {
        self.schedule_lag.append(&mut failed.schedule_lag);
        failed.schedule_lag.shrink_to_fit();
        for values in self.values.iter_mut().chain([&mut self.schedule_lag]) {
            values.sort_unstable_by(f64::total_cmp);
        }
    }

    pub fn push(&mut self, r: &RequestTiming, keep: Keep) {
        let s = Sample::from_record(r);
        self.count += 1;
        if r.performance_eligible {
            self.eligible += 1;
            for (values, metric) in self.values.iter_mut().zip(KEPT) {
                if let Some(v) = request_value(&s, metric) {
                    values.push(v);
                }
            }
        } else {
            *self.excluded.entry(r.exclusion_reason.map_or("not eligible", |e| e.as_str())).or_default() += 1;
        }
        if let Some(lag) = request_value(&s, Metric::ScheduleLag) {
            self.schedule_lag.push(lag);
        }
        self.reasoning |= r.reasoning_chunks > 0;
        self.foreign_canaries += u64::from(r.request_canary.as_ref().is_some_and(|c| c.foreign_marker_count > 0));
        self.last_end_ms = self.last_end_ms.max(r.start_offset_ms + s.e2e_ms());
        if let (Some(ttft_ms), Keep::Timeline) = (r.ttft_ms, keep) {
            self.ttft_points.push(TtftPoint {
                start_offset_ms: r.start_offset_ms,
                ttft_ms,
                eligible: r.performance_eligible,
            });
        }
    }
}

impl Failed {
    pub fn push(&mut self, f: &FailureRecord, keep: Keep) {
        let s = FailureSample::from_record(f);
        self.count += 1;
        let kind = f.error_kind.to_string();
        let index = match self.kinds.iter().position(|k| *k == kind) {
            Some(i) => i,
            None => {
                self.kinds.push(kind);
                self.kinds.len() - 1
            }
        };
        if keep == Keep::Timeline {
            self.points.push(FailurePoint {
                kind: index as u32,
                start_offset_ms: f.start_offset_ms,
                ttft_ms: f.ttft_ms,
            });
        }
        if let Some(lag) = s.schedule_lag_ms() {
            self.schedule_lag.push(lag);
        }
        self.last_end_ms = self.last_end_ms.max(s.start_offset_ms + s.elapsed_ms);
    }

    /// The kind of a point, as written.
    pub fn kind(&self, p: &FailurePoint) -> &str {
        self.kinds.get(p.kind as usize).map_or("", String::as_str)
    }
}

/// The position of a kept metric; `None` for one that is not kept.
pub fn position(metric: Metric) -> Option<usize> {
    KEPT.iter().position(|&m| m == metric)
}
