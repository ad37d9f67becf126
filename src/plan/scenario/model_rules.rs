//! Several models in one run (`target.models`, `target.model_assignment`,
//! `target.model_zipf_exponent`): LoRA adapters of one base, or several served names; which model
//! each request (each conversation) names, drawn from the run's seed. And the cache reset before
//! each level (`load.reset_cache`).

use serde::Serialize;

use super::checker::Checker;
use super::raw;
use super::{ScenarioError, Target};

/// The most models a mix may name.
pub const MAX_MODELS: usize = 256;

/// `target.models` with how each request chooses among them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelMix {
    /// The names, in the scenario's order; the first is `target.model` (the calibration probes,
    /// the warm-up and the run description use it).
    pub names: Vec<String>,
    /// Each model's share, normalised to sum 1 (zipf: `1/rank^exponent`, normalised).
    pub shares: Vec<f64>,
    /// Integer weights as written (round robin cycles through them); zipf: none.
    #[serde(skip)]
    weights: Vec<u64>,
    pub assignment: Assignment,
    /// `zipf` only: the exponent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zipf_exponent: Option<f64>,
}

/// How a request (a conversation) is given its model.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Assignment {
    /// Drawn from the weights, seeded by the run's seed and the request (conversation) index.
    #[default]
    Random,
    /// In turn: over each cycle of `sum(weights)` indices, model `k` takes `weight_k` of them.
    RoundRobin,
    /// Drawn from Zipf shares by list order (`1/rank^exponent`), seeded like `random`.
    Zipf,
}

impl ModelMix {
    /// The model (its index in `names`) of request or conversation `key`, for a run of `seed`.
    /// A pure function: the same request gets the same model in every run of the seed, and
    /// every turn of a conversation (keyed by the conversation) the same one.
    pub fn pick(&self, seed: u64, key: u64) -> usize {
        let n = self.names.len();
        if n <= 1 {
            return 0;
        }
        if self.assignment == Assignment::RoundRobin {
            let total: u64 = self.weights.iter().sum::<u64>().max(1);
            let mut at = key % total;
            for (i, w) in self.weights.iter().enumerate() {
                if at < *w {
                    return i;
                }
                at -= w;
            }
            return n - 1;
        }
        let u = (mix(seed ^ 0x6d6f_6465_6c73, key) >> 11) as f64 / (1u64 << 53) as f64;
        let mut acc = 0.0;
        for (i, s) in self.shares.iter().enumerate() {
            acc += s;
            if u < acc {
                return i;
            }
        }
        n - 1
    }
}

/// SplitMix64 of `(seed, key)`: unrelated draws for neighbouring keys.
fn mix(seed: u64, key: u64) -> u64 {
    let mut z = seed ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const ASSIGNMENTS: [(&str, Assignment); 3] =
    [("random", Assignment::Random), ("round_robin", Assignment::RoundRobin), ("zipf", Assignment::Zipf)];

impl Assignment {
    /// The name written in scenarios.
    pub fn name(self) -> &'static str {
        ASSIGNMENTS.iter().find(|(_, a)| *a == self).map_or("random", |(n, _)| n)
    }
}

/// `[target]`'s model mix, set on `target` (its `model` becomes the first name), or nothing.
pub(super) fn apply(c: &Checker, t: &raw::RawTarget, target: &mut Target) -> Result<(), ScenarioError> {
    let Some(list) = &t.models else {
        for (key, set) in [
            ("target.model_assignment", t.model_assignment.is_some()),
            ("target.model_zipf_exponent", t.model_zipf_exponent.is_some()),
        ] {
            if set {
                return Err(c.err(
                    key,
                    "is set but there is no model mix",
                    "list the models in target.models = [{ name = \"base\", weight = 3 }, { name = \"sql-lora\", weight = 1 }], or remove the key",
                ));
            }
        }
        return Ok(());
    };
    if t.model.is_some() {
        return Err(c.err(
            "target.models",
            "is set together with target.model",
            "keep model for one model, or list every model in models (the first is used for the server check's default and the calibration probes) and remove model",
        ));
    }
    if !(1..=MAX_MODELS).contains(&list.len()) {
        return Err(c.err(
            "target.models",
            format!("lists {} models; a mix is 1 to {MAX_MODELS}", list.len()),
            "list at least one model, e.g. models = [{ name = \"base\" }, { name = \"sql-lora\" }]",
        ));
    }
    let assignment = match t.model_assignment.as_deref() {
        None => Assignment::default(),
        Some(name) => ASSIGNMENTS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).ok_or_else(|| {
            c.err(
                "target.model_assignment",
                format!("unknown assignment {name:?}"),
                "use \"random\" (the default), \"round_robin\" or \"zipf\"",
            )
        })?,
    };
    let mut names: Vec<String> = Vec::with_capacity(list.len());
    let mut weights = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let key = format!("target.models[{i}]");
        let name = m.name.trim();
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(c.err(
                &format!("{key}.name"),
                "is empty or holds a control character",
                "give the name the server lists in /models, e.g. name = \"sql-lora\"",
            ));
        }
        if let Some(first) = names.iter().position(|n| n == name) {
            return Err(c.err(
                &format!("{key}.name"),
                format!("{name:?} is listed twice (also target.models[{first}])"),
                "list each model once; give it a larger weight to send it more",
            ));
        }
        let weight = match m.weight {
            None => 1,
            Some(_) if assignment == Assignment::Zipf => {
                return Err(c.err(
                    &format!("{key}.weight"),
                    "is set with model_assignment = \"zipf\", whose shares follow from the list order and model_zipf_exponent",
                    "remove the weights (order the list from the most to the least used), or use \"random\" or \"round_robin\"",
                ));
            }
            Some(w) if (1..=1_000_000).contains(&w) => w as u64,
            Some(w) => {
                return Err(c.err(
                    &format!("{key}.weight"),
                    format!("{w} is not a usable weight"),
                    "a whole number from 1 to 1000000 (its share is weight / sum of the weights); remove the model to send it nothing",
                ));
            }
        };
        names.push(name.to_string());
        weights.push(weight);
    }
    let zipf_exponent = match (assignment, t.model_zipf_exponent) {
        (Assignment::Zipf, None) => Some(1.0),
        (Assignment::Zipf, Some(s)) if s.is_finite() && (0.0..=10.0).contains(&s) => Some(s),
        (Assignment::Zipf, Some(s)) => {
            return Err(c.err(
                "target.model_zipf_exponent",
                format!("{s} is out of range"),
                "a number from 0 (uniform) to 10; 1 is the classic Zipf",
            ));
        }
        (_, Some(_)) => {
            return Err(c.err(
                "target.model_zipf_exponent",
                "is set but target.model_assignment is not \"zipf\"",
                "set model_assignment = \"zipf\", or remove the exponent",
            ));
        }
        (_, None) => None,
    };
    let raw_shares: Vec<f64> = match zipf_exponent {
        Some(s) => (1..=names.len()).map(|rank| 1.0 / (rank as f64).powf(s)).collect(),
        None => weights.iter().map(|w| *w as f64).collect(),
    };
    let total: f64 = raw_shares.iter().sum();
    let shares = raw_shares.iter().map(|w| w / total).collect();
    target.model = names[0].clone();
    target.model_named = true;
    target.models = Some(ModelMix { names, shares, weights, assignment, zipf_exponent });
    Ok(())
}

