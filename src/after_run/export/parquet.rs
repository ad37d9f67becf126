//! Rows → Apache Parquet, with the `parquet` crate's column writers (no Arrow): every column of
//! `columns` as an optional leaf (unsigned integers annotated `INTEGER(n,false)`, text as
//! `STRING`, instants as `TIMESTAMP(NANOS,true)`), lists in the three-level `LIST` layout the
//! format specifies, dictionary encoding on, zstd pages.
//!
//! Rows are buffered per column and written as a row group every `ROW_GROUP_ROWS` rows, so the
//! memory a file of any length needs is one row group's values.
//!
//! The format: <https://parquet.apache.org/docs/file-format/> and its logical types and lists:
//! <https://github.com/apache/parquet-format/blob/master/LogicalTypes.md>.

use std::io::Write;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

use super::columns::{COLUMNS, Column, Get, Row};

/// Rows per row group: large enough for pages that compress, small enough that a row group's
/// buffered values stay a few tens of megabytes.
pub const ROW_GROUP_ROWS: usize = 32 * 1024;

/// The Parquet schema of `COLUMNS`, in the parser's message syntax.
pub fn message_type() -> String {
    let mut m = String::from("message anvil_request {\n");
    for c in COLUMNS {
        let name = c.name;
        let line = match c.get {
            Get::Str(_) => format!("  optional binary {name} (STRING);\n"),
            Get::U32(_) => format!("  optional int32 {name} (INTEGER(32,false));\n"),
            Get::U64(_) => format!("  optional int64 {name} (INTEGER(64,false));\n"),
            Get::F64(_) => format!("  optional double {name};\n"),
            Get::Bool(_) => format!("  optional boolean {name};\n"),
            Get::Timestamp(_) => format!("  optional int64 {name} (TIMESTAMP(NANOS,true));\n"),
            Get::StrList(_) => format!(
                "  optional group {name} (LIST) {{\n    repeated group list {{\n      required binary element (STRING);\n    }}\n  }}\n"
            ),
            Get::Gaps(_) => format!(
                "  optional group {name} (LIST) {{\n    repeated group list {{\n      required group element {{\n        required int64 value_us (INTEGER(64,false));\n        required int32 count (INTEGER(32,false));\n      }}\n    }}\n  }}\n"
            ),
        };
        m.push_str(&line);
    }
    m.push('}');
    m
}

/// One column's buffered values and levels. Definition levels: 0 null, 1 present (scalars);
/// 0 null, 1 empty, 2 an element (lists). Repetition levels (lists): 0 a row's first element,
/// 1 the next ones.
enum Buffer {
    Bytes { values: Vec<ByteArray>, defs: Vec<i16> },
    I32 { values: Vec<i32>, defs: Vec<i16> },
    I64 { values: Vec<i64>, defs: Vec<i16> },
    F64 { values: Vec<f64>, defs: Vec<i16> },
    Bool { values: Vec<bool>, defs: Vec<i16> },
    Words { values: Vec<ByteArray>, defs: Vec<i16>, reps: Vec<i16> },
    Gaps { values: Vec<i64>, counts: Vec<i32>, defs: Vec<i16>, reps: Vec<i16> },
}

impl Buffer {
    fn for_column(c: &Column) -> Buffer {
        let (values, defs) = (Vec::new(), Vec::new());
        match c.get {
            Get::Str(_) => Buffer::Bytes { values, defs },
            Get::U32(_) => Buffer::I32 { values: Vec::new(), defs },
            Get::U64(_) | Get::Timestamp(_) => Buffer::I64 { values: Vec::new(), defs },
            Get::F64(_) => Buffer::F64 { values: Vec::new(), defs },
            Get::Bool(_) => Buffer::Bool { values: Vec::new(), defs },
            Get::StrList(_) => Buffer::Words { values, defs, reps: Vec::new() },
            Get::Gaps(_) => Buffer::Gaps { values: Vec::new(), counts: Vec::new(), defs, reps: Vec::new() },
        }
    }

    fn push(&mut self, get: &Get, row: &Row) {
        fn scalar<T>(values: &mut Vec<T>, defs: &mut Vec<i16>, v: Option<T>) {
            match v {
                Some(v) => {
                    values.push(v);
                    defs.push(1);
                }
                None => defs.push(0),
            }
        }
        // Unsigned values are stored in the signed physical type, bit for bit, as the
        // `INTEGER(n,false)` annotation says.
        match (self, get) {
            (Buffer::Bytes { values, defs }, Get::Str(f)) => {
                scalar(values, defs, f(row).map(|s| ByteArray::from(s.as_bytes().to_vec())))
            }
            (Buffer::I32 { values, defs }, Get::U32(f)) => scalar(values, defs, f(row).map(|v| v as i32)),
            (Buffer::I64 { values, defs }, Get::U64(f) | Get::Timestamp(f)) => {
                scalar(values, defs, f(row).map(|v| v as i64))
            }
            (Buffer::F64 { values, defs }, Get::F64(f)) => scalar(values, defs, f(row)),
            (Buffer::Bool { values, defs }, Get::Bool(f)) => scalar(values, defs, f(row)),
            (Buffer::Words { values, defs, reps }, Get::StrList(f)) => match f(row) {
                None => {
                    defs.push(0);
                    reps.push(0);
                }
                Some(words) if words.is_empty() => {
                    defs.push(1);
                    reps.push(0);
                }
                Some(words) => {
                    for (i, w) in words.iter().enumerate() {
                        values.push(ByteArray::from(w.as_bytes().to_vec()));
                        defs.push(2);
                        reps.push(i16::from(i > 0));
                    }
                }
            },
            (Buffer::Gaps { values, counts, defs, reps }, Get::Gaps(f)) => match f(row) {
                None => {
                    defs.push(0);
                    reps.push(0);
                }
                Some(sketch) if sketch.0.is_empty() => {
                    defs.push(1);
                    reps.push(0);
                }
                Some(sketch) => {
                    for (i, &(v, c)) in sketch.0.iter().enumerate() {
                        values.push(v as i64);
                        counts.push(c as i32);
                        defs.push(2);
                        reps.push(i16::from(i > 0));
                    }
                }
            },
            // `for_column` made the buffer from the same `Get`.
            _ => unreachable!("a column's buffer is made for its type"),
        }
    }

