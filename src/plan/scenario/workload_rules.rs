//! Validation of `[workload]` and `[output]`: context distributions, prompt sizing, prefix-cache
//! modes, dataset prompts, output control, and extra request fields.

use std::sync::Arc;

use super::bounds::fmt_number;
use super::checker::{CONTEXT_SANITY_LIMIT, Checker};
use super::raw;
use super::{
    ContextDistribution, ControlledOutputPolicy, Dialect, OutputControl, PromptCache, PromptEncoding, PromptSource,
    ScenarioError, ServeFlags, SizingMode, Target, ThinkingMode, Workload,
};

/// Smallest context a synthetic prompt can be sized to (instructions and markers need room).
pub const MIN_CONTEXT_TOKENS: u32 = 64;

pub(super) fn workload(c: &Checker, w: &raw::RawWorkload, seed: u64) -> Result<Workload, ScenarioError> {
    let max_context = w.max_context_tokens;
    if !(1..=CONTEXT_SANITY_LIMIT).contains(&max_context) {
        return Err(c.err(
            "workload.max_context_tokens",
            format!("{max_context} is not a plausible context window"),
            "set the server's context length, e.g. max_context_tokens = 131072",
        ));
    }
    if !(1..=max_context).contains(&w.max_tokens) {
        return Err(c.err(
            "workload.max_tokens",
            format!("{} must be between 1 and max_context_tokens ({max_context})", w.max_tokens),
            "set the output budget per request, e.g. max_tokens = 1024",
        ));
    }
    // Both fit in u32: checked against the sanity limit above.
    let (max_context, max_tokens) = (max_context as u32, w.max_tokens as u32);
    let prompt_cache = prompt_cache(c, w)?;
    let prompts = if let Some(sessions) = &w.sessions {
        super::session_rules::source(c, sessions, w, (max_context, max_tokens))?
    } else if let Some(trace) = &w.trace {
        super::trace_rules::source(c, trace, w, (max_context, max_tokens), seed)?
    } else {
        prompts(c, w, prompt_cache.shared_prefix_tokens(), (max_context, max_tokens))?
    };
    Ok(Workload {
        prompts,
        max_context_tokens: max_context,
        max_tokens,
        sizing: sizing(c, w.tokenizer.as_deref())?,
        prompt_cache,
        // Neither a JSON answer (structured output) nor a tool call can begin with a marker:
        // canaries are off by default with either.
        canaries: w.canaries.unwrap_or(w.response_format.is_none() && w.tools.is_none()),
        batch_size: None,
        prompt_encoding: PromptEncoding::Text,
        response_format: None,
        tools: None,
        media: None,
    })
}

/// Single prompts: drawn from a context distribution, or read from a dataset file.
fn prompts(
    c: &Checker,
    w: &raw::RawWorkload,
    shared: u32,
    (max_context, max_tokens): (u32, u32),
) -> Result<PromptSource, ScenarioError> {
    match (&w.prompts, &w.context_tokens) {
        (Some(_), Some(_)) => Err(c.err(
            "workload.context_tokens",
            "does not apply to dataset prompts (workload.prompts): they are sent at their own length",
            "remove one of workload.context_tokens and workload.prompts",
        )),
        (None, None) => Err(c.err(
            "workload.context_tokens",
            "is missing: give a planned context, or workload.prompts for prompts from a file",
            "add e.g. context_tokens = 4096",
        )),
        (Some(file), None) => {
            let path = c.path("workload.prompts", file);
            let dataset = super::dataset::load(&path).map_err(|(e, fix)| {
                c.err(
                    "workload.prompts",
                    format!("{}: {e}", path.display()),
                    fix.unwrap_or("give a JSON Lines file (one prompt per line) or a ShareGPT-style JSON array"),
                )
            })?;
            check_shared_prefix_fits(c, shared, max_context, max_tokens)?;
            Ok(PromptSource::Dataset(Arc::new(dataset)))
        }
        (None, Some(value)) => {
            let context = context_distribution(c, value, max_context - max_tokens)?;
            check_contexts_fit(c, &context, max_context, max_tokens, shared)?;
            Ok(PromptSource::Synthetic { context })
        }
    }
}

