//! The Grafana dashboard (`deploy/grafana/anvil-load.json`) and its provisioning files: the
//! structure Grafana needs to load it (panels with targets and a place on the grid, unique ids,
//! every query on the `${datasource}` variable, the variables), and every metric name of every
//! PromQL expression one that exists: the client's in `results::live::names::all()`, the
//! engines' in the engine names table (`ALIASES`, `DASHBOARD_NAMES`), the GPUs' in the DCGM
//! fields mapped (`DCGM_FIELDS`). No Grafana dashboard JSON schema is published on a package
//! registry CI installs from, so this structural check stands in for one.

mod common;

use std::collections::BTreeSet;

use anvil_load::request::server_metrics::{ALIASES, DASHBOARD_NAMES, DCGM_FIELDS};
use anvil_load::results::live::names;
use serde_json::Value;

fn dashboard() -> Value {
    let path = common::manifest_dir().join("deploy/grafana/anvil-load.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard is committed")).expect("valid JSON")
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// PromQL functions, aggregations, keywords and Grafana variables: the identifiers of an
/// expression that are not metric names.
const NOT_METRICS: &[&str] = &[
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "clamp_min",
    "vector",
    "le",
];

/// The metric names an expression reads: bare identifiers outside `{…}` and `[…]` that are not
/// functions or keywords (nor followed by `(`), and `__name__="…"` matchers.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let (mut i, mut depth_brace, mut depth_bracket, mut in_string) = (0, 0, 0, false);
    let mut after_by = false;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if in_string {
            if c == '\\' {
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            '$' => {
                // A Grafana variable: `$__rate_interval`, `${engine:regex}`.
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || b"_{}:".contains(&bytes[i])) {
                    i += 1;
                }
                continue;
            }
            c if depth_brace == 0 && depth_bracket == 0 && (c.is_ascii_alphabetic() || c == '_') => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b':') {
                    i += 1;
                }
                let word = &expr[start..i];
                let rest = expr[i..].trim_start();
                let is_call = rest.starts_with('(');
                if after_by {
                    // `by (le)`: the grouping labels were skipped with their parentheses.
                } else if !NOT_METRICS.contains(&word) && !is_call {
                    names.push(word.to_string());
                }
                after_by = matches!(word, "by" | "without" | "on" | "ignoring");
                if after_by {
                    // Skip the label list.
                    if let Some(close) = expr[i..].find(')') {
                        i += close + 1;
                    }
                    after_by = false;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut rest = expr;
    while let Some(at) = rest.find("__name__=\"") {
        let from = at + "__name__=\"".len();
        let end = rest[from..].find('"').expect("a closed matcher");
        names.push(rest[from..from + end].to_string());
        rest = &rest[from + end..];
    }
    names
}

fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

#[test]
fn the_metric_name_extraction_reads_promql() {
    let got = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(anvil_ttft_seconds_bucket{level=~\"$level\"}[$__rate_interval])))",
    );
    assert_eq!(got, ["anvil_ttft_seconds_bucket"]);
    let got = metric_names("sum(rate({__name__=\"vllm:prompt_tokens_total\",__name__=~\"(${engine:regex}):.*\"}[1m]))");
    assert_eq!(got, ["vllm:prompt_tokens_total"]);
    let got = metric_names("max by (Hostname, gpu) (DCGM_FI_DEV_FB_USED) / 1000");
    assert_eq!(got, ["DCGM_FI_DEV_FB_USED"]);
}

#[test]
fn the_dashboard_has_what_grafana_needs_to_load_it() {
    let d = dashboard();
    assert_eq!(d["uid"], "anvil-load");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "{}", d["schemaVersion"]);
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("variable {name}"));
    assert_eq!(
        (var("datasource")["type"].as_str(), var("datasource")["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );
    let engines: BTreeSet<&str> =
        var("engine")["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
    assert_eq!(engines, BTreeSet::from(["llamacpp", "sglang", "vllm"]));
    for (name, label) in [("level", "level"), ("shard", "shard")] {
        let v = var(name);
        assert_eq!(v["type"], "query");
        assert_eq!(v["definition"], format!("label_values({}, {label})", names::REQUESTS));
        assert_eq!(v["datasource"]["uid"], "${datasource}");
    }

    let all = panels(&d);
    let ids: Vec<u64> = all.iter().map(|p| p["id"].as_u64().expect("every panel has an id")).collect();
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len(), "ids are unique: {ids:?}");
    let rows: Vec<&str> = all.iter().filter(|p| p["type"] == "row").map(|p| p["title"].as_str().unwrap()).collect();
    for word in ["client", "vLLM", "SGLang", "llama.cpp", "GPU"] {
        assert!(rows.iter().any(|r| r.contains(word)), "a {word} row: {rows:?}");
    }
    let mut cells = BTreeSet::new();
    for p in all.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap();
        let g = &p["gridPos"];
        let (x, y, w, h) = (g["x"].as_u64(), g["y"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        let (x, y, w, h) = (x.unwrap(), y.unwrap(), w.unwrap(), h.unwrap());
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {g}");
        assert!(cells.insert((x, y)), "{title} overlaps another panel at {g}");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: targets"));
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            assert!(t["refId"].as_str().is_some_and(|r| !r.is_empty()), "{title}");
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()), "{title}");
        }
    }
}

