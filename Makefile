# The two commands a new user runs: `make demo` and `make test`.
CARGO ?= cargo

.PHONY: all build demo test lint bench clean

all: build

build:
	$(CARGO) build --release --locked

# The reference scenario against the embedded simulator (realistic profile), then its summary.
demo: build
	./target/release/anvil-load scenarios/capacity-v4.toml --out results/demo

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

test: lint
	$(CARGO) test --locked

bench:
	$(CARGO) bench --locked

clean:
	$(CARGO) clean
