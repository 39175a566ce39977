//! The Cluster API cloud provider (docs/clusterapi.md): node groups are the MachineDeployments,
//! MachineSets and MachinePools of a management cluster that carry size annotations, and their
//! instances are Machines (or the provider ids listed by a MachinePool).
//!
//! The crate has two halves. The pure half reads Cluster API objects (given as
//! `kube::api::DynamicObject`, whose `spec` and `status` are untyped JSON) and answers questions
//! about them without I/O, clock or hidden randomness, so every statement of docs/clusterapi.md
//! that they decide is unit-tested.
//! The kube half watches the management cluster, scales resources and implements `CloudProvider`.
pub mod management;

// The pure half: Cluster API objects in, answers out.
pub mod bad_input;
pub mod capacity;
pub mod discovery;
pub mod fields;
pub mod gpu;
pub mod ids;
pub mod instances;
pub mod keys;
pub mod options;
pub mod rollout;
pub mod scalable;
pub mod syntax;
pub mod template;

pub use bad_input::{BadAnnotation, BadField};
pub use keys::Keys;

#[cfg(test)]
mod test_objects;

// The kube half: watches, scale subresource, the delete-machine protocol, `CloudProvider`.
mod node_group;
mod provider;

pub use node_group::ClusterApiNodeGroup;
pub use provider::{ClusterApiConfig, ClusterApiProvider, ConfigError, KubeconfigPaths};
