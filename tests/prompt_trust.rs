//! Prompts that engines count the way the run planned them, through the real binary against the
//! simulator, with every request body read off the wire by a transparent proxy in between:
//!
//! - no prompt of one run starts like a prompt of another run beyond the words every prompt of
//!   its kind starts with (the salt comes before anything request-specific that repeats), for
//!   every prompt kind and API; and no two requests of one run share more than that either;
//! - each level's prompt salt is recorded (the records' `level` line and the artifact) and is
//!   the salt its prompts carry;
//! - conversations are sized as the server counts them: turn 1 with a system prompt by the
//!   template shape the system-message probe measured (a template that adds a default system
//!   prompt otherwise), later turns from the server's counts of the earlier ones.

#[path = "prompt_trust/capture.rs"]
mod capture;
mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use capture::{Capture, Sent};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::Value;

// ---- What a model reads ----

/// One sequence a model reads, and the request it came from.
#[derive(Debug, Clone)]
struct Sequence {
    /// Which request of the run (several sequences of one request may share its query).
    request: usize,
    /// A chat's messages in order, each as `role \u{1} content \u{2}`; or the prompt, or one
    /// input, or a rerank query with one document.
    text: String,
    /// The prompt is a conversation's first turn (one user message).
    first_turn: bool,
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}

fn message(role: &str, content: &str) -> String {
    format!("{role}\u{1}{content}\u{2}")
}

/// The sequences a model reads for each request sent (in the order sent).
fn sequences(sent: &[Sent]) -> Vec<Sequence> {
    let mut out = Vec::new();
    for (request, s) in sent.iter().enumerate() {
        let b = &s.body;
        let mut chat = String::new();
        let mut users = 0;
        if let Some(system) = b["system"].as_str().or(b["instructions"].as_str()) {
            chat.push_str(&message("system", system));
        }
        let mut one = |text: String, first_turn: bool| out.push(Sequence { request, text, first_turn });
        if s.path.ends_with("/rerank") {
            let query = b["query"].as_str().unwrap();
            for doc in b["documents"].as_array().unwrap() {
                one(format!("{query}\u{1}{}", doc.as_str().unwrap()), false);
            }
        } else if s.path.ends_with("/embeddings") {
            for input in b["input"].as_array().unwrap() {
                one(input.as_str().unwrap().to_string(), false);
            }
        } else if let Some(prompt) = b["prompt"].as_str() {
            one(prompt.to_string(), false);
        } else if let Some(messages) = b["messages"].as_array().or(b["input"].as_array()) {
            for m in messages {
                let role = m["role"].as_str().unwrap_or("item");
                users += usize::from(role == "user");
                chat.push_str(&message(role, &content_text(&m["content"])));
            }
            one(chat, users == 1);
        } else if let Some(input) = b["input"].as_str() {
            chat.push_str(&message("user", input));
            one(chat, true);
        } else {
            panic!("a body of no known API: {b}");
        }
    }
    out
}

/// Units a prefix cache could match, whatever the tokenizer: a run of ASCII letters is one
/// (tokenizers hold common words whole), every other character is one of its own (digits are
/// single tokens in the tokenizers of current open models, or groups of up to three).
fn units(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let len = if c.is_ascii_alphabetic() {
            rest.bytes().take_while(u8::is_ascii_alphabetic).count()
        } else {
            c.len_utf8()
        };
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

fn common_units(a: &str, b: &str) -> usize {
    units(a).iter().zip(units(b)).take_while(|(x, y)| **x == *y).count()
}

/// Units two independently salted prompts may still share by chance beyond their fixed head:
/// up to seven digits of a ten-digit tag (one in ten million a pair) or three words of seeded
/// filler (one in a million or less).
const CHANCE: usize = 7;

// ---- Runs ----

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A scenario: `load` goes after `[run]`'s seed (run keys, then any `[load]` table).
fn scenario(dir: &Path, name: &str, api: &str, load: &str, workload: &str) -> PathBuf {
    let target = if api == "messages" { "anthropic_version = \"2023-06-01\"\n" } else { "" };
    write(
        dir,
        &format!("{name}.toml"),
        &format!(
            "[target]\nmodel = \"m\"\napi = \"{api}\"\n{target}[run]\nseed = 5\n{load}\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 16\n{workload}\n"
        ),
    )
}

/// Run the binary against `base_url`; every artifact it wrote, checked.
async fn run_scenario(file: &Path, base_url: &str, out: &Path, args: &[&str]) -> Vec<Value> {
    let mut cmd = anvil();
    cmd.arg(file).arg("--out").arg(out).arg("--base-url").arg(base_url).args(args);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}: {}", file.display(), text(&result.stderr));
    let found = artifacts(out);
    assert!(!found.is_empty(), "{}: no artifact", file.display());
    found.iter().map(|p| check_artifact(p)).collect()
}

