//! Prompt building: sizing, uniqueness, salts, shared prefixes, datasets.

use super::*;
use crate::scenario::{Overrides, Scenario};

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
