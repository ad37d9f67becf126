//! Which canary markers a contaminated answer can carry: those of the requests in flight, and
//! of the last few that ended, as a server mixing up its batch slots or its response cache
//! would deliver them.
//!
//! Only kept when the profile can contaminate answers. The lock is held for a few vector
//! operations and never across an await.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::faults::FALLBACK_MARKER;

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
    use crate::session::canary::parse_turn_marker;
    use crate::workload::canary::parse_request_marker;
    let neighbour = |n: u64| if n > 0 { n - 1 } else { n + 1 };
    match own {
        Some(own) => match (parse_request_marker(own), parse_turn_marker(own)) {
            (Some((seed, index)), _) => format!("ANVIL_REQ_{seed}_{:05}", neighbour(index)),
            (_, Some((seed, conversation, _))) => format!("ANVIL_REQ_{seed}_S{:05}_T1", neighbour(conversation)),
            _ => FALLBACK_MARKER.to_owned(),
        },
        None => FALLBACK_MARKER.to_owned(),
    }
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
