//! Dynamic Resource Allocation through `run_once` with the in-memory contracts (docs/dra.md
//! DRA-120 to DRA-134): scale-up grows the group whose template has the devices a pending pod's
//! claim asks for, binpacking counts devices, a template built from a real node brings the node's
//! devices, a claim no template can satisfy is reported with the claim and the selector, and
//! scale-down measures nodes with devices by their devices and moves claims with their pods;
//! proactive scale-up's fake pods get their own copies of their sample's claims.

mod loop_fakes;

use std::sync::Arc;

use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome};
use ferroscale_core::cloud::NodeTemplate;
use ferroscale_core::kubernetes::WorkloadController;
use ferroscale_core::options::{AutoscalingOptions, OptionError};
use ferroscale_core::scale_down::UnremovableReason;
use ferroscale_model::{
    AllocatedDevice, ClaimAllocation, ClaimConsumer, ClaimSpec, Device, DeviceAttribute,
    DeviceClass, DeviceRequest, DeviceRequestKind, DeviceScope, ExactDeviceRequest, NodeOperator,
    NodeRequirement, NodeSelector, NodeSelectorTerm, Pod, PodClaimSource, PodResourceClaim,
    PodResourceClaimStatus, ResourceClaim, ResourceSlice,
};
use loop_fakes::*;

const DRIVER: &str = "gpu.example.com";
const CLASS: &str = "gpu.example.com";
const MODEL_H100: &str = "device.attributes[\"gpu.example.com\"].model == \"h100\"";

fn options(flags: &[(&str, &str)]) -> AutoscalingOptions {
    let mut options = AutoscalingOptions::default();
    for (flag, value) in flags {
        options.set(flag, value).expect("valid flag");
    }
    options.validate().expect("valid options");
    options
}

/// `count` devices of model t4, in pool `pool`, local to `node`.
fn slice(node: &str, pool: &str, count: usize) -> ResourceSlice {
    ResourceSlice {
        name: format!("{node}-{DRIVER}"),
        driver: DRIVER.into(),
        pool: pool.into(),
        pool_generation: 1,
        pool_slice_count: 1,
        scope: DeviceScope::Node(node.into()),
        per_device_node_selection: false,
        devices: (0..count)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                attributes: [(
                    format!("{DRIVER}/model"),
                    DeviceAttribute::String("t4".into()),
                )]
                .into(),
                ..Device::default()
            })
            .collect(),
    }
}

fn gpu_class() -> Arc<DeviceClass> {
    Arc::new(DeviceClass {
        name: CLASS.into(),
        selectors: vec![format!("device.driver == \"{DRIVER}\"")],
        extended_resource_name: None,
    })
}

/// An unallocated claim for one device of the GPU class, with `selectors` on the request.
fn claim(name: &str, selectors: &[&str]) -> ResourceClaim {
    ResourceClaim {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        spec: ClaimSpec {
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                kind: DeviceRequestKind::Exactly(ExactDeviceRequest {
                    device_class_name: CLASS.into(),
                    selectors: selectors.iter().map(|s| s.to_string()).collect(),
                    ..ExactDeviceRequest::default()
                }),
            }],
            constraints: Vec::new(),
        },
        ..ResourceClaim::default()
    }
}

/// `claim` allocated device `device` of `node`'s pool and reserved for `pod`.
fn allocated(mut claim: ResourceClaim, node: &str, device: &str, pod: &Pod) -> ResourceClaim {
    claim.allocation = Some(ClaimAllocation {
        devices: vec![AllocatedDevice {
            request: "gpu".into(),
            driver: DRIVER.into(),
            pool: node.into(),
            device: device.into(),
            admin_access: false,
        }],
        node_selector: Some(NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![NodeRequirement {
                    key: "metadata.name".into(),
                    operator: NodeOperator::In,
                    values: vec![node.into()],
                }],
            }],
        }),
    });
    claim.reserved_for = vec![ClaimConsumer {
        resource: "pods".into(),
        name: pod.name.to_string(),
        uid: pod.uid.to_string(),
    }];
    claim
}

