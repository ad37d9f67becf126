//! The request side: requests paced, built, sent, timed, checked and recorded.
//!
//! - `cache_reset`: the server's prefix cache reset before each level (vLLM, SGLang, llama.cpp), on every replica.
//! - `openai`: wire formats of the six APIs: requests, SSE streams, usage.
//! - `record`: what a request produced and how it is kept: outcomes, records file, the run's description.
//! - `schedule`: pacing (closed and open loop, sessions, traces) and the workers it drives.
//! - `server_metrics`: the server's own `/metrics`, scraped around and through each level.
//! - `worker`: one request sent, streamed and timed to the byte; failures classified.
//! - `workload`: the prompts a request carries (synthetic text sized by calibration, datasets, traces, conversations) and their canaries, checked against its answer.

pub mod cache_reset;
pub mod openai;
pub mod record;
pub mod schedule;
pub mod server_metrics;
pub mod worker;
pub mod workload;
