//! `ferroscale run` with faults injected, on the real control plane: upstream's known failure
//! modes (a pod bound between scale-down's choice and its taint, a leader killed mid-drain or
//! right after a resize, an API server that errors or goes away, a cloud that hangs, half
//! succeeds or never delivers), each with the replicas and the faults that make it happen, and
//! the same invariants checked at the end of every one (`invariants.rs`). docs/reliability.md
//! lists the failure modes, what Ferroscale does about each, and which test proves it.
//!
//! Each test starts its own control plane and rig (`rig.rs`); run the binary with
//! `-- --test-threads=2` or fewer on 2 cores. `soak.rs` is the chaos soak: a few minutes here,
//! an hour with `scripts/chaos-soak.sh`.

mod api_errors;
#[allow(dead_code)] // shared with the live tests, which use the rest of it
#[path = "../live/harness.rs"]
mod harness;
mod invariants;
mod leadership;
mod provider_faults;
mod races;
mod rig;
mod soak;
#[path = "../support/mod.rs"]
mod support;
