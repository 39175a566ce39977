//! The main loop (docs/behaviour.md LOOP-106) through `Autoscaler::run_once` with recording fakes:
//! step order and early ends, first-run clean-up (LOOP-91), dry-run, the status ConfigMap (ST-94)
//! and shutdown (LOOP-97).

mod loop_fakes;

use ferroscale_core::autoscaler::{Autoscaler, EarlyEnd, LoopOutcome, PlannedAction};
use ferroscale_core::events::reasons;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_model::{ConditionStatus, Taint, TaintEffect};
use futures::executor::block_on;
use loop_fakes::*;

/// A cloud with group `pool` (0..10) holding `ready` Ready nodes and `unready` NotReady nodes, all
/// old enough to be past their start-up time.
fn cluster_with(ready: usize, unready: usize) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log.clone());
    for i in 0..ready + unready {
        let mut n = node(&format!("n{i}"), 4000, 16 << 30);
        if i >= ready {
            n.conditions.ready = Some(ConditionStatus::False);
        }
        cloud.add_instance("pool", &n);
        cluster.add_node(n);
    }
    (log, cloud, cluster)
}

fn mutating_calls(log: &CallLog) -> Vec<String> {
    calls(log, "")
        .into_iter()
        .filter(|c| c != "kube.write_status")
        .collect()
}

/// docs/behaviour.md LOOP-91.
#[test]
fn s91_first_iteration_removes_leftover_deletion_taints_from_autoscaled_nodes_only() {
    let (log, cloud, cluster) = cluster_with(2, 0);
    let leftover = Taint::new(TO_BE_DELETED, "1700000000", TaintEffect::NoSchedule);
    for name in ["n0", "n1"] {
        let mut state = cluster.state();
        let n = state.nodes.get_mut(name).expect("node");
        n.taints.push(leftover.clone());
        n.unschedulable = true;
    }
    // A node outside every group keeps its taint.
    let mut foreign = node("foreign", 4000, 16 << 30);
    foreign.taints.push(leftover.clone());
    cluster.add_node(foreign);

    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    for name in ["n0", "n1"] {
        let n = cluster.node(name).expect("node");
        assert!(!n.has_taint(TO_BE_DELETED), "{name} cleaned");
        assert!(!n.unschedulable, "{name} uncordoned");
    }
    assert!(
        cluster
            .node("foreign")
            .expect("foreign")
            .has_taint(TO_BE_DELETED)
    );
    assert_eq!(
        cluster
            .events_with(reasons::CLUSTER_AUTOSCALER_CLEANUP)
            .len(),
        2
    );
    assert!(
        outcome
            .planned_actions
            .contains(&PlannedAction::RemoveLeftoverTaint { node: "n0".into() })
    );

    // Only once per process.
    cluster
        .state()
        .nodes
        .get_mut("n0")
        .expect("n0")
        .taints
        .push(leftover);
    let before = calls(&log, "kube.untaint").len();
    run(&mut autoscaler, &cloud, &cluster, t(10_010));
    assert_eq!(calls(&log, "kube.untaint").len(), before);
}

/// Nodes that are instances of a group are placed by the instance lists; only the others cost a
/// NodeGroupForNode call, so a remote provider is asked per group, not per node.
#[test]
fn only_nodes_outside_every_group_are_looked_up_one_by_one() {
    let (_log, cloud, cluster) = cluster_with(3, 0);
    let mut outsider = node("control-plane", 4000, 16 << 30);
    outsider.provider_id = "elsewhere://control-plane".into();
    cluster.add_node(outsider);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.error, None);
    assert_eq!(*cloud.lookups.lock().unwrap(), vec!["control-plane"]);
    let pool = outcome.cluster_state.group("pool").expect("pool state");
    assert_eq!(
        pool.counts.registered, 3,
        "the group still owns its three nodes"
    );
}

/// The price expander uses the provider's price of each group's template, gathered every loop:
/// of two identical groups, the cheaper one grows; when prices change, the choice follows.
#[test]
fn the_price_expander_picks_the_group_the_provider_prices_lower() {
    for (cheap, dear) in [("pool-a", "pool-b"), ("pool-b", "pool-a")] {
        let log = CallLog::default();
        let mut cloud = FakeCloud::new(log.clone());
        cloud.add_group("pool-a", 0, 10);
        cloud.add_group("pool-b", 0, 10);
        cloud
            .prices
            .lock()
            .unwrap()
            .extend([(cheap.to_string(), 0.1), (dear.to_string(), 1.0)]);
        let cluster = FakeCluster::new(log.clone());
        // A full node outside both groups: both grow from their templates.
        cluster.add_node(node("n0", 4000, 16 << 30));
        cluster.add_pod(pod_on("busy", "n0", 3500));
        cluster.add_pod(pending_pod("waiting", 3000, t(9_000)));
        let mut options = AutoscalingOptions::default();
        options.set("expander", "price").unwrap();
        let mut autoscaler = Autoscaler::new(options, 1);
        run(&mut autoscaler, &cloud, &cluster, t(10_000));
        assert_eq!(
            calls(&log, "cloud.increase_size"),
            vec![format!("cloud.increase_size {cheap} 1")]
        );
    }
}

