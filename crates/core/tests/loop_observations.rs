//! What a loop's outcome tells the metrics besides its decisions (docs/behaviour.md OBS-123 to
//! OBS-127): the accelerator labels of the groups scaled and the nodes removed, the taints of the
//! cluster's nodes, the deletions still pending, and what the scale-up's estimates worked on.

mod loop_fakes;

use std::time::Duration;

use ferroscale_core::accelerators::AcceleratorLabels;
use ferroscale_core::autoscaler::Autoscaler;
use ferroscale_core::cloud::NodeTemplate;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::resources::NVIDIA_GPU;
use ferroscale_model::{Node, Taint, TaintEffect};
use loop_fakes::*;

/// A node of the GPU group: labelled with the fake provider's GPU label, one GPU.
fn gpu_node(name: &str) -> Node {
    let mut gpu = node(name, 4000, 16 << 30);
    gpu.labels.insert("fake/gpu".into(), "tesla-t4".into());
    gpu.labels.insert(
        "node.kubernetes.io/instance-type".into(),
        "g4dn.xlarge".into(),
    );
    gpu.allocatable.set(NVIDIA_GPU, 1);
    gpu.capacity.set(NVIDIA_GPU, 1);
    gpu
}

/// Groups `cpu` (one node, `n0`, tainted `dedicated`) and `gpu` (empty, GPU template).
fn cloud_and_cluster() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("cpu", 0, 10);
    cloud.add_group_with_template(
        "gpu",
        0,
        10,
        NodeTemplate {
            node: gpu_node("gpu-template"),
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        },
    );
    let cluster = FakeCluster::new(log.clone());
    let mut n0 = node("n0", 4000, 16 << 30);
    n0.taints.push(Taint::new(
        "dedicated",
        "infra",
        TaintEffect::PreferNoSchedule,
    ));
    cloud.add_instance("cpu", &n0);
    cluster.add_node(n0);
    (log, cloud, cluster)
}

#[test]
fn a_gpu_scale_up_is_labelled_with_its_template_and_its_estimate_is_described() {
    let (log, cloud, cluster) = cloud_and_cluster();
    for name in ["train-1", "train-2"] {
        let mut pod = pending_pod(name, 1000, t(0));
        pod.requests.set(NVIDIA_GPU, 1);
        cluster.add_pod(pod);
    }
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size gpu 2"]
    );
    let gpu = AcceleratorLabels {
        gpu_resource_name: NVIDIA_GPU.into(),
        // The fake provider lists no GPU types.
        gpu_name: "not-listed".into(),
        dra_drivers: String::new(),
    };
    assert_eq!(outcome.group_accelerators.get("gpu"), Some(&gpu));
    assert_eq!(
        outcome.group_accelerators.get("cpu"),
        Some(&AcceleratorLabels::default())
    );
    let plan = outcome.scale_up.as_ref().expect("a scale-up plan");
    let gpu_estimate = plan
        .binpacking_estimates
        .iter()
        .find(|e| e.group_id == "gpu")
        .expect("the GPU group was estimated");
    assert_eq!(gpu_estimate.instance_type, "g4dn.xlarge");
    assert_eq!(gpu_estimate.cpu_capacity_milli, 4000);
    assert_eq!(gpu_estimate.namespaces, 1);
    assert_eq!(gpu_estimate.equivalence_groups, 1, "the two pods are equal");
    assert_eq!(plan.overflowing_controllers, 0);
    assert_eq!(outcome.node_taints.get("other"), Some(&1));
    assert_eq!(
        outcome.node_taints.get("ToBeDeletedByClusterAutoscaler"),
        Some(&0)
    );
    assert_eq!(outcome.pending_node_deletions, 0);
}

#[test]
fn a_removed_gpu_node_keeps_its_labels_and_is_pending_until_it_goes() {
    let (_log, cloud, cluster) = cloud_and_cluster();
    // n0 is busy: the GPU node is the only one to go.
    cluster.add_pod(pod_on("base", "n0", 3500));
    let idle = gpu_node("gpu-1");
    cloud.add_instance("gpu", &idle);
    cluster.add_node(idle);
    let mut options = AutoscalingOptions::default();
    options.set("scale-down-unneeded-time", "1m").expect("flag");
    options
        .set("node-delete-delay-after-taint", "5s")
        .expect("flag");
    let mut autoscaler = Autoscaler::new(options, 1);

    let mut now = t(1000);
    let mut pending_seen = 0;
    for _ in 0..30 {
        now = now + Duration::from_secs(10);
        let outcome = run(&mut autoscaler, &cloud, &cluster, now);
        pending_seen = pending_seen.max(outcome.pending_node_deletions);
        if let Some(deleted) = outcome.deleted_nodes.iter().find(|d| d.node == "gpu-1") {
            assert_eq!(deleted.group_id, "gpu");
            let labels = &outcome.deleted_node_accelerators["gpu-1"];
            assert_eq!(labels.gpu_resource_name, NVIDIA_GPU);
            assert_eq!(labels.gpu_name, "not-listed");
            assert_eq!(outcome.pending_node_deletions, 0, "nothing left pending");
            assert_eq!(
                pending_seen, 1,
                "pending between its taint and its deletion"
            );
            return;
        }
    }
    panic!("the idle GPU node was never removed");
}
