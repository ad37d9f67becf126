//! anvil-load: a load generator for OpenAI-compatible LLM inference servers.
//!
//! The pipeline, one module per stage: `scenario` (TOML → validated plan) → `workload`
//! (prompts, canaries) → `schedule` (pacing) → `worker` (one streamed request, timed) →
//! `aggregate` (one task owning every sample) → `artifact` (the JSON contract) → `report`
//! (console). `mock` is the embedded simulated server.

pub mod mock;
