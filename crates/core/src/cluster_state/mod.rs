//! The cluster-state registry (docs/behaviour.md, Cluster state and health): what the autoscaler
//! remembers between loops about node groups — requested scale-ups and when they are due, instances
//! seen but not registered as nodes, instances that failed to be created, sizes that disagree with
//! the cloud — and what it concludes from one loop's observations: readiness counts, upcoming
//! nodes, acceptable size ranges, cluster and group health, and the clean-up the loop should carry
//! out.
//!
//! Pure Decide code: [`ClusterStateRegistry::update`] takes the time and the gathered observations
//! and returns a [`ClusterStateReport`]; the loop acts on it (decrease target sizes, delete
//! instances, publish events). Backoffs caused by timeouts and creation errors are applied to the
//! caller's [`NodeGroupBackoff`] directly, because the scale-up later in the same loop must see them.

mod device_mismatch;
mod readiness;
pub mod status;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::time::format_duration;
use ferroscale_model::{Node, Timestamp};

use crate::backoff::{BackoffReason, NodeGroupBackoff};
use crate::cloud::{ErrorClass, Instance, InstanceErrorInfo, InstanceState, InstanceStatus};
use crate::events::{Event, EventObject, reasons};
use crate::options::{AutoscalingOptions, UnreadyNodesScope};
use crate::scale_up::NodeGroupView;
use crate::{FastMap, FastSet};

pub use device_mismatch::DeviceMismatch;
pub use readiness::{DevicePools, NodeReadiness, ReadinessRules};
pub use status::{StatusInput, StatusReport, render_status_yaml};

/// Annotation on the placeholder nodes handed to `DeleteNodes` for instances that have no Node
/// object, with the reason as value.
pub const FAKE_NODE_REASON_ANNOTATION: &str = "k8s.io/cluster-autoscaler/fake-node-reason";
/// Placeholder reason for instances that never registered in time (docs/behaviour.md CS-105).
pub const FAKE_NODE_REASON_UNREGISTERED: &str = "unregistered";
/// Placeholder reason for instances the cloud failed to create (docs/behaviour.md CS-43).
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
    /// used instead (docs/behaviour.md SD-111).
    pub instances_known: bool,
    /// Complete DRA device pools per driver that a new node of the group publishes, from its
    /// template's node-local ResourceSlices; empty when the group has no devices (docs/dra.md
    /// DRA-129).
    pub template_device_pools: BTreeMap<String, usize>,
    /// Complete DRA device pools per driver that each of `nodes` publishes; nodes without
    /// node-local ResourceSlices are absent.
    pub node_device_pools: HashMap<String, BTreeMap<String, usize>>,
    /// Per node of `nodes`, at the same position, the index into `instances` of the instance whose
    /// id is its `providerID`, when the caller already matched them (Gather does, to find each
    /// node's group); `None` lets cluster-state match them by id itself. Both give the same
    /// answer (debug builds compare).
    pub node_instances: Option<Vec<Option<usize>>>,
}

impl GroupObservation {
    pub fn new(group: NodeGroupView, instances: Vec<Instance>, nodes: Vec<Arc<Node>>) -> Self {
        GroupObservation {
            group,
            instances,
            nodes,
            instances_known: true,
            template_device_pools: BTreeMap::new(),
            node_device_pools: HashMap::new(),
            node_instances: None,
        }
    }

