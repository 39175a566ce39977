//! Upstream flags of the loop, scale-up and cluster state that issue 13 added, through
//! `run_once` with the in-memory contracts: `--unready-nodes-scope`,
//! `--node-info-cache-expire-time`, `--scaleup-simulation-for-skipped-node-groups-enabled`,
//! `--enable-proactive-scaleup` with `--pod-injection-limit`, `--async-node-groups`.

mod loop_fakes;

use std::time::Duration;

use ferroscale_core::autoscaler::{Autoscaler, EarlyEnd};
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::ConditionStatus;
use loop_fakes::*;

fn options(flags: &[(&str, &str)]) -> AutoscalingOptions {
    let mut options = AutoscalingOptions::default();
    for (flag, value) in flags {
        options.set(flag, value).expect("valid flag");
    }
    options.validate().expect("valid options");
    options
}

/// One ready node in group `pool` and five unready nodes outside every group (control-plane or
/// unmanaged nodes): five unready of six is over both health limits when every node counts.
fn unready_unmanaged_nodes() -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log);
    let g0 = node("g0", 4000, 16 << 30);
    cloud.add_instance("pool", &g0);
    cluster.add_node(g0);
    for i in 0..5 {
        let mut other = node(&format!("unmanaged-{i}"), 4000, 16 << 30);
        other.conditions.ready = Some(ConditionStatus::False);
        cluster.add_node(other);
    }
    (cloud, cluster)
}

/// docs/behaviour.md CS-107: with the default scope every node counts for cluster health; with
/// `--unready-nodes-scope=autoscaled` unready nodes outside every node group do not stop the
/// autoscaler.
#[test]
fn unready_nodes_outside_node_groups_count_only_with_cluster_scope() {
    let (cloud, cluster) = unready_unmanaged_nodes();
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.ended_early, Some(EarlyEnd::ClusterUnhealthy));

    let (cloud, cluster) = unready_unmanaged_nodes();
    let mut autoscaler = Autoscaler::new(options(&[("unready-nodes-scope", "autoscaled")]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.ended_early, None);
    assert!(outcome.cluster_state.cluster_healthy);
    assert_eq!(
        outcome.cluster_state.total.unready, 5,
        "the status still counts every node"
    );
}

/// docs/behaviour.md CS-107: a node whose group could not be looked up may belong to a group, so
/// it still counts with `--unready-nodes-scope=autoscaled`.
#[test]
fn nodes_whose_group_lookup_failed_count_with_autoscaled_scope() {
    let (cloud, cluster) = unready_unmanaged_nodes();
    cloud
        .failing
        .lock()
        .expect("lock")
        .insert("node_group_for_node");
    let mut autoscaler = Autoscaler::new(options(&[("unready-nodes-scope", "autoscaled")]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.ended_early, Some(EarlyEnd::ClusterUnhealthy));
}

/// Group `pool` whose provider template has 4 cores, with one real 8-core node `n0`.
fn group_with_a_bigger_real_node() -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log);
    let n0 = node("n0", 8000, 32 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    (cloud, cluster)
}

fn template_cpu(outcome: &ferroscale_core::autoscaler::LoopOutcome) -> i64 {
    outcome.node_groups[0]
        .template
        .as_ref()
        .expect("pool has a template")
        .node
        .allocatable
        .cpu_milli
}

/// docs/behaviour.md SU-108: once the group's only node is cordoned, the template cached from it
/// is used until it is older than `--node-info-cache-expire-time`; then the provider's template
/// replaces it.
#[test]
fn cached_template_expires_after_node_info_cache_expire_time() {
    for (flags, expected_after_expiry) in [
        (vec![], 8000),
        (vec![("node-info-cache-expire-time", "5m")], 4000),
    ] {
        let (cloud, cluster) = group_with_a_bigger_real_node();
        let mut autoscaler = Autoscaler::new(options(&flags), 1);
        let start = t(10_000);
        let outcome = run(&mut autoscaler, &cloud, &cluster, start);
        assert_eq!(template_cpu(&outcome), 8000, "taken from n0");

        cluster
            .state()
            .nodes
            .get_mut("n0")
            .expect("n0")
            .unschedulable = true;
        let outcome = run(
            &mut autoscaler,
            &cloud,
            &cluster,
            start + Duration::from_secs(60),
        );
        assert_eq!(template_cpu(&outcome), 8000, "cached, {flags:?}");

        let outcome = run(
            &mut autoscaler,
            &cloud,
            &cluster,
            start + Duration::from_secs(6 * 60),
        );
        assert_eq!(
            template_cpu(&outcome),
            expected_after_expiry,
            "after six minutes, {flags:?}"
        );
    }
}

/// A full node `n0` running one pod of ReplicaSet `web`, one unschedulable `web` pod of 3 cores
/// (a 4-core node takes one), and `web` wanting four replicas: two are not created yet.
fn replica_set_still_creating_pods() -> (CallLog, FakeCloud, FakeCluster) {
    replica_set_still_creating_pods_in_group_of(10)
}

