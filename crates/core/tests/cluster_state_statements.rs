//! Cluster-state behaviour (docs/behaviour.md, "Cluster state and health" and "Status ConfigMap"):
//! readiness and node classification, unregistered and failed instances, scale-up timeouts,
//! incorrect sizes, health, and the content of the status ConfigMap. A test named `sNN_` checks
//! the statement numbered NN there (`s64_` checks CS-64).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::backoff::NodeGroupBackoff;
use ferroscale_core::cloud::{
    ErrorClass, GroupOptions, Instance, InstanceErrorInfo, InstanceState, InstanceStatus,
};
use ferroscale_core::cluster_state::status::{ScaleDownStatus, ScaleUpStatus};
use ferroscale_core::cluster_state::{
    ClusterStateRegistry, ClusterStateReport, FAKE_NODE_REASON_ANNOTATION, GroupObservation,
    StatusInput, StatusReport, render_status_yaml,
};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_up::NodeGroupView;
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{ConditionStatus, Node, Resources, Taint, TaintEffect, Timestamp};
use proptest::prelude::*;

const MIN: i64 = 60;

fn at(minutes: i64) -> Timestamp {
    Timestamp::from_secs(minutes * MIN)
}

fn group(id: &str, min: usize, max: usize, target: usize) -> NodeGroupView {
    NodeGroupView::new(id, min, max, target, None)
}

/// A node registered at `created` with provider id = name.
fn node(name: &str, created: Timestamp, ready: bool) -> Arc<Node> {
    let mut n = Node::new(name, Resources::new(4000, 16 << 30));
    n.provider_id = name.to_string();
    n.creation_time = created;
    if !ready {
        n.conditions.ready = Some(ConditionStatus::False);
    }
    Arc::new(n)
}

fn with_taint(node: &Arc<Node>, key: &str) -> Arc<Node> {
    let mut n = (**node).clone();
    n.taints
        .push(Taint::new(key, "true", TaintEffect::NoSchedule));
    Arc::new(n)
}

fn creating(id: &str) -> Instance {
    Instance {
        id: id.to_string(),
        status: Some(InstanceStatus {
            state: InstanceState::Creating,
            error: None,
        }),
    }
}

fn failed(id: &str, class: ErrorClass, code: &str) -> Instance {
    Instance {
        id: id.to_string(),
        status: Some(InstanceStatus {
            state: InstanceState::Creating,
            error: Some(InstanceErrorInfo {
                class,
                code: code.to_string(),
                message: format!("{code} while creating {id}"),
            }),
        }),
    }
}

/// An observation whose instances are the nodes' own plus `extra`.
fn observe(group: NodeGroupView, nodes: &[Arc<Node>], extra: Vec<Instance>) -> GroupObservation {
    let mut instances: Vec<Instance> = nodes
        .iter()
        .map(|n| Instance::running(n.provider_id.clone()))
        .collect();
    instances.extend(extra);
    GroupObservation::new(group, instances, nodes.to_vec())
}

struct World {
    registry: ClusterStateRegistry,
    backoff: NodeGroupBackoff,
    options: AutoscalingOptions,
}

impl World {
    fn new(options: AutoscalingOptions) -> World {
        World {
            registry: ClusterStateRegistry::new(&options),
            backoff: NodeGroupBackoff::from_options(&options),
            options,
        }
    }

    fn update(&mut self, now: Timestamp, observations: &[GroupObservation]) -> ClusterStateReport {
        let all: Vec<Arc<Node>> = observations
            .iter()
            .flat_map(|o| o.nodes.iter().cloned())
            .collect();
        self.registry
            .update(now, observations, &all, &mut self.backoff, &self.options)
    }
}

fn default_world() -> World {
    World::new(AutoscalingOptions::default())
}

