//! Several models (`target.models`) before the run: every server (each replica) that lists its
//! models must list every model of the mix; the missing ones are named and the run stops before
//! any load (exit 1). A name spelled `BASE:ADAPTER` (SGLang's adapter spelling) whose base is
//! listed is let through with a note. A server without a list is warned about and trusted.

use super::AppError;
use super::setup::Listing;
use crate::plan::scenario::Scenario;
use crate::redact::redact_url;

/// Check the mix against the first server's listing and every other replica's.
pub(super) fn check_mix(
    scenario: &Scenario,
    base_url: &str,
    first: &Listing,
    others: &[Listing],
) -> Result<(), AppError> {
    let Some(mix) = &scenario.target.models else { return Ok(()) };
    let secrets = scenario.secrets();
    let urls: Vec<String> = match &scenario.target.replicas {
        Some(r) => r.base_urls.clone(),
        None => vec![base_url.to_string()],
    };
    for (i, listing) in std::iter::once(first).chain(others).enumerate() {
        let url = redact_url(urls.get(i).map_or("", String::as_str));
        let where_ = if urls.len() > 1 { format!("replica {i} ({url})") } else { format!("the server at {url}") };
        match listing {
            Listing::Listed(ids) if !ids.is_empty() => {
                // SGLang names an adapter `BASE:ADAPTER` in `model`; its /models lists the base.
                let adapter_of_listed =
                    |n: &String| n.rsplit_once(':').is_some_and(|(base, _)| ids.iter().any(|id| id == base));
                let unverified: Vec<String> = mix
                    .names
                    .iter()
                    .filter(|n| !ids.contains(n) && adapter_of_listed(n))
                    .map(|n| secrets.field(n))
                    .collect();
                if !unverified.is_empty() {
                    eprintln!(
                        "note: {where_} lists the base of {} (SGLang's BASE:ADAPTER spelling), not the adapter itself: a name it does not serve fails as requests run",
                        unverified.join(", ")
                    );
                }
                let missing: Vec<String> = mix
                    .names
                    .iter()
                    .filter(|n| !ids.contains(n) && !adapter_of_listed(n))
                    .map(|n| secrets.field(n))
                    .collect();
                if !missing.is_empty() {
                    let listed: Vec<String> = ids.iter().take(8).map(|n| secrets.field(n)).collect();
                    return Err(AppError::Aborted(format!(
                        "{where_} does not list {} of target.models in its /models ({}; it lists {}): a request naming it would fail. Load the adapter (vLLM --lora-modules NAME=PATH, SGLang --lora-paths NAME=PATH) or fix the name in target.models; nothing was sent",
                        missing.len(),
                        missing.join(", "),
                        listed.join(", ")
                    )));
                }
            }
            Listing::Listed(_) => {
                eprintln!("warning: {where_} lists no models: the names of target.models are not checked");
            }
            Listing::Unavailable(why) => {
                eprintln!("warning: {where_}: {why}; the names of target.models are not checked");
            }
        }
    }
    Ok(())
}
