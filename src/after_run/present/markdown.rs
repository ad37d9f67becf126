//! The report as GitHub-flavoured Markdown for a pull request or a CI summary: the same
//! sections, text and tables as the HTML page, without the plots. Every string goes through
//! [`super::escape::markdown`] (code through `markdown_code`): nothing a file holds can start a
//! line of its own.

use std::fmt::Write as _;

use super::doc::{Block, Doc, Table, Tone};
use super::escape::{markdown as inline, markdown_code};

pub fn render(doc: &Doc) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n\n{}\n", inline(&doc.title), inline(&doc.subtitle));
    for s in &doc.sections {
        let body: Vec<&Block> = s.blocks.iter().filter(|b| !matches!(b, Block::Figures(_))).collect();
        if body.is_empty() {
            continue;
        }
        let _ = writeln!(out, "## {}\n", inline(&s.title));
        for b in body {
            block(&mut out, b);
        }
    }
    out
}

fn block(out: &mut String, b: &Block) {
    match b {
        Block::Heading(t) => {
            let _ = writeln!(out, "### {}\n", inline(t));
        }
        Block::Text(t) => {
            let _ = writeln!(out, "{}\n", inline(t));
        }
        Block::Note(t) => {
            let _ = writeln!(out, "<sub>{}</sub>\n", inline(t));
        }
        Block::Verdict { ok, text } => {
            let _ = writeln!(out, "> {} **{}**\n", if *ok { "✅" } else { "❌" }, inline(text));
        }
        Block::Warnings(items) => {
            for (code, message) in items {
                let _ = writeln!(out, "- ⚠️ `{}` {}", markdown_code(code), inline(message));
            }
            out.push('\n');
        }
        Block::Answer(a) => {
            let detail = if a.detail.is_empty() { String::new() } else { format!(" — {}", inline(&a.detail)) };
            let mark = if a.ok { "✅" } else { "❌" };
            let _ = writeln!(out, "> {mark} **{}: {}**{detail}\n", inline(&a.label), inline(&a.value));
            if !a.facts.is_empty() {
                // One row of figures across, as the page lays them out.
                let head: Vec<String> = a.facts.iter().map(|(k, _)| inline(k)).collect();
                let values: Vec<String> = a.facts.iter().map(|(_, v)| inline(v)).collect();
                let _ = writeln!(
                    out,
                    "| {} |\n|{}|\n| {} |\n",
                    head.join(" | "),
                    vec!["---:"; head.len()].join("|"),
                    values.join(" | ")
                );
            }
            for (met, text) in &a.objectives {
                let _ = writeln!(out, "- {} {}", if *met { "✓" } else { "✗" }, inline(text));
            }
            if !a.objectives.is_empty() {
                out.push('\n');
            }
            for n in &a.notes {
                let _ = writeln!(out, "{}\n", inline(n));
            }
        }
        Block::WarningGroups(lines) => {
            for w in lines {
                let applies = if w.applies.is_empty() { String::new() } else { format!(" ({})", inline(&w.applies)) };
                let _ = writeln!(out, "- ⚠️ `{}`{applies} {}", markdown_code(&w.code), inline(&w.message));
            }
            out.push('\n');
        }
        Block::List(items) => {
            for i in items {
                let _ = writeln!(out, "- {}", inline(i));
            }
            out.push('\n');
        }
        Block::Facts(pairs) => {
            out.push_str("| | |\n|---|---|\n");
            for (k, v) in pairs {
                let _ = writeln!(out, "| {} | {} |", inline(k), inline(v));
            }
            out.push('\n');
        }
        Block::Table(t) => table(out, t),
        Block::Figures(_) => {}
    }
}

fn table(out: &mut String, t: &Table) {
    let head: Vec<String> = t.head.iter().map(|h| inline(h)).collect();
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let align: Vec<&str> = (0..t.head.len()).map(|i| if i >= t.numeric_from { "---:" } else { "---" }).collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for row in &t.rows {
        let cells: Vec<String> = row
            .iter()
            .map(|c| match c.tone {
                Tone::Bad | Tone::Marked => format!("**{}**", inline(&c.text)),
                Tone::Plain | Tone::Good => inline(&c.text),
            })
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::after_run::present::doc::{Cell, Section};

    #[test]
    fn tables_align_numbers_and_escape_markup() {
        let mut s = Section::new("s", "Headline");
        let mut t = Table::new(&["metric", "p50"], 1);
        t.row(vec![Cell::from("TTFT | first"), Cell::toned("1.5", Tone::Bad)]);
        s.push(Block::Table(t));
        s.push(Block::Verdict { ok: true, text: "valid <run>".into() });
        let md = render(&Doc { title: "T".into(), subtitle: "s_1".into(), sections: vec![s] });
        assert!(md.contains("| metric | p50 |\n|---|---:|\n| TTFT \\| first | **1.5** |"), "{md}");
        assert!(md.contains("> ✅ **valid \\<run\\>**"), "{md}");
        assert!(md.contains("s\\_1"), "{md}");
    }
}
