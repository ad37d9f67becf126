//! Validation of what each `target.api` can carry: keys that belong to one API only, and the
//! combinations an API cannot honour (canaries on embeddings, token ids without a tokenizer,
//! calibration probes on APIs they do not speak). Runs once the other sections are typed.

use super::checker::Checker;
use super::raw::RawScenario;
use super::{
    Api, OutputControl, PromptEncoding, PromptSource, ScenarioError, ServeFlags, SizingMode, Target, Workload,
};

/// Most inputs (embeddings) or documents (rerank) one request may carry.
pub const MAX_BATCH_SIZE: i64 = 1024;

pub(super) fn check(
    c: &Checker,
    raw: &RawScenario,
    target: &Target,
    workload: &mut Workload,
    output: &OutputControl,
    serve: &ServeFlags,
) -> Result<(), ScenarioError> {
    let api = target.api;
    let name = api.name();
    if let Some(version) = &target.anthropic_version {
        if api != Api::Messages {
            return Err(c.err(
                "target.anthropic_version",
                format!("is the anthropic-version header of the Messages API; target.api = \"{name}\" never sends it"),
                "remove it, or use target.api = \"messages\"",
            ));
        }
        if version.trim().is_empty() || reqwest::header::HeaderValue::from_str(version).is_err() {
            return Err(c.err(
                "target.anthropic_version",
                "is empty or holds characters an HTTP header cannot carry",
                "give the version string, e.g. anthropic_version = \"2023-06-01\"",
            ));
        }
    }
    if target.continuous_usage_stats && !api.has_probes() {
        return Err(c.err(
            "target.continuous_usage_stats",
            format!(
                "is a stream_options field of chat and completions requests; target.api = \"{name}\" never sends it"
            ),
            "remove it",
        ));
    }
    batch_size(c, raw, api, workload)?;
    prompt_encoding(c, raw, api, workload)?;
    if !api.has_probes() {
        no_probes(c, raw, api, workload)?;
    }
    if api == Api::Messages && serve.reasoning_effort.is_some() {
        return Err(c.err(
            "serve.reasoning_effort",
            "has no field in the Messages API, so nothing would be sent",
            "remove it, or use target.api = \"chat\" or \"responses\"",
        ));
    }
    if !api.streams_text() {
        not_generating(c, raw, name, workload, output, serve)?;
    }
    Ok(())
}

/// Checked first, before the pacing rules of traces and conversations: embeddings and rerank
/// inputs are drawn prompts, never a file, a trace or a conversation.
pub(super) fn check_sources(c: &Checker, raw: &RawScenario, target: &Target) -> Result<(), ScenarioError> {
    if target.api.streams_text() {
        return Ok(());
    }
    let w = &raw.workload;
    let key = if w.sessions.is_some() {
        "workload.sessions"
    } else if w.trace.is_some() {
        "workload.trace"
    } else if w.prompts.is_some() {
        "workload.prompts"
    } else {
        return Ok(());
    };
    Err(c.err(
        key,
        format!(
            "target.api = \"{}\" answers with vectors or scores, no text: its inputs are drawn prompts of workload.context_tokens",
            target.api.name()
        ),
        "use context_tokens (and batch_size for several inputs per request)",
    ))
}

/// `workload.batch_size`: embeddings and rerank only, 1 by default.
fn batch_size(c: &Checker, raw: &RawScenario, api: Api, workload: &mut Workload) -> Result<(), ScenarioError> {
    const KEY: &str = "workload.batch_size";
    match (raw.workload.batch_size, api.streams_text()) {
        (Some(_), true) => Err(c.err(
            KEY,
            format!("applies to target.api = \"embeddings\" (inputs per request) or \"rerank\" (documents per request), not \"{}\"", api.name()),
            "remove it",
        )),
        (Some(n), false) if !(1..=MAX_BATCH_SIZE).contains(&n) => Err(c.err(
            KEY,
            format!("{n} is outside 1–{MAX_BATCH_SIZE}"),
            "give the number of inputs (embeddings) or documents (rerank) per request, e.g. batch_size = 8",
        )),
        (n, false) => {
            // In range: checked just above.
            workload.batch_size = Some(n.unwrap_or(1) as u32);
            Ok(())
        }
        (None, true) => Ok(()),
    }
}

