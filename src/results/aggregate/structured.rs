//! Structured output (`[workload.response_format]`): the level's answers counted against their
//! schemas — checked, valid, invalid by the rule they broke, cut by the output budget, too long
//! to check — overall and per schema, and the gate: past `max_invalid_rate` invalid answers the
//! level is not eligible, like a level whose load was not valid.
//!
//! Tallied in the one pass `finish_level` makes over the level's records (every phase: the
//! server's answers are what is judged), so the live run, `summarize` and `merge` agree.

use std::collections::BTreeMap;

use serde::Serialize;

use super::warnings::Warning;
use crate::request::record::{RequestTiming, RunInfo};

/// One schema's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemaRow {
    pub index: u32,
    pub name: String,
    /// Completed requests that asked for it.
    pub requests: u64,
    pub valid: u64,
    pub invalid: u64,
    pub truncated: u64,
}

/// The level's `structured_output` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StructuredSummary {
    /// Completed requests that asked for structured output.
    pub requests: u64,
    /// Answers checked (all but those too long to keep).
    pub checked: u64,
    pub valid: u64,
    /// Checked, not valid, and not cut by the output budget: excluded (`schema_invalid`).
    pub invalid: u64,
    /// Not valid because the output budget cut them (`finish_reason = "length"`): kept.
    pub truncated: u64,
    /// Too long to keep whole (see the manual): not checked.
    pub unchecked: u64,
    /// `valid / checked`; null with nothing checked.
    pub schema_valid_rate: Option<f64>,
    /// `invalid / checked`; null with nothing checked.
    pub invalid_rate: Option<f64>,
    pub max_invalid_rate: f64,
    /// The gate: `invalid_rate <= max_invalid_rate` (true with nothing checked).
    pub passed: bool,
    /// Invalid answers by the rule they broke (`not_json`, `required`, …).
    pub invalid_by_reason: BTreeMap<String, u64>,
    /// Cut answers by what the check found (mostly `not_json`).
    pub truncated_by_reason: BTreeMap<String, u64>,
    pub schemas: Vec<SchemaRow>,
}

/// The tally as the pass over the records goes.
#[derive(Debug, Default)]
pub struct Tally {
    requests: u64,
    checked: u64,
    valid: u64,
    invalid: u64,
    truncated: u64,
    invalid_by_reason: BTreeMap<String, u64>,
    truncated_by_reason: BTreeMap<String, u64>,
    schemas: BTreeMap<u32, SchemaRow>,
}

/// The run's `max_invalid_rate`, when it asked for structured output.
pub fn max_invalid_rate(info: &RunInfo) -> Option<f64> {
    info.scenario.pointer("/workload/response_format/max_invalid_rate").and_then(serde_json::Value::as_f64)
}

impl Tally {
    /// A completed request.
    pub fn request(&mut self, r: &RequestTiming) {
        let Some(s) = &r.schema else { return };
        self.requests += 1;
        let row = self.schemas.entry(s.schema_index).or_insert_with(|| SchemaRow {
            index: s.schema_index,
            name: s.schema_name.clone(),
            requests: 0,
            valid: 0,
            invalid: 0,
            truncated: 0,
        });
        row.requests += 1;
        let reason = s.schema_violation.map_or("other", |v| v.as_str()).to_string();
        match s.schema_valid {
            None => {}
            Some(true) => {
                self.checked += 1;
                self.valid += 1;
                row.valid += 1;
            }
            Some(false) if s.schema_truncated => {
                self.checked += 1;
                self.truncated += 1;
                row.truncated += 1;
                *self.truncated_by_reason.entry(reason).or_default() += 1;
            }
            Some(false) => {
                self.checked += 1;
                self.invalid += 1;
                row.invalid += 1;
                *self.invalid_by_reason.entry(reason).or_default() += 1;
            }
        }
    }

    pub fn finish(self, max_invalid_rate: f64) -> StructuredSummary {
        let rate = |n: u64| (self.checked > 0).then(|| n as f64 / self.checked as f64);
        let invalid_rate = rate(self.invalid);
        StructuredSummary {
            requests: self.requests,
            checked: self.checked,
            valid: self.valid,
            invalid: self.invalid,
            truncated: self.truncated,
            unchecked: self.requests.saturating_sub(self.checked),
            schema_valid_rate: rate(self.valid),
            invalid_rate,
            max_invalid_rate,
            passed: invalid_rate.is_none_or(|r| r <= max_invalid_rate),
            invalid_by_reason: self.invalid_by_reason,
            truncated_by_reason: self.truncated_by_reason,
            schemas: self.schemas.into_values().collect(),
        }
    }
}

