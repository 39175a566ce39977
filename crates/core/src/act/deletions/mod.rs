//! Scale-down actuation (docs/behaviour.md SD-81–SD-93, SD-109–SD-114): taking the nodes a
//! scale-down plan chose through taint, drain and cloud deletion — or rolling them back.
//!
//! Every deletion is a small state machine advanced by the loop's `now`; nothing here sleeps or
//! reads the clock. [`DeletionTracker::start`] taints synchronously (a batch either is tainted
//! completely or not at all); [`DeletionTracker::advance`] moves each deletion as far as `now`
//! allows: post-taint delay and re-check, evictions with retries, waiting for evicted pods, the
//! delay-deletion annotations, and finally `NodeGroup::delete_nodes`. Any failure untaints (and
//! uncordons) the node. Node API objects are never deleted: that is the cloud node controller's
//! job once the instance is gone.

mod cleanup;
mod recheck;
mod requests;
mod soft_taints;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{Node, Pod, Taint, TaintEffect, Timestamp};

use crate::cloud::{CloudError, NodeGroup};
use crate::events::{Event, EventObject, reasons};
use crate::kubernetes::{ClusterApi, ClusterError, EvictionError};
use crate::options::AutoscalingOptions;
use crate::scale_down::{DrainBlock, RecheckBlock};
use crate::stopwatch::{NoStopwatch, Stopwatch};

pub use cleanup::{LeftoverTaints, clean_up_leftover_taints, remove_leftover_taints};
pub use recheck::LiveRecheck;
pub use requests::{
    DeletionTarget, StartedDeletions, deletion_requests, planned_starts, start_deletions,
};
pub use soft_taints::{SoftTaintUpdate, apply_plan_soft_taints, apply_soft_taints};

/// Annotation prefix that makes deletion wait until every such annotation is gone.
pub const DELAY_DELETION_ANNOTATION_PREFIX: &str =
    "delay-deletion.cluster-autoscaler.kubernetes.io/";
/// Per-pod opt-in (`"true"`) or opt-out (`"false"`) of DaemonSet pod eviction.
pub const ENABLE_DS_EVICTION_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/enable-ds-eviction";
/// Grace period of a pod that does not set `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;
/// Failed evictions are retried this often until `--max-pod-eviction-time`.
pub const EVICTION_RETRY_INTERVAL: Duration = Duration::from_secs(10);
/// Extra time, beyond the grace period, evicted pods get to disappear.
pub const POD_TERMINATION_MARGIN: Duration = Duration::from_secs(30);
/// How often evicted pods and delay-deletion annotations are polled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Why a node is being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemovalKind {
    /// No pod needs to move.
    Empty,
    /// Pods are evicted first.
    Drain,
}

impl fmt::Display for RemovalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RemovalKind::Empty => "empty",
            RemovalKind::Drain => "drain",
        })
    }
}

/// One node the scale-down plan chose, as actuation needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDeletion {
    pub node: Arc<Node>,
    pub group_id: String,
    pub kind: RemovalKind,
    /// The group is scaled zero-or-max: its nodes are deleted together or not at all.
    pub zero_or_max: bool,
    /// The node was not Ready (`scaled_down_nodes_total{reason="unready"}`).
    pub unready: bool,
    /// For the `ScaleDown` event's message.
    pub utilization: f64,
    /// `namespace/name` of the pods the plan moves elsewhere, for the event's message.
    pub pods_to_reschedule: Vec<String>,
}

/// Decides, after the post-taint delay, whether a node may still go given the pods on it now
/// (docs/behaviour.md SD-110). The scale-down engine provides the drainability rules.
pub trait RemovalRecheck: Sync {
    /// `Err` when a live pod now blocks the removal (for an empty node: when it is no longer
    /// empty).
    fn recheck(
        &self,
        node: &Node,
        kind: RemovalKind,
        live_pods: &[Arc<Pod>],
    ) -> Result<(), RecheckRefusal>;
}

/// Why the re-check after the post-taint delay keeps a node. `Display` is the text of the
/// `ScaleDownFailed` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecheckRefusal {
    /// A node removed as empty received a pod that has to move.
    #[error("node is not empty: pod {pod} arrived")]
    NotEmpty { pod: String },
    /// A pod (`namespace/name`) now blocks the removal under a drainability rule.
    #[error("pod {pod} now blocks the removal ({})", rule.as_str())]
    Blocked { pod: String, rule: DrainBlock },
    /// A pod annotated `safe-to-evict: on-completion` is still running.
    #[error("pod {pod} is annotated safe-to-evict: on-completion and still running")]
    WaitingForCompletion { pod: String },
}

impl From<RecheckBlock> for RecheckRefusal {
    fn from(block: RecheckBlock) -> RecheckRefusal {
        match block {
            RecheckBlock::Blocked { pod, rule } => RecheckRefusal::Blocked { pod, rule },
            RecheckBlock::WaitingForCompletion { pod } => {
                RecheckRefusal::WaitingForCompletion { pod }
            }
        }
    }
}

