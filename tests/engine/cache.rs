//! The engine's own accounting and its prefix cache against the artifact: server-metrics
//! scraping with llama.cpp's names (counter deltas equal to the client's counts, the cache hits
//! mapped), a multi-turn conversation whose later turns find their history in the real prefix
//! cache, and a unique-mode sweep in which no level finds an earlier level's prompts cached —
//! with a reproducible sweep beside it as the control that shows the check can see such hits.

use std::collections::HashMap;

use serde_json::Value;

use crate::harness::{int, num, records, run, scenario, warnings};
use crate::server::{Kind, LlamaServer};
use crate::tap::{Exchange, Tap};

/// The engine's (prompt, cached, output) for each answered streamed request.
fn engine_counts(streamed: &[Exchange]) -> Vec<(u64, u64, u64)> {
    streamed
        .iter()
        .filter(|e| e.status.is_some())
        .map(|e| {
            let u =
                e.last_with("usage").unwrap_or_else(|| panic!("no usage: {}", String::from_utf8_lossy(&e.response)));
            (int(&u, "prompt_tokens"), int(&u["prompt_tokens_details"], "cached_tokens"), int(&u, "completion_tokens"))
        })
        .collect()
}

/// The artifact's (prompt, cached, output) for each record.
fn artifact_counts(records: &[Value]) -> Vec<(u64, u64, u64)> {
    records.iter().map(|r| (int(r, "prompt_tokens"), int(r, "cached_tokens"), int(r, "output_tokens"))).collect()
}

/// Equal as multisets: with two requests in flight the order of sends is not the records'.
fn same_counts(mut engine: Vec<(u64, u64, u64)>, mut artifact: Vec<(u64, u64, u64)>) {
    engine.sort_unstable();
    artifact.sort_unstable();
    assert_eq!(artifact, engine, "(prompt, cached, output) per request: artifact against engine");
}

