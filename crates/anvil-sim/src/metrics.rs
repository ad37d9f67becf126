//! `GET /metrics`: the simulator's counters in the Prometheus text format, under vLLM's names or
//! llama.cpp's (`Profile::metrics_names`), so a scraper is tested against real names and its
//! counter deltas can be compared exactly with `/mock/stats`.
//!
//! Every counter is one of `MockStats`' counts since the last simulated restart (a restarted
//! engine counts from zero again):
//!
//! | vLLM (`vllm/v1/metrics/loggers.py`) | llama.cpp (`tools/server/README.md`) | `MockStats` |
//! |---|---|---|
//! | `vllm:num_requests_running` | `llamacpp:requests_processing` | `active_requests` |
//! | `vllm:num_requests_waiting` | `llamacpp:requests_deferred` | 0: the simulator never queues |
//! | `vllm:prompt_tokens_total` | — | `prompt_tokens` |
//! | — | `llamacpp:prompt_tokens_total` | `prompt_tokens − cached_tokens`: llama.cpp counts evaluated tokens |
//! | — | `llamacpp:prompt_tokens_cached_total` | `cached_tokens` (ggml-org/llama.cpp#26920) |
//! | `vllm:generation_tokens_total` | `llamacpp:tokens_predicted_total` | `completion_tokens` |
//! | `vllm:request_success_total` | — | `requests_completed` |
//! | `vllm:num_preemptions_total` | — | 0: nothing is preempted |
//! | `vllm:prefix_cache_queries_total` | — | `prompt_tokens` (with the prefix cache on) |
//! | `vllm:prefix_cache_hits_total` | — | `cached_tokens` (with the prefix cache on) |
//!
//! vLLM's `request_success_total` carries a `finished_reason` label the simulator does not
//! track, so it is left out; there is no KV-cache gauge because nothing models KV memory.

use std::fmt::Write as _;

use super::profile::{MetricsNames, Profile};
use super::request::DEFAULT_MODEL;
use super::stats::MockStatsSnapshot;

/// Draft tokens a speculative profile proposes per step (its chunks carry at most this + 1).
const SPEC_DRAFT_TOKENS: u64 = 3;

/// The text format's content type, as prometheus_client sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The body `GET /metrics` serves for these counters, under `profile`'s engine names.
pub fn render(profile: &Profile, s: &MockStatsSnapshot) -> String {
    let mut out = String::with_capacity(2048);
    match profile.metrics_names {
        MetricsNames::Vllm => {
            let labels = format!("{{engine=\"0\",model_name=\"{DEFAULT_MODEL}\"}}");
            let mut family = |name: &str, kind: &str, help: &str, value: u64| {
                // prometheus_client writes floats: `3.0`.
                let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{labels} {:?}\n", value as f64);
            };
            family(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                s.active_requests,
            );
            family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0);
            family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", s.prompt_tokens);
            family(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                s.completion_tokens,
            );
            family(
                "vllm:request_success_total",
                "counter",
                "Count of successfully processed requests.",
                s.requests_completed,
            );
            family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", 0);
            if profile.prefix_cache {
                family(
                    "vllm:prefix_cache_queries_total",
                    "counter",
                    "Prefix cache queries, in terms of number of queried tokens.",
                    s.prompt_tokens,
                );
                family(
                    "vllm:prefix_cache_hits_total",
                    "counter",
                    "Prefix cache hits, in terms of number of cached tokens.",
                    s.cached_tokens,
                );
            }
            if profile.speculative {
                // One verification step per chunk, proposing `SPEC_DRAFT_TOKENS`; a chunk of k
                // tokens is k − 1 accepted drafts plus the bonus token.
                let drafts = s.chunks_streamed;
                family("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", drafts);
                family(
                    "vllm:spec_decode_num_draft_tokens_total",
                    "counter",
                    "Number of draft tokens.",
                    drafts.saturating_mul(SPEC_DRAFT_TOKENS),
                );
                family(
                    "vllm:spec_decode_num_accepted_tokens_total",
                    "counter",
                    "Number of accepted tokens.",
                    s.tokens_streamed.saturating_sub(drafts),
                );
            }
        }
        MetricsNames::Llamacpp => {
            let mut family = |name: &str, kind: &str, help: &str, value: u64| {
                let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n");
            };
            let evaluated = s.prompt_tokens.saturating_sub(s.cached_tokens);
            family(
                "llamacpp:prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed, excluding cached tokens",
                evaluated,
            );
            family(
                "llamacpp:prompt_tokens_cached_total",
                "counter",
                "Number of prompt tokens reused from the cache",
                s.cached_tokens,
            );
            family(
                "llamacpp:tokens_predicted_total",
                "counter",
                "Number of generation tokens processed.",
                s.completion_tokens,
            );
            family("llamacpp:requests_processing", "gauge", "Number of requests processing.", s.active_requests);
            family("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", 0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client's parser reads from these bodies is checked on the client's side
    /// (`tests/simulator.rs` of anvil-load).
    #[test]
    fn vllm_names_carry_the_simulator_counts() {
        let stats = MockStatsSnapshot { prompt_tokens: 1000, cached_tokens: 400, ..MockStatsSnapshot::default() };
        let body = render(&Profile::named("fast").expect("fast"), &stats);
        assert!(body.contains("vllm:prompt_tokens_total{engine=\"0\",model_name=\"anvil-sim\"} 1000.0\n"), "{body}");
        let no_cache = render(&Profile::named("instant").expect("instant"), &stats);
        assert!(!no_cache.contains("prefix_cache"), "{no_cache}");
        assert!(!no_cache.contains("spec_decode"), "{no_cache}");
    }
}
