//! The Kubernetes side of the engine: what Gather reads from the API server each loop
//! ([`ClusterObjects`]) and the few writes the Act layer makes ([`ClusterApi`]).
//!
//! Like [`crate::cloud`], this is a contract. The live binary implements it over the API server
//! (informer caches for reads, with conflict retries on node updates); the simulator implements it
//! over its simulated cluster; tests implement it with recording fakes. The Decide layer never sees
//! this trait, only the values gathered through it.

use std::sync::Arc;

use async_trait::async_trait;
use ferroscale_model::{
    CapacityBuffer, CapacityBufferStatus, CapacityObjects, DaemonSet, DraObjects, Namespace, Node,
    Pod, PodDisruptionBudget, ProvisioningRequestStatus, ScalableObject, Taint, Timestamp,
    VolumeObjects,
};
use thiserror::Error;

use crate::events::Event;
use crate::scale_up::PriorityConfig;

/// A workload controller that exists in the cluster, as Gather saw it. Drain rules need to know
/// whether a pod's controller still exists and how many replicas it wants (docs/behaviour.md SD-76,
/// SD-106).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadController {
    /// `ReplicationController`, `ReplicaSet`, `Job`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.replicas` (`spec.parallelism` for Jobs); `None` when the kind has no such field.
    pub replicas: Option<i32>,
}

/// What Gather read from the Kubernetes API this loop.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    pub nodes: Vec<Arc<Node>>,
    /// Every pod, bound and pending. Shared: a source hands out the same list (the same `Arc`)
    /// for as long as no pod changed, so a loop that finds it unchanged reads none of it.
    pub pods: Arc<Vec<Arc<Pod>>>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub daemonsets: Vec<DaemonSet>,
    /// Controllers that exist (ReplicationControllers, ReplicaSets, Jobs, StatefulSets,
    /// DaemonSets).
    pub controllers: Vec<WorkloadController>,
    pub namespaces: Vec<Namespace>,
    /// The `priorities` key of the priority expander's ConfigMap, parsed when Gather read a new
    /// version of the ConfigMap (shared, so loops do not parse it again); `None` when it does not
    /// exist.
    pub priority_expander_config: Option<Arc<PriorityConfig>>,
    /// Claims, volumes, storage classes and CSINodes the volume filters read.
    pub volumes: VolumeObjects,
    /// ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates the
    /// DynamicResources filter reads.
    pub dra: DraObjects,
    /// ProvisioningRequests, CapacityBuffers, CapacityQuotas and the PodTemplates they use
    /// (empty when none of those features is enabled).
    pub capacity: CapacityObjects,
    /// The kinds read from a source that may be behind the cluster (a live binary's watch that
    /// fails or re-lists), each with why. Scale-down does not act on such a view
    /// (docs/behaviour.md LOOP-121); empty when every kind is current.
    pub behind: Vec<String>,
    /// The kinds left out because the API server forbids reading them, each as `list/watch
    /// <resource>: <what the engine does without it>` (docs/behaviour.md LOOP-123); empty when
    /// every kind can be read.
    pub missing_permissions: Vec<String>,
}

/// The status ConfigMap as it is written (docs/behaviour.md ST-101): `data.status` already rendered
/// to YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusConfigMap {
    pub namespace: String,
    pub name: String,
    /// Value of the `cluster-autoscaler.kubernetes.io/last-updated` annotation.
    pub last_updated: String,
    /// `data.status`.
    pub status_yaml: String,
    /// When the loop that wrote it started.
    pub written_at: Timestamp,
}

/// Annotation holding the write time of the status ConfigMap.
pub const STATUS_LAST_UPDATED_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/last-updated";

/// An API call failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClusterError {
    /// The object does not exist (any more).
    #[error("{kind} {name} not found")]
    NotFound { kind: &'static str, name: String },
    /// An update kept conflicting with concurrent writers after the implementation's retries.
    #[error("conflict updating {kind} {name}: {message}")]
    Conflict {
        kind: &'static str,
        name: String,
        message: String,
    },
    /// Anything else the API server or the transport reported.
    #[error("kubernetes API error: {0}")]
    Api(String),
}

/// An eviction was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvictionError {
    /// A PodDisruptionBudget does not allow the disruption now (HTTP 429); worth retrying.
    #[error("eviction of pod {pod} refused by a PodDisruptionBudget: {message}")]
    DisruptionBudget { pod: String, message: String },
    /// The pod no longer exists. Callers count this as a successful eviction.
    #[error("pod {pod} not found")]
    NotFound { pod: String },
    #[error("eviction of pod {pod} failed: {message}")]
    Other { pod: String, message: String },
}

/// What the engine reads from and writes to the Kubernetes API.
///
/// Writes are few and targeted: taints (and cordoning) on nodes, evictions, events and the status
/// ConfigMap. The engine never deletes Node objects (docs/behaviour.md SD-93): that is the cloud
/// node controller's job once the instance is gone.
#[async_trait]
pub trait ClusterApi: Send + Sync {
    /// Reads everything one loop needs.
    async fn gather(&self) -> Result<ClusterObjects, ClusterError>;
    /// Every node, as [`ClusterApi::gather`] would return them. The first loop's clean-up of
    /// leftover taints reads only the nodes; an implementation that can list them alone (the
    /// watch caches, the simulator) saves the first loop a second gather of every pod.
    async fn gather_nodes(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        Ok(self.gather().await?.nodes)
    }
    /// The current state of one node; `Ok(None)` when it no longer exists.
    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, ClusterError>;
    /// The pods currently bound to a node (live, not from this loop's gather).
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<Pod>>, ClusterError>;
    /// Adds `taint` (replacing one with the same key) and, with `cordon`, sets
    /// `spec.unschedulable`. Conflicts are retried by the implementation.
    async fn taint_node(&self, node: &str, taint: Taint, cordon: bool) -> Result<(), ClusterError>;
    /// Removes every taint with `taint_key` and, with `uncordon`, clears `spec.unschedulable`.
    async fn untaint_node(
        &self,
        node: &str,
        taint_key: &str,
        uncordon: bool,
    ) -> Result<(), ClusterError>;
    /// Evicts a pod through the Eviction API with this grace period.
    async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: i64,
    ) -> Result<(), EvictionError>;
    /// The pod as it is now; `Ok(None)` once it is gone.
    async fn pod_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, ClusterError>;
    /// Records events (already deduplicated by the engine).
    async fn publish_events(&self, events: &[Event]);
    /// Creates or replaces the status ConfigMap.
    async fn write_status(&self, status: &StatusConfigMap) -> Result<(), ClusterError>;
    /// Deletes the status ConfigMap (at shutdown).
    async fn delete_status(&self, namespace: &str, name: &str) -> Result<(), ClusterError>;
    /// Replaces the status (conditions and class details) of a ProvisioningRequest through its
    /// status subresource.
    async fn update_provisioning_request_status(
        &self,
        namespace: &str,
        name: &str,
        status: &ProvisioningRequestStatus,
    ) -> Result<(), ClusterError>;
    /// Replaces the status of a CapacityBuffer through its status subresource.
    async fn update_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        status: &CapacityBufferStatus,
    ) -> Result<(), ClusterError>;
    /// Creates or updates the PodTemplate the buffer controller keeps for a buffer whose pods
    /// come from a scalable object (owned by the buffer, with the pod shape Gather resolved for
    /// `scalable`). Returns the template's name and generation.
    async fn ensure_buffer_pod_template(
        &self,
        buffer: &CapacityBuffer,
        scalable: &ScalableObject,
    ) -> Result<(String, i64), ClusterError>;
}
