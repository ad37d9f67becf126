//! Configuration property tests: any scenario validation accepts runs to completion against the
//! simulator without a panic, and any it rejects is refused with exit code 2 naming a key.
//!
//! Scenarios are drawn from a grammar of keys, each with ordinary, boundary and absurd values
//! (`"100000h"`, `1e-300`, `1e300`, `"1ns"`, negative counts, wrong types). Many cases go through
//! `Scenario::from_toml` in-process, checking that whatever is accepted is bounded (no duration
//! that overflows an instant, no rate whose gap overflows a timer) and that every refusal speaks
//! the scenario's language; a handful go through the real binary against the embedded simulator.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use anvil_load::plan::scenario::{Arrival, Overrides, Pacing, PhaseLength, Scenario};
use common::{anvil, artifacts, check_artifact, run, text};
use proptest::prelude::*;

/// Which loop a setting belongs to; settings of the other mode are drawn rarely (they must be
/// refused as misplaced).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Any,
    Closed,
    Open,
}

/// One key: values that should be accepted and values that must be refused (TOML text; a value
/// may carry a companion line of the same section, like `burstiness` after `"gamma"`).
struct Setting {
    section: &'static str,
    key: &'static str,
    mode: Mode,
    good: &'static [&'static str],
    bad: &'static [&'static str],
}

