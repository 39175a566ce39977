//! The cloud-agnostic autoscaling engine.
//!
//! `cloud` and `kubernetes` are the contracts the outside world implements (async: they do I/O).
//! `scale_up`, `scale_down`, `cluster_state`, `backoff` and `events` are the pure Decide layer:
//! functions of a gathered snapshot, remembered state and options, returning a plan. No I/O, no
//! clock reads, no unseeded randomness. The Act side talks to the contracts: `act` (executing a
//! scale-up plan), `actuation` (scale-down deletions as state machines) and `autoscaler` (the
//! loop: gather, decide, act). `cloud_node_controller` is an act-side controller next to the
//! loop (node initialization and lifecycle for clouds without a cloud-controller-manager), with
//! its rules as pure as the engine's.

pub mod accelerators;
pub mod act;
pub mod autoscaler;
pub mod backoff;
pub mod cloud;
pub mod cloud_node_controller;
pub mod cluster_state;
pub mod events;
pub mod kubernetes;
pub mod options;
pub mod parallel;
pub mod scale_down;
pub mod scale_up;
pub mod stopwatch;

/// Maps and sets over every node or pod of a loop, keyed by names and ids the process reads from
/// its own caches: foldhash's fast hasher (randomly seeded, as std's), since SipHash's resistance
/// to chosen collisions costs a tenth of a 65,000-node loop and buys nothing there.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// See [`FastMap`].
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Whether two lists hold the very same objects in the same order: what everything kept across
/// loops checks before it is reused (one word per object, no object read).
pub(crate) fn same_arcs<T>(a: &[std::sync::Arc<T>], b: &[std::sync::Arc<T>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| std::sync::Arc::ptr_eq(x, y))
}

pub use backoff::NodeGroupBackoff;
pub use options::{AutoscalingOptions, DrainPriorityBand, OptionError};
