//! Meeting the server where it is, before any load: which model to ask for (the scenario's, or
//! the one the server's `/models` lists), and a stop when every sizing probe is refused the same
//! way (a wrong model name or key would fail every request of the level the same way).

use super::AppError;
use super::setup::Listing;
use crate::plan::scenario::Scenario;
use crate::redact::Secrets;
use crate::request::record::SizingRecord;
use crate::request::record::run_info::{ModelNotListed, ModelSource};

/// Ids a message shows at most.
const MODELS_SHOWN: usize = 8;

/// The model the run asks for, decided from the server's `/models`:
/// - the scenario's model, when the list names it (or the list is unavailable and it was named);
/// - the one listed, when the list names exactly one and the scenario names another or none
///   (said on the console, and returned for the artifact);
/// - exit 2 when it lists several and none is named or the named one is not listed, or when
///   nothing is named and there is no list to choose from.
///
/// Every id shown goes through the sanitizer; an id the sanitizer would change (control
/// characters, a secret, a megabyte) is never sent or written: the user names the model instead.
pub(super) fn choose_model(
    scenario: &mut Scenario,
    listing: Listing,
    secrets: &Secrets,
) -> Result<Option<ModelSource>, AppError> {
    let target = &mut scenario.target;
    let named = target.model_named.then(|| target.model.clone());
    let ids = match listing {
        Listing::Unavailable(why) => {
            return match named {
                // A deployment has no /models (a 404 is its normal answer).
                Some(_) if target.dialect == crate::plan::scenario::Dialect::Azure => {
                    eprintln!(
                        "note: {why}; Azure OpenAI lists no models for a deployment: continuing with target.model"
                    );
                    Ok(None)
                }
                Some(_) => {
                    eprintln!("warning: {why}; continuing with target.model");
                    Ok(None)
                }
                None => Err(AppError::BadInput(format!(
                    "no model named, and the server lists none to choose from ({why})\n  fix: give the model the server serves with --model NAME (or target.model in the scenario)"
                ))),
            };
        }
        Listing::Listed(ids) => ids,
    };
    if let Some(model) = &named {
        if ids.is_empty() || ids.contains(model) {
            return Ok(None);
        }
    }
    let shown: Vec<String> = ids.iter().take(MODELS_SHOWN).map(|id| secrets.field(id)).collect();
    let listed = ModelNotListed { more: (ids.len() - shown.len()) as u64, listed: shown };
    match ids.as_slice() {
        [] => Err(AppError::BadInput(
            "no model named, and the server's /models list is empty\n  fix: give the model the server serves with --model NAME (or target.model in the scenario)".into(),
        )),
        [only] if secrets.field(only) == *only => {
            let because = match &named {
                Some(model) => format!("instead of {:?}, which it does not list", secrets.field(model)),
                None => "the scenario names none".to_string(),
            };
            eprintln!("model: {only:?}, the one model the server lists ({because}); --model NAME chooses another");
            target.model = only.clone();
            Ok(Some(ModelSource { source: "server_models_list".into(), instead_of: named.map(|m| secrets.field(&m)) }))
        }
        _ => {
            let problem = match &named {
                Some(model) => listed.message(model),
                None if ids.len() == 1 => format!(
                    "no model named, and the one model the server lists has a name that cannot be used as it is ({:?})",
                    listed.listed.first().map_or("", String::as_str)
                ),
                None => format!(
                    "no model named, and the server lists several: {}",
                    listed.listed.iter().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
                        + &if listed.more > 0 { format!(" and {} more", listed.more) } else { String::new() }
                ),
            };
            Err(AppError::BadInput(format!(
                "{problem}\n  fix: name one with --model NAME (or target.model in the scenario); nothing was run"
            )))
        }
    }
}

/// When every sizing probe was refused with the same 4xx status, every request of the level
/// would be too: the error to stop with (the status, the server's sanitized message, the likely
/// fix). `None` when any probe got through or the failures differ.
pub(super) fn probes_refused(sizing: &SizingRecord, model: &str) -> Option<AppError> {
    let errors: Vec<&str> = sizing.probes.iter().map(|p| p.error.as_deref()).collect::<Option<Vec<_>>>()?;
    let first = *errors.first()?;
    let status: u16 = first.strip_prefix("HTTP ")?.get(..3)?.parse().ok()?;
    if !(400..500).contains(&status) || errors.iter().any(|e| e.get(..8) != first.get(..8)) {
        return None;
    }
    let fix = match status {
        404 => format!(
            "check the model name (--model NAME; the run asked for {model:?}) and --base-url (it ends in the API root, e.g. /v1)"
        ),
        401 | 403 => "check the API key: --api-key-env VAR names the environment variable holding it".to_string(),
        400 | 422 => {
            "the server refuses the request's shape: check target.api, target.dialect and target.extra_body".to_string()
        }
        429 => "the server is rate-limiting this client: wait, or raise its limit".to_string(),
        _ => "check the server's log for why it refuses the requests".to_string(),
    };
    Some(AppError::BadInput(format!(
        "every prompt-sizing probe was refused ({} of {}: {first}); the level would fail the same way, so nothing was run\n  fix: {fix}",
        errors.len(),
        errors.len()
    )))
}