/// Why a deletion was abandoned (and the node untainted). `Display` is the text of the
/// `ScaleDownFailed` event and of the logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeletionFailure {
    /// Tainting the node failed, so nothing of its batch was started.
    #[error("failed to mark the node as toBeDeleted/unschedulable: {0}")]
    Taint(ClusterError),
    /// Another node of the same `start` call could not be tainted.
    #[error("another node of the batch could not be tainted")]
    BatchNotTainted,
    /// Listing the node's pods for the re-check failed.
    #[error("failed to list the pods of the node: {0}")]
    ListPods(ClusterError),
    /// The re-check found a reason to keep the node.
    #[error(transparent)]
    Recheck(#[from] RecheckRefusal),
    /// Some pods (`namespace/name`) could not be evicted before `--max-pod-eviction-time`.
    #[error("failed to evict pods {} within {timeout_secs}s: {last_error}", pods.join(","))]
    EvictionTimedOut {
        pods: Vec<String>,
        timeout_secs: u64,
        last_error: EvictionError,
    },
    /// Reading an evicted pod's state failed.
    #[error("failed to read pod {pod}: {error}")]
    ReadPod { pod: String, error: ClusterError },
    /// Evicted pods (`namespace/name`) were still on the node when the wait ended.
    #[error("pods remaining after timeout: {}", pods.join(","))]
    PodsRemaining { pods: Vec<String> },
    /// Reading the node (for its delay-deletion annotations) failed.
    #[error("failed to read the node: {0}")]
    ReadNode(ClusterError),
    /// Another node of the same zero-or-max batch failed.
    #[error("another node of its zero-or-max group could not be deleted")]
    ZeroOrMaxBatch,
    /// The cloud's `DeleteNodes` failed.
    #[error("failed to delete the node in the cloud: {0}")]
    Cloud(CloudError),
    /// The node's group is no longer among the cloud's groups.
    #[error("failed to delete the node in the cloud: node group {group} no longer exists")]
    GroupGone { group: String },
}

/// The emptiness re-check alone: an empty node that received a pod that is not a DaemonSet or
/// mirror pod is not deleted; drained nodes always pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptinessRecheck;

impl RemovalRecheck for EmptinessRecheck {
    fn recheck(
        &self,
        _node: &Node,
        kind: RemovalKind,
        live_pods: &[Arc<Pod>],
    ) -> Result<(), RecheckRefusal> {
        if kind == RemovalKind::Empty
            && let Some(pod) = live_pods.iter().find(|p| needs_moving(p))
        {
            return Err(RecheckRefusal::NotEmpty { pod: pod.key() });
        }
        Ok(())
    }
}

/// A pod that must leave the node before it is deleted: anything but DaemonSet, mirror and
/// finished pods.
pub fn needs_moving(pod: &Pod) -> bool {
    !pod.is_daemonset_pod() && !pod.is_mirror_pod() && !pod.is_terminal()
}

/// Whether a DaemonSet pod on a node being removed is evicted (best-effort): per the flag for the
/// node's kind, unless the pod's annotation says otherwise.
pub fn evicts_daemonset_pod(pod: &Pod, kind: RemovalKind, options: &AutoscalingOptions) -> bool {
    match pod
        .annotations
        .get(ENABLE_DS_EVICTION_ANNOTATION)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => match kind {
            RemovalKind::Empty => options.daemonset_eviction_for_empty_nodes,
            RemovalKind::Drain => options.daemonset_eviction_for_occupied_nodes,
        },
    }
}

/// Grace period of an eviction: the pod's own, capped by `--max-graceful-termination-sec`.
pub fn eviction_grace_seconds(pod: &Pod, options: &AutoscalingOptions) -> i64 {
    pod.termination_grace_seconds
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        .min(options.max_graceful_termination_sec)
        .max(0)
}

/// The pods of one drain that are evicted together, and how long they get to go.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EvictionBand {
    pods: Vec<PodRef>,
    /// The band's grace cap: evicted pods are waited for this long plus
    /// [`POD_TERMINATION_MARGIN`].
    wait: Duration,
}

/// Splits a drain's must-evict pods into the bands they are evicted in (docs/behaviour.md
/// SD-118). Without `--drain-priority-config`: one band, each pod's grace capped by
/// `--max-graceful-termination-sec`. With it: a pod belongs to the band of the highest configured
/// priority at or below its own (the lowest band when it is below all), bands go in ascending
/// priority, and each caps its pods' grace by its own seconds (a band of 0 seconds leaves the
/// pods' own grace, as upstream). Bands without pods are left out.
fn eviction_bands(pods: &[Arc<Pod>], options: &AutoscalingOptions) -> Vec<EvictionBand> {
    let config = &options.drain_priority_config;
    if config.is_empty() {
        return vec![EvictionBand {
            pods: pods.iter().map(|p| PodRef::new(p, options)).collect(),
            wait: Duration::from_secs(
                u64::try_from(options.max_graceful_termination_sec).unwrap_or(0),
            ),
        }];
    }
    let mut bands: Vec<EvictionBand> = config
        .iter()
        .map(|band| EvictionBand {
            pods: Vec::new(),
            wait: Duration::from_secs(u64::try_from(band.grace_seconds).unwrap_or(0)),
        })
        .collect();
    for pod in pods {
        let priority = pod.priority.unwrap_or(0);
        let index = config
            .iter()
            .rposition(|band| band.priority <= priority)
            .unwrap_or(0);
        let cap = config.get(index).map_or(0, |band| band.grace_seconds);
        let own = pod
            .termination_grace_seconds
            .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
        let grace = if cap > 0 { own.min(cap) } else { own }.max(0);
        if let Some(band) = bands.get_mut(index) {
            band.pods.push(PodRef::with_grace(pod, grace));
        }
    }
    bands.retain(|band| !band.pods.is_empty());
    bands
}

/// The `ToBeDeletedByClusterAutoscaler` taint as placed at `now`.
pub fn to_be_deleted_taint(now: Timestamp) -> Taint {
    Taint {
        time_added: Some(now),
        ..Taint::new(
            TO_BE_DELETED,
            now.secs().to_string(),
            TaintEffect::NoSchedule,
        )
    }
}

/// A pod being evicted or waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodRef {
    namespace: String,
    name: String,
    uid: String,
    grace_seconds: i64,
}

impl PodRef {
    fn new(pod: &Pod, options: &AutoscalingOptions) -> PodRef {
        PodRef::with_grace(pod, eviction_grace_seconds(pod, options))
    }