fn sizing(c: &Checker, value: Option<&str>) -> Result<SizingMode, ScenarioError> {
    const KEY: &str = "workload.tokenizer";
    match value.map(str::trim) {
        None | Some("calibrate") => Ok(SizingMode::Calibrate),
        Some("estimate") => Ok(SizingMode::Estimate),
        Some("") => Err(c.err(KEY, "is empty", "use \"calibrate\", \"estimate\" or a path to a tokenizer.json")),
        Some(file) => {
            let path = c.path(KEY, file);
            let read = crate::sys::read_input(&path).map_err(tokenizers::Error::from);
            let tokenizer = read.and_then(tokenizers::Tokenizer::from_bytes).map_err(|e| {
                c.err(
                    KEY,
                    format!("cannot load the tokenizer {}: {e}", path.display()),
                    "give a local Hugging Face tokenizer.json (nothing is downloaded), or \"calibrate\"",
                )
            })?;
            Ok(SizingMode::Tokenizer { path, tokenizer: Arc::new(tokenizer) })
        }
    }
}

fn prompt_cache(c: &Checker, w: &raw::RawWorkload) -> Result<PromptCache, ScenarioError> {
    let reproducible = w.reproducible.unwrap_or(false);
    match w.prompt_cache {
        raw::RawPromptCache::Unique => {
            for (key, set) in [
                ("workload.shared_prefix_tokens", w.shared_prefix_tokens.is_some()),
                ("workload.shared_prefix_burst", w.shared_prefix_burst.is_some()),
            ] {
                if set {
                    return Err(c.err(
                        key,
                        "only applies with prompt_cache = \"shared-prefix\"",
                        "set prompt_cache = \"shared-prefix\", or remove the key",
                    ));
                }
            }
            Ok(PromptCache::Unique { reproducible })
        }
        raw::RawPromptCache::SharedPrefix => {
            let tokens = w.shared_prefix_tokens.ok_or_else(|| {
                c.err(
                    "workload.shared_prefix_tokens",
                    "is required with prompt_cache = \"shared-prefix\"",
                    "add e.g. shared_prefix_tokens = 4096",
                )
            })?;
            if !(1..=CONTEXT_SANITY_LIMIT).contains(&tokens) {
                return Err(c.err(
                    "workload.shared_prefix_tokens",
                    format!("{tokens} is not a usable prefix length"),
                    "use a positive token count below the context",
                ));
            }
            Ok(PromptCache::SharedPrefix {
                tokens: tokens as u32,
                burst: w.shared_prefix_burst.unwrap_or(false),
                reproducible,
            })
        }
    }
}

/// Dataset prompts are sent at their own length, but the shared prefix in front of each is the
/// scenario's: it alone (with room for a prompt and the output reserve) must fit the window.
fn check_shared_prefix_fits(c: &Checker, shared: u32, max_context: u32, max_tokens: u32) -> Result<(), ScenarioError> {
    if shared == 0 {
        return Ok(());
    }
    let need = u64::from(shared) + u64::from(MIN_CONTEXT_TOKENS) + u64::from(max_tokens);
    if need > u64::from(max_context) {
        return Err(c.err(
            "workload.shared_prefix_tokens",
            format!(
                "a {shared}-token shared prefix, at least {MIN_CONTEXT_TOKENS} tokens of prompt and workload.max_tokens {max_tokens}{} do not fit in max_context_tokens ({max_context})",
                c.origin("workload.max_tokens")
            ),
            format!(
                "keep shared_prefix_tokens at or below {}, or raise max_context_tokens to the server's real context window",
                u64::from(max_context).saturating_sub(u64::from(MIN_CONTEXT_TOKENS) + u64::from(max_tokens))
            ),
        ));
    }
    Ok(())
}

fn check_contexts_fit(
    c: &Checker,
    context: &ContextDistribution,
    max_context: u32,
    max_tokens: u32,
    shared: u32,
) -> Result<(), ScenarioError> {
    const KEY: &str = "workload.context_tokens";
    let sizes: Vec<u32> = match context {
        ContextDistribution::Weighted { choices } => choices.iter().map(|c| c.0).collect(),
        ContextDistribution::Uniform { lo, hi } => vec![*lo, *hi],
        ContextDistribution::Normal { min, max, .. } => vec![*min, *max],
    };
    for tokens in sizes {
        if tokens > max_context {
            return Err(c.err(
                KEY,
                format!("planned context {tokens} is above workload.max_context_tokens ({max_context})"),
                "lower the context or raise max_context_tokens to the server's real context window",
            ));
        }
        if u64::from(tokens) + u64::from(max_tokens) > u64::from(max_context) {
            return Err(c.err(
                KEY,
                format!(
                    "planned context {tokens} plus workload.max_tokens {max_tokens}{} does not fit in max_context_tokens ({max_context})",
                    c.origin("workload.max_tokens")
                ),
                format!("keep every context at or below {} or lower max_tokens", max_context - max_tokens),
            ));
        }
        if shared > 0 && tokens < shared + MIN_CONTEXT_TOKENS {
            return Err(c.err(
                KEY,
                format!(
                    "planned context {tokens} leaves no room for a unique tail after the {shared}-token shared prefix"
                ),
                format!("keep every context at or above {}", shared + MIN_CONTEXT_TOKENS),
            ));
        }
    }
    Ok(())
}

