# anvil-load in a small non-root image, for the Kubernetes manifests (`anvil-load deploy kubernetes`).
#   docker build -t anvil-load:0.1.0 .
# Not built in CI (the CI machine has no container runtime); the manifests it runs in are
# validated there against the Kubernetes schemas.

# The current stable toolchain: dependencies may need a newer compiler than rust-version says.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin anvil-load

# glibc and libgcc only: TLS is rustls with bundled roots, so no OpenSSL or CA bundle is needed.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/anvil-load /usr/local/bin/anvil-load
# 65532 is distroless' `nonroot`; the Job's securityContext runs as the same user.
USER 65532:65532
EXPOSE 7311
ENTRYPOINT ["/usr/local/bin/anvil-load"]