    fn with_grace(pod: &Pod, grace_seconds: i64) -> PodRef {
        PodRef {
            namespace: pod.namespace.to_string(),
            name: pod.name.to_string(),
            uid: pod.uid.to_string(),
            grace_seconds,
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Where a deletion stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionPhase {
    /// Tainted; waiting `--node-delete-delay-after-taint` before the re-check.
    Tainted,
    /// Evicting the must-evict pods; failures are retried until the deadline.
    Evicting {
        started: Timestamp,
        next_attempt: Timestamp,
        /// Pods (`namespace/name`) not evicted yet.
        remaining: Vec<String>,
    },
    /// Waiting for evicted pods to be gone or bound elsewhere.
    WaitingForPods { until: Timestamp, pods: Vec<String> },
    /// Waiting for `delay-deletion.cluster-autoscaler.kubernetes.io/` annotations to go.
    WaitingForAnnotations { until: Timestamp },
    /// Ready for the cloud call; zero-or-max groups wait here for the rest of their batch.
    ReadyToDelete,
}

#[derive(Debug, Clone)]
struct Deletion {
    request: NodeDeletion,
    tainted_at: Timestamp,
    phase: DeletionPhase,
    /// Identifies the `start` call; a zero-or-max group's nodes share their batch's fate.
    batch: u64,
    evicting: Vec<PodRef>,
    waiting: Vec<PodRef>,
    /// The pods a drain evicts, as they were before eviction.
    evicted: Vec<Arc<Pod>>,
    /// When the deletion reached `ReadyToDelete` (the deletion batcher's clock).
    ready_at: Option<Timestamp>,
    /// How long the pods of the band being evicted are waited for (plus the margin).
    band_wait: Duration,
    /// The eviction bands after the current one, in order (docs/behaviour.md SD-118).
    next_bands: Vec<EvictionBand>,
    /// The post-taint wait in force when the deletion started (docs/behaviour.md SD-119).
    delay: Duration,
}

/// A step a deletion reached, for timelines and explanations.
#[derive(Debug, Clone, PartialEq)]
pub enum ActuationStep {
    /// Tainted `ToBeDeletedByClusterAutoscaler` (and cordoned per flag).
    Tainted,
    /// Eviction started for these pods (`namespace/name`); DaemonSet pods evicted best-effort are
    /// listed separately.
    EvictionsStarted {
        pods: Vec<String>,
        daemonset_pods: Vec<String>,
    },
    /// Some evictions were refused and will be retried.
    EvictionsRetrying {
        remaining: Vec<String>,
        error: String,
    },
    /// Every evicted pod is gone; waiting for delay-deletion annotations.
    WaitingForAnnotations,
    /// `DeleteNodes` succeeded.
    Deleted,
    /// The deletion was abandoned and the node untainted.
    Failed { reason: DeletionFailure },
}

/// What happened to one node.
#[derive(Debug, Clone, PartialEq)]
pub struct ActuationReport {
    pub at: Timestamp,
    pub node: String,
    pub group_id: String,
    pub kind: RemovalKind,
    pub step: ActuationStep,
}

/// A node the cloud deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedDeletion {
    pub node: String,
    pub group_id: String,
    pub kind: RemovalKind,
    pub unready: bool,
}

/// A deletion that was abandoned.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedDeletion {
    pub node: String,
    pub group_id: String,
    pub reason: DeletionFailure,
    /// The cloud's `DeleteNodes` failed (counts for `--scale-down-delay-type-local`).
    pub cloud_error: bool,
}

/// What one `start` or `advance` call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActuationProgress {
    pub reports: Vec<ActuationReport>,
    pub events: Vec<Event>,
    pub completed: Vec<CompletedDeletion>,
    pub failed: Vec<FailedDeletion>,
    /// `start` could not taint every node: nothing was started (sets the scale-down failure time).
    pub start_error: Option<String>,
}

impl ActuationProgress {
    fn report(&mut self, at: Timestamp, deletion: &NodeDeletion, step: ActuationStep) {
        self.reports.push(ActuationReport {
            at,
            node: deletion.node.name.clone(),
            group_id: deletion.group_id.clone(),
            kind: deletion.kind,
            step,
        });
    }

    /// A deletion that will not happen: `ScaleDownFailed` on the node, a report, and the failure
    /// the loop records.
    fn fail(
        &mut self,
        at: Timestamp,
        deletion: &NodeDeletion,
        reason: DeletionFailure,
        cloud_error: bool,
    ) {
        self.events.push(Event::warning(
            EventObject::Node(deletion.node.name.clone()),
            reasons::SCALE_DOWN_FAILED,
            reason.to_string(),
        ));
        self.report(
            at,
            deletion,
            ActuationStep::Failed {
                reason: reason.clone(),
            },
        );
        self.failed.push(FailedDeletion {
            node: deletion.node.name.clone(),
            group_id: deletion.group_id.clone(),
            reason,
            cloud_error,
        });
    }

    fn extend(&mut self, other: ActuationProgress) {
        self.reports.extend(other.reports);
        self.events.extend(other.events);
        self.completed.extend(other.completed);
        self.failed.extend(other.failed);
        if self.start_error.is_none() {
            self.start_error = other.start_error;
        }
    }
}

/// A node currently being deleted, as the scale-down planner and scale-up see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InProgressDeletion {
    pub node: String,
    pub group_id: String,
    pub kind: RemovalKind,
    pub phase: DeletionPhase,
}

/// How long taint latencies are remembered for `--dynamic-node-delete-delay-after-taint-enabled`.
pub const TAINT_LATENCY_MEMORY: Duration = Duration::from_secs(3600);

/// The deletions in progress, remembered across loops.
#[derive(Debug, Clone, Default)]
pub struct DeletionTracker {
    active: Vec<Deletion>,
    next_batch: u64,
    /// Taint latencies measured in the last hour, with when they were measured
    /// (docs/behaviour.md SD-119).
    taint_latencies: Vec<(Timestamp, Duration)>,
    /// Taints that must come off nodes but could not be removed when they should have been.
    owed: OwedUntaints,
}

