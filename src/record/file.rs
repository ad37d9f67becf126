//! The per-request records file: one JSON object per line, appended and flushed as each request
//! ends, so a run killed with `kill -9` loses at most the requests in flight.
//!
//! Line types (`"type"`): `run` (the run's fixed description, first line), `level` (a load level
//! starts), `request` / `failure` / `dropped` (one per request, fields as in the artifact's
//! `request_timings`, `failures` and `dropped`, tagged with their `level`), `level_end` (the level
//! finished, with what the pacing knew). Artifacts stream their records from this file, and
//! `anvil-load summarize` rebuilds them from it alone.
//!
//! Writing happens on a dedicated thread, so disk latency never stalls the async runtime.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::timing::{DroppedRecord, FailureRecord, RequestTiming};
use super::{Issued, LevelPacing, RunInfo};

pub const RECORDS_SCHEMA: &str = "anvil-load.records/v1";

/// One line of the records file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RecordLine {
    Run {
        schema: String,
        info: Box<RunInfo>,
    },
    Level {
        level: String,
        pacing: LevelPacing,
        started_at_unix_ns: u64,
    },
    Request {
        level: String,
        #[serde(flatten)]
        record: Box<RequestTiming>,
    },
    Failure {
        level: String,
        #[serde(flatten)]
        record: Box<FailureRecord>,
    },
    Dropped {
        level: String,
        #[serde(flatten)]
        record: DroppedRecord,
    },
    LevelEnd {
        level: String,
        issued: Issued,
        finished_at_unix_ns: u64,
        interrupted: bool,
        simulator: Option<Value>,
    },
}

enum Message {
    Line(Vec<u8>),
    /// Everything sent before has reached the file.
    Sync(oneshot::Sender<()>),
}

/// The sending half; cheap to clone. Dropping the last clone ends the writer thread.
#[derive(Clone)]
pub struct RecordSink {
    tx: mpsc::Sender<Message>,
    path: PathBuf,
}

/// The writer thread; `finish` returns the first write error, if any.
pub struct RecordWriter {
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

/// Open (create or append to) `path` and start the writer thread.
pub fn open(path: &Path) -> std::io::Result<(RecordSink, RecordWriter)> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    // Bounded, and small: if the writer falls behind (a slow disk, or a client pinned to one
    // core with the runtime), the aggregator waits rather than a megabyte-sized backlog of
    // lines piling up in memory.
    let (tx, mut rx) = mpsc::channel::<Message>(1024);
    let thread = std::thread::Builder::new().name("anvil-records".into()).spawn(move || {
        crate::sys::lower_thread_priority();
        let mut out = BufWriter::with_capacity(64 * 1024, file);
        let mut first_error = None;
        let mut acks = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            // Everything already queued is written in one go, then flushed: under load that is
            // one system call for many lines; when idle, each line is flushed as it arrives. A
            // crash loses no line the writer has caught up with.
            let mut next = Some(first);
            while let Some(message) = next {
                match message {
                    Message::Line(line) => {
                        if let Err(e) = out.write_all(&line) {
                            first_error.get_or_insert(e);
                        }
                    }
                    Message::Sync(ack) => acks.push(ack),
                }
                next = rx.try_recv().ok();
            }
            if let Err(e) = out.flush() {
                first_error.get_or_insert(e);
            }
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
        }
        out.flush()?;
        first_error.map_or(Ok(()), Err)
    })?;
    Ok((RecordSink { tx, path: path.to_path_buf() }, RecordWriter { thread }))
}

impl RecordSink {
    pub async fn write(&self, line: &RecordLine) {
        // Records are plain data (strings, numbers, maps with string keys): serialising one cannot fail.
        let mut bytes = serde_json::to_vec(line).expect("a record line serialises to JSON");
        bytes.push(b'\n');
        // The writer only stops when every sink is gone, so a send cannot fail while we hold one.
        let _ = self.tx.send(Message::Line(bytes)).await;
    }

    /// Wait until every line written so far is in the file.
    pub async fn sync(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Message::Sync(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl RecordWriter {
    pub fn finish(self) -> std::io::Result<()> {
        self.thread.join().unwrap_or_else(|_| Err(std::io::Error::other("the records writer panicked")))
    }
}

/// Read a records file line by line. A final line cut short (the process was killed mid-write)
/// ends the iteration quietly; any other unreadable line is an error naming its number.
pub fn read(path: &Path) -> std::io::Result<impl Iterator<Item = Result<RecordLine, String>>> {
    let file = File::open(path)?;
    let mut lines = BufReader::new(file).lines().enumerate().peekable();
    Ok(std::iter::from_fn(move || {
        let (n, line) = lines.next()?;
        let line = match line {
            Ok(line) => line,
            Err(e) => return Some(Err(format!("line {}: {e}", n + 1))),
        };
        if line.trim().is_empty() {
            return Some(Err(format!("line {}: empty", n + 1)));
        }
        match serde_json::from_str::<RecordLine>(&line) {
            Ok(record) => Some(Ok(record)),
            Err(_) if lines.peek().is_none() => None,
            Err(e) => Some(Err(format!("line {}: {e}", n + 1))),
        }
    }))
}
