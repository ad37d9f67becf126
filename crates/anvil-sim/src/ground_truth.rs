//! Ground truth for timing accuracy: when the server handed each chunk of each streamed
//! response to the HTTP layer, so a benchmark can compare the client's measured time to first
//! token and time per output token with what the server actually did.
//!
//! Recording is opt-in (`Profile::record_ground_truth`). When on, a stream reads the clock
//! once per body frame (an SSE event sent together with others, like the role chunk with the
//! first token, shares its frame's instant) and pushes into a vector sized up front; the record
//! goes into a bounded store when the stream ends, however it ends. Non-streamed requests and
//! requests refused before a stream started are not recorded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The store keeps this many records; older ones are dropped.
const MAX_RECORDS: usize = 100_000;

/// What the server did for one streamed request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundTruthRecord {
    /// The `ANVIL_REQ_…` canary marker found in the prompt, if any.
    pub marker: Option<String>,
    /// When the request arrived, in nanoseconds since the Unix epoch (wall clock).
    pub arrival_unix_ns: u64,
    /// The fault injected into this response, by its counter name, if one was.
    #[serde(default)]
    pub fault: Option<String>,
    /// Every SSE event sent, in order.
    pub chunks: Vec<GroundTruthChunk>,
}

/// One SSE event of a streamed response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundTruthChunk {
    /// When the event's bytes were handed to the HTTP layer, in nanoseconds after arrival
    /// (monotonic clock).
    pub offset_ns: u64,
    pub kind: ChunkKind,
    /// Output tokens carried (reasoning and content events only).
    pub tokens: u32,
}

/// What an SSE event carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// The role-only first chat chunk.
    Role,
    Reasoning,
    Content,
    Finish,
    /// The trailing `"choices": []` usage chunk.
    Usage,
    /// `data: [DONE]`.
    Done,
    /// Bytes added by fault injection (a broken line or the huge chunk), outside the planned
    /// output.
    Injected,
}

/// Finished records, oldest first.
#[derive(Debug, Default)]
pub(crate) struct GroundTruthStore {
    records: Mutex<VecDeque<GroundTruthRecord>>,
}

impl GroundTruthStore {
    pub fn new() -> GroundTruthStore {
        GroundTruthStore::default()
    }

    fn push(&self, record: GroundTruthRecord) {
        // A panic elsewhere while holding the lock leaves the queue intact; keep using it.
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= MAX_RECORDS {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// A copy of every record. Copied under the lock and serialized outside it, so reading
    /// the store never holds up streams that finish meanwhile for long.
    pub fn records(&self) -> Vec<GroundTruthRecord> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }
}

/// Collects the record of one stream; hands it to the store when dropped.
pub(crate) struct Recorder {
    store: Arc<GroundTruthStore>,
    arrival: Instant,
    record: GroundTruthRecord,
    /// Events noted since the last [`Recorder::stamp`].
    unstamped: usize,
}

impl Recorder {
    /// `expected_events` sizes the vector so that recording does not reallocate.
    pub fn new(
        store: &Arc<GroundTruthStore>,
        marker: Option<&str>,
        arrival: Instant,
        expected_events: usize,
    ) -> Recorder {
        let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let unix_arrival = unix_now.saturating_sub(arrival.elapsed());
        Recorder {
            store: Arc::clone(store),
            arrival,
            record: GroundTruthRecord {
                marker: marker.map(str::to_owned),
                arrival_unix_ns: u64::try_from(unix_arrival.as_nanos()).unwrap_or(u64::MAX),
                fault: None,
                chunks: Vec::with_capacity(expected_events),
            },
            unstamped: 0,
        }
    }

    /// Notes an event written into the frame being built; its time is set by the next stamp.
    pub fn note(&mut self, kind: ChunkKind, tokens: u32) {
        self.record.chunks.push(GroundTruthChunk { offset_ns: 0, kind, tokens });
        self.unstamped += 1;
    }

    /// The frame with the noted events is being handed over now.
    pub fn stamp(&mut self) {
        if self.unstamped == 0 {
            return;
        }
        let offset = u64::try_from(self.arrival.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let len = self.record.chunks.len();
        for chunk in &mut self.record.chunks[len - self.unstamped..] {
            chunk.offset_ns = offset;
        }
        self.unstamped = 0;
    }

    /// Notes the fault injected into this response.
    pub fn fault(&mut self, name: &str) {
        self.record.fault = Some(name.to_owned());
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Events noted for a frame that was never handed over were never sent.
        let sent = self.record.chunks.len() - self.unstamped;
        self.record.chunks.truncate(sent);
        self.store.push(std::mem::take(&mut self.record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_stamped_per_frame_and_stored_on_drop() {
        let store = Arc::new(GroundTruthStore::new());
        let arrival = Instant::now();
        let mut recorder = Recorder::new(&store, Some("ANVIL_REQ_1"), arrival, 4);
        recorder.note(ChunkKind::Role, 0);
        recorder.note(ChunkKind::Content, 2);
        std::thread::sleep(std::time::Duration::from_millis(2));
        recorder.stamp();
        recorder.note(ChunkKind::Finish, 0);
        drop(recorder);
        let records = store.records();
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record.marker.as_deref(), Some("ANVIL_REQ_1"));
        // The unsent finish event is not part of the record.
        assert_eq!(record.chunks.len(), 2);
        assert_eq!(record.chunks[0].offset_ns, record.chunks[1].offset_ns);
        assert!(record.chunks[0].offset_ns >= 2_000_000);
        let json = serde_json::to_value(record).expect("serialize");
        assert_eq!(
            json["chunks"][1],
            serde_json::json!({"offset_ns": record.chunks[1].offset_ns,
            "kind": "content", "tokens": 2})
        );
    }

    #[test]
    fn the_store_is_bounded() {
        let store = GroundTruthStore::new();
        for i in 0..MAX_RECORDS as u64 + 3 {
            store.push(GroundTruthRecord { arrival_unix_ns: i, ..GroundTruthRecord::default() });
        }
        let records = store.records();
        assert_eq!(records.len(), MAX_RECORDS);
        assert_eq!(records[0].arrival_unix_ns, 3);
    }
}
