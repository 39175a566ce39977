//! Scale-up: which pending pods need new nodes, which node group gets them and how many (Decide).
//!
//! [`plan_scale_up`] is pure: it reads the snapshot, the pending pods, the node groups as Gather saw
//! them, the backoff state and the options, and returns a [`ScaleUpPlan`]. Asking the cloud for
//! the nodes is Act (`crate::act::scale_up`), which this module never imports.
//!
//! The stages follow the scale-up section of docs/behaviour.md: intake (`intake`), equivalence
//! groups (`equivalence`), templates (`template`), the binpacking estimator (`estimator`),
//! expanders (`expander`), resource limits (`limits`), balancing similar groups (`balancing`) and
//! min-size enforcement (`min_size`), CapacityQuotas (`quota`); `injection` adds the fake pods
//! of proactive scale-up.

mod balancing;
mod equivalence;
mod estimator;
mod expander;
mod external;
mod injection;
mod intake;
mod limits;
mod min_size;
mod plan;
mod priority;
mod quota;
mod template;

use std::sync::Arc;

use ferroscale_model::capacity::CapacityQuota;
use ferroscale_model::{Pod, Timestamp};
use ferroscale_scheduling::Snapshot;

use crate::backoff::NodeGroupBackoff;
use crate::cloud::{GroupOptions, NodeTemplate, ResourceLimits};
use crate::events::Event;
use crate::options::AutoscalingOptions;
use crate::parallel::Workers;

pub use balancing::templates_similar;
pub use equivalence::EquivalenceMemo;
pub use external::{
    ExpanderQuery, ExpanderQueryOption, ExternalAnswer, ExternalExpander, ExternalExpanderError,
    ExternalExpanderStep,
};
pub use injection::{
    BoundPodsOfControllers, FAKE_POD_ANNOTATION, FAKE_POD_ANNOTATION_VALUE, FakePods,
    INJECTION_BACKOFF, is_fake_pod, proactive_fake_pods,
};
pub use min_size::plan_min_size_enforcement;
pub use plan::plan_scale_up;
pub use priority::{PriorityConfig, PriorityConfigError};
pub use quota::{CAPACITY_QUOTA_LIMITED, VALID_CONDITION, quota_ignored_reason};
pub use template::{
    TEMPLATE_NODE_LABEL, UPCOMING_NODE_ANNOTATION, inject_upcoming_nodes, is_upcoming_node,
    sanitize_template,
};

/// Skip reasons reported per pod and group (upstream wording).
pub mod skip_reasons {
    pub const MAX_SIZE_REACHED: &str = "max node group size reached";
    pub const BACKOFF: &str = "in backoff after failed scale-up";
    pub const NOT_READY: &str = "not ready for scale-up";
    pub const ATOMIC_EXCEEDS_MAX_NODES_TOTAL: &str =
        "atomic scale-up exceeds cluster node count limit";
    pub const MAX_TOTAL_NODES_REACHED: &str = "max total nodes in cluster reached";
    pub const FILTERED_OUT: &str = "expansion options filtered out and no longer considered";
}

/// What Gather read about one node group.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroupView {
    pub id: String,
    pub min_size: usize,
    pub max_size: usize,
    pub target_size: usize,
    /// The group's template, already chosen by the caller (docs/behaviour.md SU-102: a good real
    /// node, the cache, or `TemplateNodeInfo()`), sanitised or not (the plan sanitises it again).
    /// `None` means "not ready for scale-up".
    pub template: Option<NodeTemplate>,
    /// False for auto-provisioning proposals: they skip the health and backoff checks.
    pub exists: bool,
    /// Group health (docs/behaviour.md CS-106); unhealthy existing groups are "not ready for
    /// scale-up".
    pub healthy: bool,
    pub options: GroupOptions,
    pub price_per_hour: Option<f64>,
}