/// `pod` using the claim named `claim`.
fn using(mut pod: Pod, claim: &str) -> Pod {
    pod.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Claim(claim.into()),
    });
    pod
}

/// Adds group `id` whose template has `cpu_milli` and `devices` local devices.
fn group(cloud: &mut FakeCloud, log: &CallLog, id: &str, cpu_milli: i64, devices: usize) {
    let name = format!("{id}-template");
    cloud.groups.push(Arc::new(FakeGroup {
        id: id.into(),
        min: 0,
        max: 10,
        target: Default::default(),
        instances: Default::default(),
        template: NodeTemplate {
            node: node(&name, cpu_milli, 16 << 30),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: if devices > 0 {
                vec![slice(&name, &name, devices)]
            } else {
                Vec::new()
            },
        },
        fail_delete: Default::default(),
        failing: Default::default(),
        log: log.clone(),
    }));
}

/// A CPU group of 4-core nodes without devices, a GPU group of 8-core nodes with `devices` devices
/// each, the GPU class, and a full node outside every group so the cluster is not empty.
fn two_groups(devices: usize) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    group(&mut cloud, &log, "cpu", 4000, 0);
    group(&mut cloud, &log, "gpu", 8000, devices);
    let cluster = FakeCluster::new(log.clone());
    cluster.add_node(node("n0", 4000, 16 << 30));
    cluster.add_pod(pod_on("base", "n0", 3900));
    cluster.state().dra.classes.push(gpu_class());
    (log, cloud, cluster)
}

fn increases(log: &CallLog) -> Vec<String> {
    let mut calls = calls(log, "cloud.increase_size");
    calls.sort();
    calls
}

fn add_claim(cluster: &FakeCluster, claim: ResourceClaim) {
    cluster.state().dra.claims.push(Arc::new(claim));
}

/// docs/dra.md DRA-125: a pending pod whose claim asks for a GPU grows the group whose template
/// has GPUs, although the expander prefers the CPU group (less waste) for the same pod without
/// a claim.
#[test]
fn a_gpu_claim_grows_the_group_whose_template_has_the_devices() {
    let flags = [("expander", "least-waste")];
    let (log, cloud, cluster) = two_groups(2);
    cluster.add_pod(pending_pod("train-0", 3000, t(0)));
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size cpu 1"]);

    let (log, cloud, cluster) = two_groups(2);
    add_claim(&cluster, claim("gpu-0", &[]));
    cluster.add_pod(using(pending_pod("train-0", 3000, t(0)), "gpu-0"));
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);
}

/// docs/dra.md DRA-128: a claim whose selector no template device passes helps no group, and the
/// pod's per-group reason names the claim and the selector.
#[test]
fn a_claim_no_template_can_satisfy_is_not_helped_and_says_why() {
    let (log, cloud, cluster) = two_groups(2);
    add_claim(&cluster, claim("gpu-0", &[MODEL_H100]));
    cluster.add_pod(using(pending_pod("train-0", 1000, t(0)), "gpu-0"));
    let outcome = run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert!(increases(&log).is_empty());
    let plan = outcome.scale_up.expect("scale-up ran");
    let verdict = plan
        .pods_not_helped
        .iter()
        .find(|v| v.pod == "default/train-0")
        .expect("the pod is not helped");
    let (_, gpu_reason) = verdict
        .per_group
        .iter()
        .find(|(group, _)| group == "gpu")
        .expect("a reason for the GPU group");
    assert!(gpu_reason.contains("default/gpu-0"), "{gpu_reason}");
    assert!(gpu_reason.contains("request gpu"), "{gpu_reason}");
    // The selector is quoted as a string literal.
    assert!(
        gpu_reason.contains(&format!("{MODEL_H100:?}")),
        "{gpu_reason}"
    );
    // The pod's event carries the same reason.
    let events = cluster.events_with("NotTriggerScaleUp");
    assert!(
        events.iter().any(|e| e.message.contains("default/gpu-0")),
        "{events:?}"
    );
}

