//! Parsing every format, the row checks, and the selection.

use std::time::Duration;

use super::*;

fn options(format: TraceFormat) -> TraceOptions {
    TraceOptions {
        format,
        block_size: None,
        time_scale: 1.0,
        max_gap: None,
        window: None,
        sample: None,
        seed: 1,
        max_context_tokens: 1_000_000,
        max_output_tokens: 100_000,
    }
}

fn load(format: TraceFormat, text: &str) -> Result<Trace, TraceError> {
    load_with(&options(format), text)
}

fn load_with(o: &TraceOptions, text: &str) -> Result<Trace, TraceError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    std::fs::write(&path, text).unwrap();
    Trace::load(&path, o)
}

fn ms(rows: &[TraceRow]) -> Vec<u128> {
    rows.iter().map(|r| r.offset.as_millis()).collect()
}

const MOONCAKE: &str = r#"{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 3000, "input_length": 1024, "output_length": 20, "hash_ids": [1, 2]}

{"timestamp": 3000, "input_length": 600, "output_length": 30, "hash_ids": [7, 8]}
"#;

#[test]
fn mooncake_rows_keep_milliseconds_hash_ids_and_row_numbers() {
    let t = load(TraceFormat::Mooncake, MOONCAKE).unwrap();
    assert_eq!(t.block_size, 512);
    assert_eq!(ms(&t.rows), vec![0, 3000, 3000]);
    assert_eq!(t.rows.iter().map(|r| r.row).collect::<Vec<_>>(), vec![1, 2, 3], "blank lines are not rows");
    assert_eq!(*t.rows[1].hash_ids, [1, 2]);
    assert_eq!((t.rows[0].input_tokens, t.rows[0].output_tokens), (1100, 10));
    assert_eq!(t.stats.rows, 3);
    assert_eq!(t.stats.simultaneous_rows, 1);
    // Row 2 reuses both of its blocks (row 1 started with them), row 3 none.
    assert_eq!(reusable_blocks(&t.rows), vec![0, 2, 0]);
    assert_eq!(t.stats.reusable_input_tokens, 1024);
    assert!((t.planned_rate() - 2.0 / 3.0).abs() < 1e-12);
}

#[test]
fn bailian_sessions_follow_parents_to_the_root_and_block_16() {
    let text = r#"{"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 40, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 11, "parent_chat_id": -1, "timestamp": 1.75, "input_length": 16, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [9]}
{"chat_id": 12, "parent_chat_id": 10, "timestamp": 2.0, "input_length": 70, "output_length": 6, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4, 5]}
{"chat_id": 13, "parent_chat_id": 12, "timestamp": 4.0, "input_length": 90, "output_length": 6, "type": "text", "turn": 3, "hash_ids": [1, 2, 3, 4, 5, 6]}
"#;
    let t = load(TraceFormat::Bailian, text).unwrap();
    assert_eq!(t.block_size, 16);
    assert_eq!(ms(&t.rows), vec![0, 250, 500, 2500]);
    let sessions: Vec<_> = t.rows.iter().map(|r| r.session.clone().unwrap()).collect();
    assert_eq!(sessions, vec!["10", "11", "10", "10"]);
    assert_eq!(t.rows[3].turn, Some(3));
    assert_eq!(t.stats.sessions, 2);
    assert_eq!(reusable_blocks(&t.rows), vec![0, 0, 3, 5]);
}

#[test]
fn azure_datetimes_and_burstgpt_failures() {
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9170000,396,109\n2023-11-16 18:16:01.0000000,879,20\n";
    let t = load(TraceFormat::Azure, azure).unwrap();
    assert_eq!(t.rows.iter().map(|r| r.offset.as_nanos()).collect::<Vec<_>>(), vec![0, 4_236_410_000, 14_319_410_000]);
    assert!(t.rows.iter().all(|r| r.hash_ids.is_empty() && r.session.is_none()));
    let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,Conversation log\n118,ChatGPT,417,217,634,API log\n";
    let t = load(TraceFormat::Burstgpt, burst).unwrap();
    assert_eq!(t.skipped.no_output, 1, "the failed request is counted");
    assert_eq!(t.rows_in_file, 3);
    assert_eq!(ms(&t.rows), vec![0, 113_000]);
    assert_eq!(t.rows[1].row, 3, "row numbers are the file's");
}

