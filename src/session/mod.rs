//! Conversations (multi-turn sessions): their shape, their plan, their canaries, and the
//! summaries a level's records give about them.
//!
//! `spec` is the validated `[workload.sessions]`; `dist` its distributions; `plan` draws one
//! conversation's turns from the seed; `canary` names a turn's marker and finds markers of other
//! sessions in an answer; `summary` computes per-turn, per-session and per-backend figures from
//! per-request records. Building a turn's prompt is `workload`'s job and sending the turns is
//! `schedule`'s; nothing here does I/O.

pub mod canary;
pub mod dist;
pub mod plan;
pub mod spec;
pub mod summary;

pub use dist::Dist;
pub use plan::{ConversationPlan, TurnPlan};
pub use spec::{ConversationSet, DatasetConversation, DatasetTurn, History, ReasoningHistory, SessionSpec};
