/// Group `full` (4-core nodes) at its max size and group `small` (4-core template) with room; a
/// pending pod of 6 cores fits neither.
fn pod_too_big_for_a_full_group() -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("full", 0, 1);
    cloud.add_group("small", 0, 10);
    let cluster = FakeCluster::new(log);
    let f0 = node("f0", 4000, 16 << 30);
    cloud.add_instance("full", &f0);
    cluster.add_node(f0);
    cluster.add_pod(pending_pod("big", 6000, t(0)));
    (cloud, cluster)
}

fn reasons_for_big(outcome: &ferroscale_core::autoscaler::LoopOutcome) -> Vec<(String, String)> {
    let plan = outcome.scale_up.as_ref().expect("scale-up ran");
    plan.pods_not_helped
        .iter()
        .find(|v| v.pod == "default/big")
        .expect("big was not helped")
        .per_group
        .clone()
}

/// docs/behaviour.md SU-109: by default a skipped group is reported with its skip reason; with
/// `--scaleup-simulation-for-skipped-node-groups-enabled` the pod is also checked against the
/// skipped group's template and reported with the filter that rejects it there.
#[test]
fn skipped_groups_are_simulated_for_the_pod_messages_when_enabled() {
    let (cloud, cluster) = pod_too_big_for_a_full_group();
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    let reasons = reasons_for_big(&run(&mut autoscaler, &cloud, &cluster, t(100)));
    let full = reasons.iter().find(|(g, _)| g == "full").expect("full");
    assert_eq!(full.1, "max node group size reached");

    let (cloud, cluster) = pod_too_big_for_a_full_group();
    let flag = [("scaleup-simulation-for-skipped-node-groups-enabled", "true")];
    let mut autoscaler = Autoscaler::new(options(&flag), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    let reasons = reasons_for_big(&outcome);
    let full = reasons.iter().find(|(g, _)| g == "full").expect("full");
    let small = reasons.iter().find(|(g, _)| g == "small").expect("small");
    assert_eq!(full.1, small.1, "both name the filter: {reasons:?}");
    assert!(full.1.contains("cpu"), "{reasons:?}");
    let events = cluster.events_with("NotTriggerScaleUp");
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("2 Insufficient cpu")),
        "{events:?}"
    );
}

/// docs/behaviour.md SU-109: a pod that would fit a skipped group keeps that group's skip reason.
#[test]
fn skipped_group_that_would_fit_keeps_its_skip_reason() {
    let (cloud, cluster) = pod_too_big_for_a_full_group();
    cluster.add_pod(pending_pod("small-pod", 1000, t(0)));
    cloud
        .group("small")
        .failing
        .lock()
        .expect("lock")
        .insert("target_size");
    let flag = [("scaleup-simulation-for-skipped-node-groups-enabled", "true")];
    let mut autoscaler = Autoscaler::new(options(&flag), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    let plan = outcome.scale_up.as_ref().expect("scale-up ran");
    let verdict = plan
        .pods_not_helped
        .iter()
        .find(|v| v.pod == "default/small-pod")
        .expect("small-pod was not helped");
    assert!(
        verdict
            .per_group
            .iter()
            .any(|(g, r)| g == "full" && r == "max node group size reached"),
        "{verdict:?}"
    );
}
