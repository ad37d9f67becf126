//! The artifact contract as the repository keeps it: the JSON Schemas under `contract/` (draft
//! 2020-12) for the `anvil-serving.benchmark/v1` artifact and for each line of the
//! `anvil-load.records/v1` records file, validated with the `jsonschema` crate, and the records
//! file's structure, which a per-line schema cannot see.
//!
//! This reads JSON only: nothing of the crate's own code, so a change that breaks the contract in
//! the writer cannot also break the check.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, JsonType, Registry, ValidationError, Validator};
use serde_json::Value;

use super::manifest_dir;

/// The artifact's schema, relative to the repository root.
pub const ARTIFACT_SCHEMA: &str = "contract/anvil-serving.benchmark.v1.schema.json";
/// The schema of one line of the records file; it refers to the artifact schema's record types.
pub const RECORDS_SCHEMA: &str = "contract/anvil-load.records.v1.schema.json";

/// A long list of violations is cut here (the first ones name the problem).
const MAX_LISTED: usize = 40;

struct Schemas {
    artifact: Validator,
    record_line: Validator,
}

pub fn load_schema(relative: &str) -> Value {
    let path = manifest_dir().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: cannot read it ({e})", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON ({e})", path.display()))
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let artifact = load_schema(ARTIFACT_SCHEMA);
        let records = load_schema(RECORDS_SCHEMA);
        let id = |schema: &Value| schema["$id"].as_str().expect("each contract schema has an $id").to_string();
        // The records schema refers to the artifact schema's `$defs` by its `$id`; nothing is
        // fetched from anywhere.
        let registry = Registry::new()
            .add(id(&artifact), artifact.clone())
            .and_then(|r| r.add(id(&records), records.clone()))
            .and_then(|r| r.prepare())
            .unwrap_or_else(|e| panic!("the contract schemas do not resolve: {e}"));
        let build = |relative: &str, schema: &Value| {
            jsonschema::options()
                .with_draft(Draft::Draft202012)
                .with_registry(&registry)
                .build(schema)
                .unwrap_or_else(|e| panic!("{relative} is not a usable schema: {e}"))
        };
        Schemas { artifact: build(ARTIFACT_SCHEMA, &artifact), record_line: build(RECORDS_SCHEMA, &records) }
    })
}

/// One error in words. For "none of these forms" (`anyOf`, `oneOf`), the reasons each form gave,
/// less the uninformative "is not null" of a nullable value.
fn describe(e: &ValidationError<'_>) -> String {
    let context = match e.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => context,
        _ => return e.to_string(),
    };
    let reasons: Vec<String> = context
        .iter()
        .flatten()
        .filter(|sub| !matches!(sub.kind(), ValidationErrorKind::Type { kind: TypeKind::Single(JsonType::Null) }))
        .map(|sub| {
            let at = sub.instance_path().to_string();
            if at == e.instance_path().to_string() { describe(sub) } else { format!("{at}: {}", describe(sub)) }
        })
        .collect();
    format!("matches none of the allowed forms ({})", reasons.join("; "))
}

/// Every way `instance` breaks `validator`, one line each: where, and what.
fn schema_violations(validator: &Validator, instance: &Value, prefix: &str) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| {
            let mut message = describe(&e);
            if message.chars().count() > 300 {
                message = message.chars().take(300).collect::<String>() + "…";
            }
            let at = e.instance_path().to_string();
            format!("{prefix}{}: {message}", if at.is_empty() { "/" } else { &at })
        })
        .collect()
}

/// Where an artifact breaks `contract/anvil-serving.benchmark.v1.schema.json`.
pub fn artifact_schema_violations(artifact: &Value) -> Vec<String> {
    schema_violations(&schemas().artifact, artifact, "schema ")
}

/// Where one records line breaks `contract/anvil-load.records.v1.schema.json`.
pub fn record_line_violations(line: &Value) -> Vec<String> {
    schema_violations(&schemas().record_line, line, "schema ")
}

