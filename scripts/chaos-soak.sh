#!/usr/bin/env bash
# Runs the chaos soak (crates/cli/tests/faults/soak.rs) for as long as asked — an hour by
# default — on the real control plane: two `ferroscale run` replicas, churning workloads, and
# faults drawn at random (API server errors and restarts, dropped and stalled watches, a leader
# killed or cut off, a paused scheduler, a cloud that hangs, half succeeds, loses answers or
# never delivers), with every invariant watched throughout. Prints the table of faults injected
# and survived, pods lost, wrong deletions and peak memory, and writes it to
# target/chaos-soak-<seed>.md; exits non-zero if an invariant broke.
#
#   scripts/chaos-soak.sh [duration] [seed]      e.g. scripts/chaos-soak.sh 1h, scripts/chaos-soak.sh 20m 42
#
# Without a seed a new one is drawn and printed, so a failing run can be replayed. Needs the
# control plane of scripts/control-plane/build.sh (run it first; cached afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-1h}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
toolchain=$(rustc --version | awk '{print $2}')
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ferroscale/target-rust-$toolchain}"
report="$CARGO_TARGET_DIR/chaos-soak-$seed.md"
echo "chaos soak: $duration, seed $seed; report in $report" >&2
scripts/control-plane/build.sh
FERROSCALE_SOAK_DURATION=$duration FERROSCALE_SOAK_SEED=$seed FERROSCALE_SOAK_REPORT=$report \
  cargo test --release --locked -p ferroscale --test faults -- --exact soak::chaos_soak_holds_every_invariant --nocapture