#[test]
fn own_jsonl_needs_a_block_size_for_hash_ids() {
    let text = "{\"offset_ms\": 0, \"input_tokens\": 64, \"output_tokens\": 8, \"hash_ids\": [1, 2], \"session\": \"a\", \"turn\": 1}\n";
    let e = load(TraceFormat::Jsonl, text).unwrap_err();
    assert_eq!(e.row, Some(1));
    assert!(e.fix.contains("block_size"), "{e:?}");
    let mut o = options(TraceFormat::Jsonl);
    o.block_size = Some(32);
    let t = load_with(&o, text).unwrap();
    assert_eq!((t.block_size, t.rows[0].session.as_deref()), (32, Some("a")));
}

#[test]
fn bad_rows_are_named() {
    let cases = [
        // Out of order: a negative gap.
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 10, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [2]}\n",
            2,
            "negative gap",
        ),
        // Too few hash ids for the input.
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 2000, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
            1,
            "cannot make up input length 2000",
        ),
        // Too many.
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
            1,
            "cannot make up",
        ),
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n",
            1,
            "negative",
        ),
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}\n",
            1,
            "input_length is 0",
        ),
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1, \"hash_ids\": [1]}\n",
            1,
            "not a token count",
        ),
        (
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [-3]}\n",
            1,
            "hash ids are integers",
        ),
        (TraceFormat::Mooncake, "nonsense\n", 1, "not JSON"),
        (
            TraceFormat::Azure,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:45.0000000,10,1\n",
            2,
            "negative gap",
        ),
        (TraceFormat::Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n", 1, "not a datetime"),
        (
            TraceFormat::Burstgpt,
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,-4,3,0,API log\n",
            1,
            "not a token count",
        ),
    ];
    for (format, text, row, words) in cases {
        let e = load(format, text).unwrap_err();
        assert_eq!(e.row, Some(row), "{format:?} {text:?}: {e:?}");
        assert!(e.located().contains(words), "{format:?}: {} lacks {words:?}", e.located());
    }
    // CSV rows say their line too (the header is line 1).
    let e = load(TraceFormat::Azure, cases[9].1).unwrap_err();
    assert!(e.located().starts_with("row 1 (line 2)"), "{}", e.located());
    let e = load(TraceFormat::Azure, "when,ContextTokens\n").unwrap_err();
    assert!(e.problem.contains("no \"TIMESTAMP\" column"), "{e:?}");
}

fn spaced(n: u64, gap_ms: u64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"offset_ms\": {}, \"input_tokens\": 100, \"output_tokens\": 4, \"session\": \"s{}\"}}\n",
                i * gap_ms,
                i % 10
            )
        })
        .collect()
}

#[test]
fn window_gap_cap_and_rebase() {
    let mut o = options(TraceFormat::Jsonl);
    o.window = Some((Duration::from_millis(250), Duration::from_millis(650)));
    let t = load_with(&o, &spaced(10, 100)).unwrap();
    // Rows at 300..=600 ms, re-based to the first.
    assert_eq!(ms(&t.rows), vec![0, 100, 200, 300]);
    assert_eq!(t.skipped.outside_window, 6);
    let text = "{\"offset_ms\": 0, \"input_tokens\": 9, \"output_tokens\": 1}\n{\"offset_ms\": 100, \"input_tokens\": 9, \"output_tokens\": 1}\n{\"offset_ms\": 60100, \"input_tokens\": 9, \"output_tokens\": 1}\n{\"offset_ms\": 60150, \"input_tokens\": 9, \"output_tokens\": 1}\n";
    let mut o = options(TraceFormat::Jsonl);
    o.max_gap = Some(Duration::from_secs(2));
    o.time_scale = 0.5;
    let t = load_with(&o, text).unwrap();
    assert_eq!(ms(&t.rows), vec![0, 100, 2100, 2150]);
    assert_eq!(t.gaps_capped, 1);
    assert_eq!(t.scaled_offset(3), Some(Duration::from_millis(1075)));
    assert!((t.stats.replay_duration_s - 1.075).abs() < 1e-9);
}

#[test]
fn sampling_keeps_whole_sessions_by_seed() {
    let mut o = options(TraceFormat::Jsonl);
    o.sample = Some(0.5);
    let text = spaced(200, 10);
    let a = load_with(&o, &text).unwrap();
    assert_eq!(a.rows.len() as u64 + a.skipped.sampled_out, 200);
    let kept: std::collections::BTreeSet<_> = a.rows.iter().map(|r| r.session.clone().unwrap()).collect();
    // Every row of a kept session is kept: 20 rows per session.
    assert_eq!(a.rows.len(), kept.len() * 20);
    assert!((1..10).contains(&kept.len()), "{kept:?}");
    assert_eq!(load_with(&o, &text).unwrap().rows, a.rows, "same seed, same sample");
    o.seed = 99;
    let b = load_with(&o, &text).unwrap();
    let kept_b: std::collections::BTreeSet<_> = b.rows.iter().map(|r| r.session.clone().unwrap()).collect();
    assert_ne!(kept, kept_b, "another seed, another sample (10 sessions at 1/2: equal by chance 1 in 1024)");
}

