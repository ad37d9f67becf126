//! `anvil-load report`: results people look at. The runs the paths hold (see `gather`) become
//! one document. Each run opens with its answer (`answer`: the capacity and the level to run at,
//! or a level's headline, with every objective met or missed), then its warnings grouped by kind,
//! provenance, headline tables with CI95, latency distributions, TTFT per request over time, the
//! sweep curves with the knee and a search's capacity point, a soak's windows and drift,
//! canaries, steady state, the server's own metrics and a mix's per-model table (`models`). Several runs open with what each answers,
//! the differences against the first and their distributions on one axis (`overlay`). The
//! document is written as one self-contained HTML file (`html`, plots from `svg`) or as
//! GitHub-flavoured Markdown (`markdown`, the same content without plots).

mod answer;
pub mod doc;
pub mod escape;
pub mod facts;
pub mod html;
mod markdown;
mod models;
mod overlay;
mod run;
mod soak;
pub mod svg;
mod sweep;

use std::path::{Path, PathBuf};

use crate::after_run::gather::{Gathered, RunKind, gather};
use crate::results::artifact::output::{self, Written};
use doc::Doc;

pub use sweep::KNEE_DEFINITION;

/// What `report` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Html,
    Md,
}

impl Format {
    fn extension(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Md => "md",
        }
    }
}

/// Read the paths, write the report, return where it went (see
/// [`crate::results::artifact::output`]: `-` is standard output, a FIFO, device or link is written in
/// place, a regular file replaced atomically). Errors name the file and the fix.
pub fn report(paths: &[PathBuf], out: Option<&Path>, format: Format) -> Result<(Written, Vec<String>), String> {
    let gathered = gather(paths)?;
    let names = overlay::names(&gathered, paths);
    let doc = document_named(&gathered, &names);
    let text = match format {
        Format::Html => html::render(&doc),
        Format::Md => markdown::render(&doc),
    };
    let path = match out {
        Some(p) => p.to_path_buf(),
        None => default_path(&paths[0], format),
    };
    let written = write(&path, text.as_bytes())
        .map_err(|e| format!("--out {}: cannot write the report ({e})", path.display()))?;
    Ok((written, gathered.notes))
}

/// Beside the results: `DIR/report.html` for a directory, `report.html` beside a file.
fn default_path(first: &Path, format: Format) -> PathBuf {
    let name = format!("report.{}", format.extension());
    if first.is_dir() {
        first.join(name)
    } else {
        first.parent().map_or_else(|| PathBuf::from(&name), |p| p.join(&name))
    }
}

fn write(path: &Path, bytes: &[u8]) -> std::io::Result<Written> {
    if !output::is_stdout(path) {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
    }
    output::write_whole(path, |w| w.write_all(bytes))
}

/// The document of everything gathered, runs named by their run ids.
pub fn document(g: &Gathered) -> Doc {
    let names: Vec<String> = g.runs.iter().map(|r| r.run_id.clone()).collect();
    document_named(g, &names)
}

/// The document, each run under its name (see [`overlay::names`]). One run opens with its
/// answer; several open with what each answers, the differences against the first, and their
/// distributions on one axis, and then come each run's own sections.
fn document_named(g: &Gathered, names: &[String]) -> Doc {
    let several = g.runs.len() > 1;
    let first = &g.runs[0].levels[0].artifact;
    let (title, subtitle) = if several {
        (
            format!("anvil-load report: {} runs", g.runs.len()),
            format!("{} levels in all · BASE {} against {}", g.levels().count(), names[0], names[1..].join(", ")),
        )
    } else {
        let run = &g.runs[0];
        let kind = match run.kind {
            RunKind::Single => "single level",
            RunKind::Sweep => "sweep",
            RunKind::Search => "capacity search",
        };
        (
            format!("{} — {}", first.model, first.engine.as_deref().unwrap_or("unlabelled engine")),
            format!("{kind} {} · started {} · {} level(s)", run.run_id, first.started_at, run.levels.len()),
        )
    };
    let mut sections = Vec::new();
    if several {
        sections.extend(overlay::sections(g, names));
    }
    for (i, (r, name)) in g.runs.iter().zip(names).enumerate() {
        let p = if several { format!("r{i}-") } else { String::new() };
        let title = if several { format!("{name}: {}", run::run_title(r)) } else { "Overview".to_string() };
        sections.push(run::overview(r, &format!("{p}overview"), &title));
        sections.extend(sweep::section(r, &format!("{p}sweep")));
        sections.push(run::level_details(r, &format!("{p}levels")));
        sections.extend(run::distributions(r, &format!("{p}distributions")));
        sections.extend(soak::section(r, &format!("{p}windows")));
    }
    if !g.notes.is_empty() {
        let mut s = doc::Section::new("notes", "Files passed over");
        s.push(doc::Block::List(g.notes.clone()));
        sections.push(s);
    }
    Doc { title, subtitle, sections }
}
