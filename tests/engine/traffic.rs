//! Structured output against the engine's own grammar: llama.cpp turns a JSON Schema into a
//! grammar and samples only what it allows, so every answer that ends on its own must satisfy
//! the schema. The artifact's verdict for each request is checked against an independent reading
//! of the text the engine streamed (the tap's bytes, parsed and validated here), and the level's
//! `structured_output` block against those verdicts.

use serde_json::{Value, json};

use crate::harness::{int, records, run, scenario};
use crate::server::{Kind, LlamaServer};
use crate::tap::{Exchange, Tap};

/// A schema whose every value is bounded (an enum, a small integer range, a boolean), so the
/// engine's answer closes within the output budget.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "rain": {"type": "boolean"}
        },
        "required": ["unit", "days", "rain"],
        "additionalProperties": false
    })
}

/// The visible text the engine streamed for one request.
fn streamed_text(ex: &Exchange) -> String {
    ex.payloads().iter().filter_map(|p| p["choices"].get(0)?["delta"]["content"].as_str().map(str::to_string)).collect()
}

#[test]
fn every_answer_the_engines_grammar_allowed_checks_valid_as_the_engine_sent_it() {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    let tap = Tap::start(server.addr);
    let text = scenario(
        "chat",
        "",
        &format!(
            "[run]\nrequests = 8\nseed = 41\n\n[load]\nconcurrency = 2\n\n[workload]\ncontext_tokens = 120\n\
             max_context_tokens = 2048\nmax_tokens = 96\n\n[workload.response_format]\nname = \"forecast\"\n\
             schema = '{}'\nspelling = \"json_schema\"\n",
            schema()
        ),
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let streamed: Vec<Exchange> = tap.streamed().into_iter().filter(|e| e.status == Some(200)).collect();
    assert_eq!(streamed.len(), 8, "one answered request per record");
    // The engine received the schema in llama.cpp's own field.
    for ex in &streamed {
        assert_eq!(ex.body["json_schema"], schema(), "{}", ex.body);
        assert!(ex.body.get("response_format").is_none(), "{}", ex.body);
    }
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let mut engine_valid = 0;
    for ex in &streamed {
        let text = streamed_text(ex);
        let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
        if parsed.as_ref().is_some_and(|v| validator.is_valid(v)) {
            engine_valid += 1;
        }
    }
    let recs = records(&a);
    let truncated = recs.iter().filter(|r| r["schema_truncated"] == true).count();
    // What the engine sent, read here, and what the client judged agree request for request.
    let client_valid = recs.iter().filter(|r| r["schema_valid"] == true).count();
    assert_eq!(client_valid, engine_valid, "valid answers: the client's verdicts against the engine's text");
    for r in &recs {
        assert_eq!(r["schema_name"], "forecast", "{r}");
        if r["finish_reason"] == "stop" {
            // The grammar allowed nothing else: an answer that ended on its own is valid.
            assert_eq!(r["schema_valid"], true, "{r}");
        }
    }
    let so = &a["structured_output"];
    assert_eq!(int(so, "checked"), 8, "{so}");
    assert_eq!(int(so, "valid") as usize, client_valid, "{so}");
    assert_eq!(int(so, "truncated") as usize, truncated, "{so}");
    assert_eq!(int(so, "invalid"), 0, "a grammar-constrained engine broke its schema: {so}");
    assert!(client_valid >= 6, "most answers close within 96 tokens: {so}");
}
