//! `anvil-load export` read back by readers that share no code with it: a run against the
//! simulator (its faults profile, so failures are rows too), its artifact and its records file
//! exported to Parquet and CSV, then read by pyarrow, DuckDB and Python's csv module. Their row
//! counts, sums and DuckDB's p99 equal the artifact's and the simulator's own counts. And the
//! column table in docs/export.md is the code's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use anvil_load::after_run::export::columns::COLUMNS;
use common::{anvil, artifacts, check_artifact, check_records, manifest_dir, run, text};
use serde_json::Value;

/// What CI installs (`.ci/run`); a test that needs them fails with this, never skips.
const INSTALL: &str = "python3 -m pip install pyarrow==26.0.1 duckdb==2.0.1";

/// Reads every file it is given with pyarrow (Parquet), DuckDB (Parquet and CSV) and Python's
/// csv module (CSV), and prints what each found as one JSON object.
const READER: &str = r#"
import csv, json, sys
try:
    import duckdb, pyarrow.parquet as pq, pyarrow.compute as pc
except ImportError as e:
    print(f"missing: {e}", file=sys.stderr)
    sys.exit(3)
out = {}
for path in sys.argv[1:]:
    r = {}
    if path.endswith(".parquet"):
        t = pq.read_table(path)
        r["pyarrow_rows"] = t.num_rows
        r["pyarrow_output_tokens"] = pc.sum(t["output_tokens"]).as_py()
        r["pyarrow_e2e_ms"] = pc.sum(t["e2e_ms"]).as_py()
        r["pyarrow_types"] = {f.name: str(f.type) for f in t.schema}
        src = f"read_parquet('{path}')"
    else:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        r["csv_rows"] = len(rows)
        r["csv_output_tokens"] = sum(int(x["output_tokens"]) for x in rows if x["output_tokens"])
        r["csv_e2e_ms"] = sum(float(x["e2e_ms"]) for x in rows if x["e2e_ms"])
        r["csv_failed"] = sum(1 for x in rows if x["outcome"] == "failed")
        src = f"read_csv('{path}')"
    q = f"""
        select count(*),
               count(*) filter (where outcome = 'failed'),
               sum(output_tokens)::double,
               sum(e2e_ms),
               percentile_disc(0.99) within group (order by ttft_ms) filter (where performance_eligible)
        from {src}"""
    n, failed, tokens, e2e, p99 = duckdb.sql(q).fetchall()[0]
    r.update(duckdb_rows=n, duckdb_failed=failed, duckdb_output_tokens=tokens, duckdb_e2e_ms=e2e, duckdb_ttft_p99_ms=p99)
    kinds = duckdb.sql(f"select error_kind, count(*) from {src} where outcome = 'failed' group by 1").fetchall()
    r["duckdb_error_counts"] = {k: c for k, c in kinds}
    out[path] = r
print(json.dumps(out))
"#;

fn read_back(files: &[&Path]) -> Value {
    let out = Command::new("python3").arg("-c").arg(READER).args(files).output().unwrap_or_else(|e| {
        panic!("python3 does not run ({e}): install it, then {INSTALL}");
    });
    assert!(
        out.status.success(),
        "the independent readers could not run ({}); install them with: {INSTALL}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the reader prints JSON")
}

fn export(input: &Path, out: &Path) -> std::process::Output {
    anvil().arg("export").arg(input).arg("--out").arg(out).output().expect("the binary starts")
}

