//! How many requests a level had in flight, instant by instant, from when each started and
//! ended: what the steady state's window and the load record's peak are read from.
//!
//! Two sorted arrays of instants, walked together, rather than one sorted list of (instant, ±1)
//! events: 16 bytes a request and no sort scratch, which at millions of requests is the
//! difference between this and the sample store itself.

use super::sample::{FailureSample, Sample};

/// The starts and ends of a level's requests, completed and failed, each ascending.
pub struct InFlight {
    starts: Vec<f64>,
    ends: Vec<f64>,
}

impl InFlight {
    pub fn of(samples: &[Sample], failures: &[FailureSample]) -> InFlight {
        let mut starts: Vec<f64> =
            samples.iter().map(|s| s.start_offset_ms).chain(failures.iter().map(|f| f.start_offset_ms)).collect();
        let mut ends: Vec<f64> = samples
            .iter()
            .map(|s| s.start_offset_ms + s.e2e_ms())
            .chain(failures.iter().map(|f| f.start_offset_ms + f.elapsed_ms))
            .collect();
        starts.sort_unstable_by(f64::total_cmp);
        ends.sort_unstable_by(f64::total_cmp);
        InFlight { starts, ends }
    }

    /// When the last request started.
    pub fn last_start(&self) -> Option<f64> {
        self.starts.last().copied()
    }

    /// Every instant at which a request started or ended, ascending, with the number in flight
    /// from then on. The events of one instant count together, ends before starts: a request
    /// replacing one that ended is no overlap.
    pub fn steps(&self) -> impl Iterator<Item = (f64, i64)> + '_ {
        let (starts, ends) = (&self.starts, &self.ends);
        let (mut s, mut e, mut now) = (0, 0, 0i64);
        std::iter::from_fn(move || {
            // The smaller of the two heads.
            let t = starts.get(s).into_iter().chain(ends.get(e)).copied().min_by(f64::total_cmp)?;
            // Equal as the arrays are sorted (`total_cmp`): a NaN is then equal to itself and
            // is passed, where `==` would stop the walk on it forever.
            while ends.get(e).is_some_and(|b| b.total_cmp(&t).is_eq()) {
                now -= 1;
                e += 1;
            }
            while starts.get(s).is_some_and(|a| a.total_cmp(&t).is_eq()) {
                now += 1;
                s += 1;
            }
            Some((t, now))
        })
    }

    /// The most requests in flight at once.
    pub fn peak(&self) -> u64 {
        self.steps().map(|(_, n)| n).max().unwrap_or(0).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::record::RequestTiming;

    fn span(start: f64, end: f64) -> Sample {
        let mut r: RequestTiming =
            serde_json::from_str(include_str!("../../../tests/fixtures/request-timing.json")).unwrap();
        r.start_offset_ms = start;
        r.e2e_ms = end - start;
        Sample::from_record(&r)
    }

    #[test]
    fn counts_change_once_per_instant_with_ends_before_starts() {
        // [0, 10) and [10, 20) only touch; [5, 15) overlaps both; two start together at 30.
        let samples = [span(0.0, 10.0), span(10.0, 20.0), span(5.0, 15.0), span(30.0, 31.0), span(30.0, 32.0)];
        let flight = InFlight::of(&samples, &[]);
        let steps: Vec<(f64, i64)> = flight.steps().collect();
        assert_eq!(steps, [(0.0, 1), (5.0, 2), (10.0, 2), (15.0, 1), (20.0, 0), (30.0, 2), (31.0, 1), (32.0, 0)]);
        assert_eq!(flight.peak(), 2);
        assert_eq!(flight.last_start(), Some(30.0));
        assert_eq!(InFlight::of(&[], &[]).peak(), 0);
        // A timing that is not a number ends the walk like any other.
        assert_eq!(InFlight::of(&[span(f64::NAN, 1.0), span(0.0, 1.0)], &[]).steps().count(), 3);
    }
}
