//! The README's scenario reference documents every key the scenario parser accepts, and every
//! example scenario in `scenarios/` validates.

mod common;

use anvil_load::scenario::{Overrides, RawScenario, Scenario};

/// The keys a section accepts, read from the parser itself: an unknown key makes serde list the
/// expected ones.
fn accepted_keys(section: Option<&str>) -> Vec<String> {
    let doc = match section {
        None => "zz_unknown = 1\n".to_string(),
        Some(s) => format!("[{s}]\nzz_unknown = 1\n"),
    };
    let err = toml::from_str::<RawScenario>(&doc).expect_err("an unknown key is rejected").to_string();
    let expected =
        err.split("expected one of").nth(1).or_else(|| err.split("expected").nth(1)).unwrap_or_else(|| panic!("{err}"));
    expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn readme_documents_every_scenario_key() {
    let readme = std::fs::read_to_string(common::manifest_dir().join("README.md")).expect("README.md exists");
    let sections = accepted_keys(None);
    assert!(sections.contains(&"target".to_string()) && sections.contains(&"workload".to_string()), "{sections:?}");
    let mut missing = Vec::new();
    for section in &sections {
        let keys = accepted_keys(Some(section));
        assert!(!keys.is_empty(), "no keys found for [{section}]");
        for key in keys {
            let path = format!("`{section}.{key}`");
            if !readme.contains(&path) {
                missing.push(path);
            }
        }
    }
    assert!(missing.is_empty(), "README.md's scenario reference lacks {missing:?}");
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
