//! Clocks across shards, without a clock service.
//!
//! A shard sends a few pings; shard 0 answers each with its wall clock. For one exchange sent at
//! local `t1`, answered at remote `r` and received at local `t2`, shard 0's clock read `r` at
//! some local instant in `[t1, t2]`: the offset `r − (t1 + t2)/2` is off by at most half the
//! round trip. The exchange with the smallest round trip gives the estimate and that half is its
//! uncertainty. A start instant agreed on shard 0's clock is then turned into this host's
//! monotonic clock once, and the level clock starts exactly there.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The smallest lead a start instant gets over the moment it is sent: message delivery plus a
/// busy runtime's wake-up, on top of four times the slowest measured round trip.
pub const MIN_START_SLACK: Duration = Duration::from_millis(50);
/// The longest round trip to the coordinator a shard may have: beyond it the clock offset is
/// uncertain by more than half a second, and the start instant would be seconds away.
pub const MAX_ROUND_TRIP: Duration = Duration::from_secs(1);
/// The furthest ahead a start instant from the coordinator may lie: the slack the coordinator
/// gives at most, plus a second for delivery and the offset's uncertainty. A start further ahead
/// is refused.
pub const MAX_START_LEAD: Duration =
    Duration::from_millis(MIN_START_SLACK.as_millis() as u64 + 4 * MAX_ROUND_TRIP.as_millis() as u64 + 1000);

/// One ping exchange, in nanoseconds since the Unix epoch: sent and received on this host's
/// clock, answered on shard 0's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    pub sent_ns: u64,
    pub remote_ns: u64,
    pub received_ns: u64,
}

/// This host's clock against shard 0's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// Shard 0's clock minus this host's, in nanoseconds.
    pub offset_ns: i64,
    /// Half the smallest round trip: the true offset lies within ± this.
    pub uncertainty_ns: u64,
    pub round_trip_ns: u64,
}

/// The estimate from the exchange with the smallest round trip; `None` without any.
pub fn estimate(exchanges: &[Exchange]) -> Option<Offset> {
    let best = exchanges.iter().filter(|e| e.received_ns >= e.sent_ns).min_by_key(|e| e.received_ns - e.sent_ns)?;
    let round_trip_ns = best.received_ns - best.sent_ns;
    let midpoint = i128::from(best.sent_ns) + i128::from(round_trip_ns) / 2;
    let offset_ns = (i128::from(best.remote_ns) - midpoint).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Some(Offset { offset_ns, uncertainty_ns: round_trip_ns.div_ceil(2), round_trip_ns })
}

pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

pub fn now_ns() -> u64 {
    unix_ns(SystemTime::now())
}

/// An instant on shard 0's clock, on this host's wall clock.
pub fn to_local_wall(remote_ns: u64, offset: Option<Offset>) -> SystemTime {
    let local = i128::from(remote_ns) - i128::from(offset.map_or(0, |o| o.offset_ns));
    UNIX_EPOCH + Duration::from_nanos(local.max(0) as u64)
}

/// A wall-clock instant on this host's monotonic clock: both clocks read back to back, once.
pub fn to_monotonic(at: SystemTime) -> Instant {
    let (mono, wall) = (Instant::now(), SystemTime::now());
    match at.duration_since(wall) {
        Ok(ahead) => mono + ahead,
        Err(behind) => mono.checked_sub(behind.duration()).unwrap_or(mono),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_wins_and_bounds_the_error() {
        // Shard 0 is 5 ms ahead. Exchanges with asymmetric delays; the tightest is 100 µs.
        let ahead = 5_000_000u64;
        let exchanges = [
            Exchange { sent_ns: 1_000_000, remote_ns: 1_900_000 + ahead, received_ns: 2_000_000 },
            Exchange { sent_ns: 3_000_000, remote_ns: 3_040_000 + ahead, received_ns: 3_100_000 },
            Exchange { sent_ns: 4_000_000, remote_ns: 4_100_000 + ahead, received_ns: 4_700_000 },
        ];
        let o = estimate(&exchanges).unwrap();
        assert_eq!(o.round_trip_ns, 100_000);
        assert_eq!(o.uncertainty_ns, 50_000);
        assert!((o.offset_ns - ahead as i64).unsigned_abs() <= o.uncertainty_ns, "{o:?}");
        assert_eq!(o.offset_ns, ahead as i64 - 10_000);
        assert_eq!(estimate(&[]), None);
    }

    #[test]
    fn a_clock_behind_gives_a_negative_offset_and_maps_back() {
        let o = estimate(&[Exchange { sent_ns: 10_000, remote_ns: 4_000, received_ns: 12_000 }]).unwrap();
        assert_eq!(o.offset_ns, -7_000);
        assert_eq!(unix_ns(to_local_wall(4_000, Some(o))), 11_000);
        assert_eq!(unix_ns(to_local_wall(4_000, None)), 4_000);
    }

    #[test]
    fn wall_instants_map_onto_the_monotonic_clock() {
        let soon = SystemTime::now() + Duration::from_millis(200);
        let at = to_monotonic(soon);
        let left = at - Instant::now();
        assert!(left > Duration::from_millis(150) && left <= Duration::from_millis(200), "{left:?}");
        let past = to_monotonic(SystemTime::now() - Duration::from_millis(50));
        assert!(past <= Instant::now());
    }
}
