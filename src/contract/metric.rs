//! The distributions the artifact summarises (`Metric`), the statistics it states of each
//! (`Stat`), the key that joins them in the flat `metrics` map (`metric_key`), and what a
//! percentile is (`nearest_rank`).

use super::Worse;

/// A per-request distribution the artifact summarises, with its key stem in `metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    CompletionTokens,
    PromptTokens,
    DecodeTokS,
    EffectivePrefillTokS,
    /// Legacy name of TPOT (same values).
    MeanInterTokenLatency,
    E2e,
    Generation,
    TimeToFirstOutput,
    /// Legacy name of TPOT (same values).
    MeanTimePerOutputToken,
    Tpot,
    Ttft,
    /// Open loop: TTFT plus schedule lag.
    TtftFromIntended,
    /// Open loop: e2e plus schedule lag.
    E2eFromIntended,
    /// Open loop: every request sent, eligible or not.
    ScheduleLag,
    /// Open loop with an in-flight cap: every request sent.
    QueueWait,
    /// Per request: output tokens per output chunk.
    TokensPerChunk,
    /// Per request: the longest gap between output chunks.
    MaxStall,
    /// Per request, with per-chunk counts: TPOT without the first chunk's tokens.
    TpotCorrected,
    /// Every gap between output chunks of eligible requests (HDR, see `record::gaps`).
    ItlChunk,
    /// Every such gap divided by the tokens its chunk delivered (HDR).
    ItlToken,
}

impl Metric {
    /// Every metric, in declaration order (so `ALL[m.index()] == m`).
    pub const ALL: [Metric; 20] = [
        Metric::CompletionTokens,
        Metric::PromptTokens,
        Metric::DecodeTokS,
        Metric::EffectivePrefillTokS,
        Metric::MeanInterTokenLatency,
        Metric::E2e,
        Metric::Generation,
        Metric::TimeToFirstOutput,
        Metric::MeanTimePerOutputToken,
        Metric::Tpot,
        Metric::Ttft,
        Metric::TtftFromIntended,
        Metric::E2eFromIntended,
        Metric::ScheduleLag,
        Metric::QueueWait,
        Metric::TokensPerChunk,
        Metric::MaxStall,
        Metric::TpotCorrected,
        Metric::ItlChunk,
        Metric::ItlToken,
    ];

    /// The key stem in `metrics` (`ttft` gives `ttft_p99_ms`).
    pub fn stem(self) -> &'static str {
        match self {
            Metric::CompletionTokens => "completion_tokens",
            Metric::PromptTokens => "prompt_tokens",
            Metric::DecodeTokS => "decode_tok_s",
            Metric::EffectivePrefillTokS => "effective_prefill_tok_s",
            Metric::MeanInterTokenLatency => "mean_inter_token_latency_ms",
            Metric::E2e => "e2e",
            Metric::Generation => "generation",
            Metric::TimeToFirstOutput => "time_to_first_output",
            Metric::MeanTimePerOutputToken => "mean_time_per_output_token",
            Metric::Tpot => "tpot",
            Metric::Ttft => "ttft",
            Metric::TtftFromIntended => "ttft_from_intended",
            Metric::E2eFromIntended => "e2e_from_intended",
            Metric::ScheduleLag => "schedule_lag",
            Metric::QueueWait => "queue_wait",
            Metric::TokensPerChunk => "tokens_per_chunk",
            Metric::MaxStall => "max_stall",
            Metric::TpotCorrected => "tpot_corrected",
            Metric::ItlChunk => "itl_chunk",
            Metric::ItlToken => "itl_token",
        }
    }

    /// Whether the statistic keys end in `_ms` (`ttft_p99_ms`; the legacy
    /// `mean_inter_token_latency_ms` carries its unit in the stem).
    pub fn ms_suffix(self) -> bool {
        !matches!(
            self,
            Metric::CompletionTokens
                | Metric::PromptTokens
                | Metric::DecodeTokS
                | Metric::EffectivePrefillTokS
                | Metric::MeanInterTokenLatency
                | Metric::TokensPerChunk
        )
    }

    /// Which way the metric gets worse; `None` for the shape of the work (token counts, tokens
    /// per chunk), which no direction judges.
    pub fn worse(self) -> Option<Worse> {
        match self {
            Metric::DecodeTokS | Metric::EffectivePrefillTokS => Some(Worse::WhenLower),
            Metric::CompletionTokens | Metric::PromptTokens | Metric::TokensPerChunk => None,
            Metric::MeanInterTokenLatency
            | Metric::E2e
            | Metric::Generation
            | Metric::TimeToFirstOutput
            | Metric::MeanTimePerOutputToken
            | Metric::Tpot
            | Metric::Ttft
            | Metric::TtftFromIntended
            | Metric::E2eFromIntended
            | Metric::ScheduleLag
            | Metric::QueueWait
            | Metric::MaxStall
            | Metric::TpotCorrected
            | Metric::ItlChunk
            | Metric::ItlToken => Some(Worse::WhenHigher),
        }
    }

    /// Its place in [`Metric::ALL`], for tables indexed by metric.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A statistic of a distribution, as the artifact names it (`metrics`, and every summary block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Mean,
    /// Sample standard deviation (n − 1).
    Stddev,
    /// The normal-approximation 95 % confidence interval of the mean.
    MeanCi95Low,
    MeanCi95High,
    Min,
    P25,
    P50,
    P75,
    P90,
    P95,
    P99,
    Max,
    /// How many values the distribution holds (a count: never `_ms`, 0 when empty).
    Samples,
}

