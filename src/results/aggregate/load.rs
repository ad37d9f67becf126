//! The load side of a level: how it was paced, the rate it achieved, and the validity check (was
//! the client able to deliver the load it planned?).

use serde::Serialize;

use super::sample::{FailureSample, Sample};
use crate::contract::nearest_rank;
use crate::request::record::timing::ms;
use crate::request::record::{ClientLoad, Issued, LevelPacing, RunInfo};

/// Below this many probes' worth of level (half a second) the p99 is the one or two worst
/// wake-ups, often the level's first burst: reported, but not judged. What counts is the time the
/// level gave the probe, not the wake-ups it got: a runtime late by more than the interval wakes
/// the probe fewer times, and that is the overload the judgement is for.
pub const MIN_LATENESS_PROBES: u64 = 100;

/// Whether a level's probe figures are judged against `load.max_client_lateness`.
fn lateness_judged(c: &ClientLoad) -> bool {
    c.probes >= MIN_LATENESS_PROBES || c.wall_ms >= MIN_LATENESS_PROBES as f64 * c.probe_interval_ms
}

/// Pacing fields written at the artifact's top level.
#[derive(Debug, Clone, Serialize)]
pub struct LoadRecord {
    /// `closed` or `open`.
    pub load_mode: &'static str,
    /// Closed loop: the level. Open loop: the in-flight cap (0 when uncapped).
    pub concurrency: u32,
    /// Open loop: planned arrivals per second.
    pub rate: Option<f64>,
    /// Open loop: `constant`, `poisson` or `gamma`.
    pub arrival: Option<&'static str>,
    pub burstiness: Option<f64>,
    /// Open loop: requests sent per second over the issuing window (the planned window — the
    /// time the planned arrivals take at the planned rate — stretched by however late the last
    /// arrival was sent).
    pub achieved_rate: Option<f64>,
    /// Open loop: arrivals in the schedule.
    pub planned_arrivals: Option<u64>,
    pub dropped_arrivals: u64,
    /// Arrivals never dispatched because the run was stopped.
    pub undispatched_arrivals: u64,
    /// Most requests in flight at once.
    pub peak_in_flight: u64,
    pub validity: Validity,
}

/// Whether the client delivered the load it planned.
#[derive(Debug, Clone, Serialize)]
pub struct Validity {
    pub valid: bool,
    pub reasons: Vec<String>,
    /// The threshold (`load.max_dispatch_lag`).
    pub max_dispatch_lag_ms: f64,
    /// Nearest-rank p99 of the client's own lateness: schedule lag minus queue wait.
    pub dispatch_lag_p99_ms: Option<f64>,
    pub schedule_lag_p99_ms: Option<f64>,
    pub queue_wait_p99_ms: Option<f64>,
    /// The threshold (`load.max_client_lateness`). These six are absent for levels recorded before
    /// the client's lateness was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_client_lateness_ms: Option<f64>,
    /// How late the client's own runtime woke a probe task that asked to be woken every
    /// `client_probe_interval_ms`: p50, p99 (HDR, 3 significant digits) and max. Every read the
    /// client stamps can be this late.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_lateness_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_lateness_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_lateness_max_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_probe_interval_ms: Option<f64>,
    /// CPU the whole process used over the level, as a share of the cores it may run on (0–1;
    /// with the embedded simulator, the simulator's CPU is included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_share: Option<f64>,
}

