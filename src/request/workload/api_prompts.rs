//! Prompts of the APIs that take something other than one text: embeddings batches, rerank
//! queries with their documents, and completions prompts sent as token ids.
//!
//! Each input is built like any drawn prompt (a unique header, then filler) and sized to the
//! request's planned context, so a batch of `n` inputs asks the server to read `n` planned
//! contexts; the prediction for the whole request (`prompt_target_tokens`) is their sum.

use super::{Workload, openai};
use crate::plan::scenario::Api;
use crate::request::openai::PromptBody;

impl Workload {
    /// Embeddings: `batch` inputs; rerank: a query and `batch` documents. Returns the body and
    /// the predicted prompt tokens of the whole request.
    pub(super) fn batch_request(&self, index: u64, planned: u32, batch: u32) -> (Vec<u8>, u32) {
        let mut target = 0u32;
        let mut texts = Vec::with_capacity(batch as usize);
        for k in 0..u64::from(batch) {
            // A tag per input, unique across requests, so no two inputs share a cache prefix.
            let tag = index.saturating_mul(u64::from(batch)).saturating_add(k);
            let (text, tokens) = self.synthetic(tag, planned, &self.header(tag), "");
            target = target.saturating_add(tokens);
            texts.push(text);
        }
        if self.params.api == Api::Rerank {
            // A reranker reads the query first: it opens with the request's salted tag, so the
            // same request of another run or level starts differently (see `Workload::tag`).
            let query = format!("Request {}: which reference text matches it best?", self.tag(index));
            // The server reads the query once beside every document.
            let query_tokens = self.sizer.text_tokens(&query).round().max(0.0) as u32;
            target = target.saturating_add(query_tokens.saturating_mul(batch));
            let body =
                openai::request_body(self.params_at(index), PromptBody::Rerank { query: &query, documents: &texts });
            return (body, target);
        }
        (openai::request_body(self.params_at(index), PromptBody::Inputs(&texts)), target)
    }

    /// The token ids of a drawn prompt, exactly `planned` of them: the prompt's text encoded
    /// without special tokens (the server adds none to ids), then cut or padded with the
    /// prompt's own filler ids before the task, which stays whole at the end.
    pub(super) fn token_ids(&self, prompt: &str, task: &str, planned: u32) -> Vec<u32> {
        let Some(tokenizer) = self.sizer.exact() else { return Vec::new() };
        let encode = |text: &str| tokenizer.encode_fast(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default();
        let head_text = prompt.strip_suffix(task).unwrap_or(prompt);
        let mut ids = encode(head_text);
        let tail = encode(task);
        let planned = planned as usize;
        let want_head = planned.saturating_sub(tail.len());
        if ids.len() > want_head {
            ids.truncate(want_head);
        } else {
            // The second half of the head is filler: repeating it reads like more filler.
            let pool: Vec<u32> = match ids.get(ids.len() / 2..) {
                Some(half) if !half.is_empty() => half.to_vec(),
                _ => tail.clone(),
            };
            let mut i = 0;
            while ids.len() < want_head && !pool.is_empty() {
                ids.push(pool[i % pool.len()]);
                i += 1;
            }
        }
        ids.extend_from_slice(&tail);
        ids.truncate(planned);
        ids
    }
}