fn close(a: f64, b: f64) -> bool {
    // Sums of the same numbers in another order: equal to a few ulps of the total.
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_and_csv_read_back_by_pyarrow_and_duckdb_equal_the_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.records.ndjson");
    let results = dir.path().join("results");
    let mut cmd = anvil();
    cmd.args(["--simulator", "faults", "-n", "120", "-c", "6", "--input-tokens", "256", "--output-tokens", "32"])
        .args(["--duration", "60s", "--quiet", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&results);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    check_records(&records);
    let paths = artifacts(&results);
    assert_eq!(paths.len(), 1);
    let a = check_artifact(&paths[0]);

    // What the artifact says, and the simulator's own count.
    let timings = a["request_timings"].as_array().unwrap();
    let failures = a["failures"].as_array().unwrap();
    assert!(!failures.is_empty(), "the faults profile makes failures, so failures are rows too");
    let rows = timings.len() + failures.len();
    assert_eq!(rows as u64, a["requests"].as_u64().unwrap());
    assert_eq!(rows as u64, a["simulator"]["requests_received"].as_u64().unwrap());
    let output_tokens: u64 = timings.iter().map(|t| t["output_tokens"].as_u64().unwrap()).sum();
    let e2e_ms: f64 = timings.iter().map(|t| t["e2e_ms"].as_f64().unwrap()).sum();
    let p99 = a["metrics"]["ttft_p99_ms"].as_f64().unwrap();
    let error_counts = &a["error_counts"];

    let from_records = dir.path().join("records.parquet");
    let from_artifact = dir.path().join("artifact.parquet");
    let csv = dir.path().join("artifact.csv");
    for (input, out) in [(&records, &from_records), (&paths[0], &from_artifact), (&records, &csv)] {
        let done = export(input, out);
        assert!(done.status.success(), "export {} → {}: {}", input.display(), out.display(), text(&done.stderr));
        assert!(text(&done.stdout).contains(&format!("exported: {rows} rows")), "{}", text(&done.stdout));
    }

    let found = read_back(&[&from_records, &from_artifact, &csv]);
    for file in [&from_records, &from_artifact, &csv] {
        let r = &found[file.to_str().unwrap()];
        let shown = file.display();
        let parquet = file.extension().is_some_and(|e| e == "parquet");
        let counted = if parquet { ["pyarrow_rows", "duckdb_rows"] } else { ["csv_rows", "duckdb_rows"] };
        for key in counted {
            assert_eq!(r[key].as_u64(), Some(rows as u64), "{shown}: {key}");
        }
        assert_eq!(r["duckdb_failed"].as_u64(), Some(failures.len() as u64), "{shown}");
        assert_eq!(r["duckdb_output_tokens"].as_f64(), Some(output_tokens as f64), "{shown}");
        assert!(close(r["duckdb_e2e_ms"].as_f64().unwrap(), e2e_ms), "{shown}: {} vs {e2e_ms}", r["duckdb_e2e_ms"]);
        assert_eq!(
            r["duckdb_ttft_p99_ms"].as_f64(),
            Some(p99),
            "{shown}: DuckDB's percentile_disc is the nearest rank"
        );
        assert_eq!(&r["duckdb_error_counts"], error_counts, "{shown}");
        if parquet {
            assert_eq!(r["pyarrow_output_tokens"].as_u64(), Some(output_tokens), "{shown}");
            assert!(close(r["pyarrow_e2e_ms"].as_f64().unwrap(), e2e_ms), "{shown}");
            let types = &r["pyarrow_types"];
            assert_eq!(types["output_tokens"], "uint64");
            assert_eq!(types["ttft_ms"], "double");
            assert_eq!(types["performance_eligible"], "bool");
            assert_eq!(types["started_at"], "timestamp[ns, tz=UTC]");
            assert!(types["chunk_gaps_us"].as_str().unwrap().starts_with("list<element: struct<value_us: uint64"));
        } else {
            assert_eq!(r["csv_output_tokens"].as_u64(), Some(output_tokens), "{shown}");
            assert!(close(r["csv_e2e_ms"].as_f64().unwrap(), e2e_ms), "{shown}");
            assert_eq!(r["csv_failed"].as_u64(), Some(failures.len() as u64), "{shown}");
        }
    }
}

fn assert_refused(out: &std::process::Output, problem: &str, fix: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(problem), "no {problem:?} in: {stderr}");
    assert!(stderr.contains(fix), "no {fix:?} in: {stderr}");
}

