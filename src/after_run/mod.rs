//! After a run: records and artifacts read back.
//!
//! - `compare`: `anvil-load compare`: levels matched, tested and gated.
//! - `export`: `anvil-load export`: per-request records as a Parquet or CSV table.
//! - `gather`: result files read back typed and grouped into runs (artifacts, sweeps, searches, time series).
//! - `present`: `anvil-load report`: one document as HTML or Markdown.
//! - `rebuild`: records files back into artifacts: `summarize` and `merge`, through one checked reader.

pub mod compare;
pub mod export;
pub mod gather;
pub mod present;
pub mod rebuild;