    /// Per node, the index of its instance: the caller's matching when it gave one, else one
    /// made here by id. A node without a `providerID` has no instance.
    fn node_instances_or_match(&self) -> std::borrow::Cow<'_, [Option<usize>]> {
        let by_id = || -> Vec<Option<usize>> {
            let ids: FastMap<&str, usize> = self
                .instances
                .iter()
                .enumerate()
                .map(|(i, instance)| (instance.id.as_str(), i))
                .collect();
            self.nodes
                .iter()
                .map(|node| {
                    let id = node.provider_id.as_str();
                    if id.is_empty() {
                        None
                    } else {
                        ids.get(id).copied()
                    }
                })
                .collect()
        };
        match &self.node_instances {
            Some(given) if given.len() == self.nodes.len() => {
                debug_assert!(
                    given.iter().zip(by_id()).all(|(a, b)| {
                        let id = |i: Option<usize>| i.and_then(|i| self.instances.get(i));
                        id(*a).map(|x| &x.id) == id(b).map(|x| &x.id)
                    }),
                    "the caller's node-instance matching differs from the one by id"
                );
                std::borrow::Cow::Borrowed(given)
            }
            _ => std::borrow::Cow::Owned(by_id()),
        }
    }

    /// What the group's template and `node` say about the node's devices.
    fn device_pools(&self, node: &Node) -> DevicePools<'_> {
        if self.template_device_pools.is_empty() {
            return DevicePools::default();
        }
        DevicePools {
            node: self.node_device_pools.get(&node.name),
            template: Some(&self.template_device_pools),
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
    /// Acceptable range of registered nodes (docs/behaviour.md CS-103).
    pub acceptable_min: usize,
    pub acceptable_max: usize,
    /// Nodes still expected to become ready: counted only while a scale-up request is active and
    /// the group is not backed off.
    pub upcoming: usize,
    /// Registered but not yet started nodes that are part of `upcoming`: the loop replaces them by
    /// placeholders and keeps them out of scale-down (docs/behaviour.md LOOP-112).
    pub registered_upcoming: Vec<String>,
    /// A scale-up request is active.
    pub scaling_up: bool,
    pub healthy: bool,
}

/// A scale-up whose nodes did not arrive within the max provision time (docs/behaviour.md CS-45).
/// The group is already backed off; the loop calls `DecreaseTargetSize(-missing)` when `missing >
/// 0` and emits `FailedToRevertScaleUp` if that fails.
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

/// A target size that disagreed with the instances for longer than the max provision time
/// (docs/behaviour.md CS-47): the loop calls `DecreaseTargetSize(delta)` (`delta < 0`) and ends the
/// iteration.
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
    /// False: the loop does nothing but bookkeeping this iteration and emits
    /// [`ClusterStateReport::cluster_unhealthy_event`].
    pub cluster_healthy: bool,
    pub timed_out_scale_ups: Vec<TimedOutScaleUp>,
    /// Long-unregistered instances, capped per group at target − min unless forced
    /// (docs/behaviour.md CS-105, CS-46).
    pub long_unregistered_to_delete: Vec<InstanceToDelete>,
    /// Every instance in `Creating` state with an error (docs/behaviour.md CS-43), every loop.
    pub failed_instances_to_delete: Vec<InstanceToDelete>,
    pub incorrect_sizes_to_fix: Vec<SizeFix>,
    pub events: Vec<Event>,
    /// How the DRA devices of ready nodes differ from what their group's template promised, by
    /// driver (docs/behaviour.md OBS-129).
    pub device_mismatches: BTreeMap<String, DeviceMismatch>,
}

impl ClusterStateReport {
    pub fn group(&self, group_id: &str) -> Option<&GroupState> {
        self.groups.iter().find(|g| g.group_id == group_id)
    }

