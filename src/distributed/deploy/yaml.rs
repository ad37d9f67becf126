//! JSON values written as block-style YAML, for manifests people read and `kubectl apply`.
//!
//! Only what manifests need: maps, lists, strings, numbers, booleans, null. Strings are written
//! as double-quoted scalars, except multi-line text such as an embedded scenario file, which
//! becomes a literal block (`|`) so it reads as the file does. Keys are plain when they are simple
//! identifiers and quoted otherwise.
//!
//! Every character a YAML reader could take for a line break or refuse (C0 and C1 controls,
//! DEL, NEL, U+2028, U+2029, a byte-order mark, non-characters) is escaped (`\uXXXX`) in a quoted
//! scalar, keeps text out of a literal block, and is shown escaped in a comment: no value can end
//! its line, start a new document or object, or read back as anything but itself. Bidirectional
//! controls are escaped too, so what a reader sees is what the manifest holds.

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
        Value::String(s) => quote(s),
        other => other.to_string(),
    }
}

/// Characters written as they are, in a scalar or a comment: YAML's printable set without the
/// separators a reader may break lines at (NEL, U+2028, U+2029), the byte-order mark, and the
/// bidirectional controls that make text read otherwise than it is.
fn is_safe(c: char) -> bool {
    matches!(c, '\u{20}'..='\u{7e}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && !matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// A double-quoted YAML scalar (also a JSON string) holding exactly `s`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_safe(c) => out.push(c),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// Text for a `#` comment: on one line whatever it holds, every unsafe character shown escaped.
pub fn comment(s: &str) -> String {
    s.chars().map(|c| if is_safe(c) { c.to_string() } else { c.escape_unicode().to_string() }).collect()
}

/// JSON text with every character that is not safe (see `is_safe`) escaped: they can occur only
/// inside strings, where `\uXXXX` means the same, so a YAML reader of the JSON reads it right.
pub fn json_escaped(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_safe(c) || matches!(c, '\n' | '\t' | '\r') {
            out.push(c);
        } else {
            // JSON escapes above the BMP as a surrogate pair.
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{:04x}", unit));
            }
        }
    }
    out
}

/// Multi-line text that a literal block keeps exactly: only safe characters and line feeds, no
/// leading space on the first line (it would set the block's indentation), no trailing spaces.
fn is_block(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && s.chars().all(|c| c == '\n' || is_safe(c))
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
    if plain { key.to_string() } else { quote(key) }
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
        for s in [
            "  leading",
            "tab\there\n",
            "trailing \nspace",
            "crlf\r\n",
            "a\nb\u{2028}c",
            "a\nb\u{2029}c",
            "a\nb\u{85}c",
            "a\nb\u{7f}c",
            "a\nb\u{202e}c",
        ] {
            assert!(!is_block(s), "{s:?}");
        }
        assert_eq!(
            quote("a\u{2028}b\u{85}c\u{7f}\"\\\u{1}\u{1f600}"),
            "\"a\\u2028b\\u0085c\\u007f\\\"\\\\\\u0001\u{1f600}\""
        );
        assert_eq!(comment("x\n---\u{2029}y"), "x\\u{a}---\\u{2029}y");
        assert_eq!(json_escaped("{\"a\": \"\u{2028}\u{7f}\"}\n"), "{\"a\": \"\\u2028\\u007f\"}\n");
        assert_eq!(to_yaml(&json!({"a": "x\ny"})), "a: |-\n  x\n  y\n");
        assert_eq!(to_yaml(&json!({"a": "x\n\n"})), "a: |+\n  x\n\n");
        assert_eq!(to_yaml(&json!({"on": 1, "a b": 2})), "\"a b\": 2\n\"on\": 1\n");
    }
}
