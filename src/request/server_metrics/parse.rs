//! A scrape body → flat series (`name`, labels, value), through `prom_text_format_parser` (see
//! the module doc of `server_metrics` for why that crate).
//!
//! What this layer adds around the crate, none of it grammar: histograms and summaries are
//! flattened back to their `_bucket`/`_sum`/`_count` series; a body the crate rejects as a whole
//! because of a few bad lines is parsed again without the lines the crate rejects on their own
//! (so one odd line does not lose a scrape); CRLF line ends are accepted; a body that is a JSON
//! string holding the exposition (llama.cpp build 7010, llama.cpp#17384) is unwrapped; a JSON
//! body (trtllm-serve's own `/metrics`) is reported as not this format.

use prom_text_format_parser::{ScrapeParseError, Type, ValueType, parse_scrape};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// With its `_bucket`/`_sum`/`_count` or `_total` suffix, as exposed.
    pub name: String,
    /// In the order exposed.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Series {
    /// `name{a="x",b="y"}`, labels sorted: the key of the series across scrapes.
    pub fn key(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let mut labels: Vec<&(String, String)> = self.labels.iter().collect();
        labels.sort();
        let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("{}{{{}}}", self.name, inner.join(","))
    }
}

/// A parsed body.
#[derive(Debug, Default)]
pub struct Parsed {
    pub series: Vec<Series>,
    /// Non-empty lines the parser rejected and that were left out.
    pub skipped_lines: usize,
}

/// Parse a scrape body. An error means nothing usable was in it.
pub fn parse(body: &[u8]) -> Result<Parsed, String> {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(Parsed::default());
    }
    let unwrapped;
    let text: &str = match trimmed.as_bytes()[0] {
        // llama.cpp#17384: the exposition sent as a JSON string literal.
        b'"' => match serde_json::from_str::<String>(trimmed) {
            Ok(inner) => {
                unwrapped = inner;
                &unwrapped
            }
            Err(_) => &text,
        },
        b'{' | b'[' if serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok() => {
            return Err("the body is JSON, not the Prometheus text format (trtllm-serve's own /metrics \
                        serves JSON iteration statistics; scrape the Dynamo frontend's /metrics instead)"
                .into());
        }
        _ => &text,
    };
    let crlf_free;
    let text = if text.contains('\r') {
        crlf_free = text.replace("\r\n", "\n");
        crlf_free.as_str()
    } else {
        text
    };
    let (metrics, skipped_lines) = match parse_scrape(text) {
        (metrics, None | Some(ScrapeParseError::Collect(_))) => (metrics, 0),
        (_, Some(ScrapeParseError::Parse(_))) => {
            // Keep only the lines the parser accepts on their own, and parse those together.
            let mut kept = String::with_capacity(text.len());
            let mut skipped = 0;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if matches!(parse_scrape(line).1, Some(ScrapeParseError::Parse(_))) {
                    skipped += 1;
                } else {
                    kept.push_str(line);
                    kept.push('\n');
                }
            }
            let metrics = if kept.is_empty() { Vec::new() } else { parse_scrape(&kept).0 };
            (metrics, skipped)
        }
    };
    let mut series = Vec::new();
    for metric in metrics {
        for sample in metric.samples {
            let suffix = match (metric.kind, sample.value.value_type) {
                (Type::Histogram, ValueType::Sample) => "_bucket",
                (Type::Histogram | Type::Summary, ValueType::Sum) => "_sum",
                (Type::Histogram | Type::Summary, ValueType::Count) => "_count",
                _ => "",
            };
            let Some(value) = parse_value(sample.value.value.as_str()) else { continue };
            series.push(Series {
                name: format!("{}{suffix}", metric.name),
                labels: sample.labels.iter().map(|l| (l.key.clone(), l.value.clone())).collect(),
                value,
            });
        }
    }
    if series.is_empty() && skipped_lines > 0 {
        return Err(format!("no Prometheus text-format series in the body ({skipped_lines} lines not in the format)"));
    }
    Ok(Parsed { series, skipped_lines })
}