    fn clear(&mut self) {
        match self {
            Buffer::Bytes { values, defs } | Buffer::Words { values, defs, .. } => {
                values.clear();
                defs.clear();
            }
            Buffer::I32 { values, defs } => {
                values.clear();
                defs.clear();
            }
            Buffer::I64 { values, defs } => {
                values.clear();
                defs.clear();
            }
            Buffer::F64 { values, defs } => {
                values.clear();
                defs.clear();
            }
            Buffer::Bool { values, defs } => {
                values.clear();
                defs.clear();
            }
            Buffer::Gaps { values, counts, defs, .. } => {
                values.clear();
                counts.clear();
                defs.clear();
            }
        }
        if let Buffer::Words { reps, .. } | Buffer::Gaps { reps, .. } = self {
            reps.clear();
        }
    }
}

/// A Parquet file being written.
pub struct ParquetSink<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    buffers: Vec<Buffer>,
    rows: usize,
}

impl<W: Write + Send> ParquetSink<W> {
    pub fn new(out: W) -> Result<Self, ParquetError> {
        let schema = Arc::new(parse_message_type(&message_type())?);
        let mut props = WriterProperties::builder()
            .set_writer_version(WriterVersion::PARQUET_1_0)
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
            .set_dictionary_enabled(true)
            // Minimum and maximum per column chunk (what readers prune row groups by), not per
            // page as well: a second set of comparisons on every value for nothing a query of
            // these files uses.
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_created_by(format!("anvil-load {}", env!("CARGO_PKG_VERSION")));
        // Timings, rates and instants almost never repeat: hashing each into a dictionary that
        // is then abandoned for plain encoding is time spent for no bytes saved. Text, counts
        // and flags repeat and keep theirs.
        for c in COLUMNS {
            match c.get {
                Get::F64(_) | Get::Timestamp(_) => {
                    props = props.set_column_dictionary_enabled(ColumnPath::from(c.name), false);
                }
                Get::Gaps(_) => {
                    for leaf in ["value_us", "count"] {
                        let path = ColumnPath::new(vec![c.name.into(), "list".into(), "element".into(), leaf.into()]);
                        props = props.set_column_dictionary_enabled(path, false);
                    }
                }
                _ => {}
            }
        }
        let props = props.build();
        let writer = SerializedFileWriter::new(out, schema, Arc::new(props))?;
        Ok(ParquetSink { writer, buffers: COLUMNS.iter().map(Buffer::for_column).collect(), rows: 0 })
    }

    pub fn push(&mut self, row: &Row) -> Result<(), ParquetError> {
        for (buffer, column) in self.buffers.iter_mut().zip(COLUMNS) {
            buffer.push(&column.get, row);
        }
        self.rows += 1;
        if self.rows == ROW_GROUP_ROWS {
            self.flush_row_group()?;
        }
        Ok(())
    }

    fn flush_row_group(&mut self) -> Result<(), ParquetError> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        for buffer in &mut self.buffers {
            // A gap sketch is two leaf columns with the same levels.
            let leaves = if matches!(buffer, Buffer::Gaps { .. }) { 2 } else { 1 };
            for leaf in 0..leaves {
                let Some(mut column) = group.next_column()? else {
                    return Err(ParquetError::General("the schema has fewer leaf columns than the table".into()));
                };
                match &*buffer {
                    Buffer::Bytes { values, defs } => {
                        column.typed::<ByteArrayType>().write_batch(values, Some(defs), None)?;
                    }
                    Buffer::I32 { values, defs } => {
                        column.typed::<Int32Type>().write_batch(values, Some(defs), None)?;
                    }
                    Buffer::I64 { values, defs } => {
                        column.typed::<Int64Type>().write_batch(values, Some(defs), None)?;
                    }
                    Buffer::F64 { values, defs } => {
                        column.typed::<DoubleType>().write_batch(values, Some(defs), None)?;
                    }
                    Buffer::Bool { values, defs } => {
                        column.typed::<BoolType>().write_batch(values, Some(defs), None)?;
                    }
                    Buffer::Words { values, defs, reps } => {
                        column.typed::<ByteArrayType>().write_batch(values, Some(defs), Some(reps))?;
                    }
                    Buffer::Gaps { values, counts, defs, reps } => {
                        if leaf == 0 {
                            column.typed::<Int64Type>().write_batch(values, Some(defs), Some(reps))?;
                        } else {
                            column.typed::<Int32Type>().write_batch(counts, Some(defs), Some(reps))?;
                        }
                    }
                }
                column.close()?;
            }
            buffer.clear();
        }
        group.close()?;
        self.rows = 0;
        Ok(())
    }

    /// Write the last row group and the footer; the writer, flushed.
    pub fn finish(mut self) -> Result<W, ParquetError> {
        self.flush_row_group()?;
        let mut out = self.writer.into_inner()?;
        out.flush()?;
        Ok(out)
    }
}
