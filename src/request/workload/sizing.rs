//! Sizing prompts to the server's own token count.
//!
//! A `Sizer` predicts how many tokens the server will count for a prompt: `Estimate` uses the
//! built-in estimate plus a fixed template allowance; `Fit` is the estimate scaled and shifted by
//! a least-squares fit to the server's `usage.prompt_tokens` for a few probe prompts (this
//! captures both the tokenizer's rate on the filler and the chat template's overhead);
//! `Tokenizer` counts exactly with a local Hugging Face tokenizer, plus the template overhead
//! measured with one probe. Every mode's inputs and results are recorded in the artifact
//! (`prompt_sizing`).

use std::sync::Arc;

use super::text::estimate_tokens;
use crate::plan::scenario::Api;
use crate::request::record::{ProbeResult, SizingRecord};

/// Estimated tokens a chat template wraps around one user message (role markers, turn
/// separators, the assistant prefix).
pub const CHAT_TEMPLATE_TOKENS: u32 = 8;
/// Completions prompts get a beginning-of-sequence token.
pub const COMPLETIONS_OVERHEAD_TOKENS: u32 = 1;

pub fn default_overhead(api: Api) -> f64 {
    f64::from(match api {
        // Responses and Messages prompts go through the chat template too.
        Api::Chat | Api::Responses | Api::Messages => CHAT_TEMPLATE_TOKENS,
        // Embedding and rerank models add their own start (and separator) tokens per input.
        Api::Completions | Api::Embeddings | Api::Rerank => COMPLETIONS_OVERHEAD_TOKENS,
    })
}

/// Predicts the server's prompt token count.
#[derive(Clone)]
pub enum Sizer {
    /// `estimate(text) + overhead`.
    Estimate { overhead: f64 },
    /// `slope · estimate(text) + intercept`, fitted to probes.
    Fit { slope: f64, intercept: f64 },
    /// `tokenizer(text) + overhead`.
    Tokenizer { tokenizer: Arc<tokenizers::Tokenizer>, overhead: f64 },
}

impl std::fmt::Debug for Sizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sizer::Estimate { overhead } => write!(f, "Estimate(+{overhead})"),
            Sizer::Fit { slope, intercept } => write!(f, "Fit({slope}·x + {intercept})"),
            Sizer::Tokenizer { overhead, .. } => write!(f, "Tokenizer(+{overhead})"),
        }
    }
}

impl Sizer {
    /// Tokens of a piece of prompt text, without template overhead.
    pub fn text_tokens(&self, text: &str) -> f64 {
        match self {
            Sizer::Estimate { .. } => f64::from(estimate_tokens(text)),
            Sizer::Fit { slope, .. } => slope * f64::from(estimate_tokens(text)),
            Sizer::Tokenizer { tokenizer, .. } => count_with(tokenizer, text) as f64,
        }
    }

    /// The server's count for a whole prompt (one message, or the completions prompt).
    pub fn prompt_tokens(&self, text: &str) -> f64 {
        self.text_tokens(text) + self.overhead()
    }

    /// `prompt_tokens` of `prefix + "\n\n" + rest`, given the built-in estimate of `prefix`.
    /// The sizers built on the estimate count whitespace-separated words, so a prefix that
    /// whitespace ends adds its own count: a long prefix every prompt shares is read once, not
    /// once per prompt. The same arithmetic as `prompt_tokens`, so the same result. `None` for a
    /// tokenizer, whose count is not additive.
    pub fn prompt_tokens_after(&self, prefix_estimate: u32, rest: &str) -> Option<f64> {
        let estimate = f64::from(prefix_estimate.saturating_add(estimate_tokens(rest)));
        match self {
            Sizer::Estimate { overhead } => Some(estimate + overhead),
            Sizer::Fit { slope, intercept } => Some(slope * estimate + intercept),
            Sizer::Tokenizer { .. } => None,
        }
    }

    /// Template overhead of one prompt.
    pub fn overhead(&self) -> f64 {
        match self {
            Sizer::Estimate { overhead } | Sizer::Tokenizer { overhead, .. } => *overhead,
            Sizer::Fit { intercept, .. } => *intercept,
        }
    }

    /// Average tokens per filler word (over a block of the word list).
    pub fn per_filler_word(&self) -> f64 {
        match self {
            Sizer::Estimate { .. } => 1.0,
            Sizer::Fit { slope, .. } => *slope,
            Sizer::Tokenizer { tokenizer, .. } => {
                let words = super::text::filler_words();
                let block: String = words.iter().map(|w| format!(" {w}")).collect();
                count_with(tokenizer, &block) as f64 / words.len() as f64
            }
        }
    }

