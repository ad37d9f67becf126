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
    // The parser says "`a` or `b`" for two names and "one of `a`, `b`, `c`" for more; the
    // messages say "one of" themselves.
    Some(expected.trim_start_matches("one of ").replace('`', "\""))
}

/// A key the scenario reads as one table (`[target]`, `[workload.trace]`) that the file gives as
/// a list (`[[target]]`, `target = [...]`): the key, and whether the list is of tables. The
/// parser would otherwise report a type deep inside the list (`target[0]: invalid type: map`).
pub(super) fn table_given_as_list(table: &toml::Table, path: &serde_path_to_error::Path) -> Option<(String, bool)> {
    let mut keys = Vec::new();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Map { key } => keys.push(key.as_str()),
            _ => break,
        }
    }
    (1..=keys.len()).find_map(|n| {
        let key = keys[..n].join(".");
        let list = value_ref(table, &key)?.as_array()?;
        expects_table(table, &key).then(|| (key, list.iter().all(toml::Value::is_table)))
    })
}

/// Whether the scenario reads `key` as a table, asked of the parser itself: a string put in
/// its place is refused as "expected struct …" or "expected a map".
fn expects_table(table: &toml::Table, key: &str) -> bool {
    let mut probe = table.clone();
    let segments: Vec<&str> = key.split('.').collect();
    let Some((last, parents)) = segments.split_last() else { return false };
    let mut slot: &mut toml::Table = &mut probe;
    for segment in parents {
        match slot.get_mut(*segment).and_then(toml::Value::as_table_mut) {
            Some(t) => slot = t,
            None => return false,
        }
    }
    slot.insert((*last).to_string(), toml::Value::String("\u{1}".into()));
    let Err(err) = serde_path_to_error::deserialize::<_, RawScenario>(toml::Value::Table(probe)) else { return false };
    if err.path().to_string() != key {
        return false;
    }
    let message = err.into_inner().message().to_string();
    message.contains("expected struct") || message.ends_with("expected a map")
}

fn value_ref<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut slot = table;
    let mut value = None;
    for segment in key.split('.') {
        let v = slot.get(segment)?;
        value = Some(v);
        if let Some(t) = v.as_table() {
            slot = t;
        }
    }
    value
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

/// The known key closest to the unknown one in the parser's "unknown field `x`, expected one of
/// `a`, `b`" (`expected `a` or `b`` for two): the one within a third of its length in edits.
pub(super) fn did_you_mean(message: &str) -> Option<String> {
    let mut parts = message.split('`');
    let unknown = parts.nth(1)?;
    let (_, expected) = message.split_once("expected")?;
    let known = expected.split('`').skip(1).step_by(2);
    let best = known.map(|k| (edit_distance(unknown, k), k)).min_by_key(|(d, _)| *d)?;
    (best.0 > 0 && best.0 <= unknown.chars().count().div_ceil(3).max(1)).then(|| best.1.to_string())
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn suggests_the_nearest_known_key() {
        let m = "unknown field `modle`, expected one of `base_url`, `model`, `api`";
        assert_eq!(did_you_mean(m).as_deref(), Some("model"));
        assert_eq!(did_you_mean("unknown field `zzzzzz`, expected `model` or `api`"), None);
        assert_eq!(
            did_you_mean("unknown field `concurency`, expected `concurrency` or `rate`").as_deref(),
            Some("concurrency")
        );
    }

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
    fn a_table_written_as_a_list_is_found_by_its_key() {
        for (text, key, of_tables) in [
            ("[[target]]\nmodel = \"m\"\n", "target", true),
            ("target = [1]\n", "target", false),
            ("[target]\nmodel = \"m\"\n[[workload.trace]]\nfile = \"t\"\n", "workload.trace", true),
        ] {
            let table: toml::Table = text.parse().unwrap();
            let err =
                serde_path_to_error::deserialize::<_, RawScenario>(toml::Value::Table(table.clone())).unwrap_err();
            assert_eq!(table_given_as_list(&table, err.path()), Some((key.to_string(), of_tables)), "{text}");
        }
        // A list the scenario does read as a list is not mistaken for one.
        let table: toml::Table = "[target]\nmodel = \"m\"\n[load]\nconcurrency = [1, \"x\"]\n".parse().unwrap();
        let err = serde_path_to_error::deserialize::<_, RawScenario>(toml::Value::Table(table.clone())).unwrap_err();
        assert_eq!(table_given_as_list(&table, err.path()), None);
    }

    #[test]
    fn choices_come_from_the_parser() {
        let table: toml::Table = "[target]\nmodel = \"m\"\n[load]\nmode = 5\n".parse().unwrap();
        assert_eq!(choices(&table, "load.mode").as_deref(), Some("\"closed\" or \"open\""));
        assert_eq!(value_at(&table, "load.mode").as_deref(), Some("5"));
        assert_eq!(choices(&table, "load.concurrency"), None);
        // More than two names: listed once, without the parser's own "one of".
        let table: toml::Table = "[target]\nmodel = \"m\"\n[serve]\nthinking_mode = 5\n".parse().unwrap();
        assert_eq!(choices(&table, "serve.thinking_mode").as_deref(), Some("\"default\", \"enabled\", \"disabled\""));
    }
}
