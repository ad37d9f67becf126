//! The command line: clap's types for every subcommand and option, and the exit codes. Parsing
//! happens in `main.rs`; `app::run` takes the parsed `Cli`.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::plan::scenario::Overrides;

#[derive(Debug, Parser)]
#[command(
    name = "anvil-load",
    version = VERSION,
    about = "Load generator for OpenAI-compatible LLM inference servers",
    long_about = "Runs a TOML scenario against an OpenAI-compatible server (or the embedded simulator when \
                  no base URL is given) and writes one JSON artifact per load level.\n\n\
                  Exit codes: 0 run completed; 1 run aborted (interrupted, server unreachable, no request \
                  succeeded, or an artifact or the records file could not be written); 2 bad input \
                  (scenario, options, or a limit of this machine such as open files or disk space), \
                  nothing sent, or the server refused the run before any load (no usable model in its \
                  /models list, every sizing probe refused with the same 4xx); 3 with --strict, a level failed its validity check, missed an [slo] \
                  objective or had no request in its distributions (artifacts written).",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

// Parsed once per process: the size of its largest variant (the run's options) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a scenario and print the resolved plan. Sends nothing.
    Validate(RunArgs),
    /// Run the simulated OpenAI-compatible server in the foreground (Ctrl-C stops it).
    Mock(anvil_sim::cli::ServeArgs),
    /// Rebuild the artifacts of a run from its records file (for example after the run was
    /// killed).
    Summarize(SummarizeArgs),
    /// Merge the records files of a sharded run's shards into the artifacts one client would
    /// have written (every summary recomputed from the union of the records).
    Merge(MergeArgs),
    /// Write a run's per-request records (an artifact or a records file) as one table, Parquet
    /// or CSV, one row per request, for pandas, polars and DuckDB.
    Export(ExportArgs),
    /// Print what runs a scenario as N shards on a cluster (Kubernetes manifests).
    Deploy(crate::distributed::deploy::DeployArgs),
    /// Write one self-contained HTML report (or Markdown) of artifacts, sweeps, capacity
    /// searches and soaks.
    Report(ReportArgs),
    /// Compare two sets of results level by level, with significance tests; exit 3 when a
    /// significant regression exceeds a --max-regress threshold, 2 when they are not comparable
    /// or a --max-regress gate could not be tested (unless --allow-untested).
    Compare(CompareArgs),
    /// Print the shell completion script for SHELL, e.g. `anvil-load completions bash >
    /// ~/.local/share/bash-completion/completions/anvil-load`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff) on standard output, or with --dir write one page per command
    /// into a directory, e.g. `anvil-load man --dir ~/.local/share/man/man1`.
    Man(ManArgs),
}

