//! GPU telemetry from NVIDIA's DCGM exporter: its fields recognised in any scraped endpoint,
//! summarised per GPU and over the level (utilisation, memory, power, SM clock, energy), and the
//! level's energy per output token.
//!
//! The field names, units and kinds are dcgm-exporter's (`etc/default-counters.csv` and
//! `etc/dcp-metrics-included.csv` in <https://github.com/NVIDIA/dcgm-exporter>); every series
//! carries `gpu` (the index on its node), `UUID`, `device`, `modelName` and `Hostname`. A GPU is
//! told apart by its host and UUID (its index when the UUID is missing), so two nodes' `gpu="0"`
//! stay two GPUs.
//!
//! **Energy over a level.** From `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (millijoules since
//! boot) when the GPU exports it: its increase from the first to the last successful scrape,
//! a counter that went backwards (the driver reloaded) counting from zero again, as the server's
//! counters do. Otherwise `DCGM_FI_DEV_POWER_USAGE` integrated over the same scrapes, each
//! reading held until the next (its time-weighted mean × the window). Which one was used is
//! written beside the figure (`energy_source`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse::Series;
use super::summary::GaugeAcc;
use crate::redact::Secrets;

/// One DCGM field this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuField {
    /// `DCGM_FI_DEV_GPU_UTIL`: time the GPU was busy over the driver's sample period, %.
    Utilization,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`: the graphics engine's active ratio, 0–1 (profiling).
    GrEngineActive,
    /// `DCGM_FI_DEV_MEM_COPY_UTIL`: memory bandwidth utilisation, %.
    MemCopyUtilization,
    /// `DCGM_FI_DEV_FB_USED`: framebuffer memory used, MiB.
    FbUsed,
    /// `DCGM_FI_DEV_FB_FREE`: framebuffer memory free, MiB.
    FbFree,
    /// `DCGM_FI_DEV_POWER_USAGE`: power draw, W.
    Power,
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`: energy since boot, mJ (a counter).
    Energy,
    /// `DCGM_FI_DEV_SM_CLOCK`: SM clock, MHz.
    SmClock,
    /// `DCGM_FI_DEV_GPU_TEMP`: GPU temperature, °C.
    Temperature,
}

/// Every DCGM field read, by its exporter name, with its unit.
pub const DCGM_FIELDS: [(&str, GpuField, &str); 9] = [
    ("DCGM_FI_DEV_GPU_UTIL", GpuField::Utilization, "%"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GpuField::GrEngineActive, "ratio"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", GpuField::MemCopyUtilization, "%"),
    ("DCGM_FI_DEV_FB_USED", GpuField::FbUsed, "MiB"),
    ("DCGM_FI_DEV_FB_FREE", GpuField::FbFree, "MiB"),
    ("DCGM_FI_DEV_POWER_USAGE", GpuField::Power, "W"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", GpuField::Energy, "mJ"),
    ("DCGM_FI_DEV_SM_CLOCK", GpuField::SmClock, "MHz"),
    ("DCGM_FI_DEV_GPU_TEMP", GpuField::Temperature, "C"),
];

/// The DCGM field a series name is, if any.
pub fn field(name: &str) -> Option<GpuField> {
    if !name.starts_with("DCGM_FI_") {
        return None;
    }
    DCGM_FIELDS.iter().find(|(n, _, _)| *n == name).map(|(_, f, _)| *f)
}

/// Where a level's energy figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The increase of `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` over the level.
    Counter,
    /// `DCGM_FI_DEV_POWER_USAGE` integrated over the scrapes.
    PowerIntegral,
    /// Some GPUs by their counter, the others by their power (level totals only).
    Mixed,
}

/// One GPU over one level. Figures are `null` when the exporter does not export their field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// The `gpu` label: the GPU's index on its node.
    pub gpu: String,
    #[serde(rename = "UUID")]
    pub uuid: Option<String>,
    #[serde(rename = "Hostname")]
    pub hostname: Option<String>,
    #[serde(rename = "modelName")]
    pub model_name: Option<String>,
    /// Successful scrapes that carried this GPU.
    pub samples: u32,
    /// Time-weighted over the scrapes, as the server's gauges.
    pub utilization_mean_pct: Option<f64>,
    pub utilization_max_pct: Option<f64>,
    pub gr_engine_active_mean: Option<f64>,
    pub memory_used_peak_mib: Option<f64>,
    /// Used + free at the last scrape.
    pub memory_total_mib: Option<f64>,
    pub power_mean_w: Option<f64>,
    pub power_max_w: Option<f64>,
    pub sm_clock_mean_mhz: Option<f64>,
    pub temperature_max_c: Option<f64>,
    pub energy_j: Option<f64>,
    pub energy_source: Option<EnergySource>,
}