/// The same with group `pool` at most `max` nodes.
fn replica_set_still_creating_pods_in_group_of(max: usize) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, max);
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("pool", &n0);
    cluster.add_node(n0);
    cluster.add_pod(pod_on("base", "n0", 3500));
    cluster.add_pod(pending_pod("p0", 3000, t(0)));
    cluster
        .state()
        .controllers
        .push(ferroscale_core::kubernetes::WorkloadController {
            kind: "ReplicaSet".into(),
            namespace: "default".into(),
            name: "web".into(),
            uid: "uid-rs-web".into(),
            replicas: Some(4),
        });
    (log, cloud, cluster)
}

/// docs/behaviour.md SU-110: with `--enable-proactive-scaleup` the two replicas the ReplicaSet
/// has not created yet get nodes in the same iteration as its unschedulable pod; no event names
/// a fake pod. With the flag off (upstream's default) only the real pod gets a node; on is
/// Ferroscale's default (LOOP-120).
#[test]
fn proactive_scale_up_requests_nodes_for_replicas_not_created_yet() {
    let (log, cloud, cluster) = replica_set_still_creating_pods();
    let mut autoscaler = Autoscaler::new(options(&[("enable-proactive-scaleup", "false")]), 1);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );

    let (log, cloud, cluster) = replica_set_still_creating_pods();
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 3"]
    );
    let triggered = cluster.events_with("TriggeredScaleUp");
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert!(
        outcome
            .events
            .iter()
            .all(|e| !format!("{:?}", e.object).contains("-copy-"))
    );
    assert_eq!(
        outcome.pending_pods.len(),
        1,
        "the outcome lists real pods only"
    );
}

/// docs/behaviour.md SU-110: `--pod-injection-limit` caps the unschedulable pods, fake ones
/// included: with a limit of 2 one fake pod is dropped.
#[test]
fn pod_injection_limit_caps_the_fake_pods() {
    let (log, cloud, cluster) = replica_set_still_creating_pods();
    let flags = [
        ("enable-proactive-scaleup", "true"),
        ("pod-injection-limit", "2"),
    ];
    let mut autoscaler = Autoscaler::new(options(&flags), 1);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 2"]
    );
}

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

fn reasons_for(
    outcome: &ferroscale_core::autoscaler::LoopOutcome,
    pod: &str,
) -> Vec<(String, String)> {
    let plan = outcome.scale_up.as_ref().expect("scale-up ran");
    plan.pods_not_helped
        .iter()
        .find(|v| v.pod == pod)
        .expect("the pod was not helped")
        .per_group
        .clone()
}

fn reason_of<'a>(reasons: &'a [(String, String)], group: &str) -> &'a str {
    reasons
        .iter()
        .find(|(g, _)| g == group)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("no reason for {group}: {reasons:?}"))
}

