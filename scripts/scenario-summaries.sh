#!/usr/bin/env bash
# Proof that a refactoring changed no decision: plays every bundled scenario with
# `ferroscale simulate --output json` and keeps each JSON summary without its wall-clock timings
# (`decideMillis`), so two runs of the same engine give byte-identical files.
#
#   scripts/scenario-summaries.sh record DIR [--large]   write DIR/<scenario>.json
#   scripts/scenario-summaries.sh check DIR [--large]    play again and compare with DIR
#
# Record on the commit before a change, check on the commit after; `check` prints the
# differences and exits 1 when any summary moved. Without --large, large-15k and large-65k are
# left out (together several minutes and GiB of memory; see scripts/large-scenarios.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
dir=${2:-}
large=${3:-}
if [[ "$mode" != record && "$mode" != check ]] || [[ -z "$dir" ]]; then
  echo "usage: $0 record|check DIR [--large]" >&2
  exit 2
fi

cargo build --release --locked -p ferroscale
target=${CARGO_TARGET_DIR:-target}
binary="$target/release/ferroscale"
scenarios=(default upstream-1 upstream-2 upstream-3 upstream-4 upstream-5 upstream-6 full-day
  zonal-volumes gpu-dra capacity-apis controller-rate bare-metal)
if [[ "$large" == --large ]]; then
  scenarios+=(large-15k large-65k)
fi

# The summary without its timings, keys in a fixed order.
summary() {
  # Exit status 1 only says an expectation failed; the summary is still what is compared.
  "$binary" simulate "$1" --output json | python3 -c '
import json, sys
summary = json.load(sys.stdin)
summary.pop("decideMillis", None)
print(json.dumps(summary, indent=1, sort_keys=True))
' || true
}

mkdir -p "$dir"
status=0
for name in "${scenarios[@]}"; do
  case "$mode" in
    record)
      summary "$name" > "$dir/$name.json"
      echo "recorded $name" >&2
      ;;
    check)
      if summary "$name" | diff -u "$dir/$name.json" - ; then
        echo "unchanged $name" >&2
      else
        echo "CHANGED $name" >&2
        status=1
      fi
      ;;
  esac
done
exit $status
