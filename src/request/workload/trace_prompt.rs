//! Requests for the rows of a trace (`[workload.trace]`).
//!
//! A row's prompt is its hash-id blocks, then a tail unique to the request:
//!
//! ```text
//! [block h0][block h1]…[block h(m-1)][first r tokens of block h(m)]\n\nRequest <index>-<salt> reference text: <filler> Task: …
//! ```
//!
//! Block `h` at position `k` is the same text in every request that names it there (`blocks`;
//! trace hash ids chain, so an id always sits at the same position), so requests sharing leading
//! hash ids share exactly that prefix; the tail (the request's header, filler and the
//! canary instruction) is sized so that the whole prompt predicts the row's `input_length`.
//! The tail needs a few tokens of its own; they come out of the last blocks, which is where a
//! trace's hash ids describe the least shared part of a prompt. Output is the row's
//! `output_length`, sent as `max_tokens` (with `ignore_eos` where the dialect has it).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::blocks::{block_rng, block_span, push_block};
use super::text::{self, Stream};
use super::{PreparedRequest, Workload, canary_marker, task_text};
use crate::plan::trace::{Trace, TraceRow, chain};
use crate::request::openai::{self, PromptBody};
use crate::request::record::ReplayFacts;

/// A trace and what is known about its rows before any is sent.
#[derive(Debug, Clone)]
pub(super) struct TracePlan {
    pub trace: Arc<Trace>,
    /// Per row: leading prompt tokens that an earlier row's prompt started with.
    pub expected_cached: Vec<u32>,
}

/// Where a row's blocks end: `full` whole blocks, then `partial` tokens of the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    full: usize,
    partial: u32,
}

impl Workload {
    pub(super) fn trace_plan(&self, trace: Arc<Trace>) -> TracePlan {
        let bs = trace.block_size;
        let mut longest: HashMap<u64, u32> = HashMap::new();
        let mut expected_cached = Vec::with_capacity(trace.rows.len());
        for (i, row) in trace.rows.iter().enumerate() {
            let layout = self.layout(i as u64, row, bs);
            let mut key = 0xcbf2_9ce4_8422_2325u64;
            let mut shared = 0u32;
            let mut matching = true;
            let placed = layout.full + usize::from(layout.partial > 0);
            for (j, &id) in row.hash_ids.iter().take(placed).enumerate() {
                let len = if j < layout.full { bs } else { layout.partial };
                key = chain(key, id);
                let before = longest.get(&key).copied();
                if matching {
                    match before {
                        Some(prev) => {
                            shared += prev.min(len);
                            matching = prev >= len;
                        }
                        None => matching = false,
                    }
                }
                longest.insert(key, before.unwrap_or(0).max(len));
            }
            expected_cached.push(shared);
        }
        TracePlan { trace, expected_cached }
    }

    /// The tail every request ends with: a blank line, its header, and the task.
    fn tail(&self, index: u64) -> (String, String) {
        let canary = self.canaries.then(|| canary_marker(self.seed, index));
        (format!("\n\n{}", self.header(index)), task_text(canary.as_deref(), None))
    }

    fn layout(&self, index: u64, row: &TraceRow, bs: u32) -> Layout {
        let (header, task) = self.tail(index);
        let tail = self.sizer.text_tokens(&header) + self.sizer.text_tokens(&task);
        let budget = (f64::from(row.input_tokens) - self.sizer.overhead() - tail).max(0.0);
        if bs == 0 || row.hash_ids.is_empty() {
            return Layout { full: 0, partial: 0 };
        }
        let full = ((budget / f64::from(bs)).floor() as usize).min(row.hash_ids.len());
        let rest = (budget - (full as f64) * f64::from(bs)).floor() as u32;
        let partial = if full < row.hash_ids.len() { rest.min(bs) } else { 0 };
        Layout { full, partial }
    }

    /// Text of block `id` at `position`: `tokens` of it (a whole block, or its first part).
    fn block(&self, out: &mut String, id: u64, position: usize, bs: u32, tokens: u32) {
        let per_word = self.sizer.per_filler_word().max(1e-3);
        let (phase, whole) = block_span(position, bs, per_word);
        let words = if tokens == bs { whole } else { (f64::from(tokens) / per_word).round() as usize };
        let build = |words: usize| {
            let mut s = String::new();
            push_block(&mut s, phase, words, &mut block_rng(self.seed, self.salt, id, bs));
            s
        };
        // Exact sizers correct a block to its size; the result is still a pure function of
        // (id, position, size), so every request naming the block gets the same text.
        let text = self.corrected(tokens, words, per_word, build, |t| self.sizer.text_tokens(t));
        out.push_str(&text);
    }

    pub(super) fn trace_request(&self, plan: &TracePlan, index: u64) -> PreparedRequest {
        let trace = &plan.trace;
        // A loaded trace has at least one row, and the schedule never asks past its last.
        let row = &trace.rows[(index as usize).min(trace.rows.len().saturating_sub(1))];
        let bs = trace.block_size;
        let layout = self.layout(index, row, bs);
        let mut prompt = String::with_capacity(row.input_tokens as usize * 6);
        for (position, &id) in row.hash_ids.iter().take(layout.full).enumerate() {
            self.block(&mut prompt, id, position, bs, bs);
        }
        if layout.partial > 0 {
            if let Some(&id) = row.hash_ids.get(layout.full) {
                self.block(&mut prompt, id, layout.full, bs, layout.partial);
            }
        }
        let prefix_len = prompt.len();
        let (header, task) = self.tail(index);
        let per_word = self.sizer.per_filler_word().max(1e-3);
        // The tail's filler continues the blocks' stratified sequence (so it too counts at the
        // average rate), with words of its own.
        let phase = prompt.split_whitespace().count();
        let build = |prompt: &mut String, words: usize| {
            prompt.truncate(prefix_len);
            prompt.push_str(&header);
            push_block(prompt, phase, words, &mut text::rng(self.seed, self.salt, index, Stream::Text));
            prompt.push_str(&task);
        };
        build(&mut prompt, 0);
        let planned = row.input_tokens;
        let mut words = ((f64::from(planned) - self.sizer.prompt_tokens(&prompt)) / per_word).round().max(0.0) as usize;
        build(&mut prompt, words);
        if self.sizer.exact().is_some() {
            for _ in 0..4 {
                let diff = f64::from(planned) - self.sizer.prompt_tokens(&prompt);
                if diff == 0.0 {
                    break;
                }
                let step = (diff / per_word).round();
                let step = if step == 0.0 { diff.signum() } else { step };
                words = (words as f64 + step).max(0.0) as usize;
                build(&mut prompt, words);
            }
        }
        let target = self.sizer.prompt_tokens(&prompt).round().max(0.0) as u32;
        let key = super::models::trace_key(row.session.as_deref(), index);
        let mut params = self.params_at(key).clone();
        params.max_tokens = row.output_tokens;
        let body = openai::request_body(&params, PromptBody::Text(&prompt));
        PreparedRequest {
            index,
            planned_context_tokens: planned,
            prompt_target_tokens: target,
            canary: self.canaries.then(|| canary_marker(self.seed, index)),
            response_words: None,
            body: Bytes::from(body),
            replay: Some(Box::new(ReplayFacts {
                trace_row: Some(row.row),
                planned_output_tokens: Some(row.output_tokens),
                expected_cached_tokens: plan.expected_cached.get(index as usize).copied(),
                session: row.session.clone(),
                turn: row.turn,
                model: self.model_at(key),
                ..ReplayFacts::default()
            })),
            exchange: None,
            structured: None,
        }
    }
}
