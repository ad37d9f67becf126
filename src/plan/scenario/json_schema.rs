//! JSON Schemas a scenario names (structured output's `response_format`, the parameters of
//! tools): compiled once, when the scenario is validated, and the check every answer that must
//! follow one goes through.
//!
//! The schema is checked as a JSON Schema (draft 2020-12 unless it says otherwise) by the
//! `jsonschema` crate, built without its HTTP and file resolvers: a `$ref` can only point inside
//! the schema, so checking an answer never reads a file or the network. A failed check says what
//! kind of rule the answer broke (`Violation`), never the answer's own text.

use std::fmt;
use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A compiled JSON Schema, shared by every worker.
#[derive(Clone)]
pub struct JsonSchema {
    value: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl JsonSchema {
    /// Compiles `value`; the error says what is wrong with the schema, in the library's words,
    /// for the rule that reports it (key, file, fix).
    pub fn compile(value: Value) -> Result<JsonSchema, String> {
        if !matches!(value, Value::Object(_) | Value::Bool(_)) {
            return Err("a JSON Schema is an object (or true/false)".into());
        }
        let validator = jsonschema::validator_for(&value).map_err(|e| format!("not a usable JSON Schema: {e}"))?;
        Ok(JsonSchema { value: Arc::new(value), validator: Arc::new(validator) })
    }

    /// The schema as written, for request bodies.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Whether `text` is one JSON value that satisfies the schema; when not, the first rule it
    /// broke.
    pub fn check_text(&self, text: &str) -> Result<(), Violation> {
        let value: Value = serde_json::from_str(text.trim()).map_err(|_| Violation::NotJson)?;
        self.check(&value)
    }

    /// Whether `value` satisfies the schema; when not, the first rule it broke.
    pub fn check(&self, value: &Value) -> Result<(), Violation> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(e) => Err(Violation::of(e.kind())),
        }
    }
}

impl fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JsonSchema").field(&self.value).finish()
    }
}

impl PartialEq for JsonSchema {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Serialize for JsonSchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// The kind of rule an answer broke: the reasons counted per level. Words, never the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// Not one JSON value (cut short, prose around it, two values).
    NotJson,
    /// A value of the wrong type.
    Type,
    /// A required property missing.
    Required,
    /// A property the schema does not allow (`additionalProperties`, `unevaluatedProperties`).
    AdditionalProperties,
    /// Not one of `enum`, or not the `const`.
    Enum,
    /// Outside a bound: numbers (`minimum`, `maximum`, `multipleOf`), lengths, item or property
    /// counts, unique items.
    Bounds,
    /// A string that does not match its `pattern` or `format`.
    Pattern,
    /// `anyOf`, `oneOf`, `not`, `contains` or a `false` schema not satisfied.
    Composition,
    /// Anything else the schema rejects.
    Other,
}

impl Violation {
    pub const ALL: [Violation; 9] = [
        Violation::NotJson,
        Violation::Type,
        Violation::Required,
        Violation::AdditionalProperties,
        Violation::Enum,
        Violation::Bounds,
        Violation::Pattern,
        Violation::Composition,
        Violation::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Violation::NotJson => "not_json",
            Violation::Type => "type",
            Violation::Required => "required",
            Violation::AdditionalProperties => "additional_properties",
            Violation::Enum => "enum",
            Violation::Bounds => "bounds",
            Violation::Pattern => "pattern",
            Violation::Composition => "composition",
            Violation::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Violation> {
        Violation::ALL.into_iter().find(|v| v.as_str() == s)
    }

    fn of(kind: &ValidationErrorKind) -> Violation {
        use ValidationErrorKind as K;
        match kind {
            K::Type { .. } => Violation::Type,
            K::Required { .. } => Violation::Required,
            K::AdditionalProperties { .. } | K::UnevaluatedProperties { .. } | K::PropertyNames { .. } => {
                Violation::AdditionalProperties
            }
            K::Enum { .. } | K::Constant { .. } => Violation::Enum,
            K::AdditionalItems { .. }
            | K::UnevaluatedItems { .. }
            | K::ExclusiveMaximum { .. }
            | K::ExclusiveMinimum { .. }
            | K::Maximum { .. }
            | K::Minimum { .. }
            | K::MultipleOf { .. }
            | K::MaxItems { .. }
            | K::MinItems { .. }
            | K::MaxLength { .. }
            | K::MinLength { .. }
            | K::MaxProperties { .. }
            | K::MinProperties { .. }
            | K::UniqueItems => Violation::Bounds,
            K::Pattern { .. } | K::Format { .. } => Violation::Pattern,
            K::AnyOf { .. }
            | K::OneOfMultipleValid { .. }
            | K::OneOfNotValid { .. }
            | K::Not { .. }
            | K::Contains
            | K::FalseSchema => Violation::Composition,
            _ => Violation::Other,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Violation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Violation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Violation::parse(&s).ok_or_else(|| {
            let names: Vec<&str> = Violation::ALL.iter().map(|v| v.as_str()).collect();
            serde::de::Error::custom(format!("unknown violation {s:?} (one of {})", names.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> JsonSchema {
        JsonSchema::compile(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}
            },
            "required": ["city", "unit"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_answer_passes_and_each_broken_rule_is_named() {
        let s = weather();
        assert_eq!(s.check_text(r#" {"city":"Oslo","unit":"c","days":3} "#), Ok(()));
        assert_eq!(s.check_text(r#"{"city":"Oslo","unit":"c""#), Err(Violation::NotJson));
        assert_eq!(s.check_text(r#"Sure! {"city":"Oslo"}"#), Err(Violation::NotJson));
        assert_eq!(s.check_text(r#"{"city":"Oslo"}"#), Err(Violation::Required));
        assert_eq!(s.check_text(r#"{"city":"Oslo","unit":"k"}"#), Err(Violation::Enum));
        assert_eq!(s.check_text(r#"{"city":3,"unit":"c"}"#), Err(Violation::Type));
        assert_eq!(s.check_text(r#"{"city":"Oslo","unit":"c","days":9}"#), Err(Violation::Bounds));
        assert_eq!(s.check_text(r#"{"city":"Oslo","unit":"c","x":1}"#), Err(Violation::AdditionalProperties));
    }

    #[test]
    fn schemas_that_cannot_be_used_are_refused() {
        assert!(JsonSchema::compile(json!("object")).is_err());
        assert!(JsonSchema::compile(json!({"type": "nonsense"})).is_err());
        // Remote references are never fetched: no resolver is built in.
        assert!(JsonSchema::compile(json!({"$ref": "http://127.0.0.1:9/schema.json"})).is_err());
        assert!(JsonSchema::compile(json!({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a"})).is_ok());
    }

    #[test]
    fn every_reason_has_one_name() {
        for v in Violation::ALL {
            assert_eq!(Violation::parse(v.as_str()), Some(v));
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(serde_json::from_str::<Violation>(&json).unwrap(), v);
        }
        assert!(serde_json::from_str::<Violation>("\"nonsense\"").is_err());
    }
}
