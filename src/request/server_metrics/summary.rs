//! One level's scrapes folded into its summary: counter deltas (per series, so a reset of one
//! data-parallel engine is not hidden by another's growth), gauge summaries, the prefix-cache
//! hit rate and the speculative-decoding acceptance over the level.
//!
//! Counter deltas follow Prometheus' `increase()` without extrapolation: between two successive
//! successful scrapes a series adds `now − before`, or `now` when it went backwards (a reset: the
//! server restarted, so it counted `now` since). A series first seen after the level's first
//! successful scrape adds its whole value (engines create labelled children lazily, from zero).
//! Gauges are summarised by min, max, last and a time-weighted mean (each sample holds until the
//! next), over successful scrapes only.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::gpu::{GpuAccumulator, GpuTelemetry};
use super::names::{ALIASES, Engine, Kind, Norm, derive, lookup, normalise};
use super::parse::Series;

/// A gauge over one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GaugeSummary {
    pub min: f64,
    /// Time-weighted over the successful scrapes (the plain mean when there is only one).
    pub mean: f64,
    pub max: f64,
    /// The value at the end scrape (or the last successful one).
    pub last: f64,
    pub samples: u32,
}

/// Speculative decoding over one level, from the normalised counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecDecode {
    pub drafts: Option<f64>,
    pub draft_tokens: Option<f64>,
    pub accepted_tokens: f64,
    /// Accepted ÷ proposed draft tokens.
    pub acceptance_rate: Option<f64>,
    /// 1 + accepted tokens per draft: tokens emitted per target-model step, the bonus token
    /// included (vLLM's "mean acceptance length").
    pub mean_acceptance_length: Option<f64>,
}

/// The server's view of one level: the artifact's proposed `server_metrics` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelServerMetrics {
    /// Without credentials.
    pub url: String,
    pub engine: Option<Engine>,
    pub interval_ms: f64,
    /// Scrapes attempted: start, intervals, end.
    pub scrapes: u32,
    pub failed_scrapes: u32,
    /// Both the start and the end scrape succeeded, so counter deltas cover the whole level.
    pub complete: bool,
    /// From the first to the last successful scrape.
    pub window_ms: Option<f64>,
    /// Times a counter series went backwards.
    pub counter_resets: u32,
    /// Normalised counters: their increase over the level.
    pub counters: BTreeMap<Norm, f64>,
    pub gauges: BTreeMap<Norm, GaugeSummary>,
    /// Δhits ÷ Δqueries, when the engine counts both.
    pub prefix_cache_hit_rate: Option<f64>,
    pub spec_decode: Option<SpecDecode>,
    /// Normalised metrics no successful scrape carried.
    pub missing: Vec<Norm>,
    /// Lines the parser left out, over all scrapes.
    pub skipped_lines: u64,
    /// The most series one scrape left out of the scrape file (beyond the series kept per
    /// scrape); its counters and gauges were still read from all of them.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub raw_series_left_out: u64,
    /// Scrapes written without their series once the level's file reached its budget.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub raw_scrapes_over_budget: u32,
    pub first_error: Option<String>,
    /// The `<level>.server-metrics.ndjson` file name, when written.
    pub file: Option<String>,
    pub file_error: Option<String>,
    /// Several replicas scraped beside their base URLs: every replica's own summary, in order,
    /// the first (whose figures these are) included. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<LevelServerMetrics>,
    /// GPU telemetry (DCGM exporter fields) this endpoint's scrapes carried. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuTelemetry>,
    /// `target.metrics_urls`: every other endpoint's own summary, in the scenario's order. Absent
    /// without the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<LevelServerMetrics>,
    /// The level's GPU telemetry over every block that carried some (this one, its replicas and
    /// its endpoints), with the energy per output token. Absent without DCGM fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_telemetry: Option<GpuTelemetry>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl LevelServerMetrics {
    pub fn counter(&self, norm: Norm) -> Option<f64> {
        self.counters.get(&norm).copied()
    }

    /// Every block's own GPU telemetry, each once: this one's, the other replicas' and the
    /// endpoints'.
    pub fn gpu_blocks(&self) -> impl Iterator<Item = &GpuTelemetry> {
        let others = self.replicas.iter().skip(1).chain(&self.endpoints);
        self.gpu.iter().chain(others.filter_map(|b| b.gpu.as_ref()))
    }

    /// `gpu_telemetry` set from the blocks' GPUs and the level's output tokens (recomputed, so
    /// a summary rebuilt from the records gets the same).
    pub fn with_gpu_telemetry(mut self, output_tokens: u64) -> LevelServerMetrics {
        self.gpu_telemetry = GpuTelemetry::level(self.gpu_blocks(), output_tokens);
        self
    }
}

