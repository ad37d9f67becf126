//! An artifact's records as rows, streamed: each record is handed on as it is read and dropped,
//! so exporting a 2 GB artifact holds one record at a time. Two scans of the file (see
//! `results::artifact::scan`): the first reads the level's name and start wherever they are in
//! the document (a file sorted by key puts `request_timings` before `run_id`), the second hands
//! on the records.

use std::path::Path;

use crate::request::record::{FailureRecord, RequestTiming};
use crate::results::artifact::scan::{ScanError, one, scan};

/// The level a row belongs to, from the artifact's own fields.
#[derive(Debug, serde::Deserialize)]
pub struct Head {
    pub schema: String,
    pub run_id: String,
    pub started_at_unix_ns: u64,
}

/// A record as read.
pub enum Read<'a> {
    Completed(&'a RequestTiming),
    Failed(&'a FailureRecord),
}

const LISTS: [&str; 2] = ["request_timings", "failures"];

/// Read `path`'s head, then hand every record to `each` in file order. `each`'s error stops the
/// reading and is returned as `Err(Ok(e))`; a file that is not an artifact gives
/// `Err(Err(message))`.
pub fn for_each_record<E>(
    path: &Path,
    mut each: impl FnMut(&Head, Read<'_>) -> Result<(), E>,
) -> Result<Head, Result<E, String>> {
    let skip = |_, bytes: &[u8], whole| Ok(one::<serde::de::IgnoredAny>(bytes, whole)?.map(|(_, used)| used));
    let head = open(path, skip).map_err(Err)?;
    let head: Head = serde_json::from_slice(&head).map_err(|e| Err(not_one(path, &e)))?;
    if head.schema != crate::results::artifact::SCHEMA {
        let schema = crate::results::artifact::SCHEMA;
        return Err(Err(format!("{}: schema is {:?}, not {schema}", path.display(), head.schema)));
    }
    let mut failed: Option<E> = None;
    let outcome = open(path, |list, bytes, whole| {
        let stop = |e| {
            failed = Some(e);
            "the export stopped".to_string()
        };
        if list == 0 {
            let Some((r, used)) = one::<RequestTiming>(bytes, whole)? else { return Ok(None) };
            each(&head, Read::Completed(&r)).map_err(stop)?;
            Ok(Some(used))
        } else {
            let Some((f, used)) = one::<FailureRecord>(bytes, whole)? else { return Ok(None) };
            each(&head, Read::Failed(&f)).map_err(stop)?;
            Ok(Some(used))
        }
    });
    if let Some(e) = failed {
        return Err(Ok(e));
    }
    outcome.map_err(Err)?;
    Ok(head)
}

fn open(path: &Path, each: impl FnMut(usize, &[u8], bool) -> Result<Option<usize>, String>) -> Result<Vec<u8>, String> {
    let file = crate::sys::open_input(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
    scan(file, &LISTS, each).map_err(|e| match e {
        ScanError::Io(e) => format!("{}: cannot read it ({e})", path.display()),
        e @ ScanError::Syntax(_) => not_one(path, &e),
    })
}

fn not_one(path: &Path, e: &dyn std::fmt::Display) -> String {
    format!("{}: not an anvil-serving.benchmark/v1 artifact ({e})", path.display())
}
