//! `GET /dcgm/metrics`: a simulated GPU in NVIDIA's DCGM exporter's names and labels
//! (dcgm-exporter `etc/default-counters.csv`, <https://github.com/NVIDIA/dcgm-exporter>), driven
//! by the simulator's own load, so a client's GPU telemetry can be checked against what the
//! simulator served. One GPU of [`SLOTS`] batch slots:
//!
//! | field | value |
//! |---|---|
//! | `DCGM_FI_DEV_GPU_UTIL` (%) | 100 × busy slots ÷ [`SLOTS`] (busy: requests in flight, at most [`SLOTS`]) |
//! | `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio) | utilisation ÷ 100 |
//! | `DCGM_FI_DEV_MEM_COPY_UTIL` (%) | utilisation ÷ 2 |
//! | `DCGM_FI_DEV_FB_USED` / `_FB_FREE` (MiB) | [`WEIGHTS_MIB`] + [`KV_MIB_PER_SLOT`] × busy slots; [`FB_TOTAL_MIB`] − used |
//! | `DCGM_FI_DEV_POWER_USAGE` (W) | [`IDLE_W`] + [`W_PER_SLOT`] × busy slots |
//! | `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ) | [`MJ_PER_OUTPUT_TOKEN`] × every output token served since start |
//! | `DCGM_FI_DEV_SM_CLOCK` (MHz) | 1980 with a busy slot, 345 idle |
//! | `DCGM_FI_DEV_GPU_TEMP` (°C) | 35 + 5 × busy slots |
//!
//! The energy counter follows the tokens, not the power gauge: a level's energy is then exactly
//! [`MJ_PER_OUTPUT_TOKEN`] ÷ 1000 J per output token the simulator counted, whatever the
//! scrapes' timing, which is what a test can compare with. Like a GPU's, it never resets (a
//! simulated engine restart leaves it counting).

use std::fmt::Write as _;

use super::stats::MockStatsSnapshot;

/// Batch slots of the simulated GPU.
pub const SLOTS: u64 = 8;
/// Energy per output token the counter adds, in millijoules (0.5 J).
pub const MJ_PER_OUTPUT_TOKEN: u64 = 500;
/// Power drawn with no slot busy, W.
pub const IDLE_W: f64 = 70.0;
/// Power each busy slot adds, W.
pub const W_PER_SLOT: f64 = 40.0;
/// An H100 80GB's framebuffer, MiB.
pub const FB_TOTAL_MIB: u64 = 81_559;
/// The model's weights, MiB.
pub const WEIGHTS_MIB: u64 = 20_480;
/// KV cache per busy slot, MiB.
pub const KV_MIB_PER_SLOT: u64 = 1_024;

const LABELS: &str = "gpu=\"0\",UUID=\"GPU-a5f1a5f1-0000-4000-8000-000000000000\",device=\"nvidia0\",\
modelName=\"anvil-sim GPU\",Hostname=\"anvil-sim\"";

/// The body `GET /dcgm/metrics` serves for these counters.
pub fn render(s: &MockStatsSnapshot) -> String {
    let busy = s.active_requests.min(SLOTS);
    let util = 100 * busy / SLOTS;
    let used = WEIGHTS_MIB + KV_MIB_PER_SLOT * busy;
    let power = IDLE_W + W_PER_SLOT * busy as f64;
    let mut out = String::with_capacity(2048);
    let mut field = |name: &str, kind: &str, help: &str, value: String| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{LABELS}}} {value}\n");
    };
    field(
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency (in MHz).",
        (if busy > 0 { 1980 } else { 345 }).to_string(),
    );
    field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", (35 + 5 * busy).to_string());
    field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", format!("{power:.3}"));
    field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        (MJ_PER_OUTPUT_TOKEN * s.completion_tokens).to_string(),
    );
    field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", util.to_string());
    field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", (util / 2).to_string());
    field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", (FB_TOTAL_MIB - used).to_string());
    field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", used.to_string());
    field(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        format!("{:.6}", util as f64 / 100.0),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_follows_the_load() {
        let idle = render(&MockStatsSnapshot::default());
        assert!(
            idle.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a5f1a5f1-0000-4000-8000-000000000000\""),
            "{idle}"
        );
        assert!(
            idle.contains("} 0\n") && idle.contains("DCGM_FI_DEV_FB_USED{") && idle.contains("} 20480\n"),
            "{idle}"
        );
        let busy = render(&MockStatsSnapshot { active_requests: 12, completion_tokens: 1000, ..Default::default() });
        let value = |name: &str| {
            busy.lines()
                .find(|l| l.starts_with(&format!("{name}{{")))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_string)
        };
        assert_eq!(value("DCGM_FI_DEV_GPU_UTIL").as_deref(), Some("100"));
        assert_eq!(value("DCGM_FI_DEV_POWER_USAGE").as_deref(), Some("390.000"));
        assert_eq!(value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").as_deref(), Some("500000"));
        assert_eq!(value("DCGM_FI_DEV_FB_USED").as_deref(), Some("28672"));
    }
}
