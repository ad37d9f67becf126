//! Calibration probes: one non-streamed request whose answer's `usage.prompt_tokens` is all
//! that is wanted. Some servers answer `stream: false` with an event stream anyway; the usage is
//! then read from the stream. When no count can be found, the error says what arrived instead.

use bytes::Bytes;
use futures::StreamExt;
use http::header::CONTENT_TYPE;
use tokio::time::{Instant, timeout_at};

use super::errors::{error_chain, is_stale_connection, redirect_message};
use super::{Client, Clock, StreamState, deadline, transport};
use crate::request::openai::parse_error_body;

/// A probe's answer is read up to this size: a count is a few hundred bytes.
const PROBE_BODY_LIMIT: usize = 1024 * 1024;

impl Client {
    /// Send a non-streamed calibration probe; the server's `usage.prompt_tokens`, or why not.
    /// Refused with 401 while the key comes from a command: sent once more with a fresh token.
    pub async fn probe(&self, body: Bytes) -> Result<u64, String> {
        let token = self.auth.generation();
        match self.probe_once(body.clone()).await {
            Err(e) if e.starts_with("HTTP 401") && self.auth.refresh_after_401(token).await => {
                self.probe_once(body).await
            }
            answer => answer,
        }
    }

    async fn probe_once(&self, body: Bytes) -> Result<u64, String> {
        let start = Instant::now();
        let (due, clock) = self.earliest(start, deadline(start, self.timeouts.first_byte), Clock::FirstOutput);
        let mut stale = false;
        let response = loop {
            let http = if stale { self.fresh() } else { &self.http };
            match timeout_at(due, http.send(self.post(body.clone()))).await {
                Err(_) => {
                    return Err(match clock {
                        Clock::Request => "no answer within client.request_timeout".to_string(),
                        _ => "no answer within client.first_byte_timeout".to_string(),
                    });
                }
                Ok(Ok(r)) => break r,
                Ok(Err(e)) if !stale && is_stale_connection(&e) => stale = true,
                Ok(Err(e)) => return Err(self.secrets.message(&error_chain(&e))),
            }
        };
        let status = response.status();
        if status.is_redirection() {
            return Err(self.secrets.message(&redirect_message(status.as_u16(), response.headers())));
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| self.secrets.field(&String::from_utf8_lossy(v.as_bytes())))
            .unwrap_or_else(|| "no content type".to_string());
        let until = deadline(Instant::now(), self.timeouts.idle).min(deadline(start, self.timeouts.request));
        let mut answer = Answer::default();
        let mut stream = transport::body(response);
        loop {
            match timeout_at(until, stream.next()).await {
                Err(_) => {
                    answer.stalled = true;
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(self.secrets.message(&error_chain(&e))),
                Ok(Some(Ok(bytes))) => {
                    if answer.read(&bytes, &content_type, start.elapsed()) {
                        break;
                    }
                }
            }
        }
        if !status.is_success() {
            let (_, message) = parse_error_body(&answer.body);
            return Err(self.secrets.message(&format!("HTTP {}: {}", status.as_u16(), message.unwrap_or_default())));
        }
        if let Some(tokens) = answer.prompt_tokens() {
            return Ok(tokens);
        }
        if answer.stalled && answer.total_bytes == 0 {
            return Err("the answer stalled beyond client.idle_timeout".to_string());
        }
        Err(self.secrets.message(&answer.describe(&content_type, &self.secrets)))
    }
}

/// What a probe's answer held, read incrementally.
#[derive(Default)]
struct Answer {
    /// The first `PROBE_BODY_LIMIT` bytes.
    body: Vec<u8>,
    total_bytes: u64,
    /// Decided on the first bytes: an event stream (by content type or by its first line).
    sse: Option<StreamState>,
    sse_fault: Option<String>,
    stalled: bool,
}

impl Answer {
    /// One read; true when nothing more is needed.
    fn read(&mut self, bytes: &[u8], content_type: &str, at: std::time::Duration) -> bool {
        if self.total_bytes == 0 && !bytes.is_empty() && looks_like_sse(content_type, bytes) {
            self.sse = Some(StreamState::new(false));
        }
        self.total_bytes += bytes.len() as u64;
        let room = PROBE_BODY_LIMIT - self.body.len();
        self.body.extend_from_slice(&bytes[..bytes.len().min(room)]);
        match &mut self.sse {
            Some(state) if self.sse_fault.is_none() => {
                if let Err(fault) = state.observe(bytes, at) {
                    self.sse_fault = Some(format!("{}: {}", fault.kind, fault.message));
                }
                state.done.is_some() || self.sse_fault.is_some()
            }
            _ => self.body.len() >= PROBE_BODY_LIMIT,
        }
    }

