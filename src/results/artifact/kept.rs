//! An artifact's per-request records as the commands after the run keep them. Each record is
//! read while the file streams past (see `scan`) and reduced at once to the values the reports draw and
//! `compare` tests, with a few counts; the record itself is dropped. Memory is then a few
//! numbers per request (8 bytes per kept metric), not the record's JSON, whose parsed form
//! costs kilobytes: a 2,000,000-request artifact is about 2 GB of text.
//!
//! The values are the ones `summarise` puts in the distributions, in record order: the
//! eligible requests' values, and for the schedule lag every request sent, completed then
//! failed (as [`ArtifactFile::values`](super::ArtifactFile::values) documents).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

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

/// `request_timings`, as kept.
#[derive(Debug, Clone, Default)]
pub struct Completed {
    /// Records read.
    pub count: u64,
    /// Of them performance-eligible (in the distributions).
    pub eligible: u64,
    /// Per [`KEPT`] metric, the eligible requests' values in record order.
    pub values: [Vec<f64>; KEPT.len()],
    /// Every completed request's schedule lag (open loop), in record order.
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
    /// Every failed request's schedule lag (open loop), in record order.
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
    pub fn push(&mut self, r: &RequestTiming) {
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
        if let Some(ttft_ms) = r.ttft_ms {
            self.ttft_points.push(TtftPoint {
                start_offset_ms: r.start_offset_ms,
                ttft_ms,
                eligible: r.performance_eligible,
            });
        }
    }
}

impl Failed {
    pub fn push(&mut self, f: &FailureRecord) {
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
        self.points.push(FailurePoint { kind: index as u32, start_offset_ms: f.start_offset_ms, ttft_ms: f.ttft_ms });
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

/// A list read one element at a time into `T`'s accumulator.
struct Each<T>(std::marker::PhantomData<T>);

impl<'de> Visitor<'de> for Each<Completed> {
    type Value = Completed;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of request records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Completed, A::Error> {
        let mut kept = Completed::default();
        while let Some(r) = seq.next_element::<RequestTiming>()? {
            kept.push(&r);
        }
        Ok(kept)
    }
}

impl<'de> Visitor<'de> for Each<Failed> {
    type Value = Failed;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of failure records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Failed, A::Error> {
        let mut kept = Failed::default();
        while let Some(f) = seq.next_element::<FailureRecord>()? {
            kept.push(&f);
        }
        Ok(kept)
    }
}

impl<'de> Deserialize<'de> for Completed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(Each::<Completed>(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for Failed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(Each::<Failed>(std::marker::PhantomData))
    }
}

/// The position of a kept metric; `None` for one that is not kept.
pub fn position(metric: Metric) -> Option<usize> {
    KEPT.iter().position(|&m| m == metric)
}
