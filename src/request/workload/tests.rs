//! Prompt building: sizing, uniqueness, salts, shared prefixes, datasets.

use super::*;
use crate::plan::scenario::{Overrides, Scenario};

fn scenario(workload: &str) -> Scenario {
    let text = format!(
        "[target]\nmodel = \"m\"\n[run]\nrequests = 4\nseed = 3\n[workload]\nmax_context_tokens = 300000\nmax_tokens = 64\n{workload}"
    );
    Scenario::from_toml(std::path::Path::new("test.toml"), &text, &Overrides::default()).unwrap()
}

fn prompt_of(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["messages"][0]["content"].as_str().unwrap().to_string()
}

const ESTIMATE: Sizer = Sizer::Estimate { overhead: 8.0 };

#[test]
fn synthetic_prompts_hit_their_target_by_the_sizer() {
    for context in [64, 1000, 8192, 65_536, 200_000] {
        let s = scenario(&format!("context_tokens = {context}"));
        for sizer in [ESTIMATE, Sizer::Fit { slope: 1.21, intercept: 11.0 }] {
            let w = Workload::new(&s, 7, sizer.clone());
            let r = w.prepare(1);
            assert_eq!(r.planned_context_tokens, context);
            let predicted = sizer.prompt_tokens(&prompt_of(&r.body));
            // Whole filler words: within one word's worth of tokens.
            assert!((predicted - f64::from(context)).abs() <= 1.3, "{context} {sizer:?}: {predicted}");
            assert_eq!(r.prompt_target_tokens, predicted.round() as u32);
        }
    }
}

#[test]
fn prompts_are_unique_per_request_salted_per_run_and_reproducible_on_request() {
    let s = scenario("context_tokens = 600");
    let a = Workload::new(&s, 1, ESTIMATE);
    let b = Workload::new(&s, 2, ESTIMATE);
    let p = |w: &Workload, i| prompt_of(&w.prepare(i).body);
    assert_eq!(p(&a, 0), p(&a, 0));
    assert_ne!(p(&a, 0), p(&a, 1));
    assert_ne!(p(&a, 0), p(&b, 0), "another run salt, other prompts");
    // The first words already differ, so no cache block can be shared.
    let common = p(&a, 0).bytes().zip(p(&a, 1).bytes()).take_while(|(x, y)| x == y).count();
    assert!(common < 16, "shared prefix of {common} bytes");
    let s = scenario("context_tokens = 600\nreproducible = true");
    assert_eq!(p(&Workload::new(&s, 1, ESTIMATE), 0), p(&Workload::new(&s, 2, ESTIMATE), 0));
}

#[test]
fn shared_prefix_is_common_and_at_least_its_size() {
    let s = scenario("context_tokens = 8192\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 4096");
    let w = Workload::new(&s, 9, ESTIMATE);
    let (a, b) = (prompt_of(&w.prepare(0).body), prompt_of(&w.prepare(1).body));
    let common: String = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).map(|(x, _)| x).collect();
    assert!(estimate_tokens(&common) >= 4096, "{}", estimate_tokens(&common));
    assert!(estimate_tokens(&common) < 4096 + 64);
    assert!((ESTIMATE.prompt_tokens(&a) - 8192.0).abs() <= 1.0);
    // The prefix is counted once per level, not per prompt: the targets are still the whole
    // prompt's count, on every level.
    for sizer in [ESTIMATE, Sizer::Fit { slope: 1.21, intercept: 11.0 }] {
        let w = Workload::new(&s, 9, sizer.clone());
        for w in [w.for_level(1.0), w.for_level(2.0), w] {
            for i in 0..3 {
                let r = w.prepare(i);
                assert_eq!(r.prompt_target_tokens, sizer.prompt_tokens(&prompt_of(&r.body)).round() as u32);
            }
        }
    }
}

#[test]
fn mixture_draws_follow_weights_and_seed() {
    let dist = ContextDistribution::Weighted { choices: vec![(1024, 3), (8192, 1)] };
    let draws = |seed| (0..4000).map(|i| draw_context(&dist, seed, i)).collect::<Vec<_>>();
    let a = draws(5);
    assert_eq!(a, draws(5));
    let small = a.iter().filter(|&&t| t == 1024).count();
    // Binomial(4000, 0.75): mean 3000, sd 27.4; ±4 sd.
    assert!((2890..=3110).contains(&small), "{small}");
}