    /// The `ClusterUnhealthy` event the loop emits when it stops at the health gate
    /// (docs/behaviour.md CS-64); `None` while the cluster is healthy.
    pub fn cluster_unhealthy_event(&self) -> Option<Event> {
        (!self.cluster_healthy).then(|| {
            Event::warning(
                EventObject::StatusConfigMap,
                reasons::CLUSTER_UNHEALTHY,
                format!(
                    "Cluster is unhealthy: {} of {} registered nodes are unready",
                    self.total.unready, self.total.registered
                ),
            )
        })
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
    previous_failures: BTreeSet<(String, String, i32, String)>,
    /// Nodes whose node group could not be looked up this loop: with
    /// `--unready-nodes-scope=autoscaled` they still count for cluster health.
    lookup_failed_nodes: HashSet<String>,
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
            lookup_failed_nodes: HashSet::new(),
            last: ClusterStateReport {
                cluster_healthy: true,
                ..Default::default()
            },
        }
    }

    /// The provider's GPU label (`CloudProvider::gpu_label`), for GPU readiness.
    pub fn with_gpu_label(mut self, gpu_label: &str) -> Self {
        self.set_gpu_label(gpu_label);
        self
    }

    /// Sets the GPU label once the provider is known (the loop learns it from the cloud it is
    /// handed, not at construction).
    pub fn set_gpu_label(&mut self, gpu_label: &str) {
        if self.rules.gpu_label != gpu_label {
            self.rules.gpu_label = gpu_label.to_string();
        }
    }

    /// The nodes whose `NodeGroupForNode` failed this loop (docs/behaviour.md CS-111): with
    /// `--unready-nodes-scope=autoscaled` they count for cluster health although they are in no
    /// group, since they may well belong to one.
    pub fn set_lookup_failed_nodes(&mut self, nodes: HashSet<String>) {
        self.lookup_failed_nodes = nodes;
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
        self.rules = ReadinessRules::from_options(options, &self.rules.gpu_label);
        self.default_provision_time = options.max_node_provision_time;
        self.provision_time = observations
            .iter()
            .map(|o| {
                let time = o
                    .group
                    .options
                    .max_node_provision_time
                    .unwrap_or(options.max_node_provision_time);
                (o.group.id.clone(), time)
            })
            .collect();
        self.scale_down_requests.retain(|_, until| now < *until);
        let known_groups: BTreeSet<&str> =
            observations.iter().map(|o| o.group.id.as_str()).collect();
        self.scale_up_requests
            .retain(|group, _| known_groups.contains(group.as_str()));

        let mut report = ClusterStateReport::default();
        // Built only when an instance is not matched by a node of its own group: in a settled
        // cluster, never.
        let registered_ids: OnceCell<FastSet<&str>> = OnceCell::new();
        let is_registered = |instance: &str| {
            registered_ids
                .get_or_init(|| {
                    all_nodes
                        .iter()
                        .chain(observations.iter().flat_map(|o| o.nodes.iter()))
                        .map(|n| n.provider_id.as_str())
                        .filter(|id| !id.is_empty())
                        .collect()
                })
                .contains(instance)
        };

        for observation in observations {
            observation.count_device_mismatches(&mut report.device_mismatches);
        }

        // 4.3: classify registered nodes and instances of every group.
        let mut groups: Vec<GroupWork> = observations
            .iter()
            .map(|o| self.observe_group(o, &is_registered, now, options))
            .collect();
        self.unregistered_since = groups
            .iter()
            .flat_map(|g| {
                let id = &g.group_id;
                g.unregistered
                    .iter()
                    .chain(&g.long_unregistered)
                    .map(move |(instance, since)| ((id.clone(), instance.clone()), *since))
            })
            .collect();

        // 4.6: instances the cloud failed to create.
        self.handle_failed_instances(&groups, now, backoff, options, &mut report);

        // 4.5: long-unregistered instances, never below min size unless forced.
        for (work, observation) in groups.iter_mut().zip(observations) {
            let group = &observation.group;
            let room = if options.force_delete_unregistered_nodes {
                usize::MAX
            } else {
                group.target_size.saturating_sub(group.min_size)
            };
            for (instance, _) in work.long_unregistered.iter().take(room) {
                report.long_unregistered_to_delete.push(InstanceToDelete {
                    group_id: group.id.clone(),
                    instance_id: instance.clone(),
                    placeholder: placeholder_node(instance, FAKE_NODE_REASON_UNREGISTERED),
                    error: None,
                    force: options.force_delete_unregistered_nodes,
                });
                work.deleted_by_report += 1;
            }
        }

        // 4.4: settle scale-up requests.
        let mut timed_out_groups = BTreeSet::new();
        for (work, observation) in groups.iter().zip(observations) {
            let group = &observation.group;
            let Some(request) = self.scale_up_requests.get(&group.id).cloned() else {
                continue;
            };
            // Instances that stayed unregistered past the provision time mean the request
            // failed, even when they are the very nodes that make it look complete and the
            // request's own clock has not run out (docs/behaviour.md CS-107): an iteration that
            // starts right after the resize sees its instances first, so both clocks end in the
            // same iteration and the deletion below would otherwise pass for success.
            let never_registered = work.counts.long_unregistered > 0;
            if work.raw_upcoming(group.target_size) == 0 && !never_registered {
                self.scale_up_requests.remove(&group.id);
                continue;
            }
            if now <= request.expected_by && !never_registered {
                continue;
            }
            self.scale_up_requests.remove(&group.id);
            timed_out_groups.insert(group.id.clone());
            let waited = request.expected_by.since(request.started);
            let message = format!(
                "Nodes added to group {} failed to register within {}",
                group.id,
                format_duration(waited)
            );
            backoff.backoff(
                &group.id,
                now,
                BackoffReason::new(ErrorClass::Other, TIMEOUT_ERROR_CODE, message.clone()),
            );
            report.events.push(Event::warning(
                EventObject::StatusConfigMap,
                reasons::SCALE_UP_TIMED_OUT,
                message,
            ));
            // Requested nodes that never registered, less the instances this report deletes
            // anyway (their deletion already lowers the target).
            let missing = request.increase.min(
                group
                    .target_size
                    .saturating_sub(work.counts.registered - work.counts.being_deleted)
                    .saturating_sub(work.deleted_by_report),
            );
            report.timed_out_scale_ups.push(TimedOutScaleUp {
                group_id: group.id.clone(),
                missing,
            });
        }

        // Ranges, upcoming nodes, incorrect sizes and health per group.
        for (work, observation) in groups.into_iter().zip(observations) {
            let group = &observation.group;
            let request = self.scale_up_requests.get(&group.id);
            let scaling_up = request.is_some();
            let pending_scale_downs = self
                .scale_down_requests
                .keys()
                .filter(|(g, _)| g == &group.id)
                .count();
            let counts = work.counts;
            let acceptable_max = group.target_size + pending_scale_downs;
            let acceptable_min = group
                .target_size
                .saturating_sub(counts.long_unregistered)
                .saturating_sub(request.map_or(0, |r| r.increase));
            let upcoming = if scaling_up && !backoff.is_backed_off(&group.id, now) {
                work.raw_upcoming(group.target_size)
            } else {
                0
            };
            let registered_upcoming = work.not_started.iter().take(upcoming).cloned().collect();

            self.track_incorrect_size(
                &work,
                group,
                now,
                scaling_up || timed_out_groups.contains(&group.id),
                &mut report,
            );

            let healthy = group_healthy(
                &counts,
                group.target_size,
                acceptable_min,
                scaling_up,
                options,
            );
            report.total.add(&counts);
            report.groups.push(GroupState {
                group_id: group.id.clone(),
                min_size: group.min_size,
                max_size: group.max_size,
                target_size: group.target_size,
                counts,
                acceptable_min,
                acceptable_max,
                upcoming,
                registered_upcoming,
                scaling_up,
                healthy,
            });
        }
        self.incorrect_sizes
            .retain(|group, _| known_groups.contains(group.as_str()));

        // Nodes outside every group count in the totals; for cluster health only with
        // `--unready-nodes-scope=cluster`, or when their group could not be looked up
        // (docs/behaviour.md CS-111).
        let mut health_counts = report.total;
        // A node of a group is found by its address (the observations share the gathered
        // nodes), else by its name, in a set built only if some node is not found by address.
        let grouped: FastSet<usize> = observations
            .iter()
            .flat_map(|o| o.nodes.iter().map(|n| Arc::as_ptr(n) as usize))
            .collect();
        let grouped_names: OnceCell<FastSet<&str>> = OnceCell::new();
        let in_a_group = |node: &Arc<Node>| {
            grouped.contains(&(Arc::as_ptr(node) as usize))
                || grouped_names
                    .get_or_init(|| {
                        observations
                            .iter()
                            .flat_map(|o| o.nodes.iter().map(|n| n.name.as_str()))
                            .collect()
                    })
                    .contains(node.name.as_str())
        };
        for node in all_nodes.iter().filter(|n| !in_a_group(n)) {
            // A node in no group has no template to expect devices from.
            let class = self.classify(
                node,
                &DevicePools::default(),
                node.has_taint(TO_BE_DELETED),
                now,
                options.max_node_startup_time,
            );
            report.total.count(class);
            if options.unready_nodes_scope == UnreadyNodesScope::Cluster
                || self.lookup_failed_nodes.contains(&node.name)
            {
                health_counts.count(class);
            }
        }
        report.cluster_healthy = cluster_healthy(&health_counts, options);
        self.last = report.clone();
        report
    }

    /// Classifies one group's nodes and instances.
    fn observe_group(
        &self,
        observation: &GroupObservation,
        is_registered: &dyn Fn(&str) -> bool,
        now: Timestamp,
        options: &AutoscalingOptions,
    ) -> GroupWork {
        let group = &observation.group;
        let startup_time = group
            .options
            .max_node_startup_time
            .unwrap_or(options.max_node_startup_time);
        let provision_time = self.provision_time_of(&group.id);
        let node_instances = observation.node_instances_or_match();
        let mut matched = vec![false; observation.instances.len()];
        let mut work = GroupWork {
            group_id: group.id.clone(),
            ..GroupWork::default()
        };
        for (node, instance) in observation.nodes.iter().zip(node_instances.iter().copied()) {
            if let Some(slot) = instance.and_then(|i| matched.get_mut(i)) {
                *slot = true;
            }
            let deleted = if observation.instances_known && !node.provider_id.is_empty() {
                instance.is_none()
            } else {
                node.has_taint(TO_BE_DELETED)
            };
            let devices = observation.device_pools(node);
            let class = self.classify(node, &devices, deleted, now, startup_time);
            if class == NodeClass::NotStarted {
                work.not_started.push(node.name.clone());
            }
            work.counts.count(class);
        }
        for (instance, matched) in observation.instances.iter().zip(matched) {
            let status = instance.status.as_ref();
            if let Some(InstanceStatus {
                state: InstanceState::Creating,
                error: Some(error),
            }) = status
            {
                work.failed.push((instance.id.clone(), error.clone()));
                continue;
            }
            let expected_to_register =
                status.is_none_or(|s| s.state != InstanceState::Deleting && s.error.is_none());
            if !expected_to_register || matched || is_registered(&instance.id) {
                continue;
            }
            let since = self
                .unregistered_since
                .get(&(group.id.clone(), instance.id.clone()))
                .copied()
                .unwrap_or(now);
            if now.since(since) > provision_time {
                work.long_unregistered.push((instance.id.clone(), since));
            } else {
                work.unregistered.push((instance.id.clone(), since));
            }
        }
        // Oldest first, so that capped deletions remove the longest-waiting instances.
        work.long_unregistered
            .sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        work.counts.unregistered = work.unregistered.len();
        work.counts.long_unregistered = work.long_unregistered.len();
        work
    }

    /// 4.1–4.3 for one registered node.
    fn classify(
        &self,
        node: &Node,
        devices: &DevicePools<'_>,
        deleted: bool,
        now: Timestamp,
        startup_time: Duration,
    ) -> NodeClass {
        if deleted {
            return NodeClass::BeingDeleted;
        }
        if node.conditions.suspended {
            return NodeClass::Suspended;
        }
        match self.rules.readiness_with_devices(node, devices) {
            NodeReadiness::Ready => NodeClass::Ready,
            _ if now.since(node.creation_time) < startup_time => NodeClass::NotStarted,
            NodeReadiness::ResourceUnready => NodeClass::ResourceUnready,
            _ => NodeClass::Unready,
        }
    }

    /// 4.6: reports every failed instance for deletion; failures not seen at the previous update
    /// of a group that is scaling up shrink its request, back it off and raise `ScaleUpFailed`.
    fn handle_failed_instances(
        &mut self,
        groups: &[GroupWork],
        now: Timestamp,
        backoff: &mut NodeGroupBackoff,
        options: &AutoscalingOptions,
        report: &mut ClusterStateReport,
    ) {
        let mut seen = BTreeSet::new();
        for work in groups {
            // (class, code) → (count, distinct messages) of failures new since the last update.
            // The class is keyed by its upstream number to keep the order deterministic.
            let mut new_failures: BTreeMap<(i32, String), (ErrorClass, usize, Vec<String>)> =
                BTreeMap::new();
            for (instance, error) in &work.failed {
                let key = (
                    work.group_id.clone(),
                    instance.clone(),
                    error.class as i32,
                    error.code.clone(),
                );
                if !self.previous_failures.contains(&key) {
                    let entry = new_failures
                        .entry((error.class as i32, error.code.clone()))
                        .or_insert((error.class, 0, Vec::new()));
                    entry.1 += 1;
                    if entry.2.len() < MAX_DISTINCT_ERROR_MESSAGES
                        && !entry.2.contains(&error.message)
                    {
                        entry.2.push(error.message.clone());
                    }
                }
                seen.insert(key);
                report.failed_instances_to_delete.push(InstanceToDelete {
                    group_id: work.group_id.clone(),
                    instance_id: instance.clone(),
                    placeholder: placeholder_node(instance, FAKE_NODE_REASON_CREATE_ERROR),
                    error: Some(error.clone()),
                    force: options.force_delete_failed_nodes,
                });
            }
            if !self.scale_up_requests.contains_key(&work.group_id) {
                continue;
            }
            for ((_, code), (class, count, messages)) in new_failures {
                let message = format!(
                    "Failed adding {count} nodes to group {} due to {class}.{code}; source errors: {}",
                    work.group_id,
                    messages.join(", ")
                );
                backoff.backoff(
                    &work.group_id,
                    now,
                    BackoffReason::new(class, code, messages.join(", ")),
                );
                report.events.push(Event::warning(
                    EventObject::StatusConfigMap,
                    reasons::SCALE_UP_FAILED,
                    message,
                ));
                if let Some(request) = self.scale_up_requests.get_mut(&work.group_id) {
                    request.increase = request.increase.saturating_sub(count);
                    if request.increase == 0 {
                        self.scale_up_requests.remove(&work.group_id);
                    }
                }
            }
        }
        self.previous_failures = seen;
    }

    /// 4.7: remembers since when a group's instances disagree with its target and reports the
    /// decrease once that has lasted longer than the max provision time. Groups with a scale-up
    /// in flight (or just timed out, whose revert is already reported) are left to 4.4.
    fn track_incorrect_size(
        &mut self,
        work: &GroupWork,
        group: &NodeGroupView,
        now: Timestamp,
        scale_up_in_flight: bool,
        report: &mut ClusterStateReport,
    ) {
        let registered = work.counts.registered - work.counts.being_deleted;
        let current =
            registered + work.unregistered.len() + work.long_unregistered.len() + work.failed.len();
        let expected = group.target_size;
        if registered <= expected && current >= expected {
            self.incorrect_sizes.remove(&group.id);
            return;
        }
        let entry = self
            .incorrect_sizes
            .entry(group.id.clone())
            .or_insert(IncorrectSize {
                current,
                expected,
                since: now,
            });
        if (entry.current, entry.expected) != (current, expected) {
            *entry = IncorrectSize {
                current,
                expected,
                since: now,
            };
        }
        let persisted = now.since(entry.since) > self.provision_time_of(&group.id);
        if persisted && current < expected && !scale_up_in_flight {
            report.incorrect_sizes_to_fix.push(SizeFix {
                group_id: group.id.clone(),
                delta: current as i64 - expected as i64,
            });
        }
    }
}

