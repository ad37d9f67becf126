//! Methodology warnings: one enum, each variant a stable code and the facts its message states.
//! The console prints them and the artifact keeps them as `{code, message}`.

use std::collections::BTreeMap;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::request::server_metrics::ServerMetricsWarning;

/// What a `prompt_sizing_off` warning advises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizingAdvice {
    /// Sized by the estimate (or a calibration that fell back): calibrate, or give a tokenizer.
    Calibrate,
    /// Sized by the estimate for an API the calibration probes cannot speak: a tokenizer only.
    Tokenizer,
    /// Already sized from the server's counts: these prompts differ from the probes.
    ServerTokenizer,
}

/// A methodology problem, shown on the console and saved in the artifact.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    SimulatedTarget {
        profile: String,
    },
    /// `target.tls.insecure_skip_verify = true`: the server's certificate was not checked.
    TlsVerificationOff,
    Interrupted,
    /// `foreign`: failed responses that held another request's marker.
    CanariesAllFailed {
        canaries: usize,
        foreign: usize,
    },
    CanariesFailed {
        failed: usize,
        canaries: usize,
        foreign: usize,
    },
    RequestsFailed {
        failed: usize,
        attempted: u64,
        by_kind: BTreeMap<String, u64>,
    },
    NoUsageReported {
        responses: usize,
    },
    /// Responses whose `usage.completion_tokens` was far below what they streamed.
    UsageUndercounted {
        responses: usize,
    },
    SizingFallback {
        reason: String,
    },
    PromptSizingOff {
        mean_pct: f64,
        bias_pct: f64,
        advice: SizingAdvice,
    },
    CacheWarmInUniqueMode {
        warm: usize,
        completed: usize,
    },
    /// p99 rests on fewer than `minimum` samples: `thin` lists each such metric and its count.
    P99Descriptive {
        eligible: u64,
        minimum: usize,
        thin: Vec<(&'static str, usize)>,
    },
    /// Requests completed but every one was excluded: no distribution has a sample.
    /// `no_content`: every failed canary had no visible content to check.
    NothingEligible {
        completed: u64,
        by_reason: BTreeMap<&'static str, u64>,
        no_content: bool,
    },
    /// Responses whose output budget ran out inside the reasoning, before any visible content
    /// (`finish_reason = length`, no content): `unchecked_canaries` of them carried a canary
    /// that had nothing to check.
    BudgetSpentInReasoning {
        responses: usize,
        completed: usize,
        max_tokens: u32,
        unchecked_canaries: usize,
    },
    InvalidLoad {
        reason: String,
    },
    /// The steady-state window covers less than `SHORT_SHARE` of the level.
    SteadyStateShort {
        share: f64,
        duration_ms: f64,
    },
    /// The level never had its planned load in flight.
    SteadyStateNone,
    /// A merge of a sharded run without some of its shards.
    PartialMerge {
        problems: Vec<String>,
    },
    /// The records file does not hold every record the level wrote (rebuilt with
    /// `--allow-partial`).
    RecordsIncomplete {
        problems: Vec<String>,
    },
    /// Conversations: answers that held another session's canary marker.
    CrossSession {
        responses: u64,
    },
    /// Conversations: the server cached far fewer tokens than the history it was sent again.
    CacheIneffective {
        ratio: f64,
        expected: u64,
    },
    NoSuccess,
    /// Responses whose `usage.completion_tokens` differs from the tokens their chunks counted
    /// (per-chunk usage) by more than `USAGE_STREAMED_PCT`.
    UsageNotStreamed {
        responses: usize,
        counted: usize,
        usage_tokens: u64,
        streamed_tokens: u64,
    },
    /// Chunks carried several tokens on average: per-chunk and per-token latency differ.
    MultiTokenChunks {
        tokens_per_chunk: f64,
        /// From per-chunk usage counts (else usage over chunks).
        per_chunk_counts: bool,
    },
    /// Failed canaries whose response held a cut-off or garbled marker (and no other request's).
    CanaryMarkersMalformed {
        responses: usize,
    },
    /// Responses whose usage no request of the run could produce: excluded, never summed.
    UsageRejected {
        responses: usize,
    },
    /// Responses that reached their output budget while the server said they stopped on their
    /// own: recorded as `length`.
    FinishAtBudget {
        responses: usize,
        api: &'static str,
    },
    /// `ignore_eos` / `min_tokens` was sent, and answers stopped on their own before it allowed.
    OutputControlIgnored {
        field: &'static str,
        stopped: usize,
        completed: usize,
        api: &'static str,
    },
    /// What the server's own metrics say about the level (scrapes, resets, counts that differ).
    Server {
        warning: ServerMetricsWarning,
        url: String,
    },
    /// Several replicas: their latencies or failure rates differ (see `replicas`).
    ReplicasDiffer {
        differences: Vec<String>,
    },
    /// `load.reset_cache`: the level's first request still found cached tokens after the reset
    /// (see `models`).
    CacheNotReset {
        index: u64,
        cached_tokens: u64,
    },
    /// The server's `/models` list, checked before the run, did not name the model.
    ModelNotListed {
        model: String,
        missing: crate::request::record::run_info::ModelNotListed,
    },
    /// The key command (`target.api_key_command`) failed during the run; `message` names the
    /// program, the time and why (already scrubbed).
    CredentialRefreshFailed {
        message: String,
    },
    /// Structured output: answers that broke their schema (not cut by the budget); `passed`
    /// says whether the level stayed within `max_invalid_rate`.
    SchemaInvalid {
        invalid: u64,
        checked: u64,
        max_invalid_rate: f64,
        passed: bool,
        by_reason: BTreeMap<String, u64>,
    },
    /// Structured output: answers cut by the output budget before their JSON ended.
    SchemaTruncated {
        truncated: u64,
        checked: u64,
    },
}

