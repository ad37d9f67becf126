//! What the server's view says about a level: the warnings a scrape summary raises, and the
//! cross-check of the server's token counters against the client's totals.

use serde::Serialize;

use super::names::Norm;
use super::summary::LevelServerMetrics;

/// Server and client token counts may differ by this fraction before `server_counts_differ`
/// is raised: engines count at slightly different moments than a client sees usage (vLLM
/// counts prompt tokens at prefill, generation tokens per step), which a few percent absorbs.
pub const SERVER_COUNTS_TOLERANCE: f64 = 0.05;

/// What the client counted over one level, to compare with the server's counter deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientTokens {
    /// Σ `usage.prompt_tokens` over the requests that reported usage.
    pub prompt_tokens: u64,
    /// Σ `usage.prompt_tokens_details.cached_tokens`, when the server reports it.
    pub cached_tokens: Option<u64>,
    /// Σ `usage.completion_tokens` over the requests that reported usage.
    pub completion_tokens: u64,
    /// Requests the server may have worked on but that reported no usage (failed after they
    /// were sent, interrupted). With any, the server may rightly count more than the client,
    /// so only a server count below the client's is flagged.
    pub without_usage: u64,
}

/// One counter on which the server and the client disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CountsDiffer {
    /// `prompt_tokens`, `prompt_tokens_computed` (llama.cpp: cache hits excluded, compared
    /// with the client's prompt minus cached tokens) or `generation_tokens`.
    pub counter: &'static str,
    pub server: f64,
    pub client: f64,
    /// (server − client) ÷ client.
    pub relative: f64,
    pub tolerance: f64,
}

impl CountsDiffer {
    pub fn message(&self) -> String {
        let sign = if self.relative >= 0.0 { "+" } else { "" };
        format!(
            "the server counted {} {} during the level, the client {} ({sign}{:.1} %, tolerance {:.0} %): \
             someone else is using the server, or the client miscounts",
            self.server.round(),
            self.counter.replace('_', " "),
            self.client.round(),
            self.relative * 100.0,
            self.tolerance * 100.0
        )
    }
}

/// Compare the server's token counter deltas with the client's totals. Empty when they agree
/// within `tolerance`, or when the level's deltas are incomplete (a missing start or end scrape
/// has its own warning) or the server exports no token counter.
pub fn server_counts_differ(server: &LevelServerMetrics, client: &ClientTokens, tolerance: f64) -> Vec<CountsDiffer> {
    if !server.complete || server.counter_resets > 0 {
        return Vec::new();
    }
    let mut pairs: Vec<(&'static str, f64, u64)> = Vec::new();
    if let Some(prompt) = server.counter(Norm::PromptTokens) {
        pairs.push((Norm::PromptTokens.as_str(), prompt, client.prompt_tokens));
    } else if let (Some(computed), Some(cached)) = (server.counter(Norm::PromptTokensComputed), client.cached_tokens) {
        pairs.push((Norm::PromptTokensComputed.as_str(), computed, client.prompt_tokens.saturating_sub(cached)));
    }
    if let Some(generated) = server.counter(Norm::GenerationTokens) {
        pairs.push((Norm::GenerationTokens.as_str(), generated, client.completion_tokens));
    }
    pairs
        .into_iter()
        .filter_map(|(counter, server, client_count)| {
            let client_f = client_count as f64;
            let relative = (server - client_f) / client_f.max(1.0);
            let beyond = if client.without_usage > 0 { relative < -tolerance } else { relative.abs() > tolerance };
            beyond.then_some(CountsDiffer { counter, server, client: client_f, relative, tolerance })
        })
        .collect()
}

/// A methodology warning from the server's metrics. The lead's typed warning enum wraps these;
/// `code` and `message` are the proposed artifact texts.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMetricsWarning {
    /// Some scrapes failed; the numbers cover the successful ones.
    ScrapesFailed { failed: u32, scrapes: u32, first_error: String },
    /// The start or end scrape failed: counter deltas miss part of the level.
    Incomplete,
    /// A counter went backwards: the server restarted (or a replica was replaced) mid-level.
    CounterReset { resets: u32 },
    /// Scrapes succeeded but carried no name of a known engine.
    Unrecognised,
    /// The scrape file could not be written; the summary is still complete.
    FileNotWritten { error: String },
    /// The server's token counters moved differently from the client's totals.
    CountsDiffer(CountsDiffer),
    /// The scrape file left series out: beyond the bound per scrape, or every series once the
    /// level's file reached its budget. The summary still read all of them.
    SeriesLeftOut { most_per_scrape: u64, kept_per_scrape: usize, scrapes_over_budget: u32 },
}