/// `workload.prompt_encoding = "token_ids"`: completions with a local tokenizer and drawn prompts.
fn prompt_encoding(c: &Checker, raw: &RawScenario, api: Api, workload: &mut Workload) -> Result<(), ScenarioError> {
    const KEY: &str = "workload.prompt_encoding";
    if raw.workload.prompt_encoding != Some(PromptEncoding::TokenIds) {
        return Ok(());
    }
    if api != Api::Completions {
        return Err(c.err(
            KEY,
            format!("\"token_ids\" sends prompt as an array of integers, which only /completions accepts; target.api is \"{}\"", api.name()),
            "use target.api = \"completions\", or remove prompt_encoding",
        ));
    }
    if !matches!(workload.sizing, SizingMode::Tokenizer { .. }) {
        return Err(c.err(
            KEY,
            "\"token_ids\" needs the model's tokenizer to turn prompts into ids, and workload.tokenizer names none",
            "set workload.tokenizer to the model's local tokenizer.json, or remove prompt_encoding",
        ));
    }
    if !matches!(workload.prompts, PromptSource::Synthetic { .. }) {
        return Err(c.err(
            KEY,
            "\"token_ids\" applies to drawn prompts (workload.context_tokens), not to prompts from a file, a trace or conversations",
            "use context_tokens, or remove prompt_encoding",
        ));
    }
    workload.prompt_encoding = PromptEncoding::TokenIds;
    Ok(())
}

/// Calibration probes are short chat or completions requests: other APIs size with the estimate
/// (the default for them) or a local tokenizer.
fn no_probes(c: &Checker, raw: &RawScenario, api: Api, workload: &mut Workload) -> Result<(), ScenarioError> {
    match (raw.workload.tokenizer.as_deref().map(str::trim), &workload.sizing) {
        (Some("calibrate"), _) => Err(c.err(
            "workload.tokenizer",
            format!(
                "\"calibrate\" probes the server with short chat or completions requests, which target.api = \"{}\" does not send",
                api.name()
            ),
            "use tokenizer = \"estimate\" or a path to the model's local tokenizer.json",
        )),
        (None, SizingMode::Calibrate) => {
            workload.sizing = SizingMode::Estimate;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Embeddings and rerank generate no text: nothing to check a canary against, no output to
/// control, no conversation to continue.
fn not_generating(
    c: &Checker,
    raw: &RawScenario,
    api: &str,
    workload: &mut Workload,
    output: &OutputControl,
    serve: &ServeFlags,
) -> Result<(), ScenarioError> {
    let nothing_streams = format!("target.api = \"{api}\" answers with vectors or scores, no text");
    if raw.workload.canaries == Some(true) {
        return Err(c.err(
            "workload.canaries",
            format!("{nothing_streams}, so no answer can be checked for its marker"),
            "remove canaries (they are off for this API)",
        ));
    }
    workload.canaries = false;
    let source = match &workload.prompts {
        PromptSource::Synthetic { .. } => None,
        PromptSource::Dataset(_) => Some("workload.prompts"),
        PromptSource::Trace(_) => Some("workload.trace"),
        PromptSource::Sessions(_) => Some("workload.sessions"),
    };
    if let Some(key) = source {
        return Err(c.err(
            key,
            format!("{nothing_streams}: its inputs are drawn prompts of workload.context_tokens"),
            "use context_tokens (and batch_size for several inputs per request)",
        ));
    }
    let output_key = if output.ignore_eos {
        Some("output.ignore_eos")
    } else if output.min_tokens.is_some() {
        Some("output.min_tokens")
    } else if output.response_words.is_some() {
        Some("output.response_words")
    } else if serve.reasoning_effort.is_some() {
        Some("serve.reasoning_effort")
    } else if raw.sampling.temperature.is_some() {
        Some("sampling.temperature")
    } else if raw.sampling.top_p.is_some() {
        Some("sampling.top_p")
    } else {
        None
    };
    if let Some(key) = output_key {
        return Err(c.err(key, format!("{nothing_streams}: there is no output to control"), "remove it"));
    }
    Ok(())
}
