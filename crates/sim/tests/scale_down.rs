//! Scale-down in the simulator: the upstream scalability scenarios 3, 4 and 5 (docs/behaviour.md
//! SIM-101) reach upstream's end states, the bundled full day meets its expectations, and injected
//! cloud failures (increases failing, instances stuck creating, deletions failing, quota errors)
//! end in backoff and recovery, never in runaway scale-up or a lost pod.

use std::collections::HashSet;
use std::path::Path;

use ferroscale_model::taints::TO_BE_DELETED;
use ferroscale_sim::cluster::{Cluster, PodEnd};
use ferroscale_sim::record::{EntryKind, SimulationResult};
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

fn bundled_scenario(name: &str) -> Scenario {
    let text = bundled(name).unwrap_or_else(|| panic!("bundled scenario {name} is missing"));
    parse_scenario(text, name, Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(text: &str) -> Scenario {
    parse_scenario(text, "test.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

/// Plays the scenario to its end, leaving the final state inspectable.
fn play(scenario: &Scenario) -> Simulation<'static> {
    let options = options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    let mut simulation = Simulation::new(scenario, options);
    simulation.play_to_end();
    simulation
}

fn entries(result: &SimulationResult, kind: EntryKind) -> Vec<String> {
    result
        .timeline
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| format!("{} {} — {}", e.at, e.what, e.why))
        .collect()
}

/// Every workload pod the run created is accounted for: following each pod through the pods its
/// controller re-created after evictions ends in a live pod (running or pending) or in a
/// deliberate deletion by the scenario, never in an eviction nobody answered.
fn assert_no_pod_lost(cluster: &Cluster) {
    let pods = cluster.pods();
    for (index, record) in pods.iter().enumerate() {
        if !record.is_workload() || record.replaces.is_some() {
            continue;
        }
        let mut current = index;
        let mut hops = 0;
        loop {
            let Some(pod) = pods.get(current) else {
                panic!("pod {} leads to a missing replacement", record.pod.key());
            };
            match pod.end {
                None => {
                    assert!(
                        pod.is_running() || pod.is_pending(),
                        "{} is neither running nor pending",
                        pod.pod.key()
                    );
                    break;
                }
                Some(PodEnd::DeletedByScenario) => break,
                Some(PodEnd::Evicted {
                    replacement: Some(next),
                }) => current = next,
                Some(end) => panic!("{} was lost: {end:?}", pod.pod.key()),
            }
            hops += 1;
            assert!(
                hops <= pods.len(),
                "re-creation cycle at {}",
                record.pod.key()
            );
        }
    }
}

fn node_names(cluster: &Cluster) -> HashSet<String> {
    cluster.nodes().map(|n| n.node.name.clone()).collect()
}

#[test]
fn scenario_3_removes_exactly_the_300_empty_nodes() {
    let scenario = bundled_scenario("upstream-3");
    let simulation = play(&scenario);
    let names = node_names(simulation.cluster());
    // The 700 busy nodes are the ones left.
    assert_eq!(names.len(), 700);
    assert!((0..700).all(|i| names.contains(&format!("nodes-{i}"))));
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    let group = &result.summary.groups["nodes"];
    assert_eq!((group.nodes_removed, group.final_size), (300, 700));
    assert_eq!(result.summary.pods.running, 700);
    // Empty nodes are removed without evicting anything.
    assert_eq!(result.summary.pods.evicted, 0);
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

#[test]
fn scenario_4_drains_exactly_30_underutilized_nodes_and_stops_at_min_size() {
    let scenario = bundled_scenario("upstream-4");
    let simulation = play(&scenario);
    let cluster = simulation.cluster();
    let names = node_names(cluster);
    assert_eq!(names.len(), 970);
    // Only 30 %-full nodes were removed: every 70 %-full node is still there.
    assert!((0..700).all(|i| names.contains(&format!("nodes-{i}"))));
    // No node is left tainted for deletion: every removal finished.
    assert!(
        cluster
            .nodes()
            .all(|n| n.node.taints.iter().all(|t| t.key != TO_BE_DELETED))
    );
    assert_no_pod_lost(cluster);
    let result = simulation.into_result();
    let summary = &result.summary;
    assert_eq!(summary.groups["nodes"].nodes_removed, 30);
    assert_eq!((summary.pods.running, summary.pods.pending), (52_000, 0));
    // Each removed node had 24 pods to move, and each was re-created elsewhere.
    assert!(summary.pods.evicted >= 30 * 24, "{}", summary.pods.evicted);
    assert_eq!(summary.pods.lost, 0);
    let blocked = entries(&result, EntryKind::ScaleDownBlocked);
    assert!(
        blocked
            .iter()
            .any(|b| b.contains("NodeGroupMinSizeReached")),
        "the min size is what stops further removals: {blocked:?}"
    );
    assert!(
        summary.all_expectations_hold(),
        "{:?}",
        summary.expectations
    );
}

#[test]
fn scenario_5_keeps_underutilized_nodes_whose_pods_cannot_move() {
    let scenario = bundled_scenario("upstream-5");
    let simulation = play(&scenario);
    let cluster = simulation.cluster();
    assert_eq!(cluster.node_count(), 1000);
    // Every pod still runs on the node it started on.
    for record in cluster.pods().iter().filter(|r| r.is_workload()) {
        assert!(record.is_running() && record.replaces.is_none());
        assert!(record.end.is_none());
    }
    let result = simulation.into_result();
    assert_eq!(result.summary.groups["nodes"].nodes_removed, 0);
    assert_eq!(result.summary.pods.evicted, 0);
    let blocked = entries(&result, EntryKind::ScaleDownBlocked);
    // The candidate pool (docs/behaviour.md SD-116: max(10 % of 1,000 nodes, 50)) lets 100 new
    // candidates be simulated per iteration, so the 300 are found over the first three.
    let no_place: usize = blocked
        .iter()
        .filter_map(|b| b.split_once(" node(s) cannot be removed: NoPlaceToMovePods"))
        .filter_map(|(head, _)| head.rsplit(' ').next()?.parse::<usize>().ok())
        .take(3)
        .sum();
    assert_eq!(no_place, 300, "{blocked:?}");
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

#[test]
fn a_full_day_ramps_up_holds_steady_and_drains_back_down_under_pdbs() {
    let scenario = bundled_scenario("full-day");
    let simulation = play(&scenario);
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    let summary = &result.summary;
    assert!(
        summary.all_expectations_hold(),
        "{:?}",
        summary.expectations
    );
    // The evening consolidation drained nodes that still ran pods.
    let drains = entries(&result, EntryKind::Drain);
    assert!(drains.iter().any(|d| d.contains("evicted")), "{drains:?}");
    assert!(summary.pods.evicted > 0);
    // A budget held some removals back while its workload had no disruption to spare.
    let blocked = entries(&result, EntryKind::ScaleDownBlocked);
    assert!(
        blocked.iter().any(|b| b.contains("NotEnoughPdb")),
        "{blocked:?}"
    );
    // The timeline shows timers starting before nodes go.
    let unneeded = entries(&result, EntryKind::Unneeded);
    assert!(!unneeded.is_empty());
    // Scale-down gave back what scale-up added.
    let added: usize = summary.groups.values().map(|g| g.nodes_added).sum();
    let removed: usize = summary.groups.values().map(|g| g.nodes_removed).sum();
    assert!(removed >= added, "added {added}, removed {removed}");
}

/// One group of 4-CPU nodes with the given failure windows, and `count` one-CPU pods owned by a
/// ReplicaSet created at `at`.
fn failing_group_scenario(failures: &str, min: usize, initial: usize, rest: &str) -> String {
    format!(
        r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: failures
duration: 90m
options:
  scan-interval: 10s
  scale-down-unneeded-time: 5m
nodeGroups:
  - id: g
    minSize: {min}
    maxSize: 20
    initialSize: {initial}
    provisioningDelay: 60s
    failures:
{failures}
    template:
      status:
        allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
{rest}"#
    )
}

fn web_pods(at: &str, count: usize) -> String {
    format!(
        r#"  - at: {at}
    create:
      count: {count}
      pod:
        apiVersion: v1
        kind: Pod
        metadata:
          name: web
          namespace: default
          labels: {{app: web}}
          ownerReferences:
            - {{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: rs-web, controller: true}}
        spec:
          containers: [{{name: web, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
"#
    )
}

/// The most nodes the group ever had registered.
fn peak(result: &SimulationResult) -> usize {
    result.summary.groups["g"].peak_size
}

#[test]
fn quota_errors_on_increase_back_off_then_recover_without_overshooting() {
    // IncreaseSize fails with a quota error for the first 20 minutes.
    let text = failing_group_scenario(
        "      increaseSize: {from: 0s, to: 20m, errorClass: OutOfResources}",
        0,
        0,
        &format!("events:\n{}", web_pods("0s", 8)),
    );
    let simulation = play(&parse(&text));
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    let failures = entries(&result, EntryKind::Failure);
    let attempts = failures
        .iter()
        .filter(|f| f.contains("IncreaseSize of g"))
        .count();
    // Backoff spaces the attempts out (5, 10 minutes ...): a handful, not one per loop.
    assert!((1..=4).contains(&attempts), "{failures:?}");
    assert!(!entries(&result, EntryKind::Backoff).is_empty());
    // Recovered: two nodes for eight one-CPU pods, never more.
    assert_eq!(result.summary.pods.running, 8);
    assert_eq!(peak(&result), 2);
    assert_eq!(result.summary.groups["g"].final_size, 2);
}

#[test]
fn instances_stuck_creating_are_deleted_backed_off_and_replaced_later() {
    // Instances requested in the first 15 minutes never come up (a stockout).
    let text = failing_group_scenario(
        "      instanceCreation: {from: 0s, to: 15m, errorClass: OutOfResources}",
        0,
        0,
        &format!("events:\n{}", web_pods("0s", 8)),
    );
    let simulation = play(&parse(&text));
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    let failures = entries(&result, EntryKind::Failure);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("instance(s) of g failed to be created")),
        "{failures:?}"
    );
    assert!(!entries(&result, EntryKind::Backoff).is_empty());
    assert_eq!(result.summary.pods.running, 8);
    // The failed instances were given back: the group never holds more than it needs, and the
    // requests that failed are not paid for until the end.
    assert_eq!(peak(&result), 2);
    let g = &result.summary.groups["g"];
    assert_eq!(g.final_size, 2);
    assert!(g.scale_ups >= 2, "a second scale-up after the backoff");
    assert!(g.scale_ups <= 6, "no runaway of scale-ups: {}", g.scale_ups);
}

#[test]
fn failing_deletions_roll_back_and_succeed_once_the_cloud_recovers() {
    // Four nodes, then all pods but four go at 1m; the three emptied nodes become unneeded, but
    // DeleteNodes fails until 30m.
    let text = failing_group_scenario(
        "      deleteNodes: {from: 0s, to: 30m}",
        1,
        4,
        &format!(
            "events:\n{}\n  - at: 1m\n    delete: {{selector: \"app=web\", count: 12}}\nexpect:\n  - {{at: end, lostPods: 0}}\n",
            web_pods("0s", 16)
        ),
    );
    let simulation = play(&parse(&text));
    let cluster = simulation.cluster();
    assert_no_pod_lost(cluster);
    assert!(
        cluster
            .nodes()
            .all(|n| n.node.taints.iter().all(|t| t.key != TO_BE_DELETED)),
        "rolled-back and finished removals leave no deletion taint behind"
    );
    let result = simulation.into_result();
    let failures = entries(&result, EntryKind::ScaleDownFailure);
    assert!(!failures.is_empty(), "the failed deletions are reported");
    let removed_at = result
        .timeline
        .iter()
        .filter(|e| e.kind == EntryKind::ScaleDown && e.what.contains("removed by the autoscaler"))
        .map(|e| e.at)
        .min()
        .expect("nodes are removed in the end");
    assert!(
        removed_at.millis() >= 30 * 60 * 1000,
        "nothing is removed while deletions fail"
    );
    // Four pods of one CPU fit on one node: three removed, no scale-up at any time.
    let g = &result.summary.groups["g"];
    assert_eq!((g.nodes_removed, g.final_size), (3, 1));
    assert_eq!(g.scale_ups, 0);
    assert_eq!(result.summary.pods.running, 4);
    assert!(result.summary.all_expectations_hold());
}

#[test]
fn pods_without_a_controller_keep_their_node() {
    // Two nodes; the second runs one bare pod (no controller): draining it would lose the pod, so
    // the node stays although it is underutilized.
    let text = failing_group_scenario(
        "      deleteNodes: []",
        0,
        2,
        r#"events:
  - at: 0s
    create:
      count: 1
      bind: {nodePrefix: g-, firstIndex: 1}
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {name: bare, namespace: default}
        spec:
          containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
"#,
    );
    let simulation = play(&parse(&text));
    let names = node_names(simulation.cluster());
    assert!(names.contains("g-1"), "{names:?}");
    assert!(!names.contains("g-0"), "the empty node goes: {names:?}");
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    let blocked = entries(&result, EntryKind::ScaleDownBlocked);
    assert!(
        blocked
            .iter()
            .any(|b| b.contains("BlockedByPod (NotReplicated)") && b.contains("default/bare")),
        "{blocked:?}"
    );
    assert_eq!(result.summary.pods.evicted, 0);
}

#[test]
fn pods_whose_controller_was_deleted_are_not_drained() {
    // Two half-empty nodes whose pods could be packed onto one, but their ReplicaSet is deleted
    // (orphaning them) before scale-down gets to them: draining would lose them.
    let text = failing_group_scenario(
        "      deleteNodes: []",
        0,
        2,
        &format!(
            "events:\n{}  - at: 1m\n    deleteController: {{kind: ReplicaSet, name: web-1}}\n",
            web_pods("0s", 2)
        ),
    );
    let simulation = play(&parse(&text));
    assert_eq!(simulation.cluster().node_count(), 2);
    assert_no_pod_lost(simulation.cluster());
    let result = simulation.into_result();
    assert_eq!(result.summary.pods.evicted, 0);
    let blocked = entries(&result, EntryKind::ScaleDownBlocked);
    assert!(
        blocked.iter().any(|b| b.contains("ControllerNotFound")),
        "{blocked:?}"
    );
}