/// docs/behaviour.md CS-43.
#[test]
fn s43_instance_failing_with_out_of_resources_backs_off_and_is_deleted() {
    let mut w = default_world();
    let ready = node("g-1", at(0), true);
    w.registry.register_scale_up("g", 2, at(0));
    let observation = observe(
        group("g", 0, 10, 3),
        std::slice::from_ref(&ready),
        vec![
            failed(
                "g-2",
                ErrorClass::OutOfResources,
                "ZONE_RESOURCE_POOL_EXHAUSTED",
            ),
            creating("g-3"),
        ],
    );
    let report = w.update(at(1), std::slice::from_ref(&observation));

    let failed_events: Vec<_> = report
        .events
        .iter()
        .filter(|e| e.reason == "ScaleUpFailed")
        .collect();
    assert_eq!(failed_events.len(), 1);
    assert!(failed_events[0].warning);
    assert!(
        failed_events[0]
            .message
            .contains("ZONE_RESOURCE_POOL_EXHAUSTED")
    );
    let entry = w.backoff.active("g", at(1)).expect("group backed off");
    assert_eq!(entry.reason.code, "ZONE_RESOURCE_POOL_EXHAUSTED");
    assert_eq!(entry.reason.class, ErrorClass::OutOfResources);

    assert_eq!(report.failed_instances_to_delete.len(), 1);
    let deletion = &report.failed_instances_to_delete[0];
    assert_eq!(
        (deletion.group_id.as_str(), deletion.instance_id.as_str()),
        ("g", "g-2")
    );
    assert_eq!(deletion.placeholder.provider_id, "g-2");
    assert_eq!(
        deletion
            .placeholder
            .annotations
            .get(FAKE_NODE_REASON_ANNOTATION)
            .map(String::as_str),
        Some("create-error")
    );
    assert!(
        w.registry.is_scaling_up("g"),
        "one requested node is still coming"
    );

    // Next loop: the same failure is not new (no event, no second backoff) but is still deleted.
    let report = w.update(at(2), std::slice::from_ref(&observation));
    assert!(report.events.iter().all(|e| e.reason != "ScaleUpFailed"));
    assert_eq!(report.failed_instances_to_delete.len(), 1);
}

/// Checks docs/behaviour.md CS-43.
#[test]
fn failures_of_every_requested_node_end_the_request() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 2, at(0));
    let observation = observe(
        group("g", 0, 10, 2),
        &[],
        vec![
            failed("g-1", ErrorClass::Other, "QUOTA"),
            failed("g-2", ErrorClass::Other, "QUOTA"),
        ],
    );
    let report = w.update(at(1), &[observation]);
    assert!(!w.registry.is_scaling_up("g"));
    assert_eq!(report.group("g").unwrap().upcoming, 0);
    let event = report
        .events
        .iter()
        .find(|e| e.reason == "ScaleUpFailed")
        .unwrap();
    assert!(
        event.message.contains("Failed adding 2 nodes"),
        "{}",
        event.message
    );
}

/// docs/behaviour.md CS-45, SU-28.
#[test]
fn s45_s28_requested_nodes_that_never_register_time_out() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 2, at(0));
    let observation = observe(
        group("g", 0, 10, 2),
        &[],
        vec![creating("g-1"), creating("g-2")],
    );
    let report = w.update(at(1), std::slice::from_ref(&observation));
    assert_eq!(report.group("g").unwrap().upcoming, 2);
    assert_eq!(w.registry.upcoming_nodes("g"), 2);
    assert!(report.timed_out_scale_ups.is_empty());

    let report = w.update(at(14), std::slice::from_ref(&observation));
    assert!(report.timed_out_scale_ups.is_empty(), "not yet due");

    let report = w.update(at(16), std::slice::from_ref(&observation));
    assert_eq!(report.timed_out_scale_ups.len(), 1);
    assert_eq!(report.timed_out_scale_ups[0].group_id, "g");
    assert_eq!(
        report.timed_out_scale_ups[0].missing, 2,
        "DecreaseTargetSize(-2)"
    );
    assert!(
        report
            .events
            .iter()
            .any(|e| e.reason == "ScaleUpTimedOut" && e.warning)
    );
    assert_eq!(
        w.backoff.active("g", at(16)).unwrap().reason.code,
        "timeout"
    );
    assert_eq!(
        report.group("g").unwrap().upcoming,
        0,
        "SU-28: no longer upcoming"
    );
    assert!(!w.registry.is_scaling_up("g"));
}

/// Checks docs/behaviour.md CS-107: the iteration right after a resize sees the new instances,
/// so they turn long-unregistered in the same iteration as the request is due. Their deletion
/// must not pass for the request's success: the group is backed off, as after any timeout, and
/// a later resize waits for the backoff.
#[test]
fn instances_that_never_register_back_the_group_off_even_in_the_iteration_the_request_ends() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 2, at(0));
    let observation = observe(
        group("g", 0, 10, 2),
        &[],
        vec![creating("g-1"), creating("g-2")],
    );
    // Seen at once, as a frequent loop sees them.
    let report = w.update(at(0), std::slice::from_ref(&observation));
    assert_eq!(report.group("g").unwrap().upcoming, 2);
    let report = w.update(at(16), std::slice::from_ref(&observation));
    assert_eq!(report.long_unregistered_to_delete.len(), 2);
    assert_eq!(
        w.backoff
            .active("g", at(16))
            .map(|b| b.reason.code.as_str()),
        Some("timeout"),
        "the instances that never came back the group off"
    );
    assert!(
        report
            .events
            .iter()
            .any(|e| e.reason == "ScaleUpTimedOut" && e.warning)
    );
    assert_eq!(report.timed_out_scale_ups.len(), 1);
    assert_eq!(
        report.timed_out_scale_ups[0].missing, 0,
        "the deletion of the instances lowers the target already"
    );
    assert!(!w.registry.is_scaling_up("g"));
}

