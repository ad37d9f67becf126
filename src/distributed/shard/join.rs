//! Joining a coordinated run: connect (retrying until the join deadline), join, wait for the
//! welcome (whose run id must have the shape anvil-load makes: it names this shard's files), and
//! measure this host's clock against shard 0's with ping exchanges. A failure after joining is
//! told to the coordinator, so the other shards stop at once.

use std::time::Duration;

use tokio::time::Instant;

use super::link::Link;
use super::protocol::{self, Msg};
use super::{auth, clock};
use crate::request::schedule::{Part, RunControl};
use clock::Offset;

/// Ping exchanges per shard when it joins; the one with the smallest round trip counts.
const PINGS: u32 = 16;

/// Connect, join, wait for the welcome, and measure the clock offset.
pub(super) async fn join_coordinator(
    part: Part,
    connect: &str,
    token: &auth::Token,
    config_fingerprint: &str,
    join_timeout: Duration,
    control: &RunControl,
) -> Result<(Link, String, u64, Offset), String> {
    let deadline = Instant::now() + join_timeout;
    let link = Link::connect(connect, token, deadline, control.clone())
        .await
        .map_err(|e| format!("shard {}: {e} within --join-timeout", part.index))?;
    let joined = async {
        link.send(&Msg::Join {
            index: part.index,
            count: part.count,
            protocol: protocol::VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            fingerprint: config_fingerprint.to_string(),
            host: host_name(),
        })
        .await?;
        eprintln!("shard {}/{}: joined the coordinator at {connect}; waiting for the others", part.index, part.count);
        // The coordinator's own join deadline may run from a later start than ours.
        let (run_id, salt) = match link.next("welcome", 2 * join_timeout + Duration::from_secs(10)).await? {
            Msg::Welcome { run_id, salt } => (run_id, salt),
            other => return Err(format!("the coordinator sent {} instead of a welcome", kind(&other))),
        };
        // The id names this shard's files: only the shape the coordinator makes is taken.
        if !is_run_id(&run_id) {
            return Err(format!(
                "the coordinator sent a run id that is not one ({:?}); refusing to name files after it",
                protocol::printable(&run_id)
            ));
        }
        let mut exchanges = Vec::with_capacity(PINGS as usize);
        for seq in 0..PINGS {
            let sent_ns = clock::now_ns();
            link.send(&Msg::Ping { seq }).await?;
            match link.next("pong", Duration::from_secs(10)).await? {
                Msg::Pong { seq: s, unix_ns } if s == seq => {
                    exchanges.push(clock::Exchange { sent_ns, remote_ns: unix_ns, received_ns: clock::now_ns() });
                }
                other => return Err(format!("the coordinator sent {} instead of pong {seq}", kind(&other))),
            }
        }
        let offset = clock::estimate(&exchanges).ok_or("no usable clock exchange with the coordinator")?;
        if Duration::from_nanos(offset.round_trip_ns) > clock::MAX_ROUND_TRIP {
            return Err(format!(
                "the shortest of {PINGS} round trips to the coordinator took {:.3} s, more than the {} accepted (the start instants would be seconds away and the clocks uncertain by half of it); run the shards nearer to shard 0",
                offset.round_trip_ns as f64 / 1e9,
                humantime::format_duration(clock::MAX_ROUND_TRIP)
            ));
        }
        Ok((run_id, salt, offset))
    };
    let (run_id, salt, offset) = match joined.await {
        Ok(joined) => joined,
        Err(e) => {
            let e = format!("shard {}: {e}", part.index);
            if link.failed().is_none() {
                link.last_word(&Msg::Failed { reason: e.clone() }).await;
            }
            return Err(e);
        }
    };
    eprintln!(
        "shard {}/{}: run {run_id}; clock offset to shard 0 {:+.3} ms ± {:.3} ms",
        part.index,
        part.count,
        offset.offset_ns as f64 / 1e6,
        offset.uncertainty_ns as f64 / 1e6
    );
    Ok((link, run_id, salt, offset))
}

/// A message's type, for errors (never its content).
pub(super) fn kind(msg: &Msg) -> String {
    serde_json::to_value(msg).ok().and_then(|v| v["type"].as_str().map(str::to_string)).unwrap_or_default()
}

/// Whether `id` has the shape `run_id` (and the unsharded run's id) gives: `anvil-`, a UTC time
/// `YYYYMMDDTHHMMSSZ`, `-`, four hex digits. Nothing else names a shard's files.
pub fn is_run_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 27
        && id.starts_with("anvil-")
        && b[6..14].iter().all(u8::is_ascii_digit)
        && b[14] == b'T'
        && b[15..21].iter().all(u8::is_ascii_digit)
        && &b[21..23] == b"Z-"
        && b[23..].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// This host's name, for the records.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}
