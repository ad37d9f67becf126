//! An artifact's records as rows, streamed: each record is handed on as it is read and dropped,
//! so exporting a 2 GB artifact holds one record at a time. Two passes over the file: the
//! first reads the level's name and start (wherever they are in the document: a file sorted by
//! key puts `request_timings` before `run_id`), the second hands on the records.

use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::request::record::{FailureRecord, RequestTiming};

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

/// Read `path`'s head, then hand every record to `each`, completed ones first (as the artifact
/// lists them). `each`'s error stops the reading and is returned as `Err(Ok(e))`; a file that is
/// not an artifact gives `Err(Err(message))`.
pub fn for_each_record<E>(
    path: &Path,
    mut each: impl FnMut(&Head, Read<'_>) -> Result<(), E>,
) -> Result<Head, Result<E, String>> {
    let head: Head = parse(path, |d| serde::Deserialize::deserialize(d)).map_err(Err)?;
    if head.schema != crate::results::artifact::SCHEMA {
        return Err(Err(format!(
            "{}: schema is {:?}, not {}",
            path.display(),
            head.schema,
            crate::results::artifact::SCHEMA
        )));
    }
    let mut failed: Option<E> = None;
    let seed = Document { head: &head, each: &mut each, failed: &mut failed };
    let outcome = parse(path, |d| seed.deserialize(d));
    if let Some(e) = failed {
        return Err(Ok(e));
    }
    outcome.map_err(Err)?;
    Ok(head)
}

fn parse<T>(
    path: &Path,
    read: impl FnOnce(
        &mut serde_json::Deserializer<serde_json::de::IoRead<std::io::BufReader<std::fs::File>>>,
    ) -> Result<T, serde_json::Error>,
) -> Result<T, String> {
    let file = crate::sys::open_input(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
    let mut d = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, file));
    let value = read(&mut d).and_then(|v| d.end().map(|()| v));
    value.map_err(|e| {
        if e.is_io() {
            format!("{}: cannot read it ({e})", path.display())
        } else {
            format!("{}: not an anvil-serving.benchmark/v1 artifact ({e})", path.display())
        }
    })
}

/// The whole document: `request_timings` and `failures` handed on, everything else skipped.
struct Document<'a, F, E> {
    head: &'a Head,
    each: &'a mut F,
    failed: &'a mut Option<E>,
}

impl<'de, F, E> DeserializeSeed<'de> for Document<'_, F, E>
where
    F: FnMut(&Head, Read<'_>) -> Result<(), E>,
{
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F, E> Visitor<'de> for Document<'_, F, E>
where
    F: FnMut(&Head, Read<'_>) -> Result<(), E>,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an artifact (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Document { head, each, failed } = self;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "request_timings" => map.next_value_seed(List::<F, E, RequestTiming> {
                    head,
                    each: &mut *each,
                    failed: &mut *failed,
                    kind: std::marker::PhantomData,
                })?,
                "failures" => map.next_value_seed(List::<F, E, FailureRecord> {
                    head,
                    each: &mut *each,
                    failed: &mut *failed,
                    kind: std::marker::PhantomData,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// One list of records, each handed on as it is read.
struct List<'a, F, E, T> {
    head: &'a Head,
    each: &'a mut F,
    failed: &'a mut Option<E>,
    kind: std::marker::PhantomData<T>,
}

/// How a record of one list is handed on.
trait Hand: for<'de> serde::Deserialize<'de> {
    fn read(&self) -> Read<'_>;
}

impl Hand for RequestTiming {
    fn read(&self) -> Read<'_> {
        Read::Completed(self)
    }
}

impl Hand for FailureRecord {
    fn read(&self) -> Read<'_> {
        Read::Failed(self)
    }
}

impl<'de, F, E, T: Hand> DeserializeSeed<'de> for List<'_, F, E, T>
where
    F: FnMut(&Head, Read<'_>) -> Result<(), E>,
{
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F, E, T: Hand> Visitor<'de> for List<'_, F, E, T>
where
    F: FnMut(&Head, Read<'_>) -> Result<(), E>,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(record) = seq.next_element::<T>()? {
            if let Err(e) = (self.each)(self.head, record.read()) {
                *self.failed = Some(e);
                return Err(de::Error::custom("the export stopped"));
            }
        }
        Ok(())
    }
}
