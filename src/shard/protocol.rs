//! The coordinator's wire format: newline-delimited JSON over one TCP connection per shard.
//!
//! A shard joins, pings to measure its clock, says it is ready for a level and gets its start
//! instant, reports the warm-up request (shard 0), sends its records after each level and
//! finishes. Records travel verbatim: a `records` message announcing `lines` and `bytes`, then
//! exactly those records-file lines. Both sides send `alive` every `HEARTBEAT`; a peer silent for
//! `SILENCE_LIMIT` is lost, so no read waits forever.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Protocol version: shards and coordinator must speak the same.
pub const VERSION: u32 = 1;
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A peer that sent nothing for this long is gone (crashed, killed, unreachable).
pub const SILENCE_LIMIT: Duration = Duration::from_secs(15);
/// Longest protocol line accepted (records lines included).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    // Shard → coordinator.
    Join {
        index: u32,
        count: u32,
        protocol: u32,
        version: String,
        /// The scenario's configuration fingerprint: every shard runs the same test.
        fingerprint: String,
        host: String,
    },
    Ping {
        seq: u32,
    },
    Ready {
        level: String,
        /// Fingerprint of the plan this shard computed (configuration, salt, prompt sizing,
        /// request 0): every shard must compute the same.
        plan: String,
        round_trip_ns: u64,
        uncertainty_ns: u64,
    },
    /// Shard 0: the level's warm-up request has ended.
    WarmUpDone {
        level: String,
    },
    /// The next `lines` lines (`bytes` bytes, newlines included) are this shard's records-file
    /// lines for `level`.
    Records {
        level: String,
        lines: u64,
        bytes: u64,
    },
    /// This shard stopped early; the run cannot be complete.
    Failed {
        reason: String,
    },
    /// Every level done and its records sent.
    Finished,

    // Coordinator → shard.
    Welcome {
        run_id: String,
        /// Prompt salt for the run (one salt, so every shard builds the same prompts).
        salt: u64,
    },
    Pong {
        seq: u32,
        unix_ns: u64,
    },
    /// Start `level` at this instant on shard 0's clock.
    Start {
        level: String,
        at_unix_ns: u64,
    },
    RecordsOk {
        level: String,
    },
    /// The run failed; stop now.
    Abort {
        reason: String,
    },
    /// Every shard finished; `merged` says what became of the results.
    Done {
        merged: String,
    },

    // Both ways.
    Alive,
}

impl Msg {
    pub fn line(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Why a read ended without a line.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("nothing received for {} s", SILENCE_LIMIT.as_secs())]
    Silent,
    #[error("a line longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("unreadable message: {0}")]
    Bad(String),
}

/// Read one raw line (newline included), bounded in time and length.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    buf.clear();
    let read = async {
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                return Err(ReadError::Closed);
            }
            let (used, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            buf.extend_from_slice(&available[..used]);
            reader.consume(used);
            if done {
                return Ok(());
            }
            if buf.len() > MAX_LINE {
                return Err(ReadError::TooLong);
            }
        }
    };
    tokio::time::timeout(SILENCE_LIMIT, read).await.map_err(|_| ReadError::Silent)?
}

/// Read the next message that is not a heartbeat.
pub async fn read_msg<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<Msg, ReadError> {
    loop {
        read_line(reader, buf).await?;
        match serde_json::from_slice::<Msg>(buf) {
            Ok(Msg::Alive) => continue,
            Ok(msg) => return Ok(msg),
            Err(e) => {
                return Err(ReadError::Bad(format!("{e}: {}", String::from_utf8_lossy(&buf[..buf.len().min(200)]))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_round_trip_and_heartbeats_are_skipped() {
        let msgs = [
            Msg::Alive,
            Msg::Start { level: "r-c4".into(), at_unix_ns: 17 },
            Msg::Alive,
            Msg::Records { level: "r-c4".into(), lines: 2, bytes: 10 },
        ];
        let wire: Vec<u8> = msgs.iter().flat_map(Msg::line).collect();
        let mut reader = tokio::io::BufReader::new(&wire[..]);
        let mut buf = Vec::new();
        assert_eq!(read_msg(&mut reader, &mut buf).await.unwrap(), msgs[1]);
        assert_eq!(read_msg(&mut reader, &mut buf).await.unwrap(), msgs[3]);
        assert!(matches!(read_msg(&mut reader, &mut buf).await, Err(ReadError::Closed)));
        let line = String::from_utf8(Msg::Finished.line()).unwrap();
        assert_eq!(line, "{\"type\":\"finished\"}\n");
    }
}