/// docs/dra.md DRA-126: binpacking counts devices: four pods each claiming one device of a
/// template with two devices need two nodes, although their CPU fits on one.
#[test]
fn binpacking_counts_devices() {
    let (log, cloud, cluster) = two_groups(2);
    for i in 0..4 {
        let name = format!("gpu-{i}");
        add_claim(&cluster, claim(&name, &[]));
        cluster.add_pod(using(pending_pod(&format!("train-{i}"), 500, t(0)), &name));
    }
    run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 2"]);
}

/// docs/dra.md DRA-126: with `--fastpath-binpacking-enabled` pods with claims still run the full
/// filter: four pods sharing one claim (3 CPUs each, two fit a new 8-CPU node) need one node, as
/// the claim once allocated pins them to its devices; counting nodes arithmetically would ask for
/// two.
#[test]
fn pods_sharing_a_claim_never_take_the_binpacking_fast_path() {
    let (log, cloud, cluster) = two_groups(2);
    add_claim(&cluster, claim("shared", &[]));
    for i in 0..4 {
        cluster.add_pod(using(
            pending_pod(&format!("train-{i}"), 3000, t(0)),
            "shared",
        ));
    }
    run(
        &mut Autoscaler::new(options(&[("fastpath-binpacking-enabled", "true")]), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);
}

/// docs/dra.md DRA-122: a template built from a real node of the group carries the node's own
/// ResourceSlices, so a group whose provider template has no devices still grows for a GPU pod
/// when its real node publishes GPUs (both in use, so the pod cannot go there).
#[test]
fn a_template_from_a_real_node_carries_its_devices() {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    group(&mut cloud, &log, "gpu", 8000, 0);
    let cluster = FakeCluster::new(log.clone());
    cluster.state().dra.classes.push(gpu_class());
    let g1 = node("g1", 8000, 16 << 30);
    cloud.add_instance("gpu", &g1);
    cluster.add_node(g1);
    cluster
        .state()
        .dra
        .slices
        .push(Arc::new(slice("g1", "g1", 2)));
    for i in 0..2 {
        let pod = using(
            pod_on(&format!("busy-{i}"), "g1", 100),
            &format!("busy-{i}"),
        );
        let busy = allocated(
            claim(&format!("busy-{i}"), &[]),
            "g1",
            &format!("gpu-{i}"),
            &pod,
        );
        add_claim(&cluster, busy);
        cluster.add_pod(pod);
    }
    add_claim(&cluster, claim("gpu-0", &[]));
    cluster.add_pod(using(pending_pod("train-0", 1000, t(0)), "gpu-0"));
    run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(10_000),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);
}

/// docs/dra.md DRA-129: a new node that Kubernetes calls Ready but whose DRA driver has not
/// published its ResourceSlices yet is still starting: the pending claim pod waits for it instead
/// of growing the group a second time, the node is no example for the group's template, and once
/// the slices are there the node counts as ready.
#[test]
fn a_ready_node_without_its_devices_is_still_starting() {
    let (log, cloud, cluster) = two_groups(2);
    add_claim(&cluster, claim("gpu-0", &[]));
    cluster.add_pod(using(pending_pod("train-0", 3000, t(0)), "gpu-0"));
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);

    // The node registers and is Ready, but its devices are not published.
    let mut new = node("gpu-1", 8000, 16 << 30);
    new.creation_time = t(110);
    new.conditions.last_transition = Some(t(110));
    cloud.add_instance("gpu", &new);
    cluster.add_node(new);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(120));
    assert_eq!(
        increases(&log),
        vec!["cloud.increase_size gpu 1"],
        "no second node for the same pod"
    );
    let counts = outcome.cluster_state.group("gpu").unwrap().counts;
    assert_eq!((counts.ready, counts.not_started), (0, 1));

    // Ready for over a minute and still without devices: not an example of its group either,
    // whose template keeps the provider's devices.
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(200));
    let gpu = outcome.node_groups.iter().find(|g| g.id == "gpu").unwrap();
    let template = gpu.template.as_ref().unwrap();
    assert_eq!(template.resource_slices.len(), 1);
    assert_eq!(template.resource_slices[0].devices.len(), 2);
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);

    // Its driver publishes a complete pool: it is ready.
    cluster
        .state()
        .dra
        .slices
        .push(Arc::new(slice("gpu-1", "gpu-1", 2)));
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(210));
    let counts = outcome.cluster_state.group("gpu").unwrap().counts;
    assert_eq!((counts.ready, counts.not_started), (1, 0));
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 1"]);
}

