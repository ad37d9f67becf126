//! Every string a report or a comparison prints comes from files anyone can write (a model name,
//! an engine label, a run id, a warning, a path), so it is escaped for where it goes, by one
//! function per format:
//!
//! - [`markdown`]: text inside one line of GitHub-flavoured Markdown. Nothing in it can end the
//!   line, start a block (heading, list, quote, table row, fence, HTML) or inline markup
//!   (emphasis, code, link, image, strikethrough, math, entity), or turn into a link, an emoji
//!   or a mention — wherever on the line it lands, table cells included.
//! - [`markdown_code`]: the same inside a code span.
//! - [`html`]: text for HTML content and quoted attributes.
//! - [`terminal`]: plain text for a terminal or a log.
//!
//! All of them first make [`visible`] what would be invisible or move text around: line and
//! paragraph breaks of every kind, other control characters (ANSI escapes included) and bidi
//! controls become escapes such as `\n` or `\u{202e}`, so a reader sees that they were there.

use std::fmt::Write as _;

/// Word joiner: invisible, and breaks what a renderer would otherwise recognise (`://`, `www.`,
/// `:emoji:`, `@mention`, an e-mail address; checked against cmark-gfm, GitHub's renderer).
const JOIN: char = '\u{2060}';

/// Characters that would break a line, hide text or reorder it when shown.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{feff}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// The text with every hidden character (see `hidden`) written as an escape (`\n`, `\r`, `\t`, `\u{…}`).
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
        }
    }
    out
}

/// Plain text for a terminal or a log: one line, nothing hidden, no escape sequence.
pub fn terminal(text: &str) -> String {
    visible(text)
}

/// Text for HTML content and attributes: markup escaped, nothing hidden, URLs not links.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in visible(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out.replace("://", ":/\u{2060}/")
}

/// Characters that are markup anywhere on a line, escaped with a backslash (CommonMark allows it
/// before any ASCII punctuation, and GitHub shows the character).
/// `#` too: at the end of a heading it would be read as the heading's closing sequence.
fn inline_markup(c: char) -> bool {
    matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '$' | '!' | '#')
}

/// Characters that start a block when they open a line (after up to three spaces): headings,
/// list items, quotes, setext underlines, thematic breaks, table rows, definition-like lines.
fn block_start(c: char) -> bool {
    matches!(c, '#' | '-' | '+' | '=' | '>' | ':' | '|' | '*' | '_' | '`' | '~' | '<')
}

/// Text inside one line of GitHub-flavoured Markdown: see the module documentation.
pub fn markdown(text: &str) -> String {
    let shown = visible(text);
    let chars: Vec<char> = shown.chars().collect();
    let mut out = String::with_capacity(shown.len() + 8);
    // Leading spaces would indent (four make a code block): no-break spaces do not.
    let lead = chars.iter().take_while(|&&c| c == ' ').count();
    out.extend(std::iter::repeat_n('\u{a0}', lead));
    // An ordered-list marker (`1.` or `1)`) at the start: escape its punctuation.
    let digits = chars[lead..].iter().take_while(|c| c.is_ascii_digit()).count();
    let ordered = digits > 0
        && matches!(chars.get(lead + digits), Some('.' | ')'))
        && chars.get(lead + digits + 1).is_none_or(|c| c.is_whitespace());
    for (i, &c) in chars.iter().enumerate().skip(lead) {
        let next = chars.get(i + 1).copied();
        if inline_markup(c) || (i == lead && block_start(c)) || (ordered && i == lead + digits) {
            out.push('\\');
        }
        out.push(c);
        match c {
            // `http://…` and `www.…` would be linked; `:smile:` an emoji; `@name` a mention.
            ':' if next == Some('/') || next.is_some_and(|n| n.is_alphanumeric() || n == '_' || n == '+') => {
                out.push(JOIN)
            }
            '@' if next.is_some_and(|n| n.is_alphanumeric() || n == '_' || n == '-') => out.push(JOIN),
            // Inside `www`: after it, cmark-gfm still takes the joiner as part of the domain.
            'w' | 'W'
                if chars.get(i..i + 4).is_some_and(|w| w.iter().collect::<String>().eq_ignore_ascii_case("www.")) =>
            {
                out.push(JOIN)
            }
            _ => {}
        }
    }
    out
}

/// Text inside a Markdown code span (`` `…` ``): shown literally, so only the way out of the span
/// (a backtick) and what would end the line are changed.
pub fn markdown_code(text: &str) -> String {
    visible(text).replace('`', "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_ends_a_line_or_hides() {
        for s in ["a\nb", "a\r\nb", "a\rb", "a\u{2028}b", "a\u{2029}b", "a\u{85}b", "a\u{0b}b", "a\u{0c}b"] {
            for escaped in [markdown(s), html(s), terminal(s), markdown_code(s)] {
                assert_eq!(escaped.lines().count(), 1, "{s:?} → {escaped:?}");
                assert!(!escaped.chars().any(hidden), "{s:?} → {escaped:?}");
            }
        }
        assert_eq!(visible("m\n# x\u{202e}\u{1b}[2J"), "m\\n# x\\u{202e}\\u{001b}[2J");
    }

    #[test]
    fn markdown_text_starts_no_block_and_no_markup() {
        assert_eq!(markdown("# Regression: none"), "\\# Regression: none");
        assert_eq!(markdown("- [x] approved"), "\\- \\[x\\] approved");
        assert_eq!(markdown("12. item"), "12\\. item");
        assert_eq!(markdown("    code"), "\u{a0}\u{a0}\u{a0}\u{a0}code");
        assert_eq!(markdown("a | b"), "a \\| b");
        assert_eq!(
            markdown("**bold** `x` <b> ~~s~~ $x$ &amp;"),
            "\\*\\*bold\\*\\* \\`x\\` \\<b\\> \\~\\~s\\~\\~ \\$x\\$ \\&amp;"
        );
        assert_eq!(markdown("---"), "\\---");
        // Mid-line, the characters that only start blocks are left alone.
        assert_eq!(markdown("anvil-sim 0.5 = 3 - 1 + 1"), "anvil-sim 0.5 = 3 - 1 + 1");
        assert_eq!(markdown("run #3 #"), "run \\#3 \\#");
        // No link, emoji or mention.
        assert_eq!(markdown("http://x"), "http:\u{2060}//x");
        assert_eq!(markdown("www.x"), "w\u{2060}ww.x");
        assert_eq!(markdown(":white_check_mark:"), "\\:\u{2060}white\\_check\\_mark:");
        assert_eq!(markdown("1.5 ms"), "1.5 ms");
        assert_eq!(markdown("ok :tada: @team"), "ok :\u{2060}tada: @\u{2060}team");
    }

    #[test]
    fn html_escapes_markup_and_defangs_urls() {
        assert_eq!(html("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(html("see http://h/\n<p>"), "see http:/\u{2060}/h/\\n&lt;p&gt;");
    }
}