fn context_distribution(
    c: &Checker,
    value: &toml::Value,
    clamp_max: u32,
) -> Result<ContextDistribution, ScenarioError> {
    const KEY: &str = "workload.context_tokens";
    const FIX: &str =
        "write one size (8192), weights ({ 4096 = 3, 65536 = 1 }), { uniform = [lo, hi] } or { normal = [mean, sd] }";
    // Sizes arrive as TOML integers or (inside uniform/normal lists) as numbers: checked as
    // numbers so that 1e300 is reported as 1e300, not as a saturated integer.
    let check_size = |key: &str, tokens: f64| -> Result<u32, ScenarioError> {
        if !(f64::from(MIN_CONTEXT_TOKENS)..=CONTEXT_SANITY_LIMIT as f64).contains(&tokens) || tokens.fract() != 0.0 {
            return Err(c.err(
                key,
                format!(
                    "{} is not a usable context size (a whole number from {MIN_CONTEXT_TOKENS} to {CONTEXT_SANITY_LIMIT})",
                    fmt_number(tokens)
                ),
                FIX,
            ));
        }
        Ok(tokens as u32)
    };
    let pair = |key: &str, v: &toml::Value| -> Result<(f64, f64), ScenarioError> {
        match v.as_array().map(Vec::as_slice) {
            Some([a, b]) => match (number(a), number(b)) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(c.err(key, "must hold two numbers", FIX)),
            },
            _ => Err(c.err(key, "must be a list of two numbers", FIX)),
        }
    };
    match value {
        toml::Value::Integer(n) => Ok(ContextDistribution::single(check_size(KEY, *n as f64)?)),
        toml::Value::Table(t) if t.is_empty() => Err(c.err(KEY, "is an empty distribution", FIX)),
        toml::Value::Table(t) if t.len() == 1 && t.contains_key("uniform") => {
            let key = format!("{KEY}.uniform");
            let (lo, hi) = pair(&key, &t["uniform"])?;
            let (lo, hi) = (check_size(&key, lo)?, check_size(&key, hi)?);
            if lo > hi {
                return Err(c.err(&key, format!("lower bound {lo} is above upper bound {hi}"), FIX));
            }
            Ok(ContextDistribution::Uniform { lo, hi })
        }
        toml::Value::Table(t) if t.len() == 1 && t.contains_key("normal") => {
            let key = format!("{KEY}.normal");
            let (mean, sd) = pair(&key, &t["normal"])?;
            let plausible = sd > 0.0 && (f64::from(MIN_CONTEXT_TOKENS)..=f64::from(clamp_max)).contains(&mean);
            if !plausible {
                return Err(c.err(
                    &key,
                    format!(
                        "mean {} must lie in [{MIN_CONTEXT_TOKENS}, {clamp_max}] and sd {} must be positive",
                        fmt_number(mean),
                        fmt_number(sd)
                    ),
                    FIX,
                ));
            }
            Ok(ContextDistribution::Normal { mean, sd, min: MIN_CONTEXT_TOKENS, max: clamp_max })
        }
        toml::Value::Table(t) => {
            let mut choices = Vec::with_capacity(t.len());
            for (size, weight) in t {
                let key = format!("{KEY}.{size}");
                let tokens: i64 =
                    size.trim().parse().map_err(|_| c.err(&key, format!("{size:?} is not a token count"), FIX))?;
                let weight = match weight {
                    toml::Value::Integer(w) if *w >= 1 && *w <= i64::from(u32::MAX) => *w as u32,
                    other => return Err(c.err(&key, format!("weight {other} must be a positive integer"), FIX)),
                };
                choices.push((check_size(&key, tokens as f64)?, weight));
            }
            choices.sort_unstable();
            Ok(ContextDistribution::Weighted { choices })
        }
        other => Err(c.err(KEY, format!("a {} is not a context distribution", other.type_str()), FIX)),
    }
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    }
}

