//! `timing_methodology`: what each number means, stated the way the code computes it. Keep it in
//! step with `worker` and `aggregate`; docs/artifact.md quotes the same definitions.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct TimingMethodology {
    pub clock: &'static str,
    pub artifact_timestamps: &'static str,
    pub ttft: &'static str,
    pub time_to_first_output: &'static str,
    pub e2e: &'static str,
    pub generation: &'static str,
    pub tpot: &'static str,
    pub mean_inter_token_latency: &'static str,
    pub decode: &'static str,
    pub effective_prefill: &'static str,
    pub throughput: &'static str,
    pub distributions: &'static str,
    pub p99: &'static str,
    pub request_canaries: &'static str,
    pub controlled_output: &'static str,
    pub stale_connections: &'static str,
    pub itl_chunk: &'static str,
    pub itl_token: &'static str,
    pub tokens_per_chunk: &'static str,
    pub max_stall: &'static str,
    pub tpot_corrected: &'static str,
    pub gap_percentiles: &'static str,
}

pub const METHODOLOGY: TimingMethodology = TimingMethodology {
    clock: "client monotonic clock (tokio Instant over CLOCK_MONOTONIC); request start is taken immediately before the HTTP request is handed to the connection pool; each socket read is timestamped once, before parsing",
    artifact_timestamps: "SystemTime Unix timestamps in nanoseconds; independent artifacts may align them only when the operator supplied the same explicit clock_domain_id",
    ttft: "request start through the first non-empty streamed content delta",
    time_to_first_output: "request start through the first non-empty streamed reasoning or content delta",
    e2e: "request start through the read that delivered data: [DONE]",
    generation: "client-observed E2E minus time to first output",
    tpot: "client-observed mean time per output token after the first output; identical to the legacy mean_inter_token_latency key",
    mean_inter_token_latency: "legacy key for a TPOT proxy: client-observed generation time divided by completion tokens after the first token; not raw per-token ITL",
    decode: "usage completion tokens after the first token divided by client-observed generation time; completion tokens may include reasoning tokens",
    effective_prefill: "usage.prompt_tokens divided by client-observed time to first output; includes queueing, scheduling, prefill, and first-token work",
    throughput: "output tokens of performance-eligible requests divided by the level's wall clock (first request start to the end of the last request)",
    distributions: "request-level mean, sample standard deviation, normal-approximation 95% confidence interval for the mean, min, p25, p50, p75, p90, p95, p99, and max using the nearest-rank percentile method",
    p99: "numeric nearest-rank p99 is always retained for compatibility; it is descriptive only below 100 eligible samples",
    request_canaries: "when enabled, each response must begin with its own synthetic marker and contain no other ANVIL_REQ marker; bounded/truncated captures fail closed and are excluded from performance metrics",
    controlled_output: "response-word adherence is recorded only when response_words is set; visible response capture is capped at 8192 characters",
    stale_connections: "a send that fails because a pooled connection was already closed by the server is repeated once on a new connection; the clock restarts and the retry is counted per request",
    itl_chunk: "every gap between consecutive output chunks (non-empty reasoning or content deltas, each stamped with the read that delivered it; chunks in one read have a zero gap) of every performance-eligible request, one sample per gap; comparable with vLLM's benchmark ITL, which is per chunk",
    itl_token: "every such gap divided by the tokens its chunk delivered: from per-chunk cumulative usage.completion_tokens when the server sends it on every chunk (stream_options.continuous_usage_stats), else divided by the request's mean tokens per chunk (output tokens / output chunks)",
    tokens_per_chunk: "per request: tokens streamed (per-chunk usage; else output tokens) divided by output chunks",
    max_stall: "per request: the longest gap between two output chunks, what a per-request mean hides",
    tpot_corrected: "per request, only with per-chunk usage counts: generation time divided by (tokens streamed minus the first output chunk's tokens); tpot divides by (output tokens - 1), which understates the time per token by (N - k)/(N - 1) when the first chunk carries k > 1 tokens, and further when usage counts tokens that were never streamed",
    gap_percentiles: "itl_chunk and itl_token: each request's gaps are kept in its record as a sparse HDR histogram ([value_us, count], 2 significant digits, each value the middle of its bucket, within 0.4% of the gaps it stands for); the level's histograms merge the eligible requests' and give nearest-rank percentiles, mean and standard deviation over the bucket values. tokens_per_chunk, max_stall and tpot_corrected are exact per-request samples (nearest-rank)",
};

impl TimingMethodology {
    pub fn current() -> Self {
        METHODOLOGY
    }
}