/// Deletion taints the autoscaler owes the cluster (docs/behaviour.md SD-120): a rollback or
/// a start-up clean-up whose untaint the API server refused or did not answer. Each is retried
/// every loop ([`DeletionTracker::settle_owed_untaints`]) until it is removed or its node is
/// gone, so an API outage during a rollback never leaves a node tainted until the next restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwedUntaints {
    /// `(node, taint key)` → whether the node is uncordoned too.
    taints: std::collections::BTreeMap<(String, String), bool>,
}

impl OwedUntaints {
    /// Records an untaint that failed.
    pub fn owe(&mut self, node: &str, taint_key: &str, uncordon: bool) {
        let uncordon_too = self
            .taints
            .get(&(node.to_string(), taint_key.to_string()))
            .copied()
            .unwrap_or(false);
        self.taints.insert(
            (node.to_string(), taint_key.to_string()),
            uncordon || uncordon_too,
        );
    }

    /// Forgets what is owed on `node` for `taint_key` (the node is being tainted on purpose).
    pub fn forgive(&mut self, node: &str, taint_key: &str) {
        self.taints
            .remove(&(node.to_string(), taint_key.to_string()));
    }

    pub fn is_empty(&self) -> bool {
        self.taints.is_empty()
    }

    /// The nodes that still carry a taint the autoscaler owes.
    pub fn nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self.taints.keys().map(|(node, _)| node.clone()).collect();
        nodes.dedup();
        nodes
    }
}

/// What [`DeletionTracker::settle_owed_untaints`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettledUntaints {
    /// `ClusterAutoscalerCleanup` events of the taints removed now.
    pub events: Vec<Event>,
    /// Nodes whose owed taint still could not be removed.
    pub still_owed: Vec<String>,
}

impl DeletionTracker {
    pub fn new() -> DeletionTracker {
        DeletionTracker::default()
    }

    /// Whether no deletion is in progress.
    pub fn is_idle(&self) -> bool {
        self.active.is_empty()
    }

    /// Nodes being deleted now, in the order they were started.
    /// How many deletions are in progress (started, neither finished nor rolled back).
    pub fn pending_count(&self) -> usize {
        self.active.len()
    }

    pub fn in_progress(&self) -> Vec<InProgressDeletion> {
        self.active
            .iter()
            .map(|d| InProgressDeletion {
                node: d.request.node.name.clone(),
                group_id: d.request.group_id.clone(),
                kind: d.request.kind,
                phase: d.phase.clone(),
            })
            .collect()
    }

    /// Pods evicted (or being evicted) by the deletions in progress, as they were before
    /// eviction: scale-down must still find them a place until their controllers re-create them.
    pub fn evicted_pods(&self) -> Vec<Arc<Pod>> {
        self.active
            .iter()
            .flat_map(|d| d.evicted.iter().cloned())
            .collect()
    }

    /// Whether `node` is being deleted.
    pub fn is_deleting(&self, node: &str) -> bool {
        self.active.iter().any(|d| d.request.node.name == node)
    }

    /// Records a taint that must come off `node` but could not be removed now (the start-up
    /// clean-up uses this too).
    pub fn owe_untaint(&mut self, node: &str, taint_key: &str, uncordon: bool) {
        self.owed.owe(node, taint_key, uncordon);
    }

    /// The taints still owed.
    pub fn owed_untaints(&self) -> &OwedUntaints {
        &self.owed
    }

    /// Tries again to remove every owed taint (docs/behaviour.md SD-120). A taint is settled once
    /// it is removed or its node no longer exists; the others stay owed for the next loop.
    pub async fn settle_owed_untaints(&mut self, cluster: &dyn ClusterApi) -> SettledUntaints {
        let mut settled = SettledUntaints::default();
        let owed = std::mem::take(&mut self.owed.taints);
        for ((node, key), uncordon) in owed {
            match cluster.untaint_node(&node, &key, uncordon).await {
                Ok(()) => settled.events.push(Event::normal(
                    EventObject::Node(node.clone()),
                    reasons::CLUSTER_AUTOSCALER_CLEANUP,
                    format!("removed {key} taint that an earlier attempt could not remove"),
                )),
                Err(ClusterError::NotFound { .. }) => {}
                Err(_) => {
                    settled.still_owed.push(node.clone());
                    self.owed.taints.insert((node, key), uncordon);
                }
            }
        }
        settled.still_owed.dedup();
        settled
    }