#[test]
fn server_metrics_are_scraped_under_llamacpps_names_and_equal_the_clients_counts() {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    let tap = Tap::start(server.addr);
    // The engine's own endpoint, not through the tap: the scrapes are not the load.
    let text = scenario(
        "chat",
        &format!("metrics_url = \"http://{}/metrics\"", server.addr),
        "[run]\nrequests = 6\nseed = 31\nmetrics_interval = \"1s\"\n\n[load]\nconcurrency = 2\n\n[workload]\n\
         context_tokens = 200\nmax_context_tokens = 2048\nmax_tokens = 16\ncanaries = false\n\n[output]\nignore_eos = true\n",
    );
    let before = server.metrics();
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let after = server.metrics();
    let records = records(&a);
    same_counts(engine_counts(&tap.streamed()), artifact_counts(&records));
    let m = &a["server_metrics"];
    assert_eq!(m["engine"], "llamacpp", "{m}");
    assert_eq!(m["complete"], true, "{m}");
    let counter = |name: &str| m["counters"][name].as_f64().unwrap_or_else(|| panic!("no counter {name}: {m}"));
    let prompt: u64 = records.iter().map(|r| int(r, "prompt_tokens")).sum();
    let cached: u64 = records.iter().map(|r| int(r, "cached_tokens")).sum();
    let output: u64 = records.iter().map(|r| int(r, "output_tokens")).sum();
    // Calibration probes came before the level's first scrape: the deltas are the level's, and
    // equal the client's counts exactly when nobody else uses the engine.
    assert_eq!(counter("prompt_tokens_computed") as u64, prompt - cached, "{m}");
    assert_eq!(counter("prefix_cache_hits") as u64, cached, "llama.cpp's cached counter is mapped: {m}");
    assert_eq!(counter("prefix_cache_queries") as u64, prompt, "{m}");
    assert_eq!(counter("generation_tokens") as u64, output, "{m}");
    let rate = num(m, "prefix_cache_hit_rate");
    assert!((rate - cached as f64 / prompt as f64).abs() < 1e-9, "{rate}");
    assert!(!m["missing"].as_array().is_some_and(|v| v.iter().any(|n| n == "prefix_cache_hits")), "{m}");
    assert!(!warnings(&a).contains(&"server_counts_differ".to_string()), "{:?}", warnings(&a));
    // The gauges were read: two slots at most ran at once.
    let running = &m["gauges"]["running"];
    assert!(num(running, "max") <= 2.0, "{running}");
    // The scrape file: llama.cpp's raw series, the last scrape's counters those the test read
    // itself once the run had ended.
    let file = finished.out().join(m["file"].as_str().expect("a scrape file"));
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .expect("the scrape file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(lines.len() >= 2, "{} scrapes", lines.len());
    let last = lines.last().expect("a last scrape");
    assert_eq!(last["phase"], "end", "{last}");
    for name in ["prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total"] {
        let raw = last["raw"][format!("llamacpp:{name}")].as_f64();
        assert_eq!(raw, Some(after.get(name)), "{name}: the end scrape against the engine's final value");
    }
    // And the whole run's movement, probes included, is what crossed the wire.
    let all: u64 = tap
        .exchanges()
        .iter()
        .filter(|e| e.method == "POST" && e.status.is_some())
        .map(|e| {
            let usage = e.json().and_then(|j| j.get("usage").cloned()).or_else(|| e.last_with("usage"));
            int(&usage.expect("usage"), "completion_tokens")
        })
        .sum();
    assert_eq!(after.delta(&before, "tokens_predicted_total") as u64, all);
}

#[test]
fn later_turns_of_a_conversation_hit_the_engines_prefix_cache() {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    let tap = Tap::start(server.addr);
    // Reproducible prompts: the same session ids every run, so the sizing below is exact, not
    // within the spread unique ids give (a first turn of 200 was counted 198–202 over ten runs
    // of random salts, the digits of an id tokenizing a token or two apart; 200 every run of
    // these; 206–207 every run before the probes carried a session header).
    let text = scenario(
        "chat",
        "",
        "[run]\nseed = 32\n\n[load]\nsessions = 2\n\n[workload]\nmax_context_tokens = 2048\nmax_tokens = 12\n\
         canaries = false\nreproducible = true\n\n[workload.sessions]\nconversations = 2\nturns = 3\nfirst_tokens = 200\nuser_tokens = 40\n\
         output_tokens = 12\n",
    );
    let before = server.metrics();
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let a = finished.one();
    let after = server.metrics();
    let records = records(&a);
    assert_eq!(records.len(), 6, "2 conversations of 3 turns");
    // Each record against the engine's answer to its own turn: the conversation's id in its
    // header, the turn in the user messages it sent.
    let streamed: Vec<Exchange> = tap.streamed().into_iter().filter(|e| e.status.is_some()).collect();
    let mut by_turn: HashMap<(String, u64), &Exchange> = HashMap::new();
    for ex in &streamed {
        let session = ex.request_head.header("x-session-id").expect("the affinity header").to_string();
        let turn = ex.body["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").count();
        assert!(by_turn.insert((session, turn as u64), ex).is_none(), "one answer per turn");
    }
    let mut prompt_of: HashMap<(String, u64), u64> = HashMap::new();
    for r in &records {
        let key = (r["session"].as_str().expect("session").to_string(), int(r, "turn"));
        let ex = by_turn.get(&key).unwrap_or_else(|| panic!("no answer for {key:?}"));
        let usage = ex.last_with("usage").expect("usage");
        let timings = ex.last_with("timings").expect("timings");
        assert_eq!(int(r, "prompt_tokens"), int(&usage, "prompt_tokens"), "{r}");
        assert_eq!(int(r, "cached_tokens"), int(&timings, "cache_n"), "{r}");
        assert_eq!(int(r, "output_tokens"), 12, "{r}");
        assert!(num(r, "ttft_ms") >= num(&timings, "prompt_ms"), "{r}");
        // Sized from the engine's counts (the probes shaped like a first turn, the history as
        // the engine counted it): every turn within 1 % of its plan.
        assert!(num(r, "prompt_sizing_error_pct").abs() <= 1.0, "{r}");
        prompt_of.insert(key, int(r, "prompt_tokens"));
    }
    for r in &records {
        let (session, turn) = (r["session"].as_str().expect("session").to_string(), int(r, "turn"));
        if turn == 1 {
            continue;
        }
        // The whole previous prompt came back from the cache, and no more than the client
        // expected (that prompt and its answer).
        let previous = prompt_of[&(session, turn - 1)];
        let cached = int(r, "cached_tokens");
        assert!(
            cached >= previous,
            "turn {turn} found {cached} cached tokens, its previous prompt had {previous}: {r}"
        );
        assert!(cached <= int(r, "expected_cached_tokens"), "{r}");
    }
    let cached: u64 = records.iter().map(|r| int(r, "cached_tokens")).sum();
    let probes_cached: u64 = tap
        .exchanges()
        .iter()
        .filter(|e| e.method == "POST" && !e.streamed() && e.status.is_some())
        .filter_map(|e| e.json()?["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64())
        .sum();
    assert_eq!(after.delta(&before, "prompt_tokens_cached_total") as u64, cached + probes_cached);
    assert!(!warnings(&a).contains(&"conversation_cache_ineffective".to_string()), "{:?}", warnings(&a));
}

/// A sweep of two levels (concurrency 1 then 2) against a fresh two-slot engine: per level, the
/// most cached tokens any request found and the warnings, after checking every record against
/// the engine.
fn sweep(reproducible: bool) -> Vec<(u64, Vec<String>)> {
    let server = LlamaServer::start(Kind::Generate { slots: 2 });
    let tap = Tap::start(server.addr);
    let text = scenario(
        "chat",
        "",
        &format!(
            "[run]\nrequests = 3\nseed = 33\n\n[load]\nconcurrency = [1, 2]\n\n[workload]\ncontext_tokens = 200\n\
             max_context_tokens = 2048\nmax_tokens = 8\ncanaries = false\nreproducible = {reproducible}\n\n\
             [output]\nignore_eos = true\n"
        ),
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let levels = finished.artifacts();
    assert_eq!(levels.len(), 2);
    let all: Vec<Value> = levels.iter().flat_map(records).collect();
    same_counts(engine_counts(&tap.streamed()), artifact_counts(&all));
    levels
        .iter()
        .map(|a| (records(a).iter().map(|r| int(r, "cached_tokens")).max().expect("records"), warnings(a)))
        .collect()
}

#[test]
fn a_unique_sweep_finds_no_earlier_levels_prompts_in_the_cache() {
    // Unique prompts: every request of every level shares with anything sent before it only the
    // chat template's opening, the header's first word and, by chance, the leading digits of its
    // tag (each level's tags are keyed by its own salt, so a digit or two in common with an
    // earlier tag comes and goes from run to run, on either level). So each level finds a few
    // dozen tokens cached at most — never the 200-token prompts of the level before, which the
    // reproducible control below does find.
    let unique = sweep(false);
    let (first, second) = (unique[0].0, unique[1].0);
    assert!(first <= 32, "level 1 found {first} tokens cached");
    assert!(second <= 32, "level 2 found {second} tokens cached: an earlier level's prompts reached it");
    for (_, codes) in &unique {
        assert!(!codes.contains(&"cache_warm_in_unique_mode".to_string()), "{codes:?}");
    }
    // The control: reproducible prompts repeat at every level, and the engine finds level 1's
    // prompts in its cache on level 2 — what the check above would see if salting broke.
    let repeated = sweep(true);
    let (first, second) = (repeated[0].0, repeated[1].0);
    assert!(second > first + 64, "no cross-level hit with repeated prompts: level 1 {first}, level 2 {second}");
}

/// `load.reset_cache = "llamacpp"` against the real engine: a sweep of two levels with the same
/// prompts at both (reproducible), every slot `GET /slots` lists erased before each level; per
/// level, the cached tokens of its first request and its warnings, after checking the reset's
/// record (both slots erased, 200).
fn reset_sweep(host_cache: bool) -> (Vec<(u64, Vec<String>)>, usize) {
    let server = LlamaServer::start(Kind::Erasable { slots: 2, host_cache });
    let tap = Tap::start(server.addr);
    let text = scenario(
        "chat",
        "",
        "[run]\nrequests = 3\nseed = 33\n\n[load]\nconcurrency = [1, 2]\nreset_cache = \"llamacpp\"\n\n[workload]\n\
         context_tokens = 200\nmax_context_tokens = 2048\nmax_tokens = 8\ncanaries = false\nreproducible = true\n\n\
         [output]\nignore_eos = true\n",
    );
    let finished = run(&text, &tap.base_url(), &[]);
    finished.succeeded();
    let levels = finished.artifacts();
    assert_eq!(levels.len(), 2);
    let per_level = levels
        .iter()
        .map(|a| {
            let reset = &a["cache_reset"];
            assert_eq!(reset["engine"], "llamacpp", "{reset}");
            assert_eq!(reset["ok"], true, "{reset}");
            assert_eq!(reset["replicas"][0]["slots_erased"], 2, "{reset}");
            assert_eq!(reset["replicas"][0]["status"], 200, "{reset}");
            let rs = records(a);
            let first = rs
                .iter()
                .min_by(|x, y| num(x, "start_offset_ms").total_cmp(&num(y, "start_offset_ms")))
                .expect("records");
            (int(first, "cached_tokens"), warnings(a))
        })
        .collect();
    let erased = tap.exchanges().iter().filter(|e| e.method == "POST" && e.path.contains("action=erase")).count();
    (per_level, erased)
}

#[test]
fn a_llamacpp_reset_erases_every_slot_and_the_check_sees_the_host_cache_survive_it() {
    // Without its host-memory prompt cache (`--cache-ram 0`), the erase empties the engine: every
    // level's first request finds nothing cached, and nothing is raised.
    let (cold, erased) = reset_sweep(false);
    assert_eq!(erased, 4, "both slots erased before each of the two levels");
    for (cached, codes) in &cold {
        assert_eq!(*cached, 0, "the level's first request found {cached} tokens cached");
        assert!(!codes.contains(&"cache_not_reset".to_string()), "{codes:?}");
    }
    // With it (llama.cpp's default), the erased slot's prompt comes back from host memory: the
    // reset answers 200 but does not take, and the check says so.
    let (warm, _) = reset_sweep(true);
    assert!(warm.iter().any(|(cached, _)| *cached > 64), "{warm:?}");
    for (cached, codes) in &warm {
        assert_eq!(*cached > 0, codes.contains(&"cache_not_reset".to_string()), "{warm:?}");
    }
}
