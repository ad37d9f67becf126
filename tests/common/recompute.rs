//! The artifact's numbers recomputed from its own records, without trusting the writer.
//!
//! `oracle` is exactly what the shared `check_artifact.py` checks, with its tolerances and its
//! messages: every key of the reference artifact present, the per-request arithmetic, every
//! `<family>_{mean,stddev,mean_ci95_low,mean_ci95_high,min,p25…p99,max,samples}` summary over
//! the performance-eligible records (nearest-rank percentiles, sample standard deviation,
//! normal 95 % interval), totals, throughput, canary and population counts, the context
//! distribution and the failures count. It runs in Rust on every artifact a test writes, so the
//! strong check never depends on python3 or on a file outside the repository.
//!
//! `invariants` adds what this project's artifacts promise beyond the reference: the families
//! only anvil-load writes, one record per attempted request, error counts, and the like.
//!
//! Only `serde_json`: nothing of the crate's own summary code, which is what is being checked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde_json::{Map, Value};

/// Families `check_artifact.py` recomputes: metrics stem, per-request field, statistic keys end
/// in `_ms`.
const FAMILIES: [(&str, &str, bool); 11] = [
    ("completion_tokens", "output_tokens", false),
    ("prompt_tokens", "prompt_tokens", false),
    ("decode_tok_s", "decode_tok_s", false),
    ("effective_prefill_tok_s", "effective_prefill_tok_s", false),
    ("mean_inter_token_latency_ms", "mean_inter_token_latency_ms", false),
    ("e2e", "e2e_ms", true),
    ("generation", "generation_ms", true),
    ("time_to_first_output", "time_to_first_output_ms", true),
    ("mean_time_per_output_token", "mean_time_per_output_token_ms", true),
    ("tpot", "tpot_ms", true),
    ("ttft", "ttft_ms", true),
];

/// Open-loop families over the eligible records that only anvil-load writes.
const INTENDED_FAMILIES: [(&str, &str); 2] =
    [("ttft_from_intended", "ttft_from_intended_ms"), ("e2e_from_intended", "e2e_from_intended_ms")];

/// Client-side families over every request sent (records and failures), eligible or not.
const CLIENT_FAMILIES: [(&str, &str); 2] = [("schedule_lag", "schedule_lag_ms"), ("queue_wait", "queue_wait_ms")];

pub const PERCENTILES: [u32; 6] = [25, 50, 75, 90, 95, 99];

/// Every statistic a family reports.
const STATS: [&str; 13] = [
    "mean",
    "stddev",
    "mean_ci95_low",
    "mean_ci95_high",
    "min",
    "max",
    "samples",
    "p25",
    "p50",
    "p75",
    "p90",
    "p95",
    "p99",
];

static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// `math.isclose`, with `None` equal only to `None`.
pub fn close(a: Option<f64>, b: Option<f64>, rel: f64, abs: f64) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || (a - b).abs() <= (rel * a.abs().max(b.abs())).max(abs),
        _ => false,
    }
}

/// Python's truth value of a JSON value (`None`, `False`, `0`, `""`, empty containers are false).
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

fn f(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

/// Python's `==` between two JSON numbers (`6 == 6.0`), or plain equality otherwise.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (f(a), f(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or("None".to_string(), Value::to_string)
}

fn obj(v: Option<&Value>) -> &Map<String, Value> {
    v.and_then(Value::as_object).unwrap_or(&*EMPTY)
}

