//! `target.unix_socket`: requests sent through a Unix domain socket (vLLM's `--uds`, a sidecar's
//! socket) instead of a TCP connection to the base URL's host, as `curl --unix-socket` does. The
//! base URL still gives the scheme, the `Host` header and the path.

use std::path::PathBuf;

use super::checker::Checker;
use super::{Endpoint, ScenarioError};

/// The validated socket path; `None` when the key is absent.
pub(super) fn unix_socket(
    c: &Checker,
    raw: Option<&str>,
    endpoint: &Endpoint,
) -> Result<Option<PathBuf>, ScenarioError> {
    let key = "target.unix_socket";
    let Some(text) = raw else { return Ok(None) };
    if text.trim().is_empty() {
        return Err(c.err(
            key,
            "is empty",
            "give the socket's path, e.g. unix_socket = \"/run/vllm.sock\", or remove the key",
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(c.err(key, "holds a control character", "give the socket's path as it is on disk"));
    }
    match endpoint {
        Endpoint::Simulator { .. } => Err(c.err(
            key,
            "is set but no base_url is given",
            "add base_url = \"http://localhost/v1\" (the host names the server in the Host header; the socket is what is connected to)",
        )),
        Endpoint::Remote { base_url } if !base_url.starts_with("http://") => Err(c.err(
            key,
            "needs an http:// base_url: TLS over a Unix socket is not supported",
            "use base_url = \"http://localhost/v1\" with the socket",
        )),
        Endpoint::Remote { .. } => Ok(Some(c.path(key, text))),
    }
}