impl Warning {
    /// The stable identifier.
    pub fn code(&self) -> &'static str {
        match self {
            Warning::SimulatedTarget { .. } => "simulated_target",
            Warning::TlsVerificationOff => "tls_verification_off",
            Warning::Interrupted => "interrupted",
            Warning::CanariesAllFailed { .. } => "canaries_all_failed",
            Warning::CanariesFailed { .. } => "canaries_failed",
            Warning::RequestsFailed { .. } => "requests_failed",
            Warning::NoUsageReported { .. } => "no_usage_reported",
            Warning::SizingFallback { .. } => "sizing_fallback",
            Warning::UsageUndercounted { .. } => "usage_undercounted",
            Warning::PromptSizingOff { .. } => "prompt_sizing_off",
            Warning::CacheWarmInUniqueMode { .. } => "cache_warm_in_unique_mode",
            Warning::P99Descriptive { .. } => "p99_descriptive",
            Warning::NothingEligible { .. } => "nothing_eligible",
            Warning::BudgetSpentInReasoning { .. } => "budget_spent_in_reasoning",
            Warning::InvalidLoad { .. } => "invalid_load",
            Warning::SteadyStateShort { .. } => "steady_state_short",
            Warning::SteadyStateNone => "steady_state_none",
            Warning::CrossSession { .. } => "cross_session_contamination",
            Warning::PartialMerge { .. } => "partial_merge",
            Warning::RecordsIncomplete { .. } => "records_incomplete",
            Warning::CacheIneffective { .. } => "conversation_cache_ineffective",
            Warning::NoSuccess => "no_success",
            Warning::UsageNotStreamed { .. } => "usage_not_streamed",
            Warning::MultiTokenChunks { .. } => "multi_token_chunks",
            Warning::CanaryMarkersMalformed { .. } => "canary_markers_malformed",
            Warning::UsageRejected { .. } => "usage_rejected",
            Warning::FinishAtBudget { .. } => "finish_reason_at_budget",
            Warning::OutputControlIgnored { .. } => "output_control_ignored",
            Warning::Server { warning, .. } => warning.code(),
            Warning::ModelNotListed { .. } => "model_not_listed",
            Warning::CredentialRefreshFailed { .. } => "credential_refresh_failed",
            Warning::ReplicasDiffer { .. } => "replicas_differ",
            Warning::SchemaInvalid { .. } => "schema_invalid",
            Warning::SchemaTruncated { .. } => "schema_truncated",
            Warning::CacheNotReset { .. } => "cache_not_reset",
        }
    }

    /// What the user reads: the problem, the facts, and what to do.
    pub fn message(&self) -> String {
        match self {
            Warning::SimulatedTarget { profile } => format!(
                "measured against the embedded simulator (profile {profile}), not a real engine; give --base-url to measure a server"
            ),
            Warning::TlsVerificationOff => "target.tls.insecure_skip_verify = true: the server's certificate was not checked, so these numbers may come from whoever answered in its place; use target.tls.ca_file outside a lab".to_string(),
            Warning::Interrupted => {
                "the run was stopped before it finished; the numbers cover what completed".to_string()
            }
            Warning::CanariesAllFailed { canaries, foreign: 0 } => format!(
                "all {canaries} canaries failed and no response held another request's marker: the model did not begin its replies with the requested marker (small models often cannot); if it cannot follow the instruction, set workload.canaries = false"
            ),
            Warning::CanariesAllFailed { canaries, foreign } => format!(
                "all {canaries} canaries failed, {foreign} of them holding another request's marker: responses are being mixed up between requests (a server or proxy fault); the rest did not begin with their marker"
            ),
            Warning::CanariesFailed { failed, canaries, foreign: 0 } => format!(
                "{failed} of {canaries} canaries failed, none holding another request's marker: the model did not always begin its reply with the requested marker; those responses are excluded from the distributions (see request_timings[].request_canary); if the model cannot follow the instruction reliably, set workload.canaries = false"
            ),
            Warning::CanariesFailed { failed, canaries, foreign } => format!(
                "{failed} of {canaries} canaries failed, {foreign} of them holding another request's marker: responses were mixed up between requests; those responses are excluded from the distributions (see request_timings[].request_canary)"
            ),
            Warning::RequestsFailed { failed, attempted, by_kind } => {
                let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
                format!(
                    "{failed} of {attempted} requests failed ({}); they are listed under failures and excluded from the distributions",
                    kinds.join(", ")
                )
            }
            Warning::NoUsageReported { responses } => format!(
                "{responses} responses reported no usage: their output tokens are counted from chunks, which undercounts when a chunk carries several tokens (TPOT and decode rates use that count)"
            ),
            Warning::UsageUndercounted { responses } => format!(
                "{responses} responses reported usage.completion_tokens below half the chunks they streamed (0 included): their output tokens are counted from the chunks instead, and the server's figure is kept as usage_completion_tokens; check the server's usage accounting"
            ),
            Warning::SizingFallback { reason } => {
                format!("prompt sizing fell back to the built-in estimate: {reason}")
            }
            Warning::PromptSizingOff { mean_pct, bias_pct, advice: SizingAdvice::Tokenizer } => format!(
                "the server counted prompts {mean_pct:.1}% away from their target on average (bias {bias_pct:+.1}%): the planned context is not what the server saw; calibration cannot probe this API, so give the server's own tokenizer.json as workload.tokenizer"
            ),
            Warning::PromptSizingOff { mean_pct, bias_pct, advice: SizingAdvice::Calibrate } => format!(
                "the server counted prompts {mean_pct:.1}% away from their target on average (bias {bias_pct:+.1}%): the planned context is not what the server saw; use workload.tokenizer = \"calibrate\" or a tokenizer.json"
            ),
            Warning::PromptSizingOff { mean_pct, bias_pct, advice: SizingAdvice::ServerTokenizer } => format!(
                "the server counted prompts {mean_pct:.1}% away from their target on average (bias {bias_pct:+.1}%) although prompts were sized by calibration or a tokenizer: the planned context is not what the server saw; these prompts differ from the probes (see prompt_sizing), so give the server's own tokenizer.json as workload.tokenizer"
            ),
            Warning::CacheWarmInUniqueMode { warm, completed } => format!(
                "{warm} of {completed} requests reported cached prompt tokens although every prompt starts with a unique prefix: the cache was warm (reproducible prompts sent before, or another client), so this cold-cache measurement was partly warm"
            ),
            Warning::P99Descriptive { eligible, minimum, thin } => {
                if thin.iter().all(|&(_, n)| n as u64 == *eligible) {
                    format!(
                        "only {eligible} eligible samples: p99 is descriptive (one sample decides it); use at least {minimum} requests for a p99 to compare"
                    )
                } else {
                    let parts: Vec<String> = thin
                        .iter()
                        .map(|&(metric, n)| match (n, why_no_samples(metric)) {
                            (0, Some(why)) => format!("{metric} 0 ({why})"),
                            _ => format!("{metric} {n}"),
                        })
                        .collect();
                    format!(
                        "p99 is descriptive (fewer than {minimum} samples decide it) for {} of {eligible} eligible requests; use at least {minimum} requests for a p99 to compare",
                        parts.join(", ")
                    )
                }
            }
            Warning::NothingEligible { completed, by_reason, no_content } => {
                let reasons: Vec<String> = by_reason.iter().map(|(k, n)| format!("{k} {n}")).collect();
                format!(
                    "no request is in the distributions: all {completed} completed requests were excluded ({}); every summary is empty — see request_timings[].exclusion_reason; {}",
                    reasons.join(", "),
                    nothing_eligible_advice(by_reason, *no_content)
                )
            }
            Warning::BudgetSpentInReasoning { responses, completed, max_tokens, unchecked_canaries } => {
                let canaries = match unchecked_canaries {
                    0 => String::new(),
                    n => format!(
                        "; their {n} canaries had no content to check (failure_reason no_content, excluded; no sign of mixed-up responses)"
                    ),
                };
                format!(
                    "{responses} of {completed} responses ended at max_tokens ({max_tokens}) before any content (all reasoning){canaries}: raise workload.max_tokens, or turn reasoning off (serve.thinking_mode = \"disabled\")"
                )
            }
            Warning::InvalidLoad { reason } => reason.clone(),
            Warning::SteadyStateShort { share, duration_ms } => format!(
                "the steady state (the planned load in flight, ramp-up and drain left out) lasted {:.0} ms, {:.0}% of the level: whole-level figures are dominated by ramp-up and drain; compare steady_state figures, or send more requests per level",
                duration_ms,
                share * 100.0
            ),
            Warning::SteadyStateNone => "the level never had its planned concurrency in flight (too few requests for the concurrency, or every worker's request failed at once): there is no steady state; send more requests per level".to_string(),
            Warning::NoSuccess => "no request succeeded; see the failures in the artifact".to_string(),
            Warning::PartialMerge { problems } => format!(
                "merged without all of its shards ({}): the numbers cover the shards present, the load was not the planned one, and the level is not performance-eligible",
                problems.join("; ")
            ),
            Warning::RecordsIncomplete { problems } => format!(
                "rebuilt from records that are not all there ({}): the numbers cover the records present, not the level as it ran, and the level is not performance-eligible",
                problems.join("; ")
            ),
            Warning::CrossSession { responses } => format!(
                "{responses} answers held another conversation's canary marker: the server (or a router) mixed up sessions; those turns failed their canaries (see conversations.cross_session_contaminated)"
            ),
            Warning::CacheIneffective { ratio, expected } => format!(
                "the server reported {:.0}% of the {expected} cached tokens a conversation's repeated history should give: its prefix cache did not hold the sessions (evicted, not enabled, or sessions routed to different backends); see conversations.by_turn[].cache",
                ratio * 100.0
            ),
            Warning::UsageNotStreamed { responses, counted, usage_tokens, streamed_tokens } => format!(
                "{responses} of {counted} responses with per-chunk token counts reported usage.completion_tokens more than 5% away from what their chunks streamed ({usage_tokens} reported, {streamed_tokens} streamed in all): tokens were generated but not streamed (an end-of-turn token, hidden reasoning) or miscounted; tpot and decode rates use usage, tpot_corrected the streamed count (see request_timings[].streamed_tokens)"
            ),
            Warning::MultiTokenChunks { tokens_per_chunk, per_chunk_counts } => format!(
                "chunks carried {tokens_per_chunk:.2} tokens on average ({}): ITL per chunk (itl_chunk_*, vLLM's ITL) is not ITL per token (itl_token_*); compare servers on itl_token_*",
                if *per_chunk_counts { "from per-chunk usage" } else { "usage over chunks" }
            ),
            Warning::CanaryMarkersMalformed { responses } => format!(
                "{responses} responses held a canary marker cut short or garbled (see request_canary.offending_marker), not another request's: the output budget ended mid-marker or the model mangled it; they failed their canaries (marker_truncated, marker_garbled) and are excluded, but this is no sign that responses were mixed up; raise max_tokens if markers are cut, or set workload.canaries = false if the model cannot copy them"
            ),
            Warning::UsageRejected { responses } => format!(
                "{responses} responses reported token usage their request could not produce (prompt tokens beyond what was sent, output beyond the budget, a cumulative count going backwards, or no count at all): none of their counts is kept or summed, and they are excluded as usage_implausible (see request_timings[].usage_implausible); check the server's usage accounting"
            ),
            Warning::FinishAtBudget { responses, api } => format!(
                "{responses} responses reached their output budget while the server ({api} API) said they stopped on their own (finish_reason stop, or status completed): they are recorded as length, so truncation counts agree across APIs; the server's word is kept in request_timings[].reported_finish_reason"
            ),
            Warning::OutputControlIgnored { field, stopped, completed, api } => format!(
                "{stopped} of {completed} completed answers stopped on their own before the length {field} asked for: the server ignored {field} on the {api} API (llama.cpp's /v1/messages drops it), so output lengths, TPOT and throughput are not those of the planned output and do not compare with runs where it held; use an API that honours it, or compare like with like"
            ),
            Warning::Server { warning, url } => warning.message(url),
            Warning::ModelNotListed { model, missing } => missing.message(model),
            Warning::CredentialRefreshFailed { message } => message.clone(),
            Warning::ReplicasDiffer { differences } => format!(
                "the replicas did not serve alike: {}; the level's numbers mix them, so read the per-replica table (replicas[]) before comparing with one server",
                differences.join("; ")
            ),
            Warning::SchemaInvalid { invalid, checked, max_invalid_rate, passed, by_reason } => {
                let reasons: Vec<String> = by_reason.iter().map(|(k, n)| format!("{k} {n}")).collect();
                let verdict = if *passed {
                    format!("within workload.response_format.max_invalid_rate ({:.1}%), so the level stays eligible", max_invalid_rate * 100.0)
                } else {
                    format!("above workload.response_format.max_invalid_rate ({:.1}%): the level is not eligible (a server that breaks its schemas under load is not serving this workload)", max_invalid_rate * 100.0)
                };
                format!(
                    "{invalid} of {checked} structured answers broke their schema ({}); they are excluded from the distributions (exclusion_reason schema_invalid), {verdict}",
                    reasons.join(", ")
                )
            }
            Warning::SchemaTruncated { truncated, checked } => format!(
                "{truncated} of {checked} structured answers were cut by the output budget (finish_reason length) before their JSON ended: not counted as invalid and kept in the distributions; raise workload.max_tokens so whole answers fit"
            ),
            Warning::CacheNotReset { index, cached_tokens } => format!(
                "the server's cache was reset before the level (load.reset_cache), yet its first request (request {index}) reported {cached_tokens} cached prompt tokens: the reset did not take (an endpoint that answers without clearing, a replica not reset, or a cache the endpoint does not cover: llama.cpp's host-memory prompt cache survives a slot erase unless the server runs with --cache-ram 0), so this level did not start cold"
            ),
        }
    }
}

