//! The artifact: one JSON document per load level in the `anvil-serving.benchmark/v1` schema.
//!
//! Every key of the reference artifact is here with the same meaning; extra keys (per-request
//! `cached_tokens`, `error_counts`, `warnings`, the resolved `scenario`, the simulator's own
//! counts) add to it. Files are written by the one rule of [`output`]: atomically (a temporary
//! file in the same directory, flushed, then renamed), so a reader never sees half an artifact.

mod build;
pub mod json;
pub mod kept;
mod methodology;
pub mod output;
pub mod read;
pub(crate) mod scan;
mod stream;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

pub use build::{build, metrics};
pub use kept::Keep;
pub use methodology::TimingMethodology;
pub use read::ArtifactFile;
pub use stream::{StreamKind, Streamed};

use crate::request::record::{SamplingRecord, ServeFlagsRecord};
use crate::request::record::{ShardInfo, ShardsBlock};
use crate::request::server_metrics::LevelServerMetrics;
use crate::results::aggregate::load::LoadRecord;
use crate::results::aggregate::slo::SloReport;
use crate::results::aggregate::snapshots::Drift;
use crate::results::aggregate::summary::{Population, SessionSummary};
use crate::results::aggregate::warnings::Warning;

pub const SCHEMA: &str = "anvil-serving.benchmark/v1";

/// The artifact document. Field names are the contract.
#[derive(Debug, Clone, Serialize)]
pub struct Artifact {
    pub schema: &'static str,
    pub run_id: String,
    pub measurement_protocol: Option<String>,
    pub tier: Option<String>,
    pub engine: Option<String>,
    pub gpu: Option<String>,
    pub model: String,
    /// Where `model` came from when the scenario did not decide it (the server's `/models`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_source: Option<crate::request::record::run_info::ModelSource>,
    pub api: crate::plan::scenario::Api,
    pub base_url: String,
    pub started_at: String,
    pub started_at_unix_ns: u64,
    pub finished_at: String,
    pub finished_at_unix_ns: u64,
    pub timestamp_precision: &'static str,
    pub clock_domain_id: Option<String>,
    pub configuration_fingerprint: String,
    pub manifest: Option<Value>,
    pub source_recipe: Option<Value>,
    /// Pacing: `load_mode`, `concurrency`, `rate`, `arrival`, `achieved_rate`, `validity`, …
    #[serde(flatten)]
    pub load: LoadRecord,
    /// Attempted requests (every one is in `request_timings` or `failures`).
    pub requests: u64,
    /// Requests that streamed to `[DONE]`.
    pub completed: u64,
    pub failed: u64,
    /// Requests that got any HTTP response from the server.
    pub responses_received: u64,
    pub interrupted: bool,
    /// The planned context: one size, or the mixture's weights.
    pub context_tokens: Value,
    pub context_seed: u64,
    /// Planned contexts actually drawn, counted over attempted requests.
    pub context_distribution: BTreeMap<String, u64>,
    pub max_context_tokens: u32,
    pub max_tokens: u32,
    pub prompt_cache_mode: String,
    pub shared_prefix_tokens: u32,
    /// Prompts identical across runs with the same seed (no salt).
    pub prompts_reproducible: bool,
    /// Every level of a sweep or search sent the same prompts (`reproducible = true`); otherwise
    /// each level's prompts are its own, so no level warms the next one's cache.
    pub levels_share_prompts: bool,
    /// The salt mixed into this run's prompt text (zeros when reproducible).
    pub prompt_salt: String,
    /// The salt this level's prompts were built with, derived from the run's and the level
    /// (the run's when reproducible); null when the run's salt is not 16 hex digits.
    pub level_prompt_salt: Option<String>,
    /// How prompts were sized to the server's token count, with the calibration evidence.
    pub prompt_sizing: crate::request::record::SizingRecord,
    pub request_canaries: bool,
    pub controlled_output_policy: crate::plan::scenario::ControlledOutputPolicy,
    pub response_words: u32,
    pub sampling: SamplingRecord,
    pub serve_flags: ServeFlagsRecord,
    /// True when the level's numbers are fit for comparison: requests succeeded, no failures,
    /// no failed canaries, not interrupted.
    pub performance_eligible: bool,
    pub wall_clock_ms: f64,
    pub metrics: Map<String, Value>,
    pub metric_population: Population,
    pub error_counts: BTreeMap<String, u64>,
    pub warnings: Vec<Warning>,
    pub timing_methodology: TimingMethodology,
    /// The `[slo]` objectives checked against this level, when the scenario has any.
    pub slo: Option<SloReport>,
    /// First against last windows of a long run (null below two snapshot windows).
    pub drift: Option<Drift>,
    /// Snapshot windows taken during the level (also in `<run_id>.timeseries.ndjson`).
    pub snapshot_windows: usize,
    /// The window where the planned load was on, and throughput and latencies inside it (null
    /// when the level never reached its load).
    pub steady_state: Option<Value>,
    /// The records, streamed from the records file as the artifact is written.
    pub request_timings: Streamed,
    pub failures: Streamed,
    /// Open loop: arrivals not sent because every in-flight slot was taken (`overload = "drop"`).
    pub dropped: Streamed,
    /// The validated scenario this level ran (API key excluded; only its variable name).
    pub scenario: Value,
    /// The embedded simulator's own counters, when it was the target.
    pub simulator: Option<Value>,
    /// The server's own metrics over the level (counter deltas, gauge summaries), when scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<LevelServerMetrics>,
    /// Conversations: per-turn summaries, cache effectiveness, sessions, backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversations: Option<SessionSummary>,
    /// Several replicas (`target.base_urls`): one row per replica, in the scenario's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<crate::results::aggregate::replicas::ReplicaSummary>>,
    /// Structured output (`[workload.response_format]`): answers against their schemas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<crate::results::aggregate::structured::StructuredSummary>,
    /// Several models (`target.models`): one row per model, in the scenario's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<crate::results::aggregate::models::ModelSummary>>,
    /// `load.reset_cache`: the reset called before the level and each replica's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<crate::request::cache_reset::CacheResetRecord>,
    /// Runs that offer tools (`[workload.tools]`): the level's tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<crate::results::aggregate::tool_calls::ToolCallSummary>,
    /// `[workload.media]`: media per request, sizes, and TTFT by media count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<crate::results::aggregate::media::MediaSummary>,
    /// Which shard of a split run this is (absent from unsharded runs and merged artifacts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// A merged artifact: its parts, each shard's own validity, and whether any was missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsBlock>,
    /// APIs that do not stream (embeddings, rerank): why each streaming metric is null, zero
    /// or equal to another (absent for streamed APIs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric_notes: Option<BTreeMap<&'static str, String>>,
    pub client: ClientInfo,
    /// How often `target.api_key_command` ran during the run so far (never the token); absent
    /// when the key does not come from a command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_refreshes: Option<crate::request::worker::credentials::RefreshCounts>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    pub name: &'static str,
    pub version: &'static str,
    /// The commit the binary was built from (`-dirty` when the tree had changes; `unknown` when
    /// the build had neither git nor `ANVIL_BUILD_COMMIT`): see `build.rs`.
    pub commit: &'static str,
    /// The build date, UTC (YYYY-MM-DD; `SOURCE_DATE_EPOCH` when set).
    pub build_date: &'static str,
}

