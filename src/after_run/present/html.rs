//! The report as one self-contained HTML file: inline CSS, inline SVG, no script, no font, no
//! link to anything. A Content-Security-Policy of `default-src 'none'` makes the browser refuse
//! any fetch even if one slipped in, so the page renders the same offline, years later. URLs
//! that appear as data (a server's base URL in a warning) are shown as text with a word joiner
//! inside `://`, so no viewer turns them into links.

use std::fmt::Write as _;

use super::doc::{Answer, Block, Cell, Doc, Figure, Swatch, Table, Tone};

pub use super::escape::html as escape;

const CSS: &str = r#"
:root { --ink: #1d2125; --muted: #5f6b76; --line: #dde2e6; --soft: #f5f7f9; --good: #0b7a3e; --bad: #b00020; --mark: #fff4d6; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 48px; }
header.top { border-bottom: 3px solid var(--ink); padding-bottom: 12px; margin-bottom: 8px; }
header.top h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
header.top p { margin: 0; color: var(--muted); }
nav.toc { margin: 10px 0 18px; font-size: 14px; color: var(--muted); }
nav.toc a { color: inherit; margin-right: 14px; text-decoration: none; border-bottom: 1px dotted var(--muted); }
section { margin: 30px 0 10px; }
section > h2 { font-size: 20px; margin: 0 0 12px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p { margin: 8px 0; max-width: 1000px; }
p.note { color: var(--muted); font-size: 13.5px; }
.verdict { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 8px 0 12px; border-left: 6px solid; }
.verdict.ok { background: #e7f5ec; border-color: var(--good); color: #084d28; }
.verdict.bad { background: #fde8eb; border-color: var(--bad); color: #7a0016; }
ul.warnings { list-style: none; padding: 0; margin: 6px 0 12px; }
ul.warnings li { padding: 6px 10px; margin: 4px 0; background: #fff8e6; border-left: 4px solid #e69f00; border-radius: 4px; }
ul.warnings code { font-weight: 600; margin-right: 8px; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 14px; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; white-space: nowrap; }
tr:nth-child(even) td { background: #fbfcfd; }
td.good { color: var(--good); font-weight: 600; }
td.bad { color: var(--bad); font-weight: 600; }
tr.marked td { background: var(--mark) !important; }
table.facts th { background: none; color: var(--muted); font-weight: 500; width: 1%; }
table.facts td { word-break: break-all; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 18px 22px; margin: 10px 0 16px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px 8px; background: #fff; }
figure h4 { margin: 0 0 4px; font-size: 15px; }
svg.plot { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
ul.legend { list-style: none; padding: 0; margin: 4px 0 0; display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 13px; }
ul.legend li { display: flex; align-items: center; gap: 6px; }
.sw { display: inline-block; width: 22px; height: 0; border-top: 3px solid; }
.sw.dashed { border-top-style: dashed; }
.sw.cross { width: 12px; height: 12px; border: none; position: relative; }
.sw.cross::before, .sw.cross::after { content: ""; position: absolute; left: 5px; top: -1px; width: 2.5px; height: 14px; background: currentColor; }
.sw.cross::before { transform: rotate(45deg); } .sw.cross::after { transform: rotate(-45deg); }
.answer { border: 2px solid var(--good); border-radius: 10px; padding: 14px 18px 10px; margin: 14px 0 18px; background: #f3faf6; }
.answer.bad { border-color: var(--bad); background: #fdf3f4; }
.answer .main { margin: 0; font-size: 17px; }
.answer .main .label { color: var(--muted); margin-right: 8px; }
.answer .main .value { font-size: 30px; font-weight: 700; letter-spacing: -0.01em; }
.answer .detail { margin: 2px 0 8px; }
dl.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(168px, 1fr)); gap: 6px 18px; margin: 6px 0 8px; }
dl.figs div { border-left: 3px solid var(--line); padding-left: 8px; }
dl.figs dt { color: var(--muted); font-size: 13px; }
dl.figs dd { margin: 0; font-weight: 600; font-variant-numeric: tabular-nums; }
ul.objectives { list-style: none; padding: 0; margin: 4px 0 6px; display: flex; flex-wrap: wrap; gap: 4px 22px; }
ul.objectives li.met { color: var(--good); } ul.objectives li.missed { color: var(--bad); font-weight: 600; }
ul.warnings .applies { color: var(--muted); margin-right: 8px; font-size: 13.5px; }
ul.warnings details { display: inline; } ul.warnings summary { display: inline; cursor: pointer; }
ul.warnings summary::after { content: " … more"; color: var(--muted); font-size: 13px; } ul.warnings details[open] summary::after { content: ""; }
footer { margin-top: 36px; padding-top: 10px; border-top: 1px solid var(--line); color: var(--muted); font-size: 13px; }
@media print { .figures { grid-template-columns: 1fr 1fr; } figure { break-inside: avoid; } }
"#;

/// The page.
pub fn render(doc: &Doc) -> String {
    let mut out = String::with_capacity(1 << 16);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"{} {}\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        escape(&doc.title)
    );
    let _ =
        writeln!(out, "<header class=\"top\"><h1>{}</h1><p>{}</p></header>", escape(&doc.title), escape(&doc.subtitle));
    if doc.sections.len() > 2 {
        out.push_str("<nav class=\"toc\">");
        for s in &doc.sections {
            let _ = write!(out, "<a href=\"#{}\">{}</a>", escape(&s.id), escape(&s.title));
        }
        out.push_str("</nav>\n");
    }
    for s in &doc.sections {
        let _ = write!(out, "<section id=\"{}\">\n<h2>{}</h2>\n", escape(&s.id), escape(&s.title));
        for b in &s.blocks {
            block(&mut out, b);
        }
        out.push_str("</section>\n");
    }
    let _ = write!(
        out,
        "<footer id=\"report-end\">Written by {} {}. Self-contained: no script, no external resource; the numbers are the artifacts' own.</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION")
    );
    out
}

fn block(out: &mut String, b: &Block) {
    match b {
        Block::Heading(t) => {
            let _ = writeln!(out, "<h3>{}</h3>", escape(t));
        }
        Block::Text(t) => {
            let _ = writeln!(out, "<p>{}</p>", escape(t));
        }
        Block::Note(t) => {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(t));
        }
        Block::Verdict { ok, text } => {
            let _ = writeln!(out, "<div class=\"verdict {}\">{}</div>", if *ok { "ok" } else { "bad" }, escape(text));
        }
        Block::Warnings(items) => {
            out.push_str("<ul class=\"warnings\">\n");
            for (code, message) in items {
                let _ = writeln!(out, "<li><code>{}</code>{}</li>", escape(code), escape(message));
            }
            out.push_str("</ul>\n");
        }
        Block::Answer(a) => answer(out, a),
        Block::WarningGroups(lines) => {
            out.push_str("<ul class=\"warnings grouped\">\n");
            for w in lines {
                let _ = write!(out, "<li><code>{}</code>", escape(&w.code));
                if !w.applies.is_empty() {
                    let _ = write!(out, "<span class=\"applies\">{}</span>", escape(&w.applies));
                }
                match split_long(&w.message) {
                    // A long text folds after its first clause; the rest opens on a click.
                    (head, Some(rest)) => {
                        let _ = write!(out, "<details><summary>{}</summary> {}</details>", escape(head), escape(rest));
                    }
                    (whole, None) => out.push_str(&escape(whole)),
                }
                out.push_str("</li>\n");
            }
            out.push_str("</ul>\n");
        }
        Block::List(items) => {
            out.push_str("<ul>\n");
            for i in items {
                let _ = writeln!(out, "<li>{}</li>", escape(i));
            }
            out.push_str("</ul>\n");
        }
        Block::Facts(pairs) => {
            out.push_str("<table class=\"facts\">\n");
            for (k, v) in pairs {
                let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
            }
            out.push_str("</table>\n");
        }
        Block::Table(t) => table(out, t),
        Block::Figures(figs) => {
            out.push_str("<div class=\"figures\">\n");
            for f in figs {
                figure(out, f);
            }
            out.push_str("</div>\n");
        }
    }
}

/// A warning longer than a line, cut after its first clause (a `:` or `;` past 40 characters, or
/// the last word before 140): the head, and the rest when there is one.
fn split_long(text: &str) -> (&str, Option<&str>) {
    const SHORT: usize = 140;
    if text.chars().count() <= SHORT {
        return (text, None);
    }
    let limit = text.char_indices().nth(SHORT).map_or(text.len(), |(i, _)| i);
    let clause =
        text[..limit].char_indices().filter(|&(i, c)| i >= 40 && (c == ':' || c == ';')).map(|(i, _)| i + 1).next();
    let cut = clause.or_else(|| text[..limit].rfind(' ')).unwrap_or(limit);
    let (head, rest) = text.split_at(cut);
    let rest = rest.trim_start();
    if rest.is_empty() { (text, None) } else { (head, Some(rest)) }
}

fn answer(out: &mut String, a: &Answer) {
    let _ = writeln!(out, "<div class=\"answer{}\">", if a.ok { "" } else { " bad" });
    let _ = writeln!(
        out,
        "<p class=\"main\"><span class=\"label\">{}</span><span class=\"value\">{}</span></p>",
        escape(&a.label),
        escape(&a.value)
    );
    if !a.detail.is_empty() {
        let _ = writeln!(out, "<p class=\"detail\">{}</p>", escape(&a.detail));
    }
    if !a.facts.is_empty() {
        out.push_str("<dl class=\"figs\">");
        for (k, v) in &a.facts {
            let _ = write!(out, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), escape(v));
        }
        out.push_str("</dl>\n");
    }
    if !a.objectives.is_empty() {
        out.push_str("<ul class=\"objectives\">");
        for (met, text) in &a.objectives {
            let (class, mark) = if *met { ("met", "✓") } else { ("missed", "✗") };
            let _ = write!(out, "<li class=\"{class}\">{mark} {}</li>", escape(text));
        }
        out.push_str("</ul>\n");
    }
    for n in &a.notes {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
    }
    out.push_str("</div>\n");
}

fn table(out: &mut String, t: &Table) {
    out.push_str("<table>\n<thead><tr>");
    for (i, h) in t.head.iter().enumerate() {
        let class = if i >= t.numeric_from { " class=\"num\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        let marked = row.iter().any(|c| c.tone == Tone::Marked);
        out.push_str(if marked { "<tr class=\"marked\">" } else { "<tr>" });
        for (i, c) in row.iter().enumerate() {
            cell(out, c, i >= t.numeric_from);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

fn cell(out: &mut String, c: &Cell, numeric: bool) {
    let mut classes = Vec::new();
    if numeric {
        classes.push("num");
    }
    match c.tone {
        Tone::Good => classes.push("good"),
        Tone::Bad => classes.push("bad"),
        Tone::Plain | Tone::Marked => {}
    }
    if classes.is_empty() {
        let _ = write!(out, "<td>{}</td>", escape(&c.text));
    } else {
        let _ = write!(out, "<td class=\"{}\">{}</td>", classes.join(" "), escape(&c.text));
    }
}

fn figure(out: &mut String, f: &Figure) {
    let _ = writeln!(
        out,
        "<figure id=\"{}\" class=\"plot\" data-points=\"{}\">\n<h4>{}</h4>",
        escape(&f.id),
        f.points,
        escape(&f.title)
    );
    out.push_str(&f.svg);
    if !f.legend.is_empty() {
        out.push_str("<ul class=\"legend\">");
        for l in &f.legend {
            let class = match l.shape {
                Swatch::Solid => "sw",
                Swatch::Dashed => "sw dashed",
                Swatch::Cross => "sw cross",
            };
            let _ = write!(
                out,
                "<li><span class=\"{class}\" style=\"border-color:{c};color:{c}\"></span>{}</li>",
                escape(&l.label),
                c = l.color
            );
        }
        out.push_str("</ul>\n");
    }
    let _ = writeln!(out, "<figcaption>{}</figcaption>\n</figure>", escape(&f.caption));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::after_run::present::doc::Section;

    #[test]
    fn text_is_escaped_and_urls_are_not_links() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        let shown = escape("scrape of http://10.0.0.1:8000/metrics failed");
        assert!(!shown.contains("http://") && shown.contains("10.0.0.1:8000/metrics"), "{shown}");
    }

    #[test]
    fn a_page_has_no_url_and_no_script() {
        let mut s = Section::new("s", "Section");
        s.push(Block::Text("see https://example.com".into()));
        let mut t = Table::new(&["a", "b"], 1);
        t.row(vec![Cell::from("x"), Cell::toned("1", Tone::Bad)]);
        s.push(Block::Table(t));
        let page = render(&Doc { title: "T".into(), subtitle: "S".into(), sections: vec![s] });
        assert!(!page.contains("http://") && !page.contains("https://"), "{page}");
        assert!(!page.contains("<script"));
        assert!(page.contains("<td class=\"num bad\">1</td>"));
        assert!(page.contains("default-src 'none'"));
    }
}
