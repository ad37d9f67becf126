//! `run()`: the whole program, top to bottom.

mod cache_reset;
mod ending;
mod level;
mod live;
mod media_probes;
mod meet;
mod models;
mod replicas;
mod setup;
pub mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::after_run::rebuild::{self, Notice, RebuildError, Rebuilt};
use crate::cli::{Cli, Command, MergeArgs, RunArgs, SummarizeArgs, exit};
use crate::distributed::shard;
use crate::plan::scenario::{Pacing, Scenario, ScenarioError};
use crate::request::record::RunInfo;
use crate::request::record::file::{self as records, RecordLine};
use crate::request::record::writer::{self, RecordSink};
use crate::request::schedule::RunControl;
use crate::request::server_metrics;
use crate::request::worker::credentials::Credentials;
use crate::request::worker::{self, Client};
use crate::request::workload::Workload;
use crate::results::aggregate::summary::LevelSummary;
use crate::results::aggregate::warnings::Warning;
use crate::results::artifact;
use crate::results::console::{self, Out};
use ending::Ending;
use level::Session;
use setup::RunTarget;

/// Why the program stopped early.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The scenario or the options are wrong; nothing was sent.
    #[error("{0}")]
    BadInput(String),
    /// The run could not go on (server unreachable, artifact not writable, …).
    #[error("{0}")]
    Aborted(String),
}

impl AppError {
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::BadInput(_) => exit::BAD_INPUT,
            AppError::Aborted(_) => exit::ABORTED,
        }
    }
}

impl AppError {
    /// The error of a run that ends without its artifacts: it names the records file that holds
    /// what was measured and the command that rebuilds the artifacts from it.
    fn naming_records(self, records: &Path, out: &Path) -> AppError {
        let note = format!(
            "the records of this run are in {}; rebuild its artifacts with: anvil-load summarize {} --out {}",
            records.display(),
            records.display(),
            out.display()
        );
        match self {
            AppError::BadInput(m) | AppError::Aborted(m) => AppError::Aborted(format!("{m}\n{note}")),
        }
    }
}

impl From<ScenarioError> for AppError {
    fn from(e: ScenarioError) -> Self {
        AppError::BadInput(e.to_string())
    }
}

impl From<anvil_sim::cli::ServeError> for AppError {
    fn from(e: anvil_sim::cli::ServeError) -> Self {
        match e {
            anvil_sim::cli::ServeError::BadInput(m) => AppError::BadInput(m),
            anvil_sim::cli::ServeError::Failed(m) => AppError::Aborted(m),
        }
    }
}

pub async fn run(cli: Cli) -> Result<u8, AppError> {
    match cli.command {
        Some(Command::Validate(args)) => validate::run(&args),
        // The simulator in the foreground until Ctrl-C, as `anvil-sim` serves it.
        Some(Command::Mock(args)) => {
            anvil_sim::cli::serve(&args, "anvil-load simulator").await?;
            Ok(exit::OK)
        }
        Some(Command::Summarize(args)) => summarize(&args),
        Some(Command::Merge(args)) => merge(&args),
        Some(Command::Export(args)) => export(&args),
        Some(Command::Deploy(args)) => {
            print!("{}", crate::distributed::deploy::render(&args).map_err(AppError::BadInput)?);
            Ok(exit::OK)
        }
        Some(Command::Report(args)) => {
            let (written, notes) = crate::after_run::present::report(&args.paths, args.out.as_deref(), args.format)
                .map_err(AppError::BadInput)?;
            for note in notes {
                eprintln!("note: {note}");
            }
            use artifact::output::Written;
            match (&written, written.is_stdout()) {
                (Written::Replaced(p) | Written::InPlace(p), false) => println!("report: {}", p.display()),
                // Standard output holds the report itself: nothing else goes there.
                _ => eprintln!("report: written to standard output"),
            }
            Ok(exit::OK)
        }
        Some(Command::Compare(args)) => {
            let request = crate::after_run::compare::run::Request {
                base: args.base,
                new: args.new,
                max_regress: args.max_regress,
                force: args.force,
                alpha: args.alpha,
                noise_pct: args.noise,
                format: args.format,
                allow_untested: args.allow_untested,
            };
            crate::after_run::compare::run::compare(&request).map_err(AppError::BadInput)
        }
        Some(Command::Completions(args)) => {
            crate::cli::print_completions(&args)
                .map_err(|e| AppError::Aborted(format!("cannot write the completion script: {e}")))?;
            Ok(exit::OK)
        }
        Some(Command::Man(args)) => man(&args),
        None => benchmark(&cli.run).await,
    }
}