    /// Taints every node of `requests` (docs/behaviour.md SD-81, SD-109) and starts tracking them.
    /// When any taint fails, the taints placed by this call are removed again, `ScaleDownFailed` is
    /// emitted for the nodes that could not be tainted, nothing is tracked and `start_error` is
    /// set. Taint latency is not measured (see [`DeletionTracker::start_measured`]).
    pub async fn start(
        &mut self,
        requests: Vec<NodeDeletion>,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> ActuationProgress {
        self.start_measured(requests, cluster, now, options, &NoStopwatch)
            .await
    }

    /// The post-taint wait of deletions started now: `--node-delete-delay-after-taint`, or, with
    /// `--dynamic-node-delete-delay-after-taint-enabled` and a latency measured in the last hour,
    /// twice the largest such latency (docs/behaviour.md SD-119).
    pub fn delay_after_taint(&self, options: &AutoscalingOptions) -> Duration {
        if !options.dynamic_node_delete_delay_after_taint_enabled {
            return options.node_delete_delay_after_taint;
        }
        self.taint_latencies
            .iter()
            .map(|(_, latency)| *latency)
            .max()
            .map_or(options.node_delete_delay_after_taint, |worst| 2 * worst)
    }

    /// [`DeletionTracker::start`], measuring with `clock` how long each taint takes to be visible
    /// in the API server's answer when `--dynamic-node-delete-delay-after-taint-enabled` is set
    /// (docs/behaviour.md SD-119).
    pub async fn start_measured(
        &mut self,
        requests: Vec<NodeDeletion>,
        cluster: &dyn ClusterApi,
        now: Timestamp,
        options: &AutoscalingOptions,
        clock: &dyn Stopwatch,
    ) -> ActuationProgress {
        let mut progress = ActuationProgress::default();
        let requests: Vec<NodeDeletion> = requests
            .into_iter()
            .filter(|r| !self.is_deleting(&r.node.name))
            .collect();
        if requests.is_empty() {
            return progress;
        }
        let cordon = options.cordon_node_before_terminating;
        for request in &requests {
            self.owed.forgive(&request.node.name, TO_BE_DELETED);
        }
        let mut tainted: Vec<&NodeDeletion> = Vec::new();
        let mut taint_started: Vec<f64> = Vec::new();
        let mut errors: Vec<(&NodeDeletion, ClusterError)> = Vec::new();
        for request in &requests {
            let started = clock.elapsed_millis();
            match cluster
                .taint_node(&request.node.name, to_be_deleted_taint(now), cordon)
                .await
            {
                Ok(()) => {
                    tainted.push(request);
                    taint_started.push(started);
                }
                Err(e) => errors.push((request, e)),
            }
        }
        if !errors.is_empty() {
            for (request, error) in &errors {
                progress.fail(now, request, DeletionFailure::Taint(error.clone()), false);
            }
            for request in tainted {
                let reason = DeletionFailure::BatchNotTainted;
                // A taint that cannot come off now is owed, and retried every loop.
                untaint_or_owe(cluster, &mut self.owed, &request.node.name, cordon).await;
                progress.report(
                    now,
                    request,
                    ActuationStep::Failed {
                        reason: reason.clone(),
                    },
                );
                progress.failed.push(FailedDeletion {
                    node: request.node.name.clone(),
                    group_id: request.group_id.clone(),
                    reason,
                    cloud_error: false,
                });
            }
            progress.start_error = Some(format!(
                "tainting {} node(s) failed: {}",
                errors.len(),
                errors
                    .iter()
                    .map(|(r, e)| format!("{}: {e}", r.node.name))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            return progress;
        }

        if options.dynamic_node_delete_delay_after_taint_enabled {
            self.measure_taint_latency(&tainted, &taint_started, cluster, now, clock)
                .await;
        }
        let delay = self.delay_after_taint(options);
        let batch = self.next_batch;
        self.next_batch += 1;
        for request in requests {
            progress.events.push(Event::normal(
                EventObject::Node(request.node.name.clone()),
                reasons::SCALE_DOWN,
                "marked the node as toBeDeleted/unschedulable",
            ));
            progress.events.push(match request.kind {
                RemovalKind::Empty => Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::SCALE_DOWN_EMPTY,
                    format!("Scale-down: removing empty node {}", request.node.name),
                ),
                RemovalKind::Drain => Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::SCALE_DOWN,
                    format!(
                        "Scale-down: removing node {}, utilization: {:.2}, pods to reschedule: {}",
                        request.node.name,
                        request.utilization,
                        request.pods_to_reschedule.join(",")
                    ),
                ),
            });
            progress.report(now, &request, ActuationStep::Tainted);
            self.active.push(Deletion {
                request,
                tainted_at: now,
                phase: DeletionPhase::Tainted,
                batch,
                evicting: Vec::new(),
                waiting: Vec::new(),
                evicted: Vec::new(),
                ready_at: None,
                band_wait: Duration::ZERO,
                next_bands: Vec::new(),
                delay,
            });
        }
        progress
    }

    /// Reads each freshly tainted node back and records the worst time from the start of its
    /// taint call until the answer shows the taint. A node whose taint is not visible yet makes
    /// the measurement incomplete: nothing is recorded and the configured delay stays in force,
    /// as upstream does when its wait for the taints times out.
    async fn measure_taint_latency(
        &mut self,
        tainted: &[&NodeDeletion],
        started: &[f64],
        cluster: &dyn ClusterApi,
        now: Timestamp,
        clock: &dyn Stopwatch,
    ) {
        let mut worst = Duration::ZERO;
        for (request, started) in tainted.iter().zip(started) {
            let visible = matches!(
                cluster.node(&request.node.name).await,
                Ok(Some(node)) if node.has_taint(TO_BE_DELETED)
            );
            if !visible {
                return;
            }
            let millis = (clock.elapsed_millis() - started).max(0.0);
            worst = worst.max(Duration::from_secs_f64(millis / 1000.0));
        }
        self.taint_latencies
            .retain(|(at, _)| now.since(*at) < TAINT_LATENCY_MEMORY);
        self.taint_latencies.push((now, worst));
    }

    /// Moves every deletion as far as `now` allows. `groups` are the cloud's node groups (for
    /// `DeleteNodes`); `recheck` holds the drainability rules for the post-taint re-check.
    pub async fn advance(
        &mut self,
        groups: &[Arc<dyn NodeGroup>],
        cluster: &dyn ClusterApi,
        recheck: &dyn RemovalRecheck,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> ActuationProgress {
        let mut progress = ActuationProgress::default();
        let mut failed: Vec<(usize, DeletionFailure)> = Vec::new();
        for index in 0..self.active.len() {
            let Some(deletion) = self.active.get_mut(index) else {
                continue;
            };
            if let Err(reason) =
                advance_one(deletion, cluster, recheck, now, options, &mut progress).await
            {
                failed.push((index, reason));
            }
        }

        // A failed node of a zero-or-max group takes the rest of its batch down with it.
        let mut failed_batches: HashSet<(u64, String)> = HashSet::new();
        for (index, _) in &failed {
            if let Some(d) = self.active.get(*index)
                && d.request.zero_or_max
            {
                failed_batches.insert((d.batch, d.request.group_id.clone()));
            }
        }
        let mut to_fail: Vec<(usize, DeletionFailure, bool)> =
            failed.into_iter().map(|(i, r)| (i, r, false)).collect();
        for (index, d) in self.active.iter().enumerate() {
            if failed_batches.contains(&(d.batch, d.request.group_id.clone()))
                && !to_fail.iter().any(|(i, _, _)| *i == index)
            {
                to_fail.push((index, DeletionFailure::ZeroOrMaxBatch, false));
            }
        }

        // Cloud deletions: single nodes, or whole zero-or-max batches once every node is ready.
        let mut deleted: Vec<usize> = Vec::new();
        let mut handled: HashSet<usize> = to_fail.iter().map(|(i, _, _)| *i).collect();
        for index in 0..self.active.len() {
            if handled.contains(&index) {
                continue;
            }
            let Some(d) = self.active.get(index) else {
                continue;
            };
            if d.phase != DeletionPhase::ReadyToDelete {
                continue;
            }
            let batching = options.node_deletion_batcher_interval;
            let members: Vec<usize> = if !d.request.zero_or_max && !batching.is_zero() {
                // docs/behaviour.md SD-117: the group's ready deletions wait for the batch,
                // which goes out `--node-deletion-batcher-interval` after its first node was
                // ready, in one `DeleteNodes` call.
                let group = d.request.group_id.clone();
                let members: Vec<usize> = self
                    .active
                    .iter()
                    .enumerate()
                    .filter(|(i, o)| {
                        !handled.contains(i)
                            && !o.request.zero_or_max
                            && o.request.group_id == group
                            && o.phase == DeletionPhase::ReadyToDelete
                    })
                    .map(|(i, _)| i)
                    .collect();
                let first_ready = members
                    .iter()
                    .filter_map(|i| self.active.get(*i).and_then(|o| o.ready_at))
                    .min()
                    .unwrap_or(now);
                if now < first_ready + batching {
                    continue;
                }
                members
            } else if d.request.zero_or_max {
                let (batch, group) = (d.batch, d.request.group_id.clone());
                let members: Vec<usize> = self
                    .active
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.batch == batch && o.request.group_id == group)
                    .map(|(i, _)| i)
                    .collect();
                let all_ready = members.iter().all(|i| {
                    self.active
                        .get(*i)
                        .is_some_and(|o| o.phase == DeletionPhase::ReadyToDelete)
                });
                if !all_ready {
                    continue;
                }
                members
            } else {
                vec![index]
            };
            handled.extend(members.iter().copied());
            let nodes: Vec<Node> = members
                .iter()
                .filter_map(|i| self.active.get(*i))
                .map(|o| (*o.request.node).clone())
                .collect();
            let group_id = d.request.group_id.clone();
            let result = match groups.iter().find(|g| g.id() == group_id) {
                Some(group) => group
                    .delete_nodes(&nodes)
                    .await
                    .map_err(DeletionFailure::Cloud),
                None => Err(DeletionFailure::GroupGone { group: group_id }),
            };
            match result {
                Ok(()) => deleted.extend(members),
                Err(reason) => {
                    to_fail.extend(members.into_iter().map(|i| (i, reason.clone(), true)));
                }
            }
        }

        for index in &deleted {
            let Some(d) = self.active.get(*index) else {
                continue;
            };
            let request = &d.request;
            progress.events.push(Event::normal(
                EventObject::Node(request.node.name.clone()),
                reasons::SCALE_DOWN,
                "nodes removed by cluster autoscaler",
            ));
            progress.events.push(match request.kind {
                RemovalKind::Empty => Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::SCALE_DOWN_EMPTY,
                    format!("Scale-down: empty node {} removed", request.node.name),
                ),
                RemovalKind::Drain => Event::normal(
                    EventObject::StatusConfigMap,
                    reasons::SCALE_DOWN,
                    format!("Scale-down: node {} removed with drain", request.node.name),
                ),
            });
            progress.report(now, request, ActuationStep::Deleted);
            progress.completed.push(CompletedDeletion {
                node: request.node.name.clone(),
                group_id: request.group_id.clone(),
                kind: request.kind,
                unready: request.unready,
            });
        }

        for (index, reason, cloud_error) in &to_fail {
            let Some(d) = self.active.get(*index) else {
                continue;
            };
            let request = &d.request;
            // Upstream tries once and leaves a failed untaint to the next process start; here
            // it is owed and retried every loop (docs/behaviour.md SD-120).
            untaint_or_owe(
                cluster,
                &mut self.owed,
                &request.node.name,
                options.cordon_node_before_terminating,
            )
            .await;
            progress.fail(now, request, reason.clone(), *cloud_error);
        }

        let finished: HashSet<usize> = deleted
            .into_iter()
            .chain(to_fail.into_iter().map(|(i, _, _)| i))
            .collect();
        let mut index = 0;
        self.active.retain(|_| {
            let keep = !finished.contains(&index);
            index += 1;
            keep
        });
        progress
    }

