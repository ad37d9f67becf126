//! The house as `src/lib.rs` and `docs/development.md` describe it: every module of `src/`
//! listed in `lib.rs`'s crate doc with a line saying what it is, declared in that order, listed
//! in the same order in the manual's Layout, and grouped in stages (the list's headings) that
//! import only from their own stage or an earlier one, with no import cycle between modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Imports of a later stage still in the tree: `(from, to, why)`. None today; one that cannot be
/// avoided goes here with its reason, and the test fails once it is gone.
const LATER_STAGE_IMPORTS: &[(&str, &str, &str)] = &[];

/// One module of the list: its name, the stage folder it lives in (`None` on the ground floor
/// and for the program), and its stage's rank (0 = the ground floor).
struct Module {
    name: String,
    folder: Option<String>,
    stage: usize,
}

/// `lib.rs`'s list of modules (its crate doc), in order. A heading names its stage's folder in
/// backquotes (`` `plan/`, the plan: ``); the ground floor and the program have none.
fn declared() -> Vec<Module> {
    let lib = std::fs::read_to_string("src/lib.rs").unwrap();
    let (mut listed, mut stage, mut folder) = (Vec::new(), None::<usize>, None::<String>);
    for line in lib.lines().filter_map(|l| l.strip_prefix("//! ")) {
        if let Some(item) = line.strip_prefix("- `") {
            let (name, what) = item.split_once("`: ").expect("a module line reads - `name`: what it is");
            assert!(!what.trim().is_empty(), "src/lib.rs: `{name}` has no line saying what it is");
            let stage = stage.expect("a module line under a stage");
            listed.push(Module { name: name.to_string(), folder: folder.clone(), stage });
        } else if line.ends_with(':') {
            stage = Some(stage.map_or(0, |s| s + 1));
            folder = line.strip_prefix('`').and_then(|l| l.split_once("/`")).map(|(f, _)| f.to_string());
        }
    }
    listed
}

/// The `pub mod`/`pub use … as` names a module file declares, in order.
fn declarations(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ").or_else(|| l.strip_prefix("pub use anvil_sim as ")))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect()
}

fn entries(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|m| !["lib", "main", "mod"].contains(&m.as_str()))
        .collect()
}

#[test]
fn every_module_is_declared_with_a_line_and_listed_in_the_manual_in_the_same_order() {
    let modules = declared();
    // lib.rs declares the ground floor, each stage's folder and the program, in the list's order.
    let mut top: Vec<String> = Vec::new();
    for m in &modules {
        let name = m.folder.clone().unwrap_or_else(|| m.name.clone());
        if top.last() != Some(&name) {
            top.push(name);
        }
    }
    assert_eq!(declarations("src/lib.rs"), top, "src/lib.rs declares what its list names, in its order");
    let on_disk: BTreeSet<String> = entries("src");
    let expected: BTreeSet<String> = top.iter().filter(|m| *m != "mock").cloned().collect();
    assert_eq!(on_disk, expected, "src/ holds the ground floor, one folder per stage and the program");
    // Each stage's folder declares its modules, in the list's order, and holds nothing else.
    let folders: BTreeSet<&String> = modules.iter().filter_map(|m| m.folder.as_ref()).collect();
    for folder in folders {
        let names: Vec<String> =
            modules.iter().filter(|m| m.folder.as_ref() == Some(folder)).map(|m| m.name.clone()).collect();
        assert_eq!(declarations(&format!("src/{folder}/mod.rs")), names, "src/{folder}/mod.rs");
        let inside: BTreeSet<String> = names.iter().cloned().collect();
        assert_eq!(entries(&format!("src/{folder}")), inside, "src/{folder}/ holds its stage's modules only");
    }
    let manual = std::fs::read_to_string("docs/development.md").unwrap();
    let layout = &manual[manual.find("## Layout").expect("docs/development.md has a Layout section")..];
    let listed: Vec<String> = layout
        .lines()
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Layout"))
        .filter_map(|l| l.trim_start().strip_prefix("- `"))
        .filter_map(|l| l.split_once("`:").map(|(m, _)| m.to_string()))
        .collect();
    let names: Vec<String> = modules.iter().map(|m| m.name.clone()).collect();
    assert_eq!(listed, names, "docs/development.md's Layout lists the modules of src/lib.rs, in its order");
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

/// Every path under `crate::` a line names outside comments, as its first two segments
/// (`crate::plan::scenario::Scenario` gives `["plan", "scenario"]`; a group `crate::{a, b::c}`
/// gives each).
fn imports_of(text: &str) -> BTreeSet<Vec<String>> {
    fn segments(path: &str) -> Vec<String> {
        path.split("::")
            .take(2)
            .map(|s| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
            .take_while(|s| !s.is_empty())
            .collect()
    }
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            if let Some(group) = tail.strip_prefix('{') {
                for part in group[..group.find('}').unwrap_or(group.len())].split(',') {
                    let found = segments(part.trim());
                    if !found.is_empty() {
                        out.insert(found);
                    }
                }
            } else {
                let found = segments(tail);
                if !found.is_empty() {
                    out.insert(found);
                }
            }
            rest = &tail[1.min(tail.len())..];
        }
    }
    out
}

/// Each module's stage rank, by name.
fn stages() -> BTreeMap<String, usize> {
    declared().into_iter().map(|m| (m.name, m.stage)).collect()
}

/// Every import of one module of `src/` by another: `(from, to)` → the files that make it.
fn module_imports(stages: &BTreeMap<String, usize>) -> BTreeMap<(String, String), Vec<String>> {
    let folders: BTreeSet<String> = declared().into_iter().filter_map(|m| m.folder).collect();
    // The module a path names: the segment after a stage's folder, else the first.
    let module = |segments: &[String]| -> Option<String> {
        match segments {
            [folder, name, ..] if folders.contains(folder) => Some(name.clone()),
            [name, ..] if stages.contains_key(name) => Some(name.clone()),
            _ => None,
        }
    };
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let parts: Vec<String> = file
            .strip_prefix("src")
            .unwrap()
            .components()
            .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let Some(own) = module(&parts) else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        for path in imports_of(&text) {
            if let Some(to) = module(&path).filter(|to| *to != own) {
                found.entry((own.clone(), to)).or_default().push(file.display().to_string());
            }
        }
    }
    found
}

#[test]
fn no_import_cycle_crosses_a_module() {
    let stages = stages();
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
    let stages = stages();
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
    let names = imports_of(
        "use crate::{contract::Stamp, request::worker};\nlet x = crate::request::openai::wire(); // crate::app\n",
    );
    let expected: BTreeSet<Vec<String>> =
        [vec!["contract", "Stamp"], vec!["request", "worker"], vec!["request", "openai"]]
            .into_iter()
            .map(|v| v.into_iter().map(String::from).collect())
            .collect();
    assert_eq!(names, expected);
}
