//! CapacityBuffers through the whole loop (docs/capacity-buffers.md): the controller writes
//! their statuses, their virtual pods make scale-up add the spare capacity before any real pod
//! asks for it, and scale-down keeps the node that holds it.

mod loop_fakes;

use std::sync::Arc;
use std::time::Duration;

use ferroscale_capacity::buffers::{PROVISIONING, READY_FOR_PROVISIONING};
use ferroscale_core::autoscaler::{Autoscaler, PlannedAction};
use ferroscale_core::events::EventObject;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::capacity::{
    ACTIVE_CAPACITY_STRATEGY, CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus,
    PodTemplate, ScalableObject, ScalableRef, find_condition,
};
use ferroscale_model::taints::DELETION_CANDIDATE;
use ferroscale_model::{Pod, Resources};
use loop_fakes::*;

fn buffers_on() -> AutoscalingOptions {
    AutoscalingOptions {
        capacity_buffer_controller_enabled: true,
        capacity_buffer_pod_injection_enabled: true,
        ..AutoscalingOptions::default()
    }
}

fn shape(cpu_milli: i64) -> Arc<Pod> {
    let mut pod = Pod::new("team", "shape");
    pod.requests = Resources::new(cpu_milli, 1 << 30);
    Arc::new(pod)
}

fn buffer(name: &str, spec: CapacityBufferSpec) -> Arc<CapacityBuffer> {
    Arc::new(CapacityBuffer {
        namespace: "team".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 1,
        creation_time: t(0),
        spec,
        status: CapacityBufferStatus::default(),
    })
}

/// A full node `n0` (500m free) in group `pool` (0..10, 4-core nodes), and a buffer of one
/// 1-CPU pod from the PodTemplate `spare-shape`.
fn cluster_with_a_buffer() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    cluster.add_pod(pod_on("base", "n0", 3500));
    {
        let mut state = cluster.state();
        state.capacity.pod_templates.push(Arc::new(PodTemplate {
            namespace: "team".into(),
            name: "spare-shape".into(),
            uid: "uid-tpl".into(),
            generation: 3,
            pod: shape(1000),
        }));
        state.capacity.buffers.push(buffer(
            "spare",
            CapacityBufferSpec {
                pod_template_ref: Some("spare-shape".into()),
                replicas: Some(1),
                ..CapacityBufferSpec::default()
            },
        ));
    }
    (log, cloud, cluster)
}

fn status_of(cluster: &FakeCluster, name: &str) -> CapacityBufferStatus {
    cluster
        .state()
        .capacity
        .buffers
        .iter()
        .find(|b| b.name == name)
        .expect("buffer exists")
        .status
        .clone()
}

/// docs/capacity-buffers.md CB-101, CB-102, CB-108, CB-111, CB-112: the buffer's status is
/// written, its virtual pod makes scale-up add a node though no real pod is pending, and once
/// that node exists the virtual pod holds it: it is never unneeded (the pod fits nowhere else),
/// no second node is asked for, no event names the virtual pod, and `readyReplicas` says the
/// capacity is there.
#[test]
fn a_buffer_adds_a_spare_node_that_scale_down_keeps() {
    let (log, cloud, cluster) = cluster_with_a_buffer();
    let options = buffers_on();
    let quiet_for = options.scale_down_delay_after_add + options.scale_down_unneeded_time * 2;
    let mut autoscaler = Autoscaler::new(options, 5);

    let mut now = t(100);
    run(&mut autoscaler, &cloud, &cluster, now);
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        ["cloud.increase_size pool 1"]
    );
    let status = status_of(&cluster, "spare");
    assert_eq!(status.pod_template_ref.as_deref(), Some("spare-shape"));
    assert_eq!(status.pod_template_generation, Some(3));
    assert_eq!(status.replicas, Some(1));
    assert_eq!(
        status.provisioning_strategy.as_deref(),
        Some(ACTIVE_CAPACITY_STRATEGY)
    );
    assert!(
        find_condition(&status.conditions, READY_FOR_PROVISIONING).is_some_and(|c| c.is_true())
    );
    let provisioning = find_condition(&status.conditions, PROVISIONING).expect("Provisioning set");
    assert!(provisioning.is_true());
    assert_eq!(provisioning.reason, "FakePodsInjected");
    assert_eq!(
        status.ready_replicas,
        Some(0),
        "the node does not exist yet"
    );

    now = now + Duration::from_secs(60);
    let mut fresh = node("new-0", 4000, 16 << 30);
    fresh.creation_time = now;
    cloud.add_instance("pool", &fresh);
    cluster.add_node(fresh);

    let until = now + quiet_for;
    while now < until {
        now = now + Duration::from_secs(10);
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        let plan = outcome.scale_down.as_ref().expect("scale-down ran");
        assert!(
            plan.unneeded.is_empty(),
            "unneeded at {now:?}: {:?}",
            plan.unneeded
        );
    }
    assert_eq!(
        calls(&log, "cloud.increase_size").len(),
        1,
        "one spare node"
    );
    assert!(calls(&log, "cloud.delete").is_empty());
    assert!(
        !cluster
            .node("new-0")
            .expect("new-0")
            .has_taint(DELETION_CANDIDATE)
    );
    assert_eq!(status_of(&cluster, "spare").ready_replicas, Some(1));
    let named_virtual =
        cluster.state().events.iter().any(
            |e| matches!(&e.object, EventObject::Pod(key) if key.contains("capacity-buffer-")),
        );
    assert!(!named_virtual, "no event names a virtual pod");
    // Statuses are written when they change, not every loop: the controller's, the
    // Provisioning condition and readyReplicas 0, then readyReplicas 1.
    assert_eq!(calls(&log, "kube.update_capacity_buffer_status").len(), 4);
}

