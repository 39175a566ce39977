//! The cloud provider contract: what the engine asks of any cloud (docs/behaviour.md CP-101,
//! CP-102).
//!
//! Methods that talk to the cloud are async. Optional methods have default bodies returning
//! [`CloudError::NotImplemented`]; the engine falls back as upstream does. Gather code calls this
//! trait; the Decide layer never does — it sees the values gathered into a snapshot.

pub mod resize_merge;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_model::{CsiNode, Node, Pod, ResourceSlice, Timestamp};
use thiserror::Error;

/// Errors a provider returns.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CloudError {
    /// The optional method is not offered by this provider ("Not implemented" upstream).
    #[error("Not implemented")]
    NotImplemented,
    #[error("already exists")]
    AlreadyExists,
    #[error("illegal configuration: {0}")]
    IllegalConfiguration(String),
    /// The node group does not exist (any more).
    #[error("node group {0} does not exist")]
    NodeGroupDoesNotExist(String),
    /// The request was invalid for the group's current state (over max, below min, foreign node).
    #[error("{0}")]
    InvalidRequest(String),
    /// The cloud or provider is temporarily unavailable (down, overloaded, unreachable,
    /// rate-limiting): worth retrying later. Over a network the request may still have taken
    /// effect when only its answer was lost, so a caller re-reads the cloud rather than assume
    /// nothing changed.
    #[error("cloud provider temporarily unavailable: {0}")]
    Unavailable(String),
    /// Anything the cloud or the transport reported.
    #[error("cloud provider error: {0}")]
    Provider(String),
}

impl CloudError {
    pub fn is_not_implemented(&self) -> bool {
        matches!(self, CloudError::NotImplemented)
    }
}

/// Lifecycle state of an instance, with the upstream numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceState {
    Running = 1,
    Creating = 2,
    Deleting = 3,
}

/// Upstream error classes: `OutOfResources` (1, stockout or quota) and `Other` (99).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    OutOfResources = 1,
    Other = 99,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::OutOfResources => "OutOfResource",
            ErrorClass::Other => "Other",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceErrorInfo {
    pub class: ErrorClass,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceStatus {
    pub state: InstanceState,
    pub error: Option<InstanceErrorInfo>,
}

/// One machine of a node group. `id` equals the node's `spec.providerID` once it registers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instance {
    pub id: String,
    pub status: Option<InstanceStatus>,
}

impl Instance {
    pub fn running(id: impl Into<String>) -> Instance {
        Instance {
            id: id.into(),
            status: Some(InstanceStatus {
                state: InstanceState::Running,
                error: None,
            }),
        }
    }
}

/// What a new node of a group looks like: the node object and the pods every new node starts with
/// (DaemonSet and static pods).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTemplate {
    pub node: Node,
    pub pods: Vec<Pod>,
    /// The CSINode a new node of the group would report (its per-driver volume limits), when the
    /// provider knows it; `None` means no limits are simulated.
    pub csi_node: Option<CsiNode>,
    /// The node-local ResourceSlices a new node of the group would publish (its DRA devices),
    /// named for `node`; empty when it has none or the provider does not know them.
    pub resource_slices: Vec<ResourceSlice>,
}

/// Per-group overrides of the autoscaling options (`GetOptions`). Fields left `None` keep the
/// global default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupOptions {
    pub scale_down_utilization_threshold: Option<f64>,
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    pub scale_down_unneeded_time: Option<Duration>,
    pub scale_down_unready_time: Option<Duration>,
    pub max_node_provision_time: Option<Duration>,
    pub max_node_startup_time: Option<Duration>,
    pub zero_or_max_node_scaling: Option<bool>,
    pub allow_non_atomic_scale_up_to_max: Option<bool>,
    pub ignore_daemonsets_utilization: Option<bool>,
}

/// The GPU a node carries, as the provider describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    pub label: String,
    pub gpu_type: String,
    pub resource_name: String,
}

/// Cluster-wide resource bounds: `cpu` in cores, `memory` in bytes, anything else a GPU type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceLimits {
    pub min: Vec<(String, i64)>,
    pub max: Vec<(String, i64)>,
}

impl ResourceLimits {
    pub fn min(&self, resource: &str) -> i64 {
        self.min
            .iter()
            .find(|(n, _)| n == resource)
            .map(|(_, v)| *v)
            .unwrap_or(0)
    }

    /// `i64::MAX` when unlimited.
    pub fn max(&self, resource: &str) -> i64 {
        self.max
            .iter()
            .find(|(n, _)| n == resource)
            .map(|(_, v)| *v)
            .unwrap_or(i64::MAX)
    }
}