#[derive(Debug)]
pub(super) struct GaugeAcc {
    min: f64,
    max: f64,
    last: f64,
    last_t: f64,
    first_t: f64,
    area: f64,
    sum: f64,
    samples: u32,
}

impl GaugeAcc {
    pub(super) fn new(t: f64, v: f64) -> GaugeAcc {
        GaugeAcc { min: v, max: v, last: v, last_t: t, first_t: t, area: 0.0, sum: v, samples: 1 }
    }

    pub(super) fn push(&mut self, t: f64, v: f64) {
        self.area += self.last * (t - self.last_t).max(0.0);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.last = v;
        self.last_t = t;
        self.sum += v;
        self.samples += 1;
    }

    /// Seconds from the first sample to the last.
    pub(super) fn span(&self) -> f64 {
        self.last_t - self.first_t
    }

    /// The integral over [first, last] sample, each value held until the next.
    pub(super) fn area(&self) -> f64 {
        self.area
    }

    pub(super) fn summary(&self) -> GaugeSummary {
        let span = self.last_t - self.first_t;
        let mean = if span > 0.0 { self.area / span } else { self.sum / f64::from(self.samples) };
        GaugeSummary { min: self.min, mean, max: self.max, last: self.last, samples: self.samples }
    }
}

/// Where a scrape sits in the level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrapePoint {
    Start,
    Interval,
    End,
}

/// Folds the scrapes of one level, in order.
#[derive(Debug, Default)]
pub struct Accumulator {
    scrapes: u32,
    failed: u32,
    start_ok: bool,
    end_ok: bool,
    first_error: Option<String>,
    first_ok_t: Option<f64>,
    last_ok_t: Option<f64>,
    /// Last value of every counter series, by series key.
    previous: HashMap<String, f64>,
    /// Increase of every counter series, by series key, with its alias.
    increase: HashMap<String, (usize, f64)>,
    /// Aliases present in any successful scrape.
    seen: std::collections::BTreeSet<usize>,
    resets: u32,
    gauges: BTreeMap<Norm, GaugeAcc>,
    engines: BTreeMap<Engine, u32>,
    skipped_lines: u64,
    gpu: GpuAccumulator,
}

