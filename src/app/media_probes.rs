//! `[workload.media]`: one calibration probe per image size and audio length. Each is plain
//! probe 0 with one item of the bucket; the server's count less probe 0's is what one item adds
//! (`prompt_sizing.media_tokens`), counted into each request's prompt target.

use tokio_util::sync::CancellationToken;

use crate::request::record::{MediaProbe, SizingRecord};
use crate::request::worker::Client;
use crate::request::workload::Workload;

/// The media probes, after the plain ones (`record.probes[0]` is the base). `Some(None)` without
/// media or without a base count; `None` when `stop` fired.
pub(super) async fn probe(
    workload: &Workload,
    record: &SizingRecord,
    first_words: usize,
    client: &Client,
    stop: &CancellationToken,
) -> Option<Option<Vec<MediaProbe>>> {
    let buckets = workload.media_buckets();
    if buckets.is_empty() {
        return Some(None);
    }
    let base = record.probes.first().and_then(|p| p.server_prompt_tokens);
    eprintln!("sizing media: {} probe requests, one per image size and audio length", buckets.len());
    let mut out = Vec::with_capacity(buckets.len());
    for (i, (modality, bucket)) in buckets.into_iter().enumerate() {
        let Some(body) = workload.media_probe(0, first_words, i) else { continue };
        let result = super::setup::probe_unless_stopped(client, body, stop).await?;
        let (tokens, error) = match (result, base) {
            (Ok(served), Some(base)) => (Some(served.saturating_sub(base)), None),
            (Ok(_), None) => (None, Some("the plain probe reported no prompt tokens to compare with".to_string())),
            (Err(e), _) => (None, Some(e)),
        };
        out.push(MediaProbe { modality: modality.to_string(), bucket, tokens, error });
    }
    Some(Some(out))
}