impl NodeGroupView {
    /// An existing, healthy group with default options and no price.
    pub fn new(
        id: impl Into<String>,
        min_size: usize,
        max_size: usize,
        target_size: usize,
        template: Option<NodeTemplate>,
    ) -> NodeGroupView {
        NodeGroupView {
            id: id.into(),
            min_size,
            max_size,
            target_size,
            template,
            exists: true,
            healthy: true,
            options: GroupOptions::default(),
            price_per_hour: None,
        }
    }

    pub fn zero_or_max(&self) -> bool {
        self.options.zero_or_max_node_scaling == Some(true)
    }
}

/// Facts from the cloud provider (and the other sources of resource limits) that the plan needs.
/// `Default`: no GPU label, limits from flags, no CapacityQuota.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProviderFacts<'a> {
    /// The provider's GPU label key (`CloudProvider::gpu_label`); empty when the provider has none.
    pub gpu_label: &'a str,
    /// Provider limits replacing `--cores-total`/`--memory-total`/`--gpu-total`
    /// (`CloudProvider::resource_limits`).
    pub resource_limits: Option<&'a ResourceLimits>,
    /// The CapacityQuotas Gather read; enforced only with `--capacity-quotas-enabled`
    /// (docs/capacity-quotas.md).
    pub capacity_quotas: &'a [Arc<CapacityQuota>],
}

/// Everything [`plan_scale_up`] reads.
///
/// The snapshot holds the real nodes with their bound pods and the upcoming placeholders
/// ([`inject_upcoming_nodes`]). On return it is unchanged **except** that pods found schedulable on
/// existing or upcoming nodes (filter-out-schedulable, docs/behaviour.md SU-02) and nominated pods
/// (placed on their nominated node) stay placed, as upstream leaves them for the rest of the loop.
/// Every what-if placement of the estimator is reverted.
pub struct ScaleUpInput<'a> {
    pub now: Timestamp,
    pub snapshot: &'a mut Snapshot,
    /// Every pod not bound to a node; the plan does the intake filtering itself.
    pub pending_pods: &'a [Arc<Pod>],
    /// Recreatable pods of nodes being drained (docs/behaviour.md SU-15), planned for as if
    /// pending. Usually empty.
    pub draining_pods: &'a [Arc<Pod>],
    pub node_groups: &'a [NodeGroupView],
    pub backoff: &'a NodeGroupBackoff,
    pub options: &'a AutoscalingOptions,
    /// The priority expander's ConfigMap (its `priorities` key, parsed); `None` when the ConfigMap
    /// is missing.
    pub priority_config: Option<&'a PriorityConfig>,
    pub provider: ProviderFacts<'a>,
    /// Seeds every random choice (random expander, final tie break).
    pub seed: u64,
    /// What `grpc` in the expander chain does (docs/grpc-expander.md).
    pub external_expander: ExternalExpanderStep<'a>,
    /// Plan for every pending pod or for none (best-effort-atomic ProvisioningRequests): an
    /// option that leaves a pod out, or a scale-up capped below the estimate, is no plan.
    pub all_or_nothing: bool,
    /// The threads node groups' options are estimated on (`--predicate-parallelism`); the plan
    /// is the same for every thread count.
    pub workers: &'a Workers,
    /// The main loop's equivalence groups, kept across loops; `None` groups afresh (a plan for
    /// other pods than the loop's pending ones, such as a ProvisioningRequest's).
    pub equivalence: Option<&'a mut EquivalenceMemo>,
}

/// The result of a scale-up decision (docs/behaviour.md SU-106).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleUpStatus {
    /// Increases are planned and should be executed.
    Successful,
    /// The plan could not be made (for example the node cap leaves no room); transient.
    Error(String),
    /// Pods need room but no node group can provide it.
    NoOptionsAvailable,
    /// Nothing to do: no pod needs a new node.
    NotNeeded,
    /// Scale-up was not attempted.
    NotTried,
    /// Waiting for more pods: every pending pod is younger than the batching window.
    InCooldown,
    /// `--max-nodes-total` ready nodes already exist.
    LimitedByMaxNodesTotal,
}

