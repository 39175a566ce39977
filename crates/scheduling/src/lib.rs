//! Scheduling simulation: a cluster snapshot that forks in time proportional to the changes made on
//! the fork, and the kube-scheduler Filter plugins that decide whether a pod fits a node.
//!
//! * [`snapshot`] — nodes, placed pods, what-if branches ([`Snapshot::branch`] returns a
//!   [`Branch`] guard that reverts when dropped unless committed).
//! * [`filters`] — [`check`] one pod against one node, [`find_node`] for the first fitting node,
//!   and [`Unfit`], the reason a node was rejected.
//! * [`scheduler_config`] — the kube-scheduler profile (`--scheduler-config-file`) the filters
//!   follow: disabled filters, default spread constraints, ignored resources.
//! * [`volumes`] — the volume filters (VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
//!   VolumeZone) over the [`VolumeCatalogue`] the snapshot holds.
//! * [`dra`] — the DynamicResources filter: ResourceClaims allocated devices from ResourceSlices,
//!   with the allocation state the snapshot keeps through branches.
//! * `topology` (internal) — the incremental per-topology-domain indexes that keep the affinity
//!   and spread filters O(1) per node.
//!
//! Pure and synchronous: no I/O, no clock, no randomness.

pub mod dra;
pub mod filters;
pub mod scheduler_config;
pub mod snapshot;
mod topology;
pub mod volumes;

pub use dra::{AllocationNote, DraReason, DraUnfit, PoolUtilization};
pub use filters::{Unfit, UnfitKind, check, find_node, find_node_for_unbound, fits_by_node_alone};
pub use scheduler_config::{FilterPlugin, SchedulerConfigError, SchedulerProfile};
pub use snapshot::{Branch, NodeId, NodeInfo, Snapshot};
pub use volumes::{VolumeCatalogue, VolumePlugin, VolumeUnfit};