impl From<RebuildError> for AppError {
    fn from(e: RebuildError) -> Self {
        match e {
            RebuildError::BadInput(m) => AppError::BadInput(m),
            RebuildError::Incomplete(m) | RebuildError::Io(m) => AppError::Aborted(m),
        }
    }
}

/// `anvil-load summarize RECORDS`: a run's artifacts rebuilt from its records file; exit 1 when
/// a level was interrupted.
fn summarize(args: &SummarizeArgs) -> Result<u8, AppError> {
    let mut notices = Vec::new();
    let rebuilt = rebuild::summarize::summarize(&args.records, &args.out, args.allow_partial, &mut notices);
    let rebuilt = print_rebuilt(&notices, rebuilt?);
    Ok(if rebuilt.levels.iter().any(|l| l.summary.interrupted) { exit::ABORTED } else { exit::OK })
}

/// `anvil-load merge RECORDS…`: one set of artifacts from a sharded run's parts.
fn merge(args: &MergeArgs) -> Result<u8, AppError> {
    if artifact::output::is_stdout(&args.out) {
        return Err(AppError::BadInput(
            "--out -: a merge writes several files (artifacts, records, time series), which standard output cannot hold; give a directory"
                .into(),
        ));
    }
    let mut notices = Vec::new();
    let merged = rebuild::merge::merge(&args.records, &args.out, args.allow_partial, args.window, &mut notices);
    let merged = print_rebuilt(&notices, merged?);
    // Several levels: the sweep file one process would have written, as a coordinated run's has.
    if let (true, Some(run)) = (merged.levels.len() > 1, merged.runs.first()) {
        let levels = merged.levels.iter().map(|l| (&l.summary, l.artifact.as_path()));
        let path =
            console::sweep::write_sweep(&args.out, &run.run_id, &run.run_id, levels).map_err(AppError::Aborted)?;
        println!("written: {}", path.display());
    }
    // A partial merge got this far only with --allow-partial; its artifacts say so.
    Ok(exit::OK)
}

/// `anvil-load export INPUT --out FILE`: the per-request records as one table.
fn export(args: &crate::cli::ExportArgs) -> Result<u8, AppError> {
    use crate::after_run::export::{self, ExportError};
    let done = export::export(&args.input, args.format, &args.out).map_err(|e| match e {
        ExportError::BadInput(m) => AppError::BadInput(m),
        ExportError::Io(m) => AppError::Aborted(m),
    })?;
    for note in &done.notes {
        eprintln!("note: {note}");
    }
    let per_row = if done.rows > 0 { done.bytes as f64 / done.rows as f64 } else { 0.0 };
    println!(
        "exported: {} rows of {} level(s) as {}, {} bytes ({per_row:.0} per row): {}",
        done.rows,
        done.levels,
        done.format.name(),
        done.bytes,
        done.path.display()
    );
    Ok(exit::OK)
}

/// `anvil-load man [--dir DIR]`: the page on standard output, or every page into DIR.
fn man(args: &crate::cli::ManArgs) -> Result<u8, AppError> {
    if let Some(dir) = args.dir.as_deref().filter(|d| artifact::output::is_stdout(d)) {
        return Err(AppError::BadInput(format!(
            "--dir {}: - means standard output, which cannot hold one file per command; give a directory, or leave --dir out to print the main page",
            dir.display()
        )));
    }
    let written = crate::cli::write_man(args).map_err(|e| match &args.dir {
        Some(dir) => AppError::BadInput(format!(
            "--dir {}: cannot write the manual pages there ({e}); choose another directory",
            dir.display()
        )),
        None => AppError::Aborted(format!("cannot write the manual page: {e}")),
    })?;
    for path in written {
        println!("written: {}", path.display());
    }
    Ok(exit::OK)
}

/// What a rebuild said and wrote: its notices on stderr, each level's summary, and the files.
fn print_rebuilt(notices: &[Notice], rebuilt: Rebuilt) -> Rebuilt {
    for notice in notices {
        eprintln!("{notice}");
    }
    for level in &rebuilt.levels {
        print!("{}", console::level_summary(&level.summary, rebuilt.info(level)));
        console::print_warnings(&level.summary.warnings);
        println!("artifact: {}", level.artifact.display());
    }
    for path in &rebuilt.files {
        println!("written: {}", path.display());
    }
    rebuilt
}