/// Every GPU of one endpoint (or of the whole level) over one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTelemetry {
    pub gpu_count: usize,
    /// The mean of the GPUs' time-weighted means.
    pub utilization_mean_pct: Option<f64>,
    /// The highest one GPU reached.
    pub utilization_max_pct: Option<f64>,
    /// The highest one GPU reached.
    pub memory_used_peak_mib: Option<f64>,
    /// The sum of the GPUs' time-weighted means: what they drew together.
    pub power_mean_w: Option<f64>,
    /// The highest one GPU drew.
    pub power_max_w: Option<f64>,
    /// The sum of the GPUs' energy; `null` unless every GPU has one.
    pub energy_j: Option<f64>,
    pub energy_source: Option<EnergySource>,
    /// Level totals only: the level's output tokens as the client counted them (Σ
    /// `usage.completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Level totals only: `energy_j` ÷ `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    pub gpus: Vec<GpuSummary>,
}

impl GpuTelemetry {
    /// The totals over `gpus`, from their own summaries.
    pub fn from_gpus(gpus: Vec<GpuSummary>) -> GpuTelemetry {
        let values = |f: fn(&GpuSummary) -> Option<f64>| gpus.iter().filter_map(f).collect::<Vec<f64>>();
        let max = |f: fn(&GpuSummary) -> Option<f64>| values(f).into_iter().reduce(f64::max);
        let utilization = values(|g| g.utilization_mean_pct);
        let power = values(|g| g.power_mean_w);
        let energies = values(|g| g.energy_j);
        let all_energy = !gpus.is_empty() && energies.len() == gpus.len();
        let sources: Vec<EnergySource> = gpus.iter().filter_map(|g| g.energy_source).collect();
        let energy_source = match sources.first() {
            Some(first) if all_energy && sources.iter().all(|s| s == first) => Some(*first),
            Some(_) if all_energy => Some(EnergySource::Mixed),
            _ => None,
        };
        GpuTelemetry {
            gpu_count: gpus.len(),
            utilization_mean_pct: (!utilization.is_empty())
                .then(|| utilization.iter().sum::<f64>() / utilization.len() as f64),
            utilization_max_pct: max(|g| g.utilization_max_pct),
            memory_used_peak_mib: max(|g| g.memory_used_peak_mib),
            power_mean_w: (!power.is_empty()).then(|| power.iter().sum()),
            power_max_w: max(|g| g.power_max_w),
            energy_j: all_energy.then(|| energies.iter().sum()),
            energy_source,
            output_tokens: None,
            joules_per_output_token: None,
            gpus,
        }
    }

    /// The level's totals over several endpoints' GPUs, with its energy per output token.
    pub fn level<'a>(blocks: impl IntoIterator<Item = &'a GpuTelemetry>, output_tokens: u64) -> Option<GpuTelemetry> {
        let gpus: Vec<GpuSummary> = blocks.into_iter().flat_map(|b| b.gpus.iter().cloned()).collect();
        if gpus.is_empty() {
            return None;
        }
        let mut level = GpuTelemetry::from_gpus(gpus);
        level.output_tokens = Some(output_tokens);
        level.joules_per_output_token = level.energy_j.filter(|_| output_tokens > 0).map(|e| e / output_tokens as f64);
        Some(level)
    }

    /// The GPUs' identities through the run's sanitizer, as `raw` labels are.
    pub fn sanitized(mut self, secrets: &Secrets) -> GpuTelemetry {
        for g in &mut self.gpus {
            let clean = |v: &mut Option<String>| *v = v.as_deref().map(|s| secrets.label(s, 128));
            g.gpu = secrets.label(&g.gpu, 128);
            clean(&mut g.uuid);
            clean(&mut g.hostname);
            clean(&mut g.model_name);
        }
        self
    }
}

/// The identity a GPU is told apart by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GpuKey {
    hostname: Option<String>,
    /// The UUID, or `gpu=<index>` without one.
    id: String,
}

#[derive(Debug, Default)]
struct GpuAcc {
    gpu: String,
    uuid: Option<String>,
    model_name: Option<String>,
    samples: u32,
    gauges: BTreeMap<GpuField, GaugeAcc>,
    /// The energy counter's last value (mJ) and its increase so far.
    energy_last_mj: Option<f64>,
    energy_mj: f64,
    energy_resets: u32,
    last_fb_free: Option<f64>,
}

/// Folds the DCGM series of one endpoint's scrapes, in order.
#[derive(Debug, Default)]
pub struct GpuAccumulator {
    gpus: BTreeMap<GpuKey, GpuAcc>,
}

