//! Scale-down (Decide): which nodes are unneeded, which of them are deleted this loop, which pods
//! each removal must evict, and which soft taints to add or remove (docs/behaviour.md, Scale-down).
//!
//! [`plan_scale_down`] is a pure function: the gathered snapshot, the node groups, PDBs, the
//! controllers that exist, the deletions already running and the remembered [`ScaleDownState`] go
//! in; a [`ScaleDownPlan`] with the next state comes out. It never reads the clock (`now` is an
//! input) and leaves the snapshot as it found it.
//!
//! The stages, with their statements in docs/behaviour.md: utilization (`utilization`,
//! SD-50–SD-54), eligibility and candidates (`eligibility`, SD-103, SD-55–SD-63), drainability
//! rules (`drainability`, SD-67–SD-80), the removal simulation on a forked snapshot
//! (`simulation`, SD-104), choosing nodes to delete and parallelism budgets (`choose`, SD-108,
//! SD-82, SD-83), the evictions of each removal (`evictions`, SD-84, SD-86, SD-87) and soft taints
//! (`soft_taints`, SD-90). `plan` runs them in that order and does the unneeded-node tracking
//! (SD-107) and the cooldown gate (SD-58, SD-101).

mod choose;
mod drainability;
pub(crate) mod eligibility;
mod evictions;
mod measure_memo;
mod plan;
mod simulation;
mod soft_taints;
mod state;
mod trackers;
mod utilization;

use std::collections::HashMap;
use std::fmt;

pub use measure_memo::MeasureMemo;
use std::sync::Arc;

use ferroscale_model::{CompactString, Node, Pod, PodDisruptionBudget, Timestamp};
use ferroscale_scheduling::Snapshot;

use crate::events::Event;
use crate::kubernetes::WorkloadController;
use crate::options::AutoscalingOptions;
use crate::parallel::Workers;
use crate::scale_up::{NodeGroupView, ProviderFacts};

pub use drainability::{RecheckBlock, first_blocking_pod};
pub use plan::plan_scale_down;
pub use state::ScaleDownState;
pub use trackers::{RemovalLatency, RemovalLatencyTracker, SkipEvalTracker};
pub use utilization::{Utilization, UtilizationResource};

/// Node annotation that keeps a node forever (3.3 check 2, 3.6 check 1).
pub const SCALE_DOWN_DISABLED_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Pod annotation that opts a DaemonSet pod in (`"true"`) or out (`"false"`) of eviction
/// (docs/behaviour.md SD-87).
pub const ENABLE_DS_EVICTION_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/enable-ds-eviction";
/// How long a `ToBeDeletedByClusterAutoscaler` taint marks a node as being deleted
/// (docs/behaviour.md SD-111).
pub const BEING_DELETED_TAINT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

/// Everything [`plan_scale_down`] reads.
pub struct ScaleDownInput<'a> {
    /// The loop time; every age in the plan is measured against it.
    pub now: Timestamp,
    /// Registered nodes with their bound pods (expendable pods and upcoming placeholders excluded).
    /// Every what-if change is reverted before the plan returns.
    pub snapshot: &'a mut Snapshot,
    /// The node groups as Gather saw them (target, min, per-group options).
    pub node_groups: &'a [NodeGroupView],
    /// The index into `node_groups` of the group a node of the snapshot belongs to; `None` for nodes the
    /// autoscaler does not manage.
    pub node_group_of: &'a dyn Fn(&Node) -> Option<usize>,
    pub pdbs: &'a [PodDisruptionBudget],
    pub controllers: &'a ControllerIndex,
    pub deletions_in_progress: &'a DeletionsInProgress,
    pub state: &'a ScaleDownState,
    pub options: &'a AutoscalingOptions,
    pub provider: &'a ProviderFacts<'a>,
    /// Set when the scale-up found only "new" pods (docs/behaviour.md SU-09): track unneeded nodes,
    /// delete none.
    pub scale_down_disabled_this_loop: bool,
    /// The threads per-node checks run on (`--predicate-parallelism`); the plan is the same for
    /// every thread count.
    pub workers: &'a Workers,
    /// The main loop's node measurements, kept across loops; `None` measures every node.
    pub measure_memo: Option<&'a mut MeasureMemo>,
}

