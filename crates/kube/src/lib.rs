//! The live-cluster side of Ferroscale: everything that talks to a real Kubernetes API server.
//!
//! - [`api_access`]: the one constructor of Kubernetes clients: `--kube-client-qps` /
//!   `--kube-client-burst` as a token bucket shared by one API server's clients, `--user-agent`,
//!   `--kubernetes`.
//! - [`caches`]: kube-runtime watchers that keep nodes, pods, PDBs, DaemonSets, workload
//!   controllers, namespaces, PriorityClasses and the priority expander's ConfigMap converted into
//!   the model, ready for Gather without relisting or reconverting.
//! - [`cluster`]: [`KubeCluster`], the engine's `ClusterApi` over the API server: reads from the
//!   caches, and the engine's few writes (node taints and cordoning, evictions, events, the status
//!   ConfigMap).
//! - [`cloud_nodes`]: the cloud node controller's `NodeObjectApi` for [`KubeCluster`]: Nodes read
//!   from the API server, initialized in one guarded replace, deleted with preconditions.
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease, compatible with client-go's.
//! - [`repeated`]: warnings that repeat (a server that does not answer) said once, then summed up.
//!
//! # What this crate must never do
//!
//! - **Decide anything.** No autoscaling decision lives here: which node to taint, which pod to
//!   evict, which events to record, what the status says, all come from the engine (the pure
//!   Decide step in `ferroscale-core`). This crate only reads the cluster into the model and
//!   carries the engine's orders out, faithfully and with retries where upstream retries.
//! - **Delete Node objects on its own.** Removing a Node object of a terminated instance is the
//!   cloud node controller's job (docs/behaviour.md SD-93); the autoscaler's loop only deletes
//!   instances through the cloud provider. The one Node deletion here is the cloud node
//!   controller's (`--cloud-node-controller`, off by default), carried out as ordered, with the
//!   uid and `resourceVersion` the controller checked as preconditions. The other deletions are
//!   of the status ConfigMap (at shutdown) and pods, through evictions that respect
//!   PodDisruptionBudgets.
//! - **Interpret raw objects past the boundary.** Objects are converted once, by
//!   `ferroscale-objects`, when their watch event arrives; an object that does not convert is
//!   left out with a warning, never half-used.

pub mod api_access;
pub mod caches;
pub mod capacity;
pub mod cloud_nodes;
pub mod cluster;
pub mod leader;
pub mod repeated;

pub use api_access::{ApiAccess, ApiAccessError, ApiServer, ContentType, MasterUrl};
pub use caches::{
    CacheConfig, CacheProgress, CapacityWatches, ClusterCaches, MissingPermission, NotSynced,
    SyncProgress, UnschedulableArrivals,
};
pub use cluster::{COMPONENT, KubeCluster, KubeClusterConfig};
pub use leader::{LeaderElectionConfig, LeaderElectionError, LeaderElector};
