//! Per-chunk cost of the streaming client's parsing: SSE framing plus delta parsing, for the
//! chunk shapes real engines send. Run with `make bench`.

use std::hint::black_box;
use std::time::Duration;

use anvil_load::request::worker::StreamState;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const CONTENT: &str = r#"data: {"id":"chatcmpl-7SbJZDz8Incavod4IS5DFPSvCqJ3NkKp","object":"chat.completion.chunk","created":1795983988,"model":"SmolLM2-135M-Instruct","choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}"#;
const REASONING: &str = r#"data: {"id":"chatcmpl-7SbJZDz8Incavod4IS5DFPSvCqJ3NkKp","object":"chat.completion.chunk","created":1795983988,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":" so the"},"finish_reason":null}]}"#;
const MULTI_TOKEN: &str = r#"data: {"id":"chatcmpl-7SbJZDz8Incavod4IS5DFPSvCqJ3NkKp","object":"chat.completion.chunk","created":1795983988,"model":"qwen3","choices":[{"index":0,"delta":{"content":" the river ran north \"quickly\""},"finish_reason":null}]}"#;
const USAGE: &str = r#"data: {"id":"chatcmpl-7SbJZDz8Incavod4IS5DFPSvCqJ3NkKp","object":"chat.completion.chunk","created":1795983988,"model":"qwen3","choices":[],"usage":{"prompt_tokens":62327,"completion_tokens":281,"total_tokens":62608,"prompt_tokens_details":{"cached_tokens":0}}}"#;

/// Words a stream's chunks carry in turn (one with an escape, as newlines are).
const WORDS: [&str; 8] = [" the", " river", " ran", " north", ",", r"\n", " quickly", " and"];

/// 256 events of `line` with the text of the first word replaced by each word in turn.
fn stream_of(line: &str) -> String {
    let word = [" the", " so the"].into_iter().find(|w| line.contains(&format!("\"{w}"))).unwrap_or("");
    (0..256)
        .map(|i| {
            let event = if word.is_empty() { line.to_owned() } else { line.replacen(word, WORDS[i % WORDS.len()], 1) };
            format!("{event}\n\n")
        })
        .collect()
}

fn per_chunk(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_chunk");
    for (name, line) in [("content", CONTENT), ("reasoning", REASONING), ("multi_token", MULTI_TOKEN), ("usage", USAGE)]
    {
        // 256 events in one read, as a zero-delay server delivers them, each with its own text.
        let read = stream_of(line);
        group.throughput(Throughput::Elements(256));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut state = StreamState::new(true);
                state.observe(black_box(read.as_bytes()), Duration::from_millis(1)).expect("valid stream");
                black_box(state.content_chunks)
            })
        });
    }
    // Canaries on (no `response_words`): no capture, the streaming marker scan instead.
    let read = stream_of(CONTENT);
    group.throughput(Throughput::Elements(256));
    group.bench_function("content_canary", |b| {
        b.iter(|| {
            let mut state = StreamState::new(false).with_canary("ANVIL_REQ_1717_00001");
            state.observe(black_box(read.as_bytes()), Duration::from_millis(1)).expect("valid stream");
            black_box(state.content_chunks)
        })
    });
    group.finish();
}

/// Structured output: one answer checked against its schema at its end (`workload::structured`),
/// for the example scenario's two schemas and answers the simulator would give.
fn schema_check(c: &mut Criterion) {
    use anvil_load::plan::scenario::json_schema::JsonSchema;
    let mut group = c.benchmark_group("schema_check");
    for name in ["weather", "invoice"] {
        let path = format!("{}/scenarios/schemas/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let schema: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("schema")).expect("json");
        let answer = anvil_load::mock::json_instance::instance(&schema, 7).to_string();
        let compiled = JsonSchema::compile(schema).expect("compiles");
        group.throughput(Throughput::Elements(1));
        group.bench_function(name, |b| b.iter(|| black_box(compiled.check_text(black_box(&answer))).is_ok()));
    }
    group.finish();
}

criterion_group!(benches, per_chunk, schema_check);
criterion_main!(benches);