/// `--version`: `0.1.0 (COMMIT DATE)`, the commit and the build date (UTC) from `build.rs`.
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (", env!("ANVIL_BUILD_COMMIT"), " ", env!("ANVIL_BUILD_DATE"), ")");

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write anvil-load.1 and one page per subcommand (anvil-load-report.1, …) into this
    /// directory (created if missing) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Artifacts, sweep summaries (*-sweep.json), search traces (*-search.json), time series
    /// (*.timeseries.ndjson) or directories holding them (subdirectories searched, 4 deep).
    /// Two or more runs (report BASE NEW …) are overlaid: the first path's run is BASE, and the
    /// others are compared with it level by level.
    #[arg(required = true, num_args = 1..)]
    pub paths: Vec<PathBuf>,
    /// Where the report goes (default: report.html or report.md in the first directory given,
    /// or beside the first file; - for standard output).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// html: one self-contained page with plots; md: the same tables and text as
    /// GitHub-flavoured Markdown.
    #[arg(long, value_enum, default_value = "html")]
    pub format: crate::after_run::present::Format,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The baseline: an artifact, a sweep summary, a search trace or a directory (several runs
    /// of the same levels in a directory are compared by their between-run variance).
    pub base: PathBuf,
    /// The candidate, in the same forms.
    pub new: PathBuf,
    /// Fail (exit 3) when METRIC regressed significantly by more than PCT percent, e.g.
    /// tpot_p50=5% or ttft_p99=10 (repeatable, or comma-separated). Metrics: ttft, tpot, e2e
    /// with p50 or p99 (ttft_p99), output_tok_s, request_rps.
    #[arg(long = "max-regress", value_name = "METRIC=PCT", value_delimiter = ',')]
    pub max_regress: Vec<String>,
    /// text: a benchstat-style table; md: the same as Markdown; json: everything, for tools.
    #[arg(long, value_enum, default_value = "text")]
    pub format: crate::after_run::compare::run::CompareFormat,
    /// Compare even when the configurations differ (levels are then matched by level alone).
    #[arg(long)]
    pub force: bool,
    /// Accept --max-regress gates that could not be tested (too few requests or runs for the
    /// test to decide, no records, a level on one side only): reported, but exit 0 rather than 2.
    #[arg(long)]
    pub allow_untested: bool,
    /// Family-wise significance level of one level's tests (Bonferroni-corrected across its
    /// metrics).
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,
    /// Smallest change, in percent, that counts: a significant change below it is shown as
    /// noise (`~ within noise`) and breaches no gate. Two runs of one build on one machine
    /// differ by a fraction of a percent that a rank test over thousands of requests detects.
    #[arg(long, value_name = "PCT", default_value = "1%", value_parser = parse_noise)]
    pub noise: f64,
}

fn parse_noise(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').trim().parse::<f64>() {
        Ok(p) if p.is_finite() && (0.0..100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage; give a number of percent from 0 to below 100, e.g. 1%")),
    }
}

