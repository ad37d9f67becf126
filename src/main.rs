use std::process::ExitCode;

use anvil_load::cli::{Cli, exit};
use clap::Parser;

fn main() -> ExitCode {
    // No arguments at all: say where to start instead of clap's bare missing-argument error.
    if std::env::args_os().len() <= 1 {
        eprint!("{}", anvil_load::cli::FIRST_STEPS);
        return ExitCode::from(exit::BAD_INPUT);
    }
    // A mistyped subcommand is named as such, before it can be read as a scenario path.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(message) = anvil_load::cli::mistyped_command(&args) {
        eprintln!("error: {message}");
        return ExitCode::from(exit::BAD_INPUT);
    }
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log file or a CI capture gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ABORTED);
        }
    };
    // The program runs as a task of the runtime, not on this thread: the aggregator then takes
    // each outcome on a worker thread, instead of every request's end waking this thread too.
    match runtime.block_on(async { tokio::spawn(anvil_load::app::run(cli)).await }) {
        Ok(Ok(code)) => ExitCode::from(code),
        Ok(Err(e)) => {
            // One URL redaction for everything written: an error that quotes a URL (the
            // scenario's, a library's) never shows its credentials or query values.
            eprintln!("error: {}", anvil_load::redact::redact_urls_in(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
        // A panic is a bug: it ends the program as it would have on this thread.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit::ABORTED)
        }
    }
}
