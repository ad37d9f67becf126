//! `anvil-load export INPUT --format parquet|csv --out FILE`: a run's per-request records as one
//! table where analysts work (pandas, polars, DuckDB, a spreadsheet): one row per request,
//! completed or failed, with the typed columns of `columns`.
//!
//! INPUT is a level's artifact or a records file, told apart by their content. A records file
//! is read line by line through its one checked reader (`record::file::read_checked`) and each
//! row is written as it is read, so memory stays one row group whatever the length of the run;
//! an artifact holds one level and is read whole. The table is written to a temporary file
//! beside `--out` and renamed over it once complete, so a reader never sees half a table.
//! Nothing of a prompt, a key, a header value or a URL's credentials is in a record, so nothing
//! of them can reach the table.

mod artifact;
pub mod columns;
pub mod csv;
pub mod parquet;

use std::io::{BufRead, BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};

use columns::{Record, Row};

use crate::request::record::file::{self as records, RecordLine};
use crate::results::artifact as contract_artifact;

/// The table's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Apache Parquet: typed columns, zstd-compressed (about 1/10 of the JSON).
    Parquet,
    /// RFC 4180 CSV with a header row; lists as JSON text.
    Csv,
}

impl Format {
    /// The format a file name's extension says (`.parquet`, `.pq`, `.csv`).
    pub fn from_extension(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv => "csv",
        }
    }
}

/// Why an export stopped.
#[derive(Debug)]
pub enum ExportError {
    /// The input or the options are wrong: nothing was written.
    BadInput(String),
    /// Writing the table failed.
    Io(String),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::BadInput(m) | ExportError::Io(m) => f.write_str(m),
        }
    }
}

/// What an export wrote.
#[derive(Debug)]
pub struct Exported {
    pub path: PathBuf,
    pub format: Format,
    /// Rows written: completed and failed requests.
    pub rows: u64,
    /// Levels they came from.
    pub levels: usize,
    /// The file's size.
    pub bytes: u64,
    /// What the reading found that did not stop it (a records file's last line cut short,
    /// levels that do not hold all they wrote).
    pub notes: Vec<String>,
}

/// What INPUT is.
enum Input {
    Artifact,
    Records,
}

/// Export `input` to `out`, in `format` or the one `out`'s extension names.
pub fn export(input: &Path, format: Option<Format>, out: &Path) -> Result<Exported, ExportError> {
    let format = match format.or_else(|| Format::from_extension(out)) {
        Some(f) => f,
        None => {
            return Err(ExportError::BadInput(format!(
                "--out {}: its extension names no format; give --format parquet or --format csv, or name the file *.parquet or *.csv",
                out.display()
            )));
        }
    };
    let kind = detect(input)?;
    let mut target = Target::create(out, format)?;
    let mut levels = 0;
    let mut notes = Vec::new();
    match kind {
        Input::Artifact => {
            let read = artifact::for_each_record(input, |head, record| {
                let record = match record {
                    artifact::Read::Completed(t) => Record::Completed(t),
                    artifact::Read::Failed(f) => Record::Failed(f),
                };
                target.push(&Row { level: &head.run_id, level_started_ns: head.started_at_unix_ns, record })
            });
            match read {
                Ok(_) => levels = 1,
                Err(Ok(e)) => return Err(e),
                Err(Err(e)) => {
                    return Err(ExportError::BadInput(format!(
                        "{e}; give a level's artifact (<run_id>.json) or a records file"
                    )));
                }
            }
        }
        Input::Records => {
            let mut lines = records::read_checked(input).map_err(|e| cannot_read(input, &e))?;
            // Each level's start, as its level line said.
            let mut started: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
            for line in &mut lines {
                let line = line.map_err(|e| ExportError::BadInput(format!("{}: {e}", input.display())))?;
                let (level, record) = match &line {
                    RecordLine::Level { level, started_at_unix_ns, .. } => {
                        started.insert(level.clone(), *started_at_unix_ns);
                        levels += 1;
                        continue;
                    }
                    RecordLine::Request { level, record } => (level, Record::Completed(record)),
                    RecordLine::Failure { level, record } => (level, Record::Failed(record)),
                    _ => continue,
                };
                // The checked reader refuses a record of a level no level line started.
                let level_started_ns = started.get(level).copied().unwrap_or_default();
                target.push(&Row { level, level_started_ns, record })?;
            }
            let verdict = lines.finish();
            if let Some(n) = verdict.cut_line {
                notes.push(format!(
                    "{}: line {n}, the last, was cut short (the run was killed while writing it); it is left out",
                    input.display()
                ));
            }
            for (level, problem) in &verdict.incomplete {
                notes.push(format!(
                    "{}: level {level} does not hold what the run wrote ({problem}); its rows are what is left",
                    input.display()
                ));
            }
        }
    }
    let (rows, bytes) = target.finish()?;
    Ok(Exported { path: out.to_path_buf(), format, rows, levels, bytes, notes })
}

/// `run.records_format = "parquet"`: the run's records file as one Parquet table in `out_dir`,
/// named after the records file (`<name>.records.parquet` for `<name>.records.ndjson`, so each
/// shard's is its own), else `<run_id>.records.parquet`.
pub fn records_table(records: &Path, out_dir: &Path, run_id: &str) -> Result<Exported, ExportError> {
    let name = records.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".records.ndjson"));
    let name = format!("{}.records.parquet", name.filter(|n| !n.starts_with('.')).unwrap_or(run_id));
    export(records, Some(Format::Parquet), &out_dir.join(name))
}