/// The scenario the arguments name, with their overrides: a file, standard input (`-`), or the
/// built-in scenario when none is given.
fn load_scenario(args: &RunArgs) -> Result<Scenario, ScenarioError> {
    let overrides = args.overrides();
    match args.scenario.as_deref() {
        None => Scenario::built_in(&overrides),
        Some(path) if path.as_os_str() == "-" => Scenario::from_stdin(&overrides),
        Some(path) => Scenario::load(path, &overrides),
    }
}

/// `anvil-load SCENARIO`: run every load level (a fixed list, or a capacity search) and write
/// each level's artifact.
async fn benchmark(args: &RunArgs) -> Result<u8, AppError> {
    let mut scenario = load_scenario(args)?;
    if args.records.as_deref().is_some_and(artifact::output::is_stdout) {
        return Err(AppError::BadInput(
            "--records -: the records file is read back to write the artifacts, so it cannot be standard output; give a file path"
                .into(),
        ));
    }
    let shard_plan = shard::plan(&args.shard, &scenario).map_err(AppError::BadInput)?;
    for note in &scenario.notes {
        eprintln!("note: {note}");
    }
    artifact::ensure_writable_dir(&args.out).map_err(|e| {
        AppError::BadInput(format!(
            "--out {}: cannot write artifacts there ({e}); choose another directory",
            args.out.display()
        ))
    })?;
    check_disk_space(&scenario, &args.out)?;

    // Everything that can refuse the run does so before the first request (the /models check
    // and calibration probes are requests): exit code 2 promises that nothing was sent.
    setup::ensure_file_limit(&setup::DescriptorNeed::for_scenario(&scenario))?;
    // Served from now on (a scrape before the first level finds the families, empty); stopped
    // when the run ends, however it ends.
    let mut live = live::start(&scenario).await?;
    // A key command runs now: its failure refuses the run before anything is sent.
    let credentials = Credentials::obtain(scenario.target.api_key_command.as_ref()).await?;
    let target = RunTarget::start(&scenario).await?;
    // Every secret of the run, withheld from everything the client and the scraper record.
    let secrets = scenario.secrets();
    let scraper = match &scenario.target.metrics {
        Some(m) => {
            let url = server_metrics::resolve_url(&m.endpoint, &target.base_url).map_err(AppError::BadInput)?;
            let headers = match server_metrics::beside_base_url(&url, &target.base_url) {
                true => worker::header_map(
                    &worker::run_headers(&scenario.target).map_err(|e| AppError::BadInput(e.to_string()))?,
                ),
                false => Default::default(),
            };
            Some(
                server_metrics::Scraper::new(&url, m.interval, scenario.target.redact_base_url)
                    .and_then(|s| {
                        let tls = scenario.client.tls.as_deref().map(crate::request::worker::tls_client_config);
                        // The socket serves the base URL's server: a metrics_url elsewhere is not behind it.
                        let beside = matches!(m.endpoint, crate::plan::scenario::MetricsEndpoint::BesideBaseUrl);
                        s.with_transport(tls.transpose()?, scenario.client.unix_socket.as_deref().filter(|_| beside))
                    })
                    .map_err(AppError::Aborted)?
                    .with_secrets(&secrets)
                    .with_headers(headers),
            )
        }
        None => None,
    };
    let replica_scrapers = match (&scenario.target.metrics, &scenario.target.replicas) {
        (Some(m), Some(r)) if m.endpoint == crate::plan::scenario::MetricsEndpoint::BesideBaseUrl => {
            let urls = r.base_urls[1..]
                .iter()
                .map(|u| server_metrics::resolve_url(&m.endpoint, u))
                .collect::<Result<Vec<_>, _>>()
                .map_err(AppError::BadInput)?;
            server_metrics::ReplicaScrapers::new(&urls, m.interval, scenario.target.redact_base_url)
                .map_err(AppError::Aborted)?
                .with_secrets(&secrets)
        }
        _ => server_metrics::ReplicaScrapers::default(),
    };
    let endpoint_scrapers = match &scenario.target.metrics {
        Some(m) => server_metrics::EndpointScrapers::new(&m.endpoints, m.interval, scenario.target.redact_base_url)
            .map_err(AppError::Aborted)?
            .with_secrets(&secrets),
        None => server_metrics::EndpointScrapers::default(),
    };
    let endpoint = crate::plan::scenario::url_rules::endpoint(&target.base_url, scenario.target.api.path());
    let bearer = scenario.target.api_key.clone().filter(|_| worker::sends_bearer(&scenario.target));
    let client = Client::new(&endpoint, bearer, scenario.client.clone(), pool_size(&scenario))
        .and_then(|c| c.for_api(scenario.target.api, scenario.target.anthropic_version.as_deref()))
        .and_then(|c| Ok(c.with_headers(worker::run_headers(&scenario.target)?)))
        .map(|c| c.with_limits(crate::request::worker::RequestLimits::from_scenario(&scenario)))
        .map(|c| c.with_tools(scenario.workload.tools.clone()))
        .map(|c| c.with_secrets(&secrets).with_credentials(&credentials))
        .and_then(|c| match &scenario.target.replicas {
            Some(r) => c.with_replicas(&r.endpoints(scenario.target.api.path(), &scenario.target.query), r.balance),
            None => Ok(c),
        })
        .map_err(|e| AppError::BadInput(e.to_string()))?;
    let control = RunControl::default();
    let records_note = setup::RecordsNote::default();
    setup::watch_signals(control.clone(), scenario.run.grace, records_note.clone());
    // Stopped when the run ends (dropped) or is stopped.
    let _refresher = credentials.refresh_every(&control.stop_issuing);

    let shard = shard_plan.join(&scenario, &args.out, &control).await.map_err(AppError::Aborted)?;
    let run_id = shard.run_id().to_string();
    if let Some(live) = &live {
        live.registry.watch_in_flight(client.in_flight());
        live.registry.set_constant_labels(shard.index().map(|i| ("shard", i.to_string())).into_iter().collect());
    }
    // Records always go to disk (memory stays bounded); the file is kept when asked for. It is
    // opened (and a reused one checked) before anything is sent, calibration probes included.
    let (records_path, keep_records) = match (&args.records, shard.kept_records(scenario.run.keep_records)) {
        (Some(path), _) => (path.clone(), true),
        (None, Some(name)) => (args.out.join(name), true),
        (None, None) => (args.out.join(format!(".{run_id}.records.ndjson.tmp")), false),
    };
    let _ = records_note.set((records_path.clone(), args.out.clone()));
    let existed = records_path.exists();
    // A records file that stays unwritable stops the run like Ctrl-C would.
    let (records, records_writer) =
        writer::open(&records_path, !keep_records, control.stop_issuing.clone()).map_err(|e| {
            let option = if args.records.is_some() { "--records" } else { "--out" };
            AppError::BadInput(format!(
                "{option} {}: cannot write the records file there ({e})",
                records_path.display()
            ))
        })?;
    // A run that ends before its first level leaves no file of its own behind.
    let abandon = |records: RecordSink, writer: writer::RecordWriter| {
        drop(records);
        let _ = writer.finish();
        let empty = std::fs::metadata(&records_path).is_ok_and(|m| m.len() == 0);
        if !keep_records || (!existed && empty) {
            let _ = std::fs::remove_file(&records_path);
        }
    };
    let mut model_source = None;
    if target.simulator.is_none() {
        let checked = tokio::select! {
            r = replicas::preflight(&target.base_url, &scenario, client.credentials()) => Some(r),
            () = control.stop_issuing.cancelled() => None,
        };
        let chosen = match checked {
            Some(Ok((listing, others))) => models::check_mix(&scenario, &target.base_url, &listing, &others)
                .and_then(|()| meet::choose_model(&mut scenario, listing, &secrets))
                .and_then(|source| replicas::check_models(&scenario, others).map(|()| source)),
            Some(Err(e)) => Err(e),
            None => {
                abandon(records, records_writer);
                eprintln!("stopped before the run started: nothing was measured, no artifact written");
                return Ok(exit::ABORTED);
            }
        };
        match chosen {
            Ok(source) => model_source = source,
            Err(e) => {
                abandon(records, records_writer);
                return Err(e);
            }
        }
    }
    let scenario = scenario;

    let run_salt = shard.salt();
    let Some((sizer, sizing)) = setup::size_prompts(&scenario, &client, run_salt, &control.stop_issuing).await else {
        abandon(records, records_writer);
        eprintln!("stopped during prompt calibration: nothing was measured, no artifact written");
        return Ok(exit::ABORTED);
    };
    if let Some(refused) = meet::probes_refused(&sizing, &scenario.target.model) {
        abandon(records, records_writer);
        return Err(refused);
    }
    if let Some(reason) = &sizing.fallback_reason {
        eprintln!("warning: prompt sizing fell back to the built-in estimate: {reason}");
    }
    let workload = Arc::new(
        Workload::new(&scenario, run_salt, sizer)
            .with_system_overhead(sizing.system_message_overhead)
            .with_turn_overhead(sizing.turn_overhead)
            .with_media_tokens(sizing.media_tokens.as_deref()),
    );
    let mut info = RunInfo::new(&scenario, &run_id, &target.base_url, sizing, workload.salt());
    info.model_source = model_source;
    shard.attach(&mut info, &workload);
    records.write(&RecordLine::Run { schema: records::RECORDS_SCHEMA.to_string(), info: Box::new(info.clone()) }).await;
    if let Some(Err(e)) = live.as_mut().map(|l| l.push(&scenario, &shard)) {
        abandon(records, records_writer);
        return Err(AppError::Aborted(e));
    }
    let session = Session {
        args,
        scenario: &scenario,
        target,
        client,
        workload,
        info,
        records,
        control,
        run_id,
        shard,
        scraper,
        replica_scrapers,
        live: live.as_ref().map(|l| l.registry.clone()),
        endpoint_scrapers,
    };

    let mut written: Vec<PathBuf> = Vec::new();
    let mut artifacts: Vec<(LevelSummary, PathBuf)> = Vec::new();
    let mut result = session.run_levels(&mut artifacts, &mut written).await;
    // After the last request: the end state is the final push.
    if let Some(live) = live.as_mut() {
        live.push_final().await;
    }
    let interrupted = session.control.stop_issuing.is_cancelled();
    let mut end = shard::RunEnd::Alone;
    if let (Ok(_), false) = (&result, interrupted) {
        match session.shard.finish().await {
            Ok(e) => end = e,
            Err(e) => result = Err(AppError::Aborted(e)),
        }
    }
    session.target.shutdown().await;
    drop(session.records);
    if let Err(e) = records_writer.finish() {
        eprintln!("warning: the records file {} is incomplete: {e}", records_path.display());
    }
    let search = match result {
        Ok(search) => search,
        // The records file is kept whatever it was meant to be: it is all that is left.
        Err(e) => return Err(e.naming_records(&records_path, &args.out)),
    };
    let mut keep_records = keep_records;
    if scenario.run.records_format == crate::plan::scenario::RecordsFormat::Parquet {
        match crate::after_run::export::records_table(&records_path, &args.out, &session.run_id) {
            Ok(table) => written.push(table.path),
            // The records file is kept instead: nothing measured is lost.
            Err(e) => {
                eprintln!("warning: run.records_format = \"parquet\": {e}; the records file is kept instead");
                keep_records = true;
            }
        }
    }
    if keep_records {
        written.push(records_path);
    } else {
        let _ = std::fs::remove_file(&records_path);
    }
    let ending = Ending { args, info: &session.info, out: Out::new(&args.console), search: search.as_ref() };
    ending.print(&artifacts, &written, &end);
    if let Some(live) = live {
        live.finish().await;
    }
    if interrupted {
        return Ok(exit::ABORTED);
    }
    if !artifacts.iter().any(|(a, _)| a.completed > 0) {
        console::print_warnings(&[Warning::NoSuccess]);
        return Ok(exit::ABORTED);
    }
    if args.strict {
        let gates = strict_gates(&artifacts, scenario.load.search.is_none());
        for line in &gates {
            eprintln!("--strict: {line}");
        }
        if !gates.is_empty() {
            return Ok(exit::INVALID);
        }
    }
    Ok(exit::OK)
}

