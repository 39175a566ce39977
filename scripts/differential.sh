#!/usr/bin/env bash
# Runs the differential test of Ferroscale's Filter verdicts against the real kube-scheduler
# (crates/scheduler-differential) with any number of cases per scheduler configuration family and
# any seed: scripts/differential.sh [cases] [seed]. Without a seed, a new one is drawn and printed,
# so a failing run can be repeated. Needs the control plane of scripts/control-plane/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

cases=${1:-200}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "differential: $cases cases per family, seed $seed" >&2
FERROSCALE_DIFF_CASES=$cases FERROSCALE_DIFF_SEED=$seed \
  cargo test --release -p ferroscale-scheduler-differential --test differential -- --nocapture
