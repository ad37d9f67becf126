//! A level's per-model lines (several models, `target.models`) and its cache reset line
//! (`load.reset_cache`), printed under the level's answer.

use std::fmt::Write as _;

use crate::numbers;
use crate::results::aggregate::summary::LevelSummary;

/// One line per model (requests, failures, TTFT and TPOT p50/p99, throughput), and the reset.
pub fn lines(s: &mut String, a: &LevelSummary) {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), numbers::duration_ms);
    if let Some(r) = &a.cache_reset {
        let slots: u32 = r.replicas.iter().filter_map(|r| r.slots_erased).sum();
        let slots = if r.engine == "llamacpp" { format!(", {slots} slots erased") } else { String::new() };
        let _ = writeln!(
            s,
            "cache reset ({}) before the level: {} replica(s) in {}{slots}",
            r.engine,
            r.replicas.len(),
            numbers::duration_ms(r.elapsed_ms)
        );
    }
    for m in a.models.iter().flatten() {
        let _ = writeln!(
            s,
            "model {}: {} requests, {} failed · TTFT p50 {} p99 {} · TPOT p50 {} p99 {} · {} tok/s",
            m.name,
            m.requests,
            m.failures,
            ms(m.ttft_ms.p50),
            ms(m.ttft_ms.p99),
            ms(m.tpot_ms.p50),
            ms(m.tpot_ms.p99),
            m.output_tokens_per_s.map_or_else(|| "–".to_string(), numbers::rate)
        );
    }
}
