//! Record lists written into an artifact straight from the records file, one record at a time,
//! so writing the artifact of a million-request soak needs no more memory than a short run.

use std::path::PathBuf;

use serde::ser::{Error, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::request::record::file::{self as records, RecordLine};
use crate::request::record::timing::Exclusions;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Requests,
    Failures,
    Dropped,
}

/// The records of one kind and one level, read from `path` when serialized. Request records are
/// brought in line with the level's final rules (cool-down is only known at its end).
#[derive(Debug, Clone)]
pub struct Streamed {
    pub path: PathBuf,
    pub level: String,
    pub kind: StreamKind,
    pub rules: Exclusions,
    /// The rules this process wrote the records under, when it wrote them itself. Still the
    /// level's `rules`, they leave every record as it is: the lines are copied as written,
    /// with no parsing and serializing again (most of the cost of writing an artifact).
    pub as_written: Option<Exclusions>,
}

impl Serialize for Streamed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kinds: &'static [&'static str] = match self.kind {
            StreamKind::Requests => &["request"],
            StreamKind::Failures => &["failure"],
            StreamKind::Dropped => &["dropped"],
        };
        let unreadable = |e: std::io::Error| S::Error::custom(format!("{}: {e}", self.path.display()));
        let mut seq = serializer.serialize_seq(None)?;
        if self.as_written == Some(self.rules) {
            for record in records::read_level_verbatim(&self.path, &self.level, kinds).map_err(unreadable)? {
                seq.serialize_element(&super::json::Verbatim(record.map_err(S::Error::custom)?))?;
            }
            return seq.end();
        }
        let lines = records::read_level(&self.path, &self.level, kinds).map_err(unreadable)?;
        for line in lines {
            match (line.map_err(S::Error::custom)?, self.kind) {
                (RecordLine::Request { level, mut record }, StreamKind::Requests) if level == self.level => {
                    self.rules.apply(&mut record);
                    seq.serialize_element(&record)?;
                }
                (RecordLine::Failure { level, mut record }, StreamKind::Failures) if level == self.level => {
                    self.rules.apply_to_failure(&mut record);
                    seq.serialize_element(&record)?;
                }
                (RecordLine::Dropped { level, record }, StreamKind::Dropped) if level == self.level => {
                    seq.serialize_element(&record)?;
                }
                _ => {}
            }
        }
        seq.end()
    }
}