fn parse_alpha(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 0.5 => Ok(a),
        _ => Err(format!("{s:?} is not a significance level; give a number between 0 and 0.5, e.g. 0.05")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Shard records files, or directories holding them (`*.records.ndjson`).
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
    /// Directory for the merged artifacts, records file and time series.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Merge even when a shard is missing, failed or was interrupted: the artifacts are marked
    /// partial and not performance-eligible (without it, such a merge exits 1 naming the shard).
    #[arg(long)]
    pub allow_partial: bool,
    /// Window length of the merged time series.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub window: std::time::Duration,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// A level's artifact (<run_id>.json) or a records file (--records, run.records), told
    /// apart by their content.
    pub input: PathBuf,
    /// The table's format (default: from the extension of --out, .parquet or .csv).
    #[arg(long, value_enum)]
    pub format: Option<crate::after_run::export::Format>,
    /// The file to write (replaced atomically when complete).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct SummarizeArgs {
    /// A records file written with --records (or run.records = true).
    pub records: PathBuf,
    /// Directory for the rebuilt artifacts.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Rebuild even when a level's records are not all in the file (lines deleted or edited
    /// since the run): its artifact is then marked partial and not performance-eligible
    /// (without it, such a file exits 1 naming what is missing).
    #[arg(long)]
    pub allow_partial: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Scenario file (TOML; docs/scenario.md lists every key), or - to read it from standard
    /// input. Without it, the built-in scenario (scenarios/default.toml) runs.
    pub scenario: Option<PathBuf>,
    /// Server API root, e.g. http://127.0.0.1:8000/v1 (overrides target.base_url; the environment
    /// variable ANVIL_BASE_URL does the same when this option is absent). Repeat it for several
    /// replicas (target.base_urls).
    #[arg(long, value_name = "URL")]
    pub base_url: Vec<String>,
    /// Model name (overrides target.model). Without it, the model the server's /models lists is
    /// used when it lists exactly one.
    #[arg(long)]
    pub model: Option<String>,
    /// Concurrency level or comma-separated sweep, e.g. 1,2,4,8 (overrides load.concurrency and
    /// sets load.mode = "closed", replacing the scenario's open-loop settings and any search).
    /// With --rate: one cap on the requests in flight (load.max_in_flight; later arrivals wait),
    /// as vllm bench serve's --max-concurrency.
    #[arg(short = 'c', long, visible_alias = "max-concurrency", value_name = "N[,N…]", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<Vec<u32>>,
    /// Open-loop arrival rate or comma-separated sweep in requests per second, e.g. 50,100,200
    /// (overrides load.rate and sets load.mode = "open", replacing the scenario's closed-loop
    /// settings and any search). inf releases every request at once: a closed loop of all the
    /// level's requests, or of --max-concurrency when given.
    #[arg(short = 'r', long, value_name = "RPS[,RPS…]|inf", value_delimiter = ',')]
    pub rate: Option<Vec<f64>>,
    /// Requests per level (overrides run.requests).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// How long each level sends, e.g. 90s or 10m (overrides run.duration; with --requests too,
    /// whichever ends first).
    #[arg(short = 'd', long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Prompt size in tokens (overrides workload.context_tokens).
    #[arg(long, visible_alias = "prompt-tokens", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub input_tokens: Option<u32>,
    /// Output budget per request, sent as max_tokens (overrides workload.max_tokens). The model
    /// may stop earlier: add --ignore-eos for exactly this many.
    #[arg(long = "output-tokens", visible_alias = "max-tokens", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Ask the server to ignore the end-of-sequence token, so every answer is the full output
    /// budget (sets output.ignore_eos = true).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Name of the environment variable holding the API key, sent as a bearer token (overrides
    /// target.api_key_env; the key itself never appears anywhere).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// A request header sent with every request, e.g. --header 'X-Tenant: team-a' (repeatable;
    /// added to target.headers, replacing a header of the same name). The value is a secret: never
    /// written, only the name is recorded.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// A service-level objective, as in the `[slo]` table, e.g. ttft_p99_ms=500 (repeatable).
    #[arg(long, value_name = "OBJECTIVE=VALUE")]
    pub slo: Vec<String>,
    /// Any scenario key, e.g. --set workload.max_context_tokens=131072 or
    /// --set target.model=Qwen/Qwen3-8B (repeatable; the value is read as TOML, else as text).
    #[arg(long, value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// Images per request, synthetic JPEGs (sets workload.media.images.count; see media.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub images: Option<u32>,
    /// Image size, e.g. 1024x1024 (sets workload.media.images.size).
    #[arg(long, value_name = "WxH")]
    pub image_size: Option<String>,
    /// One WAV clip of this many seconds per request (sets workload.media.audio.seconds).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub audio_seconds: Option<u32>,
    /// Seed for context draws and prompt text (overrides run.seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulator profile when no base URL is given: instant, fast, realistic, llamacpp, faults, spec
    /// (overrides target.simulator).
    #[arg(long, value_name = "PROFILE")]
    pub simulator: Option<String>,
    /// Prompt sizing: calibrate (probe the server), estimate (built-in estimate) or a path to a
    /// local tokenizer.json (overrides workload.tokenizer).
    #[arg(long, value_name = "MODE|PATH")]
    pub tokenizer: Option<String>,
    /// Directory for artifacts (created if missing).
    #[arg(short = 'o', long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// No progress bar (it is also off when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// No progress bar and no summary tables: one status line per snapshot interval, then the
    /// artifact paths (for logs and CI).
    #[arg(long)]
    pub quiet: bool,
    /// Append every request's record to this file as it ends (JSON Lines); kept after the run.
    /// `anvil-load summarize FILE` rebuilds the artifacts from it.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Serve the client's own metrics at http://ADDR/metrics during the run, for Prometheus
    /// (sets run.metrics_listen; e.g. 127.0.0.1:9464, :9464 for every interface, port 0 for a
    /// free port; see observability.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Keep /metrics up this long after the run, so a last scrape sees the final counts (sets
    /// run.metrics_linger; default 0s).
    #[arg(long, value_name = "DURATION")]
    pub metrics_linger: Option<String>,
    /// Push the client's live metrics to this Prometheus remote write URL, e.g.
    /// http://127.0.0.1:9090/api/v1/write, every run.push_interval and at the end (sets
    /// run.remote_write; see observability.md#push-prometheus-remote-write-and-otlp).
    #[arg(long, value_name = "URL")]
    pub remote_write: Option<String>,
    /// Push the client's live metrics to this OTLP/HTTP metrics URL, e.g.
    /// http://127.0.0.1:4318/v1/metrics, every run.push_interval and at the end (sets run.otlp).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Exit with code 3 when a level's validity check fails (client saturated, arrivals dropped
    /// or queued) or a level misses an `[slo]` objective (named with its threshold and the observed
    /// value; capacity-search probes are exempt from the objectives).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub shard: crate::distributed::shard::ShardArgs,
    /// `--format text|json` and `--verbose`: how the run's results are printed.
    #[command(flatten)]
    pub console: crate::results::console::ConsoleArgs,
}

impl RunArgs {
    pub fn overrides(&self) -> Overrides {
        let base_urls = if self.base_url.len() > 1 { self.base_url.clone() } else { Vec::new() };
        let (base_url, base_url_origin) = match self.base_url.as_slice() {
            [url] => (Some(url.clone()), Some("--base-url")),
            [_, _, ..] => (None, None),
            [] => match std::env::var("ANVIL_BASE_URL") {
                Ok(url) if !url.trim().is_empty() => (Some(url), Some("ANVIL_BASE_URL")),
                _ => (None, None),
            },
        };
        Overrides {
            base_url,
            base_url_origin,
            base_urls,
            model: self.model.clone(),
            concurrency: self.concurrency.clone(),
            rate: self.rate.clone(),
            requests: self.requests,
            max_tokens: self.max_tokens,
            input_tokens: self.input_tokens,
            ignore_eos: self.ignore_eos,
            duration: self.duration.clone(),
            api_key_env: self.api_key_env.clone(),
            slo: self.slo.clone(),
            set: self.set.clone(),
            seed: self.seed,
            simulator: self.simulator.clone(),
            tokenizer: self.tokenizer.clone(),
            headers: self.header.clone(),
            remote_write: self.remote_write.clone(),
            otlp: self.otlp.clone(),
            metrics_listen: self.metrics_listen.clone(),
            metrics_linger: self.metrics_linger.clone(),
            images: self.images,
            image_size: self.image_size.clone(),
            audio_seconds: self.audio_seconds,
        }
    }
}

/// `anvil-load completions SHELL`: the script on standard output.
pub fn print_completions(args: &CompletionsArgs) -> std::io::Result<()> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Into memory first: clap_complete panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "anvil-load", &mut script);
    to_stdout(&script)
}

