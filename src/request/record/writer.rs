//! The records writer: one thread that appends every line to the records file as requests end.
//!
//! Everything already queued is written with one system call; under load that is many lines per
//! call, when idle each line goes out as it arrives, so a crash loses no line the writer has
//! caught up with. A write that fails (a disk that fills for a few seconds) loses nothing: the
//! unwritten bytes stay in memory, in order, and are retried every `RETRY_EVERY` while new lines
//! keep arriving. A file that stays unwritable for `stuck_after` makes the writer say so and
//! cancel the token it was given (the run stops issuing), and answers every `sync` with the
//! error: a run never builds an artifact from a records file that lacks lines it holds in memory.
//!
//! The thread also tallies each level's record lines in the order they go to the file (see
//! `integrity`) and fills the tally into the level's end line, which it serializes itself: the
//! tally is of the bytes written, in the order written, whichever task sent them.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::file::{RecordLine, prepare_for_append};
use super::integrity::{Kind, Tally};

/// The buffer a records line is serialized into starts this large.
const LINE_CAPACITY: usize = 2048;
/// How often a failing write is retried.
const RETRY_EVERY: Duration = Duration::from_millis(50);
/// How long a failing records file is retried before the run is stopped.
pub const STUCK_AFTER: Duration = Duration::from_secs(10);

enum Message {
    /// A serialized line and what it means for the tallies.
    Line(Vec<u8>, Tallied),
    /// A level's end, completed with the level's tally and serialized on the thread.
    End(Box<RecordLine>),
    /// Everything sent before has reached the file (or the file is stuck: the error).
    Sync(oneshot::Sender<Result<(), String>>),
}

/// What a line means for the level tallies.
enum Tallied {
    /// A run starts: its levels are numbered from 0.
    Run,
    /// A level starts: its tally starts from zero.
    Opens(String),
    /// One record line of a level.
    Record(String, Kind),
}

/// The writer thread's tallies: the open levels', and how many levels the current run started.
#[derive(Default)]
struct Tallies {
    levels: HashMap<String, Tally>,
    in_run: u64,
}

/// The sending half; cheap to clone. Dropping the last clone ends the writer thread.
#[derive(Clone)]
pub struct RecordSink {
    tx: mpsc::Sender<Message>,
    path: Arc<PathBuf>,
}