pub(super) fn output(
    c: &Checker,
    o: &raw::RawOutput,
    w: &Workload,
    dialect: Dialect,
) -> Result<OutputControl, ScenarioError> {
    if dialect.openai_fields_only() {
        for (key, set) in [("output.ignore_eos", o.ignore_eos), ("output.min_tokens", o.min_tokens.is_some())] {
            if set {
                return Err(c.err(
                    key,
                    format!("is not part of the OpenAI API (target.dialect = \"{}\")", dialect.name()),
                    "use a dialect of an engine that supports it (\"generic\", \"vllm\", \"sglang\"), or response_words to steer the length",
                ));
            }
        }
    }
    let min_tokens = match o.min_tokens {
        None => None,
        Some(_) if dialect == Dialect::Llamacpp => {
            return Err(c.err(
                "output.min_tokens",
                "llama.cpp ignores min_tokens (target.dialect = \"llamacpp\")",
                "use output.ignore_eos = true with workload.max_tokens for an exact length",
            ));
        }
        Some(n) if n < 1 || n > i64::from(w.max_tokens) => {
            return Err(c.err(
                "output.min_tokens",
                format!("{n} must be between 1 and workload.max_tokens ({})", w.max_tokens),
                "lower min_tokens or raise max_tokens",
            ));
        }
        Some(n) => Some(n as u32),
    };
    let response_words = match o.response_words {
        None => None,
        Some(n) if !(1..=100_000).contains(&n) => {
            return Err(c.err(
                "output.response_words",
                format!("{n} is not a usable word count"),
                "ask for between 1 and 100000 words",
            ));
        }
        Some(n) => Some(n as u32),
    };
    let policy = o.controlled_output_policy.unwrap_or(ControlledOutputPolicy::Observe);
    if policy == ControlledOutputPolicy::Strict && response_words.is_none() {
        return Err(c.err(
            "output.controlled_output_policy",
            "\"strict\" needs output.response_words to check against",
            "add response_words = N, or remove the policy",
        ));
    }
    Ok(OutputControl { ignore_eos: o.ignore_eos, min_tokens, response_words, policy })
}

/// `[output]` where the workload sets every request's output length (a trace's rows, the
/// turns of conversations): it is sent as `max_tokens`, with `ignore_eos` where the dialect has
/// it, and `min_tokens` or `response_words` would contradict it (`why` says what sets it).
pub(super) fn output_set_by_workload(
    c: &Checker,
    o: &OutputControl,
    dialect: Dialect,
    why: &str,
) -> Result<OutputControl, ScenarioError> {
    for (key, set) in
        [("output.min_tokens", o.min_tokens.is_some()), ("output.response_words", o.response_words.is_some())]
    {
        if set {
            return Err(c.err(key, format!("does not apply to {why}"), "remove it"));
        }
    }
    Ok(OutputControl { ignore_eos: !dialect.openai_fields_only(), ..*o })
}

/// Fields the tool sets itself; `extra_body` may not replace them.
const RESERVED_FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "ignore_eos",
    "min_tokens",
    "reasoning_effort",
];

pub(super) fn check_extra_body(c: &Checker, target: &Target, serve: &ServeFlags) -> Result<(), ScenarioError> {
    for key in target.extra_body.keys() {
        let owner = match key.as_str() {
            "model" => Some("target.model"),
            "max_tokens" => Some("workload.max_tokens"),
            "temperature" | "top_p" => Some("[sampling]"),
            "ignore_eos" | "min_tokens" => Some("[output]"),
            "reasoning_effort" => Some("serve.reasoning_effort"),
            "chat_template_kwargs" if serve.thinking_mode != ThinkingMode::Default || serve.no_thinking => {
                Some("serve.thinking_mode")
            }
            k if RESERVED_FIELDS.contains(&k) => Some("the tool itself"),
            _ => None,
        };
        if let Some(owner) = owner {
            return Err(c.err(
                &format!("target.extra_body.{key}"),
                format!("would replace a field set by {owner}"),
                format!("set it through {owner} instead, or remove it from extra_body"),
            ));
        }
    }
    Ok(())
}