#[test]
fn uniform_and_normal_draws_stay_in_bounds() {
    let u = ContextDistribution::Uniform { lo: 1000, hi: 2000 };
    let n = ContextDistribution::Normal { mean: 1500.0, sd: 800.0, min: 64, max: 2000 };
    let us: Vec<u32> = (0..2000).map(|i| draw_context(&u, 1, i)).collect();
    let ns: Vec<u32> = (0..2000).map(|i| draw_context(&n, 1, i)).collect();
    assert!(us.iter().all(|t| (1000..=2000).contains(t)));
    assert!(ns.iter().all(|t| (64..=2000).contains(t)));
    assert!(ns.contains(&2000), "the sd is wide enough that clamping shows");
    let mean = us.iter().map(|&t| f64::from(t)).sum::<f64>() / us.len() as f64;
    assert!((mean - 1500.0).abs() < 30.0, "{mean}");
}

#[test]
fn canary_and_word_count_instructions_end_the_prompt() {
    let s = scenario("context_tokens = 300");
    let r = Workload::new(&s, 1, ESTIMATE).prepare(4);
    assert_eq!(r.canary.as_deref(), Some("ANVIL_REQ_3_00004"));
    assert!(prompt_of(&r.body).ends_with(
        "begin your reply with the exact text ANVIL_REQ_3_00004 and then summarise the reference text in one sentence."
    ));
    let text = "[target]\nmodel = \"m\"\n[run]\nrequests = 4\n[workload]\ncontext_tokens = 300\nmax_context_tokens = 4096\nmax_tokens = 64\ncanaries = false\n[output]\nresponse_words = 12\n";
    let s = Scenario::from_toml(std::path::Path::new("t.toml"), text, &Overrides::default()).unwrap();
    let r = Workload::new(&s, 1, ESTIMATE).prepare(0);
    assert!(r.canary.is_none() && r.response_words == Some(12));
    assert!(prompt_of(&r.body).ends_with("answer in exactly 12 words about the reference text."));
}

#[test]
fn every_request_header_has_the_probes_length() {
    let s = scenario("context_tokens = 300");
    for salt in [0, 7, u64::MAX] {
        let w = Workload::new(&s, salt, ESTIMATE);
        let probe = w.header(TAG_SPACE - 1);
        let mut seen = std::collections::HashSet::new();
        for i in [0, 1, 9, 10, 99, 100, 999, 1_000, 12_345, 99_999, 1_000_000, 9_999_999_999] {
            let h = w.header(i);
            assert_eq!(h.len(), probe.len(), "{h:?} against the probe's {probe:?}");
            assert_eq!(estimate_tokens(&h), estimate_tokens(&probe));
            assert!(seen.insert(h), "tags are distinct");
        }
        // Consecutive requests differ in the tag's first digit: no shared cache block.
        assert_ne!(w.header(0).as_bytes()[8], w.header(1).as_bytes()[8]);
    }
}

#[test]
fn each_level_has_its_own_prompts_unless_they_are_reproducible() {
    let s = scenario("context_tokens = 600");
    let w = Workload::new(&s, 11, ESTIMATE);
    let p = |w: &Workload, i| prompt_of(&w.prepare(i).body);
    let (one, two) = (w.for_level(1.0), w.for_level(2.0));
    assert_ne!(p(&one, 0), p(&two, 0));
    assert_ne!(p(&one, 0), p(&w, 0));
    assert_eq!(p(&one, 3), p(&w.for_level(1.0), 3), "a level's prompts are a function of the level");
    // The header keeps its length whatever the level's salt.
    assert_eq!(one.header(5).len(), two.header(5).len());
    let shared = scenario("context_tokens = 8192\nprompt_cache = \"shared-prefix\"\nshared_prefix_tokens = 4096");
    let w = Workload::new(&shared, 11, ESTIMATE);
    assert_ne!(w.for_level(1.0).shared_prefix, w.for_level(2.0).shared_prefix, "each level warms its own prefix");
    let fixed = scenario("context_tokens = 600\nreproducible = true");
    let w = Workload::new(&fixed, 11, ESTIMATE);
    assert!(w.levels_share_prompts());
    assert_eq!(p(&w.for_level(1.0), 2), p(&w.for_level(4.0), 2));
}

