//! Parser messages in the words of the scenario reference: no Rust type names (`u64`, `enum
//! Levels`, `struct RawRun`), numbers as they were written, and for a key with a fixed set of
//! values, those values.

use super::bounds::fmt_number;
use super::raw::RawScenario;

/// Rewrite a message from the TOML parser or the shape check (`serde`) for people.
pub(super) fn humanize(message: &str) -> String {
    let mut out = reformat_floats(message.trim());
    if out.contains(" as i128, expected any valid TOML value") {
        // The TOML parser read an integer that does not fit 64 bits.
        let number = out.split('`').nth(1).unwrap_or("the integer").to_string();
        out = format!("{number} is too large: TOML integers are 64-bit (at most 9223372036854775807)");
    }
    for (rust, words) in [
        ("expected u64", "expected a whole number of zero or more"),
        ("expected u32", "expected a whole number of zero or more"),
        ("expected usize", "expected a whole number of zero or more"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a table"),
        ("expected a boolean", "expected true or false"),
    ] {
        if let Some(rest) = out.strip_suffix(rust) {
            out = format!("{rest}{words}");
        }
    }
    if let Some(at) = out.find("expected struct ") {
        out.truncate(at);
        out.push_str("expected a table");
    }
    out
}

/// For a key whose value must be one of a few names, the names (`"closed" or "open"`), read
/// from the parser itself by trying a value no key accepts.
pub(super) fn choices(table: &toml::Table, key: &str) -> Option<String> {
    let mut probe = table.clone();
    let mut slot: &mut toml::Table = &mut probe;
    let segments: Vec<&str> = key.split('.').collect();
    let (last, parents) = segments.split_last()?;
    for segment in parents {
        slot = slot.get_mut(*segment)?.as_table_mut()?;
    }
    slot.insert((*last).to_string(), toml::Value::String("\u{1}".into()));
    let err = serde_path_to_error::deserialize::<_, RawScenario>(toml::Value::Table(probe)).err()?;
    if err.path().to_string() != key {
        return None;
    }
    let message = err.into_inner().message().to_string();
    let expected = message.strip_prefix("unknown variant `\u{1}`, expected ")?;
    Some(expected.replace('`', "\""))
}

/// The value at `key`, as TOML writes it, for messages.
pub(super) fn value_at(table: &toml::Table, key: &str) -> Option<String> {
    let mut value: Option<&toml::Value> = None;
    let mut slot = table;
    for segment in key.split('.') {
        let v = slot.get(segment)?;
        value = Some(v);
        if let Some(t) = v.as_table() {
            slot = t;
        }
    }
    value.map(|v| match v {
        toml::Value::Float(f) => fmt_number(*f),
        other => other.to_string(),
    })
}

/// `floating point `1000…000.0`` becomes `floating point `1e300``.
fn reformat_floats(message: &str) -> String {
    const MARK: &str = "floating point `";
    let Some(start) = message.find(MARK).map(|i| i + MARK.len()) else { return message.to_string() };
    let Some(len) = message[start..].find('`') else { return message.to_string() };
    match message[start..start + len].parse::<f64>() {
        Ok(v) => format!("{}{}{}", &message[..start], fmt_number(v), &message[start + len..]),
        Err(_) => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_words_become_user_words() {
        assert_eq!(
            humanize("invalid type: floating point `1000000000000000000000000000000.0`, expected u64"),
            "invalid type: floating point `1e30`, expected a whole number of zero or more"
        );
        assert_eq!(
            humanize("invalid type: string \"x\", expected a sequence"),
            "invalid type: string \"x\", expected a list"
        );
        assert!(humanize("invalid type: integer `1`, expected struct RawRun").ends_with("expected a table"));
        assert!(
            humanize("invalid type: integer `99999999999999999999` as i128, expected any valid TOML value")
                .contains("too large")
        );
    }

    #[test]
    fn choices_come_from_the_parser() {
        let table: toml::Table = "[target]\nmodel = \"m\"\n[load]\nmode = 5\n".parse().unwrap();
        assert_eq!(choices(&table, "load.mode").as_deref(), Some("\"closed\" or \"open\""));
        assert_eq!(value_at(&table, "load.mode").as_deref(), Some("5"));
        assert_eq!(choices(&table, "load.concurrency"), None);
    }
}
