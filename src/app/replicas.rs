//! Several replicas (`target.base_urls`) before the run: every replica is checked as the one
//! server of a plain run is (reachable, speaking the run's protocol), and each must list the
//! model the run asks for when the first one's list names it. A replica that fails stops the run
//! before any load (exit 1), named by its index and its URL without credentials.

use super::AppError;
use super::setup::{self, Listing};
use crate::plan::scenario::{Scenario, with_query};
use crate::redact::redact_url;
use crate::request::worker::credentials::Credentials;

/// The first replica's listing (for `meet::choose_model`), and every other replica's, in order
/// (none without replicas). A replica that cannot be reached stops here.
pub(super) async fn preflight(
    first: &str,
    scenario: &Scenario,
    key: &Credentials,
) -> Result<(Listing, Vec<Listing>), AppError> {
    let Some(replicas) = &scenario.target.replicas else {
        return Ok((setup::preflight(first, scenario, key).await?, Vec::new()));
    };
    let mut listings = Vec::with_capacity(replicas.base_urls.len());
    for (i, url) in replicas.base_urls.iter().enumerate() {
        listings.push(
            setup::preflight(&with_query(url, &scenario.target.query), scenario, key)
                .await
                .map_err(|e| named(i, url, e))?,
        );
    }
    let first = listings.remove(0);
    Ok((first, listings))
}

/// After the model is chosen: every other replica must list it where it lists models at all, and
/// must list models where the first replica did.
pub(super) fn check_models(scenario: &Scenario, others: Vec<Listing>) -> Result<(), AppError> {
    let Some(replicas) = &scenario.target.replicas else { return Ok(()) };
    let model = &scenario.target.model;
    let secrets = scenario.secrets();
    for (i, listing) in others.into_iter().enumerate() {
        let i = i + 1;
        let url = &replicas.base_urls[i];
        let problem = match listing {
            Listing::Listed(ids) if ids.is_empty() || ids.contains(model) => continue,
            Listing::Listed(_) => format!("its /models does not list the model {}", secrets.field(model)),
            Listing::Unavailable(why) => {
                eprintln!(
                    "warning: replica {i} ({}): {why}; continuing with the model {}",
                    redact_url(url),
                    secrets.field(model)
                );
                continue;
            }
        };
        return Err(AppError::Aborted(format!(
            "replica {i} of target.base_urls ({}): {problem}; every replica must serve the model the run asks for. Fix or remove that replica",
            redact_url(url)
        )));
    }
    Ok(())
}

/// A replica's failed check, named by its index and URL.
fn named(i: usize, url: &str, e: AppError) -> AppError {
    let say = |m: String| format!("replica {i} of target.base_urls ({}): {m}", redact_url(url));
    match e {
        AppError::BadInput(m) => AppError::BadInput(say(m)),
        AppError::Aborted(m) => AppError::Aborted(say(m)),
    }
}
