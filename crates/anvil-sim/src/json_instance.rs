//! JSON the simulator answers with when a request asks for it (a `json_schema` response format,
//! a tool's parameters): a value that satisfies the schema, chosen deterministically from a seed,
//! and, for the fault profile, an answer that breaks it in a known way.
//!
//! The generator covers what structured-output and tool schemas use: `type` (one or several),
//! `properties` / `required` / `additionalProperties`, `items` / `prefixItems` / `minItems` /
//! `maxItems`, `enum`, `const`, string lengths and the common `format`s, number bounds,
//! `anyOf` / `oneOf` / `allOf` (the first branch), and `$ref` into the schema's own `$defs` or
//! `definitions`. A `pattern` is not generated for: such a string is a plain word, which may
//! not match (the client then counts it invalid, as it should).

use serde_json::{Map, Number, Value, json};

/// How an answer was made to break its schema (the simulator's ground truth of what it injected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// A required property left out.
    Required,
    /// The JSON cut short, so it is no JSON at all.
    NotJson,
}

impl Broken {
    pub fn as_str(self) -> &'static str {
        match self {
            Broken::Required => "required",
            Broken::NotJson => "not_json",
        }
    }
}

/// A value that satisfies `schema`, the same for the same seed.
pub fn instance(schema: &Value, seed: u64) -> Value {
    let mut g = Gen { root: schema, rng: seed ^ 0x9e37_79b9_7f4a_7c15, depth: 0 };
    g.value(schema)
}

/// An answer that breaks `schema`: without a required property when the top level requires
/// one, otherwise the valid answer cut in half.
pub fn broken(schema: &Value, seed: u64) -> (String, Broken) {
    let valid = instance(schema, seed);
    let resolved = Gen { root: schema, rng: 0, depth: 0 }.resolve(schema);
    let first_required =
        resolved.get("required").and_then(Value::as_array).and_then(|r| r.first()).and_then(Value::as_str);
    if let (Value::Object(mut obj), Some(name)) = (valid.clone(), first_required) {
        obj.remove(name);
        return (Value::Object(obj).to_string(), Broken::Required);
    }
    let text = valid.to_string();
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = if cut == 0 { "{".to_string() } else { text[..cut].to_string() };
    (cut, Broken::NotJson)
}

const WORDS: [&str; 16] = [
    "amber", "basalt", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kelp", "lumen",
    "meadow", "nimbus", "onyx", "pine",
];

struct Gen<'a> {
    root: &'a Value,
    rng: u64,
    depth: u32,
}

impl<'a> Gen<'a> {
    fn next(&mut self) -> u64 {
        // splitmix64: deterministic, no state beyond the seed.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// Follows local `$ref`s (`#/$defs/x`, `#/definitions/x`, `#`) to the schema they name.
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..16 {
            let Some(r) = schema.get("$ref").and_then(Value::as_str) else { return schema };
            let target = match r.strip_prefix('#') {
                Some("") => Some(self.root),
                Some(pointer) => self.root.pointer(pointer),
                None => None,
            };
            match target {
                Some(t) => schema = t,
                None => return &Value::Bool(true),
            }
        }
        schema
    }

    fn value(&mut self, schema: &'a Value) -> Value {
        let schema = self.resolve(schema);
        if self.depth > 8 {
            return Value::Null;
        }
        self.depth += 1;
        let v = self.value_of(schema);
        self.depth -= 1;
        v
    }

