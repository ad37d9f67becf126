//! `Collected`: everything one load level produced, as `collect` hands it to the level's finish
//! (or a rebuild, reading records back, builds it): the compact samples, the snapshot windows,
//! and what was known of the records as they were written.

use super::gaps::GapHistograms;
use super::sample::{FailureSample, Sample};
use super::snapshots::Window;
use crate::request::record::Exclusions;

/// Everything one load level produced, in memory: bounded by the compact samples.
#[derive(Debug, Default)]
pub struct Collected {
    pub samples: Vec<Sample>,
    pub failures: Vec<FailureSample>,
    pub dropped: u64,
    /// Interval snapshots taken during the level (for the drift summary).
    pub windows: Vec<Window>,
    /// What `collect` knew of the records as it wrote them; none for records read back.
    pub as_written: Option<AsWritten>,
}

/// A level's records as this process wrote them.
#[derive(Debug, Default)]
pub struct AsWritten {
    /// The rules the level started with, under which its records were written.
    pub rules: Exclusions,
    /// The gaps of the requests eligible under `rules`: when those are still the level's rules
    /// at its end, these are its gap distributions, without reading every record back (see
    /// `gaps`).
    pub gaps: GapHistograms,
}