/// Checks docs/behaviour.md CS-104.
#[test]
fn request_completes_when_the_nodes_are_ready() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 1, at(0));
    let new = node("g-1", at(3), false);
    let report = w.update(
        at(4),
        &[observe(
            group("g", 0, 5, 1),
            std::slice::from_ref(&new),
            vec![],
        )],
    );
    let state = report.group("g").unwrap();
    assert_eq!(state.counts.not_started, 1);
    assert_eq!(state.upcoming, 1);
    assert_eq!(state.registered_upcoming, vec!["g-1".to_string()]);
    assert!(w.registry.is_scaling_up("g"));

    let ready = node("g-1", at(3), true);
    let report = w.update(at(5), &[observe(group("g", 0, 5, 1), &[ready], vec![])]);
    assert!(!w.registry.is_scaling_up("g"));
    assert_eq!(report.group("g").unwrap().upcoming, 0);
    assert!(report.timed_out_scale_ups.is_empty());
}

/// Checks docs/behaviour.md CS-104.
#[test]
fn upcoming_counts_only_with_a_request_and_without_backoff() {
    let nodes = [node("g-1", at(0), true), node("g-2", at(9), false)];
    let observation = || observe(group("g", 0, 10, 4), &nodes, vec![creating("g-3")]);

    let mut w = default_world();
    let report = w.update(at(10), &[observation()]);
    assert_eq!(
        report.group("g").unwrap().upcoming,
        0,
        "no scale-up request: nothing upcoming"
    );

    w.registry.register_scale_up("g", 3, at(9));
    let report = w.update(at(10), &[observation()]);
    let state = report.group("g").unwrap();
    // target 4 − ready 1: one not started, one unregistered and one not even an instance yet.
    assert_eq!(state.upcoming, 3);
    assert_eq!(state.registered_upcoming, vec!["g-2".to_string()]);
    assert_eq!(state.counts.unregistered, 1);

    w.backoff.backoff(
        "g",
        at(10),
        ferroscale_core::backoff::BackoffReason::new(ErrorClass::Other, "x", "y"),
    );
    let report = w.update(at(11), &[observation()]);
    assert_eq!(
        report.group("g").unwrap().upcoming,
        0,
        "backed-off groups have no upcoming nodes"
    );
}

/// Checks docs/behaviour.md CS-105.
#[test]
fn unregistered_instances_become_long_unregistered_after_max_provision_time() {
    let mut w = default_world();
    let obs = || observe(group("g", 0, 5, 1), &[], vec![creating("g-1")]);
    let report = w.update(at(0), &[obs()]);
    assert_eq!(report.group("g").unwrap().counts.unregistered, 1);
    assert_eq!(report.group("g").unwrap().counts.long_unregistered, 0);
    let report = w.update(at(15), &[obs()]);
    assert_eq!(
        report.group("g").unwrap().counts.long_unregistered,
        0,
        "exactly the provision time is not longer"
    );
    let report = w.update(at(16), &[obs()]);
    let counts = report.group("g").unwrap().counts;
    assert_eq!((counts.unregistered, counts.long_unregistered), (0, 1));
    assert_eq!(report.total.long_unregistered, 1);
    assert_eq!(report.long_unregistered_to_delete.len(), 1);
    let placeholder = &report.long_unregistered_to_delete[0].placeholder;
    assert_eq!(placeholder.name, "g-1");
    assert_eq!(
        placeholder
            .annotations
            .get(FAKE_NODE_REASON_ANNOTATION)
            .map(String::as_str),
        Some("unregistered")
    );
    assert_eq!(
        report.group("g").unwrap().acceptable_min,
        0,
        "long-unregistered nodes lower the acceptable minimum"
    );

    // Once it registers it is forgotten; were it to vanish and reappear, the clock restarts.
    let registered = node("g-1", at(16), true);
    let report = w.update(
        at(17),
        &[observe(group("g", 0, 5, 1), &[registered], vec![])],
    );
    assert_eq!(report.group("g").unwrap().counts.long_unregistered, 0);
    let report = w.update(at(18), &[obs()]);
    assert_eq!(report.group("g").unwrap().counts.unregistered, 1);
}

/// Checks docs/behaviour.md CS-105.
#[test]
fn group_max_provision_time_overrides_the_flag() {
    let mut w = default_world();
    let mut g = group("g", 0, 5, 1);
    g.options = GroupOptions {
        max_node_provision_time: Some(Duration::from_secs(5 * 60)),
        ..GroupOptions::default()
    };
    let obs = || observe(g.clone(), &[], vec![creating("g-1")]);
    w.update(at(0), &[obs()]);
    let report = w.update(at(6), &[obs()]);
    assert_eq!(report.group("g").unwrap().counts.long_unregistered, 1);
}