/// What `--strict` refuses, one line each: a level that failed its validity check, and (outside a
/// capacity search, whose probes are meant to find where objectives break) every missed
/// objective with its threshold and the observed value.
fn strict_gates(levels: &[(LevelSummary, PathBuf)], objectives_gate: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for (s, _) in levels {
        if !s.load.validity.valid {
            lines.push(format!("{}: failed its validity check: {}", s.level_id, s.load.validity.reasons.join("; ")));
        }
        if s.completed > 0 && s.population.performance_eligible_requests == 0 {
            lines
                .push(format!("{}: no request is in the distributions (every completed one was excluded)", s.level_id));
        }
        let Some(slo) = s.slo.as_ref().filter(|_| objectives_gate) else { continue };
        for c in slo.criteria.iter().filter(|c| !c.passed) {
            let observed = c.observed.map_or_else(|| "no samples".to_string(), |v| format!("{v:.3}"));
            let bound = match c.bound {
                crate::plan::scenario::Bound::AtMost => "at most",
                crate::plan::scenario::Bound::AtLeast => "at least",
            };
            lines.push(format!(
                "{}: missed objective {}: observed {observed}, required {bound} {}",
                s.level_id, c.key, c.threshold
            ));
        }
    }
    lines
}

/// A full disk found before the run, not an hour into it: the records and artifacts need about
/// `BYTES_PER_REQUEST` per request.
fn check_disk_space(s: &Scenario, out: &Path) -> Result<(), AppError> {
    let Some(free) = crate::sys::free_bytes(out) else { return Ok(()) };
    let need = disk_need_bytes(s);
    if free < need {
        return Err(AppError::BadInput(format!(
            "--out {}: only {} MB free, and this run needs about {} MB for its records and artifacts; free some space or choose another directory",
            out.display(),
            free / 1_000_000,
            need / 1_000_000
        )));
    }
    Ok(())
}