impl ServerMetricsWarning {
    pub fn code(&self) -> &'static str {
        match self {
            ServerMetricsWarning::ScrapesFailed { .. } => "server_metrics_scrape_failed",
            ServerMetricsWarning::Incomplete => "server_metrics_incomplete",
            ServerMetricsWarning::CounterReset { .. } => "server_counter_reset",
            ServerMetricsWarning::Unrecognised => "server_metrics_unrecognised",
            ServerMetricsWarning::FileNotWritten { .. } => "server_metrics_file",
            ServerMetricsWarning::CountsDiffer(_) => "server_counts_differ",
            ServerMetricsWarning::SeriesLeftOut { .. } => "server_metrics_series_left_out",
        }
    }

    pub fn message(&self, url: &str) -> String {
        match self {
            ServerMetricsWarning::ScrapesFailed { failed, scrapes, first_error } => format!(
                "{failed} of {scrapes} scrapes of {url} failed ({first_error}); the server-side numbers cover the others"
            ),
            ServerMetricsWarning::Incomplete => format!(
                "the start or end scrape of {url} failed, so the server's counter deltas miss part of the level"
            ),
            ServerMetricsWarning::CounterReset { resets } => format!(
                "{resets} server counter(s) at {url} went backwards during the level: the server restarted; \
                 deltas count from the reset and may miss what it counted just before"
            ),
            ServerMetricsWarning::Unrecognised => format!(
                "{url} answered, but with no metric names of vLLM, SGLang, llama.cpp, TGI or Dynamo; \
                 the raw series are kept in the scrape file"
            ),
            ServerMetricsWarning::FileNotWritten { error } => {
                format!("the server-metrics file could not be written ({error}); the summary is complete")
            }
            ServerMetricsWarning::CountsDiffer(d) => d.message(),
            ServerMetricsWarning::SeriesLeftOut { most_per_scrape, kept_per_scrape, scrapes_over_budget } => {
                let mut parts = Vec::new();
                if *most_per_scrape > 0 {
                    parts.push(format!(
                        "up to {most_per_scrape} series per scrape beyond the {kept_per_scrape} kept (the known engines' first)"
                    ));
                }
                if *scrapes_over_budget > 0 {
                    parts.push(format!(
                        "every series of the last {scrapes_over_budget} scrapes, once the level's file reached {} MiB",
                        super::raw::RAW_BUDGET_BYTES >> 20
                    ));
                }
                format!(
                    "{url} exported more series than the scrape file keeps: it left out {} (see raw_left_out on each line); the counters and gauges above were read from all of them",
                    parts.join(", and ")
                )
            }
        }
    }
}

