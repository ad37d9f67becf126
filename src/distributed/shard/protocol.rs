//! The coordinator's wire format: newline-delimited JSON over one TCP connection per shard.
//!
//! A shard connects and says `hello` (protocol version, nonce); the coordinator answers `hello`
//! (its nonce) or `refused`. From then on every line both ways is sealed (`auth`): the shard
//! joins, pings to measure its clock, says it is ready for a level and gets its start instant,
//! reports the warm-up request (shard 0), sends its records after each level and finishes.
//! Records travel verbatim: a `records` message announcing `lines`, `bytes` and their SHA-256,
//! then exactly those records-file bytes. Both sides send `alive` every `HEARTBEAT`; a peer
//! silent for `SILENCE_LIMIT` is lost, so no read waits forever. Every line has a length limit:
//! a few KiB before the peer is authenticated, 64 KiB after (records bytes are counted by their
//! announcement, not read as lines).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::auth::{Forged, Opener};

/// Protocol version: shards and coordinator must speak the same. 2: authenticated lines.
pub const VERSION: u32 = 2;
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A peer that sent nothing for this long is gone (crashed, killed, unreachable).
pub const SILENCE_LIMIT: Duration = Duration::from_secs(15);
/// A new connection's `hello` and `join` must both have arrived within this (a shard sends
/// them at once): a silent or slow peer does not hold a connection slot for longer.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// Longest line read before the peer is authenticated (`hello`, `join`).
pub const MAX_HANDSHAKE_LINE: usize = 4 * 1024;
/// Longest message line read from an authenticated peer.
pub const MAX_LINE: usize = 64 * 1024;
/// Longest free text (a host name, a failure's reason) kept from a message.
pub const MAX_TEXT: usize = 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    // Plain, before the connection's key exists.
    /// Both ways: the protocol spoken and this side's connection nonce (hex).
    Hello {
        protocol: u32,
        nonce: String,
    },
    /// Coordinator → shard: this connection is not taken (plain before authentication, sealed
    /// after). The shard shows a plain one's reason only as one of a few fixed texts.
    Refused {
        reason: String,
    },

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
    /// The next `bytes` bytes (`lines` lines, newlines included) are this shard's records-file
    /// lines for `level`; `sha256` is their digest (`sha256:<hex>`).
    Records {
        level: String,
        lines: u64,
        bytes: u64,
        sha256: String,
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
    /// Every shard finished; shard 0 is merging their records (no more barriers).
    Merging,
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
    /// The message's JSON, without a newline.
    pub fn json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A plain line (handshake only).
    pub fn plain_line(&self) -> Vec<u8> {
        let mut bytes = self.json();
        bytes.push(b'\n');
        bytes
    }
}

/// Why a read ended without a message.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("nothing received for {} s", SILENCE_LIMIT.as_secs())]
    Silent,
    #[error("a line longer than {0} bytes")]
    TooLong(usize),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("a line that failed authentication (altered, replayed, or sealed with another ANVIL_SHARD_TOKEN)")]
    Forged,
    #[error("an unreadable message ({0})")]
    Bad(String),
}

impl From<Forged> for ReadError {
    fn from(_: Forged) -> Self {
        ReadError::Forged
    }
}

/// Read one raw line (newline included) of at most `max` bytes, within the silence limit.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<(), ReadError> {
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
            // Checked before anything is kept: a peer never makes this buffer grow past `max`.
            if buf.len() + used > max + 1 {
                return Err(ReadError::TooLong(max));
            }
            buf.extend_from_slice(&available[..used]);
            reader.consume(used);
            if done {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(SILENCE_LIMIT, read).await.map_err(|_| ReadError::Silent)?
}

/// Parse one message's JSON. Errors never quote the peer's bytes (they may be anything).
pub fn parse(json: &[u8]) -> Result<Msg, ReadError> {
    serde_json::from_slice::<Msg>(json).map_err(|e| ReadError::Bad(e.classify_kind()))
}