impl Accumulator {
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    /// A scrape that failed (unreachable, timed out, not the format).
    pub fn failed(&mut self, phase: ScrapePoint, error: &str) {
        self.scrapes += 1;
        self.failed += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{} scrape: {error}", phase_name(phase)));
        }
    }

    /// A successful scrape taken `t_s` seconds into the level.
    pub fn ok(&mut self, phase: ScrapePoint, t_s: f64, series: &[Series], skipped_lines: usize) {
        self.scrapes += 1;
        self.skipped_lines += skipped_lines as u64;
        match phase {
            ScrapePoint::Start => self.start_ok = true,
            ScrapePoint::End => self.end_ok = true,
            ScrapePoint::Interval => {}
        }
        let baseline = self.first_ok_t.is_none();
        self.first_ok_t.get_or_insert(t_s);
        self.last_ok_t = Some(t_s);
        for s in series {
            let Some(alias) = lookup(&s.name) else { continue };
            if ALIASES[alias].norm.kind() != Kind::Counter || !s.value.is_finite() {
                continue;
            }
            self.seen.insert(alias);
            let key = s.key();
            let added = match self.previous.get(&key) {
                Some(&before) if s.value >= before => s.value - before,
                Some(_) => {
                    self.resets += 1;
                    s.value
                }
                None if baseline => 0.0,
                None => s.value,
            };
            self.increase.entry(key.clone()).or_insert((alias, 0.0)).1 += added;
            self.previous.insert(key, s.value);
        }
        self.gpu.ok(t_s, series);
        let normalised = normalise(series);
        if let Some(engine) = normalised.engine {
            *self.engines.entry(engine).or_default() += 1;
        }
        for (norm, value) in normalised.values {
            if norm.kind() == Kind::Counter {
                continue;
            }
            match self.gauges.get_mut(&norm) {
                Some(acc) => acc.push(t_s, value),
                None => {
                    self.gauges.insert(norm, GaugeAcc::new(t_s, value));
                }
            }
        }
    }

    pub fn finish(self, url: String, interval_ms: f64) -> LevelServerMetrics {
        let mut counters = BTreeMap::new();
        for norm in Norm::ALL.into_iter().filter(|n| n.kind() == Kind::Counter) {
            // The first listed name for the metric that any scrape carried.
            let Some(&alias) = self.seen.iter().find(|&&a| ALIASES[a].norm == norm) else { continue };
            let total = self.increase.values().filter(|(a, _)| *a == alias).map(|(_, v)| v).sum::<f64>();
            counters.insert(norm, total);
        }
        derive(&mut counters);
        let gauges: BTreeMap<Norm, GaugeSummary> = self.gauges.iter().map(|(n, acc)| (*n, acc.summary())).collect();
        let missing = Norm::ALL.into_iter().filter(|n| !counters.contains_key(n) && !gauges.contains_key(n)).collect();
        let ratio = |num: Option<&f64>, den: Option<&f64>| match (num, den) {
            (Some(n), Some(d)) if *d > 0.0 => Some(n / d),
            _ => None,
        };
        let prefix_cache_hit_rate =
            ratio(counters.get(&Norm::PrefixCacheHits), counters.get(&Norm::PrefixCacheQueries));
        let spec_decode = counters.get(&Norm::SpecDecodeAcceptedTokens).map(|&accepted| {
            let drafts = counters.get(&Norm::SpecDecodeDrafts).copied();
            let draft_tokens = counters.get(&Norm::SpecDecodeDraftTokens).copied();
            SpecDecode {
                drafts,
                draft_tokens,
                accepted_tokens: accepted,
                acceptance_rate: ratio(Some(&accepted), draft_tokens.as_ref()),
                mean_acceptance_length: ratio(Some(&accepted), drafts.as_ref()).map(|per_draft| 1.0 + per_draft),
            }
        });
        LevelServerMetrics {
            replicas: Vec::new(),
            gpu: self.gpu.finish(),
            endpoints: Vec::new(),
            gpu_telemetry: None,
            url,
            engine: self.engines.iter().max_by_key(|&(e, n)| (n, std::cmp::Reverse(e))).map(|(e, _)| *e),
            interval_ms,
            scrapes: self.scrapes,
            failed_scrapes: self.failed,
            complete: self.start_ok && self.end_ok,
            window_ms: self.first_ok_t.zip(self.last_ok_t).map(|(a, b)| (b - a) * 1000.0),
            counter_resets: self.resets,
            counters,
            gauges,
            prefix_cache_hit_rate,
            spec_decode,
            missing,
            skipped_lines: self.skipped_lines,
            raw_series_left_out: 0,
            raw_scrapes_over_budget: 0,
            first_error: self.first_error,
            file: None,
            file_error: None,
        }
    }
}

