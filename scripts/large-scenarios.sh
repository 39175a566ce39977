#!/usr/bin/env bash
# Plays the bundled large clusters to their end with `ferroscale simulate` and checks their
# expectations: large-15k (15,000 nodes, 450,000 pods) and large-65k (65,000 nodes, 1,000,000
# pods), 30 simulated minutes each. Too slow for CI (minutes, several GiB of memory); CI runs
# their parse and first-loop checks (crates/sim/tests/large_scenarios.rs).
# Usage: scripts/large-scenarios.sh [scenario ...]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=(large-15k large-65k)
fi
cargo build --release -p ferroscale
target=${CARGO_TARGET_DIR:-target}
status=0
for name in "${scenarios[@]}"; do
  echo "large-scenarios: $name" >&2
  start=$(date +%s.%N)
  # Exit status 1 when an expectation fails (each failure printed), 2 when the scenario is invalid.
  if "$target/release/ferroscale" simulate "$name" --output json > "$target/large-scenario-$name.json"; then
    verdict="expectations hold"
  else
    verdict="FAILED (exit $?)"
    status=1
  fi
  end=$(date +%s.%N)
  echo "large-scenarios: $name: $verdict; wall $(echo "$end - $start" | bc) s; summary in $target/large-scenario-$name.json" >&2
done
exit $status
