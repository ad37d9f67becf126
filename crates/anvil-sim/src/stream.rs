//! Paced generation of one response: the SSE body of a streamed request, and the wait of a
//! non-streamed one, with the counters each outcome updates.
//!
//! The stream is a `futures::stream::unfold` driven directly by the HTTP body rather than a
//! spawned task feeding a channel: when the client goes away hyper drops the body, which
//! drops the unfold state, which stops generation and counts the disconnect, with no second
//! task to cancel and no channel hop per chunk (that matters for the `instant` profile).
//!
//! Timing uses absolute deadlines: token `i` is ready at `arrival + prefill + i * tpot` and a
//! chunk leaves when its last token is ready. Sleeping until such deadlines keeps the average
//! rate exact although tokio's timer only has millisecond granularity (late wakeups are
//! absorbed by the next deadline instead of accumulating).

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio::time::Instant;

use super::contamination::InFlightMarker;
use super::faults::{self, FaultKind, Injection, RESTART_CUT};
use super::ground_truth::{ChunkKind, Recorder};
use super::plan::{OutputPlan, TextSource};
use super::profile::{Profile, UsagePlacement};
use super::restart::RestartWatch;
use super::stats::MockStats;
use super::tokenize::PromptKind;
use super::wire::{Channel, ChunkWriter, Usage};

/// Counts one generation request as active for as long as it lives, and records how it
/// ended: completed (via [`ActiveGuard::complete`]), broken on purpose by an injected fault
/// (via [`ActiveGuard::cut`]), cut by a server restart, or disconnected (dropped otherwise).
pub(crate) struct ActiveGuard {
    stats: Arc<MockStats>,
    ended: bool,
    tokens_streamed: u64,
    chunks_streamed: u64,
    /// Dropped with the guard: a request that triggers the restart starts it when it ends.
    pub restart: Option<RestartWatch>,
    /// Keeps the request's canary marker among the in-flight ones while it lives.
    pub marker: Option<InFlightMarker>,
}

impl ActiveGuard {
    pub fn new(stats: Arc<MockStats>) -> ActiveGuard {
        stats.request_started();
        ActiveGuard { stats, ended: false, tokens_streamed: 0, chunks_streamed: 0, restart: None, marker: None }
    }

    fn record_chunk(&mut self, tokens: u32) {
        // Kept locally and published once at the end: a shared atomic per chunk would be
        // contended by every concurrent stream.
        self.tokens_streamed += u64::from(tokens);
        self.chunks_streamed += 1;
    }

    /// Publishes the outcome. Called before the last bytes are handed to the client, so a
    /// client that has seen the end of the response also sees the counters.
    pub fn complete(&mut self, completion_tokens: u32) {
        let stats = &self.stats;
        MockStats::add(&stats.requests_completed, 1);
        MockStats::add(&stats.completion_tokens, u64::from(completion_tokens));
        self.publish_streamed();
        self.stats.active_requests.fetch_sub(1, Ordering::Relaxed);
        self.ended = true;
    }

    /// The response ends broken by an injected fault: neither completed nor disconnected (the
    /// fault's own counter says what happened).
    pub fn cut(&mut self) {
        self.publish_streamed();
        self.stats.active_requests.fetch_sub(1, Ordering::Relaxed);
        self.ended = true;
    }