    /// Exact sizers can correct a built prompt by re-counting it.
    pub fn exact(&self) -> Option<&tokenizers::Tokenizer> {
        match self {
            Sizer::Tokenizer { tokenizer, .. } => Some(tokenizer),
            _ => None,
        }
    }
}

/// Tokens of `text` without special tokens (the template overhead is counted separately).
pub fn count_with(tokenizer: &tokenizers::Tokenizer, text: &str) -> usize {
    tokenizer.encode_fast(text, false).map(|e| e.len()).unwrap_or_else(|_| estimate_tokens(text) as usize)
}

impl SizingRecord {
    pub fn for_sizer(mode: &'static str, sizer: &Sizer, tokenizer_path: Option<String>) -> Self {
        let (slope, intercept) = match sizer {
            Sizer::Fit { slope, intercept } => (*slope, *intercept),
            other => (1.0, other.overhead()),
        };
        SizingRecord::line(mode, slope, intercept, tokenizer_path)
    }
}

/// Least-squares line through `(x, y)` points: `(slope, intercept, largest residual)`. Needs two
/// distinct x values.
pub fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx <= f64::EPSILON {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let residual = points.iter().map(|p| (p.1 - (slope * p.0 + intercept)).abs()).fold(0.0, f64::max);
    Some((slope, intercept, residual))
}

/// Filler word counts for the calibration probes: spread over two orders of magnitude below the
/// largest prompt the run will send (and never far above 4,096 words: the fit is linear by
/// construction, so larger probes add cost, not accuracy), each rounded up to whole blocks of
/// the filler list. A whole block is counted at exactly the filler's average rate by any
/// tokenizer (it holds every word once), so the probes lie on one line and the fit is exact;
/// a probe of a few words would carry the chance mix of its words into the intercept, which
/// decides the size of small prompts. Probes stay within half the context window; where that
/// leaves no two whole blocks, the plain counts are used.
pub fn probe_sizes(largest_prompt_tokens: u32, window_tokens: u32) -> Vec<usize> {
    let block = super::text::filler_words().len();
    let cap = (f64::from(largest_prompt_tokens) * 0.8 - 64.0).clamp(32.0, 4096.0) as usize;
    let plain: Vec<usize> = [cap / 64, cap / 16, cap / 4, cap].into_iter().map(|n| n.max(8)).collect();
    let room = (f64::from(window_tokens) * 0.5 - 64.0).max(0.0) as usize;
    let mut sizes: Vec<usize> = plain.iter().map(|n| n.div_ceil(block).max(1) * block).collect();
    sizes.dedup();
    if sizes.len() < 2 {
        sizes.push(sizes[0] + block);
    }
    if sizes.last().is_some_and(|&n| n > room) {
        sizes = plain;
    }
    sizes.dedup();
    sizes
}

