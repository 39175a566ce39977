//! CapacityQuotas through the whole loop (docs/capacity-quotas.md): with
//! `--capacity-quotas-enabled` a quota caps how many nodes a scale-up adds, the quota and the
//! status ConfigMap say so, and once the quota is used up (upcoming nodes included) the pods are
//! told which quota and resource stopped them.

mod loop_fakes;

use std::sync::Arc;

use ferroscale_core::autoscaler::Autoscaler;
use ferroscale_core::events::EventObject;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_core::scale_up::CAPACITY_QUOTA_LIMITED;
use ferroscale_model::capacity::CapacityQuota;
use ferroscale_model::labels::LabelSelector;
use ferroscale_model::quantity::Quantity;
use loop_fakes::*;

fn quota(name: &str, selector: Option<LabelSelector>, limits: &[(&str, &str)]) -> CapacityQuota {
    CapacityQuota {
        name: name.to_string(),
        uid: format!("uid-{name}"),
        generation: 1,
        selector,
        limits: limits
            .iter()
            .map(|(r, v)| (r.to_string(), Quantity::parse(v).expect("test quantity")))
            .collect(),
        conditions: Vec::new(),
    }
}

/// One 4-core node `n0` in group `pool` (0..10, 4-core nodes), four pending pods of 3 CPU that
/// need a node each, and the quotas given.
fn cluster_with(quotas: Vec<CapacityQuota>) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    cluster.add_pod(pod_on("base", "n0", 3500));
    for i in 0..4 {
        cluster.add_pod(pending_pod(&format!("burst-{i}"), 3000, t(0)));
    }
    cluster.state().capacity.quotas = quotas.into_iter().map(Arc::new).collect();
    (log, cloud, cluster)
}

fn enabled() -> AutoscalingOptions {
    AutoscalingOptions {
        capacity_quotas_enabled: true,
        ..AutoscalingOptions::default()
    }
}

/// docs/capacity-quotas.md CQ-107: a 12-core quota over every node, 4 cores used: the four-node
/// scale-up is capped at two, and the quota and the status ConfigMap say which quota and resource
/// capped it.
#[test]
fn a_quota_caps_the_scale_up_and_says_so() {
    let (log, cloud, cluster) = cluster_with(vec![quota("cpu-cap", None, &[("cpu", "12")])]);
    let mut autoscaler = Autoscaler::new(enabled(), 3);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 2"]
    );
    let events = cluster.events_with(CAPACITY_QUOTA_LIMITED);
    let on_quota: Vec<_> = events
        .iter()
        .filter(|e| e.object == EventObject::CapacityQuota("cpu-cap".to_string()))
        .collect();
    assert_eq!(on_quota.len(), 1, "{events:?}");
    assert!(
        on_quota[0].message.contains(
            "from 4 to 2 nodes: exceeded quota: \"CapacityQuota/cpu-cap\", resources: cpu"
        ),
        "{}",
        on_quota[0].message
    );
    assert!(
        events
            .iter()
            .any(|e| e.object == EventObject::StatusConfigMap),
        "the status ConfigMap gets the cap too: {events:?}"
    );
}

/// docs/capacity-quotas.md CQ-101, CQ-106: once the quota is used up by the existing node and the
/// two upcoming ones, the remaining pods trigger nothing and are told the quota and resource, in
/// the plan (`explain`) and their events.
#[test]
fn a_used_up_quota_stops_scale_up_and_names_the_quota_to_the_pods() {
    let (log, cloud, cluster) = cluster_with(vec![quota("cpu-cap", None, &[("cpu", "12")])]);
    let mut autoscaler = Autoscaler::new(enabled(), 3);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(110));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 2"],
        "nothing more than the quota allows"
    );
    let plan = outcome.scale_up.expect("scale-up ran");
    let reason = "exceeded quota: \"CapacityQuota/cpu-cap\", resources: cpu";
    assert_eq!(plan.pods_not_helped.len(), 2, "{:?}", plan.pods_not_helped);
    for verdict in &plan.pods_not_helped {
        assert_eq!(
            verdict.per_group,
            vec![("pool".to_string(), reason.to_string())]
        );
    }
    let not_triggered = cluster.events_with("NotTriggerScaleUp");
    assert!(
        not_triggered
            .iter()
            .any(|e| e.message == format!("pod didn't trigger scale-up: 1 {reason}")),
        "{not_triggered:?}"
    );
}

/// docs/capacity-quotas.md CQ-106: a quota the existing nodes already fill stops the group at
/// once, and says so on itself.
#[test]
fn a_full_quota_stops_the_group_and_says_so_on_the_quota() {
    let (log, cloud, cluster) = cluster_with(vec![quota("full", None, &[("memory", "16Gi")])]);
    let mut autoscaler = Autoscaler::new(enabled(), 3);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert!(calls(&log, "cloud.increase_size").is_empty());
    let reason = "exceeded quota: \"CapacityQuota/full\", resources: memory";
    let plan = outcome.scale_up.expect("scale-up ran");
    assert_eq!(plan.pods_not_helped.len(), 4);
    assert!(
        plan.skipped_scale_events
            .contains(&"MemoryResourceLimit".to_string()),
        "{:?}",
        plan.skipped_scale_events
    );
    let on_quota = cluster.events_with(CAPACITY_QUOTA_LIMITED);
    assert_eq!(on_quota.len(), 1, "{on_quota:?}");
    assert_eq!(
        on_quota[0].object,
        EventObject::CapacityQuota("full".to_string())
    );
    assert_eq!(
        on_quota[0].message,
        format!("node group pool not scaled up: {reason}")
    );
}

/// docs/capacity-quotas.md CQ-108: the flag gates enforcement: without it the same quota changes
/// nothing.
#[test]
fn quotas_are_not_enforced_without_the_flag() {
    let (log, cloud, cluster) = cluster_with(vec![quota("cpu-cap", None, &[("cpu", "12")])]);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 3);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 4"]
    );
    assert!(cluster.events_with(CAPACITY_QUOTA_LIMITED).is_empty());
}

/// docs/capacity-quotas.md CQ-102: a quota whose selector does not match the group's nodes does
/// not cap it; a `nodes` quota over every node does.
#[test]
fn only_quotas_matching_the_new_nodes_apply() {
    let (log, cloud, cluster) = cluster_with(vec![
        quota(
            "other-team",
            Some(LabelSelector::from_labels([("team", "b")])),
            &[("cpu", "1")],
        ),
        quota("node-count", None, &[("nodes", "4")]),
    ]);
    let mut autoscaler = Autoscaler::new(enabled(), 3);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 3"]
    );
    let events = cluster.events_with(CAPACITY_QUOTA_LIMITED);
    assert!(
        events
            .iter()
            .all(|e| e.object != EventObject::CapacityQuota("other-team".to_string())),
        "{events:?}"
    );
}
