//! The warnings about what the answers' output says of the server: `ignore_eos` or
//! `min_tokens` sent and ignored, usage that is not what streamed, and chunks that carry several
//! tokens. Over every completed response (the server's behaviour does not depend on
//! eligibility).

use serde_json::Value;

use super::sample::{Sample, total};
use super::warnings::Warning;
use crate::request::record::RunInfo;

/// Answers that stopped on their own although the request asked for a length (`ignore_eos`:
/// the budget; `min_tokens`: at least that many), when the request carried the field: the
/// server ignored it on this API (llama.cpp's `/v1/messages` drops `ignore_eos`), so output
/// lengths, TPOT and throughput are not those of the planned output.
pub(super) fn output_control_ignored(info: &RunInfo, samples: &[Sample]) -> Option<Warning> {
    if !info.api.streams_text() {
        return None;
    }
    let scenario = &info.scenario;
    let dialect = scenario.pointer("/target/dialect").and_then(Value::as_str).unwrap_or("generic");
    let ignore_eos = scenario.pointer("/output/ignore_eos").and_then(Value::as_bool).unwrap_or(false)
        && !matches!(dialect, "openai" | "azure");
    let min_tokens = scenario
        .pointer("/output/min_tokens")
        .and_then(Value::as_u64)
        .filter(|_| !matches!(dialect, "openai" | "azure" | "llamacpp"));
    let (field, stopped) = if ignore_eos {
        ("ignore_eos", samples.iter().filter(|s| s.stopped_before_budget(info.max_tokens)).count())
    } else if let Some(n) = min_tokens {
        (
            "min_tokens",
            samples.iter().filter(|s| s.stopped_before_budget(info.max_tokens) && s.output_tokens() < n).count(),
        )
    } else {
        return None;
    };
    (stopped > 0).then(|| Warning::OutputControlIgnored {
        field,
        stopped,
        completed: samples.len(),
        api: info.api.name(),
    })
}

/// `usage.completion_tokens` further than this from the streamed count is warned about.
const USAGE_STREAMED_PCT: f64 = 5.0;
/// Above this mean, chunks carry several tokens.
const MULTI_TOKEN_CHUNKS: f64 = 1.1;

/// The two per-token warnings: usage that is not what streamed, and multi-token chunks. Over
/// every completed response (the server's accounting does not depend on eligibility).
/// `simulator`: the embedded simulator's profile, when it is the target.
pub(super) fn token_warnings(w: &mut Vec<Warning>, samples: &[Sample], simulator: Option<&str>) {
    let counted: Vec<(&Sample, u64)> = samples.iter().filter_map(|s| s.streamed_tokens().map(|n| (s, n))).collect();
    let off: Vec<&(&Sample, u64)> = counted
        .iter()
        .filter(|(s, n)| {
            let usage = s.output_tokens() as f64;
            (usage - *n as f64).abs() > (*n as f64).max(1.0) * USAGE_STREAMED_PCT / 100.0
        })
        .collect();
    if !off.is_empty() {
        w.push(Warning::UsageNotStreamed {
            responses: off.len(),
            counted: counted.len(),
            usage_tokens: total(off.iter().map(|(s, _)| s.output_tokens())),
            streamed_tokens: total(off.iter().map(|(_, n)| *n)),
        });
    }
    let chunks = total(samples.iter().map(Sample::output_chunks));
    let tokens = total(samples.iter().map(|s| s.streamed_tokens().unwrap_or(s.output_tokens())));
    if chunks > 0 && tokens as f64 / chunks as f64 > MULTI_TOKEN_CHUNKS && !fixed_chunking(simulator) {
        w.push(Warning::MultiTokenChunks {
            tokens_per_chunk: tokens as f64 / chunks as f64,
            per_chunk_counts: !counted.is_empty(),
        });
    }
}

/// Whether the target is an embedded simulator profile that sends a fixed number of tokens per
/// chunk by design (`fast` sends 2, `realistic` 4, to keep the client's per-chunk work down).
/// That is a setting the profile states, not a finding about a server, so `multi_token_chunks`
/// is left out; the numbers keep their meaning (`itl_chunk_*`, `itl_token_*` and
/// `tokens_per_chunk_*` are all still there). A speculative profile (`spec`) varies the count
/// per chunk like a real drafter, which is what the warning is about, so it keeps it.
fn fixed_chunking(simulator: Option<&str>) -> bool {
    simulator.and_then(crate::mock::Profile::named).is_some_and(|p| !p.speculative)
}
