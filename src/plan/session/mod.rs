//! Conversations (multi-turn sessions), the plan side: their shape, their plan, their canaries.
//!
//! `spec` is the validated `[workload.sessions]`; `dist` its distributions; `plan` draws one
//! conversation's turns from the seed; `canary` names a turn's marker and finds markers of other
//! sessions in an answer. Building a turn's prompt is `workload`'s job, sending the turns is
//! `schedule`'s, and what a level's records say about its conversations is
//! `aggregate::conversations`; nothing here does I/O.

pub mod canary;
pub mod dataset;
pub mod dist;
pub mod plan;
pub mod spec;

pub use dist::Dist;
pub use plan::{ConversationPlan, TurnPlan};
pub use spec::{ConversationSet, DatasetConversation, DatasetTurn, History, ReasoningHistory, SessionSpec};