/// The most requests per second one client process sends (measured: about 4,400 against a
/// zero-delay server); an upper bound for a closed loop whose pace is the server's.
const CLIENT_MAX_RPS: f64 = 10_000.0;

/// Bytes the run writes, estimated from the bound that ends each level first.
fn disk_need_bytes(s: &Scenario) -> u64 {
    let levels = s.load.search.map_or(s.load.pacing.levels().len() as u64, |search| u64::from(search.max_steps));
    // A level's pace: planned arrivals in an open loop; a closed loop runs at the server's
    // pace, known only through `max_rate`.
    let pace = match &s.load.pacing {
        Pacing::Open { rates, .. } => Some(s.load.search.map_or(rates.iter().copied().fold(0.0, f64::max), |x| x.max)),
        Pacing::Closed { max_rate, .. } => *max_rate,
    };
    // Requests sent before `run.duration` ends (saturating: `as` clamps a huge product).
    let by_time = |d: std::time::Duration, rate: f64| (rate * d.as_secs_f64()).ceil() as u64 + 1;
    let per_level = match (s.run.requests, s.run.duration) {
        // Whichever bound comes first; the client's own ceiling bounds an unknown pace.
        (Some(n), Some(d)) => n.min(by_time(d, pace.unwrap_or(CLIENT_MAX_RPS))),
        (Some(n), None) => n,
        // Time only, at the server's unknown pace: nothing to estimate, the minimum applies (a
        // disk that fills during the run stops it).
        (None, Some(d)) => pace.map_or(0, |rate| by_time(d, rate)),
        (None, None) => 0,
    };
    // The server-metrics file of each level is bounded on its own (see `server_metrics::raw`).
    // One scrape file per replica when every replica is scraped beside its base URL.
    let files = match (&s.target.metrics, &s.target.replicas) {
        (Some(m), Some(r)) if m.endpoint == crate::plan::scenario::MetricsEndpoint::BesideBaseUrl => r.base_urls.len(),
        _ => 1,
    };
    let scrapes = s.target.metrics.as_ref().map_or(0, |m| {
        levels
            .saturating_mul(server_metrics::disk_bytes_per_level(s.run.duration, m.interval))
            .saturating_mul((files + m.endpoints.len()) as u64)
    });
    levels
        .saturating_mul(per_level)
        .saturating_mul(artifact::BYTES_PER_REQUEST)
        .max(artifact::MIN_FREE_BYTES)
        .saturating_add(scrapes)
}

/// Connections to keep open: the most requests that can be in flight at once.
fn pool_size(s: &Scenario) -> usize {
    let most = match (&s.load.pacing, s.load.search) {
        (_, Some(search)) => search.max,
        (Pacing::Closed { levels, .. }, None) => levels.iter().copied().max().map_or(1.0, f64::from),
        (Pacing::Open { max_in_flight: Some(m), .. }, None) => f64::from(*m),
        (Pacing::Open { rates, .. }, None) => rates.iter().copied().fold(1.0, f64::max),
    };
    (most as usize).clamp(1, 100_000)
}
