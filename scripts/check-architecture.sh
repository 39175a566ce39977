#!/usr/bin/env bash
# Checks the crate dependency rules that ARCHITECTURE.md states, on the resolved dependency graph
# (`cargo tree`, normal dependencies only: dev-dependencies may pull in anything a test needs).
# It fails, naming the crate and the forbidden dependency, when a rule is broken, so the layering
# cannot drift silently. Needs nothing but cargo; builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

failures=0

# The transitive normal dependencies of a workspace crate, one package name per line.
dependencies_of() {
  cargo tree --locked -p "$1" -e normal --prefix none -f '{p}' 2>/dev/null |
    awk '{print $1}' | sort -u
}

# forbid CRATE REASON DEP... : none of DEP may be among CRATE's transitive normal dependencies.
forbid() {
  local crate=$1 reason=$2
  shift 2
  local deps
  deps=$(dependencies_of "$crate") || {
    echo "check-architecture: cargo tree failed for $crate" >&2
    exit 1
  }
  [ -n "$deps" ] || { echo "check-architecture: no dependency graph for $crate" >&2; exit 1; }
  local dep
  for dep in "$@"; do
    if grep -qx -- "$dep" <<<"$deps"; then
      echo "check-architecture: $crate depends on $dep, but $reason" >&2
      failures=$((failures + 1))
    fi
  done
}

# I/O and runtime crates that the pure layers must never reach, directly or through another crate.
io_crates=(tokio mio kube kube-client kube-runtime tonic hyper reqwest tower prometheus tracing-subscriber)
# The crates above the pure layers, in the order of ARCHITECTURE.md's picture.
upper_workspace_crates=(ferroscale ferroscale-sim ferroscale-kube ferroscale-metrics
  ferroscale-externalgrpc-sdk ferroscale-externalgrpc-proto ferroscale-provider-kwok
  ferroscale-provider-externalgrpc ferroscale-provider-clusterapi ferroscale-provider-exoscale
  ferroscale-testing-control-plane ferroscale-testing-exoscale ferroscale-testing-faults
  ferroscale-scheduler-differential ferroscale-engine-fixtures)

forbid ferroscale-model "the model is pure (thiserror only)" "${io_crates[@]}" \
  ferroscale-scheduling ferroscale-core ferroscale-objects k8s-openapi serde_yaml_ng
forbid ferroscale-scheduling "scheduling is pure and knows no node groups" "${io_crates[@]}" \
  ferroscale-core ferroscale-objects "${upper_workspace_crates[@]}"
forbid ferroscale-core "Decide never performs I/O (core knows only its two async contracts)" \
  "${io_crates[@]}" k8s-openapi ferroscale-objects "${upper_workspace_crates[@]}"
forbid ferroscale-core "the engine holds only the engine: the flag catalogue is the command line's" \
  ferroscale-flags
forbid ferroscale-flags "the flag catalogue is plain data beside the command line, not the engine" \
  "${io_crates[@]}" ferroscale-core ferroscale-scheduling ferroscale-model \
  "${upper_workspace_crates[@]}"
forbid ferroscale-capacity "the capacity APIs' rules are pure and sit below the engine" \
  "${io_crates[@]}" ferroscale-core ferroscale-objects k8s-openapi "${upper_workspace_crates[@]}"
forbid ferroscale-objects "converting objects is pure" "${io_crates[@]}" \
  ferroscale-core "${upper_workspace_crates[@]}"
forbid ferroscale-sim "the simulator never waits on a wall clock or the network" "${io_crates[@]}" \
  ferroscale-kube ferroscale-metrics ferroscale-provider-kwok ferroscale-provider-externalgrpc \
  ferroscale-provider-clusterapi ferroscale-provider-exoscale ferroscale
forbid ferroscale-kube "the kube layer decides nothing of a provider's or the simulator's" \
  ferroscale-sim ferroscale-provider-kwok ferroscale-provider-externalgrpc \
  ferroscale-provider-clusterapi ferroscale-provider-exoscale tonic ferroscale
forbid ferroscale-externalgrpc-proto "the wire contract performs no Kubernetes I/O" \
  kube kube-client kube-runtime ferroscale-core ferroscale
for provider in ferroscale-provider-kwok ferroscale-provider-externalgrpc \
  ferroscale-provider-clusterapi ferroscale-provider-exoscale; do
  forbid "$provider" "providers sit below the binary and beside each other" ferroscale ferroscale-sim \
    $(printf '%s\n' ferroscale-provider-kwok ferroscale-provider-externalgrpc \
      ferroscale-provider-clusterapi ferroscale-provider-exoscale | grep -vx "$provider")
done

forbid ferroscale "fault injection and the other test support never ship in the binary" \
  ferroscale-testing-faults ferroscale-testing-control-plane ferroscale-testing-exoscale \
  ferroscale-engine-fixtures

# What serves the engine but is not the engine stays out of core's sources: the flag catalogue is
# `crates/flags`, the benchmark fixtures are `crates/engine-fixtures` (a dev-dependency). A cargo
# feature or a module could bring them back without any new dependency, so the sources are read.
# (A private `#[cfg(test)] mod fixtures` for core's own unit tests is fine; an exported one is not.)
if grep -rnE '^[[:space:]]*(pub(\([a-z]+\))?[[:space:]]+)?mod[[:space:]]+(flag_catalogue|bench_fixtures)\b|^[[:space:]]*pub[[:space:]]+mod[[:space:]]+fixtures\b' \
  crates/core/src >&2; then
  echo "check-architecture: crates/core declares a flag catalogue or fixtures module, but the engine" \
    "holds only the engine (crates/flags, crates/engine-fixtures)" >&2
  failures=$((failures + 1))
fi
if grep -nE '^\[features\]' crates/core/Cargo.toml >/dev/null &&
  grep -nE '^bench-fixtures' crates/core/Cargo.toml >&2; then
  echo "check-architecture: crates/core has a bench-fixtures feature; fixtures are crates/engine-fixtures" >&2
  failures=$((failures + 1))
fi

# Inside the engine crate: acting has one home (`act`), the decide modules never import it or the
# loop, and `act` never imports the loop (ARCHITECTURE.md, Code map). Comments may name them.
code_lines_naming() {
  local pattern=$1
  shift
  grep -rnE "$pattern" "$@" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true
}
decide_modules=(crates/core/src/scale_up crates/core/src/scale_down crates/core/src/cluster_state
  crates/core/src/backoff.rs crates/core/src/accelerators.rs)
offending=$(code_lines_naming '\bcrate::(act|autoscaler)\b' "${decide_modules[@]}")
if [ -n "$offending" ]; then
  echo "$offending" >&2
  echo "check-architecture: a decide module imports act or the loop, but deciding is pure" >&2
  failures=$((failures + 1))
fi
offending=$(code_lines_naming '\bcrate::autoscaler\b|super::super::autoscaler' crates/core/src/act)
if [ -n "$offending" ]; then
  echo "$offending" >&2
  echo "check-architecture: act imports the loop, but the loop calls act and keeps its own books" >&2
  failures=$((failures + 1))
fi
if [ -d crates/core/src/act/deletions ] || [ -f crates/core/src/autoscaler/act.rs ]; then
  echo "check-architecture: acting is back outside crates/core/src/act" >&2
  failures=$((failures + 1))
fi

if [ "$failures" -gt 0 ]; then
  echo "check-architecture: $failures rule(s) broken; see ARCHITECTURE.md (Code map)" >&2
  exit 1
fi
echo "check-architecture: the crate dependency rules of ARCHITECTURE.md hold"
