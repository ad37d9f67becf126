//! Every API against a real engine: llama.cpp's `llama-server` serving a 135M instruct model,
//! started by each test on `127.0.0.1` (see `engine/server.rs`), the real binary driven against
//! it through a recording proxy (`engine/tap.rs`), and each artifact compared with the engine's
//! own view of the same requests: the `usage` and `timings` it streamed, its `/metrics` counters
//! before and after, its `/slots`. Known behaviours of this engine are pinned here too, so a
//! release that changes them shows.
//!
//! Not part of `cargo test` (`test = false` in Cargo.toml): `make test-engine` fetches and builds
//! the engine, sets `ANVIL_LLAMA_SERVER` and `ANVIL_LLAMA_MODEL`, and runs this target one test
//! at a time. Without those variables every engine test fails, saying how to run them.

#![cfg(unix)]

mod common;

#[path = "engine/harness.rs"]
mod harness;
#[path = "engine/http.rs"]
mod http;
#[path = "engine/server.rs"]
mod server;
#[path = "engine/tap.rs"]
mod tap;

#[path = "engine/apis.rs"]
mod apis;
#[path = "engine/cache.rs"]
mod cache;
#[path = "engine/generate.rs"]
mod generate;
#[path = "engine/lifecycle.rs"]
mod lifecycle;
#[path = "engine/traffic.rs"]
mod traffic;
