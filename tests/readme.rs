//! The scenario reference (docs/scenario.md) documents every key the scenario parser accepts, and every
//! example scenario in `scenarios/` validates.

mod common;

use anvil_load::plan::scenario::{Overrides, RawScenario, Scenario};

/// The keys a section accepts, read from the parser itself: an unknown key makes serde list the
/// expected ones. `None` for a free-form table (such as `[slo]`).
fn accepted_keys(section: Option<&str>) -> Option<Vec<String>> {
    let doc = match section {
        None => "zz_unknown = 1\n".to_string(),
        Some(s) => format!("[{s}]\nzz_unknown = 1\n"),
    };
    let err = toml::from_str::<RawScenario>(&doc).expect_err("the probe document is incomplete").to_string();
    if !err.contains("unknown field") {
        return None;
    }
    let expected =
        err.split("expected one of").nth(1).or_else(|| err.split("expected").nth(1)).unwrap_or_else(|| panic!("{err}"));
    Some(expected.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

#[test]
fn readme_documents_every_scenario_key() {
    let readme =
        std::fs::read_to_string(common::manifest_dir().join("docs/scenario.md")).expect("docs/scenario.md exists");
    let sections = accepted_keys(None).expect("the top level has fixed sections");
    assert!(sections.contains(&"target".to_string()) && sections.contains(&"workload".to_string()), "{sections:?}");
    let mut missing = Vec::new();
    for section in &sections {
        let Some(keys) = accepted_keys(Some(section)) else {
            // A free-form table: its keys are documented as a pattern.
            assert!(readme.contains(&format!("`[{section}]`")), "docs/scenario.md does not document [{section}]");
            continue;
        };
        assert!(!keys.is_empty(), "no keys found for [{section}]");
        for key in keys {
            let path = format!("`{section}.{key}`");
            if !readme.contains(&path) {
                missing.push(path);
            }
        }
    }
    assert!(missing.is_empty(), "docs/scenario.md (the scenario reference) lacks {missing:?}");
}

#[test]
fn every_example_scenario_validates() {
    let dir = common::manifest_dir().join("scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Scenario::load(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
    }
    assert!(count >= 3, "expected the example scenarios in {}", dir.display());
}
