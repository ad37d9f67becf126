//! The server's token usage, judged as it arrives: merged report by report (engines differ in
//! which event carries it), checked against what the request could produce (`UsageBounds`),
//! and turned into the output token count a record keeps.

use super::{OutputTokens, StreamState};
use crate::request::openai::Usage;
use crate::request::record::checks::UsageImplausible;
use crate::request::record::{TokenSource, usage_plausible};

impl StreamState {
    /// Engines differ in which event carries usage; the last report wins field by field. Each
    /// report is judged as it arrives: a count that is none, a cumulative count that goes down
    /// or jumps beyond the budget (usage on every chunk) is kept as the evidence.
    pub(super) fn merge_usage(&mut self, u: Usage) {
        if self.usage_problem.is_none() {
            self.usage_problem = self.judge_report(&u);
        }
        if let Some(c) = u.completion_tokens {
            self.last_completion = Some(self.last_completion.map_or(c, |last| last.max(c)));
        }
        self.usage.prompt_tokens = u.prompt_tokens.or(self.usage.prompt_tokens);
        self.usage.completion_tokens = u.completion_tokens.or(self.usage.completion_tokens);
        self.usage.cached_tokens = u.cached_tokens.or(self.usage.cached_tokens);
        self.usage.reasoning_tokens = u.reasoning_tokens.or(self.usage.reasoning_tokens);
        self.usage_seen = true;
    }

    /// What is wrong with one usage report on its own, if anything.
    fn judge_report(&self, u: &Usage) -> Option<UsageImplausible> {
        if let Some((field, value)) = u.not_a_count {
            return Some(UsageImplausible::not_a_count(field, value));
        }
        let c = u.completion_tokens?;
        let limit = self.output_limit();
        match self.last_completion {
            Some(last) if c < last => Some(UsageImplausible::backwards("completion_tokens", c, last)),
            _ if c > limit => Some(UsageImplausible::above("completion_tokens", c, limit)),
            _ => None,
        }
    }

    /// The most output tokens the response can report: its budget's bound, or, when the server
    /// streamed more chunks than that (it ignored the budget), twice the chunks, since a count
    /// that agrees with what streamed describes the response.
    fn output_limit(&self) -> u64 {
        let chunks = u64::from(self.content_chunks) + u64::from(self.reasoning_chunks);
        self.bounds.output.max(chunks.saturating_mul(2))
    }

    /// Whether the usage can describe this request, once the response ended: `Some` with the
    /// first offending count when it cannot (beyond what the request could produce, a
    /// cumulative count that went down, a number that is no count). None of such usage is kept.
    pub fn usage_verdict(&self) -> Option<UsageImplausible> {
        if let Some(problem) = &self.usage_problem {
            return Some(problem.clone());
        }
        let (u, b) = (&self.usage, self.bounds);
        let above = |field: &str, value: Option<u64>, limit: u64| {
            value.filter(|&v| v > limit).map(|v| UsageImplausible::above(field, v, limit))
        };
        let output = self.output_limit();
        let prompt_limit = u.prompt_tokens.map_or(b.prompt, |p| p.min(b.prompt));
        let output_limit = u.completion_tokens.map_or(output, |c| c.min(output));
        above("prompt_tokens", u.prompt_tokens, b.prompt)
            .or_else(|| above("cached_tokens", u.cached_tokens, prompt_limit))
            .or_else(|| above("completion_tokens", u.completion_tokens, output))
            .or_else(|| above("reasoning_tokens", u.reasoning_tokens, output_limit))
    }

    /// Output tokens counted from the chunks alone (the server's usage rejected).
    pub fn chunk_tokens(&self) -> OutputTokens {
        let chunks = u64::from(self.content_chunks) + u64::from(self.reasoning_chunks);
        OutputTokens { tokens: chunks, source: TokenSource::ChunkCount, usage_set_aside: None }
    }

    /// Output tokens: the server's count unless it is missing or implausible, else the chunks.
    pub fn output_tokens(&self) -> OutputTokens {
        let chunks = u64::from(self.content_chunks) + u64::from(self.reasoning_chunks);
        match self.usage.completion_tokens {
            Some(n) if usage_plausible(n, chunks) => {
                OutputTokens { tokens: n, source: TokenSource::Usage, usage_set_aside: None }
            }
            set_aside => OutputTokens { tokens: chunks, source: TokenSource::ChunkCount, usage_set_aside: set_aside },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::request::record::checks::{UsageBounds, UsageProblem};

    const MS: Duration = Duration::from_millis(1);
    const WORD: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"w\"}}]}\n\n";

    #[test]
    fn usage_no_request_could_produce_is_rejected_with_its_evidence() {
        let bounds = UsageBounds { prompt: 1000, output: 32 };
        let verdict = |events: &[&[u8]]| {
            let mut s = StreamState::new(false).with_bounds(bounds);
            for e in events {
                s.observe(e, MS).unwrap();
            }
            s.usage_verdict().map(|v| (v.field, v.value.to_string(), v.limit, v.problem))
        };
        let usage = |u: &str| format!("data: {{\"choices\":[],\"usage\":{u}}}\n\n").into_bytes();
        let at = |u: &str| verdict(&[WORD, WORD, &usage(u)]);
        assert_eq!(at(r#"{"prompt_tokens":1000,"completion_tokens":32}"#), None);
        assert_eq!(
            at(r#"{"prompt_tokens":1001,"completion_tokens":2}"#),
            Some(("prompt_tokens".into(), "1001".into(), Some(1000), UsageProblem::AboveBound))
        );
        assert_eq!(
            at(r#"{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":11}}"#),
            Some(("cached_tokens".into(), "11".into(), Some(10), UsageProblem::AboveBound))
        );
        assert_eq!(
            at(r#"{"completion_tokens":18446744073709551615}"#),
            Some(("completion_tokens".into(), "18446744073709551615".into(), Some(32), UsageProblem::AboveBound))
        );
        assert_eq!(
            at(r#"{"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":5}}"#),
            Some(("reasoning_tokens".into(), "5".into(), Some(4), UsageProblem::AboveBound))
        );
        assert_eq!(
            at(r#"{"completion_tokens":-1}"#),
            Some(("completion_tokens".into(), "-1.0".into(), None, UsageProblem::NotACount))
        );
        // A cumulative count that goes down, then its final report.
        let chunk = |n: u64| {
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"w\"}}}}],\"usage\":{{\"completion_tokens\":{n}}}}}\n\n")
                .into_bytes()
        };
        assert_eq!(
            verdict(&[&chunk(1), &chunk(2), &usage(r#"{"completion_tokens":1}"#)]),
            Some(("completion_tokens".into(), "1".into(), Some(2), UsageProblem::WentBackwards))
        );
        // A jump mid-stream is the evidence even when the final report looks sane.
        assert_eq!(
            verdict(&[&chunk(1), &chunk(u64::MAX), &chunk(3), &usage(r#"{"completion_tokens":3}"#)]),
            Some(("completion_tokens".into(), u64::MAX.to_string(), Some(32), UsageProblem::AboveBound))
        );
        // A server that streamed past its budget is believed up to twice what streamed.
        let many: Vec<Vec<u8>> = (1..=40).map(chunk).collect();
        let mut events: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        let last = usage(r#"{"completion_tokens":41}"#);
        events.push(&last);
        assert_eq!(verdict(&events), None);
    }
}