/// docs/dra.md DRA-134, docs/behaviour.md SU-110: a GPU Deployment whose ReplicaSet wants four
/// replicas has created one, unschedulable, with a claim made from a ResourceClaimTemplate. With
/// `--enable-proactive-scaleup` the three replicas not created yet get fake pods with their own
/// copies of that claim, so one scale-up asks for the GPUs of all four (two nodes of two
/// devices), and every fake is helped, so the ReplicaSet is not backed off.
#[test]
fn fake_pods_of_a_gpu_deployment_get_their_own_claims_and_nodes() {
    let (log, cloud, cluster) = two_groups(2);
    let mut train = pending_pod("train-0", 1000, t(0));
    train.owner_references[0].name = "train".into();
    train.owner_references[0].uid = "uid-rs-train".into();
    train.resource_claims.push(PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Template("gpu-template".into()),
    });
    train.resource_claim_statuses.push(PodResourceClaimStatus {
        name: "gpu".into(),
        claim_name: Some("train-0-gpu-7xk2q".into()),
    });
    let mut own = claim("train-0-gpu-7xk2q", &[]);
    own.owner_pod_uid = Some(train.uid.to_string());
    add_claim(&cluster, own);
    cluster.add_pod(train);
    cluster.state().controllers.push(WorkloadController {
        kind: "ReplicaSet".into(),
        namespace: "default".into(),
        name: "train".into(),
        uid: "uid-rs-train".into(),
        replicas: Some(4),
    });
    let mut autoscaler = Autoscaler::new(options(&[("enable-proactive-scaleup", "true")]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 2"]);
    let plan = outcome.scale_up.expect("scale-up ran");
    assert!(
        plan.pods_not_helped.is_empty(),
        "no fake is left unhelped (and so backed off): {:?}",
        plan.pods_not_helped
    );
    // The cluster's objects are untouched: the copies live in the loop's snapshot only.
    assert_eq!(cluster.state().dra.claims.len(), 1);

    // The next loop injects the fakes again (the ReplicaSet is not backed off); they fit the
    // upcoming nodes with the real pod, so nothing more is asked.
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(110));
    assert_eq!(increases(&log), vec!["cloud.increase_size gpu 2"]);
    let plan = outcome.scale_up.expect("scale-up ran");
    assert!(
        plan.pods_not_helped.is_empty(),
        "{:?}",
        plan.pods_not_helped
    );
}

/// Group `gpu` with nodes `g1` and `g2` of four devices each; `g1_claims` pods on g1 and
/// `g2_claims` pods on g2 hold one allocated device each. Every pod is small, so CPU never
/// keeps a node.
fn drain_setup(g1_claims: usize, g2_claims: usize) -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("gpu", 0, 10);
    let cluster = FakeCluster::new(log);
    cluster.state().dra.classes.push(gpu_class());
    for (name, claims) in [("g1", g1_claims), ("g2", g2_claims)] {
        let n = node(name, 4000, 16 << 30);
        cloud.add_instance("gpu", &n);
        cluster.add_node(n);
        cluster
            .state()
            .dra
            .slices
            .push(Arc::new(slice(name, name, 4)));
        for i in 0..claims {
            let pod_name = format!("{name}-train-{i}");
            let pod = using(pod_on(&pod_name, name, 100), &pod_name);
            let held = allocated(claim(&pod_name, &[]), name, &format!("gpu-{i}"), &pod);
            add_claim(&cluster, held);
            cluster.add_pod(pod);
        }
    }
    cluster.state().controllers.push(WorkloadController {
        kind: "ReplicaSet".into(),
        namespace: "default".into(),
        name: "web".into(),
        uid: "uid-rs-web".into(),
        replicas: Some(8),
    });
    (cloud, cluster)
}

