//! JSON values written as block-style YAML, for manifests people read and `kubectl apply`.
//!
//! Only what manifests need: maps, lists, strings, numbers, booleans, null. Strings are written
//! as JSON strings (a JSON string is a valid YAML double-quoted scalar), except multi-line text
//! such as an embedded scenario file, which becomes a literal block (`|`) so it reads as the
//! file does. Keys are plain when they are simple identifiers and quoted otherwise.

use serde_json::Value;

/// One YAML document for `value` (no `---` marker), ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_list(&mut out, items, 0),
        scalar => {
            out.push_str(&inline(scalar, 0));
            out.push('\n');
        }
    }
    out
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&key_text(key));
        out.push(':');
        write_value(out, value, indent);
    }
}

fn write_list(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            // A map item starts on the dash's line: `- key: value`, the rest aligned under it.
            Value::Object(map) if !map.is_empty() => {
                let mut nested = String::new();
                write_map(&mut nested, map, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            other => write_value(out, other, indent),
        }
    }
}

/// After `key:` or `-`: a nested block on the next lines, or a scalar on this one.
fn write_value(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, indent + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_list(out, items, indent + 2);
        }
        Value::String(s) if is_block(s) => {
            let chomp = if !s.ends_with('\n') {
                "-"
            } else if s.ends_with("\n\n") {
                "+"
            } else {
                ""
            };
            out.push_str(&format!(" |{chomp}\n"));
            let body = s.strip_suffix('\n').unwrap_or(s);
            for line in body.split('\n') {
                if !line.is_empty() {
                    out.push_str(&" ".repeat(indent + 2));
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar, indent));
            out.push('\n');
        }
    }
}

fn inline(value: &Value, _indent: usize) -> String {
    match value {
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// Multi-line text that a literal block keeps byte for byte: no tabs or carriage returns, no
/// leading space on the first line (it would set the block's indentation), no trailing spaces.
fn is_block(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && s.chars().all(|c| c == '\n' || (!c.is_control() && c != '\u{feff}'))
        && s.split('\n').all(|line| !line.ends_with(' '))
}

fn key_text(key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
        && key.starts_with(|c: char| c.is_ascii_alphabetic())
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain { key.to_string() } else { serde_json::to_string(key).unwrap_or_default() }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn manifests_read_as_written() {
        let v = json!({
            "apiVersion": "batch/v1",
            "metadata": {"name": "anvil", "labels": {"app.kubernetes.io/name": "anvil-load"}},
            "spec": {
                "completions": 4,
                "suspend": false,
                "selector": null,
                "args": ["run", "$(JOB_COMPLETION_INDEX)/4", "yes"],
                "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}}],
                "empty": {},
                "none": [],
            },
            "data": {"scenario.toml": "[run]\nrequests = 8\n\n[load]\nconcurrency = 4\n"},
        });
        // serde_json's maps are sorted by key.
        let want = r#"apiVersion: "batch/v1"
data:
  scenario.toml: |
    [run]
    requests = 8

    [load]
    concurrency = 4
metadata:
  labels:
    app.kubernetes.io/name: "anvil-load"
  name: "anvil"
spec:
  args:
    - "run"
    - "$(JOB_COMPLETION_INDEX)/4"
    - "yes"
  completions: 4
  empty: {}
  none: []
  rules:
    - action: "FailJob"
      onExitCodes:
        operator: "In"
        values:
          - 2
  selector: null
  suspend: false
"#;
        assert_eq!(to_yaml(&v), want);
    }

    #[test]
    fn awkward_strings_stay_quoted() {
        for s in ["  leading", "tab\there\n", "trailing \nspace", "crlf\r\n"] {
            assert!(!is_block(s), "{s:?}");
        }
        assert_eq!(to_yaml(&json!({"a": "x\ny"})), "a: |-\n  x\n  y\n");
        assert_eq!(to_yaml(&json!({"a": "x\n\n"})), "a: |+\n  x\n\n");
        assert_eq!(to_yaml(&json!({"on": 1, "a b": 2})), "\"a b\": 2\n\"on\": 1\n");
    }
}
