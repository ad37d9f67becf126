//! One conversation's plan, drawn from the spec and the seed: how many turns, how long each
//! user message and answer is, how long the user thinks before each turn, which system prompt
//! it shares. A pure function of (spec, seed, conversation index): conversation `c` is the same
//! whichever slot runs it and in whatever order.

use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::spec::SessionSpec;

/// One turn of a planned conversation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnPlan {
    /// Turn 1: the whole prompt's tokens (system prompt included); later turns: the new user
    /// message's tokens. Dataset turns: 0 (the dataset's text is sent as it is).
    pub tokens: u32,
    /// Output tokens asked for.
    pub output_tokens: u32,
    /// The wait after the previous turn's response ended (zero for turn 1).
    pub think: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConversationPlan {
    pub index: u64,
    /// The system prompt group, when the spec has system prompts.
    pub group: Option<u32>,
    /// The dataset conversation it replays, when conversations come from a file.
    pub dataset: Option<usize>,
    pub turns: Vec<TurnPlan>,
}

/// A generator for one conversation's draws.
fn rng(seed: u64, index: u64) -> Xoshiro256PlusPlus {
    let mut z = seed ^ 0x5E55_10A5 ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Xoshiro256PlusPlus::seed_from_u64(z ^ (z >> 31))
}

/// Conversation `index` of a run with `seed`. `order` maps conversation indices to dataset
/// conversations (a seeded shuffle); `max_tokens` caps every planned output.
pub fn plan(spec: &SessionSpec, seed: u64, index: u64, order: &[usize], max_tokens: u32) -> ConversationPlan {
    let mut r = rng(seed, index);
    let group = (spec.system_prompt_tokens > 0).then(|| choose_group(spec, &mut r));
    let think = |r: &mut Xoshiro256PlusPlus| Duration::from_secs_f64(spec.think_time_s.sample(r).max(0.0));
    let output = |r: &mut Xoshiro256PlusPlus, recorded: Option<u32>| match (&spec.output_tokens, recorded) {
        (Some(d), _) => d.sample_count(r, 1).min(max_tokens),
        (None, Some(n)) => n.clamp(1, max_tokens),
        (None, None) => max_tokens,
    };
    if let Some(set) = &spec.dataset {
        let pick = order.get((index % order.len().max(1) as u64) as usize).copied().unwrap_or(0);
        let recorded = set.conversations.get(pick).map(|c| c.turns.as_slice()).unwrap_or_default();
        let turns = recorded
            .iter()
            .enumerate()
            .map(|(k, t)| TurnPlan {
                tokens: 0,
                output_tokens: output(&mut r, t.assistant_tokens),
                think: if k == 0 { Duration::ZERO } else { think(&mut r) },
            })
            .collect();
        return ConversationPlan { index, group, dataset: Some(pick), turns };
    }
    let n = spec.turns.sample_count(&mut r, 1);
    let turns = (0..n)
        .map(|k| {
            let tokens = if k == 0 {
                spec.first_tokens.sample_count(&mut r, 1)
            } else {
                spec.user_tokens.sample_count(&mut r, 1)
            };
            TurnPlan {
                tokens,
                output_tokens: output(&mut r, None),
                think: if k == 0 { Duration::ZERO } else { think(&mut r) },
            }
        })
        .collect();
    ConversationPlan { index, group, dataset: None, turns }
}

/// A system prompt group: uniform, or Zipf (`P(k) ∝ 1/(k+1)^α`) when the spec says so.
fn choose_group(spec: &SessionSpec, r: &mut Xoshiro256PlusPlus) -> u32 {
    let n = spec.system_prompt_groups.max(1);
    match spec.system_prompt_zipf {
        None => r.random_range(0..n),
        Some(alpha) => {
            let weights: Vec<f64> = (0..n).map(|k| 1.0 / f64::from(k + 1).powf(alpha)).collect();
            let mut pick = r.random::<f64>() * weights.iter().sum::<f64>();
            for (k, w) in weights.iter().enumerate() {
                if pick < *w {
                    return k as u32;
                }
                pick -= w;
            }
            n - 1
        }
    }
}

/// A run's session id for conversation `index`: unique to the run (its salt) unless prompts
/// are reproducible.
pub fn session_id(salt: u64, seed: u64, index: u64) -> String {
    if salt == 0 { format!("s{seed}-{index:05}") } else { format!("s{:08x}-{index:05}", salt as u32) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::session::dist::Dist;
    use crate::plan::session::spec::{History, ReasoningHistory};

    pub(crate) fn spec() -> SessionSpec {
        SessionSpec {
            conversations: Some(10),
            turns: Dist::Uniform { lo: 2.0, hi: 5.0 },
            first_tokens: Dist::constant(1000.0),
            user_tokens: Dist::Normal { mean: 100.0, sd: 30.0, min: 10.0, max: 300.0 },
            output_tokens: Some(Dist::constant(64.0)),
            think_time_s: Dist::Uniform { lo: 0.5, hi: 1.5 },
            system_prompt_tokens: 256,
            system_prompt_groups: 4,
            system_prompt_zipf: Some(1.5),
            history: History::Live,
            history_reasoning: ReasoningHistory::Drop,
            in_flight: None,
            affinity_headers: vec!["X-Session-ID".into()],
            echo_header: None,
            backend_header: None,
            dataset: None,
        }
    }

    #[test]
    fn plans_are_pure_and_follow_the_spec() {
        let s = spec();
        let a = plan(&s, 7, 3, &[], 48);
        assert_eq!(a, plan(&s, 7, 3, &[], 48));
        assert_ne!(a, plan(&s, 7, 4, &[], 48));
        assert!((2..=5).contains(&a.turns.len()));
        assert_eq!(a.turns[0].tokens, 1000);
        assert_eq!(a.turns[0].think, Duration::ZERO);
        assert!(a.turns.iter().all(|t| t.output_tokens == 48), "capped at max_tokens");
        assert!(a.turns[1..].iter().all(|t| (0.5..=1.5).contains(&t.think.as_secs_f64())));
    }

    #[test]
    fn zipf_groups_favour_the_first() {
        let s = spec();
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[plan(&s, 1, i, &[], 64).group.unwrap() as usize] += 1;
        }
        // 1, 1/2^1.5, 1/3^1.5, 1/4^1.5 normalised: 0.58, 0.21, 0.11, 0.07.
        assert!(counts[0] > 2100 && counts[0] < 2500 && counts[3] < 400 && counts[3] > 150, "{counts:?}");
    }
}
