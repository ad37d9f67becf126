//! The failure classes: every request that did not complete is one of these, and their names
//! are the artifact's (`error_counts`, `failures[].error_kind`) and the scenario's
//! (`client.retry_on`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Stable failure classes; their string forms are part of the artifact contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The TCP/TLS connection could not be opened.
    ConnectFailed,
    ConnectTimeout,
    /// No output (a non-empty reasoning or content delta) within `client.first_byte_timeout`
    /// of sending; headers, comments and chunks without text do not stop this clock.
    FirstByteTimeout,
    /// After the first output, no progress (text, a finish reason, usage or `[DONE]`) for
    /// longer than `client.idle_timeout`.
    IdleTimeout,
    /// The whole request took longer than `client.request_timeout`.
    RequestTimeout,
    /// The server answered with a redirect (3xx); redirects are not followed.
    Redirect,
    /// HTTP 400 saying the prompt does not fit the context window.
    ContextLengthExceeded,
    /// Any other non-2xx status.
    Http(u16),
    /// The connection broke while the response was streaming.
    StreamBroken,
    /// A line of the stream is no SSE field, or one event grew without bound.
    MalformedSse,
    InvalidJson,
    InvalidUtf8,
    /// The server sent an error object inside the stream.
    ServerErrorEvent,
    /// Responses API: `response.failed` (the server gave up on the response).
    ResponseFailed,
    /// Responses API: `response.incomplete` for a reason other than the output budget (a
    /// content filter, say).
    ResponseIncomplete,
    /// The stream ended without its last event (`data: [DONE]`, `response.completed` or
    /// `message_stop`), or a non-streamed answer ended before its JSON did.
    MissingDone,
    /// The stream finished without any reasoning or content text.
    EmptyResponse,
    /// The run was stopped (Ctrl-C) while the request was in flight; not a server error.
    Interrupted,
    /// Any other client-side error while sending.
    RequestFailed,
}

impl ErrorKind {
    /// Every kind but `Http`, whose name carries its status (`http_503`).
    const WITHOUT_STATUS: [ErrorKind; 18] = [
        ErrorKind::ConnectFailed,
        ErrorKind::ConnectTimeout,
        ErrorKind::FirstByteTimeout,
        ErrorKind::IdleTimeout,
        ErrorKind::RequestTimeout,
        ErrorKind::Redirect,
        ErrorKind::ContextLengthExceeded,
        ErrorKind::StreamBroken,
        ErrorKind::MalformedSse,
        ErrorKind::InvalidJson,
        ErrorKind::InvalidUtf8,
        ErrorKind::ServerErrorEvent,
        ErrorKind::ResponseFailed,
        ErrorKind::ResponseIncomplete,
        ErrorKind::MissingDone,
        ErrorKind::EmptyResponse,
        ErrorKind::Interrupted,
        ErrorKind::RequestFailed,
    ];

    /// Interrupted requests are the operator's doing, not the server's.
    pub fn is_server_fault(self) -> bool {
        self != ErrorKind::Interrupted
    }

    /// Its name, but for `Http`, whose name is `http_` and the status.
    fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::FirstByteTimeout => "first_byte_timeout",
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::Redirect => "redirect",
            ErrorKind::ContextLengthExceeded => "context_length_exceeded",
            ErrorKind::Http(_) => "http",
            ErrorKind::StreamBroken => "stream_broken",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::InvalidUtf8 => "invalid_utf8",
            ErrorKind::ServerErrorEvent => "server_error_event",
            ErrorKind::ResponseFailed => "response_failed",
            ErrorKind::ResponseIncomplete => "response_incomplete",
            ErrorKind::MissingDone => "missing_done",
            ErrorKind::EmptyResponse => "empty_response",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::RequestFailed => "request_failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Http(code) => write!(f, "http_{code}"),
            kind => f.write_str(kind.name()),
        }
    }
}

impl std::str::FromStr for ErrorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(code) = s.strip_prefix("http_") {
            return code.parse().map(ErrorKind::Http).map_err(|_| format!("unknown error kind {s:?}"));
        }
        ErrorKind::WITHOUT_STATUS
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| format!("unknown error kind {s:?}"))
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_have_stable_names() {
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
        assert_eq!(serde_json::to_string(&ErrorKind::StreamBroken).unwrap(), "\"stream_broken\"");
        for kind in ErrorKind::WITHOUT_STATUS.into_iter().chain([ErrorKind::Http(429)]) {
            assert_eq!(kind.to_string().parse::<ErrorKind>(), Ok(kind));
        }
        assert!("http_x".parse::<ErrorKind>().is_err() && "nope".parse::<ErrorKind>().is_err());
        assert!("http".parse::<ErrorKind>().is_err());
    }

    #[test]
    fn the_committed_schema_names_every_kind() {
        let schema = crate::contract::tests::committed_schema();
        let pattern = schema.pointer("/$defs/error_kind/pattern").and_then(|v| v.as_str());
        let kinds = crate::contract::tests::alternatives(pattern.expect("the schema's error_kind pattern"));
        let ours: Vec<String> =
            ErrorKind::WITHOUT_STATUS.iter().map(|k| k.to_string()).chain(["http_[0-9]{3}".into()]).collect();
        assert_eq!(kinds, ours);
    }
}