/// Bytes to standard output; a reader that closed the pipe early (`| head`) is not an error.
fn to_stdout(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match std::io::Write::write_all(&mut out, bytes).and_then(|()| std::io::Write::flush(&mut out)) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `anvil-load man`: the main page on standard output, or with `--dir` one page per command
/// (written by the rule of every output file: atomically, never through a planted link). Returns
/// the files written.
pub fn write_man(args: &ManArgs) -> std::io::Result<Vec<PathBuf>> {
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    // Built first, so every subcommand has its display name (anvil-load-report) for its page.
    cmd.build();
    let Some(dir) = &args.dir else {
        let mut bytes = Vec::new();
        page(cmd).render(&mut bytes)?;
        to_stdout(&bytes)?;
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut pending = vec![cmd];
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
        let man = page(cmd);
        let path = dir.join(man.get_filename());
        let mut bytes = Vec::new();
        man.render(&mut bytes)?;
        crate::results::artifact::output::write_whole(&path, |w| w.write_all(&bytes))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

fn page(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).date(env!("ANVIL_BUILD_DATE")).source(concat!("anvil-load ", env!("CARGO_PKG_VERSION")))
}

/// A mistyped subcommand (`anvil-load reprot`) would otherwise be read as a scenario path and
/// fail with "cannot read the scenario file". The first positional argument is taken for a
/// mistyped subcommand when no such file exists, it looks like no path (no `/`, no `.`), and
/// it is within a small edit distance of a subcommand's name: then the message that names it.
pub fn mistyped_command(args: &[std::ffi::OsString]) -> Option<String> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Built, so that every option knows whether it takes a value.
    cmd.build();
    let word = first_positional(&cmd, args)?;
    if word.contains(['/', '\\', '.']) || word.is_empty() || Path::new(word).exists() {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    let (name, distance) = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name())
        .chain(["help"])
        .map(|name| (name, strsim::osa_distance(&lower, name)))
        .min_by_key(|(_, d)| *d)?;
    // One edit for short names (mock, man), two for longer ones: close enough to be a typo,
    // far enough that a scenario called `smoke` is not taken for `mock`.
    let allowed = if name.len() <= 4 { 1 } else { 2 };
    // Escaped: the word is the user's, and reaches a terminal.
    let word = word.escape_debug();
    (distance > 0 && distance <= allowed).then(|| {
        format!(
            "unknown command '{word}'; did you mean '{name}'?\n  fix: anvil-load {name} …; a scenario is a file path (no file named '{word}' exists), e.g. scenarios/smoke.toml"
        )
    })
}

/// The first argument after the program's name that is neither an option nor an option's value.
fn first_positional<'a>(cmd: &clap::Command, args: &'a [std::ffi::OsString]) -> Option<&'a str> {
    let takes_value = |arg: &clap::Arg| arg.get_num_args().is_some_and(|n| n.takes_values());
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let text = arg.to_str()?;
        if text == "--" {
            return rest.next().and_then(|a| a.to_str());
        }
        let option = if let Some(long) = text.strip_prefix("--") {
            if long.contains('=') {
                continue;
            }
            cmd.get_arguments().find(|a| a.get_long() == Some(long))
        } else if let Some(short) = text.strip_prefix('-').filter(|s| !s.is_empty()) {
            if short.chars().count() > 1 {
                continue;
            }
            cmd.get_arguments().find(|a| a.get_short().is_some_and(|c| short.starts_with(c)))
        } else {
            return Some(text);
        };
        if option.is_some_and(takes_value) {
            rest.next();
        }
    }
    None
}

