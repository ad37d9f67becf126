//! The drift of a long level: the first full measurement windows against the last ones.
//!
//! Only windows that are a whole snapshot interval long and lie inside the measurement count: a
//! warm-up window (cold caches, ramping load) against a drain stub of a few seconds (arrivals
//! stopped, a handful of requests finishing) is not a drift, however large the percentage. The
//! block says which windows were compared and how many of each kind were left out, and when
//! fewer than two full measurement windows remain it says there is no drift rather than a number.

use serde::Serialize;

use super::snapshots::Window;

/// A window shorter than this share of the interval is partial (the drain stub, a cut level).
const FULL_SHARE: f64 = 0.95;

/// First against last: the drift of a long run.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    /// `first_vs_last_hour` (two hours or more of full measurement windows),
    /// `first_vs_last_10pct_windows`, or `none` (fewer than two full measurement windows: every
    /// change is null).
    pub basis: &'static str,
    pub windows_compared: usize,
    pub ttft_p50_ms: Change,
    pub ttft_p99_ms: Change,
    pub tpot_p50_ms: Change,
    pub tpot_p99_ms: Change,
    pub throughput_tok_s: Change,
    /// The length of a full window (the snapshot interval), in seconds.
    pub window_s: f64,
    /// Full windows inside the measurement: the ones drift may compare.
    pub measurement_windows: usize,
    /// `[start_s, end_s]` from the first to the last of them; null when there is none. Windows
    /// before it are warm-up, after it drain (what a plot shades).
    pub measurement_span_s: Option<[f64; 2]>,
    /// `[start_s, end_s]` of the windows compared at the start and at the end (from the level
    /// start); null when there is no drift.
    pub first_span_s: Option<[f64; 2]>,
    pub last_span_s: Option<[f64; 2]>,
    /// Windows left out, by why.
    pub excluded_windows: Excluded,
}

/// Windows drift leaves out. A window that is both partial and drain counts once, as drain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Excluded {
    /// Starting before the time-based warm-up ended.
    pub warmup: usize,
    /// Ending after issuing stopped or the time-based cool-down began.
    pub drain: usize,
    /// Shorter than the interval, inside the measurement.
    pub partial: usize,
}

/// Mean of the per-window values at the start and at the end, and the change in percent.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub first: Option<f64>,
    pub last: Option<f64>,
    pub change_pct: Option<f64>,
}

/// Where the measurement lies in level time, in milliseconds from the level start.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    /// Time-based warm-up: requests sent before this are warm-up.
    pub from_ms: Option<f64>,
    /// Issuing stopped (or the time-based cool-down began) here; later windows are drain.
    pub until_ms: Option<f64>,
}

