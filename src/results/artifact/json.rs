//! The artifact's JSON layout: pretty-printed like `serde_json::to_writer_pretty`, except that a
//! container inside an array goes on one line. Lists of records (`request_timings`, `failures`,
//! `warnings`, interval snapshots) then read one record per line, and the artifact of a long run
//! is a third of the size: pretty-printing every record's keys, and each `[value, count]` pair of
//! its gap sketch on four lines, tripled the bytes written at the end of each level and took
//! most of the time spent writing them.

//!
//! Records this process wrote to its records file are copied into the artifact as written
//! (`Verbatim`), without serde_json checking each as a `RawValue` again: that check was most of
//! the cost of writing an artifact (13,100 instructions of a request's 18,000). serde_json has
//! no unchecked raw value, so `to_writer` lends its formatter the record through a slot of this
//! thread: `Verbatim` puts its text there and serializes a marker, and the formatter writes the
//! slot's text where the marker would go. Serialized any other way, `Verbatim` is checked.

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::LazyLock;

use serde::ser::Error as _;
use serde::{Serialize, Serializer};
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use serde_json::value::RawValue;

thread_local! {
    /// The record text a `Verbatim` hands to the formatter; `Some` while `to_writer` writes.
    static SLOT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// What `Verbatim` serializes in `to_writer`: the formatter knows it by its address.
static MARKER: LazyLock<Box<RawValue>> =
    LazyLock::new(|| RawValue::from_string("\"verbatim record\"".to_owned()).expect("a JSON string"));

/// The JSON text of a record, as this process wrote it: copied into the artifact unchecked.
pub struct Verbatim(pub String);

impl Serialize for Verbatim {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lent = SLOT.with_borrow_mut(|slot| {
            slot.as_mut().map(|text| {
                text.clear();
                text.push_str(&self.0);
            })
        });
        match lent {
            Some(()) => MARKER.serialize(serializer),
            None => RawValue::from_string(self.0.clone()).map_err(S::Error::custom)?.serialize(serializer),
        }
    }
}

/// Pretty down to the records, compact within them.
#[derive(Default)]
pub struct RecordPerLine {
    pretty: PrettyFormatter<'static>,
    /// For each open pretty container: whether it is an array (whose container elements are
    /// then written compact).
    open: Vec<bool>,
    /// How deep the writer is inside a compact container (0: not inside one).
    compact: usize,
}

impl RecordPerLine {
    /// Opens a container: compact inside a compact one or as an element of a pretty array.
    fn begin<W: ?Sized + Write>(&mut self, w: &mut W, array: bool) -> io::Result<()> {
        if self.compact > 0 || self.open.last() == Some(&true) {
            self.compact += 1;
            return if array { CompactFormatter.begin_array(w) } else { CompactFormatter.begin_object(w) };
        }
        self.open.push(array);
        if array { self.pretty.begin_array(w) } else { self.pretty.begin_object(w) }
    }

    fn end<W: ?Sized + Write>(&mut self, w: &mut W, array: bool) -> io::Result<()> {
        if self.compact > 0 {
            self.compact -= 1;
            return if array { CompactFormatter.end_array(w) } else { CompactFormatter.end_object(w) };
        }
        self.open.pop();
        if array { self.pretty.end_array(w) } else { self.pretty.end_object(w) }
    }
}

impl Formatter for RecordPerLine {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.begin(w, true)
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.end(w, true)
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.begin(w, false)
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.end(w, false)
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.compact > 0 {
            CompactFormatter.begin_array_value(w, first)
        } else {
            self.pretty.begin_array_value(w, first)
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 { CompactFormatter.end_array_value(w) } else { self.pretty.end_array_value(w) }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.compact > 0 {
            CompactFormatter.begin_object_key(w, first)
        } else {
            self.pretty.begin_object_key(w, first)
        }
    }

