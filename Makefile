# The two commands a new user runs: `make demo` and `make test`.
CARGO ?= cargo

.PHONY: all build demo test test-engine test-slurm test-wheel lint bench clean

all: build

# Both programs: target/release/anvil-load and target/release/anvil-sim.
build:
	$(CARGO) build --release --locked

# The reference scenario against the embedded simulator (realistic profile), its summary, then
# the self-contained HTML report of this run (the newest artifact in results/demo), path printed.
# It needs anvil-load alone.
demo:
	$(CARGO) build --release --locked --bin anvil-load
	./target/release/anvil-load scenarios/capacity-v4.toml --out results/demo
	./target/release/anvil-load report "$$(ls -t results/demo/anvil-*.json | head -n 1)" --out results/demo/report.html

# Formatting, clippy (the engine tests, test = false in Cargo.toml, are linted only when named;
# linting them needs no engine), and the API docs with broken or private intra-doc links denied.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(CARGO) clippy --locked --test engine -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --locked

test: lint
	$(CARGO) test --locked

# Every API against a real engine: llama.cpp's llama-server and a 135M model, fetched by pinned
# version and hash and built once per machine into a cache outside the clone (.ci/engine.sh),
# then the engine tests, which start their servers on 127.0.0.1 and stop them by PID. Not part
# of `make test` (that target needs no engine); a missing engine fails this one loudly.
test-engine:
	bash .ci/engine.sh $(CARGO) test --locked --test engine -- --test-threads=1

# The Slurm deployment for real: a one-node cluster on this machine (installs slurm-wlm and munge
# from the system packages when missing; needs root), the sbatch script with 4 tasks against the
# simulator, the shards' records checked; every daemon it starts is stopped on exit.
test-slurm:
	bash .ci/slurm-test.sh

# The Python wheel (maturin, pyproject.toml) built with the release profile, installed into a
# fresh venv, then `anvil-load --version` and a smoke run against the embedded simulator from
# that venv (.ci/wheel.sh). Leaves the wheel in target/wheels.
test-wheel:
	bash .ci/wheel.sh

# Criterion micro-benches (parse, aggregate), the end-to-end benchmark (e2e: a table on stdout,
# JSON in target/bench/e2e.json), the start skew of four local shards (shards), export to Parquet
# and CSV (export) and every command after the run over 200,000 records (soak). Not part of
# `make test`; nothing here asserts a speed.
bench:
	$(CARGO) bench --locked

clean:
	$(CARGO) clean