    fn prompt_tokens(&mut self) -> Option<u64> {
        match &mut self.sse {
            Some(state) => {
                if self.sse_fault.is_none() && !self.stalled {
                    let _ = state.finish(std::time::Duration::ZERO);
                }
                state.usage.prompt_tokens
            }
            None => serde_json::from_slice::<serde_json::Value>(&self.body)
                .ok()
                .and_then(|v| v.get("usage")?.get("prompt_tokens")?.as_u64()),
        }
    }

    /// What arrived instead of a count, in a few words.
    fn describe(&self, content_type: &str, secrets: &crate::redact::Secrets) -> String {
        let n = self.total_bytes;
        let what = match (&self.sse, serde_json::from_slice::<serde_json::Value>(&self.body)) {
            (Some(state), _) => {
                let ending = if let Some(fault) = &self.sse_fault {
                    format!("broken ({})", secrets.field(fault))
                } else if state.done.is_some() {
                    "ended with [DONE]".to_string()
                } else if self.stalled {
                    "stalled".to_string()
                } else {
                    "ended without [DONE]".to_string()
                };
                format!(
                    "an event stream ({content_type}, {n} bytes, {ending}) without usage, although the probe asked for stream: false"
                )
            }
            (None, Ok(serde_json::Value::Object(map))) => {
                let keys: Vec<&str> = map.keys().map(String::as_str).take(8).collect();
                format!(
                    "JSON ({content_type}, {n} bytes) without usage.prompt_tokens; its keys: {}",
                    secrets.field(&keys.join(", "))
                )
            }
            (None, _) => {
                let head = String::from_utf8_lossy(&self.body[..self.body.len().min(48)]).into_owned();
                format!(
                    "{n} bytes of {content_type} that are neither JSON nor an event stream, starting {:?}",
                    secrets.field(&head)
                )
            }
        };
        format!("the answer carried no usage.prompt_tokens: {what}")
    }
}

/// An event stream: said by the content type, or by a first line that is an SSE field.
fn looks_like_sse(content_type: &str, first: &[u8]) -> bool {
    if content_type.to_ascii_lowercase().starts_with("text/event-stream") {
        return true;
    }
    let first = first.trim_ascii_start();
    first.starts_with(b"data:") || first.starts_with(b"event:") || first.starts_with(b":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(content_type: &str, reads: &[&[u8]]) -> Answer {
        let mut a = Answer::default();
        for r in reads {
            if a.read(r, content_type, Duration::ZERO) {
                break;
            }
        }
        a
    }

    #[test]
    fn a_streamed_answer_to_a_probe_counts() {
        let mut a = answer(
            "text/event-stream",
            &[
                b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
                b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
            ],
        );
        assert_eq!(a.prompt_tokens(), Some(812));
        // Even without the content type, and whatever follows [DONE].
        let mut a = answer(
            "application/json",
            &[b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9}}\n\ndata: [DONE]\n\njunk"],
        );
        assert_eq!(a.prompt_tokens(), Some(9));
        let mut a = answer("application/json", &[b"{\"usage\":{\"prompt_tokens\":", b"33}}"]);
        assert_eq!(a.prompt_tokens(), Some(33));
    }

    #[test]
    fn a_failed_probe_says_what_arrived() {
        let secrets = crate::redact::Secrets::default();
        let mut a = answer(
            "text/event-stream",
            &[b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"],
        );
        assert_eq!(a.prompt_tokens(), None);
        let d = a.describe("text/event-stream", &secrets);
        assert!(d.contains("an event stream") && d.contains("ended with [DONE]") && d.contains("stream: false"), "{d}");
        let a = answer("application/json", &[b"{\"id\":\"x\",\"choices\":[]}"]);
        let d = a.describe("application/json", &secrets);
        assert!(d.contains("keys: choices, id"), "{d}");
        let a = answer("text/html", &[b"<html>proxy error</html>"]);
        let d = a.describe("text/html", &secrets);
        assert!(d.contains("neither JSON nor an event stream") && d.contains("<html>"), "{d}");
    }
}