impl ClientInfo {
    pub fn this() -> Self {
        ClientInfo {
            name: env!("CARGO_PKG_NAME"),
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("ANVIL_BUILD_COMMIT"),
            build_date: env!("ANVIL_BUILD_DATE"),
        }
    }
}

/// Write `value` as JSON (pretty, one record per line: see [`json`]) to `dir/name` by the one
/// rule every whole output follows (see [`output`]): atomically through a temporary file with an
/// unpredictable name, created exclusively in the same directory with the process umask,
/// flushed to disk, then renamed over `name` — which is only ever a regular file or nothing.
/// Returns the final path.
pub fn write_json_atomic(dir: &Path, name: &str, value: &impl Serialize) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    output::write_whole(&path, |w| {
        json::to_writer(&mut *w, value)?;
        w.write_all(b"\n")
    })?;
    Ok(path)
}

/// Check before a run that artifacts can be written there (so an hour of load is not lost to a
/// typo in `--out`). The probe file is created exclusively under a random name and removed.
/// `-` (standard output) is refused: a run writes several files.
pub fn ensure_writable_dir(dir: &Path) -> std::io::Result<()> {
    if output::is_stdout(dir) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "- means standard output, which cannot hold the several files written here; give a directory",
        ));
    }
    std::fs::create_dir_all(dir)?;
    let mut probe = tempfile::Builder::new().prefix(".anvil-write-probe-").tempfile_in(dir)?;
    probe.write_all(b"probe")?;
    probe.close()
}

/// Bytes a run writes per request: its record twice (records file and artifact) plus slack.
pub const BYTES_PER_REQUEST: u64 = 3 * 1024;
/// Below this much free space no run starts: snapshots and artifacts need room too.
pub const MIN_FREE_BYTES: u64 = 64 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted where a temporary or probe file used to go (a name built from the process
    /// id) must never have its target written.
    #[cfg(unix)]
    #[test]
    fn planted_links_never_redirect_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let pid = std::process::id();
        for planted in [format!(".a.json.tmp-{pid}"), format!(".anvil-write-probe-{pid}")] {
            std::os::unix::fs::symlink(&victim, dir.path().join(planted)).unwrap();
        }
        ensure_writable_dir(dir.path()).unwrap();
        let path = write_json_atomic(dir.path(), "a.json", &serde_json::json!({ "x": 1 })).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        assert_eq!(std::fs::read_to_string(path).unwrap(), "{\n  \"x\": 1\n}\n");
        // Nothing else was left behind: the two links, the victim and the artifact.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }
}
