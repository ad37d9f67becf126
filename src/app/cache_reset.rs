//! The cache reset before each level (`load.reset_cache`): called on every replica after the
//! previous level drained and before this one's connections, warm-up and clock; its answer goes
//! into the level's artifact. A failed reset stops the run (exit 1) before the level sends
//! anything: a level meant to start cold that starts warm would be measured as something else.

use super::AppError;
use super::level::Session;
use crate::request::cache_reset::{self, CacheResetRecord};
use crate::request::worker::{header_map, http_client, run_headers};

impl Session<'_> {
    /// Reset every replica's cache, when the scenario asks; the answer, or the error that stops
    /// the run.
    pub(super) async fn reset_cache(&self) -> Result<Option<CacheResetRecord>, AppError> {
        let s = self.scenario;
        if s.load.reset_cache.is_none() {
            return Ok(None);
        }
        let urls: Vec<String> = match &s.target.replicas {
            Some(r) => r.base_urls.clone(),
            None => vec![self.target.base_url.clone()],
        };
        let http =
            http_client(&s.client, 0).map_err(|e| AppError::Aborted(format!("cannot build the HTTP client: {e}")))?;
        let mut headers = header_map(&run_headers(&s.target).map_err(|e| AppError::BadInput(e.to_string()))?);
        self.client.credentials().apply(&mut headers);
        let record = cache_reset::reset(s.load.reset_cache, &urls, &http, &headers, &s.secrets()).await;
        if let Some(failure) = record.as_ref().and_then(CacheResetRecord::failure) {
            return Err(AppError::Aborted(failure));
        }
        Ok(record)
    }
}