#[test]
fn oversized_rows_are_skipped_and_counted() {
    let mut o = options(TraceFormat::Jsonl);
    o.max_context_tokens = 150;
    o.max_output_tokens = 50;
    let text = "{\"offset_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 50}\n{\"offset_ms\": 1, \"input_tokens\": 100, \"output_tokens\": 51}\n{\"offset_ms\": 2, \"input_tokens\": 10, \"output_tokens\": 60}\n";
    let t = load_with(&o, text).unwrap();
    assert_eq!((t.rows.len(), t.skipped.oversized), (1, 2));
    o.max_context_tokens = 10;
    let e = load_with(&o, text).unwrap_err();
    assert!(e.problem.contains("no row is left") && e.problem.contains("3 too large"), "{e:?}");
}

#[test]
fn every_time_is_bounded_before_it_becomes_a_duration() {
    let row = |t: &str| format!("{{\"offset_ms\": {t}, \"input_tokens\": 9, \"output_tokens\": 1}}\n");
    let two = |t: &str| format!("{}{}", row("0"), row(t));
    // Beyond any clock, beyond a trace's span, beyond the longest run: each names row 2 and
    // quotes the time as written.
    for (t, words) in [
        ("1e300", "beyond any trace's clock"),
        ("1.8446744073709552e13", "beyond any trace's clock"),
        ("18446744073709", "a trace spans at most 366 days"),
        ("31708800000", "a trace spans at most 366 days"),
        ("2592000001", "later than the longest run lasts (30 days)"),
    ] {
        let e = load(TraceFormat::Jsonl, &two(t)).unwrap_err();
        assert_eq!(e.row, Some(2), "{t}: {e:?}");
        assert!(e.problem.contains(&format!("offset_ms {t} (milliseconds)")), "{t}: {e:?}");
        assert!(e.problem.contains(words), "{t}: {e:?}");
    }
    // The longest run is measured after the window, the gap cap and the time scale.
    let mut o = options(TraceFormat::Jsonl);
    o.time_scale = 0.5;
    let t = load_with(&o, &two("3000000000")).unwrap();
    assert_eq!(t.scaled_offset(1), Some(Duration::from_secs(1_500_000)));
    let mut o = options(TraceFormat::Jsonl);
    o.max_gap = Some(Duration::from_secs(60));
    assert_eq!(ms(&load_with(&o, &two("3000000000")).unwrap().rows), vec![0, 60_000]);
    let mut o = options(TraceFormat::Jsonl);
    o.window = Some((Duration::from_secs(2_999_999), Duration::from_secs(3_000_001)));
    assert_eq!(load_with(&o, &format!("{}{}", two("3000000000"), row("3000000500"))).unwrap().rows.len(), 2);
    // Years past what a day count holds are not datetimes; BurstGPT's seconds are bounded too.
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,9,1\n99999999999-01-01 00:00:00,9,1\n";
    assert!(load(TraceFormat::Azure, azure).unwrap_err().problem.contains("not a datetime"));
    let burst =
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,m,9,1,10,x\n1e300,m,9,1,10,x\n";
    let e = load(TraceFormat::Burstgpt, burst).unwrap_err();
    assert!(e.problem.contains("Timestamp 1e300 (seconds)") && e.problem.contains("beyond"), "{e:?}");
    // A token count written as a huge float is not saturated into range.
    let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,m,1e300,1,10,x\n";
    assert!(load(TraceFormat::Burstgpt, burst).unwrap_err().problem.contains("not a token count"));
}

#[test]
fn lines_are_bounded_and_must_be_text() {
    let mut long = "{\"offset_ms\": 0, \"input_tokens\": 9, \"output_tokens\": 1}\n".to_string();
    long.push_str(&" ".repeat(MAX_LINE_BYTES as usize + 1));
    let e = load(TraceFormat::Jsonl, &long).unwrap_err();
    assert!(e.located().starts_with("line 2: is longer than 16 MiB"), "{}", e.located());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    std::fs::write(&path, b"{\"offset_ms\": 0, \"input_tokens\": 9, \"output_tokens\": 1}\r\n\xff\xfe\n").unwrap();
    let e = Trace::load(&path, &options(TraceFormat::Jsonl)).unwrap_err();
    assert!(e.located().starts_with("line 2: is not UTF-8 text"), "{}", e.located());
}
