#!/usr/bin/env bash
# Runs every test of the repository: unit, property and simulator tests, and the integration tests
# against a real Kubernetes control plane. The control plane is built from Go modules on first use
# and cached under ~/.cache/ferroscale (about 24 minutes cold on 2 cores with helm, promtool and the Go interop peer; instant
# afterwards).
# The fault tests (crates/cli/tests/faults) run 4 minutes of the chaos soak; scripts/chaos-soak.sh
# runs it for an hour.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/control-plane/build.sh
cargo test --workspace --release --locked "$@"