    fn publish_streamed(&mut self) {
        MockStats::add(&self.stats.tokens_streamed, self.tokens_streamed);
        MockStats::add(&self.stats.chunks_streamed, self.chunks_streamed);
        self.tokens_streamed = 0;
        self.chunks_streamed = 0;
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.publish_streamed();
            if self.restart.as_ref().is_some_and(RestartWatch::cut_by_restart) {
                self.stats.count_fault(RESTART_CUT);
            } else {
                MockStats::add(&self.stats.requests_disconnected, 1);
            }
            self.stats.active_requests.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Everything one accepted request needs to produce its response.
pub(crate) struct Generation {
    pub profile: Arc<Profile>,
    pub kind: PromptKind,
    pub plan: OutputPlan,
    pub text: TextSource,
    pub usage: Usage,
    pub include_usage: bool,
    /// Usage (cumulative completion tokens) on every delta chunk.
    pub continuous_usage: bool,
    pub arrival: Instant,
    pub uncached_tokens: u32,
    pub guard: ActiveGuard,
    /// A stream fault still to strike (see `faults`); `None` for non-streamed requests.
    pub fault: Option<Injection>,
    /// The contamination planned into `text`, counted when the foreign marker goes out.
    pub contamination: Option<FaultKind>,
    /// The tool call the response makes instead of text (see `tool_call`).
    pub tool: Option<Box<super::tool_call::ToolCall>>,
}

impl Generation {
    fn load_factor(&self) -> f64 {
        self.profile.load_factor(self.guard.stats.active())
    }

    /// `tokens` decode steps at the current load.
    fn decode_time(&self, tokens: u32, factor: f64) -> Duration {
        let tpot = self.profile.time_per_output_token;
        if tpot.is_zero() || tokens == 0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(tpot.as_secs_f64() * f64::from(tokens) * factor).unwrap_or(Duration::MAX)
    }

    /// When the first output token is ready.
    fn first_token_at(&self) -> Instant {
        let prefill = self.profile.prefill_time(self.uncached_tokens, self.load_factor());
        after(self.arrival, prefill)
    }

    /// Waits out the whole generation, for a non-streamed response. The load factor is
    /// sampled once, at the start, since nothing is sent in between.
    pub async fn wait_until_generated(&self) {
        let factor = self.load_factor();
        let mut steps = self.plan.total().saturating_sub(1);
        steps = steps.saturating_add(u32::from(self.plan.eos_step));
        let end = after(self.first_token_at(), self.decode_time(steps, factor));
        sleep_until(end).await;
    }
}

/// `base + offset`, saturating far in the future instead of overflowing.
fn after(base: Instant, offset: Duration) -> Instant {
    base.checked_add(offset).unwrap_or_else(|| base + Duration::from_secs(365 * 24 * 3600))
}

async fn sleep_until(deadline: Instant) {
    // Past deadlines return at once without registering a timer: with a sub-millisecond
    // time per token several chunks are due per timer tick.
    if deadline > Instant::now() {
        tokio::time::sleep_until(deadline).await;
    }
}

/// State of one SSE body between chunks.
struct StreamState {
    generation: Generation,
    writer: ChunkWriter,
    /// Tokens emitted so far.
    emitted: u32,
    /// When the last emitted token was ready.
    last_ready: Option<Instant>,
    /// Delta frames handed over so far.
    frames: u32,
    finished: bool,
    buf: BytesMut,
    text: String,
    recorder: Option<Recorder>,
    /// Varies the speculative chunk sizes between responses (see `Profile::chunk_tokens`).
    seed: u64,
}

/// Streams started so far, the seed of each one's chunk-size draws.
static STREAMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The SSE body of a streamed response. An `Err` item is an injected connection reset: hyper
/// answers it by dropping the connection without ending the chunked body.
pub(crate) fn sse_stream(
    generation: Generation,
    writer: ChunkWriter,
    recorder: Option<Recorder>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let state = StreamState {
        generation,
        writer,
        emitted: 0,
        last_ready: None,
        frames: 0,
        finished: false,
        buf: BytesMut::with_capacity(1024),
        text: String::new(),
        recorder,
        seed: STREAMS.fetch_add(1, Ordering::Relaxed),
    };
    futures::stream::unfold(state, |mut state| async move {
        if state.finished {
            return None;
        }
        let frame = state.next_frame().await;
        if let Some(recorder) = &mut state.recorder {
            recorder.stamp();
        }
        if state.finished {
            // Stored before the last bytes leave, so a client that has read the whole
            // response finds the record.
            state.recorder = None;
        }
        Some((frame, state))
    })
}

impl StreamState {
    /// The next body frame: one delta chunk (preceded by the role chunk the first time), or
    /// finally the finish chunk, the usage chunk and `[DONE]` together; or an injected fault.
    async fn next_frame(&mut self) -> io::Result<Bytes> {
        if self.fault_due() {
            if let Some(frame) = self.inject().await? {
                return Ok(frame);
            }
        }
        let plan = self.generation.plan;
        let total = plan.total();
        if self.emitted < total {
            self.delta_frame(plan).await;
        } else {
            self.final_frame(plan).await;
        }
        Ok(self.buf.split().freeze())
    }

    fn note(&mut self, kind: ChunkKind, tokens: u32) {
        if let Some(recorder) = &mut self.recorder {
            recorder.note(kind, tokens);
        }
    }

    fn count_fault(&mut self, kind: FaultKind) {
        self.generation.guard.stats.count_fault(kind.counter());
        if let Some(recorder) = &mut self.recorder {
            recorder.fault(kind.name());
        }
    }

    /// Whether the pending mid-stream fault strikes before the next frame: after its number of
    /// chunks, or before the final frame of a shorter stream.
    fn fault_due(&self) -> bool {
        let Some(fault) = self.generation.fault else {
            return false;
        };
        let plan = &self.generation.plan;
        let last = self.emitted >= plan.total();
        let after = self.frames >= fault.after_chunks;
        match fault.kind {
            FaultKind::StallBeforeFirstByte => true,
            // Once content has started, so the answer still begins with its marker.
            FaultKind::HugeChunk => last || (after && self.emitted > plan.reasoning),
            FaultKind::ResetMidStream
            | FaultKind::StallMidStream
            | FaultKind::MalformedSse
            | FaultKind::InvalidJson
            | FaultKind::InvalidUtf8 => last || after,
            _ => false,
        }
    }

    /// Strikes the pending fault. Returns the frame it produced, or `None` when the stream
    /// goes on with its next regular frame.
    async fn inject(&mut self) -> io::Result<Option<Bytes>> {
        let Some(fault) = self.generation.fault.take() else {
            return Ok(None);
        };
        self.count_fault(fault.kind);
        match fault.kind {
            FaultKind::StallBeforeFirstByte | FaultKind::StallMidStream => {
                // Ends early, with the whole body, when the client disconnects.
                tokio::time::sleep(self.generation.profile.faults.stall_duration).await;
                // The engine resumes where it stopped rather than bursting out everything that
                // came due during the stall.
                let now = Instant::now();
                match self.last_ready {
                    Some(_) => self.last_ready = Some(now),
                    None => self.generation.arrival = now,
                }
                Ok(None)
            }
            FaultKind::ResetMidStream => {
                // hyper keeps polling a body that is always ready and only flushes once it is
                // not: without this pause the chunks before the reset would still sit in its
                // buffer when the error tears the connection down, and the client would see
                // nothing at all instead of a stream broken mid-way.
                tokio::task::yield_now().await;
                self.generation.guard.cut();
                self.finished = true;
                Err(io::Error::new(io::ErrorKind::ConnectionReset, "injected fault: connection reset mid-stream"))
            }
            FaultKind::HugeChunk => {
                let text = faults::huge_text(self.generation.profile.faults.huge_chunk_bytes);
                self.writer.delta(&mut self.buf, Channel::Content, &text);
                self.note(ChunkKind::Injected, 0);
                Ok(Some(self.buf.split().freeze()))
            }
            kind => {
                faults::write_broken_event(kind, &mut self.buf);
                self.note(ChunkKind::Injected, 0);
                Ok(Some(self.buf.split().freeze()))
            }
        }
    }

    async fn delta_frame(&mut self, plan: OutputPlan) {
        let start = self.emitted;
        let per_chunk = self.generation.profile.chunk_tokens(self.seed, self.frames);
        // A chunk never mixes reasoning and content.
        let (channel, channel_end) = if start < plan.reasoning {
            (Channel::Reasoning, plan.reasoning)
        } else if self.generation.tool.is_some() {
            (Channel::Tool, plan.total())
        } else {
            (Channel::Content, plan.total())
        };
        let end = start.saturating_add(per_chunk).min(channel_end);
        let count = end - start;
        let factor = self.generation.load_factor();
        let ready = match self.last_ready {
            None => after(self.generation.first_token_at(), self.generation.decode_time(count - 1, factor)),
            Some(last) => after(last, self.generation.decode_time(count, factor)),
        };
        if self.last_ready != Some(ready) {
            sleep_until(ready).await;
        }
        self.last_ready = Some(ready);

        self.text.clear();
        let kind = match channel {
            Channel::Reasoning => {
                self.generation.text.push_reasoning(&mut self.text, count);
                ChunkKind::Reasoning
            }
            Channel::Tool => {
                // The arguments' pieces `start - reasoning .. end - reasoning`, one token each.
                if let Some(call) = &self.generation.tool {
                    let pieces = call.pieces();
                    let from = (start - plan.reasoning) as usize;
                    let to = ((end - plan.reasoning) as usize).min(pieces.len());
                    if let (Some(first), Some(last)) = (pieces.get(from), pieces.get(to.saturating_sub(1))) {
                        self.text.push_str(&call.arguments[first.0..last.1]);
                    }
                }
                ChunkKind::Content
            }
            Channel::Content => {
                if self.generation.text.push_content(&mut self.text, count) {
                    if let Some(contamination) = self.generation.contamination {
                        self.count_fault(contamination);
                    }
                }
                ChunkKind::Content
            }
        };
        if start == 0 && self.generation.kind == PromptKind::Chat {
            // The role chunk is not a token: it goes out together with the first one.
            self.writer.role(&mut self.buf);
            self.note(ChunkKind::Role, 0);
        }
        self.writer.delta(&mut self.buf, channel, &self.text);
        if self.generation.continuous_usage {
            let u = self.generation.usage;
            let so_far = Usage::new(u.prompt_tokens, u.prompt_tokens_details.cached_tokens, end);
            ChunkWriter::with_usage(&mut self.buf, &so_far);
        }
        self.note(kind, count);
        self.generation.guard.record_chunk(count);
        self.emitted = end;
        self.frames += 1;
    }

    async fn final_frame(&mut self, plan: OutputPlan) {
        let generation = &self.generation;
        if plan.eos_step {
            // The end-of-turn token is decoded but never streamed.
            let factor = generation.load_factor();
            let last = self.last_ready.unwrap_or_else(|| generation.first_token_at());
            sleep_until(after(last, generation.decode_time(1, factor))).await;
        }
        let usage = generation.usage;
        let on_finish = generation.kind == PromptKind::Completion
            && generation.profile.usage_placement == UsagePlacement::FinishChunk;
        let separate_usage = generation.include_usage && !on_finish;
        if self.emitted == 0 && generation.kind == PromptKind::Chat {
            self.writer.role(&mut self.buf);
            self.note(ChunkKind::Role, 0);
        }
        self.writer.finish(&mut self.buf, plan.finish, on_finish.then_some(&usage));
        self.note(ChunkKind::Finish, 0);
        if separate_usage {
            self.writer.usage(&mut self.buf, &usage);
            self.note(ChunkKind::Usage, 0);
        }
        if self.generation.fault.is_some_and(|fault| fault.kind == FaultKind::MissingDone) {
            self.count_fault(FaultKind::MissingDone);
            self.generation.guard.cut();
        } else {
            self.writer.done(&mut self.buf);
            self.note(ChunkKind::Done, 0);
            self.generation.guard.complete(plan.completion_tokens);
        }
        self.finished = true;
    }
}
