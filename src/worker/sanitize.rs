//! Server and library messages made safe to store: one line, bounded, and withheld when they
//! quote the prompt or carry the API key.

/// Longest failure message kept.
const MESSAGE_CHARS: usize = 200;

/// Make a server or library message safe to store: one line, bounded, and withheld entirely if it
/// quotes the prompt (servers echo input in validation errors) or contains the API key.
pub fn sanitize_message(message: &str, secret: Option<&str>) -> String {
    if secret.is_some_and(|s| !s.is_empty() && message.contains(s)) {
        return "[message withheld: it contained the API key]".to_string();
    }
    if quotes_prompt(message) {
        return "[message withheld: it quoted the prompt]".to_string();
    }
    let mut out: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).take(MESSAGE_CHARS).collect();
    if message.chars().count() > MESSAGE_CHARS {
        out.push('…');
    }
    out
}

/// Synthetic prompts are runs of dictionary words and carry `ANVIL_REQ_` instructions; a message
/// holding the instruction text or six dictionary words in a row is quoting one.
fn quotes_prompt(message: &str) -> bool {
    if message.contains("reference text") || message.contains("Task: ") {
        return true;
    }
    let mut run = 0;
    for word in message.split_whitespace() {
        if crate::workload::is_filler_word(word) {
            run += 1;
            if run >= 6 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_bounded_and_never_quote_prompts_or_keys() {
        let long = "x".repeat(500);
        assert_eq!(sanitize_message(&long, None).chars().count(), MESSAGE_CHARS + 1);
        assert_eq!(sanitize_message("a\nb", None), "a b");
        assert!(sanitize_message("bad token sk-123 in header", Some("sk-123")).contains("withheld"));
        assert!(sanitize_message("invalid input: the river of the city was north", None).contains("withheld"));
        assert_eq!(
            sanitize_message("maximum context length is 4096 tokens", None),
            "maximum context length is 4096 tokens"
        );
    }
}