/// Fit a sizer from probe results. `initial` is the sizer the probes' predictions came from
/// (`Estimate` for calibration, `Tokenizer` for exact counting). Falls back to the built-in
/// estimate, saying why, when fewer than two probes (one for a tokenizer) were answered.
pub fn fit_from_probes(
    initial: &Sizer,
    mode: &'static str,
    tokenizer_path: Option<String>,
    probes: Vec<ProbeResult>,
    default: f64,
) -> (Sizer, SizingRecord) {
    let points: Vec<(f64, f64)> =
        probes.iter().filter_map(|p| p.server_prompt_tokens.map(|y| (p.predicted_text_tokens, y as f64))).collect();
    let failures: Vec<&str> = probes.iter().filter_map(|p| p.error.as_deref()).collect();
    let (sizer, residual, fallback) = match initial {
        Sizer::Tokenizer { tokenizer, .. } if !points.is_empty() => {
            // The tokenizer counts the text exactly; the probes only measure the template.
            let overheads: Vec<f64> = points.iter().map(|(x, y)| y - x).collect();
            let overhead = overheads.iter().sum::<f64>() / overheads.len() as f64;
            let residual = overheads.iter().map(|o| (o - overhead).abs()).fold(0.0, f64::max);
            (Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead }, Some(residual), None)
        }
        Sizer::Tokenizer { tokenizer, .. } => (
            Sizer::Tokenizer { tokenizer: tokenizer.clone(), overhead: default },
            None,
            Some(format!(
                "no probe was answered ({}); the template overhead is assumed to be {default} tokens",
                failures.join("; ")
            )),
        ),
        _ => match fit_line(&points) {
            Some((slope, intercept, residual)) if slope > 0.0 => {
                (Sizer::Fit { slope, intercept }, Some(residual), None)
            }
            _ => (
                Sizer::Estimate { overhead: default },
                None,
                Some(if failures.is_empty() {
                    "the probes' token counts did not fit a line".to_string()
                } else {
                    format!("probes failed ({})", failures.join("; "))
                }),
            ),
        },
    };
    let mut record = SizingRecord::for_sizer(mode, &sizer, tokenizer_path);
    record.probes = probes;
    record.fit_residual_max = residual;
    record.fallback_reason = fallback;
    (sizer, record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_prefix_adds_as_the_whole_prompt_counts() {
        let sizers = [Sizer::Estimate { overhead: 8.0 }, Sizer::Fit { slope: 1.21, intercept: 11.3 }];
        let prefixes = ["", "the river ran north", "Préfixe partagé, ünïcode", "ends in space ", "tab\tand\nlines\n"];
        let rests = ["", "Request 12: the old mill", "x", "ANVIL_REQ_0001_00012 supercalifragilistic", "ça va"];
        for sizer in &sizers {
            for prefix in prefixes {
                for rest in rests {
                    let whole = format!("{prefix}\n\n{rest}");
                    assert_eq!(
                        sizer.prompt_tokens_after(estimate_tokens(prefix), rest),
                        Some(sizer.prompt_tokens(&whole)),
                        "{sizer:?} {prefix:?} {rest:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> = [100.0, 400.0, 1600.0].iter().map(|&x| (x, 1.2 * x + 9.0)).collect();
        let (slope, intercept, residual) = fit_line(&pts).unwrap();
        assert!((slope - 1.2).abs() < 1e-9 && (intercept - 9.0).abs() < 1e-6 && residual < 1e-6);
        assert!(fit_line(&[(1.0, 2.0)]).is_none());
        assert!(fit_line(&[(5.0, 2.0), (5.0, 3.0)]).is_none());
    }

    #[test]
    fn probe_sizes_are_whole_blocks_distinct_and_bounded() {
        let block = crate::text::filler_words().len();
        let large = probe_sizes(65_536, 262_144);
        assert_eq!(large.len(), 4);
        assert!(large.iter().all(|n| n % block == 0) && large[3] <= 4096 + block, "{large:?}");
        // Small prompts still get two whole blocks when the window has room for them.
        let small = probe_sizes(200, 8192);
        assert_eq!(small, vec![block, 2 * block]);
        // A window too small for whole blocks: plain counts that fit.
        let tiny = probe_sizes(200, 300);
        assert!(tiny.len() >= 2 && tiny.iter().all(|n| (8..=96).contains(n)), "{tiny:?}");
    }

    #[test]
    fn failed_probes_fall_back_to_the_estimate_and_say_why() {
        let probes = vec![ProbeResult {
            predicted_text_tokens: 10.0,
            server_prompt_tokens: None,
            error: Some("HTTP 500".into()),
        }];
        let (sizer, record) = fit_from_probes(&Sizer::Estimate { overhead: 8.0 }, "calibrate", None, probes, 8.0);
        assert!(matches!(sizer, Sizer::Estimate { .. }));
        assert!(record.fallback_reason.unwrap().contains("HTTP 500"));
        let probes = [100.0, 400.0].map(|x| ProbeResult {
            predicted_text_tokens: x,
            server_prompt_tokens: Some((1.25 * x) as u64 + 6),
            error: None,
        });
        let (sizer, record) =
            fit_from_probes(&Sizer::Estimate { overhead: 8.0 }, "calibrate", None, probes.to_vec(), 8.0);
        assert!(matches!(sizer, Sizer::Fit { slope, .. } if (slope - 1.25).abs() < 1e-9));
        assert!((record.intercept - 6.0).abs() < 1e-9 && record.fallback_reason.is_none());
    }

    #[test]
    fn calibration_is_advised_only_where_it_was_not_in_use() {
        let sizer = Sizer::Estimate { overhead: 8.0 };
        assert!(SizingRecord::calibration_would_help(&SizingRecord::for_sizer("estimate", &sizer, None)));
        let mut calibrated = SizingRecord::for_sizer("calibrate", &Sizer::Fit { slope: 1.2, intercept: 5.0 }, None);
        assert!(!SizingRecord::calibration_would_help(&calibrated));
        calibrated.fallback_reason = Some("probes failed".into());
        assert!(
            SizingRecord::calibration_would_help(&calibrated),
            "a calibration that fell back did not size anything"
        );
        assert!(!SizingRecord::calibration_would_help(&SizingRecord::for_sizer("tokenizer", &sizer, None)));
    }

    #[test]
    fn estimate_sizer_predicts_estimate_plus_overhead() {
        let s = Sizer::Estimate { overhead: 8.0 };
        assert_eq!(s.prompt_tokens("the river system"), 11.0);
        assert_eq!(s.per_filler_word(), 1.0);
        let f = Sizer::Fit { slope: 1.5, intercept: 4.0 };
        assert_eq!(f.prompt_tokens("the river"), 7.0);
    }
}
