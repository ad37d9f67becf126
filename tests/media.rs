//! `[workload.media]`: images and audio sent to the simulator, which reads them as an engine
//! would and counts them; the artifact's per-request and per-level media counts, prompt tokens
//! and calibrated media tokens equal the simulator's own; bad keys exit 2 with nothing sent.

mod common;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use serde_json::Value;

const BASE: &str = "[target]\nmodel = \"anvil-sim\"\nsimulator = \"fast\"\nAPI\n[run]\nrequests = 12\nseed = 3\n\
[load]\nconcurrency = 3\n[workload]\ncontext_tokens = 512\nmax_context_tokens = 32768\nmax_tokens = 32\n";

fn scenario(api: &str, media: &str) -> String {
    format!("{}{media}", BASE.replace("API", &format!("api = \"{api}\"")))
}

/// Runs `toml` against the embedded simulator; the one artifact, checked against the contract.
async fn run_ok(toml: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("media.toml");
    std::fs::write(&file, toml).unwrap();
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&file).arg("--no-progress").arg("--out").arg(&out);
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    let console = format!("{}{stderr}", text(&result.stdout));
    assert!(console.lines().any(|l| l.starts_with("media: ")), "the console's media line: {console}");
    let files = artifacts(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    check_artifact(&files[0])
}

fn sum(a: &Value, f: impl Fn(&Value) -> u64) -> u64 {
    a["request_timings"].as_array().unwrap().iter().map(f).sum()
}