fn scale_down_loop(cloud: &FakeCloud, cluster: &FakeCluster) -> LoopOutcome {
    let mut autoscaler = Autoscaler::new(options(&[("scale-down-unneeded-time", "0s")]), 1);
    run(&mut autoscaler, cloud, cluster, t(10_000))
}

fn unneeded(outcome: &LoopOutcome, node: &str) -> bool {
    outcome
        .scale_down
        .as_ref()
        .is_some_and(|plan| plan.unneeded.iter().any(|u| u.node == node))
}

fn unremovable_reason(outcome: &LoopOutcome, node: &str) -> Option<UnremovableReason> {
    outcome.scale_down.as_ref().and_then(|plan| {
        plan.unremovable
            .iter()
            .find(|u| u.node == node)
            .map(|u| u.reason)
    })
}

/// docs/dra.md DRA-130: a node whose devices are allocated at or above the threshold stays even
/// at low CPU; the same node once its claim pods are gone can go.
#[test]
fn device_utilization_keeps_a_node_at_low_cpu() {
    // g1: three of four devices in use (75 %), 7.5 % of its CPU.
    let (cloud, cluster) = drain_setup(3, 3);
    let outcome = scale_down_loop(&cloud, &cluster);
    assert!(!unneeded(&outcome, "g1"));
    assert_eq!(
        unremovable_reason(&outcome, "g1"),
        Some(UnremovableReason::NotUnderutilized)
    );

    let (cloud, cluster) = drain_setup(0, 3);
    assert!(unneeded(&scale_down_loop(&cloud, &cluster), "g1"));
}

/// docs/dra.md DRA-132: the drain simulation allocates a moved pod's claim again on its
/// destination: g1's claim pod can move to g2 while g2 has a free device, and blocks g1's
/// removal, naming the pod, when it has none.
#[test]
fn a_claim_pod_moves_only_to_a_node_with_a_free_device() {
    // g2 has three of four devices in use (75 %): not a candidate itself, one device free.
    let (cloud, cluster) = drain_setup(1, 3);
    let outcome = scale_down_loop(&cloud, &cluster);
    assert!(unneeded(&outcome, "g1"), "{:?}", outcome.scale_down);

    // g2's four devices are all in use: g1's pod has nowhere to go.
    let (cloud, cluster) = drain_setup(1, 4);
    let outcome = scale_down_loop(&cloud, &cluster);
    assert!(!unneeded(&outcome, "g1"));
    let plan = outcome.scale_down.expect("scale-down ran");
    let blocked = plan
        .unremovable
        .iter()
        .find(|u| u.node == "g1")
        .expect("g1 is unremovable");
    assert_eq!(blocked.reason, UnremovableReason::NoPlaceToMovePods);
    assert_eq!(blocked.pod.as_deref(), Some("default/g1-train-0"));
}

/// docs/dra.md DRA-120: `--enable-dynamic-resource-allocation` is locked to true, as upstream:
/// true is accepted, false is refused naming the flag and the value.
#[test]
fn the_flag_accepts_true_and_refuses_false() {
    let mut o = AutoscalingOptions::default();
    o.set("enable-dynamic-resource-allocation", "true")
        .expect("true is accepted");
    assert_eq!(o, AutoscalingOptions::default());
    let err = o
        .set("enable-dynamic-resource-allocation", "false")
        .unwrap_err();
    assert!(
        matches!(&err, OptionError::InvalidValue { flag, value, .. }
            if flag == "enable-dynamic-resource-allocation" && value == "false"),
        "{err:?}"
    );
    assert!(err.to_string().contains("must be true"), "{err}");
    assert!(
        o.set("enable-dynamic-resource-allocation", "maybe")
            .is_err()
    );
}
