//! The salt each level builds its prompts with, and the keyed tags that make every request's
//! header its own (so no two prompts share a cache block unless the scenario asks them to).

use super::{TAG_SPACE, TAG_STEP};

/// The salt level `level` (its concurrency or rate) builds its prompts with: the run's, mixed
/// with the level's value, so the levels of a run are distinct; the run's own (zero) when prompts
/// are reproducible. Recorded per level (the records' `level` line and the artifact's
/// `level_prompt_salt`).
pub fn level_prompt_salt(run_salt: u64, reproducible: bool, level: f64) -> u64 {
    if reproducible {
        return run_salt;
    }
    let mut z = run_salt ^ level.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    // Never 0: a zero salt means "reproducible" in the header.
    (z ^ (z >> 31)).max(1)
}

/// The step and offset of a level's request tags: `TAG_STEP` and 0 for reproducible prompts;
/// otherwise drawn from the whole salt (a level's salt differs from the run's in every bit): a
/// step in `[10^9, 8.9·10^9]`, odd and not a multiple of 5 (see `TAG_STEP`), and an offset in
/// `0..TAG_SPACE`. With the step keyed too, the same request of two runs gets tags whose
/// difference changes with the request, so their shared leading digits are a chance of each
/// request, not of the pair of runs.
pub(super) fn tag_key(salt: u64) -> (u64, u64) {
    if salt == 0 {
        return (TAG_STEP, 0);
    }
    let mix = |k: u64| {
        let mut z = salt ^ k;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut step = 1_000_000_000 + mix(0x7374_6570_0000_0000) % 7_900_000_000;
    if step % 2 == 0 {
        step += 1;
    }
    if step % 5 == 0 {
        step += 2;
    }
    (step, mix(0x7461_6773_0000_0000) % TAG_SPACE)
}

/// `level_prompt_salt` of a run salt written as 16 hex digits (the records' and the artifact's
/// form); `None` when it is not.
pub fn level_prompt_salt_hex(run_salt: &str, reproducible: bool, level: f64) -> Option<String> {
    let valid = run_salt.len() == 16 && run_salt.bytes().all(|b| b.is_ascii_hexdigit());
    let run_salt = u64::from_str_radix(run_salt, 16).ok().filter(|_| valid)?;
    Some(format!("{:016x}", level_prompt_salt(run_salt, reproducible, level)))
}