pub(crate) fn phase_name(phase: ScrapePoint) -> &'static str {
    match phase {
        ScrapePoint::Start => "start",
        ScrapePoint::Interval => "interval",
        ScrapePoint::End => "end",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, engine: &str, value: f64) -> Series {
        Series { name: name.into(), labels: vec![("engine".into(), engine.into())], value }
    }

    fn finish(acc: Accumulator) -> LevelServerMetrics {
        acc.finish("http://h/metrics".into(), 1000.0)
    }

    #[test]
    fn counter_deltas_gauges_and_rates() {
        let mut acc = Accumulator::new();
        acc.ok(
            ScrapePoint::Start,
            -0.01,
            &[
                s("vllm:generation_tokens_total", "0", 1000.0),
                s("vllm:prefix_cache_queries_total", "0", 500.0),
                s("vllm:prefix_cache_hits_total", "0", 100.0),
                s("vllm:num_requests_running", "0", 0.0),
            ],
            0,
        );
        acc.ok(
            ScrapePoint::Interval,
            1.0,
            &[
                s("vllm:generation_tokens_total", "0", 1600.0),
                s("vllm:prefix_cache_queries_total", "0", 900.0),
                s("vllm:prefix_cache_hits_total", "0", 300.0),
                s("vllm:num_requests_running", "0", 4.0),
                // A lazily created child: counted from zero.
                s("vllm:num_preemptions_total", "0", 2.0),
            ],
            1,
        );
        acc.failed(ScrapePoint::Interval, "timed out after 5s");
        acc.ok(
            ScrapePoint::End,
            2.99,
            &[
                s("vllm:generation_tokens_total", "0", 1700.0),
                s("vllm:prefix_cache_queries_total", "0", 1500.0),
                s("vllm:prefix_cache_hits_total", "0", 400.0),
                s("vllm:num_requests_running", "0", 0.0),
                s("vllm:num_preemptions_total", "0", 2.0),
            ],
            0,
        );
        let m = finish(acc);
        assert_eq!((m.scrapes, m.failed_scrapes, m.complete, m.counter_resets), (4, 1, true, 0));
        assert_eq!(m.engine, Some(Engine::Vllm));
        assert_eq!(m.counter(Norm::GenerationTokens), Some(700.0));
        assert_eq!(m.counter(Norm::Preemptions), Some(2.0));
        assert_eq!(m.counter(Norm::PrefixCacheQueries), Some(1000.0));
        assert_eq!(m.prefix_cache_hit_rate, Some(0.3));
        let running = &m.gauges[&Norm::Running];
        assert_eq!((running.min, running.max, running.last, running.samples), (0.0, 4.0, 0.0, 3));
        // 0 for 1.01 s, then 4 for 1.99 s, over 3 s.
        assert!((running.mean - 4.0 * 1.99 / 3.0).abs() < 1e-9, "{}", running.mean);
        assert!((m.window_ms.expect("window") - 3000.0).abs() < 1e-9);
        assert_eq!(m.skipped_lines, 1);
        assert_eq!(m.first_error.as_deref(), Some("interval scrape: timed out after 5s"));
        assert!(m.missing.contains(&Norm::KvCacheUsage) && !m.missing.contains(&Norm::Running));
        assert_eq!(m.spec_decode, None);
    }

    #[test]
    fn a_reset_counts_from_zero_per_series() {
        let mut acc = Accumulator::new();
        acc.ok(
            ScrapePoint::Start,
            0.0,
            &[s("vllm:prompt_tokens_total", "0", 500.0), s("vllm:prompt_tokens_total", "1", 10.0)],
            0,
        );
        acc.ok(
            ScrapePoint::Interval,
            1.0,
            &[s("vllm:prompt_tokens_total", "0", 800.0), s("vllm:prompt_tokens_total", "1", 30.0)],
            0,
        );
        // Engine 0 restarted: 800 → 40. Engine 1 went on: 30 → 90. The sum (130) would hide it.
        acc.ok(
            ScrapePoint::End,
            2.0,
            &[s("vllm:prompt_tokens_total", "0", 40.0), s("vllm:prompt_tokens_total", "1", 90.0)],
            0,
        );
        let m = finish(acc);
        assert_eq!(m.counter_resets, 1);
        assert_eq!(m.counter(Norm::PromptTokens), Some(300.0 + 40.0 + 20.0 + 60.0));
    }

    #[test]
    fn a_failed_start_makes_the_level_incomplete_and_later_values_the_baseline() {
        let mut acc = Accumulator::new();
        acc.failed(ScrapePoint::Start, "connection refused");
        acc.ok(ScrapePoint::Interval, 1.0, &[s("sglang:generation_tokens_total", "0", 100.0)], 0);
        acc.ok(ScrapePoint::End, 2.0, &[s("sglang:generation_tokens_total", "0", 150.0)], 0);
        let m = finish(acc);
        assert!(!m.complete);
        assert_eq!(m.counter(Norm::GenerationTokens), Some(50.0));
        assert_eq!(m.engine, Some(Engine::Sglang));
    }

    #[test]
    fn nothing_scraped_gives_an_empty_summary() {
        let mut acc = Accumulator::new();
        acc.failed(ScrapePoint::Start, "x");
        acc.failed(ScrapePoint::End, "y");
        let m = finish(acc);
        assert!(!m.complete && m.counters.is_empty() && m.gauges.is_empty() && m.engine.is_none());
        assert_eq!(m.window_ms, None);
        assert_eq!(m.missing.len(), Norm::ALL.len());
        assert_eq!(m.first_error.as_deref(), Some("start scrape: x"));
    }

    #[test]
    fn speculative_decoding_acceptance() {
        let mut acc = Accumulator::new();
        let at = |d: f64, t: f64, a: f64| {
            vec![
                s("vllm:spec_decode_num_drafts_total", "0", d),
                s("vllm:spec_decode_num_draft_tokens_total", "0", t),
                s("vllm:spec_decode_num_accepted_tokens_total", "0", a),
            ]
        };
        acc.ok(ScrapePoint::Start, 0.0, &at(10.0, 30.0, 20.0), 0);
        acc.ok(ScrapePoint::End, 1.0, &at(110.0, 330.0, 220.0), 0);
        let spec = finish(acc).spec_decode.expect("spec decode");
        assert_eq!(spec.accepted_tokens, 200.0);
        assert_eq!(spec.acceptance_rate, Some(200.0 / 300.0));
        assert_eq!(spec.mean_acceptance_length, Some(3.0));
    }

    #[test]
    fn the_block_serializes_with_snake_case_names() {
        let mut acc = Accumulator::new();
        acc.ok(ScrapePoint::Start, 0.0, &[s("llamacpp:tokens_predicted_total", "0", 1.0)], 0);
        acc.ok(ScrapePoint::End, 1.0, &[s("llamacpp:tokens_predicted_total", "0", 5.0)], 0);
        let json = serde_json::to_value(finish(acc)).expect("serialize");
        assert_eq!(json["engine"], "llamacpp");
        assert_eq!(json["counters"]["generation_tokens"], 4.0);
        assert!(json["missing"].as_array().expect("list").iter().any(|n| n == "kv_cache_usage"));
    }

    #[test]
    fn llamacpp_cache_hits_over_a_level_give_its_hit_rate() {
        let mut acc = Accumulator::new();
        let at = |computed: f64, cached: f64| {
            vec![
                Series { name: "llamacpp:prompt_tokens_total".into(), labels: vec![], value: computed },
                Series { name: "llamacpp:prompt_tokens_cached_total".into(), labels: vec![], value: cached },
            ]
        };
        acc.ok(ScrapePoint::Start, 0.0, &at(1000.0, 500.0), 0);
        acc.ok(ScrapePoint::End, 1.0, &at(1300.0, 1400.0), 0);
        let m = finish(acc);
        assert_eq!(m.counter(Norm::PrefixCacheHits), Some(900.0));
        assert_eq!(m.counter(Norm::PrefixCacheQueries), Some(1200.0));
        assert_eq!(m.prefix_cache_hit_rate, Some(0.75));
        assert!(!m.missing.contains(&Norm::PrefixCacheHits) && !m.missing.contains(&Norm::PrefixCacheQueries));
    }
}