/// The warnings of one level, `server_counts_differ` included when `client` is given.
pub fn warnings(m: &LevelServerMetrics, client: Option<&ClientTokens>) -> Vec<ServerMetricsWarning> {
    let mut out = Vec::new();
    if m.failed_scrapes > 0 {
        out.push(ServerMetricsWarning::ScrapesFailed {
            failed: m.failed_scrapes,
            scrapes: m.scrapes,
            first_error: m.first_error.clone().unwrap_or_default(),
        });
    }
    if !m.complete {
        out.push(ServerMetricsWarning::Incomplete);
    }
    if m.counter_resets > 0 {
        out.push(ServerMetricsWarning::CounterReset { resets: m.counter_resets });
    }
    if m.engine.is_none() && m.failed_scrapes < m.scrapes {
        out.push(ServerMetricsWarning::Unrecognised);
    }
    if let Some(error) = &m.file_error {
        out.push(ServerMetricsWarning::FileNotWritten { error: error.clone() });
    }
    if m.raw_series_left_out > 0 || m.raw_scrapes_over_budget > 0 {
        out.push(ServerMetricsWarning::SeriesLeftOut {
            most_per_scrape: m.raw_series_left_out,
            kept_per_scrape: super::raw::MAX_RAW_SERIES,
            scrapes_over_budget: m.raw_scrapes_over_budget,
        });
    }
    if let Some(client) = client {
        out.extend(
            server_counts_differ(m, client, SERVER_COUNTS_TOLERANCE)
                .into_iter()
                .map(ServerMetricsWarning::CountsDiffer),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::request::server_metrics::names::Engine;

    fn level(counters: &[(Norm, f64)]) -> LevelServerMetrics {
        LevelServerMetrics {
            replicas: Vec::new(),
            gpu: None,
            endpoints: Vec::new(),
            gpu_telemetry: None,
            url: "http://h/metrics".into(),
            engine: Some(Engine::Vllm),
            interval_ms: 5000.0,
            scrapes: 3,
            failed_scrapes: 0,
            complete: true,
            window_ms: Some(10_000.0),
            counter_resets: 0,
            counters: counters.iter().copied().collect(),
            gauges: BTreeMap::new(),
            prefix_cache_hit_rate: None,
            spec_decode: None,
            missing: Vec::new(),
            skipped_lines: 0,
            raw_series_left_out: 0,
            raw_scrapes_over_budget: 0,
            first_error: None,
            file: None,
            file_error: None,
        }
    }

    const CLIENT: ClientTokens =
        ClientTokens { prompt_tokens: 10_000, cached_tokens: Some(4_000), completion_tokens: 2_000, without_usage: 0 };

    #[test]
    fn equal_counts_pass_and_a_shared_server_is_flagged() {
        let same = level(&[(Norm::PromptTokens, 10_000.0), (Norm::GenerationTokens, 2_000.0)]);
        assert!(server_counts_differ(&same, &CLIENT, SERVER_COUNTS_TOLERANCE).is_empty());
        assert!(warnings(&same, Some(&CLIENT)).is_empty());
        let within = level(&[(Norm::PromptTokens, 10_400.0), (Norm::GenerationTokens, 1_920.0)]);
        assert!(server_counts_differ(&within, &CLIENT, SERVER_COUNTS_TOLERANCE).is_empty());
        let shared = level(&[(Norm::PromptTokens, 10_000.0), (Norm::GenerationTokens, 2_600.0)]);
        let d = server_counts_differ(&shared, &CLIENT, SERVER_COUNTS_TOLERANCE);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].counter, d[0].server, d[0].client), ("generation_tokens", 2_600.0, 2_000.0));
        assert!((d[0].relative - 0.3).abs() < 1e-12);
        let message = d[0].message();
        assert!(message.contains("2600 generation tokens") && message.contains("+30.0 %"), "{message}");
        let w = warnings(&shared, Some(&CLIENT));
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].code(), "server_counts_differ");
    }

    #[test]
    fn llamacpp_prompt_counts_exclude_cache_hits() {
        let llama = level(&[(Norm::PromptTokensComputed, 6_000.0), (Norm::GenerationTokens, 2_000.0)]);
        assert!(server_counts_differ(&llama, &CLIENT, SERVER_COUNTS_TOLERANCE).is_empty());
        let off = level(&[(Norm::PromptTokensComputed, 10_000.0)]);
        assert_eq!(server_counts_differ(&off, &CLIENT, SERVER_COUNTS_TOLERANCE)[0].counter, "prompt_tokens_computed");
        let unknown_cache = ClientTokens { cached_tokens: None, ..CLIENT };
        assert!(server_counts_differ(&off, &unknown_cache, SERVER_COUNTS_TOLERANCE).is_empty(), "nothing to compare");
    }

    #[test]
    fn failed_requests_only_allow_the_server_to_count_more() {
        let with_failures = ClientTokens { without_usage: 3, ..CLIENT };
        let more = level(&[(Norm::GenerationTokens, 2_500.0)]);
        assert!(server_counts_differ(&more, &with_failures, SERVER_COUNTS_TOLERANCE).is_empty());
        let less = level(&[(Norm::GenerationTokens, 1_500.0)]);
        assert_eq!(server_counts_differ(&less, &with_failures, SERVER_COUNTS_TOLERANCE).len(), 1);
    }

    #[test]
    fn incomplete_or_reset_levels_are_not_cross_checked_but_warned() {
        let mut m = level(&[(Norm::GenerationTokens, 9_999.0)]);
        m.complete = false;
        m.failed_scrapes = 1;
        m.first_error = Some("start scrape: connection refused".into());
        assert!(server_counts_differ(&m, &CLIENT, SERVER_COUNTS_TOLERANCE).is_empty());
        let codes: Vec<&str> = warnings(&m, Some(&CLIENT)).iter().map(ServerMetricsWarning::code).collect();
        assert_eq!(codes, ["server_metrics_scrape_failed", "server_metrics_incomplete"]);
        let text = warnings(&m, None)[0].message("http://h/metrics");
        assert!(
            text.contains("1 of 3 scrapes of http://h/metrics failed (start scrape: connection refused)"),
            "{text}"
        );
        let mut reset = level(&[(Norm::GenerationTokens, 9_999.0)]);
        reset.counter_resets = 2;
        assert!(server_counts_differ(&reset, &CLIENT, SERVER_COUNTS_TOLERANCE).is_empty());
        assert_eq!(warnings(&reset, Some(&CLIENT))[0].code(), "server_counter_reset");
        let mut unknown = level(&[]);
        unknown.engine = None;
        assert_eq!(warnings(&unknown, None)[0].code(), "server_metrics_unrecognised");
    }
}