impl GpuAccumulator {
    /// A successful scrape taken `t_s` seconds into the level.
    pub fn ok(&mut self, t_s: f64, series: &[Series]) {
        let mut seen_this_scrape = std::collections::BTreeSet::new();
        for s in series {
            let Some(field) = field(&s.name) else { continue };
            if !s.value.is_finite() {
                continue;
            }
            let label = |name: &str| s.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            let gpu = label("gpu").unwrap_or_default();
            let uuid = label("UUID").filter(|u| !u.is_empty());
            let key = GpuKey { hostname: label("Hostname"), id: uuid.clone().unwrap_or_else(|| format!("gpu={gpu}")) };
            let acc = self.gpus.entry(key.clone()).or_insert_with(|| GpuAcc {
                gpu: gpu.clone(),
                uuid,
                model_name: label("modelName"),
                ..GpuAcc::default()
            });
            if seen_this_scrape.insert(key) {
                acc.samples += 1;
            }
            match field {
                GpuField::Energy => {
                    if let Some(before) = acc.energy_last_mj {
                        if s.value >= before {
                            acc.energy_mj += s.value - before;
                        } else {
                            acc.energy_resets += 1;
                            acc.energy_mj += s.value;
                        }
                    }
                    acc.energy_last_mj = Some(s.value);
                }
                GpuField::FbFree => {
                    acc.last_fb_free = Some(s.value);
                    push(&mut acc.gauges, field, t_s, s.value);
                }
                _ => push(&mut acc.gauges, field, t_s, s.value),
            }
        }
    }

    /// The level's GPU telemetry, or `None` when no scrape carried a DCGM field.
    pub fn finish(&self) -> Option<GpuTelemetry> {
        if self.gpus.is_empty() {
            return None;
        }
        let gpus = self
            .gpus
            .iter()
            .map(|(key, acc)| {
                let gauge = |f: GpuField| acc.gauges.get(&f).map(GaugeAcc::summary);
                let power = acc.gauges.get(&GpuField::Power);
                let (energy_j, energy_source) = if acc.energy_last_mj.is_some() {
                    (Some(acc.energy_mj / 1000.0), Some(EnergySource::Counter))
                } else if let Some(p) = power.filter(|p| p.span() > 0.0) {
                    (Some(p.area()), Some(EnergySource::PowerIntegral))
                } else {
                    (None, None)
                };
                let used = gauge(GpuField::FbUsed);
                GpuSummary {
                    gpu: acc.gpu.clone(),
                    uuid: acc.uuid.clone(),
                    hostname: key.hostname.clone(),
                    model_name: acc.model_name.clone(),
                    samples: acc.samples,
                    utilization_mean_pct: gauge(GpuField::Utilization).map(|g| g.mean),
                    utilization_max_pct: gauge(GpuField::Utilization).map(|g| g.max),
                    gr_engine_active_mean: gauge(GpuField::GrEngineActive).map(|g| g.mean),
                    memory_used_peak_mib: used.as_ref().map(|g| g.max),
                    memory_total_mib: used.as_ref().zip(acc.last_fb_free).map(|(u, free)| u.last + free),
                    power_mean_w: gauge(GpuField::Power).map(|g| g.mean),
                    power_max_w: gauge(GpuField::Power).map(|g| g.max),
                    sm_clock_mean_mhz: gauge(GpuField::SmClock).map(|g| g.mean),
                    temperature_max_c: gauge(GpuField::Temperature).map(|g| g.max),
                    energy_j,
                    energy_source,
                }
            })
            .collect();
        Some(GpuTelemetry::from_gpus(gpus))
    }
}

