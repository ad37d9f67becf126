//! The simulator's own "tokenizer": how many prompt tokens a request costs, and the walk over
//! a prompt's pieces that the prefix cache and the per-request seed are built on.
//!
//! The rule is deliberately simple and deliberately *not* the client's estimate: a
//! whitespace-separated piece of `n` bytes counts `ceil(n / 5)` tokens (at least 1), each chat
//! message adds 3 template tokens, the assistant turn adds 3 more, and a completion prompt
//! adds 1 for BOS. Because it differs from whatever the client assumes, a client that
//! calibrates its prompt sizes against the server's reported `prompt_tokens` gets exercised.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

/// Template tokens around every chat message (role header and end-of-turn).
const MESSAGE_OVERHEAD: u32 = 3;
/// Template tokens that open the assistant turn at the end of a chat prompt.
const ASSISTANT_TURN: u32 = 3;
/// The beginning-of-sequence token of a completion prompt.
const BOS: u32 = 1;

/// Tokens in free text: split on Unicode whitespace, each piece `ceil(bytes / 5)`, at least 1.
pub fn count_text_tokens(text: &str) -> u32 {
    text.split_whitespace().fold(0u32, |sum, piece| sum.saturating_add(piece_tokens(piece)))
}

/// Prompt tokens of a request body: a chat body (with `messages`) or a completion body (with
/// `prompt`). `None` when the body has neither or they are ill-typed.
pub fn count_prompt_tokens(body: &Value) -> Option<u32> {
    let prompt = if body.get("messages").is_some() {
        Prompt::from_chat(body).ok()?
    } else {
        Prompt::from_completion(body).ok()?
    };
    Some(prompt.token_count())
}

/// Loads the Hugging Face `tokenizer.json` at `path`. Only a regular file is read: a FIFO named by
/// mistake would block the open (or the first read) forever and a device never ends, so both are
/// refused at once, in words that say what the path is.
pub(crate) fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, tokenizers::Error> {
    tokenizers::Tokenizer::from_bytes(read_regular_file(path)?)
}

/// `std::fs::read` of a regular file only. The open does not wait (it is non-blocking), and the
/// file's type is checked on the opened descriptor, so a path swapped in between changes nothing.
fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Reads of a regular file ignore the flag; the descriptor is dropped after one read.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file = options.open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() { "a directory" } else { not_a_file_in_words(&kind) };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file: give the path of a regular file"),
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(unix)]
fn not_a_file_in_words(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "something other than a file"
    }
}

#[cfg(not(unix))]
fn not_a_file_in_words(_: &std::fs::FileType) -> &'static str {
    "something other than a file"
}

fn piece_tokens(piece: &str) -> u32 {
    u32::try_from(piece.len().div_ceil(5)).unwrap_or(u32::MAX).max(1)
}

/// Which endpoint a prompt came from; decides the template overhead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PromptKind {
    Chat,
    Completion,
}

/// One chat message (or the single completion prompt), borrowing from the request body.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    pub role: &'a str,
    /// Text parts in order; a plain string content is one part.
    pub parts: Vec<&'a str>,
}

/// A validated prompt, borrowing from the parsed request body.
pub(crate) struct Prompt<'a> {
    pub kind: PromptKind,
    pub messages: Vec<Message<'a>>,
    /// Counts words instead of the byte rule when the profile names a tokenizer.
    pub tokenizer: Option<&'a tokenizers::Tokenizer>,
    /// Tokens of the template's default system prompt, added to a chat that brings no system
    /// message of its own (see `Profile::default_system_prompt_tokens`).
    pub default_system_tokens: u32,
}

impl std::fmt::Debug for Prompt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("kind", &self.kind)
            .field("messages", &self.messages)
            .field("tokenizer", &self.tokenizer.is_some())
            .finish()
    }
}

/// One step of [`Prompt::walk`]: template tokens (`header`) or one whitespace-separated word.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step<'a> {
    pub header: bool,
    pub bytes: &'a [u8],
    pub tokens: u32,
}