#[test]
fn a_conversation_with_its_own_system_message_uses_the_measured_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.jsonl");
    std::fs::write(
        &data,
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"the river\"}]}\n",
    )
    .unwrap();
    let s = scenario(&format!("prompts = \"{}\"\ncanaries = false", data.display()));
    let base = Workload::new(&s, 1, ESTIMATE);
    assert!(base.has_system_conversations());
    let measured = base.clone().with_system_overhead(Some(-30.0));
    let (plain, adjusted) = (base.prepare(0).prompt_target_tokens, measured.prepare(0).prompt_target_tokens);
    // Without a measurement: one message's template (8) plus 4 for the second message; with it,
    // the measured overhead of the whole [system, user] shape replaces both.
    assert_eq!(f64::from(plain) - f64::from(adjusted), 8.0 + 4.0 + 30.0);
    let (body, system, user) = base.system_probe(0, 32);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((v["stream"].as_bool(), v["max_tokens"].as_u64()), (Some(false), Some(1)));
    assert!(v.get("stream_options").is_none());
    assert_eq!(
        (v["messages"][0]["content"].as_str(), v["messages"][1]["content"].as_str()),
        (Some(&*system), Some(&*user))
    );
}

#[test]
fn a_request_tag_is_keyed_by_the_salt_from_its_first_digit() {
    let s = scenario("context_tokens = 300");
    let a = Workload::new(&s, 0x1234_5678_9abc_def0, ESTIMATE);
    let b = Workload::new(&s, 0x0fed_cba9_8765_4321, ESTIMATE);
    // The same request of two runs: its tags share leading digits only by chance, request by
    // request (one in ten a digit, one in a hundred two), never the whole tag, as they did when
    // the salt came after the tag.
    let common = |i| a.tag(i).bytes().zip(b.tag(i).bytes()).take_while(|(x, y)| x == y).count();
    let shared: Vec<usize> = (0..10_000).map(common).collect();
    let at_least = |n| shared.iter().filter(|&&c| c >= n).count();
    assert!((800..1200).contains(&at_least(1)), "{} of 10,000 share a first digit", at_least(1));
    assert!((50..150).contains(&at_least(2)), "{} of 10,000 share two digits", at_least(2));
    assert!(at_least(5) <= 2, "{} of 10,000 share five digits", at_least(5));
    // And that holds for any two salts, not only these: the keyed steps make it a chance of
    // each request.
    for salts in [(1, 2), (3, 0x8000_0000_0000_0000), (u64::MAX, 7)] {
        let (x, y) = (Workload::new(&s, salts.0, ESTIMATE), Workload::new(&s, salts.1, ESTIMATE));
        let same = (0..2000).filter(|&i| x.tag(i).as_bytes()[0] == y.tag(i).as_bytes()[0]).count();
        assert!((100..300).contains(&same), "salts {salts:?}: {same} of 2000 share a first digit");
    }
    // Within a level the tags stay distinct, of one width.
    let tags: std::collections::HashSet<String> = (0..20_000).map(|i| a.tag(i)).collect();
    assert_eq!(tags.len(), 20_000);
    assert!(tags.iter().all(|t| t.len() == 10));
    // Each level keys its own.
    let (one, two) = (a.for_level(1.0), a.for_level(2.0));
    assert!((0..100).all(|i| one.tag(i) != two.tag(i) && one.tag(i) != a.tag(i)));
    // Reproducible prompts keep the plain permutation, the same in every run.
    let fixed = scenario("context_tokens = 300\nreproducible = true");
    assert_eq!(Workload::new(&fixed, 1, ESTIMATE).tag(1), "7639320221");
    assert_eq!(Workload::new(&fixed, 1, ESTIMATE).header(1), Workload::new(&fixed, 2, ESTIMATE).header(1));
}

#[test]
fn a_levels_recorded_salt_is_the_one_its_prompts_use() {
    let s = scenario("context_tokens = 600");
    let w = Workload::new(&s, 0xabc, ESTIMATE);
    let run = format!("{:016x}", w.salt());
    for level in [1.0, 2.0, 0.5, 64.0] {
        let salt = w.level_salt(level);
        assert_eq!(salt, w.for_level(level).salt());
        assert_ne!(salt, w.salt());
        assert_eq!(level_prompt_salt_hex(&run, false, level), Some(format!("{salt:016x}")));
        // The salt the header carries is this one.
        let header = w.for_level(level).header(3);
        assert!(header.contains(&format!("-{:010} ", salt as u32)), "{header}");
    }
    assert_eq!(level_prompt_salt_hex(&run, true, 4.0), Some(run.clone()), "reproducible: the run's");
    for bad in ["", "abc", "+000000000000abc", "000000000000000g", "0000000000000000a"] {
        assert_eq!(level_prompt_salt_hex(bad, false, 1.0), None, "{bad:?}");
    }
}