/// The load side of a level from its samples and what the pacing issued.
pub fn load_record(
    info: &RunInfo,
    pacing: LevelPacing,
    issued: Issued,
    records: &[Sample],
    failures: &[FailureSample],
    dropped: u64,
    client: Option<ClientLoad>,
) -> LoadRecord {
    let dispatched = (records.len() + failures.len()) as u64;
    let p99 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| nearest_rank(&v, 99))
    };
    // (schedule lag, queue wait) of every request sent, walked once per figure: one array at a
    // time, 8 bytes a request.
    let lags = || {
        records
            .iter()
            .filter_map(|r| r.schedule_lag_ms().map(|l| (l, r.queue_wait_ms().unwrap_or(0.0))))
            .chain(failures.iter().filter_map(|f| f.schedule_lag_ms().map(|l| (l, f.queue_wait_ms().unwrap_or(0.0)))))
    };
    let schedule_lag_p99_ms = p99(lags().map(|(l, _)| l).collect());
    let queue_wait_p99_ms = p99(lags().map(|(_, w)| w).collect());
    let dispatch_lag_p99_ms = p99(lags().map(|(l, w)| (l - w).max(0.0)).collect());
    let threshold_ms = info.max_dispatch_lag_ms;

    let mut reasons = Vec::new();
    if let Some(lag) = dispatch_lag_p99_ms.filter(|&l| l > threshold_ms) {
        reasons.push(format!(
            "client saturated: dispatch lag p99 {lag:.2} ms exceeds {threshold_ms} ms; the load generator, not the server, set the pace"
        ));
    }
    if let Some(wait) = queue_wait_p99_ms.filter(|&w| w > threshold_ms) {
        reasons.push(format!(
            "arrivals queued at max_in_flight: queue wait p99 {wait:.2} ms; the planned rate was not delivered on schedule"
        ));
    }
    let lateness_threshold_ms = info.max_client_lateness_ms;
    if let (Some(c), Some(threshold)) = (client, lateness_threshold_ms)
        && lateness_judged(&c)
        && c.lateness_p99_ms > threshold
    {
        reasons.push(format!(
            "client overloaded: its runtime woke tasks {:.2} ms late at p99 (max {:.2} ms; threshold {threshold} ms, load.max_client_lateness), so reads were stamped late by as much{}; run fewer streams per client, or shard the load across machines",
            c.lateness_p99_ms,
            c.lateness_max_ms,
            c.cpu_share().map(|s| format!(" (process CPU {:.0} % of its cores)", s * 100.0)).unwrap_or_default()
        ));
    }
    if dropped > 0 {
        reasons.push(format!("{dropped} arrivals dropped at max_in_flight (listed under dropped)"));
    }

    let (load_mode, concurrency, rate, arrival, burstiness, achieved_rate) = match pacing {
        LevelPacing::Closed { concurrency, .. } => ("closed", concurrency, None, None, None, None),
        LevelPacing::Open { rate, arrival, max_in_flight, .. } => {
            // The planned window, stretched by however late the last arrival was sent: on-time
            // dispatch gives exactly the planned rate, whatever the run's length.
            let planned_ms = issued.planned_window.map(ms).unwrap_or(0.0);
            let window_ms = planned_ms + last_dispatch_lateness_ms(records, failures).max(0.0);
            let achieved = (window_ms > 0.0).then(|| dispatched as f64 / (window_ms / 1000.0));
            let burstiness = match arrival {
                crate::plan::scenario::Arrival::Gamma { burstiness } => Some(burstiness),
                _ => None,
            };
            ("open", max_in_flight.unwrap_or(0), Some(rate), Some(arrival.name()), burstiness, achieved)
        }
    };
    let undispatched = issued.planned_arrivals.map_or(0, |p| p.saturating_sub(dispatched + dropped));
    LoadRecord {
        load_mode,
        concurrency,
        rate,
        arrival,
        burstiness,
        achieved_rate,
        planned_arrivals: issued.planned_arrivals,
        dropped_arrivals: dropped,
        undispatched_arrivals: undispatched,
        peak_in_flight: super::in_flight::InFlight::of(records, failures).peak(),
        validity: Validity {
            valid: reasons.is_empty(),
            reasons,
            max_dispatch_lag_ms: threshold_ms,
            dispatch_lag_p99_ms,
            schedule_lag_p99_ms,
            queue_wait_p99_ms,
            max_client_lateness_ms: lateness_threshold_ms,
            client_lateness_p50_ms: client.map(|c| c.lateness_p50_ms),
            client_lateness_p99_ms: client.map(|c| c.lateness_p99_ms),
            client_lateness_max_ms: client.map(|c| c.lateness_max_ms),
            client_probe_interval_ms: client.map(|c| c.probe_interval_ms),
            client_cpu_share: client.and_then(|c| c.cpu_share()),
        },
    }
}

/// How late the arrival with the latest intended time was sent (start − intended).
fn last_dispatch_lateness_ms(records: &[Sample], failures: &[FailureSample]) -> f64 {
    records
        .iter()
        .filter_map(|r| r.intended_offset_ms().map(|i| (i, r.start_offset_ms - i)))
        .chain(failures.iter().filter_map(|f| f.intended_offset_ms().map(|i| (i, f.start_offset_ms - i))))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(0.0, |(_, late)| late)
}
