//! A records file of any length without a server: the lines of a short real run against the
//! simulator, repeated through the project's own records writer with fresh indices and spread
//! timings. Shared by the soak bench and the test that runs every command after the run over
//! 200,000 requests under an address-space limit.

use std::path::Path;
use std::process::{Command, Stdio};

use anvil_load::mock::{MockServer, Profile};
use anvil_load::request::record::file::RecordLine;
use anvil_load::request::record::{RequestTiming, writer};
use tokio_util::sync::CancellationToken;

pub const CLIENT: &str = env!("CARGO_BIN_EXE_anvil-load");

/// The lines of a short real run: the run line, one level, its requests and its end.
pub struct Template {
    run: RecordLine,
    level: RecordLine,
    requests: Vec<RecordLine>,
    end: RecordLine,
}

pub async fn template_run(dir: &Path) -> Template {
    let server = MockServer::start(Profile::named("instant").expect("profile")).await.expect("simulator");
    let records = dir.join("template.records.ndjson");
    let scenario = dir.join("template.toml");
    std::fs::write(
        &scenario,
        "[target]\nmodel = \"anvil-sim\"\n[run]\nrequests = 64\nseed = 9\n[load]\nconcurrency = 8\n[workload]\ncontext_tokens = { 256 = 1, 1024 = 1 }\nmax_context_tokens = 4096\nmax_tokens = 16\ntokenizer = \"estimate\"\n",
    )
    .expect("scenario");
    let status = Command::new(CLIENT)
        .arg(&scenario)
        .args(["--base-url", &server.base_url(), "--quiet", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(dir.join("template"))
        .stdout(Stdio::null())
        .status()
        .expect("the template run starts");
    assert!(status.success(), "the template run failed");
    server.shutdown().await;
    let text = std::fs::read_to_string(&records).expect("template records");
    let lines: Vec<RecordLine> = text.lines().map(|l| serde_json::from_str(l).expect("a record line")).collect();
    let mut run = None;
    let mut level = None;
    let mut end = None;
    let mut requests = Vec::new();
    for line in lines {
        match line {
            RecordLine::Run { .. } => run = Some(line),
            RecordLine::Level { .. } => level = Some(line),
            RecordLine::Request { .. } => requests.push(line),
            RecordLine::LevelEnd { .. } => end = Some(line),
            _ => {}
        }
    }
    Template {
        run: run.expect("a run line"),
        level: level.expect("a level line"),
        requests,
        end: end.expect("a level end"),
    }
}

/// `n` requests through the records writer: the template's requests in turn, each with a fresh
/// index and its times stretched by a factor that walks 0.5–2.0, so the distributions are wide.
pub async fn write_records(t: &Template, path: &Path, n: u64) {
    let (sink, writer) = writer::open(path, true, CancellationToken::new()).expect("records file");
    sink.write(&t.run).await;
    sink.write(&t.level).await;
    for i in 0..n {
        let RecordLine::Request { level, record } = &t.requests[i as usize % t.requests.len()] else { continue };
        let mut record = record.clone();
        let factor = 0.5 + 1.5 * ((i.wrapping_mul(2_654_435_761) % 1000) as f64 / 1000.0);
        record.request_index = i;
        // 20,000 requests a second, as the instant simulator serves them.
        record.start_offset_ms = i as f64 * 0.05;
        stretch(&mut record, factor);
        sink.write(&RecordLine::Request { level: level.clone(), record }).await;
    }
    sink.write(&t.end).await;
    drop(sink);
    writer.finish().expect("records written");
}

/// Every time of a record times `f`, every rate divided by it: still a record a run could write.
fn stretch(r: &mut RequestTiming, f: f64) {
    for t in [&mut r.time_to_first_output_ms, &mut r.generation_ms] {
        *t *= f;
    }
    for t in [
        &mut r.ttft_ms,
        &mut r.visible_generation_ms,
        &mut r.tpot_ms,
        &mut r.mean_time_per_output_token_ms,
        &mut r.mean_inter_token_latency_ms,
        &mut r.ttft_from_intended_ms,
        &mut r.max_stall_ms,
        &mut r.tpot_corrected_ms,
    ]
    .into_iter()
    .flatten()
    {
        *t *= f;
    }
    for rate in [&mut r.decode_tok_s, &mut r.effective_prefill_tok_s].into_iter().flatten() {
        *rate /= f;
    }
}
