# jetrelay: multi-stage build, small non-root runtime image.
#   docker build -t jetrelay .
#   docker run --rm -v $PWD/config/durable.toml:/etc/jetrelay/jetrelay.toml jetrelay
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so that source edits do not rebuild them.
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
# The patched crates (vendor/README.md).
COPY vendor ./vendor
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src target/release/deps/jetrelay* target/release/deps/libjetrelay* \
      target/release/.fingerprint/jetrelay-* target/release/jetrelay*
COPY src ./src
# COPY keeps the files' times, which may be older than the placeholder build: touch
# them so that cargo rebuilds the crate from the real sources.
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/jetrelay /usr/local/bin/jetrelay
COPY config/ /etc/jetrelay/examples/
ENV JETRELAY_CONFIG=/etc/jetrelay/jetrelay.toml
# The distroless nonroot user, numeric: Kubernetes checks runAsNonRoot against it.
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/jetrelay"]
CMD ["run"]