/// docs/behaviour.md CS-46.
#[test]
fn s46_long_unregistered_instance_at_min_size_is_kept_unless_forced() {
    let obs = || observe(group("g", 1, 5, 1), &[], vec![creating("g-1")]);
    let mut w = default_world();
    w.update(at(0), &[obs()]);
    let report = w.update(at(20), &[obs()]);
    assert_eq!(report.group("g").unwrap().counts.long_unregistered, 1);
    assert!(
        report.long_unregistered_to_delete.is_empty(),
        "deleting it would take the group below min"
    );

    let mut options = AutoscalingOptions::default();
    options
        .set("force-delete-unregistered-nodes", "true")
        .unwrap();
    let mut w = World::new(options);
    w.update(at(0), &[obs()]);
    let report = w.update(at(20), &[obs()]);
    assert_eq!(report.long_unregistered_to_delete.len(), 1);
    assert!(report.long_unregistered_to_delete[0].force);
}

/// Checks docs/behaviour.md CS-105.
#[test]
fn long_unregistered_deletions_are_capped_at_target_minus_min() {
    let obs = || {
        observe(
            group("g", 1, 5, 3),
            &[],
            vec![creating("g-1"), creating("g-2"), creating("g-3")],
        )
    };
    let mut w = default_world();
    w.update(at(0), &[obs()]);
    let report = w.update(at(20), &[obs()]);
    assert_eq!(report.long_unregistered_to_delete.len(), 2);
}

/// docs/behaviour.md CS-47.
#[test]
fn s47_target_above_instances_for_longer_than_provision_time_is_decreased() {
    let nodes: Vec<_> = (1..=3)
        .map(|i| node(&format!("g-{i}"), at(0), true))
        .collect();
    let obs = || observe(group("g", 0, 10, 5), &nodes, vec![]);
    let mut w = default_world();
    assert!(w.update(at(0), &[obs()]).incorrect_sizes_to_fix.is_empty());
    assert!(w.update(at(10), &[obs()]).incorrect_sizes_to_fix.is_empty());
    let report = w.update(at(16), &[obs()]);
    assert_eq!(report.incorrect_sizes_to_fix.len(), 1);
    assert_eq!(report.incorrect_sizes_to_fix[0].group_id, "g");
    assert_eq!(report.incorrect_sizes_to_fix[0].delta, -2);
}

/// Checks docs/behaviour.md CS-47.
#[test]
fn incorrect_size_clock_restarts_when_the_numbers_change() {
    let nodes: Vec<_> = (1..=3)
        .map(|i| node(&format!("g-{i}"), at(0), true))
        .collect();
    let mut w = default_world();
    w.update(at(0), &[observe(group("g", 0, 10, 5), &nodes, vec![])]);
    w.update(at(10), &[observe(group("g", 0, 10, 6), &nodes, vec![])]);
    let report = w.update(at(16), &[observe(group("g", 0, 10, 6), &nodes, vec![])]);
    assert!(
        report.incorrect_sizes_to_fix.is_empty(),
        "target changed at minute 10: only 6 minutes"
    );
    let report = w.update(at(26), &[observe(group("g", 0, 10, 6), &nodes, vec![])]);
    assert_eq!(report.incorrect_sizes_to_fix[0].delta, -3);

    // A correct size forgets the record.
    let report = w.update(at(27), &[observe(group("g", 0, 10, 3), &nodes, vec![])]);
    assert!(report.incorrect_sizes_to_fix.is_empty());
}

/// Checks docs/behaviour.md CS-47.
#[test]
fn more_registered_nodes_than_target_is_never_fixed_by_decreasing() {
    let nodes: Vec<_> = (1..=3)
        .map(|i| node(&format!("g-{i}"), at(0), true))
        .collect();
    let mut w = default_world();
    w.update(at(0), &[observe(group("g", 0, 10, 2), &nodes, vec![])]);
    let report = w.update(at(30), &[observe(group("g", 0, 10, 2), &nodes, vec![])]);
    assert!(report.incorrect_sizes_to_fix.is_empty());
}

fn cluster_with_unready(total: usize, unready: usize) -> Vec<Arc<Node>> {
    (0..total)
        .map(|i| node(&format!("n-{i}"), at(0), i >= unready))
        .collect()
}

/// docs/behaviour.md CS-64.
#[test]
fn s64_ten_unready_of_twenty_is_unhealthy() {
    let mut w = default_world();
    let nodes = cluster_with_unready(20, 10);
    let report = w.update(at(60), &[observe(group("g", 0, 30, 20), &nodes, vec![])]);
    assert_eq!(report.total.unready, 10);
    assert!(!report.cluster_healthy);
    assert!(!w.registry.is_cluster_healthy());
    let event = report.cluster_unhealthy_event().expect("ClusterUnhealthy");
    assert!(event.warning && event.reason == "ClusterUnhealthy");
    assert!(event.message.contains("10 of 20"), "{}", event.message);
}