/// What `anvil-load` run with no arguments prints (to stderr, exit code 2): where to start,
/// rather than clap's bare "a required argument was not provided".
pub const FIRST_STEPS: &str = "\
anvil-load: a load generator for OpenAI-compatible LLM inference servers.

  anvil-load --base-url URL                     run the built-in scenario against a server, e.g.
                                                http://127.0.0.1:8000/v1 (1,024-token prompts,
                                                128 output tokens, 8 in flight, 200 requests)
  anvil-load --base-url URL --input-tokens 256 --output-tokens 32 -c 4 -n 40
                                                the same with your sizes (--model NAME when the
                                                server lists several models)
  anvil-load SCENARIO.toml                      run a scenario file (against the embedded
                                                simulator when it names no base_url)
  anvil-load validate SCENARIO.toml             check a scenario and print the plan; sends nothing
  anvil-load mock                               serve the simulator on 127.0.0.1:8000 to try things
  anvil-load --help                             every command and option

Example scenarios are in the scenarios/ directory of the source (scenarios/smoke.toml is the smallest).
";

/// Exit codes (also in `--help` and docs/command-line.md).
pub mod exit {
    pub const OK: u8 = 0;
    pub const ABORTED: u8 = 1;
    pub const BAD_INPUT: u8 = 2;
    /// `--strict` and a level failed its validity check or missed an `[slo]` objective.
    pub const INVALID: u8 = 3;
}
