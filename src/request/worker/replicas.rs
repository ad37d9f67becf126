//! Which replica a request goes to (`target.base_urls`, `target.balance`): a small lock-free
//! chooser over the replicas' endpoint URIs, with each replica's requests in flight.
//!
//! - `round_robin`: one shared counter, taken in turn.
//! - `least_in_flight`: the replica with the fewest requests in flight, the scan starting at the
//!   next replica in turn so that ties rotate. Two requests choosing at the same instant may both
//!   see the same count: the rule is what the counters said, not a lock.
//! - `session`: a conversation's replica is a fixed function of its session id (FNV-1a), so every
//!   turn goes where its first went, with no table to keep; requests outside conversations go
//!   round robin.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use http::Uri;

use crate::plan::scenario::Balance;
use crate::request::record::Outcome;

/// The replicas of a run and how requests are spread over them. One replica is the plain run.
#[derive(Debug)]
pub struct Replicas {
    uris: Vec<Uri>,
    balance: Balance,
    next: AtomicUsize,
    in_flight: Vec<AtomicU64>,
}

impl Replicas {
    /// `uris` in the scenario's order (never empty: a run has at least one endpoint).
    pub fn new(uris: Vec<Uri>, balance: Balance) -> Self {
        let in_flight = uris.iter().map(|_| AtomicU64::new(0)).collect();
        Replicas { uris, balance, next: AtomicUsize::new(0), in_flight }
    }

    /// How many replicas.
    pub fn len(&self) -> usize {
        self.uris.len()
    }

    /// Never true (see `new`); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.uris.is_empty()
    }

    /// Replica `i`'s endpoint URI.
    pub fn uri(&self, i: usize) -> &Uri {
        &self.uris[i.min(self.uris.len().saturating_sub(1))]
    }

    /// The replica for the next request; `session` is its conversation's id, if any.
    pub fn pick(&self, session: Option<&str>) -> usize {
        let n = self.uris.len();
        if n <= 1 {
            return 0;
        }
        match (self.balance, session) {
            (Balance::Session, Some(id)) => (fnv1a(id.as_bytes()) % n as u64) as usize,
            (Balance::RoundRobin | Balance::Session, _) => self.next.fetch_add(1, Ordering::Relaxed) % n,
            (Balance::LeastInFlight, _) => {
                let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
                (0..n)
                    .map(|k| (start + k) % n)
                    .min_by_key(|&i| self.in_flight[i].load(Ordering::Relaxed))
                    .unwrap_or(start)
            }
        }
    }

    /// A request to replica `i` starts.
    pub fn started(&self, i: usize) {
        if let Some(c) = self.in_flight.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request to replica `i` ended.
    pub fn ended(&self, i: usize) {
        if let Some(c) = self.in_flight.get(i) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Record on `outcome` that replica `i` served it (a dropped arrival was sent nowhere).
pub fn tag(outcome: &mut Outcome, i: usize) {
    let replay = match outcome {
        Outcome::Completed(c) => &mut c.replay,
        Outcome::Failed(f) => &mut f.replay,
        Outcome::Dropped(_) => return,
    };
    replay.get_or_insert_with(Box::default).replica = Some(i as u32);
}

/// 64-bit FNV-1a: stable across runs and builds, so a session's replica is reproducible.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three(balance: Balance) -> Replicas {
        let uris = ["http://a/v1", "http://b/v1", "http://c/v1"].iter().map(|u| u.parse().unwrap()).collect();
        Replicas::new(uris, balance)
    }

    #[test]
    fn round_robin_takes_each_in_turn() {
        let r = three(Balance::RoundRobin);
        let picks: Vec<usize> = (0..6).map(|_| r.pick(Some("s"))).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_in_flight_avoids_the_busy_replica() {
        let r = three(Balance::LeastInFlight);
        r.started(0);
        r.started(0);
        r.started(1);
        assert_eq!(r.pick(None), 2);
        r.started(2);
        r.started(2);
        assert_eq!(r.pick(None), 1);
        r.ended(0);
        r.ended(0);
        assert_eq!(r.pick(None), 0);
    }

    #[test]
    fn a_session_stays_on_one_replica_and_sessions_spread() {
        let r = three(Balance::Session);
        for id in ["s0", "s1", "conversation-7"] {
            let first = r.pick(Some(id));
            assert!((0..20).all(|_| r.pick(Some(id)) == first));
        }
        let used: std::collections::BTreeSet<usize> = (0..30).map(|i| r.pick(Some(&format!("s{i}")))).collect();
        assert_eq!(used.len(), 3);
        // Requests outside conversations go round robin.
        let a = r.pick(None);
        assert_eq!(r.pick(None), (a + 1) % 3);
    }

    #[test]
    fn one_replica_is_always_the_first() {
        let r = Replicas::new(vec!["http://a/v1".parse().unwrap()], Balance::LeastInFlight);
        assert!((0..5).all(|_| r.pick(None) == 0));
    }
}
