//! The steady-state window of a level: the part of it where the planned load was actually on,
//! with ramp-up and drain left out, and throughput and latency summaries inside it.
//!
//! Closed loop: from the first instant the requests in flight reach the concurrency to the
//! drain, the first instant after the last request started with fewer in flight (after that no
//! request starts to replace one that ends). Open loop: from the end of the ramp (or the start) to the last arrival's dispatch. A
//! request's output tokens are spread evenly over its generation (first output to end), so the
//! tokens inside the window are the ones generated there; latencies are those of requests that
//! started inside it.

use super::in_flight::InFlight;
use super::sample::{FailureSample, Sample};
use super::stats::Summary;
use crate::request::record::LevelPacing;

/// Below this share of the level's wall clock the window describes too little of the run.
pub const SHORT_SHARE: f64 = 0.5;

/// The steady-state window and what happened inside it.
#[derive(Debug, Clone)]
pub struct SteadyState {
    /// `in_flight_at_concurrency` (closed loop) or `after_ramp_until_last_arrival` (open loop).
    pub basis: &'static str,
    /// From the level start.
    pub start_ms: f64,
    pub end_ms: f64,
    /// `(end − start) / wall clock`.
    pub share_of_level: f64,
    /// Eligible requests that started inside the window.
    pub requests: usize,
    /// Eligible output tokens generated inside the window, per second of it.
    pub throughput_tok_s: f64,
    /// Eligible requests completed inside the window, per second of it.
    pub completion_rate_rps: f64,
    pub ttft: Option<Summary>,
    pub tpot: Option<Summary>,
    pub e2e: Option<Summary>,
}

impl SteadyState {
    pub fn duration_ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }
}

/// The window, when the level reached its load at all.
pub fn steady_state(
    pacing: LevelPacing,
    samples: &[Sample],
    failures: &[FailureSample],
    wall_clock_ms: f64,
) -> Option<SteadyState> {
    let (basis, start_ms, end_ms) = match pacing {
        LevelPacing::Closed { concurrency, .. } => {
            let (start, end) = at_concurrency(samples, failures, u64::from(concurrency))?;
            ("in_flight_at_concurrency", start, end)
        }
        LevelPacing::Open { ramp, .. } => {
            let start = ramp.map_or(0.0, |r| r.as_secs_f64() * 1000.0);
            let last = samples
                .iter()
                .map(|s| s.start_offset_ms)
                .chain(failures.iter().map(|f| f.start_offset_ms))
                .reduce(f64::max)?;
            ("after_ramp_until_last_arrival", start, last)
        }
    };
    if end_ms <= start_ms {
        return None;
    }
    let window_s = (end_ms - start_ms) / 1000.0;
    // Walked again for each figure rather than gathered: one array of references is 8 bytes a
    // request beside the sample store.
    let eligible = || samples.iter().filter(|s| s.eligible());
    let inside = || eligible().filter(|s| s.start_offset_ms >= start_ms && s.start_offset_ms < end_ms);
    // A fold from +0.0: an empty float sum is -0.0, which would print as "-0.0 tok/s".
    let tokens: f64 = eligible().map(|s| tokens_within(s, start_ms, end_ms)).fold(0.0, |a, b| a + b);
    let completed = eligible().filter(|s| (start_ms..end_ms).contains(&(s.start_offset_ms + s.e2e_ms()))).count();
    Some(SteadyState {
        basis,
        start_ms,
        end_ms,
        share_of_level: if wall_clock_ms > 0.0 { (end_ms - start_ms) / wall_clock_ms } else { 0.0 },
        requests: inside().count(),
        throughput_tok_s: tokens / window_s,
        completion_rate_rps: completed as f64 / window_s,
        ttft: Summary::of(inside().filter_map(|s| s.ttft_ms()).collect()),
        tpot: Summary::of(inside().filter_map(|s| s.tpot_ms()).collect()),
        e2e: Summary::of(inside().map(|s| s.e2e_ms()).collect()),
    })
}

/// From the first instant `target` requests are in flight to the drain: the first instant, once
/// the last request has started, with fewer in flight (from then on nothing replaces a request
/// that ends). Dips in between — a request ending just before its worker's next one starts, a
/// worker waiting out a retry — do not end the window.
fn at_concurrency(samples: &[Sample], failures: &[FailureSample], target: u64) -> Option<(f64, f64)> {
    let in_flight = InFlight::of(samples, failures);
    let last_start = in_flight.last_start()?;
    let mut first = None;
    for (t, now) in in_flight.steps() {
        if now >= target as i64 {
            first.get_or_insert(t);
        } else if first.is_some() && t >= last_start {
            return Some((first?, t));
        }
    }
    None
}

