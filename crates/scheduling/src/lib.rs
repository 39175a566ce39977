//! Scheduling simulation: a cluster snapshot that forks in time proportional to the changes made on
//! the fork, and the kube-scheduler Filter plugins that decide whether a pod fits a node.
//!
//! Pure and synchronous: no I/O, no clock, no randomness.

pub mod filters;
pub mod snapshot;

pub use filters::{Unfit, UnfitKind, check, find_node};
pub use snapshot::{NodeId, NodeInfo, Snapshot};
