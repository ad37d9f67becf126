//! The allowed range of every duration and rate a scenario sets, how numbers are written in
//! messages, and how durations are written into the resolved plan.
//!
//! Bounds exist so that a value validation accepts cannot overflow the arithmetic of a run (an
//! instant plus a timeout, a rate's mean gap, a doubled retry back-off) and so that a typo such
//! as `"10000h"` is caught before anything is sent. Each range is wide enough for every real
//! use: eight-hour soaks, ten-minute prefills, one request per quarter hour.

use std::time::Duration;

/// Requests per second: the most one dispatcher keeps on schedule with room to spare.
pub const MAX_RATE: f64 = 100_000.0;
/// Requests per second: one request every 1,000 s. Below this a rate is a typo (`1e-300`), and
/// its mean gap would not fit a timer.
pub const MIN_RATE: f64 = 0.001;
/// Gamma shape (`load.burstiness`): beyond this range the gaps are all zeros or all equal.
pub const BURSTINESS: (f64, f64) = (0.01, 1_000.0);

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

/// `(min, max)` for a duration key. A key without its own entry (a key added later) gets the
/// widest range: 1 ms to 30 days.
pub fn duration_range(key: &str) -> (Duration, Duration) {
    match key {
        // Windows shorter than a second hold too few requests for their percentiles, and each
        // window writes a line and a histogram interval.
        "run.snapshot_interval" => (SECOND, DAY),
        "run.grace" | "client.first_byte_timeout" | "client.idle_timeout" => (MS, DAY),
        "client.connect_timeout" | "load.max_dispatch_lag" | "load.max_client_lateness" => {
            (Duration::from_micros(1), HOUR)
        }
        // Doubled per retry (at most 100): 10 min · 2^100 still fits a `Duration` once capped.
        "client.retry_backoff" => (MS, Duration::from_secs(600)),
        // A token command run more often than every 10 s would be a load of its own.
        "target.api_key_refresh" => (10 * SECOND, DAY),
        _ => (MS, 30 * DAY),
    }
}

pub use crate::text::{fmt_duration, fmt_number};

/// Durations are written the way they are read (`"1m 30s"`), for the resolved plan.
pub(super) mod humantime_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// `humantime_serde` for a duration that may be absent.
pub(super) mod humantime_serde_opt {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_written() {
        assert_eq!(fmt_number(1e300), "1e300");
        assert_eq!(fmt_number(1e-300), "1e-300");
        assert_eq!(fmt_number(4.0), "4");
        assert_eq!(fmt_number(0.5), "0.5");
        assert_eq!(fmt_number(100_000.0), "100000");
        assert_eq!(fmt_number(-2.5e20), "-2.5e20");
    }

    #[test]
    fn every_range_is_ordered_and_known_keys_have_their_own() {
        for key in ["run.snapshot_interval", "run.grace", "client.retry_backoff", "load.ramp", "x"] {
            let (lo, hi) = duration_range(key);
            assert!(lo < hi, "{key}");
        }
        assert_eq!(duration_range("run.snapshot_interval").0, SECOND);
        // The largest back-off doubled 2^32 times (the worker's saturating factor) fits.
        assert!(duration_range("client.retry_backoff").1.checked_mul(u32::MAX).is_some());
    }
}