/// Which workload controllers exist and their replica counts, for drainability rule 3 (a pod whose
/// controller is gone blocks its node) and for re-placing recently evicted pods (docs/behaviour.md
/// SD-76, SD-106).
///
/// Keyed by controller kind (`ReplicaSet`, `ReplicationController`, `Job`, `StatefulSet`,
/// `DaemonSet`), namespace and name, as a pod's controller owner reference names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerIndex {
    controllers: HashMap<ControllerKey, ControllerReplicas>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ControllerKey {
    kind: String,
    namespace: String,
    name: String,
}

/// Desired (`spec.replicas`) and current (`status.replicas`) replica counts of a controller. Kinds
/// without replicas (DaemonSet, Job) record whatever is meaningful or zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControllerReplicas {
    pub desired: i32,
    pub current: i32,
}

impl ControllerIndex {
    pub fn new() -> ControllerIndex {
        ControllerIndex::default()
    }

    /// The owners that exist, with their replicas, for drainability rule 3.
    pub fn of(controllers: &[WorkloadController]) -> ControllerIndex {
        let mut index = ControllerIndex::new();
        for c in controllers {
            let replicas = c.replicas.unwrap_or(0);
            index.insert(
                c.kind.clone(),
                c.namespace.clone(),
                c.name.clone(),
                ControllerReplicas {
                    desired: replicas,
                    current: replicas,
                },
            );
        }
        index
    }

    /// Records a controller that exists.
    pub fn insert(
        &mut self,
        kind: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
        replicas: ControllerReplicas,
    ) {
        self.controllers.insert(
            ControllerKey {
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
            },
            replicas,
        );
    }

    /// The controller's replicas, `None` when no such controller exists.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<ControllerReplicas> {
        self.controllers
            .get(&ControllerKey {
                kind: kind.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
            .copied()
    }

    pub fn contains(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.get(kind, namespace, name).is_some()
    }

    pub fn len(&self) -> usize {
        self.controllers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.controllers.is_empty()
    }

    /// For callers that have pods but no controller objects (the simulator, whose workloads are
    /// implicit): records every controller the pods name, with as many desired and current
    /// replicas as there are pods naming it. Controllers already recorded are left as they are.
    pub fn assume_owners_of<'p>(&mut self, pods: impl IntoIterator<Item = &'p Pod>) {
        let mut counts: HashMap<ControllerKey, i32> = HashMap::new();
        for pod in pods {
            if let Some(owner) = pod.controller() {
                *counts
                    .entry(ControllerKey {
                        kind: owner.kind.clone(),
                        namespace: pod.namespace.to_string(),
                        name: owner.name.clone(),
                    })
                    .or_default() += 1;
            }
        }
        for (key, count) in counts {
            self.controllers.entry(key).or_insert(ControllerReplicas {
                desired: count,
                current: count,
            });
        }
    }
}

/// One node deletion that the actuation layer has started and not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionInProgress {
    pub node: String,
    pub group_id: String,
    /// True for a drain (the node had pods to move), false for an empty-node deletion.
    pub drain: bool,
}

/// The deletions in progress (docs/behaviour.md SD-82 and SD-83 budgets, SD-108 min-size
/// accounting, SD-103 candidates) and the pods they recently evicted that their controllers have
/// not re-created yet (docs/behaviour.md SD-106).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeletionsInProgress {
    pub nodes: Vec<DeletionInProgress>,
    /// Pods evicted by ongoing deletions, as they were before eviction.
    pub recently_evicted: Vec<Arc<Pod>>,
}

impl DeletionsInProgress {
    pub fn contains(&self, node: &str) -> bool {
        self.nodes.iter().any(|d| d.node == node)
    }

    pub fn empty_count(&self) -> usize {
        self.nodes.iter().filter(|d| !d.drain).count()
    }

    pub fn drain_count(&self) -> usize {
        self.nodes.iter().filter(|d| d.drain).count()
    }

    pub fn in_group(&self, group_id: &str) -> usize {
        self.nodes.iter().filter(|d| d.group_id == group_id).count()
    }
}

/// The outcome of a scale-down decision (docs/behaviour.md SD-112).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleDownStatus {
    /// Nodes were chosen for deletion; the actuation layer starts them.
    NodeDeleteStarted,
    /// There are unneeded nodes but none may be deleted yet (not unneeded long enough, min size,
    /// limits, budgets).
    NoNodeDeleted,
    /// Scale-down is disabled (`--scale-down-enabled=false`).
    NotTried,
    /// Deletion is suspended by a cooldown (docs/behaviour.md SD-58, SD-101); unneeded nodes are
    /// still tracked.
    InCooldown,
    /// Nothing new may start: ongoing deletions use the whole parallelism budget.
    InProgress,
    /// No node is unneeded.
    NoCandidates,
    Error(String),
}

