//! The Cluster API cloud provider (spec `clusterapi.md`): node groups are the MachineDeployments,
//! MachineSets and MachinePools of a management cluster that carry size annotations, and their
//! instances are Machines (or the provider ids listed by a MachinePool).
//!
//! The crate has two halves. The pure half reads Cluster API objects (given as
//! `kube::api::DynamicObject`, whose `spec` and `status` are untyped JSON) and answers questions
//! about them without I/O, clock or hidden randomness, so every rule of the spec is unit-tested.
//! The kube half watches the management cluster, scales resources and implements `CloudProvider`.