/// Which prompts of one run must not share more than the fixed head.
#[derive(Clone, Copy)]
enum Within {
    /// Every pair of sequences of different requests.
    Requests,
    /// Conversations' first turns.
    FirstTurns,
    /// Conversations' first turns from their first user message on: a group's system prompt
    /// before it is shared by design.
    FirstTurnsAfterSystem,
    /// None: the kind shares text by design (a shared prefix, a trace's blocks).
    Shared,
}

struct Kind {
    name: &'static str,
    api: &'static str,
    load: &'static str,
    workload: String,
    /// A representative of what every prompt of the kind starts with in every run.
    head: &'static str,
    within: Within,
}

fn kinds(dir: &Path) -> Vec<Kind> {
    let dataset = write(
        dir,
        "prompts.jsonl",
        &[
            r#"{"messages": [{"role": "system", "content": "You are a careful reader. Answer briefly."}, {"role": "user", "content": "What does the text say about rivers?"}]}"#,
            r#"{"prompt": "Summarise the following notes about the harbour and its ships."}"#,
            r#"{"messages": [{"role": "user", "content": "Which season does the letter describe?"}]}"#,
        ]
        .join("\n"),
    );
    let conversations = write(
        dir,
        "conversations.jsonl",
        &[
            r#"{"messages": [{"role": "system", "content": "You are a patient tutor. Keep answers short."}, {"role": "user", "content": "Explain tides."}, {"role": "assistant", "content": "The moon pulls the sea."}, {"role": "user", "content": "And the sun?"}]}"#,
            r#"{"messages": [{"role": "user", "content": "Name a river."}, {"role": "assistant", "content": "The Danube."}, {"role": "user", "content": "Where does it end?"}]}"#,
        ]
        .join("\n"),
    );
    // Rows sharing leading blocks, and rows without any (the tail is then all of the prompt).
    let blocks = write(
        dir,
        "blocks.jsonl",
        &[
            r#"{"offset_ms": 0, "input_tokens": 300, "output_tokens": 8, "hash_ids": [1, 2, 3, 4, 5]}"#,
            r#"{"offset_ms": 5, "input_tokens": 300, "output_tokens": 8, "hash_ids": [1, 2, 6, 7, 8]}"#,
            r#"{"offset_ms": 10, "input_tokens": 300, "output_tokens": 8, "hash_ids": [9, 10, 11, 12, 13]}"#,
            r#"{"offset_ms": 15, "input_tokens": 200, "output_tokens": 8, "hash_ids": [1, 14, 15, 16]}"#,
        ]
        .join("\n"),
    );
    let plain = write(
        dir,
        "plain.jsonl",
        &(0..6)
            .map(|i| format!(r#"{{"offset_ms": {}, "input_tokens": 250, "output_tokens": 8}}"#, i * 5))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let closed = "requests = 8\n[load]\nconcurrency = 2";
    let synthetic = "context_tokens = 300\ntokenizer = \"estimate\"".to_string();
    let sessions = |extra: &str| {
        format!(
            "tokenizer = \"estimate\"\n[workload.sessions]\nconversations = 4\nturns = 2\nfirst_tokens = 300\nuser_tokens = 40\noutput_tokens = 8\n{extra}"
        )
    };
    vec![
        Kind {
            name: "chat",
            api: "chat",
            load: closed,
            workload: synthetic.clone(),
            head: "user\u{1}Request ",
            within: Within::Requests,
        },
        Kind {
            name: "shared-prefix",
            api: "chat",
            load: closed,
            workload: format!("{synthetic}\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 64"),
            head: "user\u{1}Shared reference text:",
            within: Within::Shared,
        },
        Kind {
            name: "completions",
            api: "completions",
            load: closed,
            workload: synthetic.clone(),
            head: "Request ",
            within: Within::Requests,
        },
        Kind {
            name: "responses",
            api: "responses",
            load: closed,
            workload: synthetic.clone(),
            head: "user\u{1}Request ",
            within: Within::Requests,
        },
        Kind {
            name: "messages",
            api: "messages",
            load: closed,
            workload: synthetic.clone(),
            head: "user\u{1}Request ",
            within: Within::Requests,
        },
        Kind {
            name: "embeddings",
            api: "embeddings",
            load: closed,
            workload: "context_tokens = 100\nbatch_size = 3".into(),
            head: "Request ",
            within: Within::Requests,
        },
        Kind {
            name: "rerank",
            api: "rerank",
            load: closed,
            workload: "context_tokens = 100\nbatch_size = 3".into(),
            head: "Request ",
            within: Within::Requests,
        },
        Kind {
            name: "dataset",
            api: "chat",
            load: closed,
            workload: format!("prompts = \"{}\"\ntokenizer = \"estimate\"", dataset.display()),
            head: "system\u{1}Request ",
            within: Within::Requests,
        },
        Kind {
            name: "trace-blocks",
            api: "chat",
            load: "",
            workload: format!(
                "tokenizer = \"estimate\"\n[workload.trace]\nfile = \"{}\"\nformat = \"jsonl\"\nblock_size = 64",
                blocks.display()
            ),
            head: "user\u{1}",
            within: Within::Shared,
        },
        Kind {
            name: "trace",
            api: "chat",
            load: "",
            workload: format!(
                "tokenizer = \"estimate\"\n[workload.trace]\nfile = \"{}\"\nformat = \"jsonl\"",
                plain.display()
            ),
            head: "user\u{1}\n\nRequest ",
            within: Within::Requests,
        },
        Kind {
            name: "sessions",
            api: "chat",
            load: "[load]\nsessions = 2",
            workload: sessions(""),
            head: "user\u{1}Session ",
            within: Within::FirstTurns,
        },
        Kind {
            name: "sessions-system",
            api: "chat",
            load: "[load]\nsessions = 2",
            workload: sessions("system_prompt_tokens = 64\nsystem_prompt_groups = 2"),
            head: "system\u{1}System prompt ",
            within: Within::FirstTurnsAfterSystem,
        },
        Kind {
            name: "sessions-dataset",
            api: "chat",
            load: "[load]\nsessions = 2",
            workload: format!(
                "tokenizer = \"estimate\"\n[workload.sessions]\nconversations = 4\ndataset = \"{}\"",
                conversations.display()
            ),
            head: "system\u{1}Session ",
            within: Within::FirstTurns,
        },
    ]
}

/// The longest run of units two sequences share from their start, and the pair.
fn worst<'a>(pairs: impl Iterator<Item = (&'a Sequence, &'a Sequence)>) -> Option<(usize, String, String)> {
    pairs.map(|(a, b)| (common_units(&a.text, &b.text), a.text.clone(), b.text.clone())).max_by_key(|(n, _, _)| *n)
}

fn shown(text: &str) -> String {
    text.chars().take(90).collect::<String>().escape_debug().to_string()
}

/// From the first user message on.
fn from_first_user(text: &str) -> &str {
    text.find("user\u{1}").map_or(text, |at| &text[at..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prompt_starts_like_another_runs_beyond_its_fixed_head() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let capture = Capture::start(server.addr()).await;
    for kind in kinds(dir.path()) {
        let file = scenario(dir.path(), kind.name, kind.api, kind.load, &kind.workload);
        let mut runs = Vec::new();
        for n in 0..2 {
            let out = dir.path().join(format!("out-{}-{n}", kind.name));
            run_scenario(&file, &capture.base_url(), &out, &[]).await;
            let sent = capture.take();
            assert!(sent.len() >= 4, "{}: {} requests seen", kind.name, sent.len());
            runs.push(sequences(&sent));
        }
        let allowed = units(kind.head).len() + CHANCE;
        // Whatever a prefix cache kept of one run, the other run's prompts find at most the
        // fixed head in it (and a few units by chance).
        let (n, a, b) = worst(runs[0].iter().flat_map(|a| runs[1].iter().map(move |b| (a, b)))).unwrap();
        eprintln!("{}: across runs at most {n} units in common, the fixed head {}", kind.name, units(kind.head).len());
        assert!(
            n <= allowed,
            "{}: a prompt of the second run starts with {n} units of one of the first run's (at most {allowed}):\n  {}\n  {}",
            kind.name,
            shown(&a),
            shown(&b)
        );
        // Within one run, requests share no more than that either (unless sharing is the
        // point of the kind).
        for seqs in &runs {
            let found = match kind.within {
                Within::Requests => worst(
                    seqs.iter().flat_map(|a| seqs.iter().map(move |b| (a, b))).filter(|(a, b)| a.request < b.request),
                ),
                Within::FirstTurns | Within::FirstTurnsAfterSystem => {
                    let after_system = matches!(kind.within, Within::FirstTurnsAfterSystem);
                    let firsts: Vec<Sequence> = seqs
                        .iter()
                        .filter(|s| s.first_turn)
                        .map(|s| Sequence {
                            text: if after_system { from_first_user(&s.text).to_string() } else { s.text.clone() },
                            ..s.clone()
                        })
                        .collect();
                    assert!(firsts.len() >= 2, "{}: {} first turns", kind.name, firsts.len());
                    let pairs: Vec<(Sequence, Sequence)> = firsts
                        .iter()
                        .flat_map(|a| firsts.iter().map(move |b| (a.clone(), b.clone())))
                        .filter(|(a, b)| a.request < b.request)
                        .collect();
                    worst(pairs.iter().map(|(a, b)| (a, b)))
                }
                Within::Shared => None,
            };
            let allowed = match kind.within {
                Within::FirstTurnsAfterSystem => units("user\u{1}Session ").len() + CHANCE,
                _ => allowed,
            };
            if let Some((n, a, b)) = found {
                assert!(
                    n <= allowed,
                    "{}: two requests of one run start with the same {n} units (at most {allowed}):\n  {}\n  {}",
                    kind.name,
                    shown(&a),
                    shown(&b)
                );
            }
        }
    }
    server.shutdown().await;
}

fn lines_of(path: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

/// The ten digits after a header's tag: the salt (its low 32 bits) the prompt was built with.
fn header_salt(text: &str) -> Option<u64> {
    let at = text.find("Request ")? + "Request ".len();
    let rest = &text[at..];
    let dash = rest.find('-')?;
    rest.get(dash + 1..dash + 11)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_levels_prompt_salt_is_recorded_and_is_the_one_its_prompts_carry() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let capture = Capture::start(server.addr()).await;
    let file = scenario(dir.path(), "levels", "chat", "requests = 4", "context_tokens = 200\ntokenizer = \"estimate\"");
    let (out, records) = (dir.path().join("out"), dir.path().join("levels.records.ndjson"));
    let artifacts = run_scenario(
        &file,
        &capture.base_url(),
        &out,
        &["--concurrency", "1,2,3", "--records", records.to_str().unwrap()],
    )
    .await;
    check_records(&records);
    let run_salt = lines_of(&records, "run")[0]["info"]["prompt_salt"].as_str().unwrap().to_string();
    let levels = lines_of(&records, "level");
    assert_eq!(levels.len(), 3);
    let salts: Vec<String> =
        levels.iter().map(|l| l["prompt_salt"].as_str().expect("the level's salt").to_string()).collect();
    for (i, salt) in salts.iter().enumerate() {
        assert!(salt.len() == 16 && salt.bytes().all(|b| b.is_ascii_hexdigit()), "{salt}");
        assert_ne!(*salt, run_salt, "a level's salt is its own");
        assert!(!salts[..i].contains(salt), "levels {salts:?} share a salt");
    }
    // The artifact of each level says the same.
    assert_eq!(artifacts.len(), 3);
    for a in &artifacts {
        let level = levels.iter().find(|l| l["level"] == a["run_id"]).expect("the artifact's level line");
        assert_eq!(a["level_prompt_salt"], level["prompt_salt"], "{}", a["run_id"]);
        assert_eq!(a["prompt_salt"].as_str(), Some(run_salt.as_str()));
    }
    // And it is the salt the prompts carry: four requests per level, each level's own.
    let sent = capture.take();
    let mut carried: Vec<u64> = sent
        .iter()
        .filter_map(|s| header_salt(s.body["messages"][0]["content"].as_str().unwrap_or_default()))
        .collect();
    carried.sort_unstable();
    let mut recorded: Vec<u64> = salts
        .iter()
        .flat_map(|s| std::iter::repeat_n(u64::from(u64::from_str_radix(s, 16).unwrap() as u32), 4))
        .collect();
    recorded.sort_unstable();
    assert_eq!(carried, recorded, "the salts in the prompts sent against the recorded ones");
    // Artifacts rebuilt from the records carry it too.
    let rebuilt = dir.path().join("rebuilt");
    let o = anvil().arg("summarize").arg(&records).arg("--out").arg(&rebuilt).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    for path in common::artifacts(&rebuilt) {
        let a = check_artifact(&path);
        let level = levels.iter().find(|l| l["level"] == a["run_id"]).expect("the rebuilt artifact's level line");
        assert_eq!(a["level_prompt_salt"], level["prompt_salt"]);
    }
    // Reproducible prompts: every level's salt is the run's, zeros.
    let fixed = scenario(
        dir.path(),
        "fixed",
        "chat",
        "requests = 2",
        "context_tokens = 200\ntokenizer = \"estimate\"\nreproducible = true",
    );
    let records = dir.path().join("fixed.records.ndjson");
    let artifacts = run_scenario(
        &fixed,
        &capture.base_url(),
        &dir.path().join("out-fixed"),
        &["--concurrency", "1,2", "--records", records.to_str().unwrap()],
    )
    .await;
    check_records(&records);
    for l in lines_of(&records, "level") {
        assert_eq!(l["prompt_salt"], "0000000000000000");
    }
    assert!(artifacts.iter().all(|a| a["level_prompt_salt"] == "0000000000000000"));
    server.shutdown().await;
}

/// A conversation scenario against the simulator, sized by calibration.
fn conversation_scenario(dir: &Path, name: &str, sessions: &str, serve: &str) -> PathBuf {
    write(
        dir,
        &format!("{name}.toml"),
        &format!(
            "[target]\nmodel = \"m\"\n{serve}\n[run]\nseed = 5\n[load]\nsessions = 3\n[workload]\nmax_context_tokens = 32768\nmax_tokens = 32\n[workload.sessions]\nconversations = 6\nturns = 4\nfirst_tokens = 400\nuser_tokens = 60\noutput_tokens = 32\n{sessions}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_of_a_conversation_is_sized_as_the_server_counts_it() {
    // A chat template that adds a 40-token default system prompt unless the conversation brings
    // its own (as Qwen2.5's do): the calibration probes carry it, prompts with a system
    // message do not. The simulator reads a generated canary marker back as four more tokens
    // than it generated, the error left in a later turn's plan (a real model generates the
    // marker's own tokens); otherwise every turn is planned as the server counts it.
    let profile = Profile { default_system_prompt_tokens: 40, ..Profile::named("fast").unwrap() };
    let server = MockServer::start(profile).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let no_thinking = "[serve]\nthinking_mode = \"disabled\"";
    let cases = [
        // A system prompt, live answers counted as the server generated them.
        ("system", "system_prompt_tokens = 256\nsystem_prompt_groups = 2", no_thinking, true),
        // No system prompt; the model reasons, and its reasoning is left out of the history.
        ("reasoning", "", "", false),
        // Recorded answers (seeded text of the planned length), a system prompt.
        ("recorded", "history = \"recorded\"\nsystem_prompt_tokens = 128", no_thinking, true),
    ];
    for (name, sessions, serve, system) in cases {
        let file = conversation_scenario(dir.path(), name, sessions, serve);
        let a = run_scenario(&file, &server.base_url(), &dir.path().join(format!("out-{name}")), &[]).await.remove(0);
        let sizing = &a["prompt_sizing"];
        assert_eq!(sizing["mode"], "calibrate");
        // The system-message template is probed whenever the conversations have a system prompt.
        assert_eq!(sizing["system_probe"]["server_prompt_tokens"].is_u64(), system, "{name}: {sizing}");
        assert_eq!(sizing["system_message_overhead"].is_f64(), system, "{name}: {sizing}");
        // And what a later turn adds, always (every conversation has four turns).
        assert!(sizing["turn_probe"]["server_prompt_tokens"].is_u64(), "{name}: {sizing}");
        assert!(sizing["turn_overhead"].is_f64(), "{name}: {sizing}");
        let rs = a["request_timings"].as_array().unwrap();
        assert_eq!(rs.len(), 24, "{name}: 6 conversations of 4 turns");
        let mut worst = (0.0f64, 0u64);
        for r in rs {
            let (target, served) = (r["prompt_target_tokens"].as_u64().unwrap(), r["prompt_tokens"].as_u64().unwrap());
            let error = r["prompt_sizing_error_pct"].as_f64().unwrap();
            worst = (worst.0.max(error.abs()), worst.1.max(served.abs_diff(target)));
            assert!(
                error.abs() <= 2.0 && served.abs_diff(target) <= 10,
                "{name}: turn {} of {}: planned {target}, the server counted {served} ({error:+.2} %)",
                r["turn"],
                r["session"]
            );
        }
        eprintln!("{name}: every turn within {:.2} % ({} tokens) of the server's count", worst.0, worst.1);
        let warnings = a["warnings"].as_array().unwrap();
        assert!(!warnings.iter().any(|w| w["code"] == "prompt_sizing_off"), "{name}: {warnings:?}");
    }
    server.shutdown().await;
}