fn cannot_read(input: &Path, e: &std::io::Error) -> ExportError {
    ExportError::BadInput(format!(
        "{}: cannot read it ({e}); give a level's artifact (<run_id>.json) or a records file (--records)",
        input.display()
    ))
}

/// Tell an artifact from a records file by its first line: a records file's is its `run` line.
fn detect(input: &Path) -> Result<Input, ExportError> {
    let file = crate::sys::open_input(input).map_err(|e| cannot_read(input, &e))?;
    let mut first = Vec::new();
    // The run line holds the scenario; a megabyte is far more than any real one.
    BufReader::new(file.take(1 << 20)).read_until(b'\n', &mut first).map_err(|e| cannot_read(input, &e))?;
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "type")]
        kind: Option<String>,
        schema: Option<String>,
    }
    match serde_json::from_slice::<Head>(first.trim_ascii()) {
        Ok(Head { kind: Some(k), schema: Some(s) }) if k == "run" && s == records::RECORDS_SCHEMA => Ok(Input::Records),
        Ok(Head { kind: Some(k), schema }) if k == "run" => Err(ExportError::BadInput(format!(
            "{}: a records file of schema {}, which this anvil-load does not read ({}); export it with the anvil-load that wrote it",
            input.display(),
            schema.unwrap_or_else(|| "(none)".into()),
            records::RECORDS_SCHEMA
        ))),
        // A pretty-printed artifact's first line is `{`; `ArtifactFile::read` says what else is
        // wrong with it.
        _ if first.trim_ascii() == b"{" => Ok(Input::Artifact),
        _ => Err(ExportError::BadInput(format!(
            "{}: neither an artifact ({}) nor a records file ({}); give a level's artifact (<run_id>.json) or a file written with --records",
            input.display(),
            contract_artifact::SCHEMA,
            records::RECORDS_SCHEMA
        ))),
    }
}

/// The table being written, into a temporary file beside `--out`.
struct Target {
    out: PathBuf,
    sink: Sink,
    rows: u64,
}

enum Sink {
    Parquet(parquet::ParquetSink<BufWriter<tempfile::NamedTempFile>>),
    Csv(csv::CsvSink<BufWriter<tempfile::NamedTempFile>>),
}

impl Target {
    fn create(out: &Path, format: Format) -> Result<Target, ExportError> {
        let refused = |why: String| {
            ExportError::BadInput(format!("--out {}: {why}; give the path of a new or a regular file", out.display()))
        };
        if contract_artifact::output::is_stdout(out) {
            return Err(refused("a table is written to a file, not standard output".into()));
        }
        match std::fs::metadata(out) {
            Ok(m) if !m.is_file() => return Err(refused("it exists and is not a regular file".into())),
            _ => {}
        }
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // tempfile creates 0600; asked for 0666 the kernel applies the umask, as for every other
        // file the tool creates.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = builder.tempfile_in(dir).map_err(|e| refused(format!("cannot write there ({e})")))?;
        let w = BufWriter::with_capacity(1 << 16, tmp);
        let sink = match format {
            Format::Parquet => Sink::Parquet(parquet::ParquetSink::new(w).map_err(|e| write_failed(out, &e))?),
            Format::Csv => Sink::Csv(csv::CsvSink::new(w).map_err(|e| write_failed(out, &e))?),
        };
        Ok(Target { out: out.to_path_buf(), sink, rows: 0 })
    }

    fn push(&mut self, row: &Row) -> Result<(), ExportError> {
        match &mut self.sink {
            Sink::Parquet(s) => s.push(row).map_err(|e| write_failed(&self.out, &e))?,
            Sink::Csv(s) => s.push(row).map_err(|e| write_failed(&self.out, &e))?,
        }
        self.rows += 1;
        Ok(())
    }

    /// Complete the file and rename it over `--out`: rows and bytes written.
    fn finish(self) -> Result<(u64, u64), ExportError> {
        let out = &self.out;
        let w = match self.sink {
            Sink::Parquet(s) => s.finish().map_err(|e| write_failed(out, &e))?,
            Sink::Csv(s) => s.finish().map_err(|e| write_failed(out, &e))?,
        };
        let tmp = w.into_inner().map_err(|e| write_failed(out, e.error()))?;
        tmp.as_file().sync_all().map_err(|e| write_failed(out, &e))?;
        let bytes = tmp.as_file().metadata().map_err(|e| write_failed(out, &e))?.len();
        tmp.persist(out).map_err(|e| write_failed(out, &e.error))?;
        Ok((self.rows, bytes))
    }
}

fn write_failed(out: &Path, e: &dyn std::fmt::Display) -> ExportError {
    ExportError::Io(format!("cannot write {}: {e}", out.display()))
}

/// Rows of a records file or an artifact written to a sink in memory, for benchmarks and tests:
/// the bytes of `rows` in `format`.
pub fn to_bytes<'a>(format: Format, rows: impl IntoIterator<Item = Row<'a>>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match format {
        Format::Parquet => {
            let mut sink = parquet::ParquetSink::new(&mut out).map_err(|e| e.to_string())?;
            for row in rows {
                sink.push(&row).map_err(|e| e.to_string())?;
            }
            sink.finish().map_err(|e| e.to_string())?;
        }
        Format::Csv => {
            let mut sink = csv::CsvSink::new(&mut out).map_err(|e| e.to_string())?;
            for row in rows {
                sink.push(&row).map_err(|e| e.to_string())?;
            }
            sink.finish().map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}
