//! Which canary markers a contaminated answer can carry: those of the requests in flight, and
//! of the last few that ended, as a server mixing up its batch slots or its response cache
//! would deliver them.
//!
//! Only kept when the profile can contaminate answers. The lock is held for a few vector
//! operations and never across an await.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::faults::FALLBACK_MARKER;
use super::request::CANARY_PREFIX;

/// Markers of ended requests kept for later contamination.
const RECENT: usize = 8;

#[derive(Debug, Default)]
pub(crate) struct MarkerRegistry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// Oldest first.
    in_flight: Vec<(u64, Arc<str>)>,
    /// Most recently ended first.
    recent: VecDeque<Arc<str>>,
}

impl MarkerRegistry {
    pub fn new() -> MarkerRegistry {
        MarkerRegistry::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `marker` as in flight until the returned handle is dropped.
    pub fn enter(self: &Arc<Self>, marker: &str) -> InFlightMarker {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.in_flight.push((id, Arc::from(marker)));
        InFlightMarker { registry: Arc::clone(self), id }
    }

    /// A marker other than `own`: the newest in flight, else the most recently ended, else a
    /// made-up one.
    pub fn foreign(&self, own: Option<&str>) -> String {
        let inner = self.lock();
        let other = |marker: &&Arc<str>| Some(&***marker) != own;
        let in_flight = inner.in_flight.iter().rev().map(|(_, marker)| marker).find(other);
        match in_flight.or_else(|| inner.recent.iter().find(other)) {
            Some(marker) => marker.to_string(),
            None => made_up(own),
        }
    }
}

impl MarkerRegistry {
    /// A marker of another session than `own`'s (see `session_of`): the newest in flight, else
    /// the most recently ended, else a made-up one. Answers one conversation's turn with another
    /// conversation's marker, never with its own earlier turn's.
    pub fn foreign_session(&self, own: Option<&str>) -> String {
        let inner = self.lock();
        let mine = own.map(session_of);
        let other = |marker: &&Arc<str>| Some(session_of(marker)) != mine;
        let in_flight = inner.in_flight.iter().rev().map(|(_, marker)| marker).find(other);
        match in_flight.or_else(|| inner.recent.iter().find(other)) {
            Some(marker) => marker.to_string(),
            None => made_up(own),
        }
    }
}

/// When no other request's marker is known: a marker of another request of the same run, as a
/// server mixing up responses could only deliver (the client counts nothing else as foreign),
/// made from `own`: the neighbouring index, or the neighbouring conversation's first turn.
/// Without a marker of the tool's shape, the fixed `FALLBACK_MARKER`.
fn made_up(own: Option<&str>) -> String {
    let neighbour = |n: u64| if n > 0 { n - 1 } else { n + 1 };
    match own.and_then(parse_marker) {
        Some(Marker::Request { seed, index }) => format!("{CANARY_PREFIX}{seed}_{:05}", neighbour(index)),
        Some(Marker::Turn { seed, conversation }) => {
            format!("{CANARY_PREFIX}{seed}_S{:05}_T1", neighbour(conversation))
        }
        None => FALLBACK_MARKER.to_owned(),
    }
}

/// A canary marker of the two shapes a load generator writes: a request's
/// (`ANVIL_REQ_<seed>_<index:05>`) and a conversation turn's (`ANVIL_REQ_<seed>_S<conversation:05>_T<turn>`).
enum Marker<'a> {
    Request { seed: &'a str, index: u64 },
    Turn { seed: &'a str, conversation: u64 },
}

/// `marker` read as one of the two shapes, exactly as they are written: numbers in decimal, no
/// leading zeros beyond the padding, a turn from 1.
fn parse_marker(marker: &str) -> Option<Marker<'_>> {
    let (seed, rest) = marker.strip_prefix(CANARY_PREFIX)?.split_once('_')?;
    canonical_number(seed, 1)?;
    match rest.strip_prefix('S') {
        Some(turn_of) => {
            let (conversation, turn) = turn_of.split_once("_T")?;
            canonical_number(turn, 1).filter(|&t| t >= 1)?;
            Some(Marker::Turn { seed, conversation: canonical_number(conversation, 5)? })
        }
        None => Some(Marker::Request { seed, index: canonical_number(rest, 5)? }),
    }
}

/// The number `digits` spells, when they are decimal digits zero-padded to `width` and no more.
fn canonical_number(digits: &str, width: usize) -> Option<u64> {
    if digits.len() < width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (format!("{n:0width$}") == digits).then_some(n)
}

/// The session a marker names: a conversation turn's marker (`…_S<conversation>_T<turn>`) up
/// to its turn; any other marker is a session of its own.
fn session_of(marker: &str) -> &str {
    match (marker.find("_S"), marker.rfind("_T")) {
        (Some(s), Some(t)) if t > s => &marker[..t],
        _ => marker,
    }
}

/// Keeps a request's marker in the in-flight set; on drop it moves to the recent ones.
#[derive(Debug)]
pub(crate) struct InFlightMarker {
    registry: Arc<MarkerRegistry>,
    id: u64,
}

impl Drop for InFlightMarker {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        let Some(position) = inner.in_flight.iter().position(|(id, _)| *id == self.id) else {
            return;
        };
        let (_, marker) = inner.in_flight.remove(position);
        inner.recent.push_front(marker);
        inner.recent.truncate(RECENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_in_flight_then_recent_then_made_up() {
        let registry = Arc::new(MarkerRegistry::new());
        assert_eq!(registry.foreign(Some("ANVIL_REQ_a")), FALLBACK_MARKER);
        let a = registry.enter("ANVIL_REQ_a");
        assert_eq!(registry.foreign(Some("ANVIL_REQ_a")), FALLBACK_MARKER, "never the own marker");
        assert_eq!(registry.foreign(None), "ANVIL_REQ_a");
        let b = registry.enter("ANVIL_REQ_b");
        assert_eq!(registry.foreign(Some("ANVIL_REQ_a")), "ANVIL_REQ_b");
        assert_eq!(registry.foreign(Some("ANVIL_REQ_b")), "ANVIL_REQ_a");
        drop(b);
        assert_eq!(registry.foreign(Some("ANVIL_REQ_a")), "ANVIL_REQ_b", "recently ended");
        drop(a);
        assert_eq!(registry.foreign(Some("ANVIL_REQ_c")), "ANVIL_REQ_a");
        for i in 0..20 {
            drop(registry.enter(&format!("ANVIL_REQ_{i}")));
        }
        assert_eq!(registry.lock().recent.len(), RECENT);
        assert!(registry.lock().in_flight.is_empty());
    }

    #[test]
    fn a_made_up_marker_is_another_request_of_the_same_run() {
        let registry = MarkerRegistry::new();
        assert_eq!(registry.foreign(Some("ANVIL_REQ_7_00000")), "ANVIL_REQ_7_00001");
        assert_eq!(registry.foreign(Some("ANVIL_REQ_7_00012")), "ANVIL_REQ_7_00011");
        assert_eq!(registry.foreign_session(Some("ANVIL_REQ_7_S00003_T2")), "ANVIL_REQ_7_S00002_T1");
        assert_eq!(registry.foreign(None), FALLBACK_MARKER);
    }

    /// Only markers of exactly the written shapes have neighbours; the client's parsers are
    /// held against these answers on its side (`tests/simulator.rs` of anvil-load).
    #[test]
    fn a_marker_of_another_shape_gets_the_fallback() {
        let registry = MarkerRegistry::new();
        for own in [
            "ANVIL_REQ_7_0001",
            "ANVIL_REQ_07_00001",
            "ANVIL_REQ_7_S00001_T0",
            "ANVIL_REQ_7_S1_T1",
            "ANVIL_REQ_x_00001",
        ] {
            assert_eq!(registry.foreign(Some(own)), FALLBACK_MARKER, "{own}");
        }
        assert_eq!(registry.foreign(Some("ANVIL_REQ_7_123456")), "ANVIL_REQ_7_123455");
    }

    #[test]
    fn cross_session_takes_another_conversation() {
        let registry = Arc::new(MarkerRegistry::new());
        let _t1 = registry.enter("ANVIL_REQ_1_S00001_T1");
        let t2 = registry.enter("ANVIL_REQ_1_S00001_T2");
        let other = registry.enter("ANVIL_REQ_1_S00002_T1");
        assert_eq!(registry.foreign_session(Some("ANVIL_REQ_1_S00001_T3")), "ANVIL_REQ_1_S00002_T1");
        drop(other);
        drop(t2);
        // The same conversation's turns are never chosen, in flight or ended.
        assert_eq!(registry.foreign_session(Some("ANVIL_REQ_1_S00001_T3")), "ANVIL_REQ_1_S00002_T1");
        assert_eq!(registry.foreign_session(Some("ANVIL_REQ_1_S00002_T2")), "ANVIL_REQ_1_S00001_T1");
    }
}