/// docs/behaviour.md CS-65.
#[test]
fn s65_three_unready_of_four_is_still_healthy() {
    let mut w = default_world();
    let nodes = cluster_with_unready(4, 3);
    let report = w.update(at(60), &[observe(group("g", 0, 30, 4), &nodes, vec![])]);
    assert!(report.cluster_healthy);
    assert!(report.cluster_unhealthy_event().is_none());
    let nodes = cluster_with_unready(10, 4);
    let report = w.update(at(60), &[observe(group("g", 0, 30, 10), &nodes, vec![])]);
    assert!(
        report.cluster_healthy,
        "4 of 10 is more than 3 but not more than 45 %"
    );
    let nodes = cluster_with_unready(10, 5);
    let report = w.update(at(60), &[observe(group("g", 0, 30, 10), &nodes, vec![])]);
    assert!(
        !report.cluster_healthy,
        "5 of 10: more than 3 and more than 45 %"
    );
}

/// Checks docs/behaviour.md CS-65.
#[test]
fn not_started_nodes_do_not_count_as_unready_for_health() {
    let mut w = default_world();
    let nodes: Vec<_> = (0..10)
        .map(|i| node(&format!("n-{i}"), at(55), false))
        .collect();
    let report = w.update(at(60), &[observe(group("g", 0, 30, 10), &nodes, vec![])]);
    assert_eq!(report.total.not_started, 10);
    assert_eq!(report.total.unready, 0);
    assert!(report.cluster_healthy);
    let report = w.update(at(71), &[observe(group("g", 0, 30, 10), &nodes, vec![])]);
    assert_eq!(
        report.total.unready, 10,
        "older than the max startup time: unready"
    );
    assert!(!report.cluster_healthy);
}

/// Checks docs/behaviour.md CS-102.
#[test]
fn startup_tainted_nodes_start_then_turn_unready_while_status_taints_stay_ready() {
    let mut options = AutoscalingOptions::default();
    options.set("status-taint", "example.com/degraded").unwrap();
    let mut w = World::new(options);
    let startup = with_taint(
        &node("g-1", at(0), true),
        "startup-taint.cluster-autoscaler.kubernetes.io/cni",
    );
    let status = with_taint(&node("g-2", at(0), true), "example.com/degraded");
    let obs = || {
        observe(
            group("g", 0, 5, 2),
            &[startup.clone(), status.clone()],
            vec![],
        )
    };
    let counts = w.update(at(5), &[obs()]).group("g").unwrap().counts;
    assert_eq!(
        (counts.ready, counts.not_started, counts.unready),
        (1, 1, 0)
    );
    let counts = w.update(at(20), &[obs()]).group("g").unwrap().counts;
    assert_eq!(
        (counts.ready, counts.not_started, counts.unready),
        (1, 0, 1)
    );
}

/// Checks docs/behaviour.md CS-102.
#[test]
fn gpu_nodes_without_gpus_are_resource_unready() {
    let options = AutoscalingOptions::default();
    let mut w = World {
        registry: ClusterStateRegistry::new(&options).with_gpu_label("accelerator"),
        backoff: NodeGroupBackoff::default(),
        options,
    };
    let mut gpu = (*node("g-1", at(0), true)).clone();
    gpu.labels.insert("accelerator".into(), "nvidia-t4".into());
    let missing = Arc::new(gpu.clone());
    gpu.allocatable.set(NVIDIA_GPU, 1);
    let with_gpu = Arc::new(Node {
        name: "g-2".into(),
        provider_id: "g-2".into(),
        ..gpu
    });
    let counts = w
        .update(
            at(30),
            &[observe(group("g", 0, 5, 2), &[missing, with_gpu], vec![])],
        )
        .group("g")
        .unwrap()
        .counts;
    assert_eq!(
        (counts.ready, counts.unready, counts.resource_unready),
        (1, 1, 1)
    );
}

/// Checks docs/behaviour.md SD-111.
#[test]
fn nodes_without_an_instance_or_with_the_deletion_taint_are_being_deleted() {
    let mut w = default_world();
    let kept = node("g-1", at(0), true);
    let gone = node("g-2", at(0), true);
    let observation = GroupObservation::new(
        group("g", 0, 5, 1),
        vec![Instance::running("g-1")],
        vec![kept.clone(), gone.clone()],
    );
    let counts = w.update(at(30), &[observation]).group("g").unwrap().counts;
    assert_eq!((counts.ready, counts.being_deleted), (1, 1));

    // Without instance information, the ToBeDeleted taint decides.
    let tainted = with_taint(&gone, TO_BE_DELETED);
    let mut observation = GroupObservation::new(group("g", 0, 5, 1), vec![], vec![kept, tainted]);
    observation.instances_known = false;
    let counts = w.update(at(31), &[observation]).group("g").unwrap().counts;
    assert_eq!((counts.ready, counts.being_deleted), (1, 1));
}