impl Stat {
    /// Every statistic a distribution reports.
    pub const ALL: [Stat; 13] = [
        Stat::Mean,
        Stat::Stddev,
        Stat::MeanCi95Low,
        Stat::MeanCi95High,
        Stat::Min,
        Stat::P25,
        Stat::P50,
        Stat::P75,
        Stat::P90,
        Stat::P95,
        Stat::P99,
        Stat::Max,
        Stat::Samples,
    ];

    /// The nearest-rank percentiles a distribution reports, in order.
    pub const PERCENTILES: [Stat; 6] = [Stat::P25, Stat::P50, Stat::P75, Stat::P90, Stat::P95, Stat::P99];

    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Stddev => "stddev",
            Stat::MeanCi95Low => "mean_ci95_low",
            Stat::MeanCi95High => "mean_ci95_high",
            Stat::Min => "min",
            Stat::P25 => "p25",
            Stat::P50 => "p50",
            Stat::P75 => "p75",
            Stat::P90 => "p90",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::Max => "max",
            Stat::Samples => "samples",
        }
    }

    /// The percentile a percentile statistic stands for (`P99` is 99).
    pub const fn percentile(self) -> Option<u32> {
        match self {
            Stat::P25 => Some(25),
            Stat::P50 => Some(50),
            Stat::P75 => Some(75),
            Stat::P90 => Some(90),
            Stat::P95 => Some(95),
            Stat::P99 => Some(99),
            Stat::Mean
            | Stat::Stddev
            | Stat::MeanCi95Low
            | Stat::MeanCi95High
            | Stat::Min
            | Stat::Max
            | Stat::Samples => None,
        }
    }
}

/// What `pNN` means wherever the program states or tests a percentile (the artifact's
/// `timing_methodology.distributions` says so): the 1-based rank of percentile `p` among `n`
/// ordered values by the nearest-rank rule, ⌈p/100 · n⌉, at least 1 and at most `n`, so every
/// percentile is an observed value. Integer arithmetic avoids float rounding at exact ranks (p99
/// of 100 samples is rank 99).
pub fn nearest_rank_position(p: u32, n: u64) -> u64 {
    (u64::from(p) * n).div_ceil(100).clamp(1, n.max(1))
}

/// Nearest-rank percentile of sorted values (see [`nearest_rank_position`]). `sorted` must be
/// non-empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: u32) -> T {
    sorted[nearest_rank_position(p, sorted.len() as u64) as usize - 1]
}

/// The key of one statistic in `metrics`: `ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`.
pub fn metric_key(metric: Metric, stat: Stat) -> String {
    let unit = if metric.ms_suffix() && stat != Stat::Samples { "_ms" } else { "" };
    format!("{}_{}{unit}", metric.stem(), stat.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_the_contract_spells_them() {
        assert_eq!(metric_key(Metric::Ttft, Stat::P99), "ttft_p99_ms");
        assert_eq!(metric_key(Metric::DecodeTokS, Stat::P50), "decode_tok_s_p50");
        assert_eq!(metric_key(Metric::E2e, Stat::Samples), "e2e_samples");
        assert_eq!(metric_key(Metric::MeanInterTokenLatency, Stat::Mean), "mean_inter_token_latency_ms_mean");
        assert_eq!(Stat::PERCENTILES.map(|s| s.percentile()), [25, 50, 75, 90, 95, 99].map(Some));
    }

    #[test]
    fn nearest_rank_matches_the_definition() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), 99.0);
        assert_eq!(nearest_rank(&v, 50), 50.0);
        let six = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        // ⌈0.25·6⌉ = 2, ⌈0.5·6⌉ = 3, ⌈0.75·6⌉ = 5, ⌈0.9·6⌉ = 6.
        assert_eq!([25, 50, 75, 90, 99].map(|p| nearest_rank(&six, p)), [2.0, 3.0, 5.0, 6.0, 6.0]);
        assert_eq!(nearest_rank(&[7.0], 1), 7.0);
        assert_eq!(nearest_rank(&[3u32, 5, 8], 99), 8);
        assert_eq!(
            (nearest_rank_position(0, 10), nearest_rank_position(100, 10), nearest_rank_position(101, 10)),
            (1, 10, 10)
        );
    }

    #[test]
    fn the_committed_schema_names_every_statistic() {
        let schema = crate::contract::tests::committed_schema();
        let metrics = &schema["$defs"]["metrics"];
        let patterns = metrics["patternProperties"].as_object().unwrap();
        let stats = patterns.keys().find(|k| k.contains("mean_ci95_low")).unwrap();
        let named: Vec<&str> = Stat::ALL.iter().filter(|&&s| s != Stat::Samples).map(|s| s.name()).collect();
        assert_eq!(crate::contract::tests::alternatives(stats), named);
        assert!(patterns.contains_key("_samples$"));
        let required: Vec<&str> = metrics["required"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        for m in Metric::ALL {
            assert_eq!(Metric::ALL[m.index()], m);
            // The families after `queue_wait` came after the list of required keys; their keys
            // follow the same patterns.
            if m <= Metric::QueueWait {
                for stat in Stat::ALL {
                    assert!(required.contains(&metric_key(m, stat).as_str()), "{m:?} {stat:?}");
                }
            }
        }
    }
}