/// What to do when nothing is left in the distributions, by why it was left out.
fn nothing_eligible_advice(by_reason: &BTreeMap<&'static str, u64>, no_content: bool) -> String {
    let mut advice: Vec<&str> = Vec::new();
    for reason in by_reason.keys() {
        let a = match *reason {
            "canary_failed" if no_content => {
                "the answers held no content for the canaries to check (the output budget ended inside the reasoning): raise workload.max_tokens, or turn reasoning off"
            }
            "canary_failed" => {
                "the canaries failed (see the canary warning: mixed-up responses, or a model that cannot copy the marker, when workload.canaries = false is the way out)"
            }
            "usage_implausible" => "the server's token usage could not be believed: check its usage accounting",
            "schema_invalid" => "the answers broke their schema (see the schema_invalid warning and structured_output)",
            "controlled_output" => {
                "no answer had exactly response_words words: use controlled_output_policy = \"observe\", or a word count the model can meet"
            }
            _ => "lower run.warmup/run.cooldown or send more requests",
        };
        if !advice.contains(&a) {
            advice.push(a);
        }
    }
    advice.join("; ")
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Warning", 2)?;
        s.serialize_field("code", self.code())?;
        s.serialize_field("message", &self.message())?;
        s.end()
    }
}

/// Why an eligible request can lack a value of a metric.
fn why_no_samples(metric: &str) -> Option<&'static str> {
    match metric {
        "tpot" | "decode_tok_s" => Some("no eligible response had two or more output tokens"),
        "ttft" => Some("no eligible response had visible content, only reasoning"),
        "effective_prefill_tok_s" => Some("the server reported no usage.prompt_tokens"),
        _ => None,
    }
}
