//! Several models in one run (`target.models`): the request body of each model (its `model`
//! field), and which model a request names. The model is a pure function of the run's seed and
//! a key — the request index, or the conversation's index for every turn of a conversation, or
//! a trace session's id — so a conversation keeps its model on every turn, and request `i` names
//! the same model whichever worker prepares it.

use crate::plan::scenario::{ModelMix, Scenario};
use crate::request::openai::RequestParams;
use crate::request::record::ReplayFacts;

/// The mix and one set of body parameters per model, in the mix's order.
#[derive(Debug)]
pub(super) struct Models {
    mix: ModelMix,
    params: Vec<RequestParams>,
}

impl Models {
    /// The scenario's mix, or `None` with one model.
    pub(super) fn new(scenario: &Scenario, base: &RequestParams) -> Option<Models> {
        let mix = scenario.target.models.clone()?;
        let params = mix.names.iter().map(|name| RequestParams { model: name.clone(), ..base.clone() }).collect();
        Some(Models { mix, params })
    }
}

impl super::Workload {
    /// The model (index in the mix) of key `key`; `None` with one model.
    fn model_index(&self, key: u64) -> Option<usize> {
        let m = self.models.as_deref()?;
        Some(m.mix.pick(self.seed, key).min(m.params.len().saturating_sub(1)))
    }

    /// The body parameters of key `key`'s model.
    pub(super) fn params_at(&self, key: u64) -> &RequestParams {
        match (self.models.as_deref(), self.model_index(key)) {
            (Some(m), Some(i)) => m.params.get(i).unwrap_or(&self.params),
            _ => &self.params,
        }
    }

    /// The name of key `key`'s model, recorded with the request; `None` with one model.
    pub(super) fn model_at(&self, key: u64) -> Option<String> {
        let i = self.model_index(key)?;
        self.models.as_deref()?.mix.names.get(i).cloned()
    }

    /// Names key `key`'s model in a request's facts (created when the request had none).
    pub(super) fn name_model(&self, replay: &mut Option<Box<ReplayFacts>>, key: u64) {
        if let Some(model) = self.model_at(key) {
            replay.get_or_insert_with(Box::default).model = Some(model);
        }
    }
}

/// The key of a trace row: its session's id when it has one (every turn of a trace session
/// names one model), else its index.
pub(super) fn trace_key(session: Option<&str>, index: u64) -> u64 {
    match session {
        Some(s) => s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)),
        None => index,
    }
}