    fn end_object_key<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 { CompactFormatter.end_object_key(w) } else { self.pretty.end_object_key(w) }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 { CompactFormatter.begin_object_value(w) } else { self.pretty.begin_object_value(w) }
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 { CompactFormatter.end_object_value(w) } else { self.pretty.end_object_value(w) }
    }

    fn write_raw_fragment<W: ?Sized + Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        if std::ptr::eq(fragment, MARKER.get()) {
            return SLOT.with_borrow(|slot| w.write_all(slot.as_deref().unwrap_or(fragment).as_bytes()));
        }
        w.write_all(fragment.as_bytes())
    }
}

/// Write `value` to `w` in this layout.
pub fn to_writer<W: Write, T: ?Sized + serde::Serialize>(w: W, value: &T) -> serde_json::Result<()> {
    /// Puts the slot back as it was, also when serializing panics.
    struct Lent(Option<String>);
    impl Drop for Lent {
        fn drop(&mut self) {
            SLOT.set(self.0.take());
        }
    }
    let _lent = Lent(SLOT.replace(Some(String::new())));
    let mut serializer = serde_json::Serializer::with_formatter(w, RecordPerLine::default());
    value.serialize(&mut serializer)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// `Value` keeps its keys sorted.
    fn layout(value: &Value) -> String {
        let mut out = Vec::new();
        super::to_writer(&mut out, value).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn records_in_a_list_go_one_per_line() {
        let value = json!({
            "schema": "s",
            "metrics": {"ttft_ms": {"p50": 1.5, "samples": [1, 2]}},
            "request_timings": [
                {"request_index": 0, "chunk_gaps_us": [[1, 2], [3, 4]], "canary": {"passed": true}},
                {"request_index": 1, "chunk_gaps_us": [], "canary": null}
            ],
            "empty": [],
            "nothing": {},
            "scalars": [1, "two"],
            "lists": [[1, [2]], {}]
        });
        let text = layout(&value);
        assert_eq!(
            text,
            r#"{
  "empty": [],
  "lists": [
    [1,[2]],
    {}
  ],
  "metrics": {
    "ttft_ms": {
      "p50": 1.5,
      "samples": [
        1,
        2
      ]
    }
  },
  "nothing": {},
  "request_timings": [
    {"canary":{"passed":true},"chunk_gaps_us":[[1,2],[3,4]],"request_index":0},
    {"canary":null,"chunk_gaps_us":[],"request_index":1}
  ],
  "scalars": [
    1,
    "two"
  ],
  "schema": "s"
}"#
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    }

    #[test]
    fn verbatim_records_are_written_as_given_and_checked_elsewhere() {
        use super::Verbatim;
        let records = [r#"{"a":1,"b":[2,{"c":"d"}]}"#, r#"{"e":null}"#];
        let verbatim = json!({"request_timings": records.map(|r| serde_json::from_str::<Value>(r).unwrap())});
        let mut out = Vec::new();
        let list: Vec<Verbatim> = records.iter().map(|r| Verbatim((*r).to_owned())).collect();
        #[derive(serde::Serialize)]
        struct Artifact<'a> {
            request_timings: &'a [Verbatim],
        }
        super::to_writer(&mut out, &Artifact { request_timings: &list }).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, layout(&verbatim));
        assert!(text.contains(records[0]) && text.contains(records[1]), "{text}");
        // Anywhere else, the text is checked as JSON.
        assert_eq!(serde_json::to_string(&list[1]).unwrap(), records[1]);
        assert!(serde_json::to_string(&Verbatim("{\"a\":".to_owned())).is_err());
        // The slot is lent only while `to_writer` writes.
        assert!(super::SLOT.with_borrow(Option::is_none));
    }

    #[test]
    fn a_top_level_list_is_one_record_per_line() {
        assert_eq!(layout(&json!([{"a": 1}, {"b": [2]}])), "[\n  {\"a\":1},\n  {\"b\":[2]}\n]");
        assert_eq!(layout(&json!("x")), "\"x\"");
    }
}