/// `load.reset_cache`: which engine's cache reset is called before each level.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CacheReset {
    /// No reset (the default): levels are kept apart by their prompts' salt only.
    #[default]
    None,
    /// vLLM: `POST /reset_prefix_cache` (a development endpoint: `VLLM_SERVER_DEV_MODE=1`).
    Vllm,
    /// SGLang: `POST /flush_cache`.
    Sglang,
    /// llama.cpp: `GET /slots`, then `POST /slots/{id}?action=erase` for each slot.
    Llamacpp,
}

const RESETS: [(&str, CacheReset); 4] = [
    ("none", CacheReset::None),
    ("vllm", CacheReset::Vllm),
    ("sglang", CacheReset::Sglang),
    ("llamacpp", CacheReset::Llamacpp),
];

impl CacheReset {
    pub fn is_none(&self) -> bool {
        *self == CacheReset::None
    }

    /// The name written in scenarios and artifacts.
    pub fn name(self) -> &'static str {
        RESETS.iter().find(|(_, r)| *r == self).map_or("none", |(n, _)| n)
    }
}

/// `load.reset_cache`.
pub(super) fn reset_cache(c: &Checker, value: Option<&str>, target: &Target) -> Result<CacheReset, ScenarioError> {
    let Some(name) = value else { return Ok(CacheReset::None) };
    let reset = RESETS.iter().find(|(n, _)| *n == name).map(|(_, r)| *r).ok_or_else(|| {
        c.err(
            "load.reset_cache",
            format!("unknown reset {name:?}"),
            "use \"vllm\" (POST /reset_prefix_cache), \"sglang\" (POST /flush_cache), \"llamacpp\" (every slot erased) or \"none\" (the default)",
        )
    })?;
    if !reset.is_none() && target.unix_socket.is_some() {
        return Err(c.err(
            "load.reset_cache",
            "cannot be used with target.unix_socket",
            "remove reset_cache, or reach the server over TCP with base_url",
        ));
    }
    Ok(reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(assignment: Assignment, weights: &[u64]) -> ModelMix {
        let total: u64 = weights.iter().sum();
        ModelMix {
            names: (0..weights.len()).map(|i| format!("m{i}")).collect(),
            shares: weights.iter().map(|w| *w as f64 / total as f64).collect(),
            weights: weights.to_vec(),
            assignment,
            zipf_exponent: None,
        }
    }

    #[test]
    fn round_robin_follows_the_weights_exactly() {
        let m = mix(Assignment::RoundRobin, &[3, 1]);
        let picks: Vec<usize> = (0..8).map(|i| m.pick(7, i)).collect();
        assert_eq!(picks, [0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn random_draws_follow_the_shares_and_the_seed() {
        let m = mix(Assignment::Random, &[3, 1]);
        let n = 20_000;
        let ones = (0..n).filter(|i| m.pick(1, *i) == 1).count() as f64 / n as f64;
        assert!((ones - 0.25).abs() < 0.02, "{ones}");
        assert_eq!(
            (0..50).map(|i| m.pick(1, i)).collect::<Vec<_>>(),
            (0..50).map(|i| m.pick(1, i)).collect::<Vec<_>>()
        );
        assert_ne!(
            (0..50).map(|i| m.pick(1, i)).collect::<Vec<_>>(),
            (0..50).map(|i| m.pick(2, i)).collect::<Vec<_>>()
        );
    }
}
