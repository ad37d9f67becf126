//! What the structured-output check found in one answer (`[workload.response_format]`): which
//! schema the request asked for, whether its visible content satisfied it, and, when not, the
//! kind of rule it broke. The check itself is `workload::structured`; this is its result as the
//! records and `request_timings[]` keep it.

use serde::{Deserialize, Serialize};

use crate::plan::scenario::json_schema::Violation;

/// One answer's check, flattened into its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaCheck {
    /// The schema's place in `workload.response_format` (0 for a single schema).
    pub schema_index: u32,
    pub schema_name: String,
    /// Whether the answer satisfied its schema; null when it was too long to check.
    #[serde(default)]
    pub schema_valid: Option<bool>,
    /// The first rule the answer broke (absent when valid or unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_violation: Option<Violation>,
    /// Not valid, and cut by the output budget (`finish_reason = "length"`): counted apart from
    /// the invalid answers, since the budget, not the server, decided it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub schema_truncated: bool,
}

impl SchemaCheck {
    /// Checked, not valid, and not cut by the budget: the server broke its schema.
    pub fn invalid(&self) -> bool {
        self.schema_valid == Some(false) && !self.schema_truncated
    }
}
