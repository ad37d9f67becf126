//! The contract check itself is tested: the schemas are valid draft 2020-12 and require every key
//! of the reference artifact, the recomputation agrees with the reference's published numbers,
//! committed artifacts and records pass, and each kind of deliberately broken artifact or records
//! file is rejected with a message naming what broke.

mod common;

use std::path::{Path, PathBuf};

use common::contract::{self, ARTIFACT_SCHEMA, RECORDS_SCHEMA};
use common::recompute::{self, PERCENTILES, nearest_rank};
use common::{check_artifact, check_records, contract_violations, manifest_dir, read_json, reference};
use jsonschema::error::ValidationErrorKind;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    manifest_dir().join("tests/fixtures/summarize")
}

/// A committed artifact written by the project: a closed loop against the `faults` simulator
/// (failures, a failed canary, warm-up and cool-down, SLOs, controlled output).
fn good() -> Value {
    read_json(&fixtures().join("closed/anvil-20261130T175132Z-2fa1-c2.json"))
}

/// An open loop with dropped arrivals and the three clocks.
fn good_open() -> Value {
    read_json(&fixtures().join("open/anvil-20261130T175134Z-a98f.json"))
}

/// Assert that the check rejects `artifact` with at least one violation containing each of
/// `expected`.
#[track_caller]
fn rejected(artifact: &Value, expected: &[&str]) {
    let bad = contract_violations(artifact);
    assert!(!bad.is_empty(), "the broken artifact passed the check");
    for want in expected {
        assert!(bad.iter().any(|v| v.contains(want)), "no violation mentions {want:?}; got:\n{}", bad.join("\n"));
    }
}

/// The index in `request_timings` of the first eligible record with a value for `field`.
fn eligible_with(a: &Value, field: &str) -> usize {
    a["request_timings"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["performance_eligible"] == true && r[field].is_number())
        .expect("an eligible record")
}

#[test]
fn the_schemas_are_valid_draft_2020_12() {
    for relative in [ARTIFACT_SCHEMA, RECORDS_SCHEMA] {
        let schema = contract::load_schema(relative);
        if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
            panic!("{relative} is not a valid draft 2020-12 schema: {e}");
        }
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{relative}");
    }
}

/// The schema node a `$ref` (local to the artifact schema) or an inline object points at.
fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(r) => {
            let name = r.strip_prefix("#/$defs/").expect("a local $ref");
            resolve(schema, &schema["$defs"][name])
        }
        None => node,
    }
}