/// The writer thread; `finish` waits for it and says whether every line reached the file.
pub struct RecordWriter {
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

/// Open `path` for appending (refusing a file that is not a records file, see
/// `prepare_for_append`) and start the writer; with `new_file`, the file must not exist yet (a
/// temporary records file). Never through a link planted at the path. `on_stuck` is cancelled
/// when the file has been unwritable for `STUCK_AFTER`.
pub fn open(path: &Path, new_file: bool, on_stuck: CancellationToken) -> std::io::Result<(RecordSink, RecordWriter)> {
    let mut options = std::fs::OpenOptions::new();
    if new_file {
        options.create_new(true);
    } else {
        prepare_for_append(path)?;
        options.create(true);
    }
    let file = crate::sys::no_follow(options.append(true)).open(path)?;
    start(Box::new(file), path, on_stuck, STUCK_AFTER)
}

/// Start the writer on any byte sink (tests inject failing ones).
pub fn start(
    mut out: Box<dyn Write + Send>,
    path: &Path,
    on_stuck: CancellationToken,
    stuck_after: Duration,
) -> std::io::Result<(RecordSink, RecordWriter)> {
    // Bounded, and small: when the thread is busy the aggregator waits rather than a large
    // backlog of messages piling up; lines the file refuses are kept by the thread instead.
    let (tx, mut rx) = mpsc::channel::<Message>(1024);
    let shown = path.display().to_string();
    let thread = std::thread::Builder::new().name("anvil-records".into()).spawn(move || {
        crate::sys::lower_thread_priority();
        let mut pending: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut acks: Vec<oneshot::Sender<Result<(), String>>> = Vec::new();
        let mut tallies = Tallies::default();
        let mut open = true;
        let mut failing: Option<(Instant, std::io::Error)> = None;
        loop {
            if open && pending.is_empty() {
                match rx.blocking_recv() {
                    Some(m) => take(m, &mut pending, &mut acks, &mut tallies),
                    None => open = false,
                }
            }
            while open {
                match rx.try_recv() {
                    Ok(m) => take(m, &mut pending, &mut acks, &mut tallies),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            while !pending.is_empty() {
                match out.write(&pending) {
                    Ok(0) => {
                        let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                        failing.get_or_insert((Instant::now(), e));
                        break;
                    }
                    Ok(n) => {
                        pending.drain(..n);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failing.get_or_insert((Instant::now(), e));
                        break;
                    }
                }
            }
            if pending.is_empty() {
                if let Some((since, e)) = failing.take() {
                    if since.elapsed() >= RETRY_EVERY {
                        eprintln!(
                            "note: the records file {shown} is writable again after {:.1} s ({e}); nothing was lost",
                            since.elapsed().as_secs_f64()
                        );
                    }
                }
                for ack in acks.drain(..) {
                    let _ = ack.send(Ok(()));
                }
                let _ = out.flush();
                if !open {
                    return Ok(());
                }
                continue;
            }
            if let Some((since, e)) = &failing {
                if since.elapsed() >= stuck_after {
                    let problem = format!(
                        "cannot write the records file {shown} ({e}) for {:.0} s; {} bytes of records are not in it",
                        since.elapsed().as_secs_f64(),
                        pending.len()
                    );
                    if !on_stuck.is_cancelled() {
                        eprintln!("error: {problem}; stopping the run (no new requests)");
                        on_stuck.cancel();
                    }
                    for ack in acks.drain(..) {
                        let _ = ack.send(Err(problem.clone()));
                    }
                    if !open {
                        return Err(std::io::Error::other(problem));
                    }
                }
            }
            std::thread::sleep(RETRY_EVERY);
        }
    })?;
    Ok((RecordSink { tx, path: Arc::new(path.to_path_buf()) }, RecordWriter { thread }))
}

fn take(m: Message, pending: &mut Vec<u8>, acks: &mut Vec<oneshot::Sender<Result<(), String>>>, tallies: &mut Tallies) {
    match m {
        Message::Line(line, tallied) => {
            match tallied {
                Tallied::Run => tallies.in_run = 0,
                Tallied::Opens(level) => {
                    tallies.levels.insert(level, Tally::new(tallies.in_run));
                    tallies.in_run += 1;
                }
                Tallied::Record(level, kind) => {
                    // Without its line end, as a reader sees the line.
                    let bytes = line.strip_suffix(b"\n").unwrap_or(&line);
                    tallies.levels.entry(level).or_default().add(kind, bytes);
                }
            }
            pending.extend_from_slice(&line);
        }
        Message::End(mut line) => {
            if let RecordLine::LevelEnd { level, written, .. } = &mut *line {
                *written = Some(tallies.levels.remove(level.as_str()).unwrap_or_default().written());
            }
            serialize_line(pending, &line);
        }
        Message::Sync(ack) => acks.push(ack),
    }
}

/// `line` as JSON and its line end, appended to `out`.
fn serialize_line(out: &mut Vec<u8>, line: &RecordLine) {
    // Records are plain data (strings, numbers, maps with string keys): serialising one cannot
    // fail.
    serde_json::to_writer(&mut *out, line).expect("a record line serialises to JSON");
    out.push(b'\n');
}

impl RecordSink {
    pub async fn write(&self, line: &RecordLine) {
        let tallied = match line {
            RecordLine::LevelEnd { .. } => {
                // The writer thread completes it with the level's tally.
                let _ = self.tx.send(Message::End(Box::new(line.clone()))).await;
                return;
            }
            RecordLine::Level { level, .. } => Tallied::Opens(level.clone()),
            RecordLine::Request { level, .. } => Tallied::Record(level.clone(), Kind::Request),
            RecordLine::Failure { level, .. } => Tallied::Record(level.clone(), Kind::Failure),
            RecordLine::Dropped { level, .. } => Tallied::Record(level.clone(), Kind::Dropped),
            RecordLine::Run { .. } => Tallied::Run,
        };
        // Sized for a typical line (1–2 KB) up front: grown from serde_json's default, the
        // buffer was copied four or five times per line.
        let mut bytes = Vec::with_capacity(LINE_CAPACITY);
        serialize_line(&mut bytes, line);
        // The writer only stops when every sink is gone, so a send cannot fail while we hold one.
        let _ = self.tx.send(Message::Line(bytes, tallied)).await;
    }

    /// Wait until every line written so far is in the file; the error when the file is stuck.
    pub async fn sync(&self) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Message::Sync(ack)).await.is_err() {
            return Err("the records writer stopped".into());
        }
        done.await.unwrap_or_else(|_| Err("the records writer stopped".into()))
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A sink that refuses writes while `full` is set, like a disk with no space.
    #[derive(Clone, Default)]
    struct Disk {
        bytes: Arc<Mutex<Vec<u8>>>,
        full: Arc<AtomicBool>,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.full.load(Ordering::SeqCst) {
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"));
            }
            // Half at a time, so lines are split across writes as on a real file system.
            let n = buf.len().div_ceil(2);
            self.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(i: u64) -> RecordLine {
        RecordLine::Dropped {
            level: "l".into(),
            record: crate::request::record::DroppedRecord {
                request_index: i,
                planned_context_tokens: 1,
                intended_offset_ms: 0.0,
            },
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_disk_full_for_a_while_loses_no_line_and_keeps_their_order() {
        let disk = Disk::default();
        let stuck = CancellationToken::new();
        let (sink, writer) =
            start(Box::new(disk.clone()), Path::new("t"), stuck.clone(), Duration::from_secs(30)).unwrap();
        for i in 0..100 {
            sink.write(&line(i)).await;
        }
        sink.sync().await.unwrap();
        disk.full.store(true, Ordering::SeqCst);
        for i in 100..3000 {
            sink.write(&line(i)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        disk.full.store(false, Ordering::SeqCst);
        sink.sync().await.unwrap();
        drop(sink);
        writer.finish().unwrap();
        assert!(!stuck.is_cancelled());
        let bytes = disk.bytes.lock().unwrap().clone();
        let text = String::from_utf8(bytes).unwrap();
        let indices: Vec<u64> = text
            .lines()
            .map(|l| match serde_json::from_str::<RecordLine>(l).unwrap() {
                RecordLine::Dropped { record, .. } => record.request_index,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(indices, (0..3000).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_disk_that_stays_full_stops_the_run_and_fails_every_sync() {
        let disk = Disk::default();
        disk.full.store(true, Ordering::SeqCst);
        let stuck = CancellationToken::new();
        let (sink, writer) =
            start(Box::new(disk.clone()), Path::new("t"), stuck.clone(), Duration::from_millis(200)).unwrap();
        sink.write(&line(0)).await;
        let err = sink.sync().await.unwrap_err();
        assert!(err.contains("No space left on device"), "{err}");
        assert!(stuck.is_cancelled());
        drop(sink);
        let err = writer.finish().unwrap_err();
        assert!(err.to_string().contains("bytes of records are not in it"), "{err}");
    }

    #[test]
    fn appending_refuses_a_foreign_file_and_drops_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let foreign = dir.path().join("notes.txt");
        std::fs::write(&foreign, "my notes\n").unwrap();
        let e = prepare_for_append(&foreign).unwrap_err();
        assert!(e.to_string().contains("not an anvil-load records file"), "{e}");
        assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "my notes\n");

        let ours = dir.path().join("r.ndjson");
        let fixture = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/summarize/open.records.ndjson"
        ))
        .unwrap();
        let first_two: String = fixture.lines().take(2).map(|l| format!("{l}\n")).collect();
        std::fs::write(&ours, format!("{first_two}{{\"type\":\"requ")).unwrap();
        prepare_for_append(&ours).unwrap();
        assert_eq!(std::fs::read_to_string(&ours).unwrap(), first_two);
        prepare_for_append(&dir.path().join("new.ndjson")).unwrap();
    }
}
