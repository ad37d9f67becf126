//! The server's prefix cache reset before each level (`load.reset_cache`), at the server's root
//! (not under the API's `/v1`), on every replica: vLLM's `POST /reset_prefix_cache` (a
//! development endpoint, mounted only with `VLLM_SERVER_DEV_MODE=1`), SGLang's
//! `POST /flush_cache`, llama.cpp's `GET /slots` then `POST /slots/{id}?action=erase` for each
//! slot listed. Each replica's answer (status, time taken, slots erased) is recorded in the
//! level's artifact; whether a failed reset stops the run is the caller's decision.

use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

use crate::plan::scenario::CacheReset;
use crate::redact::{Secrets, redact_url};

/// How long one reset call may take.
pub const RESET_TIMEOUT: Duration = Duration::from_secs(60);

/// The reset called before a level, as the artifact's `cache_reset` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheResetRecord {
    /// `vllm`, `sglang` or `llamacpp`.
    pub engine: String,
    /// Every replica answered with success.
    pub ok: bool,
    /// From the first call to the last answer, every replica one after the other.
    pub elapsed_ms: f64,
    pub replicas: Vec<ReplicaReset>,
}

/// One replica's answer to the reset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaReset {
    pub index: u32,
    /// The endpoint called, without credentials (llama.cpp: the slot list's URL).
    pub url: String,
    /// The HTTP status of the (last) reset call; null when no answer came.
    pub status: Option<u16>,
    pub elapsed_ms: f64,
    /// llama.cpp: how many slots were erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_erased: Option<u32>,
    /// Why it failed, when it did (one line, no secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CacheResetRecord {
    /// The first failure, as one line naming the replica, the endpoint and the fix.
    pub fn failure(&self) -> Option<String> {
        let r = self.replicas.iter().find(|r| r.error.is_some())?;
        let fix = match self.engine.as_str() {
            "vllm" => "start vLLM with VLLM_SERVER_DEV_MODE=1 (the endpoint is a development one)",
            "sglang" => "check that the server is SGLang (its /flush_cache answers only when no request is running)",
            _ => {
                "start llama-server with --slot-save-path DIR (slot actions need it), without --no-slots, and with --cache-ram 0 (its host prompt cache survives an erase)"
            }
        };
        Some(format!(
            "the cache reset (load.reset_cache = \"{}\") failed on replica {} ({}): {}; {fix}, or set load.reset_cache = \"none\"",
            self.engine,
            r.index,
            r.url,
            r.error.as_deref().unwrap_or_default()
        ))
    }
}

