//! The headers a run adds to every request beyond the API's own: `target.headers`, and with the
//! azure dialect the key as `api-key` (instead of a bearer token). Every value is marked
//! sensitive, so the HTTP stack never shows it; the same list goes on the measured requests, the
//! probes and warm-up (through `Client`), the server check and the server-metrics scrape
//! (through reqwest, as a `HeaderMap`).

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::ClientError;
use crate::plan::scenario::{Dialect, Target};

/// The run's extra headers, in the order given (the azure key first).
pub fn run_headers(target: &Target) -> Result<Vec<(HeaderName, HeaderValue)>, ClientError> {
    let mut out = Vec::new();
    if target.dialect == Dialect::Azure {
        if let Some(key) = &target.api_key {
            out.push((HeaderName::from_static("api-key"), sensitive(key.expose(), "target.api_key_env")?));
        }
    }
    for (name, value) in target.headers.iter() {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| ClientError::Header { key: "target.headers" })?;
        out.push((name, sensitive(value, "target.headers")?));
    }
    Ok(out)
}

/// The same headers for reqwest.
pub fn header_map(headers: &[(HeaderName, HeaderValue)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(name.clone(), value.clone());
    }
    map
}

/// Whether the bearer token goes in `Authorization` (every dialect but azure, which sends `api-key`).
pub fn sends_bearer(target: &Target) -> bool {
    target.dialect != Dialect::Azure
}

fn sensitive(value: &str, key: &'static str) -> Result<HeaderValue, ClientError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| ClientError::Header { key })?;
    v.set_sensitive(true);
    Ok(v)
}