impl ScaleDownStatus {
    /// The upstream result name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ScaleDownStatus::NodeDeleteStarted => "NodeDeleteStarted",
            ScaleDownStatus::NoNodeDeleted => "NoNodeDeleted",
            ScaleDownStatus::NotTried => "NotTried",
            ScaleDownStatus::InCooldown => "InCooldown",
            ScaleDownStatus::InProgress => "InProgress",
            ScaleDownStatus::NoCandidates => "NoCandidates",
            ScaleDownStatus::Error(_) => "Error",
        }
    }
}

impl fmt::Display for ScaleDownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScaleDownStatus::Error(message) => write!(f, "Error: {message}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why a node is not removed, with the upstream reason names (`unremovable_nodes_count{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnremovableReason {
    ScaleDownDisabledAnnotation,
    ScaleDownUnreadyDisabled,
    NotAutoscaled,
    NotUnneededLongEnough,
    NotUnreadyLongEnough,
    NodeGroupMinSizeReached,
    AtomicScaleDownFailed,
    MinimalResourceLimitExceeded,
    CurrentlyBeingDeleted,
    NotUnderutilized,
    RecentlyUnremovable,
    NoPlaceToMovePods,
    BlockedByPod,
    BlockedByOnCompletionPod,
    UnexpectedError,
}

impl UnremovableReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            UnremovableReason::ScaleDownDisabledAnnotation => "ScaleDownDisabledAnnotation",
            UnremovableReason::ScaleDownUnreadyDisabled => "ScaleDownUnreadyDisabled",
            UnremovableReason::NotAutoscaled => "NotAutoscaled",
            UnremovableReason::NotUnneededLongEnough => "NotUnneededLongEnough",
            UnremovableReason::NotUnreadyLongEnough => "NotUnreadyLongEnough",
            UnremovableReason::NodeGroupMinSizeReached => "NodeGroupMinSizeReached",
            UnremovableReason::AtomicScaleDownFailed => "AtomicScaleDownFailed",
            UnremovableReason::MinimalResourceLimitExceeded => "MinimalResourceLimitExceeded",
            UnremovableReason::CurrentlyBeingDeleted => "CurrentlyBeingDeleted",
            UnremovableReason::NotUnderutilized => "NotUnderutilized",
            UnremovableReason::RecentlyUnremovable => "RecentlyUnremovable",
            UnremovableReason::NoPlaceToMovePods => "NoPlaceToMovePods",
            UnremovableReason::BlockedByPod => "BlockedByPod",
            UnremovableReason::BlockedByOnCompletionPod => "BlockedByOnCompletionPod",
            UnremovableReason::UnexpectedError => "UnexpectedError",
        }
    }
}

impl fmt::Display for UnremovableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The drainability rule that blocks a pod (upstream `BlockingPodReason` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DrainBlock {
    ControllerNotFound,
    MinReplicasReached,
    NotReplicated,
    LocalStorageRequested,
    NotSafeToEvictAnnotation,
    UnmovableKubeSystemPod,
    NotEnoughPdb,
    UnexpectedError,
}

impl DrainBlock {
    pub fn as_str(&self) -> &'static str {
        match self {
            DrainBlock::ControllerNotFound => "ControllerNotFound",
            DrainBlock::MinReplicasReached => "MinReplicasReached",
            DrainBlock::NotReplicated => "NotReplicated",
            DrainBlock::LocalStorageRequested => "LocalStorageRequested",
            DrainBlock::NotSafeToEvictAnnotation => "NotSafeToEvictAnnotation",
            DrainBlock::UnmovableKubeSystemPod => "UnmovableKubeSystemPod",
            DrainBlock::NotEnoughPdb => "NotEnoughPdb",
            DrainBlock::UnexpectedError => "UnexpectedError",
        }
    }
}

impl fmt::Display for DrainBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pod that keeps a node and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingPod {
    /// `namespace/name`.
    pub pod: String,
    pub rule: DrainBlock,
}

/// A node that passed every check of this loop.
#[derive(Debug, Clone, PartialEq)]
pub struct UnneededNode {
    pub node: String,
    pub group_id: String,
    /// When the node became unneeded (kept across loops while it stays unneeded).
    pub since: Timestamp,
    pub utilization: Utilization,
    /// No pod needs moving.
    pub empty: bool,
    pub ready: bool,
    /// Its pods together exceed some PDB's remaining disruptions: deleted after the others.
    pub risky: bool,
}

