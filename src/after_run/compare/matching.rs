//! Which levels of the two sides are compared with which.
//!
//! The artifact's `configuration_fingerprint` covers the whole validated scenario, the server
//! under test included (its base URL or simulator profile), its labels and what is merely
//! observed (scraping the server's `/metrics`, snapshot windows). Comparing two builds means
//! the server changed, so `compare` keys levels by a *comparison fingerprint* instead: the same
//! hash over the scenario with the settings in [`IGNORED`] left out. What remains — model, API,
//! dialect and extra request fields, workload, prompts and seed, load and levels, request and
//! duration bounds, warm-up and cool-down, sampling, serve flags, output control, objectives
//! and client timeouts — must be equal, because it decides what the server was asked to do and
//! how the numbers were counted. Levels then match on that fingerprint, the load mode and the
//! level (concurrency or rate). `--force` matches on mode and level alone.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::after_run::gather::LevelFile;
use crate::results::artifact::ArtifactFile;

/// Scenario settings that do not change what is compared: the server under test, labels, and
/// what is only observed or kept.
pub const IGNORED: [&str; 12] = [
    "/target/endpoint",
    "/target/engine",
    "/target/gpu",
    "/target/redact_base_url",
    "/target/api_key_env",
    "/target/metrics",
    "/run/protocol",
    "/run/tier",
    "/run/clock_domain_id",
    "/run/keep_records",
    "/run/snapshot_interval",
    "/run/grace",
];

/// The comparison fingerprint of an artifact: its scenario without the [`IGNORED`] settings.
pub fn comparison_fingerprint(a: &ArtifactFile) -> String {
    crate::request::record::fingerprint(&comparable(&a.scenario))
}

fn comparable(scenario: &Value) -> Value {
    let mut v = scenario.clone();
    for pointer in IGNORED {
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
        if let Some(Value::Object(map)) = v.pointer_mut(parent) {
            map.remove(key);
        }
    }
    v
}

/// The settings (JSON pointers, dotted) whose values differ between two scenarios, with both
/// values; `ignored` tells whether the comparison leaves the setting out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    pub setting: String,
    pub base: String,
    pub new: String,
    pub ignored: bool,
}

pub fn differences(base: &Value, new: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    diff("", base, new, &mut out);
    out
}

fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff(&format!("{path}/{k}"), x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null), out);
            }
        }
        _ if a != b => out.push(Difference {
            setting: path.trim_start_matches('/').replace('/', "."),
            base: short(a),
            new: short(b),
            ignored: IGNORED.iter().any(|p| path == *p || path.starts_with(&format!("{p}/"))),
        }),
        _ => {}
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 { format!("{}…", s.chars().take(59).collect::<String>()) } else { s }
}

/// One compared level: the runs of each side at it.
#[derive(Debug)]
pub struct Pair<'a> {
    pub label: String,
    pub base: Vec<&'a LevelFile>,
    pub new: Vec<&'a LevelFile>,
}

/// The outcome of matching.
#[derive(Debug, Default)]
pub struct Matching<'a> {
    pub pairs: Vec<Pair<'a>>,
    /// Levels only one side has.
    pub only_base: Vec<String>,
    pub only_new: Vec<String>,
}

/// Group each side's levels by key and pair them; keys in load order.
pub fn match_levels<'a>(base: &[&'a LevelFile], new: &[&'a LevelFile], force: bool) -> Matching<'a> {
    type Key = (String, String, u64);
    let key = |l: &LevelFile| -> Key {
        let a = &l.artifact;
        let print = if force { String::new() } else { comparison_fingerprint(a) };
        (print, a.load_mode.clone(), a.level().to_bits())
    };
    let mut groups: BTreeMap<Key, (Vec<&'a LevelFile>, Vec<&'a LevelFile>)> = BTreeMap::new();
    for &l in base {
        groups.entry(key(l)).or_default().0.push(l);
    }
    for &l in new {
        groups.entry(key(l)).or_default().1.push(l);
    }
    let mut m = Matching::default();
    type Sides<'b> = (Vec<&'b LevelFile>, Vec<&'b LevelFile>);
    let mut groups: Vec<(Key, Sides<'a>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| f64::from_bits(a.0.2).total_cmp(&f64::from_bits(b.0.2)).then(a.0.cmp(&b.0)));
    for (_, (b, n)) in groups {
        let any = b.first().or(n.first()).map(|l| &l.artifact);
        let label = any.map_or_else(String::new, crate::after_run::gather::level_label);
        match (b.is_empty(), n.is_empty()) {
            (false, false) => m.pairs.push(Pair { label, base: b, new: n }),
            (false, true) => m.only_base.push(label),
            (true, false) => m.only_new.push(label),
            (true, true) => {}
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_server_under_test_and_labels_do_not_change_the_comparison_fingerprint() {
        let base = json!({
            "target": { "endpoint": { "kind": "simulator", "profile": "steady" }, "engine": null, "model": "m" },
            "run": { "requests": 200, "protocol": null, "snapshot_interval": "1m" },
        });
        let mut new = base.clone();
        new["target"]["endpoint"] = json!({ "kind": "remote", "base_url": "http://10.0.0.2:8000/v1" });
        new["target"]["engine"] = json!("vllm-0.11");
        new["target"]["metrics"] = json!({ "endpoint": { "kind": "beside_base_url" }, "interval": "5s" });
        new["run"]["snapshot_interval"] = json!("1s");
        assert_eq!(
            crate::request::record::fingerprint(&comparable(&base)),
            crate::request::record::fingerprint(&comparable(&new))
        );
        let d = differences(&base, &new);
        assert!(d.iter().all(|d| d.ignored), "{d:?}");
        assert!(d.iter().any(|d| d.setting == "target.endpoint.kind"), "{d:?}");
        // What the server is asked to do does change it.
        new["run"]["requests"] = json!(300);
        assert_ne!(
            crate::request::record::fingerprint(&comparable(&base)),
            crate::request::record::fingerprint(&comparable(&new))
        );
        let d = differences(&base, &new);
        assert_eq!(
            d.iter().filter(|d| !d.ignored).collect::<Vec<_>>(),
            [&Difference { setting: "run.requests".into(), base: "200".into(), new: "300".into(), ignored: false }]
        );
    }
}
