//! `target.dialect = "azure"`: Azure OpenAI's own URL shape and key header.
//!
//! Two forms of `target.base_url`:
//! - the resource endpoint, `https://NAME.openai.azure.com` (or `…/openai`): requests go to the
//!   deployment, `{base}/openai/deployments/{model}/chat/completions?api-version=…`, the model
//!   being the deployment's name; `api-version` defaults to [`API_VERSION`] (the current GA
//!   version of the inference API) when neither `target.query` nor the URL gives one;
//! - the v1 API root, `https://NAME.openai.azure.com/openai/v1`: requests go to
//!   `{base}/chat/completions` with the deployment's name as the body's `model`, and no
//!   `api-version` is needed (one given is sent).
//!
//! The key (`target.api_key_env`) goes in the `api-key` header, not `Authorization: Bearer`.
//! A deployment has no `/models`: the model must be named (the server check's 404 is expected).
//! Only chat, completions and embeddings are served this way.

use super::ScenarioError;
use super::checker::Checker;
use super::headers::NamedValues;
use super::target::Api;

/// The `api-version` sent to a deployment when none is given: the latest GA version of Azure
/// OpenAI's data-plane inference API.
pub const API_VERSION: &str = "2024-10-21";

/// The API root requests of the azure dialect go under: the deployment's (with `api-version`
/// when none is given) or the v1 root as given. `raw` is the base URL as written, `normalized`
/// what `url_rules::base_url` made of it.
pub(super) fn base_url(
    c: &Checker,
    raw: &str,
    normalized: &str,
    model: Option<&str>,
    api: Api,
    query: &NamedValues,
) -> Result<String, ScenarioError> {
    if !matches!(api, Api::Chat | Api::Completions | Api::Embeddings) {
        return Err(c.err(
            "target.api",
            format!("{:?} is not served by Azure OpenAI deployments in the azure dialect", api.name()),
            "use api = \"chat\", \"completions\" or \"embeddings\", or another dialect",
        ));
    }
    let Some(model) = model else {
        return Err(c.err(
            "target.model",
            "is not set: the azure dialect sends each request to a deployment, named by the model, and Azure lists no deployments to choose from",
            "name the deployment: model = \"my-gpt-4o\" in [target], or --model NAME",
        ));
    };
    let (root, base_query) = normalized.split_once('?').map_or((normalized, None), |(r, q)| (r, Some(q)));
    let written_path = raw
        .trim_matches(' ')
        .split_once("://")
        .map_or("", |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p))
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_matches('/');
    let root = match written_path {
        "openai/v1" => return Ok(normalized.to_string()),
        "" => root.strip_suffix("/v1").unwrap_or(root),
        "openai" => root.strip_suffix("/openai").unwrap_or(root),
        _ => {
            return Err(c.err(
                "target.base_url",
                "with the azure dialect, the base URL is the resource's endpoint or its v1 API root",
                "write base_url = \"https://NAME.openai.azure.com\" (the deployment path follows from target.model) or \"https://NAME.openai.azure.com/openai/v1\"",
            ));
        }
    };
    if model.is_empty()
        || model == "."
        || model == ".."
        || !model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(c.err(
            "target.model",
            format!("{:?} is not a deployment name", super::url_rules::escaped(model)),
            "a deployment name is letters, digits, -, _ and . (the name given when the model was deployed)",
        ));
    }
    let mut url = format!("{root}/openai/deployments/{model}");
    let has_version = |q: &str| q.split('&').any(|p| p.split_once('=').map_or(p, |(n, _)| n) == "api-version");
    match base_query {
        Some(q) => url = format!("{url}?{q}"),
        None if !query.has("api-version") => url = format!("{url}?api-version={API_VERSION}"),
        None => {}
    }
    if base_query.is_some_and(|q| !has_version(q)) && !query.has("api-version") {
        url = format!("{url}&api-version={API_VERSION}");
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn root(raw: &str, model: Option<&str>, query: &NamedValues) -> Result<String, String> {
        let path = Path::new("s.toml");
        let c = Checker::new(path);
        let normalized = super::super::url_rules::base_url(&c, raw).map_err(|e| e.to_string())?;
        base_url(&c, raw, &normalized, model, Api::Chat, query).map_err(|e| e.to_string())
    }

    #[test]
    fn the_resource_endpoint_becomes_the_deployments_root_with_a_version() {
        let none = NamedValues::default();
        let want = format!("https://r.openai.azure.com/openai/deployments/gpt-4o?api-version={API_VERSION}");
        assert_eq!(root("https://r.openai.azure.com", Some("gpt-4o"), &none), Ok(want.clone()));
        assert_eq!(root("https://r.openai.azure.com/", Some("gpt-4o"), &none), Ok(want.clone()));
        assert_eq!(root("https://r.openai.azure.com/openai", Some("gpt-4o"), &none), Ok(want));
        assert_eq!(
            root("https://r.openai.azure.com?api-version=2025-01-01-preview", Some("d"), &none),
            Ok("https://r.openai.azure.com/openai/deployments/d?api-version=2025-01-01-preview".into())
        );
        assert_eq!(
            root("https://r.openai.azure.com?x=1", Some("d"), &none),
            Ok(format!("https://r.openai.azure.com/openai/deployments/d?x=1&api-version={API_VERSION}"))
        );
        let mut version = NamedValues::default();
        version.push("api-version".into(), "2024-06-01".into(), false);
        assert_eq!(
            root("https://r.openai.azure.com", Some("d"), &version),
            Ok("https://r.openai.azure.com/openai/deployments/d".into())
        );
    }

    #[test]
    fn the_v1_root_is_kept_and_other_paths_and_names_are_refused() {
        let none = NamedValues::default();
        assert_eq!(
            root("https://r.openai.azure.com/openai/v1/", Some("d"), &none),
            Ok("https://r.openai.azure.com/openai/v1".into())
        );
        for raw in ["https://r.openai.azure.com/v1", "https://r.openai.azure.com/openai/deployments/d"] {
            assert!(root(raw, Some("d"), &none).is_err_and(|e| e.contains("target.base_url")), "{raw}");
        }
        assert!(root("https://r.openai.azure.com", None, &none).is_err_and(|e| e.contains("target.model")));
        for model in ["a/b", "..", "a b", ""] {
            assert!(root("https://r.openai.azure.com", Some(model), &none).is_err(), "{model:?}");
        }
    }
}