/// At most this many distinct error messages are quoted in one `ScaleUpFailed` event.
const MAX_DISTINCT_ERROR_MESSAGES: usize = 3;

/// Where a registered node stands (docs/behaviour.md CS-103).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeClass {
    BeingDeleted,
    Suspended,
    Ready,
    NotStarted,
    Unready,
    ResourceUnready,
}

impl ReadinessCounts {
    fn count(&mut self, class: NodeClass) {
        self.registered += 1;
        match class {
            NodeClass::BeingDeleted => self.being_deleted += 1,
            NodeClass::Suspended => self.suspended += 1,
            NodeClass::Ready => self.ready += 1,
            NodeClass::NotStarted => self.not_started += 1,
            NodeClass::Unready => self.unready += 1,
            NodeClass::ResourceUnready => {
                self.unready += 1;
                self.resource_unready += 1;
            }
        }
    }

    fn add(&mut self, other: &ReadinessCounts) {
        self.registered += other.registered;
        self.ready += other.ready;
        self.unready += other.unready;
        self.resource_unready += other.resource_unready;
        self.not_started += other.not_started;
        self.suspended += other.suspended;
        self.being_deleted += other.being_deleted;
        self.unregistered += other.unregistered;
        self.long_unregistered += other.long_unregistered;
    }
}

