//! The keys of the artifact's `metrics` map that are not a distribution's statistic.

use super::Worse;

/// Every key of `metrics` that is not a distribution's statistic: totals, rates and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    OutputTokens,
    PromptTokens,
    PromptTokenSamples,
    ContentChunks,
    ReasoningChunks,
    /// Reserved by the contract with no published definition: always null.
    ContentChunksS,
    ThroughputTokS,
    RequestThroughputRps,
    MeasurementWindowMs,
    WindowThroughputTokS,
    GoodputRequests,
    GoodputRps,
    /// An object: output tokens by where their count came from.
    OutputTokenSources,
    PrefixCacheHitAvg,
    PrefixCacheHitSamples,
    RequestCanarySamples,
    RequestCanaryPassed,
    ControlledOutputSamples,
    ControlledOutputExactAdherence,
    ControlledOutputExactAdherenceRate,
    ControlledOutputUnobservable,
    ControlledOutputTruncated,
    PromptSizingErrorPctMean,
    PromptSizingErrorPctMax,
    PromptSizingErrorPctBias,
    PromptSizingSamples,
    /// A boolean: the wall-clock throughput compares across runs.
    ThroughputPerformanceEligible,
    /// APIs that do not stream (embeddings, rerank): eligible prompt tokens over the wall clock.
    InputThroughputTokS,
}

impl Total {
    /// Every key, in the order the artifact's `metrics` block is built.
    pub const ALL: [Total; 28] = [
        Total::OutputTokens,
        Total::PromptTokens,
        Total::PromptTokenSamples,
        Total::ContentChunks,
        Total::ReasoningChunks,
        Total::ContentChunksS,
        Total::ThroughputTokS,
        Total::RequestThroughputRps,
        Total::MeasurementWindowMs,
        Total::WindowThroughputTokS,
        Total::GoodputRequests,
        Total::GoodputRps,
        Total::OutputTokenSources,
        Total::PrefixCacheHitAvg,
        Total::PrefixCacheHitSamples,
        Total::RequestCanarySamples,
        Total::RequestCanaryPassed,
        Total::ControlledOutputSamples,
        Total::ControlledOutputExactAdherence,
        Total::ControlledOutputExactAdherenceRate,
        Total::ControlledOutputUnobservable,
        Total::ControlledOutputTruncated,
        Total::PromptSizingErrorPctMean,
        Total::PromptSizingErrorPctMax,
        Total::PromptSizingErrorPctBias,
        Total::PromptSizingSamples,
        Total::ThroughputPerformanceEligible,
        Total::InputThroughputTokS,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Total::OutputTokens => "output_tokens",
            Total::PromptTokens => "prompt_tokens",
            Total::PromptTokenSamples => "prompt_token_samples",
            Total::ContentChunks => "content_chunks",
            Total::ReasoningChunks => "reasoning_chunks",
            Total::ContentChunksS => "content_chunks_s",
            Total::ThroughputTokS => "throughput_tok_s",
            Total::RequestThroughputRps => "request_throughput_rps",
            Total::MeasurementWindowMs => "measurement_window_ms",
            Total::WindowThroughputTokS => "window_throughput_tok_s",
            Total::GoodputRequests => "goodput_requests",
            Total::GoodputRps => "goodput_rps",
            Total::OutputTokenSources => "output_token_sources",
            Total::PrefixCacheHitAvg => "prefix_cache_hit_avg",
            Total::PrefixCacheHitSamples => "prefix_cache_hit_samples",
            Total::RequestCanarySamples => "request_canary_samples",
            Total::RequestCanaryPassed => "request_canary_passed",
            Total::ControlledOutputSamples => "controlled_output_samples",
            Total::ControlledOutputExactAdherence => "controlled_output_exact_adherence",
            Total::ControlledOutputExactAdherenceRate => "controlled_output_exact_adherence_rate",
            Total::ControlledOutputUnobservable => "controlled_output_unobservable",
            Total::ControlledOutputTruncated => "controlled_output_truncated",
            Total::PromptSizingErrorPctMean => "prompt_sizing_error_pct_mean",
            Total::PromptSizingErrorPctMax => "prompt_sizing_error_pct_max",
            Total::PromptSizingErrorPctBias => "prompt_sizing_error_pct_bias",
            Total::PromptSizingSamples => "prompt_sizing_samples",
            Total::ThroughputPerformanceEligible => "throughput_performance_eligible",
            Total::InputThroughputTokS => "input_throughput_tok_s",
        }
    }

    /// Which way a rate gets worse (throughputs: when they fall); `None` for counts and the
    /// rest, which no direction judges.
    pub fn worse(self) -> Option<Worse> {
        match self {
            Total::ThroughputTokS
            | Total::RequestThroughputRps
            | Total::WindowThroughputTokS
            | Total::GoodputRps
            | Total::InputThroughputTokS => Some(Worse::WhenLower),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_schema_names_every_total() {
        let schema = crate::contract::tests::committed_schema();
        let properties = schema["$defs"]["metrics"]["properties"].as_object().unwrap();
        for t in Total::ALL {
            assert!(properties.contains_key(t.key()), "{t:?}");
        }
    }
}