/// The warnings the block calls for.
pub fn warnings(s: &StructuredSummary) -> Vec<Warning> {
    let mut w = Vec::new();
    if s.invalid > 0 {
        w.push(Warning::SchemaInvalid {
            invalid: s.invalid,
            checked: s.checked,
            max_invalid_rate: s.max_invalid_rate,
            passed: s.passed,
            by_reason: s.invalid_by_reason.clone(),
        });
    }
    if s.truncated > 0 {
        w.push(Warning::SchemaTruncated { truncated: s.truncated, checked: s.checked });
    }
    w
}

/// The reason a level that failed the gate gives in its validity.
pub fn validity_reason(s: &StructuredSummary) -> Option<String> {
    (!s.passed).then(|| {
        format!(
            "{} of {} structured answers broke their schema ({:.1}%), above workload.response_format.max_invalid_rate ({:.1}%)",
            s.invalid,
            s.checked,
            s.invalid_rate.unwrap_or(0.0) * 100.0,
            s.max_invalid_rate * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::json_schema::Violation;
    use crate::request::record::SchemaCheck;

    fn check(valid: Option<bool>, violation: Option<Violation>, truncated: bool) -> SchemaCheck {
        SchemaCheck {
            schema_index: 0,
            schema_name: "a".into(),
            schema_valid: valid,
            schema_violation: violation,
            schema_truncated: truncated,
        }
    }

    #[test]
    fn answers_are_counted_by_verdict_and_reason_and_the_gate_holds_at_the_threshold() {
        let mut t = Tally::default();
        let checks = [
            check(Some(true), None, false),
            check(Some(true), None, false),
            check(Some(false), Some(Violation::Required), false),
            check(Some(false), Some(Violation::NotJson), true),
            check(None, None, false),
        ];
        for c in checks {
            let mut r: RequestTiming = serde_json::from_value(record()).unwrap();
            r.schema = Some(c);
            t.request(&r);
        }
        let s = t.finish(0.25);
        assert_eq!((s.requests, s.checked, s.valid, s.invalid, s.truncated, s.unchecked), (5, 4, 2, 1, 1, 1));
        assert_eq!(s.invalid_by_reason, BTreeMap::from([("required".to_string(), 1)]));
        assert_eq!(s.truncated_by_reason, BTreeMap::from([("not_json".to_string(), 1)]));
        assert_eq!((s.schema_valid_rate, s.invalid_rate, s.passed), (Some(0.5), Some(0.25), true));
        assert!(validity_reason(&s).is_none());
        let codes: Vec<&str> = warnings(&s).iter().map(Warning::code).collect();
        assert_eq!(codes, ["schema_invalid", "schema_truncated"]);
        let strict = Tally { requests: 4, invalid: 1, checked: 4, ..Tally::default() }.finish(0.2);
        assert!(!strict.passed && validity_reason(&strict).is_some());
    }

    pub(super) fn record() -> serde_json::Value {
        serde_json::json!({
            "request_index": 0, "planned_context_tokens": 1, "prompt_target_tokens": 1, "prompt_tokens": null,
            "cached_tokens": null, "output_tokens": 1, "output_token_source": "usage", "content_chunks": 1,
            "reasoning_chunks": 0, "start_offset_ms": 0.0, "intended_offset_ms": null, "schedule_lag_ms": null,
            "queue_wait_ms": null, "time_to_first_output_ms": 1.0, "ttft_ms": 1.0, "e2e_ms": 2.0,
            "generation_ms": 1.0, "visible_generation_ms": 1.0, "tpot_ms": null,
            "mean_time_per_output_token_ms": null, "mean_inter_token_latency_ms": null, "decode_tok_s": null,
            "effective_prefill_tok_s": null, "finish_reason": "stop", "visible_content_truncated": false,
            "request_canary": null, "ttft_from_intended_ms": null, "e2e_from_intended_ms": null, "phase": "measure",
            "prompt_sizing_error_pct": null, "controlled_output": null, "performance_eligible": true,
            "exclusion_reason": null, "stale_connection_retries": 0, "retries": 0, "retried_errors": []
        })
    }
}