/// Prices in one currency. Pure computation over gathered data: implementations that need the
/// network fetch their price tables while gathering, not here.
pub trait PricingModel: Send + Sync {
    fn node_price(&self, node: &Node, start: Timestamp, end: Timestamp) -> Result<f64, CloudError>;
    fn pod_price(&self, pod: &Pod, start: Timestamp, end: Timestamp) -> Result<f64, CloudError>;
}

/// A set of identical machines the cloud can grow and shrink.
#[async_trait]
pub trait NodeGroup: Send + Sync + fmt::Debug {
    fn id(&self) -> &str;
    fn min_size(&self) -> usize;
    fn max_size(&self) -> usize;
    /// Human description for logs.
    fn debug(&self) -> String {
        format!("{} ({}:{})", self.id(), self.min_size(), self.max_size())
    }
    /// Whether the group exists in the cloud (false for auto-provisioning proposals).
    fn exist(&self) -> bool {
        true
    }
    fn autoprovisioned(&self) -> bool {
        false
    }

    /// The size the cloud was asked for; may differ from registered nodes for a while.
    async fn target_size(&self) -> Result<usize, CloudError>;
    /// Raise the target by `delta` (> 0). Errors when the result would exceed the max size.
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError>;
    /// All-or-nothing increase (optional; the engine falls back to `increase_size`).
    async fn atomic_increase_size(&self, _delta: usize) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// Delete these nodes and lower the target accordingly. Errors if a node is not in the group.
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError>;
    /// Like `delete_nodes` without min-size checks (optional).
    async fn force_delete_nodes(&self, _nodes: &[Node]) -> Result<(), CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// Lower the target by `-delta` (`delta` < 0) without deleting any existing node: only requests
    /// that have not produced a node yet are cancelled.
    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError>;
    /// Every instance, including those not registered as nodes yet.
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError>;
    /// An empty node of this group (optional; this is how scale-up from zero works).
    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// Per-group option overrides (optional; `Ok(None)` also means "use the defaults").
    async fn get_options(&self) -> Result<Option<GroupOptions>, CloudError> {
        Err(CloudError::NotImplemented)
    }
}

/// A cloud the autoscaler manages node groups in.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    fn name(&self) -> &str;
    /// Label key marking GPU nodes.
    fn gpu_label(&self) -> &str;
    fn available_gpu_types(&self) -> Vec<String> {
        Vec::new()
    }
    /// The GPU of a node: by default, a node with the GPU label and `nvidia.com/gpu` allocatable.
    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        let gpu_type = node.labels.get(self.gpu_label())?;
        Some(GpuConfig {
            label: self.gpu_label().to_string(),
            gpu_type: gpu_type.clone(),
            resource_name: ferroscale_model::resources::NVIDIA_GPU.to_string(),
        })
    }
    /// Provider-specific resource limits replacing the ones built from flags (optional).
    fn resource_limits(&self) -> Result<Option<ResourceLimits>, CloudError> {
        Ok(None)
    }
    /// Prices, for the `price` expander (optional).
    fn pricing(&self) -> Result<Arc<dyn PricingModel>, CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// What running `node` for the hour from `start` costs: the `price` expander's price of a
    /// group's template node, gathered once per loop. The default asks [`CloudProvider::pricing`];
    /// a provider whose prices come over the network overrides this instead.
    async fn node_price_per_hour(&self, node: &Node, start: Timestamp) -> Result<f64, CloudError> {
        self.pricing()?
            .node_price(node, start, start + Duration::from_secs(3600))
    }

    /// Every group the autoscaler may manage. May change after `refresh`.
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError>;
    /// The group a node belongs to; `Ok(None)` when the node must not be managed.
    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError>;
    /// Whether the node's instance still exists (optional).
    async fn has_instance(&self, _node: &Node) -> Result<bool, CloudError> {
        Err(CloudError::NotImplemented)
    }
    /// Of `nodes` (each in one of the provider's groups), the names the provider wants kept out of
    /// scale-down this loop: upstream's provider-registered scale-down candidate filter (Cluster
    /// API keeps the nodes of a MachineDeployment that is rolling out). The provider logs why.
    /// Gathered once per loop; the default keeps every node a candidate.
    async fn scale_down_vetoes(&self, _nodes: &[Arc<Node>]) -> HashSet<String> {
        HashSet::new()
    }
    /// Update cached state; called at the start of every loop before any other call.
    async fn refresh(&self) -> Result<(), CloudError>;
    /// Release resources at shutdown.
    async fn cleanup(&self) -> Result<(), CloudError> {
        Ok(())
    }
}