fn list(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// `check_artifact.py`'s nearest rank: `max(1, ceil(p / 100 · n))`, 1-based, in floating point
/// as it computes it (the contract test proves it equals the integer definition).
pub fn nearest_rank(sorted: &[f64], p: u32) -> f64 {
    let rank = ((f64::from(p) / 100.0 * sorted.len() as f64).ceil() as usize).max(1);
    sorted[rank - 1]
}

/// One distribution as `check_artifact.py` summarises it, keyed by statistic name.
pub fn summary(values: &[f64]) -> Vec<(String, f64)> {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    // Summed in ascending order, like Python's `sum(sorted(vals))`.
    let mean = s.iter().sum::<f64>() / n;
    let sd = if s.len() > 1 { (s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    let half = if s.len() > 1 { 1.96 * sd / n.sqrt() } else { 0.0 };
    let mut out = vec![
        ("mean".to_string(), mean),
        ("stddev".to_string(), sd),
        ("mean_ci95_low".to_string(), mean - half),
        ("mean_ci95_high".to_string(), mean + half),
        ("min".to_string(), s[0]),
        ("max".to_string(), s[s.len() - 1]),
        ("samples".to_string(), n),
    ];
    out.extend(PERCENTILES.iter().map(|&p| (format!("p{p}"), nearest_rank(&s, p))));
    out
}

/// The `metrics` key of one statistic: `ttft_p99_ms`, `decode_tok_s_p50`, `e2e_samples`.
pub fn metric_key(stem: &str, stat: &str, ms: bool) -> String {
    let unit = if ms && stat != "samples" { "_ms" } else { "" };
    format!("{stem}_{stat}{unit}")
}

/// Performance-eligible records: not marked ineligible, and no failed canary.
fn eligible(rts: &[Value]) -> Vec<&Value> {
    rts.iter()
        .filter(|r| {
            let marked = r.get("performance_eligible").is_none_or(|e| truthy(Some(e)));
            let canary_ok = match r.get("request_canary") {
                Some(Value::Object(c)) => c.get("passed").is_none_or(|p| truthy(Some(p))),
                _ => true,
            };
            marked && canary_ok
        })
        .collect()
}

/// Compare the summary of `values` with the artifact's keys under `stem`; keys absent from
/// `metrics` are skipped (the shape check reports the ones the contract requires).
fn check_family(m: &Map<String, Value>, stem: &str, ms: bool, values: &[f64], bad: &mut Vec<String>) {
    for (stat, want) in summary(values) {
        let key = metric_key(stem, &stat, ms);
        let Some(got) = m.get(&key) else { continue };
        if !close(got.as_f64(), Some(want), 1e-9, 1e-9) {
            bad.push(format!("metrics.{key} = {got}, request_timings give {want}"));
        }
    }
}

/// Values of `field` over `records` (nulls and absent keys skipped); a non-number is reported.
fn values_of(records: &[&Value], field: &str, bad: &mut Vec<String>) -> Vec<f64> {
    let mut out = Vec::new();
    for r in records {
        match r.get(field) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_f64() {
                Some(x) => out.push(x),
                None => bad.push(format!("request {}: {field} is {v}, not a number", show(r.get("request_index")))),
            },
        }
    }
    out
}

/// Exactly the checks of `check_artifact.py`, with its tolerances; one line per violation.
pub fn oracle(art: &Value, reference: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    shape(art, reference, &mut bad);
    let rts = list(art.get("request_timings"));
    for r in rts {
        if let Err(e) = arithmetic(r, &mut bad) {
            bad.push(format!("request {}: cannot check arithmetic ({e})", show(r.get("request_index"))));
        }
    }
    let m = obj(art.get("metrics"));
    let elig = eligible(rts);
    for (stem, field, ms) in FAMILIES {
        let values = values_of(&elig, field, &mut bad);
        if !values.is_empty() {
            check_family(m, stem, ms, &values, &mut bad);
        }
    }
    totals(art, m, &elig, &mut bad);
    canaries(art, m, rts, &mut bad);
    counts(art, elig.len(), &mut bad);
    bad
}

/// 1. Every top-level, `metrics`, block, `request_timings` and `request_canary` key of the
///    reference is present.
fn shape(art: &Value, reference: &Value, bad: &mut Vec<String>) {
    for k in obj(Some(reference)).keys() {
        if art.get(k).is_none() {
            bad.push(format!("missing top-level key: {k}"));
        }
    }
    if art.get("schema") != reference.get("schema") {
        bad.push(format!("schema is {}, want {}", show(art.get("schema")), show(reference.get("schema"))));
    }
    let m = obj(art.get("metrics"));
    for k in obj(reference.get("metrics")).keys() {
        if !m.contains_key(k) {
            bad.push(format!("missing metrics key: {k}"));
        }
    }
    for sect in ["metric_population", "timing_methodology", "sampling", "serve_flags"] {
        let have = obj(art.get(sect));
        for k in obj(reference.get(sect)).keys() {
            if !have.contains_key(k) {
                bad.push(format!("missing {sect} key: {k}"));
            }
        }
    }
    let first = &reference["request_timings"][0];
    let rt_keys = obj(Some(first));
    let canary_keys = obj(first.get("request_canary"));
    for r in list(art.get("request_timings")) {
        let have = obj(Some(r));
        for k in rt_keys.keys().filter(|k| !have.contains_key(*k)) {
            bad.push(format!("request {} lacks {k}", show(r.get("request_index"))));
        }
        if let Some(Value::Object(c)) = r.get("request_canary") {
            for k in canary_keys.keys().filter(|k| !c.contains_key(*k)) {
                bad.push(format!("request {} canary lacks {k}", show(r.get("request_index"))));
            }
        }
    }
}

/// A key that must be there (Python's `KeyError` otherwise); its value may be null.
fn key(r: &Value, k: &str) -> Result<Option<f64>, String> {
    match r.get(k) {
        None => Err(format!("KeyError: {k}")),
        Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| format!("TypeError: {k} is {v}")),
    }
}

/// A key that must be there and hold a number (it takes part in arithmetic).
fn number(r: &Value, k: &str) -> Result<f64, String> {
    key(r, k)?.ok_or_else(|| format!("TypeError: {k} is None"))
}

/// 2. Per-request arithmetic: generation, visible generation, TPOT, decode and effective prefill
///    follow from the recorded times and token counts.
fn arithmetic(r: &Value, bad: &mut Vec<String>) -> Result<(), String> {
    let i = show(r.get("request_index"));
    let e2e = number(r, "e2e_ms")?;
    let ttfo = number(r, "time_to_first_output_ms")?;
    let ttft = key(r, "ttft_ms")?;
    let n = key(r, "output_tokens")?;
    let generation = key(r, "generation_ms")?;
    if !close(generation, Some(e2e - ttfo), 1e-6, 1e-6) {
        bad.push(format!(
            "request {i}: generation_ms {} != e2e_ms - time_to_first_output_ms {}",
            show(r.get("generation_ms")),
            e2e - ttfo
        ));
    }
    if let Some(ttft) = ttft {
        if !close(key(r, "visible_generation_ms")?, Some(e2e - ttft), 1e-6, 1e-6) {
            bad.push(format!("request {i}: visible_generation_ms != e2e_ms - ttft_ms"));
        }
    }
    if let (Some(n), Some(g)) = (n, generation) {
        if n > 1.0 && g > 0.0 {
            let tpot = key(r, "tpot_ms")?;
            if !close(tpot, Some(g / (n - 1.0)), 1e-6, 1e-9) {
                bad.push(format!(
                    "request {i}: tpot_ms {} != generation_ms/(output_tokens-1) {}",
                    show(r.get("tpot_ms")),
                    g / (n - 1.0)
                ));
            }
            if !close(key(r, "decode_tok_s")?, Some((n - 1.0) / (g / 1000.0)), 1e-6, 1e-9) {
                bad.push(format!("request {i}: decode_tok_s != (output_tokens-1)/generation_s"));
            }
            if !close(key(r, "mean_inter_token_latency_ms")?, tpot, 1e-9, 1e-9) {
                bad.push(format!("request {i}: mean_inter_token_latency_ms != tpot_ms"));
            }
            if !close(key(r, "mean_time_per_output_token_ms")?, tpot, 1e-9, 1e-9) {
                bad.push(format!("request {i}: mean_time_per_output_token_ms != tpot_ms"));
            }
        }
    }
    if ttfo > 0.0 && truthy(r.get("prompt_tokens")) {
        let prompt = f(r.get("prompt_tokens")).ok_or("TypeError: prompt_tokens")?;
        if !close(key(r, "effective_prefill_tok_s")?, Some(prompt / (ttfo / 1000.0)), 1e-6, 1e-9) {
            bad.push(format!("request {i}: effective_prefill_tok_s != prompt_tokens/time_to_first_output_s"));
        }
    }
    if ttft.is_some_and(|t| t + 1e-9 < ttfo) {
        bad.push(format!("request {i}: ttft_ms < time_to_first_output_ms"));
    }
    Ok(())
}

/// 4a. Token and chunk totals over the eligible records, and throughput over the wall clock.
fn totals(art: &Value, m: &Map<String, Value>, elig: &[&Value], bad: &mut Vec<String>) {
    let total = |field: &str| elig.iter().map(|r| f(r.get(field)).unwrap_or(0.0)).sum::<f64>();
    for field in ["output_tokens", "prompt_tokens", "content_chunks", "reasoning_chunks"] {
        if let Some(got) = m.get(field) {
            if got.as_f64() != Some(total(field)) {
                bad.push(format!("metrics.{field} = {got}, request_timings sum to {}", total(field)));
            }
        }
    }
    let wall = art.get("wall_clock_ms");
    if truthy(wall) && m.get("throughput_tok_s").is_some_and(|t| !t.is_null()) {
        let want = f(m.get("output_tokens")).zip(f(wall)).map(|(tokens, wall)| tokens / (wall / 1000.0));
        if !close(f(m.get("throughput_tok_s")), want, 1e-9, 1e-9) {
            bad.push("metrics.throughput_tok_s != output_tokens / wall_clock_s".to_string());
        }
    }
}

/// 4b. Canary counts, and no canary passes without its four conditions.
fn canaries(art: &Value, m: &Map<String, Value>, rts: &[Value], bad: &mut Vec<String>) {
    if !truthy(art.get("request_canaries")) {
        return;
    }
    let canaries: Vec<&Value> = rts.iter().filter_map(|r| r.get("request_canary")).filter(|c| c.is_object()).collect();
    if !same(m.get("request_canary_samples"), Some(&Value::from(canaries.len()))) {
        bad.push(format!(
            "request_canary_samples {} != {} canary records",
            show(m.get("request_canary_samples")),
            canaries.len()
        ));
    }
    let passed = canaries.iter().filter(|c| truthy(c.get("passed"))).count();
    if !same(m.get("request_canary_passed"), Some(&Value::from(passed))) {
        bad.push("request_canary_passed disagrees with the canary records".to_string());
    }
    for r in rts {
        let c = r.get("request_canary").filter(|c| truthy(Some(c)));
        let Some(c) = c else { continue };
        let sound = truthy(c.get("marker_at_start"))
            && same(c.get("observed_marker_count"), Some(&Value::from(1)))
            && same(c.get("foreign_marker_count"), Some(&Value::from(0)))
            && truthy(c.get("capture_complete"));
        if truthy(c.get("passed")) && !sound {
            bad.push(format!(
                "request {}: canary passed without marker_at_start, one marker, no foreign marker and a complete capture",
                show(r.get("request_index"))
            ));
        }
    }
}

/// 4c. Population counts, completed + failed, failures, context distribution.
fn counts(art: &Value, eligible: usize, bad: &mut Vec<String>) {
    let pop = obj(art.get("metric_population"));
    if pop.contains_key("attempted_requests") && !same(pop.get("attempted_requests"), art.get("requests")) {
        bad.push("metric_population.attempted_requests != requests".to_string());
    }
    if let Some(got) = pop.get("performance_eligible_requests") {
        if !same(Some(got), Some(&Value::from(eligible))) {
            bad.push(format!(
                "metric_population.performance_eligible_requests {got} != {eligible} eligible request records"
            ));
        }
    }
    let (attempted, elig, excluded) = (
        f(pop.get("attempted_requests")),
        f(pop.get("performance_eligible_requests")),
        f(pop.get("excluded_requests")),
    );
    if let (Some(a), Some(e), Some(x)) = (attempted, elig, excluded) {
        if a - e != x {
            bad.push("metric_population: attempted - performance_eligible != excluded".to_string());
        }
    }
    if let (Some(c), Some(fl), Some(r)) = (f(art.get("completed")), f(art.get("failed")), f(art.get("requests"))) {
        if c + fl != r {
            bad.push("completed + failed != requests".to_string());
        }
    }
    let failures = list(art.get("failures")).len();
    let failed = if truthy(art.get("failed")) { f(art.get("failed")) } else { Some(0.0) };
    if Some(failures as f64) != failed {
        bad.push(format!("len(failures) {failures} != failed {}", show(art.get("failed"))));
    }
    let dist = obj(art.get("context_distribution"));
    if !dist.is_empty() {
        let sum: f64 = dist.values().filter_map(Value::as_f64).sum();
        if Some(sum) != f(art.get("requests")) {
            bad.push(format!("context_distribution counts sum to {sum}, requests is {}", show(art.get("requests"))));
        }
    }
}

/// What anvil-load's artifacts promise beyond the reference; one line per violation.
pub fn invariants(art: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    let rts = list(art.get("request_timings"));
    let failures = list(art.get("failures"));
    let dropped = list(art.get("dropped"));
    let m = obj(art.get("metrics"));
    let pop = obj(art.get("metric_population"));
    let elig = eligible(rts);

    if !same(Some(&Value::from(rts.len())), art.get("completed")) {
        bad.push(format!("{} request_timings, completed is {}", rts.len(), show(art.get("completed"))));
    }
    if !same(Some(&Value::from(dropped.len())), art.get("dropped_arrivals")) {
        bad.push(format!(
            "{} dropped records, dropped_arrivals is {}",
            dropped.len(),
            show(art.get("dropped_arrivals"))
        ));
    }
    let mut seen = BTreeSet::new();
    for r in rts.iter().chain(failures).chain(dropped) {
        if let Some(i) = r.get("request_index").and_then(Value::as_u64) {
            if !seen.insert(i) {
                bad.push(format!("request_index {i} appears in more than one record"));
            }
        }
    }
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for fail in failures {
        *kinds.entry(fail.get("error_kind").and_then(Value::as_str).unwrap_or("?").to_string()).or_default() += 1;
    }
    let counted: BTreeMap<String, u64> =
        obj(art.get("error_counts")).iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect();
    if kinds != counted {
        bad.push(format!("error_counts {counted:?}, failures by error_kind {kinds:?}"));
    }
    if !same(pop.get("failed_requests"), art.get("failed")) {
        bad.push("metric_population.failed_requests != failed".to_string());
    }
    if !same(pop.get("successful_requests"), art.get("completed")) {
        bad.push("metric_population.successful_requests != completed".to_string());
    }
    if let (Some(start), Some(end)) =
        (art.get("started_at_unix_ns").and_then(Value::as_u64), art.get("finished_at_unix_ns").and_then(Value::as_u64))
    {
        if end < start {
            bad.push("finished_at_unix_ns is before started_at_unix_ns".to_string());
        }
    }

    // Per-token families: per-request values, exact; tokens per chunk is derived from the
    // counts, so records written before the field existed give it too.
    for (stem, field) in [("max_stall", "max_stall_ms"), ("tpot_corrected", "tpot_corrected_ms")] {
        let values = values_of(&elig, field, &mut bad);
        let key = metric_key(stem, "samples", true);
        if m.get(&key).is_some_and(|n| n.as_u64() != Some(values.len() as u64)) {
            bad.push(format!("metrics.{key} = {}, {} eligible records have {field}", m[&key], values.len()));
        } else if !values.is_empty() {
            check_family(m, stem, true, &values, &mut bad);
        }
    }
    let per_chunk: Vec<f64> = elig
        .iter()
        .filter_map(|r| {
            let tokens = f(r.get("streamed_tokens")).or(f(r.get("output_tokens")))?;
            let chunks = f(r.get("content_chunks")).unwrap_or(0.0) + f(r.get("reasoning_chunks")).unwrap_or(0.0);
            (chunks > 0.0).then(|| tokens / chunks)
        })
        .collect();
    if m.get("tokens_per_chunk_samples").is_some_and(|n| n.as_u64() != Some(per_chunk.len() as u64)) {
        bad.push(format!(
            "metrics.tokens_per_chunk_samples = {}, {} eligible records",
            m["tokens_per_chunk_samples"],
            per_chunk.len()
        ));
    } else if !per_chunk.is_empty() {
        check_family(m, "tokens_per_chunk", false, &per_chunk, &mut bad);
    }

    // The families only anvil-load writes, and every family's empty form.
    for (stem, field) in INTENDED_FAMILIES {
        let values = values_of(&elig, field, &mut bad);
        if !values.is_empty() {
            check_family(m, stem, true, &values, &mut bad);
        }
    }
    let sent: Vec<&Value> = rts.iter().chain(failures).collect();
    for (stem, field) in CLIENT_FAMILIES {
        let values = values_of(&sent, field, &mut bad);
        if !values.is_empty() {
            check_family(m, stem, true, &values, &mut bad);
        }
    }
    let families = FAMILIES
        .iter()
        .map(|&(stem, field, ms)| (stem, field, ms, &elig))
        .chain(INTENDED_FAMILIES.iter().map(|&(stem, field)| (stem, field, true, &elig)))
        .chain(CLIENT_FAMILIES.iter().map(|&(stem, field)| (stem, field, true, &sent)));
    for (stem, field, ms, records) in families {
        if records.iter().any(|r| r.get(field).is_some_and(|v| !v.is_null())) {
            continue;
        }
        for stat in STATS {
            let key = metric_key(stem, stat, ms);
            let want = if stat == "samples" { Value::from(0) } else { Value::Null };
            if m.get(&key).is_some_and(|got| !same(Some(got), Some(&want))) {
                bad.push(format!("metrics.{key} = {}, but no record has {field} (want {want})", m[&key]));
            }
        }
    }

    let prompt_samples = elig.iter().filter(|r| r.get("prompt_tokens").is_some_and(|p| !p.is_null())).count();
    if m.contains_key("prompt_token_samples")
        && !same(m.get("prompt_token_samples"), Some(&Value::from(prompt_samples)))
    {
        bad.push(format!(
            "metrics.prompt_token_samples = {}, {prompt_samples} eligible records report prompt_tokens",
            m["prompt_token_samples"]
        ));
    }
    let sources: u64 = obj(m.get("output_token_sources")).values().filter_map(Value::as_u64).sum();
    if m.contains_key("output_token_sources") && sources != elig.len() as u64 {
        bad.push(format!("metrics.output_token_sources count {sources}, {} eligible records", elig.len()));
    }
    let wall = f(art.get("wall_clock_ms")).filter(|&w| w > 0.0);
    if let Some(got) = m.get("request_throughput_rps") {
        let want = wall.map(|w| elig.len() as f64 / (w / 1000.0));
        if !close(got.as_f64(), want, 1e-9, 1e-9) {
            bad.push(format!("metrics.request_throughput_rps = {got}, eligible requests / wall clock give {want:?}"));
        }
    }
    for (stem, n) in obj(pop.get("p99_samples_by_metric")) {
        if !same(Some(n), m.get(&format!("{stem}_samples"))) {
            bad.push(format!("metric_population.p99_samples_by_metric.{stem} = {n}, metrics.{stem}_samples differs"));
        }
    }
    bad
}