/// Checks docs/behaviour.md CS-65.
#[test]
fn suspended_nodes_are_counted_apart_and_are_not_unready() {
    let mut w = default_world();
    let ready = node("g-1", at(0), true);
    let mut paused = node("g-2", at(0), false);
    Arc::make_mut(&mut paused).conditions.suspended = true;
    let observation = GroupObservation::new(
        group("g", 0, 5, 2),
        vec![Instance::running("g-1"), Instance::running("g-2")],
        vec![ready, paused],
    );
    let report = w.update(at(30 * 60), &[observation]);
    let counts = report.group("g").unwrap().counts;
    assert_eq!((counts.ready, counts.suspended, counts.unready), (1, 1, 0));
    assert!(report.cluster_healthy);
}

/// Checks docs/behaviour.md CS-106.
#[test]
fn group_health() {
    let mut w = default_world();
    // Ten nodes that should all be there and none ready: unhealthy.
    let nodes: Vec<_> = (0..10)
        .map(|i| node(&format!("g-{i}"), at(0), false))
        .collect();
    let report = w.update(at(60), &[observe(group("g", 0, 20, 10), &nodes, vec![])]);
    assert!(!report.group("g").unwrap().healthy);
    assert!(!w.registry.is_group_healthy("g"));
    // Three missing is tolerated.
    let nodes = cluster_with_unready(10, 3);
    w.update(at(60), &[observe(group("g", 0, 20, 10), &nodes, vec![])]);
    assert!(w.registry.is_group_healthy("g"));

    // Without registered nodes: healthy at target 0, or while a scale-up from zero is under way.
    w.update(at(60), &[observe(group("empty", 0, 5, 0), &[], vec![])]);
    assert!(w.registry.is_group_healthy("empty"));
    w.update(at(60), &[observe(group("empty", 0, 5, 2), &[], vec![])]);
    assert!(!w.registry.is_group_healthy("empty"));
    w.registry.register_scale_up("empty", 2, at(60));
    w.update(at(61), &[observe(group("empty", 0, 5, 2), &[], vec![])]);
    assert!(w.registry.is_group_healthy("empty"));
    assert!(
        !w.registry.is_group_healthy("unknown"),
        "groups never observed are not healthy"
    );
}

/// Checks docs/behaviour.md CS-103.
#[test]
fn scale_down_requests_widen_the_acceptable_maximum_for_five_minutes() {
    let mut w = default_world();
    let nodes = [node("g-1", at(0), true), node("g-2", at(0), true)];
    w.registry.register_scale_down("g", "g-2", at(10));
    let report = w.update(at(11), &[observe(group("g", 0, 5, 1), &nodes, vec![])]);
    assert_eq!(report.group("g").unwrap().acceptable_max, 2);
    let report = w.update(at(16), &[observe(group("g", 0, 5, 1), &nodes, vec![])]);
    assert_eq!(report.group("g").unwrap().acceptable_max, 1);
}

fn status(
    w: &World,
    now: Timestamp,
    report: &ClusterStateReport,
    candidates: &BTreeMap<String, usize>,
    previous: Option<&StatusReport>,
) -> StatusReport {
    StatusReport::build(StatusInput {
        now,
        cluster_state: report,
        backoff: &w.backoff,
        scale_down_candidates: candidates,
        initializing: None,
        missing_permissions: &[],
        previous,
    })
}

