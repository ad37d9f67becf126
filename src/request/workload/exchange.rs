//! What a conversation turn exchanges with the worker beyond a plain request: headers to send
//! (session affinity), response headers to read back (an echoed session token, the backend that
//! served it), and the whole answer, which becomes part of the conversation's history.

use std::sync::Mutex;

/// Shared between the turn's builder and the worker that sends it.
#[derive(Debug, Default)]
pub struct Exchange {
    /// Request headers, as (name, value).
    pub headers: Vec<(String, String)>,
    /// Response headers to read back (lower-case names).
    pub read_headers: Vec<String>,
    /// Keep the visible answer and the reasoning text, whole.
    pub keep_answer: bool,
    reply: Mutex<Reply>,
}

/// What came back, for the conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub content: String,
    pub reasoning: String,
    /// The `read_headers` the response carried, as (name, value).
    pub headers: Vec<(String, String)>,
    /// The tool calls the answer made (agent sessions).
    pub calls: Vec<CalledTool>,
}

/// One tool call as the model made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalledTool {
    /// The server's id of the call (empty when it gave none).
    pub id: String,
    pub name: String,
    /// The arguments' JSON text as streamed.
    pub arguments: String,
}

impl Exchange {
    pub fn new(headers: Vec<(String, String)>, read_headers: Vec<String>, keep_answer: bool) -> Self {
        Exchange { headers, read_headers, keep_answer, reply: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reply> {
        // A panic elsewhere cannot leave a half-written reply that matters: the turn failed.
        self.reply.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn set_headers(&self, headers: Vec<(String, String)>) {
        self.lock().headers = headers;
    }

    pub fn set_answer(&self, content: String, reasoning: String) {
        let mut reply = self.lock();
        reply.content = content;
        reply.reasoning = reasoning;
    }

    pub fn set_calls(&self, calls: Vec<CalledTool>) {
        self.lock().calls = calls;
    }

    /// The reply, leaving an empty one behind.
    pub fn take_reply(&self) -> Reply {
        std::mem::take(&mut *self.lock())
    }
}
