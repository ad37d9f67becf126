//! This process's part of a level's global plan, when a run is split into shards.
//!
//! Every shard computes the same global plan and keeps global request indices, so request `j`
//! is the same request (prompt, planned context, canary) whichever shard sends it:
//! - open loop: arrival `j` of the one seeded schedule belongs to shard `j mod N`, at the
//!   schedule's own offset;
//! - closed loop: shard `i` sends the indices `≡ i (mod N)` and holds
//!   `⌊C/N⌋ + [i < C mod N]` requests in flight (the same split applies to an open loop's
//!   in-flight cap);
//! - a shared-prefix warm-up (request 0) is sent by shard 0 alone; the others wait until it has
//!   ended (`WarmUpSync`).
//!
//! An unsharded run is the part `0/1`, which owns everything: there is one code path.

use tokio::sync::oneshot;

/// Shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

impl Part {
    /// The whole plan: an unsharded run.
    pub const WHOLE: Part = Part { index: 0, count: 1 };

    /// Whether request (or arrival) `j` is this part's.
    pub fn owns(&self, j: u64) -> bool {
        j % u64::from(self.count) == u64::from(self.index)
    }

    /// The global index of this part's `k`-th request.
    pub fn nth(&self, k: u64) -> u64 {
        u64::from(self.index) + k * u64::from(self.count)
    }

    /// This part's share of `total` slots (concurrency, in-flight cap):
    /// `⌊total/N⌋ + [i < total mod N]`. The shares add up to `total`.
    pub fn share(&self, total: u64) -> u64 {
        total / u64::from(self.count) + u64::from(u64::from(self.index) < total % u64::from(self.count))
    }

    /// How many of the indices `0..n` are this part's.
    pub fn count_below(&self, n: u64) -> u64 {
        self.share(n)
    }
}

/// Who sends a level's warm-up request (shared-prefix bursts), and how the others learn it ended.
#[derive(Debug, Default)]
pub enum WarmUpSync {
    /// An unsharded run: send it, then go on.
    #[default]
    Local,
    /// Shard 0: send it, then report that it ended.
    Lead(oneshot::Sender<()>),
    /// Every other shard: wait until shard 0's warm-up request has ended.
    Follow(oneshot::Receiver<()>),
}

/// What a level needs to know about sharding.
#[derive(Debug, Default)]
pub struct LevelShard {
    pub part: Part,
    pub warm_up: WarmUpSync,
}

impl Default for Part {
    fn default() -> Self {
        Part::WHOLE
    }
}

impl LevelShard {
    pub fn whole() -> Self {
        LevelShard::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_tile_the_indices_and_the_slots() {
        for count in 1..=7u32 {
            let parts: Vec<Part> = (0..count).map(|index| Part { index, count }).collect();
            for j in 0..100u64 {
                assert_eq!(parts.iter().filter(|p| p.owns(j)).count(), 1, "index {j} of {count}");
            }
            for total in 0..40u64 {
                let shares: Vec<u64> = parts.iter().map(|p| p.share(total)).collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {count}: {shares:?}");
                assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1, "{shares:?}");
                for p in &parts {
                    assert_eq!(p.count_below(total), (0..total).filter(|&j| p.owns(j)).count() as u64);
                }
            }
            for p in &parts {
                let sent: Vec<u64> = (0..5).map(|k| p.nth(k)).collect();
                assert!(sent.iter().all(|&j| p.owns(j)), "{sent:?}");
                assert_eq!(sent[0], u64::from(p.index));
            }
        }
    }

    #[test]
    fn the_whole_plan_owns_everything() {
        assert!((0..50).all(|j| Part::WHOLE.owns(j)));
        assert_eq!(Part::WHOLE.nth(17), 17);
        assert_eq!(Part::WHOLE.share(9), 9);
    }
}
