//! The capacity APIs of the `autoscaling.x-k8s.io` group as Kubernetes objects: ProvisioningRequest
//! (`v1`, the storage version, and `v1beta1`), CapacityBuffer and CapacityQuota (`v1beta1`, the
//! storage versions, and `v1alpha1`), written with kube's `CustomResource` derive, and the CRD
//! manifests the project ships, rendered from those types ([`crds`]).
//!
//! Every served version has the same fields, so each older version converts into the storage
//! version losslessly (`From`); readers (`crates/objects`, `crates/kube`) handle only the storage
//! types. The sub-objects the versions share (conditions, references, resource lists) are defined
//! once in [`common`].

pub mod capacity_buffer;
pub mod capacity_quota;
pub mod common;
pub mod crds;
pub mod provisioning_request;

pub use common::{Condition, LocalObjectRef};
pub use crds::{CrdError, CrdManifest, WriteError, crd_manifests, render_crds, write_crds};

/// API group of the three kinds.
pub const GROUP: &str = "autoscaling.x-k8s.io";
