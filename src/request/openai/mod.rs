//! The wire formats, client side: request bodies, SSE framing, stream events of each API.
//!
//! Parsing borrows from the read buffer and reads only the fields the timing needs, so a chunk
//! costs no allocation unless its text contains JSON escapes. Chat and completions chunks of the
//! common shape are read by a validating scanner (`scan`), or, when they repeat the stream's last
//! text chunk with other text, by comparing (`shape`); everything else by serde. `tools` spells the
//! tool set in each API's words; a streamed tool call arrives as `ToolPiece`s.

mod chunk;
pub mod media;
mod messages;
mod pooling;
mod request;
mod responses;
mod scan;
mod shape;
mod sse;
mod tools;

pub use chunk::{ChunkError, Delta, StreamEvent, ToolPiece, Usage, parse_error_body};
pub use pooling::{PoolingAnswer, parse_answer};
pub use request::{PromptBody, RequestParams, probe_body, request_body};
pub use shape::ChunkShape;
pub use sse::{SseDecoder, SseError};
pub use tools::tool_fields;

use crate::plan::scenario::Api;

/// Interpret one SSE data payload of a chat or completions stream.
pub fn parse_event(data: &[u8]) -> Result<StreamEvent<'_>, ChunkError> {
    chunk::parse_event(data)
}

/// Interpret one SSE data payload of `api`'s stream; `shape` is the stream's last text chunk,
/// kept by the caller from one payload to the next (see `shape`).
pub fn parse_event_of<'a>(api: Api, data: &'a [u8], shape: &mut ChunkShape) -> Result<StreamEvent<'a>, ChunkError> {
    match api {
        Api::Responses => responses::parse_event(data),
        Api::Messages => messages::parse_event(data),
        // Embeddings and rerank do not stream; chat and completions share one format.
        Api::Chat | Api::Completions | Api::Embeddings | Api::Rerank => chunk::parse_event_shaped(data, shape),
    }
}