/// One resize of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupIncrease {
    pub group_id: String,
    pub current_target: usize,
    pub new_target: usize,
    pub max_size: usize,
    /// All-or-nothing resize (zero-or-max groups): `AtomicIncreaseSize` is tried first.
    pub atomic: bool,
}

impl GroupIncrease {
    pub fn delta(&self) -> usize {
        self.new_target.saturating_sub(self.current_target)
    }
}

/// Why a pod was not helped, per node group: the filter that rejected it on the group's template
/// (`Unfit` wording) or the reason the group was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVerdict {
    /// `namespace/name`.
    pub pod: String,
    /// `(group id, reason)`.
    pub per_group: Vec<(String, String)>,
}

/// The option the expanders chose, for explanations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpansionSummary {
    pub group_id: String,
    /// The estimator's node count, before capping and balancing.
    pub estimated_nodes: usize,
    /// Pods the option places.
    pub pod_count: usize,
    /// Groups the scale-up was balanced with (empty without balancing).
    pub similar_groups: Vec<String>,
    /// Options that reached the expanders.
    pub options_considered: usize,
}

/// What [`plan_scale_up`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleUpPlan {
    pub status: ScaleUpStatus,
    pub increases: Vec<GroupIncrease>,
    /// Pods the chosen option places (`namespace/name`): they get `TriggeredScaleUp` on success.
    pub triggering_pods: Vec<String>,
    pub pods_not_helped: Vec<PodVerdict>,
    /// Pending pods that fit existing or upcoming nodes (filter-out-schedulable).
    pub pods_schedulable_on_existing: Vec<String>,
    /// Scale-down must not delete nodes this loop (every pending pod was too young to act on).
    pub skip_scale_down_this_loop: bool,
    pub events: Vec<Event>,
    pub chosen: Option<ExpansionSummary>,
    /// Values of `skipped_scale_events_count{direction="up",reason=...}` to increment, one entry
    /// per skipped group and resource (`CpuResourceLimit`, `MemoryResourceLimit`, ...).
    pub skipped_scale_events: Vec<String>,
    /// Set only by a plan made with [`ExternalExpanderStep::Ask`] whose chain reached `grpc`: the
    /// options to ask the external expander about. Such a plan is not to be executed.
    pub external_query: Option<ExpanderQuery>,
    /// Controllers among the pending pods with more pod shapes than the equivalence groups keep
    /// apart (`overflowing_controllers_count`, docs/behaviour.md OBS-126).
    pub overflowing_controllers: usize,
    /// One entry per node group estimated, in group order (`binpacking_heterogeneity`,
    /// docs/behaviour.md OBS-127).
    pub binpacking_estimates: Vec<BinpackingEstimate>,
}

/// What one node group's binpacking estimate worked on: how varied the pods were, and on what
/// kind of node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinpackingEstimate {
    pub group_id: String,
    /// The template's `node.kubernetes.io/instance-type` label; empty without one.
    pub instance_type: String,
    /// The template node's CPU capacity, in millicores.
    pub cpu_capacity_milli: i64,
    /// Distinct namespaces among the equivalence groups estimated.
    pub namespaces: usize,
    /// Equivalence groups estimated.
    pub equivalence_groups: usize,
}

impl ScaleUpPlan {
    /// A plan with this status and nothing else.
    pub fn empty(status: ScaleUpStatus) -> ScaleUpPlan {
        ScaleUpPlan {
            status,
            increases: Vec::new(),
            triggering_pods: Vec::new(),
            pods_not_helped: Vec::new(),
            pods_schedulable_on_existing: Vec::new(),
            skip_scale_down_this_loop: false,
            events: Vec::new(),
            chosen: None,
            skipped_scale_events: Vec::new(),
            external_query: None,
            overflowing_controllers: 0,
            binpacking_estimates: Vec::new(),
        }
    }
}