/// A node that is not unneeded this loop, or that is unneeded but held back from deletion.
#[derive(Debug, Clone, PartialEq)]
pub struct UnremovableNode {
    /// Inline up to 24 bytes, as the group id: a loop lists every node that stays, 65,000 at
    /// the largest size, and a record then costs no allocation.
    pub node: CompactString,
    /// `None` for nodes outside autoscaled groups.
    pub group_id: Option<CompactString>,
    pub reason: UnremovableReason,
    /// Set for `BlockedByPod`: the first blocking pod and its rule.
    pub blocking_pod: Option<BlockingPod>,
    /// For `BlockedByOnCompletionPod` and `NoPlaceToMovePods`: the pod concerned (`namespace/name`).
    pub pod: Option<String>,
    pub utilization: Option<Utilization>,
}

/// A pod the removal moves, and the node the simulation placed it on.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedMove {
    pub pod: Arc<Pod>,
    /// The destination node's name, kept inline up to 24 bytes: a loop that drains thousands of
    /// nodes plans hundreds of thousands of moves.
    pub destination: CompactString,
}

/// One node to delete and what its deletion evicts.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRemoval {
    pub node: String,
    pub group_id: String,
    pub utilization: Utilization,
    pub ready: bool,
    /// Pods that must be evicted and gone before the node is deleted (every pod except mirror and
    /// DaemonSet pods). Empty for empty-node deletions.
    pub pods_to_evict: Vec<Arc<Pod>>,
    /// Where the simulation placed each pod that needs a new home.
    pub moves: Vec<PlannedMove>,
    /// DaemonSet pods evicted best-effort (flags and the `enable-ds-eviction` annotation decide).
    pub daemonset_pods_to_evict: Vec<Arc<Pod>>,
}

/// What [`plan_scale_down`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleDownPlan {
    pub status: ScaleDownStatus,
    /// Deletion was suspended by a cooldown this loop (`scale_down_in_cooldown`).
    pub in_cooldown: bool,
    /// Every node that passed all checks this loop, in simulation order.
    pub unneeded: Vec<UnneededNode>,
    /// Nodes that are not unneeded, with the first reason found.
    pub unremovable: Vec<UnremovableNode>,
    /// Unneeded nodes not chosen for deletion this loop, with the reason (docs/behaviour.md
    /// SD-108).
    pub held_back: Vec<UnremovableNode>,
    pub empty_to_delete: Vec<NodeRemoval>,
    pub drain_to_delete: Vec<NodeRemoval>,
    /// Nodes to mark `DeletionCandidateOfClusterAutoscaler:PreferNoSchedule` (docs/behaviour.md
    /// SD-90).
    pub soft_taints_to_add: Vec<String>,
    /// Nodes whose `DeletionCandidateOfClusterAutoscaler` taint is to be removed (docs/behaviour.md
    /// SD-90).
    pub soft_taints_to_remove: Vec<String>,
    pub events: Vec<Event>,
    /// Candidates the search left unsimulated this loop (docs/behaviour.md SD-105, SD-116).
    pub skipped: Vec<String>,
    /// With `--max-node-skip-eval-time-tracker-enabled`: the longest time a skipped candidate has
    /// gone unsimulated (docs/behaviour.md OBS-120).
    pub max_node_skip_eval: Option<std::time::Duration>,
    /// With `--node-removal-latency-tracking-enabled`: unneeded nodes whose tracking ended this
    /// loop (docs/behaviour.md OBS-121).
    pub removal_latencies: Vec<RemovalLatency>,
    /// The state the caller keeps for the next loop.
    pub next_state: ScaleDownState,
}

impl ScaleDownPlan {
    /// A plan with this status that changes nothing and carries `state` forward.
    pub fn empty(status: ScaleDownStatus, state: ScaleDownState) -> ScaleDownPlan {
        ScaleDownPlan {
            status,
            in_cooldown: false,
            unneeded: Vec::new(),
            unremovable: Vec::new(),
            held_back: Vec::new(),
            empty_to_delete: Vec::new(),
            drain_to_delete: Vec::new(),
            soft_taints_to_add: Vec::new(),
            soft_taints_to_remove: Vec::new(),
            events: Vec::new(),
            skipped: Vec::new(),
            max_node_skip_eval: None,
            removal_latencies: Vec::new(),
            next_state: state,
        }
    }

    /// Every node the plan deletes, empty ones first.
    pub fn nodes_to_delete(&self) -> impl Iterator<Item = &NodeRemoval> {
        self.empty_to_delete.iter().chain(&self.drain_to_delete)
    }
}