/// Checks docs/behaviour.md LOOP-107, docs/behaviour.md CS-64.
#[test]
fn unhealthy_cluster_ends_the_iteration_before_scale_up() {
    let (log, cloud, cluster) = cluster_with(2, 5);
    cluster.add_pod(pending_pod("waiting", 3000, t(9_000)));
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.ended_early, Some(EarlyEnd::ClusterUnhealthy));
    assert!(outcome.scale_up.is_none() && outcome.scale_down.is_none());
    assert!(calls(&log, "cloud.increase_size").is_empty());
    assert!(!cluster.events_with(reasons::CLUSTER_UNHEALTHY).is_empty());
    // The status is still written (deferred step).
    assert!(cluster.state().status.is_some());
}

#[test]
fn the_same_pending_pod_in_a_healthy_cluster_scales_up() {
    let (log, cloud, cluster) = cluster_with(2, 0);
    // Fill the two nodes so the pending pod needs a new one.
    cluster.add_pod(pod_on("busy-0", "n0", 3500));
    cluster.add_pod(pod_on("busy-1", "n1", 3500));
    cluster.add_pod(pending_pod("waiting", 3000, t(9_000)));
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert_eq!(outcome.ended_early, None);
    assert_eq!(
        calls(&log, "cloud.increase_size"),
        vec!["cloud.increase_size pool 1"]
    );
    assert!(!cluster.events_with(reasons::TRIGGERED_SCALE_UP).is_empty());
    // The request is registered: the next loop sees an upcoming node and does not scale again.
    run(&mut autoscaler, &cloud, &cluster, t(10_010));
    assert_eq!(calls(&log, "cloud.increase_size").len(), 1);
}

/// Checks docs/behaviour.md CS-47.
#[test]
fn fixing_an_incorrect_size_ends_the_iteration() {
    let (log, cloud, cluster) = cluster_with(2, 0);
    cluster.add_pod(pod_on("busy-0", "n0", 3500));
    cluster.add_pod(pod_on("busy-1", "n1", 3500));
    // The cloud says 5 but only 2 instances exist and none is coming.
    *cloud.group("pool").target.lock().expect("lock") = 5;
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    run(&mut autoscaler, &cloud, &cluster, t(10_000));
    cluster.add_pod(pending_pod("waiting", 3000, t(10_500)));
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000 + 16 * 60));
    assert_eq!(outcome.ended_early, Some(EarlyEnd::SizesFixed));
    assert_eq!(
        calls(&log, "cloud.decrease_target_size"),
        vec!["cloud.decrease_target_size pool -3"]
    );
    assert!(
        outcome.scale_up.is_none(),
        "the iteration ended before scale-up"
    );
    assert!(calls(&log, "cloud.increase_size").is_empty());
}

#[test]
fn dry_run_plans_but_calls_nothing_mutating() {
    let (log, cloud, cluster) = cluster_with(2, 0);
    cluster
        .state()
        .nodes
        .get_mut("n0")
        .expect("n0")
        .taints
        .push(Taint::new(TO_BE_DELETED, "1", TaintEffect::NoSchedule));
    cluster.add_pod(pod_on("busy-1", "n1", 3500));
    cluster.add_pod(pending_pod("a", 3800, t(9_000)));
    cluster.add_pod(pending_pod("b", 3800, t(9_000)));
    let options = AutoscalingOptions {
        dry_run: true,
        ..AutoscalingOptions::default()
    };
    let mut autoscaler = Autoscaler::new(options, 1);
    let first = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert!(first.dry_run);
    let mut outcome = LoopOutcome::default();
    // Long enough for unneeded nodes to be chosen for deletion too.
    for i in 1..80 {
        outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000 + i * 10));
    }
    assert!(
        outcome.planned_actions.iter().any(
            |a| matches!(a, PlannedAction::IncreaseSize { group_id, .. } if group_id == "pool")
        ),
        "{:?}",
        outcome.planned_actions
    );
    assert_eq!(
        calls(&log, ""),
        Vec::<String>::new(),
        "no call at all, not even status"
    );
    assert!(
        cluster.state().events.is_empty(),
        "events are returned, not published"
    );
    assert!(outcome.status_configmap.is_some(), "the status is computed");
    assert!(mutating_calls(&log).is_empty());
}

/// docs/behaviour.md ST-94.
#[test]
fn s94_status_configmap_is_written_every_iteration_with_last_updated() {
    let (_log, cloud, cluster) = cluster_with(1, 0);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    run(&mut autoscaler, &cloud, &cluster, t(10_000));
    let status = cluster.state().status.clone().expect("status written");
    assert_eq!(status.name, "cluster-autoscaler-status");
    assert_eq!(status.namespace, "kube-system");
    assert!(
        status.last_updated.starts_with("1970-01-01 02:46:40"),
        "{}",
        status.last_updated
    );
    assert!(
        status.status_yaml.contains("autoscalerStatus: Running"),
        "{}",
        status.status_yaml
    );
    run(&mut autoscaler, &cloud, &cluster, t(10_010));
    let again = cluster.state().status.clone().expect("status written");
    assert_ne!(again.last_updated, status.last_updated);
}