trait Classify {
    fn classify_kind(&self) -> String;
}

impl Classify for serde_json::Error {
    fn classify_kind(&self) -> String {
        match self.classify() {
            serde_json::error::Category::Io => "an I/O error".to_string(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not JSON".to_string(),
            serde_json::error::Category::Data => "not a message of this protocol".to_string(),
        }
    }
}

/// One plain (handshake) message, at most `MAX_HANDSHAKE_LINE` bytes.
pub async fn read_plain<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<Msg, ReadError> {
    read_line(reader, buf, MAX_HANDSHAKE_LINE).await?;
    parse(buf)
}

/// The next sealed message that is not a heartbeat, at most `max` bytes a line.
pub async fn read_sealed<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    opener: &mut Opener,
    max: usize,
) -> Result<Msg, ReadError> {
    loop {
        read_line(reader, buf, max).await?;
        let json = opener.open(buf)?;
        match parse(json)? {
            Msg::Alive => continue,
            msg => return Ok(msg),
        }
    }
}

/// Text from a peer made safe to print and keep: control characters (terminal escapes, line
/// breaks) and bidirectional overrides replaced, at most `MAX_TEXT` characters.
pub fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_TEXT)
        .map(|c| if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}') { '\u{fffd}' } else { c })
        .collect();
    if text.chars().count() > MAX_TEXT {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::auth::{Direction, NONCE_BYTES, Sealer, SessionKey, Token};
    use super::*;

    #[tokio::test]
    async fn messages_round_trip_and_heartbeats_are_skipped() {
        let key = SessionKey::derive(&Token::none(), &[3; NONCE_BYTES], &[4; NONCE_BYTES]);
        let mut sealer = Sealer::new(key.clone(), Direction::ToShard);
        let msgs = [
            Msg::Alive,
            Msg::Start { level: "r-c4".into(), at_unix_ns: 17 },
            Msg::Alive,
            Msg::Records { level: "r-c4".into(), lines: 2, bytes: 10, sha256: "sha256:00".into() },
        ];
        let wire: Vec<u8> = msgs.iter().flat_map(|m| sealer.seal(&m.json())).collect();
        let mut reader = tokio::io::BufReader::new(&wire[..]);
        let mut opener = Opener::new(key, Direction::ToShard);
        let mut buf = Vec::new();
        assert_eq!(read_sealed(&mut reader, &mut buf, &mut opener, MAX_LINE).await.unwrap(), msgs[1]);
        assert_eq!(read_sealed(&mut reader, &mut buf, &mut opener, MAX_LINE).await.unwrap(), msgs[3]);
        assert!(matches!(read_sealed(&mut reader, &mut buf, &mut opener, MAX_LINE).await, Err(ReadError::Closed)));
        assert_eq!(String::from_utf8(Msg::Finished.plain_line()).unwrap(), "{\"type\":\"finished\"}\n");
    }

    #[tokio::test]
    async fn lines_are_bounded_and_garbage_is_not_quoted() {
        let long = vec![b'a'; MAX_HANDSHAKE_LINE + 10];
        let mut reader = tokio::io::BufReader::with_capacity(1024, &long[..]);
        let mut buf = Vec::new();
        assert!(matches!(read_plain(&mut reader, &mut buf).await, Err(ReadError::TooLong(_))));
        assert!(buf.len() <= MAX_HANDSHAKE_LINE + 1, "{}", buf.len());
        let e = parse(b"\x1b[31mSECRET{").unwrap_err().to_string();
        assert!(!e.contains("SECRET") && !e.contains('\u{1b}'), "{e}");
        assert!(matches!(parse(br#"{"type":"join"}"#), Err(ReadError::Bad(_))));
        assert_eq!(printable("a\u{1b}[2Jb\nc\u{202e}d"), "a\u{fffd}[2Jb\u{fffd}c\u{fffd}d");
    }
}
