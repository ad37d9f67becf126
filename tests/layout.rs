//! The house as `src/lib.rs` and `docs/development.md` describe it: every module of `src/`
//! listed in `lib.rs`'s crate doc with a line saying what it is, declared in that order, listed
//! in the same order in the manual's Layout, and grouped in stages (the list's headings) that
//! import only from their own stage or an earlier one, with no import cycle between modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Imports of a later stage still in the tree: `(from, to, why)`. None today; one that cannot be
/// avoided goes here with its reason, and the test fails once it is gone.
const LATER_STAGE_IMPORTS: &[(&str, &str, &str)] = &[];

/// `lib.rs`'s list of modules (its crate doc) in order, each with its stage (0 = the ground
/// floor); the declarations below the list must name the same modules in the same order.
fn declared() -> Vec<(String, usize)> {
    let lib = std::fs::read_to_string("src/lib.rs").unwrap();
    let (mut listed, mut stage) = (Vec::new(), None::<usize>);
    for line in lib.lines().filter_map(|l| l.strip_prefix("//! ")) {
        if let Some(item) = line.strip_prefix("- `") {
            let (name, what) = item.split_once("`: ").expect("a module line reads - `name`: what it is");
            assert!(!what.trim().is_empty(), "src/lib.rs: `{name}` has no line saying what it is");
            listed.push((name.to_string(), stage.expect("a module line under a stage")));
        } else if line.ends_with(':') {
            stage = Some(stage.map_or(0, |s| s + 1));
        }
    }
    let declarations: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ").or_else(|| l.strip_prefix("pub use anvil_sim as ")))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    let names: Vec<String> = listed.iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(declarations, names, "src/lib.rs declares the modules its list names, in its order");
    listed
}

#[test]
fn every_module_is_declared_with_a_line_and_listed_in_the_manual_in_the_same_order() {
    let declared: Vec<String> = declared().into_iter().map(|(m, _)| m).collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir("src")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let in_lib: BTreeSet<String> = declared.iter().filter(|m| *m != "mock").cloned().collect();
    assert_eq!(in_lib, on_disk, "src/lib.rs must list every module of src/, and only those");
    let manual = std::fs::read_to_string("docs/development.md").unwrap();
    let layout = &manual[manual.find("## Layout").expect("docs/development.md has a Layout section")..];
    let listed: Vec<String> = layout
        .lines()
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Layout"))
        .filter_map(|l| l.trim_start().strip_prefix("- `"))
        .filter_map(|l| l.split_once("`:").map(|(m, _)| m.to_string()))
        .collect();
    assert_eq!(listed, declared, "docs/development.md's Layout lists the modules of src/lib.rs, in its order");
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::module` a line names, outside comments.
fn imports_of(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let name: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // `crate::{a, b}` names several.
            if name.is_empty() && tail.starts_with('{') {
                let group = &tail[1..tail.find('}').unwrap_or(tail.len())];
                for part in group.split(',') {
                    let part = part.trim();
                    let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            } else if !name.is_empty() {
                out.insert(name.clone());
            }
            rest = &tail[name.len().min(tail.len())..];
        }
    }
    out
}

/// Every import of one module of `src/` by another: `(from, to)` → the files that make it.
fn module_imports(stages: &BTreeMap<String, usize>) -> BTreeMap<(String, String), Vec<String>> {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix("src").unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if !stages.contains_key(&top) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for name in imports_of(&text) {
            if name != top && stages.contains_key(&name) {
                found.entry((top.clone(), name)).or_default().push(file.display().to_string());
            }
        }
    }
    found
}

#[test]
fn no_import_cycle_crosses_a_module() {
    let stages: BTreeMap<String, usize> = declared().into_iter().collect();
    let imports = module_imports(&stages);
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in imports.keys() {
        next.entry(from).or_default().push(to);
    }
    // From each module, every module it reaches; reaching itself is a cycle.
    for start in stages.keys() {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![(start.as_str(), vec![start.as_str()])]);
        while let Some((at, path)) = todo.pop() {
            for &to in next.get(at).map(Vec::as_slice).unwrap_or_default() {
                assert!(to != start, "an import cycle: {} → {start}", path.join(" → "));
                if seen.insert(to) {
                    let mut longer = path.clone();
                    longer.push(to);
                    todo.push((to, longer));
                }
            }
        }
    }
}

#[test]
fn no_module_imports_a_later_stage_beyond_the_listed_ones() {
    let stages: BTreeMap<String, usize> = declared().into_iter().collect();
    let found: BTreeMap<(String, String), Vec<String>> =
        module_imports(&stages).into_iter().filter(|((from, to), _)| stages[to] > stages[from]).collect();
    let listed: BTreeSet<(String, String)> =
        LATER_STAGE_IMPORTS.iter().map(|(a, b, _)| (a.to_string(), b.to_string())).collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(edge, _)| !listed.contains(*edge))
        .map(|((a, b), files)| format!("{a} → {b} ({})", files.join(", ")))
        .collect();
    assert!(new.is_empty(), "imports of a later stage (see src/lib.rs's stages): {new:#?}");
    let opened: Vec<&(String, String)> = listed.iter().filter(|edge| !found.contains_key(*edge)).collect();
    assert!(opened.is_empty(), "no longer imported, remove from LATER_STAGE_IMPORTS: {opened:?}");
}

#[test]
fn the_import_scanner_sees_grouped_and_nested_paths_and_skips_comments() {
    let names = imports_of("use crate::{record::Stamp, worker};\nlet x = crate::openai::wire(); // crate::app\n");
    assert_eq!(names, ["openai", "record", "worker"].map(String::from).into_iter().collect());
}
