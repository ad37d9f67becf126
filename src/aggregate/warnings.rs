//! Methodology warnings: one enum, each variant a stable code and the facts its message states.
//! The console prints them and the artifact keeps them as `{code, message}`.

use std::collections::BTreeMap;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// A methodology problem, shown on the console and saved in the artifact.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    SimulatedTarget { profile: String },
    Interrupted,
    CanariesAllFailed { canaries: usize },
    CanariesFailed { failed: usize, canaries: usize },
    RequestsFailed { failed: usize, attempted: u64, by_kind: BTreeMap<String, u64> },
    NoUsageReported { responses: usize },
    SizingFallback { reason: String },
    PromptSizingOff { mean_pct: f64, bias_pct: f64 },
    CacheWarmInUniqueMode { warm: usize, completed: usize },
    P99Descriptive { fewest: usize, minimum: usize },
    InvalidLoad { reason: String },
    NoSuccess,
}

impl Warning {
    /// The stable identifier.
    pub fn code(&self) -> &'static str {
        match self {
            Warning::SimulatedTarget { .. } => "simulated_target",
            Warning::Interrupted => "interrupted",
            Warning::CanariesAllFailed { .. } => "canaries_all_failed",
            Warning::CanariesFailed { .. } => "canaries_failed",
            Warning::RequestsFailed { .. } => "requests_failed",
            Warning::NoUsageReported { .. } => "no_usage_reported",
            Warning::SizingFallback { .. } => "sizing_fallback",
            Warning::PromptSizingOff { .. } => "prompt_sizing_off",
            Warning::CacheWarmInUniqueMode { .. } => "cache_warm_in_unique_mode",
            Warning::P99Descriptive { .. } => "p99_descriptive",
            Warning::InvalidLoad { .. } => "invalid_load",
            Warning::NoSuccess => "no_success",
        }
    }

    /// What the user reads: the problem, the facts, and what to do.
    pub fn message(&self) -> String {
        match self {
            Warning::SimulatedTarget { profile } => format!(
                "measured against the embedded simulator (profile {profile}), not a real engine; give --base-url to measure a server"
            ),
            Warning::Interrupted => {
                "the run was stopped before it finished; the numbers cover what completed".to_string()
            }
            Warning::CanariesAllFailed { canaries } => format!(
                "all {canaries} canaries failed: the model did not begin its replies with the requested marker (small models often cannot), or responses are being mixed up between requests; if the model cannot follow the instruction, set workload.canaries = false"
            ),
            Warning::CanariesFailed { failed, canaries } => format!(
                "{failed} of {canaries} canaries failed; those responses are excluded from the distributions (see request_timings[].request_canary)"
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
            Warning::SizingFallback { reason } => {
                format!("prompt sizing fell back to the built-in estimate: {reason}")
            }
            Warning::PromptSizingOff { mean_pct, bias_pct } => format!(
                "the server counted prompts {mean_pct:.1}% away from their target on average (bias {bias_pct:+.1}%): the planned context is not what the server saw; use workload.tokenizer = \"calibrate\" or a tokenizer.json"
            ),
            Warning::CacheWarmInUniqueMode { warm, completed } => format!(
                "{warm} of {completed} requests reported cached prompt tokens although every prompt starts with a unique prefix: the cache was warm (reproducible prompts sent before, or another client), so this cold-cache measurement was partly warm"
            ),
            Warning::P99Descriptive { fewest, minimum } => format!(
                "only {fewest} eligible samples: p99 is descriptive (one sample decides it); use at least {minimum} requests for a p99 to compare"
            ),
            Warning::InvalidLoad { reason } => reason.clone(),
            Warning::NoSuccess => "no request succeeded; see the failures in the artifact".to_string(),
        }
    }
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Warning", 2)?;
        s.serialize_field("code", self.code())?;
        s.serialize_field("message", &self.message())?;
        s.end()
    }
}