const fn setting(
    section: &'static str,
    key: &'static str,
    mode: Mode,
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> Setting {
    Setting { section, key, mode, good, bad }
}

const SETTINGS: &[Setting] = &[
    setting("run", "requests", Mode::Any, &["1", "3"], &["0", "-1", "1e300", "\"two\""]),
    setting(
        "run",
        "duration",
        Mode::Any,
        &["\"250ms\"", "\"720h\""],
        &["\"0s\"", "\"1ns\"", "\"100000h\"", "\"1e300s\"", "\"soon\"", "5"],
    ),
    setting("run", "grace", Mode::Any, &["\"1s\"", "\"100ms\""], &["\"25h\"", "\"0s\"", "\"1e300s\""]),
    setting(
        "run",
        "snapshot_interval",
        Mode::Any,
        &["\"0s\"", "\"1s\"", "\"off\""],
        &["\"1ns\"", "\"999ms\"", "\"100000h\""],
    ),
    setting("run", "warmup", Mode::Any, &["1", "\"200ms\""], &["-3", "\"1000000h\"", "[1]", "1.5"]),
    setting("run", "cooldown", Mode::Any, &["1", "\"200ms\""], &["\"1000000h\""]),
    setting("run", "seed", Mode::Any, &["1", "42"], &["-1", "1e300"]),
    setting(
        "load",
        "concurrency",
        Mode::Closed,
        &["1", "2", "[1, 2]"],
        &["0", "1e300", "100001", "\"4\"", "1.5", "[]"],
    ),
    setting("load", "max_rate", Mode::Closed, &["50", "1000", "0.001"], &["1e-300", "1e300", "-1", "nan", "inf"]),
    setting("load", "rate", Mode::Open, &["20", "[10, 20]"], &["1e-300", "0.0005", "1e300", "-5", "nan"]),
    setting(
        "load",
        "arrival",
        Mode::Open,
        &["\"poisson\"", "\"constant\"", "\"gamma\"\nburstiness = 0.5"],
        &["\"gamma\"\nburstiness = 1e-300", "\"gamma\"\nburstiness = 1e300", "\"uniform\"", "\"gamma\""],
    ),
    setting("load", "ramp", Mode::Open, &["\"500ms\""], &["\"1ns\"", "\"100000h\""]),
    setting("load", "max_in_flight", Mode::Open, &["4"], &["0", "1e300"]),
    setting("load", "max_dispatch_lag", Mode::Any, &["\"5ms\""], &["\"1ns\"", "\"2h\""]),
    setting("load", "max_client_lateness", Mode::Any, &["\"10ms\""], &["\"1ns\"", "\"2h\""]),
    setting(
        "client",
        "first_byte_timeout",
        Mode::Any,
        &["\"5s\"", "\"24h\""],
        &["\"100000h\"", "\"1e300s\"", "\"1ns\""],
    ),
    setting("client", "idle_timeout", Mode::Any, &["\"5s\"", "\"24h\""], &["\"100000h\""]),
    setting("client", "connect_timeout", Mode::Any, &["\"2s\""], &["\"2h\""]),
    setting("client", "retry_backoff", Mode::Any, &["\"10ms\"", "\"10m\""], &["\"100000h\"", "\"1h\""]),
    setting("client", "retries", Mode::Any, &["0", "2"], &["101", "-1"]),
    setting(
        "workload",
        "context_tokens",
        Mode::Any,
        &["128", "{ uniform = [64, 200] }", "{ normal = [150, 20] }", "{ 128 = 1, 256 = 2 }"],
        &["1e300", "{ uniform = [64, 1e300] }", "{ normal = [1e300, 5] }", "63"],
    ),
    setting("workload", "max_tokens", Mode::Any, &["4"], &["0", "100000000"]),
    setting("sampling", "temperature", Mode::Any, &["0.5"], &["1e300", "nan"]),
];

/// A drawn scenario: the loop and, per setting, the value written (if any).
#[derive(Debug, Clone)]
struct Draw {
    open: bool,
    values: Vec<Option<&'static str>>,
}

/// The scenario text: the drawn values over a small valid base.
fn scenario_text(draw: &Draw) -> String {
    let mut sections: Vec<(&str, Vec<String>)> =
        ["target", "run", "load", "workload", "sampling", "client"].iter().map(|s| (*s, Vec::new())).collect();
    let mut set = |section: &str, line: String| {
        sections.iter_mut().find(|(s, _)| *s == section).expect("known section").1.push(line);
    };
    set("target", "model = \"m\"".into());
    set("target", "simulator = \"instant\"".into());
    set("workload", "max_context_tokens = 8192".into());
    set("workload", "tokenizer = \"estimate\"".into());
    let chosen = |key: &str| SETTINGS.iter().zip(&draw.values).any(|(s, v)| s.key == key && v.is_some());
    if !chosen("requests") && !chosen("duration") {
        set("run", "requests = 2".into());
    }
    if draw.open {
        set("load", "mode = \"open\"".into());
        if !chosen("rate") {
            set("load", "rate = 20".into());
        }
    }
    if !chosen("context_tokens") {
        set("workload", "context_tokens = 128".into());
    }
    if !chosen("max_tokens") {
        set("workload", "max_tokens = 4".into());
    }
    for (s, value) in SETTINGS.iter().zip(&draw.values) {
        if let Some(value) = value {
            set(s.section, format!("{} = {value}", s.key));
        }
    }
    sections.iter().map(|(s, lines)| format!("[{s}]\n{}\n", lines.join("\n"))).collect()
}

/// Settings of the scenario's mode appear a third of the time, one value in eight refused;
/// the other mode's settings rarely. `quick` leaves out accepted values that make a run long.
fn draws(quick: bool) -> impl Strategy<Value = Draw> {
    any::<bool>().prop_flat_map(move |open| {
        let values: Vec<BoxedStrategy<Option<&'static str>>> = SETTINGS
            .iter()
            .map(|s| {
                let applies = s.mode == Mode::Any || (s.mode == Mode::Open) == open;
                let good: Vec<&'static str> =
                    s.good.iter().copied().filter(|v| !quick || !matches!(*v, "0.001" | "\"720h\"")).collect();
                let value = prop_oneof![7 => prop::sample::select(good), 1 => prop::sample::select(s.bad)];
                prop::option::weighted(if applies { 0.35 } else { 0.03 }, value).boxed()
            })
            .collect();
        values.prop_map(move |values| Draw { open, values })
    })
}

/// What an accepted scenario must never hold: durations that overflow an instant (or run for
/// more than 30 days), rates outside what a timer can pace.
fn assert_bounded(s: &Scenario) {
    let month = Duration::from_secs(30 * 86_400);
    let now = Instant::now();
    let mut durations = vec![
        ("run.grace", Some(s.run.grace)),
        ("run.duration", s.run.duration),
        ("run.snapshot_interval", s.run.snapshot_interval),
        ("load.max_dispatch_lag", Some(s.load.max_dispatch_lag)),
        ("load.max_client_lateness", Some(s.load.max_client_lateness)),
        ("client.connect_timeout", Some(s.client.connect)),
        ("client.first_byte_timeout", Some(s.client.first_byte)),
        ("client.idle_timeout", Some(s.client.idle)),
        // The worker doubles the back-off per retry with a saturating u32 factor.
        ("client.retry_backoff", s.client.retry.backoff.checked_mul(u32::MAX)),
    ];
    for (key, phase) in [("run.warmup", s.run.warmup), ("run.cooldown", s.run.cooldown)] {
        if let Some(PhaseLength::Time(t)) = phase {
            durations.push((key, Some(t)));
        }
    }
    let mut rates = Vec::new();
    match &s.load.pacing {
        Pacing::Closed { max_rate, .. } => rates.extend(*max_rate),
        Pacing::Open { rates: r, arrival, ramp, .. } => {
            rates.extend(r.iter().copied());
            durations.push(("load.ramp", *ramp));
            if let Arrival::Gamma { burstiness } = arrival {
                assert!(burstiness.is_finite() && *burstiness >= 0.01, "burstiness {burstiness}");
            }
        }
    }
    for (key, d) in durations {
        let d = d.unwrap_or_default();
        assert!(now.checked_add(d).is_some(), "{key} = {d:?} overflows an instant");
        if key != "client.retry_backoff" {
            assert!(d <= month, "{key} = {d:?} accepted");
        }
    }
    if let Some(interval) = s.run.snapshot_interval {
        assert!(interval >= Duration::from_secs(1), "snapshot interval {interval:?}");
    }
    for rate in rates {
        assert!((0.001..=100_000.0).contains(&rate), "rate {rate} accepted");
        // The mean gap of an arrival process must fit a timer.
        assert!(Duration::try_from_secs_f64(1.0 / rate).is_ok());
    }
}

/// A refusal names a key (or a line, for TOML syntax) in the words of the scenario reference.
fn assert_well_worded(message: &str, key: &str) {
    assert!(!key.is_empty() || message.contains("line"), "no key named: {message}");
    for internal in ["untagged enum", "Raw", "u64", "i64", "f64", "unit variant", "a sequence"] {
        assert!(!message.contains(internal), "internal words ({internal}) in: {message}");
    }
    if !message.contains("too large") {
        assert!(!message.contains("9223372036854775807"), "a saturated number in: {message}");
    }
    assert!(message.len() < 600, "an unreadable message: {message}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn whatever_validation_accepts_is_bounded_and_every_refusal_names_a_key(draw in draws(false)) {
        let text = scenario_text(&draw);
        match Scenario::from_toml(Path::new("fuzz.toml"), &text, &Overrides::default()) {
            Ok(s) => {
                assert_bounded(&s);
                // The plan can be described (it builds request 0).
                let plan = anvil_load::app::validate::describe(&s);
                prop_assert!(plan.contains("request 0"));
            }
            Err(e) => assert_well_worded(&e.to_string(), &e.key),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_binary_runs_what_validation_accepts_and_refuses_the_rest_with_exit_code_2(draw in draws(true)) {
        let toml = scenario_text(&draw);
        let verdict = Scenario::from_toml(Path::new("fuzz.toml"), &toml, &Overrides::default());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fuzz.toml");
        std::fs::write(&file, &toml).unwrap();
        let out = dir.path().join("out");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let result = runtime.block_on(async {
            let mut cmd = anvil();
            cmd.arg(&file).arg("--out").arg(&out).arg("--no-progress");
            run(cmd).await
        });
        let stderr = text(&result.stderr);
        prop_assert_ne!(result.status.code(), Some(101), "panic on\n{}\n{}", toml, stderr);
        match verdict {
            Ok(_) => {
                prop_assert!(
                    matches!(result.status.code(), Some(0 | 1)),
                    "accepted by validation, but the run ended with {:?}:\n{}\n{}", result.status.code(), toml, stderr
                );
                for path in artifacts(&out) {
                    check_artifact(&path);
                }
            }
            Err(e) => {
                prop_assert_eq!(result.status.code(), Some(2), "{}", stderr);
                prop_assert!(stderr.contains(&e.key), "the refusal names {}: {}", e.key, stderr);
            }
        }
    }
}

/// The values that crashed or wedged runs validation used to accept: each is refused with exit
/// code 2, naming its key and the allowed range, before anything starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_used_to_crash_a_run_are_refused_with_their_range() {
    let base = "[target]\nmodel = \"m\"\nsimulator = \"instant\"\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 8192\nmax_tokens = 4\n";
    for (extra, key, range) in [
        ("[run]\nrequests = 2\nsnapshot_interval = \"100000000h\"", "run.snapshot_interval", "1s to 1day"),
        ("[run]\nrequests = 2\nsnapshot_interval = \"1ns\"", "run.snapshot_interval", "1s to 1day"),
        ("[run]\nduration = \"100000000h\"", "run.duration", "1ms to 30days"),
        ("[run]\nrequests = 2\ngrace = \"100000000h\"", "run.grace", "1ms to 1day"),
        ("[run]\nrequests = 2\n[client]\nfirst_byte_timeout = \"100000000h\"", "client.first_byte_timeout", "1day"),
        ("[run]\nrequests = 2\n[client]\nidle_timeout = \"100000000h\"", "client.idle_timeout", "1day"),
        ("[run]\nrequests = 2\n[client]\nretry_backoff = \"100000000h\"", "client.retry_backoff", "10m"),
        ("[run]\nrequests = 2\n[load]\nmode = \"open\"\nrate = 1e-300", "load.rate", "0.001"),
        ("[run]\nrequests = 2\n[load]\nmax_rate = 1e-300", "load.max_rate", "0.001"),
        (
            "[run]\nrequests = 2\n[load]\nmode = \"open\"\nrate = 5\narrival = \"gamma\"\nburstiness = 1e-300",
            "load.burstiness",
            "0.01",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("crash.toml");
        std::fs::write(&file, format!("{base}{extra}\n")).unwrap();
        let mut cmd = anvil();
        cmd.arg(&file).arg("--out").arg(dir.path().join("out"));
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(key) && stderr.contains(range), "{extra}: {stderr}");
        assert!(!dir.path().join("out").exists() || artifacts(&dir.path().join("out")).is_empty());
    }
}