    /// Starts `requests` and advances everything in one go (used when a caller wants the taint
    /// and the first steps in one call).
    pub async fn start_and_advance(
        &mut self,
        requests: Vec<NodeDeletion>,
        groups: &[Arc<dyn NodeGroup>],
        cluster: &dyn ClusterApi,
        recheck: &dyn RemovalRecheck,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> ActuationProgress {
        let mut progress = self.start(requests, cluster, now, options).await;
        progress.extend(self.advance(groups, cluster, recheck, now, options).await);
        progress
    }
}

/// Removes the deletion taint from a node whose deletion is abandoned; when that fails (other
/// than because the node is gone), the untaint is owed and retried every loop.
async fn untaint_or_owe(
    cluster: &dyn ClusterApi,
    owed: &mut OwedUntaints,
    node: &str,
    uncordon: bool,
) {
    match cluster.untaint_node(node, TO_BE_DELETED, uncordon).await {
        Ok(()) | Err(ClusterError::NotFound { .. }) => {}
        Err(_) => owed.owe(node, TO_BE_DELETED, uncordon),
    }
}

/// Advances one deletion through as many phases as `now` allows. `Err` abandons it.
async fn advance_one(
    deletion: &mut Deletion,
    cluster: &dyn ClusterApi,
    recheck: &dyn RemovalRecheck,
    now: Timestamp,
    options: &AutoscalingOptions,
    progress: &mut ActuationProgress,
) -> Result<(), DeletionFailure> {
    let node_name = deletion.request.node.name.clone();
    loop {
        match deletion.phase.clone() {
            DeletionPhase::Tainted => {
                if now < deletion.tainted_at + deletion.delay {
                    return Ok(());
                }
                let live = cluster
                    .pods_on_node(&node_name)
                    .await
                    .map_err(DeletionFailure::ListPods)?;
                recheck.recheck(&deletion.request.node, deletion.request.kind, &live)?;
                start_evictions(deletion, &live, cluster, now, options, progress).await;
            }
            DeletionPhase::Evicting {
                started,
                next_attempt,
                remaining: _,
            } => {
                if now < next_attempt {
                    return Ok(());
                }
                let mut still: Vec<PodRef> = Vec::new();
                let mut last_error: Option<EvictionError> = None;
                for pod in std::mem::take(&mut deletion.evicting) {
                    match evict(cluster, &pod, progress).await {
                        Ok(()) => deletion.waiting.push(pod),
                        Err(error) => {
                            last_error = Some(error);
                            still.push(pod);
                        }
                    }
                }
                // `last_error` is set exactly when some pod is left in `still`.
                let Some(last_error) = last_error else {
                    deletion.phase = DeletionPhase::WaitingForPods {
                        until: now + deletion.band_wait + POD_TERMINATION_MARGIN,
                        pods: deletion.waiting.iter().map(PodRef::key).collect(),
                    };
                    continue;
                };
                if now >= started + options.max_pod_eviction_time {
                    for pod in &still {
                        progress.events.push(Event::warning(
                            EventObject::Pod(pod.key()),
                            reasons::SCALE_DOWN_FAILED,
                            format!("failed to delete pod for ScaleDown: {last_error}"),
                        ));
                    }
                    return Err(DeletionFailure::EvictionTimedOut {
                        pods: still.iter().map(PodRef::key).collect(),
                        timeout_secs: options.max_pod_eviction_time.as_secs(),
                        last_error,
                    });
                }
                let remaining: Vec<String> = still.iter().map(PodRef::key).collect();
                progress.report(
                    now,
                    &deletion.request,
                    ActuationStep::EvictionsRetrying {
                        remaining: remaining.clone(),
                        error: last_error.to_string(),
                    },
                );
                deletion.evicting = still;
                deletion.phase = DeletionPhase::Evicting {
                    started,
                    next_attempt: now + EVICTION_RETRY_INTERVAL,
                    remaining,
                };
                return Ok(());
            }
            DeletionPhase::WaitingForPods { until, pods: _ } => {
                let mut remaining = Vec::new();
                for pod in std::mem::take(&mut deletion.waiting) {
                    let current = cluster
                        .pod_status(&pod.namespace, &pod.name)
                        .await
                        .map_err(|error| DeletionFailure::ReadPod {
                            pod: pod.key(),
                            error,
                        })?;
                    let still_here = current.is_some_and(|p| {
                        p.uid == pod.uid && p.node_name.as_deref() == Some(node_name.as_str())
                    });
                    if still_here {
                        remaining.push(pod);
                    }
                }
                if !remaining.is_empty() {
                    if now >= until {
                        return Err(DeletionFailure::PodsRemaining {
                            pods: remaining.iter().map(PodRef::key).collect(),
                        });
                    }
                    deletion.phase = DeletionPhase::WaitingForPods {
                        until,
                        pods: remaining.iter().map(PodRef::key).collect(),
                    };
                    deletion.waiting = remaining;
                    return Ok(());
                }
                // The band's pods are gone: the next band starts (docs/behaviour.md SD-118).
                if !deletion.next_bands.is_empty() {
                    let band = deletion.next_bands.remove(0);
                    begin_band(deletion, band, now, Vec::new(), progress);
                    continue;
                }
                deletion.phase = DeletionPhase::WaitingForAnnotations {
                    until: now + options.node_deletion_delay_timeout,
                };
                progress.report(now, &deletion.request, ActuationStep::WaitingForAnnotations);
            }
            DeletionPhase::WaitingForAnnotations { until } => {
                let node = cluster
                    .node(&node_name)
                    .await
                    .map_err(DeletionFailure::ReadNode)?;
                let delayed = node.is_some_and(|n| {
                    n.annotations
                        .keys()
                        .any(|k| k.starts_with(DELAY_DELETION_ANNOTATION_PREFIX))
                });
                // The timeout only ends the wait; deletion proceeds (upstream logs a warning).
                if delayed && now < until {
                    return Ok(());
                }
                deletion.phase = DeletionPhase::ReadyToDelete;
                deletion.ready_at = Some(now);
            }
            DeletionPhase::ReadyToDelete => return Ok(()),
        }
    }
}

/// After the re-check: best-effort DaemonSet evictions, then the must-evict pods of a drain.
async fn start_evictions(
    deletion: &mut Deletion,
    live: &[Arc<Pod>],
    cluster: &dyn ClusterApi,
    now: Timestamp,
    options: &AutoscalingOptions,
    progress: &mut ActuationProgress,
) {
    let kind = deletion.request.kind;
    let selected_daemonset_pods: Vec<&Arc<Pod>> = live
        .iter()
        .filter(|p| p.is_daemonset_pod() && !p.is_terminal())
        .filter(|p| evicts_daemonset_pod(p, kind, options))
        .collect();
    // With drain bands, a drain evicts its selected DaemonSet pods in their bands and waits for
    // them like any other pod, as upstream does; otherwise they go best effort.
    let banded_drain = kind == RemovalKind::Drain && !options.drain_priority_config.is_empty();
    let daemonset_pods: Vec<PodRef> = if banded_drain {
        Vec::new()
    } else {
        selected_daemonset_pods
            .iter()
            .map(|p| PodRef::new(p, options))
            .collect()
    };
    for pod in &daemonset_pods {
        // Best effort: neither retried nor waited for.
        let _ = evict(cluster, pod, progress).await;
    }
    if kind == RemovalKind::Drain {
        deletion.evicted = live.iter().filter(|p| needs_moving(p)).cloned().collect();
    }
    let mut must_evict: Vec<Arc<Pod>> = deletion.evicted.clone();
    if banded_drain {
        must_evict.extend(selected_daemonset_pods.into_iter().cloned());
    }
    let mut bands = eviction_bands(&must_evict, options).into_iter();
    let first = bands.next().unwrap_or(EvictionBand {
        pods: Vec::new(),
        wait: Duration::ZERO,
    });
    deletion.next_bands = bands.collect();
    if kind == RemovalKind::Drain || !daemonset_pods.is_empty() {
        begin_band(deletion, first, now, daemonset_pods, progress);
    } else {
        deletion.band_wait = first.wait;
        deletion.phase = DeletionPhase::Evicting {
            started: now,
            next_attempt: now,
            remaining: first.pods.iter().map(PodRef::key).collect(),
        };
        deletion.evicting = first.pods;
    }
}

/// Starts evicting one band: reports it and moves the deletion to `Evicting` with its pods.
fn begin_band(
    deletion: &mut Deletion,
    band: EvictionBand,
    now: Timestamp,
    best_effort: Vec<PodRef>,
    progress: &mut ActuationProgress,
) {
    progress.report(
        now,
        &deletion.request,
        ActuationStep::EvictionsStarted {
            pods: band.pods.iter().map(PodRef::key).collect(),
            daemonset_pods: best_effort.iter().map(PodRef::key).collect(),
        },
    );
    deletion.band_wait = band.wait;
    deletion.phase = DeletionPhase::Evicting {
        started: now,
        next_attempt: now,
        remaining: band.pods.iter().map(PodRef::key).collect(),
    };
    deletion.evicting = band.pods;
}

/// One eviction call; "not found" counts as success. Emits the pod's `ScaleDown` event on
/// success.
async fn evict(
    cluster: &dyn ClusterApi,
    pod: &PodRef,
    progress: &mut ActuationProgress,
) -> Result<(), EvictionError> {
    match cluster
        .evict_pod(&pod.namespace, &pod.name, pod.grace_seconds)
        .await
    {
        Ok(()) => {
            progress.events.push(Event::normal(
                EventObject::Pod(pod.key()),
                reasons::SCALE_DOWN,
                "deleting pod for node scale down",
            ));
            Ok(())
        }
        Err(EvictionError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events and logs show these texts; they read as they did when the reasons were strings.
    #[test]
    fn failure_reasons_keep_their_wording() {
        let api = ClusterError::Api("boom".into());
        let cases: Vec<(DeletionFailure, &str)> = vec![
            (
                DeletionFailure::Taint(api.clone()),
                "failed to mark the node as toBeDeleted/unschedulable: kubernetes API error: boom",
            ),
            (
                DeletionFailure::BatchNotTainted,
                "another node of the batch could not be tainted",
            ),
            (
                DeletionFailure::ListPods(api.clone()),
                "failed to list the pods of the node: kubernetes API error: boom",
            ),
            (
                RecheckRefusal::NotEmpty { pod: "ns/p".into() }.into(),
                "node is not empty: pod ns/p arrived",
            ),
            (
                RecheckRefusal::from(RecheckBlock::Blocked {
                    pod: "ns/p".into(),
                    rule: DrainBlock::NotEnoughPdb,
                })
                .into(),
                "pod ns/p now blocks the removal (NotEnoughPdb)",
            ),
            (
                RecheckRefusal::from(RecheckBlock::WaitingForCompletion { pod: "ns/p".into() })
                    .into(),
                "pod ns/p is annotated safe-to-evict: on-completion and still running",
            ),
            (
                DeletionFailure::EvictionTimedOut {
                    pods: vec!["ns/a".into(), "ns/b".into()],
                    timeout_secs: 120,
                    last_error: EvictionError::DisruptionBudget {
                        pod: "ns/b".into(),
                        message: "too many".into(),
                    },
                },
                "failed to evict pods ns/a,ns/b within 120s: eviction of pod ns/b refused by a \
                 PodDisruptionBudget: too many",
            ),
            (
                DeletionFailure::ReadPod {
                    pod: "ns/a".into(),
                    error: api.clone(),
                },
                "failed to read pod ns/a: kubernetes API error: boom",
            ),
            (
                DeletionFailure::PodsRemaining {
                    pods: vec!["ns/a".into(), "ns/b".into()],
                },
                "pods remaining after timeout: ns/a,ns/b",
            ),
            (
                DeletionFailure::ReadNode(api),
                "failed to read the node: kubernetes API error: boom",
            ),
            (
                DeletionFailure::ZeroOrMaxBatch,
                "another node of its zero-or-max group could not be deleted",
            ),
            (
                DeletionFailure::Cloud(CloudError::Provider("quota".into())),
                "failed to delete the node in the cloud: cloud provider error: quota",
            ),
            (
                DeletionFailure::GroupGone {
                    group: "pool".into(),
                },
                "failed to delete the node in the cloud: node group pool no longer exists",
            ),
        ];
        for (failure, text) in cases {
            assert_eq!(failure.to_string(), text, "{failure:?}");
        }
    }
}
