# anvil-load in a small non-root image, for the Kubernetes manifests (`anvil-load deploy kubernetes`).
#   docker build --build-arg ANVIL_BUILD_COMMIT=$(git rev-parse --short=12 HEAD) -t anvil-load:0.1.0 .
# The build context has no .git (.dockerignore), so the commit that `--version` and the artifacts
# name comes from ANVIL_BUILD_COMMIT ("unknown" without it). Not built in CI (the CI machine has
# no container runtime); the manifests it runs in are validated there against the Kubernetes
# schemas. See docs/install.md.

# The toolchain the project is built and tested with, by exact version (dependencies may need a
# newer compiler than rust-version says). Refresh both images together, and the runtime's digest
# with `docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot`.
FROM rust:1.95.0-bookworm AS build
WORKDIR /src

# The dependencies first, in a layer of their own: the manifests, the lock file, the build
# script, and empty stand-ins for every target the manifests name. This layer is rebuilt only
# when a manifest or the lock file changes, not on every change to the sources.
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates/anvil-sim/Cargo.toml crates/anvil-sim/
RUN mkdir -p src benches/e2e tests crates/anvil-sim/src \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && for b in parse aggregate shards e2e/main; do echo 'fn main() {}' > "benches/$b.rs"; done \
 && touch tests/engine.rs \
 && echo 'fn main() {}' > crates/anvil-sim/src/main.rs && touch crates/anvil-sim/src/lib.rs \
 && cargo build --release --locked --bin anvil-load \
 && rm -rf src benches tests crates/anvil-sim/src

# Then the sources. COPY keeps the files' own times, which can be older than the stand-ins'
# build: touching them makes cargo rebuild the two packages' code (the dependencies stay built).
COPY . .
ARG ANVIL_BUILD_COMMIT=unknown
ARG SOURCE_DATE_EPOCH
RUN find src crates/anvil-sim/src -name '*.rs' -exec touch {} + \
 && ANVIL_BUILD_COMMIT="$ANVIL_BUILD_COMMIT" cargo build --release --locked --bin anvil-load \
 && ./target/release/anvil-load --version

# glibc and libgcc only: TLS is rustls with bundled roots, so no OpenSSL or CA bundle is needed.
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
COPY --from=build /src/target/release/anvil-load /usr/local/bin/anvil-load
# 65532 is distroless' `nonroot`; the Job's securityContext runs as the same user.
USER 65532:65532
EXPOSE 7311
ENTRYPOINT ["/usr/local/bin/anvil-load"]