/// docs/capacity-buffers.md CB-106: with the features off (the default) a buffer is ignored.
#[test]
fn buffers_do_nothing_when_the_features_are_off() {
    let (log, cloud, cluster) = cluster_with_a_buffer();
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 5);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    assert!(calls(&log, "kube.update_capacity_buffer_status").is_empty());
    assert_eq!(
        status_of(&cluster, "spare"),
        CapacityBufferStatus::default()
    );
}

/// docs/capacity-buffers.md CB-107: with `--dry-run` the buffer is planned for, and nothing is
/// written.
#[test]
fn dry_run_plans_for_buffers_without_writing() {
    let (log, cloud, cluster) = cluster_with_a_buffer();
    let mut options = buffers_on();
    options.dry_run = true;
    let mut autoscaler = Autoscaler::new(options, 5);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert!(
        outcome
            .planned_actions
            .contains(&PlannedAction::IncreaseSize {
                group_id: "pool".into(),
                delta: 1
            })
    );
    assert!(
        calls(&log, "kube.").is_empty(),
        "{:?}",
        calls(&log, "kube.")
    );
    assert_eq!(
        status_of(&cluster, "spare"),
        CapacityBufferStatus::default()
    );
}

/// docs/capacity-buffers.md CB-104: a buffer whose template is missing is not ready, says why,
/// asks for nothing, and its status is written once (and its readyReplicas, 0, once).
#[test]
fn a_buffer_without_its_template_is_not_ready() {
    let (log, cloud, cluster) = cluster_with_a_buffer();
    cluster.state().capacity.pod_templates.clear();
    let mut autoscaler = Autoscaler::new(buffers_on(), 5);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    run(&mut autoscaler, &cloud, &cluster, t(110));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    let status = status_of(&cluster, "spare");
    let ready = find_condition(&status.conditions, READY_FOR_PROVISIONING).expect("condition");
    assert!(!ready.is_true());
    assert_eq!(ready.reason, "error");
    assert_eq!(ready.message, "podtemplate \"spare-shape\" not found");
    assert_eq!((status.pod_template_ref, status.replicas), (None, None));
    assert_eq!(status.ready_replicas, Some(0));
    assert_eq!(calls(&log, "kube.update_capacity_buffer_status").len(), 2);
}

/// docs/capacity-buffers.md CB-103, CB-105: a `scalableRef` buffer of 20 % of a 10-replica
/// Deployment gets a managed PodTemplate with the Deployment's pod shape and two virtual pods,
/// which fit one new node; without `--capacity-buffer-ready-replicas-enabled` no readyReplicas
/// is written.
#[test]
fn a_scalable_buffer_uses_a_managed_template_and_a_percentage() {
    let (log, cloud, cluster) = cluster_with_a_buffer();
    let reference = ScalableRef {
        api_group: "apps".into(),
        kind: "Deployment".into(),
        name: "web".into(),
    };
    {
        let mut state = cluster.state();
        state.capacity.buffers = vec![buffer(
            "web-headroom",
            CapacityBufferSpec {
                scalable_ref: Some(reference.clone()),
                percentage: Some(20),
                ..CapacityBufferSpec::default()
            },
        )];
        state.capacity.scalables.push(Arc::new(ScalableObject {
            namespace: "team".into(),
            reference,
            replicas: 10,
            ready_replicas: Some(10),
            pod: Some(shape(1500)),
            error: None,
        }));
    }
    let mut options = buffers_on();
    options.capacity_buffer_ready_replicas_enabled = false;
    let mut autoscaler = Autoscaler::new(options, 5);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "kube.ensure_buffer_pod_template"),
        ["kube.ensure_buffer_pod_template team/capacitybuffer-web-headroom-pod-template"]
    );
    let status = status_of(&cluster, "web-headroom");
    assert_eq!(
        status.pod_template_ref.as_deref(),
        Some("capacitybuffer-web-headroom-pod-template")
    );
    assert_eq!(status.pod_template_generation, Some(1));
    assert_eq!(status.replicas, Some(2));
    assert_eq!(status.ready_replicas, None);
    let plan = outcome.scale_up.expect("scale-up ran");
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        ["cloud.increase_size pool 1"]
    );
    assert!(plan.pods_not_helped.is_empty());
}