/// The text format's floats: Go's spelling of infinities and NaN besides ordinary numbers.
fn parse_value(text: &str) -> Option<f64> {
    match text.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of a vLLM V1 exposition (prometheus_client 0.0.4 text): colons in names, a
    /// `_total` counter with its `_created` gauge, a histogram, a family with no samples yet,
    /// label values with escapes and slashes.
    pub(crate) const VLLM: &str = r#"# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 4096.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="Qwen/Qwen3-8B"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"} 0.75
# HELP weird Escapes and odd values.
# TYPE weird gauge
weird{path="C:\\DIR\\FILE.TXT",msg="say \"hi\"\n"} NaN
weird{path="b"} -Inf 1395066363000
"#;

    fn find<'a>(p: &'a Parsed, key: &str) -> &'a Series {
        p.series.iter().find(|s| s.key() == key).unwrap_or_else(|| panic!("{key} missing from {:#?}", p.series))
    }

    #[test]
    fn a_vllm_exposition_parses_completely() {
        let p = parse(VLLM.as_bytes()).expect("parses");
        assert_eq!(p.skipped_lines, 0);
        assert_eq!(find(&p, r#"vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"}"#).value, 3.0);
        assert_eq!(find(&p, r#"vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"}"#).value, 4096.0);
        let inf = r#"vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"}"#;
        assert_eq!(find(&p, inf).value, 5.0);
        assert_eq!(
            find(&p, r#"vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"}"#).value,
            0.75
        );
        assert_eq!(
            find(&p, r#"vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"}"#).value,
            5.0
        );
        assert_eq!(find(&p, r#"weird{path="b"}"#).value, f64::NEG_INFINITY);
        assert!(p.series.iter().any(|s| s.name == "weird" && s.value.is_nan()));
        assert_eq!(p.series.len(), 11);
    }

    #[test]
    fn bad_lines_are_skipped_not_fatal() {
        let body =
            format!("{VLLM}this is not a metric line\nvllm:num_requests_waiting{{engine=\"0\"}} 7\n}}{{ garbage\n");
        let p = parse(body.as_bytes()).expect("parses");
        assert_eq!(p.skipped_lines, 2);
        assert_eq!(find(&p, r#"vllm:num_requests_waiting{engine="0"}"#).value, 7.0);
        assert_eq!(find(&p, r#"vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"}"#).value, 4096.0);
    }

    #[test]
    fn crlf_and_missing_final_newline_are_accepted() {
        let p = parse(b"# TYPE a counter\r\na_total 1\r\nb 2").expect("parses");
        assert_eq!(p.skipped_lines, 0);
        assert_eq!(find(&p, "a_total").value, 1.0);
        assert_eq!(find(&p, "b").value, 2.0);
    }

    #[test]
    fn a_json_string_body_is_unwrapped() {
        let inner = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 42\n";
        let body = serde_json::to_string(inner).expect("json");
        let p = parse(body.as_bytes()).expect("parses");
        assert_eq!(find(&p, "llamacpp:prompt_tokens_total").value, 42.0);
    }

    #[test]
    fn json_html_garbage_and_binary_are_errors_and_empty_is_empty() {
        let json = parse(br#"[{"gpuMemUsage": 1, "kvCacheStats": {}}]"#).expect_err("json");
        assert!(json.contains("JSON"), "{json}");
        let html = parse(b"<html><body>Not Found</body></html>").expect_err("html");
        assert!(html.contains("1 lines"), "{html}");
        assert!(parse(&[0xff, 0xfe, 0x00, 0x12, 0x80]).is_err());
        let p = parse(b"  \n\n").expect("empty is fine");
        assert!(p.series.is_empty());
        let p = parse(b"# HELP only_help no samples yet\n# TYPE only_help gauge\n").expect("help-only is fine");
        assert!(p.series.is_empty());
    }

    #[test]
    fn huge_values_and_exponents() {
        let p = parse(b"a 1e308\nb -0.5e-3\nc 18446744073709551616\n").expect("parses");
        assert_eq!(find(&p, "a").value, 1e308);
        assert_eq!(find(&p, "b").value, -0.5e-3);
        assert_eq!(find(&p, "c").value, 18_446_744_073_709_551_616.0);
    }
}