#[test]
fn every_metric_the_dashboard_reads_exists() {
    let client: BTreeSet<String> = names::all().into_iter().collect();
    let engines: BTreeSet<String> = ALIASES
        .iter()
        .map(|a| a.name)
        .chain(DASHBOARD_NAMES.iter().map(|(n, _)| *n))
        .flat_map(|n| [n.to_string(), format!("{n}_total")])
        .collect();
    let dcgm: BTreeSet<&str> = DCGM_FIELDS.iter().map(|(n, _, _)| *n).collect();
    let d = dashboard();
    let mut read = BTreeSet::new();
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let found = metric_names(expr);
            assert!(!found.is_empty(), "{}: no metric in {expr}", p["title"]);
            for name in found {
                let f = family(&name);
                let known = client.contains(f) || engines.contains(f) || dcgm.contains(f);
                assert!(known, "{}: {name} is neither the client's, a known engine's nor a DCGM field", p["title"]);
                // An engine's panel is empty unless $engine chose it.
                if let Some((prefix, _)) = f.split_once(':') {
                    assert!(expr.contains("${engine:regex}"), "{}: {f} not tied to $engine", p["title"]);
                    assert!(["vllm", "sglang", "llamacpp"].contains(&prefix));
                }
                read.insert(f.to_string());
            }
        }
    }
    // The client's whole vocabulary is on the dashboard but the time to first output and the
    // TTFT histogram's twin; the GPU row shows the four fields the issue names.
    for name in [names::REQUESTS, names::ERRORS, names::IN_FLIGHT, names::LEVEL, names::LATENESS] {
        assert!(read.contains(name), "{name} on no panel");
    }
    for stem in ["ttft", "tpot", "itl_chunk", "e2e", "schedule_lag", "queue_wait"] {
        assert!(read.contains(&format!("anvil_{stem}_seconds")), "anvil_{stem}_seconds on no panel");
    }
    for field in ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"] {
        assert!(read.contains(field), "{field} on no panel");
    }
    for prefix in ["vllm:", "sglang:", "llamacpp:"] {
        assert!(read.iter().any(|n| n.starts_with(prefix)), "no {prefix} panel");
    }
}

#[test]
fn the_provisioning_files_point_at_the_dashboard_and_a_prometheus() {
    let dir = common::manifest_dir().join("deploy/grafana/provisioning");
    let datasource = std::fs::read_to_string(dir.join("datasources/prometheus.yaml")).expect("datasource provisioning");
    assert!(datasource.contains("apiVersion: 1") && datasource.contains("type: prometheus"), "{datasource}");
    let provider = std::fs::read_to_string(dir.join("dashboards/anvil-load.yaml")).expect("dashboard provisioning");
    assert!(provider.contains("apiVersion: 1") && provider.contains("type: file"), "{provider}");
    assert!(provider.contains("path: /var/lib/grafana/dashboards/anvil-load"), "{provider}");
}