/// Every problem of a records file: each line against the schema, then the structure (a `run`
/// line first; later runs may append their own `run` line and levels; every record inside a level
/// that was opened and not yet ended; request indices unique within a level; a level end's
/// `written` counts and SHA-256 those of the level's lines). A final line cut
/// short (the process was killed mid-write) is not a problem: readers skip it, as
/// `anvil-load summarize` does.
pub fn records_violations(path: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return vec![format!("cannot read the records file ({e})")],
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut bad = Vec::new();
    // level -> ended?
    let mut levels: BTreeMap<String, bool> = BTreeMap::new();
    let mut indices: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    // What each level's lines were, to hold its end's `written` to: (requests, failures,
    // dropped, the SHA-256 of its record lines with their line ends).
    let mut tallies: BTreeMap<String, ([u64; 3], ring::digest::Context)> = BTreeMap::new();
    for (n, raw) in lines.iter().enumerate() {
        let at = format!("line {}", n + 1);
        let line: Value = match serde_json::from_str(raw) {
            Ok(line) => line,
            Err(_) if n + 1 == lines.len() && !text.ends_with('\n') => continue,
            Err(e) => {
                bad.push(format!("{at}: not a JSON object ({e})"));
                continue;
            }
        };
        bad.extend(record_line_violations(&line).into_iter().map(|v| format!("{at}: {v}")));
        let kind = line["type"].as_str().unwrap_or("");
        if n == 0 && kind != "run" {
            bad.push(format!("{at}: the first line is {kind:?}, not the run line"));
        }
        let level = line["level"].as_str().unwrap_or("").to_string();
        match kind {
            "level" => {
                tallies.insert(level.clone(), ([0; 3], ring::digest::Context::new(&ring::digest::SHA256)));
                match levels.entry(level.clone()) {
                    Entry::Occupied(_) => bad.push(format!("{at}: level {level} opened twice")),
                    Entry::Vacant(slot) => {
                        slot.insert(false);
                    }
                }
            }
            "request" | "failure" | "dropped" => {
                match levels.get(&level) {
                    None => bad.push(format!("{at}: {kind} of level {level}, which no level line opened before")),
                    Some(true) => bad.push(format!("{at}: {kind} of level {level} after its level_end")),
                    Some(false) => {}
                }
                if let Some((counts, digest)) = tallies.get_mut(&level) {
                    counts[["request", "failure", "dropped"].iter().position(|k| *k == kind).unwrap_or(0)] += 1;
                    digest.update(raw.as_bytes());
                    digest.update(b"\n");
                }
                if let Some(index) = line["request_index"].as_u64() {
                    if !indices.entry(level).or_default().insert(index) {
                        bad.push(format!("{at}: request_index {index} recorded twice in its level"));
                    }
                }
            }
            "level_end" => match levels.get_mut(&level) {
                None => bad.push(format!("{at}: level_end of level {level}, which no level line opened")),
                Some(ended) if *ended => bad.push(format!("{at}: level {level} ended twice")),
                Some(ended) => {
                    *ended = true;
                    if let (Some(written), Some((counts, digest))) = (line.get("written"), tallies.remove(&level)) {
                        let hex: String = digest.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
                        let found = serde_json::json!({
                            "requests": counts[0], "failures": counts[1], "dropped": counts[2],
                            "digest": format!("sha256:{hex}"),
                        });
                        for key in ["requests", "failures", "dropped", "digest"] {
                            if written[key] != found[key] {
                                bad.push(format!(
                                    "{at}: level {level} says it wrote {key} {}, its lines give {}",
                                    written[key], found[key]
                                ));
                            }
                        }
                    }
                }
            },
            _ => {}
        }
    }
    if lines.is_empty() {
        bad.push("the records file is empty (no run line)".to_string());
    }
    bad
}

/// Panic with the list of `violations` of `what`, if there are any.
pub fn fail_on(what: &str, contract: &str, violations: &[String]) {
    if violations.is_empty() {
        return;
    }
    let mut listed: Vec<&str> = violations.iter().take(MAX_LISTED).map(String::as_str).collect();
    let more = violations.len().saturating_sub(MAX_LISTED);
    let tail = format!("… and {more} more");
    if more > 0 {
        listed.push(&tail);
    }
    panic!("{what} breaks {contract} ({} violations):\n  {}", violations.len(), listed.join("\n  "));
}
