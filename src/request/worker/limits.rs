//! What the client knows each request may produce, to judge the server's answer by: the output
//! budget it was sent (for usage beyond it, and for a finish reason that disagrees with it), the
//! most prompt tokens its body can hold, and the run's request count (an index at or above it
//! is no request's canary marker).

use crate::plan::scenario::Scenario;
use crate::request::record::checks::UsageBounds;
use crate::request::workload::PreparedRequest;

/// `extra_body` fields some engines read as the output budget beside `max_tokens` (llama.cpp:
/// `n_predict` > `max_completion_tokens` > `max_tokens`); the largest one sent is the budget.
const BUDGET_FIELDS: [&str; 4] = ["max_completion_tokens", "max_output_tokens", "n_predict", "max_new_tokens"];

/// The limits of a run's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestLimits {
    /// `workload.max_tokens`; `None` when unknown.
    pub max_tokens: Option<u32>,
    /// A budget `extra_body` sends beside it: `Some(None)` when it lifts the budget altogether
    /// (`n_predict = -1`).
    pub extra_budget: Option<Option<u64>>,
    /// Requests per level when the scenario counts them (`run.requests`).
    pub canary_index_limit: Option<u64>,
}

impl RequestLimits {
    pub fn from_scenario(s: &Scenario) -> Self {
        let mut extra_budget: Option<Option<u64>> = None;
        for field in BUDGET_FIELDS {
            let Some(v) = s.target.extra_body.get(field).filter(|v| v.is_number()) else { continue };
            let this = match v.as_u64() {
                Some(n) => Some(n),
                // A negative budget is "unlimited" to the engines that read one.
                None if v.as_i64().is_some_and(|n| n < 0) || v.as_f64().is_some_and(|n| n < 0.0) => None,
                None => v.as_f64().map(|n| n as u64),
            };
            extra_budget = Some(match (extra_budget, this) {
                (Some(None), _) | (_, None) => None,
                (Some(Some(a)), Some(b)) => Some(a.max(b)),
                (None, b) => b,
            });
        }
        RequestLimits { max_tokens: Some(s.workload.max_tokens), extra_budget, canary_index_limit: s.run.requests }
    }

    /// The output budget `req` was sent: its own planned length (a trace row, a conversation
    /// turn), else `max_tokens`, or a larger one `extra_body` names; `None` when none is known.
    pub fn budget(&self, req: &PreparedRequest) -> Option<u64> {
        let own = req.replay.as_deref().and_then(|r| r.planned_output_tokens).or(self.max_tokens).map(u64::from);
        match self.extra_budget {
            None => own,
            Some(None) => None,
            Some(Some(extra)) => Some(own.map_or(extra, |b| b.max(extra))),
        }
    }

    /// The most usage `req` can plausibly report.
    pub fn bounds(&self, req: &PreparedRequest) -> UsageBounds {
        UsageBounds::for_request(req.body.len(), self.budget(req))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The extra budget of a scenario whose `extra_body` holds `extra`.
    fn budget_of(extra: &[(&str, Value)]) -> Option<Option<u64>> {
        let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 7\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
        let mut s =
            Scenario::from_toml(std::path::Path::new("t.toml"), text, &crate::plan::scenario::Overrides::default())
                .expect("a valid scenario");
        for (k, v) in extra {
            s.target.extra_body.insert((*k).to_string(), v.clone());
        }
        let limits = RequestLimits::from_scenario(&s);
        assert_eq!((limits.max_tokens, limits.canary_index_limit), (Some(8), Some(7)));
        limits.extra_budget
    }

    #[test]
    fn extra_body_budgets_raise_or_lift_the_budget() {
        assert_eq!(budget_of(&[]), None);
        assert_eq!(budget_of(&[("top_k", Value::from(20))]), None);
        assert_eq!(budget_of(&[("n_predict", Value::from(64))]), Some(Some(64)));
        assert_eq!(budget_of(&[("n_predict", Value::from(-1))]), Some(None));
        assert_eq!(
            budget_of(&[("max_completion_tokens", Value::from(32)), ("n_predict", Value::from(64))]),
            Some(Some(64))
        );
        assert_eq!(budget_of(&[("max_new_tokens", Value::from("x"))]), None);
    }
}