#[test]
fn bad_input_exits_2_with_the_problem_and_the_fix_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("t.parquet");
    assert_refused(&export(&d.join("missing.json"), &out), "missing.json: cannot read it", "give a level's artifact");
    let not_ours = d.join("other.json");
    std::fs::write(&not_ours, "{\"a\": 1}\n").unwrap();
    assert_refused(&export(&not_ours, &out), "neither an artifact", "a file written with --records");
    let pretty = d.join("pretty.json");
    std::fs::write(&pretty, "{\n  \"schema\": \"something/v9\"\n}\n").unwrap();
    assert_refused(&export(&pretty, &out), "pretty.json", "give a level's artifact");
    let text_file = d.join("notes.txt");
    std::fs::write(&text_file, "hello\n").unwrap();
    assert_refused(&export(&text_file, &out), "neither an artifact", "--records");

    // A real records file, then outputs that cannot be written or named.
    let records = manifest_dir().join("tests/fixtures/summarize/open.records.ndjson");
    assert_refused(&export(&records, &d.join("no/such/dir/t.parquet")), "cannot write there", "give the path");
    let a_dir = d.join("dir.parquet");
    std::fs::create_dir(&a_dir).unwrap();
    assert_refused(&export(&records, &a_dir), "not a regular file", "give the path");
    assert_refused(&export(&records, &d.join("t.xlsx")), "its extension names no format", "--format parquet");
    let bad_format =
        anvil().arg("export").arg(&records).args(["--format", "xlsx", "--out"]).arg(&out).output().unwrap();
    assert_refused(&bad_format, "xlsx", "parquet");
    assert!(std::fs::read_dir(d).unwrap().all(|e| {
        let name = e.unwrap().file_name();
        let name = name.to_string_lossy();
        !name.contains(".parquet") || name == "dir.parquet"
    }));

    // And the fixture itself exports, with --format overriding the extension.
    let forced = d.join("table.data");
    let done = anvil().arg("export").arg(&records).args(["--format", "csv", "--out"]).arg(&forced).output().unwrap();
    assert!(done.status.success(), "{}", text(&done.stderr));
    let first = std::fs::read_to_string(&forced).unwrap();
    assert!(first.starts_with("level,outcome,request_index,"), "{first:.80}");
}

/// The column table of docs/export.md, row by row: name, type, unit.
fn documented_columns(page: &str) -> Vec<(String, String, String)> {
    page.lines()
        .skip_while(|l| !l.starts_with("| column |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<String> = l.split('|').map(|c| c.trim().trim_matches('`').to_string()).collect();
            (cells[1].clone(), cells[2].clone(), cells[3].clone())
        })
        .collect()
}

#[test]
fn the_documented_columns_are_the_codes() {
    let path: PathBuf = manifest_dir().join("docs/export.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let documented = documented_columns(&page);
    let code: Vec<(String, String, String)> =
        COLUMNS.iter().map(|c| (c.name.to_string(), c.get.type_name().to_string(), c.unit.to_string())).collect();
    assert_eq!(documented, code, "docs/export.md's column table (name, type, unit) differs from the code's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_format_parquet_writes_the_runs_table_beside_the_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let mut cmd = anvil();
    cmd.args(["--simulator", "fast", "-n", "40", "-c", "4", "--input-tokens", "128", "--output-tokens", "16"])
        .args(["--duration", "60s", "--quiet", "--set", "run.records_format=\"parquet\"", "--out"])
        .arg(&results);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let paths = artifacts(&results);
    assert_eq!(paths.len(), 1);
    let a = check_artifact(&paths[0]);
    let run_id = a["run_id"].as_str().unwrap();
    let table = results.join(format!("{run_id}.records.parquet"));
    assert!(text(&result.stdout).contains(&format!("written: {}", table.display())), "{}", text(&result.stdout));
    // The records file was not asked to be kept: only the table is beside the artifact.
    let names: Vec<String> =
        std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let found = read_back(&[&table]);
    let r = &found[table.to_str().unwrap()];
    assert_eq!(r["duckdb_rows"].as_u64(), a["requests"].as_u64());
    assert_eq!(r["duckdb_rows"].as_u64(), a["simulator"]["requests_received"].as_u64());
    assert_eq!(r["duckdb_ttft_p99_ms"].as_f64(), a["metrics"]["ttft_p99_ms"].as_f64());

    // A format the key does not know is refused before anything is sent.
    let refused = anvil().args(["validate", "--set", "run.records_format=\"xml\""]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("run.records_format") && stderr.contains("\"parquet\""), "{stderr}");
}