/// docs/behaviour.md LOOP-97.
#[test]
fn s97_shutdown_deletes_the_status_configmap() {
    let (log, cloud, cluster) = cluster_with(1, 0);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert!(cluster.state().status.is_some());
    block_on(autoscaler.shutdown(&cloud, &cluster)).expect("clean shutdown");
    assert!(cluster.state().status.is_none());
    assert_eq!(
        calls(&log, "kube.delete_status"),
        vec!["kube.delete_status kube-system/cluster-autoscaler-status"]
    );
    assert_eq!(calls(&log, "cloud.cleanup").len(), 1);
}

/// Checks docs/behaviour.md CS-102.
#[test]
fn a_gpu_node_whose_gpus_have_not_appeared_is_resource_unready() {
    let (_log, cloud, cluster) = cluster_with(1, 0);
    // Labelled with the provider's GPU label, but no GPU in allocatable yet (driver still loading).
    let mut gpu = node("gpu-0", 4000, 16 << 30);
    gpu.labels.insert("fake/gpu".into(), "tesla".into());
    cloud.add_instance("pool", &gpu);
    cluster.add_node(gpu);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    let counts = outcome.cluster_state.group("pool").expect("pool").counts;
    assert_eq!((counts.ready, counts.resource_unready), (1, 1));
}

/// The debugging snapshot's hook: only the iteration after `capture_next_loop` hands out what it
/// gathered (nodes with their groups, the groups with their bounds), and only once.
#[test]
fn only_the_loop_asked_for_hands_out_what_it_gathered() {
    let (_log, cloud, cluster) = cluster_with(2, 0);
    let outside = node("outside", 4000, 16 << 30);
    cluster.add_node(outside);
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    assert!(
        run(&mut autoscaler, &cloud, &cluster, t(10_000))
            .capture
            .is_none()
    );

    autoscaler.capture_next_loop();
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_010));
    let capture = outcome.capture.expect("the asked-for loop's capture");
    assert_eq!(capture.now, t(10_010));
    assert_eq!(capture.objects.nodes.len(), 3);
    assert_eq!(
        capture.group_of_node.iter().collect::<Vec<_>>(),
        [
            (&"n0".to_string(), &"pool".to_string()),
            (&"n1".to_string(), &"pool".to_string())
        ]
    );
    let group = &capture.node_groups[0];
    assert_eq!(
        (group.id.as_str(), group.min_size, group.max_size),
        ("pool", 0, 10)
    );

    assert!(
        run(&mut autoscaler, &cloud, &cluster, t(10_020))
            .capture
            .is_none()
    );
}

/// docs/behaviour.md LOOP-91 and SD-120: a new process whose first iterations cannot read the
/// nodes, or whose untaints the API server refuses, keeps trying every iteration until the
/// leftover taints are gone — an API outage at start-up never leaves a node tainted for the
/// life of the process.
#[test]
fn s91_the_start_up_clean_up_is_retried_until_the_api_server_lets_it_finish() {
    let (log, cloud, cluster) = cluster_with(2, 0);
    let leftover = Taint::new(TO_BE_DELETED, "1700000000", TaintEffect::NoSchedule);
    {
        let mut state = cluster.state();
        let n = state.nodes.get_mut("n0").expect("node");
        n.taints.push(leftover);
        n.unschedulable = true;
        state.fail_gather = true;
    }
    let mut autoscaler = Autoscaler::new(AutoscalingOptions::default(), 1);
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_000));
    assert!(outcome.error.is_some(), "the nodes could not be read");
    assert!(calls(&log, "kube.untaint").is_empty());

    // The nodes can be read, but the API server refuses the update.
    {
        let mut state = cluster.state();
        state.fail_gather = false;
        state.fail_untaints = true;
    }
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_010));
    assert_eq!(outcome.untaints_owed, vec!["n0"]);
    assert!(cluster.node("n0").expect("n0").has_taint(TO_BE_DELETED));
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_020));
    assert_eq!(outcome.untaints_owed, vec!["n0"], "still refused");
    assert_eq!(
        calls(&log, "kube.untaint").len(),
        2,
        "one attempt per iteration"
    );

    // The API server answers again: the next iteration removes the taint and uncordons.
    cluster.state().fail_untaints = false;
    let outcome = run(&mut autoscaler, &cloud, &cluster, t(10_030));
    assert!(outcome.untaints_owed.is_empty());
    let n0 = cluster.node("n0").expect("n0");
    assert!(!n0.has_taint(TO_BE_DELETED) && !n0.unschedulable);
    let untaints = calls(&log, "kube.untaint").len();
    run(&mut autoscaler, &cloud, &cluster, t(10_040));
    assert_eq!(
        calls(&log, "kube.untaint").len(),
        untaints,
        "nothing is owed any more"
    );
}
