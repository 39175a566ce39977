# The `ferroscale` binary in a minimal image, as deploy/manifests/deployment.yaml expects it
# (`ferroscale:0.1.0`, arguments starting with `run`) and as upstream's Helm chart and example
# manifests run upstream's image (`./cluster-autoscaler --cloud-provider=... ` from `/`): the
# binary is at `/ferroscale` and, as a link to it, at `/cluster-autoscaler`.
#   docker build -t ferroscale:0.1.0 .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p ferroscale
# The shipped binary carries no debug info (the release profile keeps it for benchmarks and
# profiling): about 220 MiB become about 42 MiB. Its symbol table stays, so a panic's backtrace still
# names the functions. crates/cli/tests/image.rs runs this step against a test build.
RUN mkdir /out \
    && strip --strip-debug -o /out/ferroscale target/release/ferroscale \
    && ln -s ferroscale /out/cluster-autoscaler

FROM gcr.io/distroless/cc-debian12:nonroot
# A directory's contents are copied with the link kept as a link: one binary, two names.
COPY --from=build /out/ /
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/ferroscale"]
