//! What the user sees during and after a run. Progress and warnings go to stderr; the answer,
//! the tables and the artifact paths to stdout, so `anvil-load ... > summary.txt` keeps the
//! results and drops the chatter (with `--format json`, stdout holds one JSON document instead
//! and the rest goes to stderr).
//!
//! - `progress`: the live line while a level runs.
//! - `level`: one level's answer box, the compact line a sweep prints per level, the detail table.
//! - `models`: a level's per-model lines and its cache reset line.
//! - `sweep`: the table of a run's levels and the sweep file.
//! - `answer`: a sweep's or a search's answer box, and its warnings grouped by kind.
//! - `json`: the `--format json` summary.

pub mod answer;
pub mod json;
pub mod level;
pub mod models;
pub mod progress;
pub mod sweep;

use clap::{Args, ValueEnum};

pub use level::level_summary;
pub use progress::{Progress, fmt_duration};
pub use sweep::{SweepRow, search_table, sweep_table};

use crate::results::aggregate::warnings::Warning;

/// How a run speaks: the console options of `anvil-load SCENARIO`.
#[derive(Debug, Clone, Default, Args)]
pub struct ConsoleArgs {
    /// text: the answer, tables and paths on stdout; json: one JSON summary on stdout
    /// (anvil-load.summary/v1, see docs/command-line.md) and everything else on stderr.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Print every level's detail table in a sweep or a search too (they are in the artifacts and
    /// the report either way), and a search's probes in the order they ran.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// The run's standard output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Where the human part of the output goes: stdout, or stderr when stdout holds the JSON summary.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    pub json: bool,
}

impl Out {
    pub fn new(args: &ConsoleArgs) -> Out {
        Out { json: args.format == Format::Json }
    }

    pub fn print(&self, text: &str) {
        if self.json {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }

    pub fn line(&self, text: &str) {
        self.print(&format!("{text}\n"));
    }
}

/// Each warning on its own line (stderr), as a single level raised them.
pub fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("warning: {}", w.message());
    }
}