fn required(node: &Value) -> Vec<&str> {
    node["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

#[test]
fn the_schema_requires_every_key_of_the_reference_artifact() {
    let schema = contract::load_schema(ARTIFACT_SCHEMA);
    let reference = reference();
    let mut missing = Vec::new();
    let mut walk = |what: &str, node: &Value, keys: &Value| {
        let req = required(node);
        for key in keys.as_object().expect("an object in the reference").keys() {
            if !req.contains(&key.as_str()) {
                missing.push(format!("{what}.{key}"));
            }
        }
    };
    walk("artifact", &schema, &reference);
    for block in ["metrics", "metric_population", "timing_methodology", "sampling", "serve_flags"] {
        walk(block, resolve(&schema, &schema["properties"][block]), &reference[block]);
    }
    let sampling = resolve(&schema, &schema["properties"]["sampling"]);
    walk(
        "sampling.temperature",
        resolve(&schema, &sampling["properties"]["temperature"]),
        &reference["sampling"]["temperature"],
    );
    let record = resolve(&schema, &schema["$defs"]["request_timing"]);
    walk("request_timings[]", record, &reference["request_timings"][0]);
    walk(
        "request_canary",
        resolve(&schema, &schema["$defs"]["request_canary"]),
        &reference["request_timings"][0]["request_canary"],
    );
    assert!(missing.is_empty(), "the schema does not require: {missing:?}");
}

#[test]
fn the_reference_artifact_lacks_only_keys_the_project_adds() {
    // Every value in the reference has a type the schema accepts; what it lacks are the keys
    // anvil-load writes beyond the reference (pacing, validity, warnings, phases, …).
    let schema = contract::load_schema(ARTIFACT_SCHEMA);
    let validator = jsonschema::draft202012::new(&schema).expect("the artifact schema builds");
    let reference = reference();
    let other: Vec<String> = validator
        .iter_errors(&reference)
        .filter(|e| !matches!(e.kind(), ValidationErrorKind::Required { .. }))
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(other.is_empty(), "the reference breaks the schema beyond missing keys: {other:#?}");
    assert!(validator.iter_errors(&reference).count() > 0, "the project's keys are required");
}

#[test]
fn the_recomputation_agrees_with_the_reference_artifact() {
    let reference = reference();
    let bad = recompute::oracle(&reference, &reference);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn nearest_rank_in_floating_point_is_the_integer_definition() {
    // check_artifact.py computes ceil(p / 100 · n) in floating point; the definition is
    // ⌈p · n / 100⌉ in integers. They agree for every sample count a test produces.
    let rank = |p: u32, n: usize| (p as usize * n).div_ceil(100).max(1) as f64;
    for n in (1..=2000usize).chain((2001..=200_000).step_by(997)) {
        let sorted: Vec<f64> = (1..=n).map(|i| i as f64).collect();
        for p in PERCENTILES {
            assert_eq!(nearest_rank(&sorted, p), rank(p, n), "p{p} of {n}");
        }
    }
    let s = recompute::summary(&[3.0, 1.0, 2.0, 4.0]);
    let get = |k: &str| s.iter().find(|(name, _)| name == k).unwrap().1;
    assert_eq!((get("mean"), get("p50"), get("p75"), get("p99"), get("samples")), (2.5, 2.0, 3.0, 4.0, 4.0));
    assert!((get("stddev") - (5.0f64 / 3.0).sqrt()).abs() < 1e-12, "sample standard deviation (n - 1)");
}

#[test]
fn committed_artifacts_and_records_pass() {
    for name in ["closed", "open"] {
        for entry in std::fs::read_dir(fixtures().join(name)).unwrap() {
            check_artifact(&entry.unwrap().path());
        }
        check_records(&fixtures().join(format!("{name}.records.ndjson")));
    }
}

#[test]
fn a_wrong_percentile_is_rejected() {
    let mut a = good();
    let p99 = a["metrics"]["ttft_p99_ms"].as_f64().unwrap();
    a["metrics"]["ttft_p99_ms"] = json!(p99 * 1.001);
    rejected(&a, &["metrics.ttft_p99_ms = "]);
    // A percentile taken by interpolation instead of nearest rank.
    let mut a = good();
    let p50 = a["metrics"]["decode_tok_s_p50"].as_f64().unwrap();
    a["metrics"]["decode_tok_s_p50"] = json!(p50 + 1e-3);
    rejected(&a, &["metrics.decode_tok_s_p50 = "]);
}

#[test]
fn a_population_standard_deviation_is_rejected() {
    let mut a = good();
    let n = a["metrics"]["e2e_samples"].as_f64().unwrap();
    let sample_sd = a["metrics"]["e2e_stddev_ms"].as_f64().unwrap();
    a["metrics"]["e2e_stddev_ms"] = json!(sample_sd * ((n - 1.0) / n).sqrt());
    rejected(&a, &["metrics.e2e_stddev_ms = "]);
}

#[test]
fn wrong_totals_and_rates_are_rejected() {
    let mut a = good();
    a["metrics"]["output_tokens"] = json!(a["metrics"]["output_tokens"].as_u64().unwrap() + 1);
    rejected(&a, &["metrics.output_tokens = ", "metrics.throughput_tok_s != output_tokens / wall_clock_s"]);
    let mut a = good();
    a["metrics"]["reasoning_chunks"] = json!(0);
    rejected(&a, &["metrics.reasoning_chunks = 0, request_timings sum to"]);
    let mut a = good();
    a["wall_clock_ms"] = json!(a["wall_clock_ms"].as_f64().unwrap() * 2.0);
    rejected(&a, &["metrics.throughput_tok_s != output_tokens / wall_clock_s", "metrics.request_throughput_rps"]);
}

#[test]
fn a_missing_key_is_rejected() {
    let mut a = good();
    a.as_object_mut().unwrap().remove("wall_clock_ms");
    rejected(&a, &["missing top-level key: wall_clock_ms", "\"wall_clock_ms\" is a required property"]);
    let mut a = good();
    a["metrics"].as_object_mut().unwrap().remove("ttft_p50_ms");
    rejected(&a, &["missing metrics key: ttft_p50_ms"]);
    let mut a = good();
    a["request_timings"][3].as_object_mut().unwrap().remove("decode_tok_s");
    rejected(&a, &["lacks decode_tok_s"]);
    let mut a = good();
    a["timing_methodology"].as_object_mut().unwrap().remove("ttft");
    rejected(&a, &["missing timing_methodology key: ttft"]);
    // A key only this project writes is required too.
    let mut a = good();
    a["metric_population"].as_object_mut().unwrap().remove("failed_server_faults");
    rejected(&a, &["/metric_population: \"failed_server_faults\" is a required property"]);
}

#[test]
fn broken_per_request_arithmetic_is_rejected() {
    let mut a = good();
    let i = eligible_with(&a, "tpot_ms");
    let g = a["request_timings"][i]["generation_ms"].as_f64().unwrap();
    a["request_timings"][i]["generation_ms"] = json!(g + 0.5);
    rejected(&a, &["generation_ms", "!= e2e_ms - time_to_first_output_ms"]);
    let mut a = good();
    a["request_timings"][i]["mean_inter_token_latency_ms"] = json!(1e6);
    rejected(&a, &["mean_inter_token_latency_ms != tpot_ms"]);
}

#[test]
fn values_of_the_wrong_type_or_outside_the_enums_are_rejected() {
    let mut a = good();
    a["request_timings"][0]["phase"] = json!("warm-up");
    rejected(&a, &["schema /request_timings/0/phase"]);
    let mut a = good();
    a["request_timings"][0]["ttft_ms"] = json!("12.5");
    rejected(&a, &["schema /request_timings/0/ttft_ms"]);
    let mut a = good();
    a["failures"][0]["error_kind"] = json!("http_5xx");
    rejected(&a, &["schema /failures/0/error_kind"]);
    let mut a = good();
    a["warnings"][0]["code"] = json!("some_new_warning");
    rejected(&a, &["schema /warnings/0/code"]);
    let mut a = good();
    a["schema"] = json!("anvil-serving.benchmark/v2");
    rejected(&a, &["schema is \"anvil-serving.benchmark/v2\", want \"anvil-serving.benchmark/v1\""]);
    let mut a = good();
    a["failures"][0]["message"] = json!("two\nlines");
    rejected(&a, &["schema /failures/0/message"]);
}

#[test]
fn an_exclusion_that_disagrees_with_eligibility_is_rejected() {
    let mut a = good();
    let i = eligible_with(&a, "ttft_ms");
    a["request_timings"][i]["exclusion_reason"] = json!("cooldown");
    rejected(&a, &[&format!("schema /request_timings/{i}/exclusion_reason")]);
    // Marked ineligible without a reason: the schema says so, and every summary moves.
    let mut a = good();
    a["request_timings"][i]["performance_eligible"] = json!(false);
    rejected(&a, &[&format!("schema /request_timings/{i}/exclusion_reason"), "performance_eligible_requests"]);
}

#[test]
fn a_canary_passed_without_its_conditions_is_rejected() {
    let mut a = good();
    let index = &a["request_timings"][0]["request_index"];
    let message = format!("request {index}: canary passed without marker_at_start");
    a["request_timings"][0]["request_canary"]["foreign_marker_count"] = json!(1);
    rejected(
        &a,
        &[
            &message,
            "schema /request_timings/0/request_canary: matches none of the allowed forms (/request_timings/0/request_canary/foreign_marker_count: 0 was expected)",
        ],
    );
    let mut a = good();
    a["metrics"]["request_canary_samples"] = json!(0);
    rejected(&a, &["request_canary_samples 0 !="]);
}

#[test]
fn broken_counts_are_rejected() {
    let mut a = good();
    a["failed"] = json!(a["failed"].as_u64().unwrap() + 1);
    rejected(&a, &["completed + failed != requests", "len(failures)"]);
    let mut a = good();
    a["metric_population"]["performance_eligible_requests"] = json!(1);
    rejected(&a, &["metric_population.performance_eligible_requests 1 !="]);
    let mut a = good();
    let first = a["context_distribution"].as_object().unwrap().keys().next().unwrap().clone();
    a["context_distribution"][&first] = json!(a["context_distribution"][&first].as_u64().unwrap() + 1);
    rejected(&a, &["context_distribution counts sum to"]);
    let mut a = good();
    a["error_counts"] = json!({});
    rejected(&a, &["error_counts {}, failures by error_kind"]);
}

#[test]
fn the_project_families_are_recomputed_too() {
    let mut a = good_open();
    let p99 = a["metrics"]["ttft_from_intended_p99_ms"].as_f64().unwrap();
    a["metrics"]["ttft_from_intended_p99_ms"] = json!(p99 + 1.0);
    rejected(&a, &["metrics.ttft_from_intended_p99_ms = "]);
    let mut a = good_open();
    a["metrics"]["queue_wait_samples"] = json!(1);
    rejected(&a, &["metrics.queue_wait_samples = 1"]);
    // A closed loop has no schedule: its open-loop families are empty.
    let mut a = good();
    a["metrics"]["schedule_lag_p50_ms"] = json!(0.0);
    rejected(&a, &["metrics.schedule_lag_p50_ms = 0.0, but no record has schedule_lag_ms"]);
    let mut a = good_open();
    a["request_timings"][1]["request_index"] = a["dropped"][0]["request_index"].clone();
    rejected(&a, &["appears in more than one record"]);
}

#[test]
fn check_artifact_fails_the_test_with_the_list_of_violations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.json");
    let mut a = good();
    a["metrics"]["tpot_p99_ms"] = json!(-1.0);
    a.as_object_mut().unwrap().remove("warnings");
    std::fs::write(&path, serde_json::to_vec_pretty(&a).unwrap()).unwrap();
    let panic = std::panic::catch_unwind(|| check_artifact(&path)).expect_err("a broken artifact fails the test");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("broken.json breaks the artifact contract"), "{message}");
    assert!(message.contains("metrics.tpot_p99_ms = -1.0, request_timings give"), "{message}");
    assert!(message.contains("\"warnings\" is a required property"), "{message}");
}

fn records_problems(name: &str, text: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    contract::records_violations(&path)
}

/// The committed closed-loop records file, as lines.
fn good_records() -> Vec<String> {
    std::fs::read_to_string(fixtures().join("closed.records.ndjson")).unwrap().lines().map(String::from).collect()
}

fn join(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn broken_records_files_are_rejected() {
    let lines = good_records();
    let line = |i: usize| serde_json::from_str::<Value>(&lines[i]).unwrap();
    let request = lines.iter().position(|l| l.contains("\"type\":\"request\"")).unwrap();
    let level_end = lines.iter().position(|l| l.contains("\"type\":\"level_end\"")).unwrap();
    let at = |i: usize| format!("line {}", i + 1);

    assert!(records_problems("good.ndjson", &join(&lines)).is_empty());
    // A second run appended to the same file brings its own run line and levels.
    let open = std::fs::read_to_string(fixtures().join("open.records.ndjson")).unwrap();
    let both = records_problems("both.ndjson", &format!("{}{open}", join(&lines)));
    assert!(both.is_empty(), "{both:#?}");

    // A request of an unknown phase.
    let mut broken = lines.clone();
    let mut r = line(request);
    r["phase"] = json!("steady");
    broken[request] = r.to_string();
    let bad = records_problems("phase.ndjson", &join(&broken));
    assert!(bad.iter().any(|v| v.starts_with(&at(request)) && v.contains("/phase")), "{bad:#?}");

    // No run line first.
    let bad = records_problems("norun.ndjson", &join(&lines[1..]));
    assert!(bad.iter().any(|v| v.contains("the first line is \"level\"")), "{bad:#?}");

    // A record after its level ended.
    let mut broken = lines.clone();
    broken.insert(level_end + 1, lines[request].clone());
    let bad = records_problems("late.ndjson", &join(&broken));
    assert!(bad.iter().any(|v| v.contains("after its level_end")), "{bad:#?}");
    assert!(bad.iter().any(|v| v.contains("recorded twice in its level")), "{bad:#?}");

    // A request line without its level tag.
    let mut broken = lines.clone();
    let mut r = line(request);
    r.as_object_mut().unwrap().remove("level");
    broken[request] = r.to_string();
    let bad = records_problems("untagged.ndjson", &join(&broken));
    assert!(bad.iter().any(|v| v.contains("\"level\" is a required property")), "{bad:#?}");

    // A line cut short in the middle is an error; at the very end (a killed run) it is not.
    let mut broken = lines.clone();
    broken[request].truncate(40);
    let bad = records_problems("cut.ndjson", &join(&broken));
    assert!(bad.iter().any(|v| v.starts_with(&at(request)) && v.contains("not a JSON object")), "{bad:#?}");
    let mut killed = join(&lines[..request + 1]);
    killed.push_str(&lines[request + 1][..30]);
    assert!(records_problems("killed.ndjson", &killed).is_empty());

    // An unknown line type.
    let mut broken = lines.clone();
    broken.push(json!({"type": "note", "level": "x"}).to_string());
    assert!(!records_problems("unknown.ndjson", &join(&broken)).is_empty());
}

#[test]
fn check_records_fails_the_test_with_the_list_of_violations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.records.ndjson");
    std::fs::write(&path, "{\"type\":\"level_end\"}\n").unwrap();
    let panic = std::panic::catch_unwind(|| check_records(Path::new(&path))).expect_err("a broken records file fails");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("breaks the records contract"), "{message}");
    assert!(message.contains("the first line is \"level_end\""), "{message}");
}