fn push(gauges: &mut BTreeMap<GpuField, GaugeAcc>, field: GpuField, t_s: f64, value: f64) {
    match gauges.get_mut(&field) {
        Some(acc) => acc.push(t_s, value),
        None => {
            gauges.insert(field, GaugeAcc::new(t_s, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dcgm(name: &str, gpu: &str, host: &str, value: f64) -> Series {
        Series {
            name: name.into(),
            labels: vec![
                ("gpu".into(), gpu.into()),
                ("UUID".into(), format!("GPU-{host}-{gpu}")),
                ("Hostname".into(), host.into()),
                ("modelName".into(), "NVIDIA H100 80GB HBM3".into()),
            ],
            value,
        }
    }

    fn scrape(host: &str, gpu: &str, util: f64, used: f64, power: f64, energy_mj: Option<f64>) -> Vec<Series> {
        let mut s = vec![
            dcgm("DCGM_FI_DEV_GPU_UTIL", gpu, host, util),
            dcgm("DCGM_FI_DEV_FB_USED", gpu, host, used),
            dcgm("DCGM_FI_DEV_FB_FREE", gpu, host, 81_000.0 - used),
            dcgm("DCGM_FI_DEV_POWER_USAGE", gpu, host, power),
            dcgm("DCGM_FI_DEV_SM_CLOCK", gpu, host, 1980.0),
        ];
        if let Some(e) = energy_mj {
            s.push(dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu, host, e));
        }
        s
    }

    #[test]
    fn energy_from_the_counter_per_gpu_and_over_the_level() {
        let mut acc = GpuAccumulator::default();
        acc.ok(0.0, &scrape("a", "0", 0.0, 1000.0, 100.0, Some(5_000_000.0)));
        acc.ok(1.0, &scrape("a", "0", 80.0, 60_000.0, 400.0, Some(5_300_000.0)));
        // The driver reloaded: the counter counts from zero again.
        acc.ok(3.0, &scrape("a", "0", 100.0, 70_000.0, 500.0, Some(200_000.0)));
        let t = acc.finish().expect("gpu telemetry");
        assert_eq!(t.gpu_count, 1);
        let g = &t.gpus[0];
        assert_eq!((g.gpu.as_str(), g.uuid.as_deref(), g.hostname.as_deref()), ("0", Some("GPU-a-0"), Some("a")));
        assert_eq!(g.samples, 3);
        assert_eq!(g.energy_source, Some(EnergySource::Counter));
        assert_eq!(g.energy_j, Some(300.0 + 200.0));
        // 0 % for 1 s, 80 % for 2 s.
        assert_eq!(g.utilization_mean_pct, Some(160.0 / 3.0));
        assert_eq!((g.utilization_max_pct, g.memory_used_peak_mib), (Some(100.0), Some(70_000.0)));
        assert_eq!(g.memory_total_mib, Some(81_000.0));
        assert_eq!(g.power_mean_w, Some((100.0 + 800.0) / 3.0));
        assert_eq!(g.power_max_w, Some(500.0));
        let level = GpuTelemetry::level([&t], 1000).expect("level");
        assert_eq!(level.joules_per_output_token, Some(0.5));
        assert_eq!(level.output_tokens, Some(1000));
    }

    #[test]
    fn without_the_counter_power_is_integrated_and_gpus_of_two_hosts_stay_apart() {
        let mut acc = GpuAccumulator::default();
        for (t, p) in [(0.0, 100.0), (2.0, 300.0), (4.0, 300.0)] {
            let mut s = scrape("a", "0", 50.0, 10.0, p, None);
            s.extend(scrape("b", "0", 100.0, 20.0, 2.0 * p, None));
            acc.ok(t, &s);
        }
        let t = acc.finish().expect("gpu telemetry");
        assert_eq!(t.gpu_count, 2);
        // 100 W for 2 s, then 300 W for 2 s.
        assert_eq!(t.gpus[0].energy_j, Some(800.0));
        assert_eq!(t.gpus[1].energy_j, Some(1600.0));
        assert_eq!(t.gpus[0].energy_source, Some(EnergySource::PowerIntegral));
        assert_eq!((t.energy_j, t.energy_source), (Some(2400.0), Some(EnergySource::PowerIntegral)));
        assert_eq!(t.utilization_mean_pct, Some(75.0));
        assert_eq!((t.utilization_max_pct, t.memory_used_peak_mib), (Some(100.0), Some(20.0)));
        assert_eq!((t.power_mean_w, t.power_max_w), (Some(200.0 + 400.0), Some(600.0)));
        // No output tokens: no energy per token, never a division by zero.
        assert_eq!(GpuTelemetry::level([&t], 0).expect("level").joules_per_output_token, None);
    }

    #[test]
    fn no_dcgm_field_no_telemetry_and_a_gpu_without_energy_leaves_the_total_out() {
        let mut acc = GpuAccumulator::default();
        acc.ok(0.0, &[Series { name: "node_load1".into(), labels: vec![], value: 1.0 }]);
        assert!(acc.finish().is_none());
        assert_eq!(field("DCGM_FI_DEV_GPU_UTIL"), Some(GpuField::Utilization));
        assert_eq!(field("DCGM_FI_DEV_GPU_UTILX"), None);
        let mut acc = GpuAccumulator::default();
        acc.ok(0.0, &[dcgm("DCGM_FI_DEV_GPU_UTIL", "0", "a", 10.0), dcgm("DCGM_FI_DEV_POWER_USAGE", "1", "a", 10.0)]);
        let t = acc.finish().expect("gpu telemetry");
        assert_eq!(t.gpu_count, 2);
        assert_eq!((t.energy_j, t.energy_source), (None, None));
    }
}