/// Output tokens of one request generated inside `[start, end)`: the first at its first output,
/// the rest evenly over its generation time.
fn tokens_within(s: &Sample, start: f64, end: f64) -> f64 {
    let n = s.output_tokens() as f64;
    if n == 0.0 {
        return 0.0;
    }
    let first = s.start_offset_ms + s.ttfo_ms();
    let last = s.start_offset_ms + s.e2e_ms();
    let mut tokens = if (start..end).contains(&first) { 1.0 } else { 0.0 };
    if n > 1.0 && last > first {
        let overlap = (last.min(end) - first.max(start)).max(0.0);
        tokens += (n - 1.0) * overlap / (last - first);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::record::RequestTiming;

    /// A completed request sent at `start` ms, first output 10 ms later, ending at `end`, with
    /// `tokens` output tokens.
    fn sample(start: f64, end: f64, tokens: u64) -> Sample {
        let mut r: RequestTiming =
            serde_json::from_str(include_str!("../../../tests/fixtures/request-timing.json")).unwrap();
        r.start_offset_ms = start;
        r.time_to_first_output_ms = 10.0;
        r.ttft_ms = Some(10.0);
        r.e2e_ms = end - start;
        r.output_tokens = tokens;
        r.performance_eligible = true;
        r.exclusion_reason = None;
        r.request_canary = None;
        Sample::from_record(&r)
    }

    fn closed(c: u32) -> LevelPacing {
        LevelPacing::Closed { concurrency: c, max_rate: None }
    }

    #[test]
    fn a_closed_loop_is_steady_from_full_concurrency_to_the_drain() {
        // Two waves of two, then one request alone (the drain).
        let samples = [
            sample(0.0, 100.0, 10),
            sample(0.0, 100.0, 10),
            sample(100.0, 200.0, 10),
            sample(100.0, 200.0, 10),
            sample(200.0, 300.0, 10),
        ];
        let st = steady_state(closed(2), &samples, &[], 300.0).unwrap();
        assert_eq!((st.basis, st.start_ms, st.end_ms, st.requests), ("in_flight_at_concurrency", 0.0, 200.0, 4));
        // Forty tokens generated in 0.2 s; the lone request is outside.
        assert!((st.throughput_tok_s - 200.0).abs() < 1e-9, "{}", st.throughput_tok_s);
        assert!((st.share_of_level - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(st.e2e.as_ref().map(|s| s.samples), Some(4));
    }

    #[test]
    fn a_dip_mid_level_does_not_end_the_window() {
        // The second worker waits 50–80 ms (a retry's backoff, say), then the level goes on.
        let samples = [
            sample(0.0, 100.0, 10),
            sample(0.0, 50.0, 10),
            sample(80.0, 180.0, 10),
            sample(100.0, 200.0, 10),
            sample(180.0, 260.0, 10),
        ];
        let st = steady_state(closed(2), &samples, &[], 260.0).unwrap();
        assert_eq!((st.start_ms, st.end_ms), (0.0, 200.0));
    }

    #[test]
    fn tokens_are_counted_where_they_were_generated() {
        // 11 tokens: the first at 10 ms, ten more evenly until 110 ms.
        let s = sample(0.0, 110.0, 11);
        assert!((tokens_within(&s, 0.0, 1000.0) - 11.0).abs() < 1e-12);
        assert!((tokens_within(&s, 60.0, 1000.0) - 5.0).abs() < 1e-12);
        assert!((tokens_within(&s, 0.0, 60.0) - 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_level_that_never_reaches_its_concurrency_has_no_steady_state() {
        let samples = [sample(0.0, 100.0, 10), sample(100.0, 200.0, 10)];
        assert!(steady_state(closed(2), &samples, &[], 200.0).is_none());
    }

    #[test]
    fn an_open_loop_is_steady_after_its_ramp_until_the_last_arrival() {
        let pacing = LevelPacing::Open {
            rate: 10.0,
            arrival: crate::plan::scenario::Arrival::Constant,
            ramp: Some(std::time::Duration::from_millis(100)),
            max_in_flight: None,
            overload: crate::plan::scenario::Overload::Queue,
        };
        let samples: Vec<Sample> =
            (0..5).map(|i| sample(f64::from(i) * 100.0, f64::from(i) * 100.0 + 50.0, 5)).collect();
        let st = steady_state(pacing, &samples, &[], 450.0).unwrap();
        assert_eq!((st.start_ms, st.end_ms, st.requests), (100.0, 400.0, 3));
    }
}