/// docs/behaviour.md SU-109: by default a skipped group is reported with its skip reason; with
/// `--scaleup-simulation-for-skipped-node-groups-enabled` the pod is also checked against the
/// skipped group's template and reported with the filter that rejects it there.
#[test]
fn skipped_groups_are_simulated_for_the_pod_messages_when_enabled() {
    let (cloud, cluster) = pod_too_big_for_a_full_group();
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    let reasons = reasons_for(
        &run(&mut autoscaler, &cloud, &cluster, t(100)),
        "default/big",
    );
    assert_eq!(reason_of(&reasons, "full"), "max node group size reached");

    let (cloud, cluster) = pod_too_big_for_a_full_group();
    let flag = [("scaleup-simulation-for-skipped-node-groups-enabled", "true")];
    let mut autoscaler = Autoscaler::new(options(&flag), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    let reasons = reasons_for(&outcome, "default/big");
    assert_eq!(reason_of(&reasons, "full"), "Insufficient cpu");
    assert_eq!(reason_of(&reasons, "small"), "Insufficient cpu");
    let events = cluster.events_with("NotTriggerScaleUp");
    assert!(
        events
            .iter()
            .any(|e| e.message.contains("2 Insufficient cpu")),
        "{events:?}"
    );
}

/// docs/behaviour.md SU-109: a pod that would fit a skipped group keeps that group's skip
/// reason.
#[test]
fn skipped_group_that_would_fit_keeps_its_skip_reason() {
    let (cloud, cluster) = pod_too_big_for_a_full_group();
    cluster.add_pod(pod_on("base", "f0", 3500));
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
    let reasons = reasons_for(&outcome, "default/small-pod");
    assert_eq!(reason_of(&reasons, "full"), "max node group size reached");
    assert_eq!(reason_of(&reasons, "small"), "not ready for scale-up");
}

/// docs/behaviour.md LOOP-115, SU-111: `--async-node-groups` (no provider creates node groups)
/// and `--enable-graceful-degradation` with `--pending-pods-batching-timeout` (Ferroscale's
/// filter-out-schedulable is bounded by counts, not by a wall-clock budget) are accepted and
/// decide exactly what the defaults decide (here without proactive scale-up, so that the one
/// real pod is all there is to decide for).
#[test]
fn async_node_groups_and_graceful_degradation_decide_as_the_defaults() {
    for flags in [
        vec![],
        vec![("async-node-groups", "true")],
        vec![
            ("enable-graceful-degradation", "true"),
            ("pending-pods-batching-timeout", "1ns"),
        ],
    ] {
        let (log, cloud, cluster) = replica_set_still_creating_pods();
        let mut flags = flags;
        flags.push(("enable-proactive-scaleup", "false"));
        let mut autoscaler = Autoscaler::new(options(&flags), 1);
        let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
        assert_eq!(
            calls(&log, "cloud.increase_size"),
            vec!["cloud.increase_size pool 1"],
            "{flags:?}"
        );
        let plan = outcome.scale_up.as_ref().expect("scale-up ran");
        assert_eq!(plan.triggering_pods, vec!["default/p0"], "{flags:?}");
    }
}

/// Groups `cpu` and `gpu` (4-core nodes; `gpu` nodes carry `kind=gpu` and a `gpu` taint), a full
/// node of `cpu`, and two pending pods of 3 cores: `plain`, which only `cpu` takes, and `picky`,
/// which only `gpu` takes. One round of scale-up grows one group.
fn pods_for_two_groups() -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("cpu", 0, 10);
    let mut template = node("gpu-template", 4000, 16 << 30);
    template.labels.insert("kind".into(), "gpu".into());
    template.taints.push(ferroscale_model::taints::Taint::new(
        "gpu",
        "true",
        ferroscale_model::taints::TaintEffect::NoSchedule,
    ));
    cloud.groups.push(std::sync::Arc::new(FakeGroup {
        id: "gpu".into(),
        min: 0,
        max: 10,
        target: Default::default(),
        instances: Default::default(),
        template: ferroscale_core::cloud::NodeTemplate {
            node: template,
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        },
        fail_delete: Default::default(),
        failing: Default::default(),
        log: log.clone(),
    }));
    let cluster = FakeCluster::new(log.clone());
    let n0 = node("n0", 4000, 16 << 30);
    cloud.add_instance("cpu", &n0);
    cluster.add_node(n0);
    cluster.add_pod(pod_on("base", "n0", 3500));
    cluster.add_pod(pending_pod("plain", 3000, t(0)));
    let mut picky = pending_pod("picky", 3000, t(0));
    picky.node_selector.insert("kind".into(), "gpu".into());
    picky
        .tolerations
        .push(ferroscale_model::taints::Toleration {
            key: "gpu".into(),
            operator: ferroscale_model::taints::TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        });
    cluster.add_pod(picky);
    (log, cloud, cluster)
}

/// docs/behaviour.md SU-114: with `--salvo-scale-up` the pod that the first round's group cannot
/// take gets its own group in a second round of the same iteration; without it one group grows
/// per iteration. The second round does not grow the first group again for the pod already
/// planned for.
#[test]
fn salvo_scale_up_grows_a_second_group_in_the_same_iteration() {
    let (log, cloud, cluster) = pods_for_two_groups();
    let mut autoscaler = Autoscaler::new(options(&[]), 1);
    run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(calls(&log, "cloud.increase_size").len(), 1);

    let (log, cloud, cluster) = pods_for_two_groups();
    let mut autoscaler = Autoscaler::new(options(&[("salvo-scale-up", "true")]), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    let mut resizes = calls(&log, "cloud.increase_size");
    resizes.sort();
    assert_eq!(
        resizes,
        vec!["cloud.increase_size cpu 1", "cloud.increase_size gpu 1"]
    );
    assert!(!outcome.salvo_rounds.is_empty());
    let execution = outcome.scale_up_execution.as_ref().expect("executed");
    assert_eq!(execution.scaled_up_nodes, 2, "both rounds are counted");

    // The next iteration sees both groups' upcoming nodes and asks for nothing more.
    run(&mut autoscaler, &cloud, &cluster, t(110));
    assert_eq!(calls(&log, "cloud.increase_size").len(), 2);
}

fn fake_pods_not_helped(outcome: &ferroscale_core::autoscaler::LoopOutcome) -> usize {
    outcome.scale_up.as_ref().map_or(0, |plan| {
        plan.pods_not_helped
            .iter()
            .filter(|v| v.pod.contains("-copy-"))
            .count()
    })
}

/// docs/behaviour.md SU-110: when the scale-up cannot help a controller's fake pods (here the
/// group has room for the real pod only), the controller gets no fake pods for 5 minutes.
#[test]
fn controllers_whose_fake_pods_were_not_helped_are_backed_off() {
    let (log, cloud, cluster) = replica_set_still_creating_pods_in_group_of(2);
    let mut autoscaler = Autoscaler::new(options(&[("enable-proactive-scaleup", "true")]), 1);

    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100));
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );
    assert_eq!(fake_pods_not_helped(&outcome), 2);

    let outcome = run(&mut autoscaler, &cloud, &cluster, t(160));
    assert_eq!(fake_pods_not_helped(&outcome), 0, "backed off");

    let outcome = run(&mut autoscaler, &cloud, &cluster, t(100 + 5 * 60 + 10));
    assert_eq!(fake_pods_not_helped(&outcome), 2, "the backoff is over");
}
