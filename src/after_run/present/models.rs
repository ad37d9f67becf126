//! A level's per-model table (several models, `target.models`) and its cache reset (`load.reset_cache`),
//! read from the artifact's `models[]` and `cache_reset` blocks.

use serde_json::Value;

use super::doc::{Block, Cell, Table, Tone};
use super::facts::opt;
use crate::results::artifact::ArtifactFile;

/// The table (one row per model: requests, failures, TTFT and TPOT p50/p99, output tok/s) and a
/// line for the reset; nothing when the level has neither.
pub fn blocks(a: &ArtifactFile) -> Vec<Block> {
    let mut out = Vec::new();
    if let Some(Value::Array(rows)) = a.models.as_ref() {
        let mut t = Table::new(
            &[
                "model",
                "requests",
                "failed",
                "TTFT p50 ms",
                "TTFT p99 ms",
                "TPOT p50 ms",
                "TPOT p99 ms",
                "output tok/s",
            ],
            1,
        );
        for r in rows {
            let ms = |key: &str, p: &str| opt(r[key][p].as_f64());
            let failed = r["failures"].as_u64().unwrap_or(0);
            t.row(vec![
                Cell::from(r["name"].as_str().unwrap_or("?").to_string()),
                Cell::from(r["requests"].as_u64().unwrap_or(0).to_string()),
                Cell::toned(failed.to_string(), if failed == 0 { Tone::Plain } else { Tone::Bad }),
                Cell::from(ms("ttft_ms", "p50")),
                Cell::from(ms("ttft_ms", "p99")),
                Cell::from(ms("tpot_ms", "p50")),
                Cell::from(ms("tpot_ms", "p99")),
                Cell::from(opt(r["output_tokens_per_s"].as_f64())),
            ]);
        }
        out.push(Block::Table(t));
    }
    if let Some(r) = a.cache_reset.as_ref().filter(|r| r.is_object()) {
        let replicas = r["replicas"].as_array().map_or(0, Vec::len);
        out.push(Block::Note(format!(
            "The server's cache was reset before the level ({}, {replicas} replica(s), {} ms).",
            r["engine"].as_str().unwrap_or("?"),
            opt(r["elapsed_ms"].as_f64())
        )));
    }
    out
}