    fn value_of(&mut self, schema: &'a Value) -> Value {
        let Value::Object(s) = schema else { return json!(WORDS[self.below(16) as usize]) };
        if let Some(c) = s.get("const") {
            return c.clone();
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.is_empty()
        {
            return options[self.below(options.len() as u64) as usize].clone();
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = s.get(key)
                && let Some(first) = branches.first()
            {
                // `allOf`'s first branch alone may miss the others' rules; the schemas tools and
                // response formats use put one object in it.
                return self.value(first);
            }
        }
        let ty = match s.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(types)) => {
                types.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null")
            }
            _ if s.contains_key("properties") => "object",
            _ if s.contains_key("items") || s.contains_key("prefixItems") => "array",
            _ => "string",
        };
        match ty {
            "object" => self.object(s),
            "array" => self.array(s),
            "integer" => self.integer(s),
            "number" => {
                let n = self.integer(s);
                let f = n.as_i64().unwrap_or(0) as f64;
                Number::from_f64(f).map_or(n, Value::Number)
            }
            "boolean" => Value::Bool(self.below(2) == 1),
            "null" => Value::Null,
            _ => self.string(s),
        }
    }

    fn object(&mut self, s: &'a Map<String, Value>) -> Value {
        let mut out = Map::new();
        if let Some(Value::Object(props)) = s.get("properties") {
            for (name, sub) in props {
                out.insert(name.clone(), self.value(sub));
            }
        }
        Value::Object(out)
    }

    fn array(&mut self, s: &'a Map<String, Value>) -> Value {
        let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(1);
        let max = s.get("maxItems").and_then(Value::as_u64).unwrap_or(min.max(3)).max(min);
        let n = min + self.below(max - min + 1);
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        let items = s.get("items").filter(|i| i.is_object());
        let mut out = Vec::new();
        for i in 0..n.min(32) as usize {
            match (prefix.and_then(|p| p.get(i)), items) {
                (Some(p), _) => out.push(self.value(p)),
                (None, Some(item)) => out.push(self.value(item)),
                (None, None) if prefix.is_some() => break,
                (None, None) => out.push(json!(WORDS[self.below(16) as usize])),
            }
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            let mut seen = Vec::new();
            out.retain(|v| {
                let fresh = !seen.contains(v);
                if fresh {
                    seen.push(v.clone());
                }
                fresh
            });
        }
        Value::Array(out)
    }

    fn integer(&mut self, s: &Map<String, Value>) -> Value {
        let lo = s
            .get("minimum")
            .and_then(Value::as_f64)
            .map(f64::ceil)
            .or_else(|| s.get("exclusiveMinimum").and_then(Value::as_f64).map(|m| m.floor() + 1.0));
        let hi = s
            .get("maximum")
            .and_then(Value::as_f64)
            .map(f64::floor)
            .or_else(|| s.get("exclusiveMaximum").and_then(Value::as_f64).map(|m| m.ceil() - 1.0));
        let lo = lo.unwrap_or(0.0).clamp(-1e15, 1e15) as i64;
        let hi = hi.unwrap_or(lo as f64 + 100.0).clamp(-1e15, 1e15) as i64;
        let hi = hi.max(lo);
        let mut n = lo + self.below((hi - lo) as u64 + 1) as i64;
        if let Some(m) = s.get("multipleOf").and_then(Value::as_i64).filter(|m| *m > 0) {
            n = (n / m) * m;
            if n < lo {
                n += m;
            }
        }
        json!(n)
    }

    fn string(&mut self, s: &Map<String, Value>) -> Value {
        let word = WORDS[self.below(16) as usize];
        let text = match s.get("format").and_then(Value::as_str) {
            Some("date-time") => "2026-01-02T03:04:05Z".to_string(),
            Some("date") => "2026-01-02".to_string(),
            Some("time") => "03:04:05Z".to_string(),
            Some("email") => format!("{word}@example.com"),
            Some("uuid") => format!("00000000-0000-4000-8000-{:012x}", self.next() & 0xffff_ffff_ffff),
            Some("uri") => format!("https://example.com/{word}"),
            Some("ipv4") => "192.0.2.1".to_string(),
            _ => word.to_string(),
        };
        let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = s.get("maxLength").and_then(Value::as_u64).map(|m| m as usize).unwrap_or(usize::MAX);
        let mut text = text;
        while text.chars().count() < min {
            text.push('x');
        }
        if text.chars().count() > max {
            text = text.chars().take(max).collect();
        }
        Value::String(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "$defs": {"unit": {"enum": ["c", "f"]}},
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 3, "maxLength": 8},
                "unit": {"$ref": "#/$defs/unit"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
                "when": {"type": "string", "format": "date-time"},
                "ok": {"type": ["boolean", "null"]},
                "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": false
        })
    }

    #[test]
    fn instances_follow_the_schema_and_the_seed() {
        let s = schema();
        let a = instance(&s, 7);
        assert_eq!(a, instance(&s, 7));
        let obj = a.as_object().unwrap();
        assert_eq!(obj.len(), 7);
        assert!(["c", "f"].contains(&obj["unit"].as_str().unwrap()));
        let days = obj["days"].as_i64().unwrap();
        assert!((1..=7).contains(&days));
        let city = obj["city"].as_str().unwrap();
        assert!((3..=8).contains(&city.len()));
        assert!(obj["ok"].is_boolean());
        assert_eq!(obj["score"], json!(1.0));
        let seeds: std::collections::HashSet<String> = (0..32).map(|i| instance(&s, i).to_string()).collect();
        assert!(seeds.len() > 8, "the seed varies the answer");
    }

    #[test]
    fn broken_answers_break_the_schema_as_they_say() {
        let (text, how) = broken(&schema(), 3);
        assert_eq!(how, Broken::Required);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v.get("city").is_none());
        let (text, how) = broken(&json!({"type": "array", "items": {"type": "integer"}}), 3);
        assert_eq!(how, Broken::NotJson);
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }
}