/// docs/behaviour.md ST-94.
#[test]
fn s94_status_content_after_an_iteration() {
    let mut w = default_world();
    let nodes = [node("g-1", at(0), true), node("g-2", at(0), false)];
    let report = w.update(
        at(30),
        &[observe(group("g", 1, 10, 3), &nodes, vec![creating("g-3")])],
    );
    let candidates = BTreeMap::from([("g".to_string(), 1)]);
    let status = status(&w, at(30), &report, &candidates, None);
    let yaml = render_status_yaml(&status);
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(doc["autoscalerStatus"].as_str(), Some("Running"));
    assert_eq!(doc["time"].as_str(), Some("1970-01-01 00:30:00 +0000 UTC"));
    let health = &doc["clusterWide"]["health"];
    assert_eq!(health["status"].as_str(), Some("Healthy"));
    assert_eq!(
        health["nodeCounts"]["registered"]["total"].as_u64(),
        Some(2)
    );
    assert_eq!(
        health["nodeCounts"]["registered"]["ready"].as_u64(),
        Some(1)
    );
    assert_eq!(
        health["nodeCounts"]["registered"]["unready"]["total"].as_u64(),
        Some(1)
    );
    assert_eq!(health["nodeCounts"]["unregistered"].as_u64(), Some(1));
    assert_eq!(
        health["lastProbeTime"].as_str(),
        Some("1970-01-01T00:30:00Z")
    );
    assert_eq!(
        doc["clusterWide"]["scaleDown"]["status"].as_str(),
        Some("CandidatesPresent")
    );
    assert_eq!(
        doc["clusterWide"]["scaleDown"]["candidates"].as_u64(),
        Some(1)
    );
    let g = &doc["nodeGroups"][0];
    assert_eq!(g["name"].as_str(), Some("g"));
    assert_eq!(g["health"]["cloudProviderTarget"].as_u64(), Some(3));
    assert_eq!(g["health"]["minSize"].as_u64(), Some(1));
    assert_eq!(g["health"]["maxSize"].as_u64(), Some(10));
    assert_eq!(g["scaleUp"]["status"].as_str(), Some("NoActivity"));
}

/// docs/behaviour.md ST-95.
#[test]
fn s95_backed_off_group_shows_backoff_with_the_last_error() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 1, at(0));
    let long_message = "quota ".repeat(200);
    let ready = node("g-0", at(0), true);
    let observation = GroupObservation::new(
        group("g", 0, 10, 2),
        vec![
            Instance::running("g-0"),
            Instance {
                id: "g-1".into(),
                status: Some(InstanceStatus {
                    state: InstanceState::Creating,
                    error: Some(InstanceErrorInfo {
                        class: ErrorClass::OutOfResources,
                        code: "QUOTA_EXCEEDED".into(),
                        message: long_message,
                    }),
                }),
            },
        ],
        vec![ready],
    );
    let report = w.update(at(1), &[observation]);
    let status = status(&w, at(1), &report, &BTreeMap::new(), None);
    let group_status = status.group("g").unwrap();
    assert_eq!(group_status.scale_up.status, ScaleUpStatus::Backoff);
    let info = group_status.scale_up.backoff_info.as_ref().unwrap();
    assert_eq!(info.error_code, "QUOTA_EXCEEDED");
    assert_eq!(info.error_message.chars().count(), 500);
    assert!(info.error_message.ends_with("<truncated>"));
    let yaml = render_status_yaml(&status);
    assert!(yaml.contains("errorCode: QUOTA_EXCEEDED"), "{yaml}");
}

/// Checks docs/behaviour.md ST-95.
#[test]
fn scale_up_status_precedence_in_progress_over_unhealthy_over_backoff() {
    let mut w = default_world();
    w.registry.register_scale_up("g", 1, at(0));
    let report = w.update(
        at(1),
        &[observe(
            group("g", 0, 10, 2),
            &[node("g-1", at(0), true)],
            vec![],
        )],
    );
    let s = status(&w, at(1), &report, &BTreeMap::new(), None);
    assert_eq!(
        s.group("g").unwrap().scale_up.status,
        ScaleUpStatus::InProgress
    );
    assert_eq!(s.cluster_wide.scale_up.status, ScaleUpStatus::InProgress);
    assert_eq!(
        s.cluster_wide.scale_down.status,
        ScaleDownStatus::NoCandidates
    );

    let mut w = default_world();
    w.backoff.backoff(
        "g",
        at(0),
        ferroscale_core::backoff::BackoffReason::new(
            ErrorClass::Other,
            "cloudProviderError",
            "boom",
        ),
    );
    let unready: Vec<_> = (0..10)
        .map(|i| node(&format!("g-{i}"), at(0), false))
        .collect();
    let report = w.update(at(30), &[observe(group("g", 0, 20, 10), &unready, vec![])]);
    let s = status(&w, at(1), &report, &BTreeMap::new(), None);
    assert_eq!(
        s.group("g").unwrap().scale_up.status,
        ScaleUpStatus::Unhealthy
    );
    assert!(s.group("g").unwrap().scale_up.backoff_info.is_none());
}