/// One group's classification during an update.
#[derive(Debug, Default)]
struct GroupWork {
    group_id: String,
    counts: ReadinessCounts,
    not_started: Vec<String>,
    /// (instance id, first seen unregistered).
    unregistered: Vec<(String, Timestamp)>,
    long_unregistered: Vec<(String, Timestamp)>,
    failed: Vec<(String, InstanceErrorInfo)>,
    /// Long-unregistered instances this report deletes.
    deleted_by_report: usize,
}

impl GroupWork {
    /// Target minus the nodes that are no longer coming: ready, unready, suspended and
    /// long-unregistered ones.
    fn raw_upcoming(&self, target: usize) -> usize {
        target.saturating_sub(
            self.counts.ready
                + self.counts.unready
                + self.counts.suspended
                + self.counts.long_unregistered,
        )
    }
}

/// docs/behaviour.md CS-64, cluster: too many unready nodes both in number and in share.
fn cluster_healthy(total: &ReadinessCounts, options: &AutoscalingOptions) -> bool {
    let unready = total.unready;
    let share_limit = options.max_total_unready_percentage / 100.0 * total.registered as f64;
    !(unready > options.ok_total_unready_count && unready as f64 > share_limit)
}

/// docs/behaviour.md CS-106, node group: too many of the nodes it should have are not ready, in
/// number and in share.
fn group_healthy(
    counts: &ReadinessCounts,
    target: usize,
    acceptable_min: usize,
    scaling_up: bool,
    options: &AutoscalingOptions,
) -> bool {
    if counts.registered == 0 {
        return target == 0 || (acceptable_min == 0 && scaling_up);
    }
    let missing = acceptable_min.saturating_sub(counts.ready + counts.suspended);
    let considered = counts.ready + counts.unready + counts.not_started + counts.suspended;
    let share_limit = options.max_total_unready_percentage / 100.0 * considered as f64;
    !(missing > options.ok_total_unready_count && missing as f64 > share_limit)
}

/// The Node handed to `DeleteNodes` for an instance without a Node object.
pub fn placeholder_node(instance_id: &str, reason: &str) -> Node {
    let mut node = Node {
        name: instance_id.to_string(),
        provider_id: instance_id.to_string(),
        ..Node::default()
    };
    node.annotations
        .insert(FAKE_NODE_REASON_ANNOTATION.to_string(), reason.to_string());
    node
}
