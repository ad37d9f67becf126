//! The artifact contract does not drift: `summarize` over records files written by an earlier
//! build gives, byte for byte, the artifacts that build wrote (the `client` block, which names the
//! version, aside). The fixtures are a closed-loop sweep against the `faults` simulator (failures,
//! a failed canary, warm-up and cool-down, SLOs, controlled output) and an open loop with
//! `overload = "drop"` (dropped arrivals, time-based warm-up and cool-down).

mod common;

use std::path::Path;

use common::{anvil, check_artifact, check_records, manifest_dir, read_json, text};
use serde_json::Value;

fn without_client(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("client");
    }
    v
}

fn golden(name: &str) {
    let fixtures = manifest_dir().join("tests/fixtures/summarize");
    let out = tempfile::tempdir().expect("tempdir");
    let records = fixtures.join(format!("{name}.records.ndjson"));
    check_records(&records);
    let output =
        anvil().arg("summarize").arg(&records).arg("--out").arg(out.path()).output().expect("the binary starts");
    assert!(output.status.success(), "summarize failed: {}", text(&output.stderr));
    let expected_dir = fixtures.join(name);
    let mut expected: Vec<_> =
        std::fs::read_dir(&expected_dir).expect("fixture dir").map(|e| e.unwrap().path()).collect();
    expected.sort();
    assert!(!expected.is_empty());
    for want in expected {
        let file = want.file_name().expect("file name");
        let got = out.path().join(file);
        assert!(got.exists(), "summarize did not write {}", Path::new(file).display());
        check_artifact(&got);
        let (got_json, want_json) = (without_client(read_json(&got)), without_client(read_json(&want)));
        if got_json != want_json {
            // Point at the first differing key, not a 200 kB dump.
            let (g, w) = (got_json.as_object().unwrap(), want_json.as_object().unwrap());
            for (k, v) in w {
                assert_eq!(g.get(k), Some(v), "{}: key {k} differs", Path::new(file).display());
            }
            for k in g.keys() {
                assert!(w.contains_key(k), "{}: unexpected key {k}", Path::new(file).display());
            }
        }
        // Byte for byte: the same serialisation, not only the same values.
        let strip = |p: &Path| {
            let s = std::fs::read_to_string(p).expect("readable");
            // The client's version, commit and build date name the build, not the records.
            let client = ["\"version\": ", "\"commit\": ", "\"build_date\": "];
            s.lines().filter(|l| !client.iter().any(|k| l.contains(k))).collect::<Vec<_>>().join("\n")
        };
        assert!(strip(&got) == strip(&want), "{}: same values, different bytes", Path::new(file).display());
    }
}

#[test]
fn summarize_of_a_closed_loop_sweep_is_unchanged() {
    golden("closed");
}

#[test]
fn summarize_of_an_open_loop_with_drops_is_unchanged() {
    golden("open");
}