impl<'a> Prompt<'a> {
    /// Reads `messages` of a chat body. Content may be a string, an array of parts (text parts
    /// count, other part types such as images are skipped), null or absent.
    pub fn from_chat(body: &'a Value) -> Result<Prompt<'a>, String> {
        let Some(messages) = body.get("messages") else {
            return Err("'messages' is required".into());
        };
        let Some(messages) = messages.as_array() else {
            return Err("'messages' must be an array".into());
        };
        if messages.is_empty() {
            return Err("'messages' must not be empty".into());
        }
        let mut out = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            let Some(role) = message.get("role").and_then(Value::as_str) else {
                return Err(format!("messages[{i}].role must be a string"));
            };
            let parts = match message.get("content") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(text)) => vec![text.as_str()],
                Some(Value::Array(items)) => content_parts(i, items)?,
                Some(_) => {
                    return Err(format!("messages[{i}].content must be a string, an array of parts or null"));
                }
            };
            out.push(Message { role, parts });
        }
        Ok(Prompt { kind: PromptKind::Chat, messages: out, tokenizer: None, default_system_tokens: 0 })
    }

    /// Reads `prompt` of a completion body: a string, or an array holding exactly one string
    /// (several prompts would mean several choices, which the simulator does not produce).
    pub fn from_completion(body: &'a Value) -> Result<Prompt<'a>, String> {
        let text = match body.get("prompt") {
            None => return Err("'prompt' is required".into()),
            Some(Value::String(text)) => text.as_str(),
            Some(Value::Array(items)) => match items.as_slice() {
                [Value::String(text)] => text.as_str(),
                _ => return Err("'prompt' must be a string or an array of one string".into()),
            },
            Some(_) => return Err("'prompt' must be a string".into()),
        };
        Ok(Prompt {
            kind: PromptKind::Completion,
            messages: vec![Message { role: "", parts: vec![text] }],
            tokenizer: None,
            default_system_tokens: 0,
        })
    }

    /// Visits the prompt in token order. The sum of `tokens` over all steps is the prompt's
    /// token count, so counting and prefix hashing cannot disagree.
    pub fn walk(&self, mut visit: impl FnMut(Step<'_>)) {
        let header = |bytes: &'a [u8], tokens| Step { header: true, bytes, tokens };
        match self.kind {
            PromptKind::Completion => visit(header(b"", BOS)),
            PromptKind::Chat => {
                if self.default_system_tokens > 0 && self.messages.first().is_none_or(|m| m.role != "system") {
                    visit(header(b"system", MESSAGE_OVERHEAD.saturating_add(self.default_system_tokens)));
                }
            }
        }
        for message in &self.messages {
            if self.kind == PromptKind::Chat {
                visit(header(message.role.as_bytes(), MESSAGE_OVERHEAD));
            }
            for part in &message.parts {
                for word in part.split_whitespace() {
                    visit(Step { header: false, bytes: word.as_bytes(), tokens: self.word_tokens(word) });
                }
            }
        }
        if self.kind == PromptKind::Chat {
            // Shaped like the header of an assistant message, so the next turn of the same
            // conversation (which contains this assistant message) shares this prefix.
            visit(header(b"assistant", ASSISTANT_TURN));
        }
    }

    /// Tokens of one whitespace-separated word, as the walk counts it.
    pub fn word_tokens(&self, word: &str) -> u32 {
        match self.tokenizer {
            // Word by word keeps every step's count additive, so prefix positions and the total
            // agree; for whitespace pre-tokenizers it equals whole-text counting.
            Some(t) => t.encode_fast(word, false).map_or_else(|_| piece_tokens(word), |e| e.len() as u32),
            None => piece_tokens(word),
        }
    }

    /// Total prompt tokens.
    pub fn token_count(&self) -> u32 {
        let mut total = 0u32;
        self.walk(|step| total = total.saturating_add(step.tokens));
        total
    }

    /// The text a canary marker is looked for in: the last user message of a chat, or the
    /// completion prompt.
    pub fn canary_source(&self) -> &[&'a str] {
        let found = match self.kind {
            PromptKind::Completion => self.messages.first(),
            PromptKind::Chat => self.messages.iter().rev().find(|m| m.role == "user"),
        };
        found.map_or(&[], |message| message.parts.as_slice())
    }
}

fn content_parts(index: usize, items: &[Value]) -> Result<Vec<&str>, String> {
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        if !item.is_object() {
            return Err(format!("messages[{index}].content parts must be objects"));
        }
        if item.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        match item.get("text") {
            Some(Value::String(text)) => parts.push(text.as_str()),
            _ => return Err(format!("messages[{index}].content text part needs 'text'")),
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A FIFO, a directory and a device named as the tokenizer are refused at once, saying what
    /// they are; a missing file is "not found".
    #[cfg(unix)]
    #[test]
    fn a_tokenizer_is_read_from_a_regular_file_only() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let fifo = dir.path().join("tokenizer.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        let refused = |path: &Path| load_tokenizer(path).expect_err("refused").to_string();
        assert!(refused(&fifo).contains("it is a FIFO (named pipe), not a regular file"), "{}", refused(&fifo));
        assert!(refused(dir.path()).contains("it is a directory"), "{}", refused(dir.path()));
        assert!(refused(Path::new("/dev/null")).contains("it is a device"), "{}", refused(Path::new("/dev/null")));
        let missing = read_regular_file(&dir.path().join("none")).expect_err("missing");
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn text_rule_examples() {
        assert_eq!(count_text_tokens(""), 0);
        assert_eq!(count_text_tokens("   \n\t "), 0);
        assert_eq!(count_text_tokens("a"), 1);
        assert_eq!(count_text_tokens("hello"), 1);
        assert_eq!(count_text_tokens("hello!"), 2);
        assert_eq!(count_text_tokens("a b c"), 3);
        assert_eq!(count_text_tokens("abcdefghijk"), 3);
        // Non-breaking space (U+00A0) is Unicode whitespace; "é" is two bytes.
        assert_eq!(count_text_tokens("ab\u{a0}cd"), 2);
        assert_eq!(count_text_tokens("ééé"), 2);
    }

    #[test]
    fn chat_counts_template_overhead() {
        let body = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello world"},
                                         {"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "assistant", "content": null},
        ]});
        // (2 + 3) + (2 + 3) + (0 + 3) + 3 for the assistant turn.
        assert_eq!(count_prompt_tokens(&body), Some(16));
    }

    #[test]
    fn a_default_system_prompt_is_replaced_by_the_conversations_own() {
        let user = json!({"messages": [{"role": "user", "content": "hello"}]});
        let system = json!({"messages": [{"role": "system", "content": "be"}, {"role": "user", "content": "hello"}]});
        let count = |body: &Value| {
            let mut prompt = Prompt::from_chat(body).expect("valid");
            prompt.default_system_tokens = 20;
            prompt.token_count()
        };
        // 1 + 3 + 3, plus the default system prompt (20 + 3); the own system message replaces it.
        assert_eq!(count(&user), 30);
        assert_eq!(count(&system), 11);
    }

    #[test]
    fn completion_counts_bos() {
        assert_eq!(count_prompt_tokens(&json!({"prompt": "hello world"})), Some(3));
        assert_eq!(count_prompt_tokens(&json!({"prompt": ["abcdef"]})), Some(3));
        assert_eq!(count_prompt_tokens(&json!({"prompt": ""})), Some(1));
    }

    #[test]
    fn same_text_costs_differently_per_endpoint() {
        let chat = json!({"messages": [{"role": "user", "content": "one two three"}]});
        let completion = json!({"prompt": "one two three"});
        assert_eq!(count_prompt_tokens(&chat), Some(9));
        assert_eq!(count_prompt_tokens(&completion), Some(4));
    }

    #[test]
    fn ill_typed_bodies_are_refused() {
        assert_eq!(count_prompt_tokens(&json!({})), None);
        assert_eq!(count_prompt_tokens(&json!({"messages": "hi"})), None);
        assert_eq!(count_prompt_tokens(&json!({"messages": []})), None);
        assert_eq!(count_prompt_tokens(&json!({"messages": [{"content": "x"}]})), None);
        assert_eq!(count_prompt_tokens(&json!({"messages": [{"role": "user", "content": 5}]})), None);
        assert_eq!(count_prompt_tokens(&json!({"prompt": 5})), None);
        assert_eq!(count_prompt_tokens(&json!({"prompt": ["a", "b"]})), None);
    }

    #[test]
    fn canary_source_is_last_user_message() {
        let body = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "reply"},
        ]});
        let prompt = Prompt::from_chat(&body).expect("valid");
        assert_eq!(prompt.canary_source(), &["second"]);
    }
}
