//! Warnings as people read them after a run of several levels: one entry per kind (its code), the
//! levels it applies to, the full text once, the most important kinds first. The console and the
//! reports both group through here, so a ten-probe search says each thing once, not ten times.

/// How much a warning kind matters to whoever reads the numbers: lower comes first. Whether the
/// numbers hold at all (nothing measured, failures, wrong answers, a broken record) comes before
/// how far to trust them (sizing, usage, steady state), which comes before context (sample counts,
/// chunking, the simulator). Unknown codes (a newer artifact, a server warning) sit in the middle.
pub fn importance(code: &str) -> u8 {
    match code {
        "no_success" | "nothing_eligible" | "interrupted" | "records_incomplete" | "partial_merge" => 0,
        "canaries_all_failed" | "cross_session_contamination" | "invalid_load" | "model_not_listed" => 1,
        "schema_invalid" => 2,
        "schema_truncated" => 3,
        "requests_failed" | "canaries_failed" | "usage_rejected" | "output_control_ignored" => 2,
        "tls_verification_off" | "credential_refresh_failed" => 2,
        "budget_spent_in_reasoning" => 2,
        "finish_reason_at_budget" | "prompt_sizing_off" | "sizing_fallback" | "usage_undercounted" => 3,
        "replicas_differ" | "cache_not_reset" => 3,
        "no_usage_reported" | "usage_not_streamed" | "steady_state_none" | "server_counts_differ" => 4,
        "steady_state_short" | "cache_warm_in_unique_mode" | "conversation_cache_ineffective" => 5,
        "canary_markers_malformed" | "p99_descriptive" => 7,
        "multi_token_chunks" => 8,
        "simulated_target" => 9,
        _ => 6,
    }
}

/// One kind of warning across the levels of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarningGroup {
    pub code: String,
    /// The levels it was raised at, in the order first seen (labels as the caller names them).
    pub levels: Vec<String>,
    /// The first level's full message; later levels' differ only in their figures.
    pub message: String,
    /// Whether it was raised at every level the caller had.
    pub every_level: bool,
}

/// Group `(level, code, message)` triples by code, most important kind first (then by first
/// appearance). `levels` is how many levels there were, for `every_level`.
pub fn grouped<'a>(
    warnings: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    levels: usize,
) -> Vec<WarningGroup> {
    let mut groups: Vec<WarningGroup> = Vec::new();
    for (level, code, message) in warnings {
        match groups.iter_mut().find(|g| g.code == code) {
            Some(g) => {
                if !g.levels.iter().any(|l| l == level) {
                    g.levels.push(level.to_string());
                }
            }
            None => groups.push(WarningGroup {
                code: code.to_string(),
                levels: vec![level.to_string()],
                message: message.to_string(),
                every_level: false,
            }),
        }
    }
    for g in &mut groups {
        g.every_level = levels > 0 && g.levels.len() >= levels;
    }
    // Stable: equal importance keeps the order of first appearance.
    groups.sort_by_key(|g| importance(&g.code));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_kind_with_its_levels_most_important_first() {
        let raised = [
            ("c=1", "simulated_target", "sim"),
            ("c=1", "p99_descriptive", "only 32"),
            ("c=2", "simulated_target", "sim"),
            ("c=2", "p99_descriptive", "only 31"),
            ("c=2", "requests_failed", "3 failed"),
        ];
        let groups = grouped(raised, 2);
        let codes: Vec<&str> = groups.iter().map(|g| g.code.as_str()).collect();
        assert_eq!(codes, ["requests_failed", "p99_descriptive", "simulated_target"]);
        assert_eq!(groups[1].levels, ["c=1", "c=2"]);
        assert_eq!(groups[1].message, "only 32");
        assert!(groups[1].every_level);
        assert!(!groups[0].every_level);
    }
}