/// The server root of a base URL: `scheme://host:port/`, its path, query and fragment dropped.
pub fn server_root(base_url: &str) -> Result<reqwest::Url, String> {
    let mut url = reqwest::Url::parse(base_url).map_err(|e| format!("cannot derive the server root ({e})"))?;
    url.set_path("/");
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// Reset the cache of every server in `base_urls` (each replica's API root), one after the other.
pub async fn reset(
    kind: CacheReset,
    base_urls: &[String],
    http: &reqwest::Client,
    headers: &HeaderMap,
    secrets: &Secrets,
) -> Option<CacheResetRecord> {
    if kind.is_none() {
        return None;
    }
    let start = Instant::now();
    let mut replicas = Vec::with_capacity(base_urls.len());
    for (i, base) in base_urls.iter().enumerate() {
        let t = Instant::now();
        let mut row = ReplicaReset {
            index: i as u32,
            url: String::new(),
            status: None,
            elapsed_ms: 0.0,
            slots_erased: None,
            error: None,
        };
        match server_root(base) {
            Err(e) => row.error = Some(e),
            Ok(root) => one(kind, &root, http, headers, secrets, &mut row).await,
        }
        row.elapsed_ms = t.elapsed().as_secs_f64() * 1000.0;
        replicas.push(row);
    }
    Some(CacheResetRecord {
        engine: kind.name().to_string(),
        ok: replicas.iter().all(|r| r.error.is_none()),
        elapsed_ms: start.elapsed().as_secs_f64() * 1000.0,
        replicas,
    })
}

/// One replica's reset, its answer written into `row`.
async fn one(
    kind: CacheReset,
    root: &reqwest::Url,
    http: &reqwest::Client,
    headers: &HeaderMap,
    secrets: &Secrets,
    row: &mut ReplicaReset,
) {
    let join = |path: &str| root.join(path).map(|u| u.to_string()).map_err(|e| e.to_string());
    let path = match kind {
        CacheReset::Vllm => "reset_prefix_cache",
        CacheReset::Sglang => "flush_cache",
        CacheReset::Llamacpp => "slots",
        CacheReset::None => return,
    };
    let url = match join(path) {
        Ok(u) => u,
        Err(e) => {
            row.error = Some(e);
            return;
        }
    };
    row.url = redact_url(&url);
    if kind != CacheReset::Llamacpp {
        match call(http.post(&url), headers, secrets).await {
            Ok((status, _)) => {
                row.status = Some(status);
                if !(200..300).contains(&status) {
                    row.error = Some(format!("POST {} answered {status}", row.url));
                }
            }
            Err(e) => row.error = Some(format!("POST {}: {e}", row.url)),
        }
        return;
    }
    // llama.cpp: every slot the server lists, erased one by one.
    let ids = match call(http.get(&url), headers, secrets).await {
        Ok((status, body)) if (200..300).contains(&status) => slot_ids(&body),
        Ok((status, _)) => {
            row.status = Some(status);
            row.error = Some(format!("GET {} answered {status}", row.url));
            return;
        }
        Err(e) => {
            row.error = Some(format!("GET {}: {e}", row.url));
            return;
        }
    };
    let Some(ids) = ids else {
        row.error = Some(format!("GET {} did not answer a list of slots with their ids", row.url));
        return;
    };
    let mut erased = 0;
    for id in ids {
        let erase = match join(&format!("slots/{id}?action=erase")) {
            Ok(u) => u,
            Err(e) => {
                row.error = Some(e);
                break;
            }
        };
        match call(http.post(&erase), headers, secrets).await {
            Ok((status, _)) => {
                row.status = Some(status);
                if !(200..300).contains(&status) {
                    row.error = Some(format!("POST {} answered {status}", redact_url(&erase)));
                    break;
                }
                erased += 1;
            }
            Err(e) => {
                row.error = Some(format!("POST {}: {e}", redact_url(&erase)));
                break;
            }
        }
    }
    row.slots_erased = Some(erased);
}

/// The ids of `GET /slots`'s answer (a list of objects with an `id`); `None` for anything else.
fn slot_ids(body: &[u8]) -> Option<Vec<u64>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.as_array()?.iter().map(|s| s.get("id")?.as_u64()).collect()
}

/// One call: its status and (bounded) body, or why none came (one line, no secret).
async fn call(req: reqwest::RequestBuilder, headers: &HeaderMap, secrets: &Secrets) -> Result<(u16, Vec<u8>), String> {
    let sent = tokio::time::timeout(RESET_TIMEOUT, req.headers(headers.clone()).send()).await;
    let resp = match sent {
        Err(_) => return Err(format!("no answer within {} s", RESET_TIMEOUT.as_secs())),
        Ok(Err(e)) => return Err(secrets.message(&e.without_url().to_string())),
        Ok(Ok(r)) => r,
    };
    let status = resp.status().as_u16();
    let body = match tokio::time::timeout(RESET_TIMEOUT, resp.bytes()).await {
        Ok(Ok(b)) => b.get(..b.len().min(1 << 20)).unwrap_or_default().to_vec(),
        _ => Vec::new(),
    };
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_drops_the_api_path_and_query() {
        let root = server_root("http://u:p@h:8000/v1?api-version=1").unwrap();
        assert_eq!(root.join("flush_cache").unwrap().as_str(), "http://u:p@h:8000/flush_cache");
    }

    #[test]
    fn slot_ids_are_read_from_the_list() {
        assert_eq!(slot_ids(br#"[{"id":0,"n_ctx":512},{"id":1}]"#), Some(vec![0, 1]));
        assert_eq!(slot_ids(br#"{"error":"x"}"#), None);
    }
}