/// The drift over `windows`, or `None` when there are fewer than two windows at all.
pub fn drift(windows: &[Window], measured: Measured) -> Option<Drift> {
    if windows.len() < 2 {
        return None;
    }
    let window_s = windows.iter().map(|w| w.end_s - w.start_s).fold(0.0, f64::max);
    // Window ends fall on ticks a few milliseconds after the boundary they stand for.
    let slack_s = window_s * (1.0 - FULL_SHARE);
    let mut excluded = Excluded::default();
    let mut full: Vec<&Window> = Vec::new();
    for w in windows {
        if measured.from_ms.is_some_and(|t| w.start_s * 1000.0 < t - slack_s * 1000.0) {
            excluded.warmup += 1;
        } else if measured.until_ms.is_some_and(|t| w.end_s * 1000.0 > t + slack_s * 1000.0) {
            excluded.drain += 1;
        } else if w.end_s - w.start_s < window_s * FULL_SHARE {
            excluded.partial += 1;
        } else {
            full.push(w);
        }
    }
    let (basis, first, last): (&'static str, &[&Window], &[&Window]) = if full.len() < 2 {
        ("none", &[], &[])
    } else if full.last().map_or(0.0, |w| w.end_s) - full[0].start_s >= 7200.0 {
        let (start, end) = (full[0].start_s, full.last().map_or(0.0, |w| w.end_s));
        let a = full.iter().take_while(|w| w.end_s <= start + 3600.0 + slack_s).count();
        let b = full.iter().rev().take_while(|w| w.start_s >= end - 3600.0 - slack_s).count();
        ("first_vs_last_hour", &full[..a], &full[full.len() - b..])
    } else {
        let n = (full.len() / 10).max(1);
        ("first_vs_last_10pct_windows", &full[..n], &full[full.len() - n..])
    };
    let change = |f: fn(&Window) -> Option<f64>| {
        let mean = |ws: &[&Window]| {
            let v: Vec<f64> = ws.iter().filter_map(|w| f(w)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let (a, b) = (mean(first), mean(last));
        Change { first: a, last: b, change_pct: a.zip(b).filter(|(a, _)| *a > 0.0).map(|(a, b)| (b - a) / a * 100.0) }
    };
    let span = |ws: &[&Window]| Some([ws.first()?.start_s, ws.last()?.end_s]);
    Some(Drift {
        basis,
        windows_compared: first.len().min(last.len()),
        ttft_p50_ms: change(|w| w.ttft_p50_ms),
        ttft_p99_ms: change(|w| w.ttft_p99_ms),
        tpot_p50_ms: change(|w| w.tpot_p50_ms),
        tpot_p99_ms: change(|w| w.tpot_p99_ms),
        throughput_tok_s: change(|w| Some(w.throughput_tok_s)),
        window_s,
        measurement_windows: full.len(),
        measurement_span_s: span(&full),
        first_span_s: span(first),
        last_span_s: span(last),
        excluded_windows: excluded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start_s: f64, end_s: f64, throughput: f64) -> Window {
        let mut w: Window = serde_json::from_value(serde_json::json!({
            "level": "l", "start_s": start_s, "end_s": end_s, "completed": 1, "failed": 0, "errors": {},
            "output_tokens": 1, "request_rate": 1.0, "throughput_tok_s": throughput, "ttft_p50_ms": 10.0,
            "ttft_p99_ms": 20.0, "tpot_p50_ms": 1.0, "tpot_p99_ms": 2.0, "e2e_p50_ms": 30.0, "e2e_p99_ms": 40.0,
            "schedule_lag_p99_ms": null, "in_flight": 1, "cache_hit_rate": null, "total_completed": 1,
            "total_failed": 0
        }))
        .unwrap();
        w.throughput_tok_s = throughput;
        w
    }

    #[test]
    fn warm_up_and_the_drain_stub_are_left_out_of_the_comparison() {
        // Warm-up 0–10 s, issuing stops at 40 s, a 2.8 s drain stub.
        let ws = [
            window(0.0, 10.0, 50.0),
            window(10.0, 20.0, 100.0),
            window(20.0, 30.0, 100.0),
            window(30.0, 40.0, 110.0),
            window(40.0, 42.8, 400.0),
        ];
        let d = drift(&ws, Measured { from_ms: Some(10_000.0), until_ms: Some(40_000.0) }).unwrap();
        assert_eq!(d.basis, "first_vs_last_10pct_windows");
        assert_eq!((d.excluded_windows.warmup, d.excluded_windows.drain, d.measurement_windows), (1, 1, 3));
        assert_eq!((d.first_span_s, d.last_span_s), (Some([10.0, 20.0]), Some([30.0, 40.0])));
        assert!((d.throughput_tok_s.change_pct.unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn fewer_than_two_full_windows_give_no_number() {
        let ws = [window(0.0, 10.0, 50.0), window(10.0, 20.0, 100.0), window(20.0, 22.8, 400.0)];
        let d = drift(&ws, Measured { from_ms: Some(10_000.0), until_ms: None }).unwrap();
        assert_eq!((d.basis, d.windows_compared, d.measurement_windows), ("none", 0, 1));
        assert_eq!((d.excluded_windows.warmup, d.excluded_windows.partial), (1, 1));
        assert!(d.throughput_tok_s.change_pct.is_none() && d.first_span_s.is_none());
    }
}
