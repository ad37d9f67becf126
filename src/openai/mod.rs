//! The OpenAI-compatible wire format, client side: request bodies, SSE framing, stream chunks.
//!
//! Parsing borrows from the read buffer and reads only the fields the timing needs, so a chunk
//! costs no allocation unless its text contains JSON escapes.

mod chunk;
mod request;
mod sse;

pub use chunk::{ChunkError, Delta, StreamEvent, Usage, parse_error_body, parse_event};
pub use request::{PromptBody, RequestParams, probe_body, request_body};
pub use sse::{SseDecoder, SseError};
