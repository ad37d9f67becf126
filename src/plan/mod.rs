//! The plan: what to send, and when.
//!
//! - `scenario`: TOML (or flags) → one validated, typed plan; the checker and every rule.
//! - `search`: the capacity search: which level to run next.
//! - `session`: conversations, the plan side: shape, turns, history, turn canaries.
//! - `trace`: trace files (timestamps and sizes) replayed as arrivals.

pub mod scenario;
pub mod search;
pub mod session;
pub mod trace;