/// docs/behaviour.md ST-96.
#[test]
fn s96_transition_time_changes_only_with_the_status() {
    let mut w = default_world();
    let ready = [node("g-1", at(0), true)];
    let report = w.update(at(30), &[observe(group("g", 0, 10, 1), &ready, vec![])]);
    let first = status(&w, at(30), &report, &BTreeMap::new(), None);
    let report = w.update(at(31), &[observe(group("g", 0, 10, 1), &ready, vec![])]);
    let second = status(&w, at(31), &report, &BTreeMap::new(), Some(&first));
    let g = &second.group("g").unwrap().scale_down;
    assert_eq!(g.times.last_probe_time, at(31));
    assert_eq!(g.times.last_transition_time, at(30), "unchanged status");
    assert_eq!(
        second.cluster_wide.health.times.last_transition_time,
        at(30)
    );

    let candidates = BTreeMap::from([("g".to_string(), 1)]);
    let third = status(&w, at(32), &report, &candidates, Some(&second));
    let g = &third.group("g").unwrap().scale_down;
    assert_eq!(g.status, ScaleDownStatus::CandidatesPresent);
    assert_eq!(g.times.last_transition_time, at(32), "status changed");
    assert_eq!(
        third.cluster_wide.scale_down.times.last_transition_time,
        at(32)
    );
    assert_eq!(
        third.cluster_wide.health.times.last_transition_time,
        at(30),
        "health did not change"
    );
}

/// One random node: (created minutes ago, Ready, startup taint, deletion taint, has instance).
type RandomNode = (i64, bool, bool, bool, bool);
/// One random group: (min, target, nodes, extra instances, instances known, scale-up registered).
/// Extra instance kinds: 0 = no status, 1 = creating, 2 = deleting, 3 = failed.
type RandomGroup = (usize, usize, Vec<RandomNode>, Vec<u8>, bool, bool);

fn arb_group() -> impl Strategy<Value = RandomGroup> {
    (
        0usize..5,
        0usize..15,
        prop::collection::vec(
            (
                0i64..60,
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            ),
            0..8,
        ),
        prop::collection::vec(0u8..4, 0..5),
        any::<bool>(),
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn update_never_panics_and_counts_add_up(
        groups in prop::collection::vec(arb_group(), 1..4),
        loops in 1usize..4,
        step_minutes in 0i64..20,
    ) {
        let mut w = default_world();
        for l in 0..loops {
            let now = at(60 + l as i64 * step_minutes);
            let mut observations = Vec::new();
            for (gi, (min, target, nodes, extra, instances_known, scaling)) in groups.iter().enumerate() {
                let id = format!("g{gi}");
                if *scaling && l == 0 {
                    w.registry.register_scale_up(&id, *target, at(60));
                }
                let mut instances = Vec::new();
                let mut node_objects = Vec::new();
                for (ni, (age, ready, startup, deleting, has_instance)) in nodes.iter().enumerate() {
                    let mut n = (*node(&format!("{id}-n{ni}"), now - Duration::from_secs(*age as u64 * 60), *ready)).clone();
                    if *startup {
                        n.taints.push(Taint::new("startup-taint.cluster-autoscaler.kubernetes.io/x", "", TaintEffect::NoSchedule));
                    }
                    if *deleting {
                        n.taints.push(Taint::new(TO_BE_DELETED, "", TaintEffect::NoSchedule));
                    }
                    if *has_instance {
                        instances.push(Instance::running(n.provider_id.clone()));
                    }
                    node_objects.push(Arc::new(n));
                }
                for (ii, kind) in extra.iter().enumerate() {
                    let iid = format!("{id}-i{ii}");
                    instances.push(match kind {
                        0 => Instance { id: iid, status: None },
                        1 => creating(&iid),
                        2 => Instance { id: iid, status: Some(InstanceStatus { state: InstanceState::Deleting, error: None }) },
                        _ => failed(&iid, ErrorClass::OutOfResources, "STOCKOUT"),
                    });
                }
                let mut o = GroupObservation::new(group(&id, *min, 20, *target), instances, node_objects);
                o.instances_known = *instances_known;
                observations.push(o);
            }
            let report = w.update(now, &observations);
            let all_nodes: usize = observations.iter().map(|o| o.nodes.len()).sum();
            prop_assert_eq!(report.total.registered, all_nodes);
            for (state, o) in report.groups.iter().zip(&observations) {
                let c = state.counts;
                prop_assert_eq!(c.registered, o.nodes.len());
                prop_assert_eq!(c.registered, c.ready + c.unready + c.not_started + c.suspended + c.being_deleted);
                prop_assert!(c.resource_unready <= c.unready);
                prop_assert!(state.upcoming <= state.target_size);
                prop_assert!(state.registered_upcoming.len() <= c.not_started);
                prop_assert!(state.acceptable_min <= state.target_size);
                prop_assert!(state.acceptable_max >= state.target_size);
                let deleted = report.long_unregistered_to_delete.iter().filter(|d| d.group_id == state.group_id).count();
                prop_assert!(deleted <= state.target_size.saturating_sub(state.min_size));
                prop_assert!(deleted <= c.long_unregistered);
            }
            for fix in &report.incorrect_sizes_to_fix {
                prop_assert!(fix.delta < 0);
            }
            let totals = report.groups.iter().fold(0, |acc, g| acc + g.counts.ready);
            prop_assert_eq!(report.total.ready, totals);
        }
    }
}