/// What every media run must show: the artifact's counts are the simulator's, request by
/// request summed and in the level's block, and prompts sized with the media's tokens.
fn agrees_with_simulator(a: &Value) {
    let sim = &a["simulator"];
    let requests = a["request_timings"].as_array().unwrap();
    assert_eq!(requests.len(), 12);
    let m = |k: &'static str| move |r: &Value| r["media"][k].as_u64().unwrap();
    assert_eq!(sum(a, m("images")), sim["media_images"].as_u64().unwrap());
    assert_eq!(sum(a, m("audio")), sim["media_audio"].as_u64().unwrap());
    assert_eq!(sum(a, m("media_bytes")), sim["media_bytes"].as_u64().unwrap(), "bytes the simulator decoded");
    assert_eq!(sum(a, |r| r["prompt_tokens"].as_u64().unwrap()), sim["prompt_tokens"].as_u64().unwrap());
    assert_eq!(a["media"]["images"], sim["media_images"]);
    assert_eq!(a["media"]["audio"], sim["media_audio"]);
    assert_eq!(a["media"]["requests"], 12);
    let by_count: u64 =
        a["media"]["ttft_by_media_count"].as_array().unwrap().iter().map(|r| r["requests"].as_u64().unwrap()).sum();
    assert_eq!(by_count, 12);
    for r in requests {
        if sim["media_fetched_bytes"] == 0 {
            // Inline: the body holds every file, in base64.
            assert!(r["media"]["body_bytes"].as_u64().unwrap() > r["media"]["media_bytes"].as_u64().unwrap());
        }
        // The calibration learned each item's tokens: targets hold them.
        let err = r["prompt_sizing_error_pct"].as_f64().unwrap();
        assert!(err.abs() < 3.0, "prompt sized with its media: {err}% off in {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_images_as_data_urls_are_counted_like_the_simulator() {
    // One size: every image is ceil(280/28) · ceil(140/28) = 50 tokens by the simulator's rule.
    let media = "[workload.media]\npool = 4\n[workload.media.images]\ncount = { 1 = 1, 2 = 1, 3 = 1 }\n\
                 size = \"280x140\"\nformat = \"png\"\n";
    let a = run_ok(&scenario("chat", media)).await;
    agrees_with_simulator(&a);
    let images = a["simulator"]["media_images"].as_u64().unwrap();
    assert!(images >= 12, "one image at least per request: {images}");
    assert_eq!(a["simulator"]["media_tokens"].as_u64().unwrap(), images * 50);
    assert_eq!(sum(&a, |r| r["media"]["pixels"].as_u64().unwrap()), images * 280 * 140);
    let learned = &a["prompt_sizing"]["media_tokens"];
    assert_eq!(learned[0]["bucket"], "280x140");
    assert_eq!(learned[0]["tokens"], 50, "{learned}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_by_http_url_are_fetched_by_the_simulator() {
    // Images and audio served by the run's file server on loopback; the simulator fetches each.
    let media = "[workload.media]\ndelivery = \"http\"\npool = 3\n[workload.media.images]\ncount = { 1 = 1, 2 = 1 }\n\
                 size = \"56x56\"\n[workload.media.audio]\nseconds = 1\nsample_rate = 8000\n";
    let a = run_ok(&scenario("chat", media)).await;
    agrees_with_simulator(&a);
    let sim = &a["simulator"];
    assert_eq!(sim["media_fetched_bytes"], sim["media_bytes"], "every item came by URL");
    let images = sim["media_images"].as_u64().unwrap();
    assert_eq!(sim["media_tokens"].as_u64().unwrap(), images * 4 + 12 * 25);
    for r in a["request_timings"].as_array().unwrap() {
        assert!(r["media"]["body_bytes"].as_u64().unwrap() < 4096, "URLs, not data: {r}");
    }
    // Messages: an image block with a url source.
    let media = "[workload.media]\ndelivery = \"http\"\n[workload.media.images]\nsize = \"56x56\"\n";
    let toml = scenario("messages", media).replace("max_tokens = 32\n", "max_tokens = 32\ntokenizer = \"estimate\"\n");
    let a = run_ok(&toml).await;
    assert_eq!(a["simulator"]["media_images"], 12);
    assert_eq!(a["simulator"]["media_fetched_bytes"], a["simulator"]["media_bytes"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_audio_is_counted_by_its_length() {
    let media = "[workload.media]\npool = 2\n[workload.media.audio]\nseconds = { 1 = 1, 2 = 1 }\nsample_rate = 8000\n";
    let a = run_ok(&scenario("chat", media)).await;
    agrees_with_simulator(&a);
    let seconds = sum(&a, |r| u64::from(r["media"]["audio_seconds"].as_u64().unwrap() as u32));
    assert_eq!(a["simulator"]["media_tokens"].as_u64().unwrap(), seconds * 25, "25 tokens a second");
    assert_eq!(a["simulator"]["media_audio"], 12);
    let learned: Vec<(String, u64)> = a["prompt_sizing"]["media_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["bucket"].as_str().unwrap().to_string(), p["tokens"].as_u64().unwrap()))
        .collect();
    assert_eq!(learned, [("1s".to_string(), 25), ("2s".to_string(), 50)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_and_messages_carry_jpeg_images() {
    let media =
        "[workload.media]\npool = 3\n[workload.media.images]\ncount = 2\nsize = { \"56x56\" = 1, \"112x84\" = 1 }\n";
    for api in ["responses", "messages"] {
        let mut toml = scenario(api, media);
        // Neither API has calibration probes: prompts are sized by the built-in estimate.
        toml = toml.replace("max_tokens = 32\n", "max_tokens = 32\ntokenizer = \"estimate\"\n");
        let a = run_ok(&toml).await;
        let sim = &a["simulator"];
        assert_eq!(sim["media_images"], 24, "{api}: two images a request");
        assert_eq!(sum(&a, |r| r["media"]["images"].as_u64().unwrap()), 24);
        assert_eq!(sum(&a, |r| r["media"]["media_bytes"].as_u64().unwrap()), sim["media_bytes"].as_u64().unwrap());
        // 56x56 is 4 tokens, 112x84 is 12: the pixels tell how many of each.
        let pixels = sum(&a, |r| r["media"]["pixels"].as_u64().unwrap());
        let big = (pixels - 24 * 56 * 56) / (112 * 84 - 56 * 56);
        assert_eq!(sim["media_tokens"].as_u64().unwrap(), big * 12 + (24 - big) * 4, "{api}");
    }
}

async fn expect_refused(toml: &str, key: &str) {
    let server = MockServer::start(Profile::named("instant").unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, toml).unwrap();
    let mut cmd = anvil();
    cmd.arg(&file).arg("--base-url").arg(server.base_url()).arg("--out").arg(dir.path().join("out"));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(key) && stderr.contains("bad.toml") && stderr.contains("fix:"), "{key}: {stderr}");
    assert_eq!(server.stats().requests_received, 0, "nothing sent: {stderr}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_media_keys_exit_2_and_send_nothing() {
    let images = "[workload.media]\n[workload.media.images]\ncount = 1\n";
    let audio = "[workload.media]\n[workload.media.audio]\nseconds = 5\n";
    expect_refused(&scenario("chat", "[workload.media]\n[workload.media.video]\nframes = 8\n"), "workload.media.video")
        .await;
    expect_refused(&scenario("chat", &images.replace("count = 1", "size = \"10x\"")), "workload.media.images.size")
        .await;
    expect_refused(&scenario("chat", &images.replace("count = 1", "format = \"gif\"")), "workload.media.images.format")
        .await;
    expect_refused(&scenario("chat", &images.replace("count = 1", "count = 65")), "workload.media.images.count").await;
    expect_refused(&scenario("chat", &format!("{images}[workload.media.x]\n")), "x").await;
    expect_refused(
        &scenario("chat", &images.replace("[workload.media]\n", "[workload.media]\ndelivery = \"ftp\"\n")),
        "workload.media.delivery",
    )
    .await;
    expect_refused(
        &scenario("chat", &images.replace("[workload.media]\n", "[workload.media]\npool = 0\n")),
        "workload.media.pool",
    )
    .await;
    expect_refused(&scenario("chat", "[workload.media]\n"), "workload.media").await;
    let http =
        |extra: &str| images.replace("[workload.media]\n", &format!("[workload.media]\ndelivery = \"http\"\n{extra}"));
    expect_refused(&scenario("chat", &http("http_bind = \"nowhere\"\n")), "workload.media.http_bind").await;
    expect_refused(&scenario("chat", &http("http_bind = \"0.0.0.0:0\"\n")), "workload.media.http_url").await;
    expect_refused(&scenario("chat", &http("http_url = \"ftp://x\"\n")), "workload.media.http_url").await;
    expect_refused(
        &scenario("chat", &images.replace("[workload.media]\n", "[workload.media]\nhttp_bind = \"127.0.0.1:0\"\n")),
        "workload.media.http_bind",
    )
    .await;
    expect_refused(&scenario("completions", images), "workload.media").await;
    expect_refused(&scenario("embeddings", images), "workload.media").await;
    expect_refused(&scenario("messages", audio), "workload.media.audio").await;
    expect_refused(&scenario("responses", audio), "workload.media.audio").await;
    expect_refused(
        &scenario("chat", &audio.replace("seconds = 5", "sample_rate = 100")),
        "workload.media.audio.sample_rate",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_flags_set_the_media_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.args(["--input-tokens", "256", "--output-tokens", "16", "-c", "2", "-n", "6", "--images", "2"])
        .args(["--image-size", "56x84", "--no-progress", "-o"])
        .arg(&out);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let a = check_artifact(&artifacts(&out)[0]);
    assert_eq!(a["simulator"]["media_images"], 12);
    assert_eq!(a["simulator"]["media_tokens"], 12 * 2 * 3, "ceil(56/28)·ceil(84/28) each");
    let mut cmd = anvil();
    cmd.args(["validate", "--image-size", "56"]);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(2));
    assert!(text(&result.stderr).contains("workload.media.images.size"), "{}", text(&result.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarize_rebuilds_the_same_media_block() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("media.toml");
    let media =
        "[workload.media]\npool = 2\n[workload.media.images]\ncount = { 0 = 1, 1 = 1, 3 = 1 }\nsize = \"56x56\"\n";
    std::fs::write(&file, scenario("chat", media)).unwrap();
    let (out, records) = (dir.path().join("out"), dir.path().join("records.ndjson"));
    let mut cmd = anvil();
    cmd.arg(&file).arg("--no-progress").arg("--out").arg(&out).arg("--records").arg(&records);
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    common::check_records(&records);
    let live = check_artifact(&artifacts(&out)[0]);
    let mut cmd = anvil();
    cmd.arg("summarize").arg(&records).arg("--out").arg(dir.path().join("rebuilt"));
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let rebuilt = check_artifact(&artifacts(&dir.path().join("rebuilt"))[0]);
    assert_eq!(live["media"], rebuilt["media"]);
    assert_eq!(live["prompt_sizing"]["media_tokens"], rebuilt["prompt_sizing"]["media_tokens"]);
    let counts: Vec<u64> =
        live["media"]["ttft_by_media_count"].as_array().unwrap().iter().map(|r| r["items"].as_u64().unwrap()).collect();
    assert!(counts.iter().all(|c| [0, 1, 3].contains(c)), "{counts:?}");
}

/// A scenario reading `dataset` (a path) with `media` appended.
fn dataset_scenario(dataset: &std::path::Path, media: &str) -> String {
    let toml = scenario("chat", media)
        .replace("context_tokens = 512\n", &format!("prompts = {:?}\n", dataset.display().to_string()));
    toml.replace("requests = 12", "requests = 16")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_images_are_read_from_files_and_counted_like_the_simulator() {
    // The shipped fixture: 4 rows, 3 naming images (112x84, 140x112, then 56x56 + 112x84).
    let dataset = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vision/dataset.jsonl");
    let tokens = |w: u64, h: u64| w.div_ceil(28) * h.div_ceil(28);
    for media in ["", "[workload.media]\ndelivery = \"http\"\n"] {
        let a = run_ok(&dataset_scenario(&dataset, media)).await;
        let sim = &a["simulator"];
        let requests = a["request_timings"].as_array().unwrap();
        assert_eq!(requests.len(), 16);
        let m = |k: &'static str| move |r: &Value| r["media"][k].as_u64().unwrap_or(0);
        assert_eq!(sum(&a, m("images")), sim["media_images"].as_u64().unwrap());
        assert_eq!(sum(&a, m("media_bytes")), sim["media_bytes"].as_u64().unwrap());
        assert_eq!(sum(&a, |r| r["prompt_tokens"].as_u64().unwrap()), sim["prompt_tokens"].as_u64().unwrap());
        assert_eq!(a["media"]["images"], sim["media_images"]);
        // Each request's media tokens by the simulator's rule, from the sizes the files' headers
        // gave: every row's images are known, so the total is the simulator's.
        let mut expected = 0;
        for r in requests {
            let (images, pixels) = (m("images")(r), m("pixels")(r));
            expected += match (images, pixels) {
                (0, 0) => 0,
                (1, p) if p == 112 * 84 => tokens(112, 84),
                (1, p) if p == 140 * 112 => tokens(140, 112),
                (2, p) if p == 56 * 56 + 112 * 84 => tokens(56, 56) + tokens(112, 84),
                other => panic!("no row of the dataset carries {other:?}: {r}"),
            };
            let err = r["prompt_sizing_error_pct"].as_f64().unwrap();
            // Tiny prompts: the text of a conversation with a system message is a token or
            // three off; without the images' tokens it would be 20% and more.
            assert!(err.abs() < 8.0, "prompt sized with its images: {err}% off in {r}");
        }
        assert_eq!(sim["media_tokens"].as_u64().unwrap(), expected);
        assert!(sim["media_images"].as_u64().unwrap() >= 8, "{sim}");
        let learned: Vec<&str> = a["prompt_sizing"]["media_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["bucket"].as_str().unwrap())
            .collect();
        assert_eq!(learned.len(), 3, "one probe per image size: {learned:?}");
        if media.is_empty() {
            assert_eq!(sim["media_fetched_bytes"], 0);
        } else {
            assert_eq!(sim["media_fetched_bytes"], sim["media_bytes"], "every image came by URL");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dataset_image_that_is_missing_or_not_an_image_exits_2_naming_line_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vision/street.jpg");
    std::fs::copy(&fixture, dir.path().join("ok.jpg")).unwrap();
    std::fs::write(dir.path().join("notes.jpg"), "not an image").unwrap();
    let row = |image: &str| {
        format!(
            "{{\"image\": \"{image}\", \"conversations\": [{{\"from\": \"human\", \"value\": \"<image>\\nWhat?\"}}]}}\n"
        )
    };
    for (bad, problem) in [("gone.jpg", "cannot read it"), ("notes.jpg", "is not a JPEG or PNG")] {
        let dataset = dir.path().join("rows.jsonl");
        std::fs::write(&dataset, format!("{}{}", row("ok.jpg"), row(bad))).unwrap();
        let toml = dataset_scenario(&dataset, "");
        expect_refused(&toml, "workload.prompts").await;
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, &toml).unwrap();
        let mut cmd = anvil();
        cmd.arg("validate").arg(&file);
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        for needed in ["rows.jsonl", "line 2", bad, problem, "JPEG or PNG file"] {
            assert!(stderr.contains(needed), "{needed}: {stderr}");
        }
    }
    // A dataset with images and an API without a field for them.
    let dataset = dir.path().join("rows.jsonl");
    std::fs::write(&dataset, row("ok.jpg")).unwrap();
    let toml = dataset_scenario(&dataset, "").replace("api = \"chat\"", "api = \"completions\"");
    expect_refused(&toml, "workload.prompts").await;
}
