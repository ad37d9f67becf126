//! Stubs shared by the schedulers' unit tests: a tiny workload and a completed outcome.

use std::sync::Arc;
use std::time::Duration;

use crate::plan::scenario::{Overrides, Scenario};
use crate::request::record::{Completed, Outcome, TokenSource};
use crate::request::workload::{Sizer, Workload};

pub fn workload() -> Arc<Workload> {
    let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";
    let s = Scenario::from_toml(std::path::Path::new("t.toml"), text, &Overrides::default()).unwrap();
    Arc::new(Workload::new(&s, 1, Sizer::Estimate { overhead: 8.0 }))
}

pub fn outcome(index: u64) -> Outcome {
    Outcome::Completed(Completed {
        index,
        planned_context_tokens: 128,
        prompt_target_tokens: 128,
        start_offset: Duration::ZERO,
        intended_offset: None,
        queue_wait: None,
        first_output: Duration::from_millis(1),
        first_content: Some(Duration::from_millis(1)),
        end: Duration::from_millis(2),
        content_chunks: 1,
        reasoning_chunks: 0,
        prompt_tokens: None,
        cached_tokens: None,
        output_tokens: 1,
        output_token_source: TokenSource::Usage,
        usage_completion_tokens: None,
        reasoning_tokens: None,
        finish_reason: None,
        visible_content_truncated: false,
        canary: None,
        controlled_output: None,
        retries: 0,
        retried_errors: Vec::new(),
        stale_connection_retries: 0,
        replay: None,
        chunks: Box::default(),
        corrections: None,
        schema: None,
        tool_calls: None,
    })
}
