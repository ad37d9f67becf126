use std::process::ExitCode;

use anvil_sim::cli::{ServeArgs, serve};
use clap::Parser;

/// A simulated OpenAI-compatible LLM inference server, in the foreground until Ctrl-C.
///
/// Chat, completions, Responses, Messages, embeddings and rerank, paced like a real engine, with
/// `/metrics`, faults and restarts on purpose. The manual: docs/simulator.md in the repository.
#[derive(Debug, Parser)]
#[command(name = "anvil-sim", version)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    // A bad flag: clap's message and exit code 2.
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(&cli.serve, "anvil-sim")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
