# The `ferroscale` binary in a minimal image, as deploy/manifests/deployment.yaml expects it
# (`ferroscale:0.1.0`, arguments starting with `run`).
#   docker build -t ferroscale:0.1.0 .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p ferroscale \
    && cp target/release/ferroscale /ferroscale

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /ferroscale /ferroscale
USER 65532:65532
ENTRYPOINT ["/ferroscale"]
