//! The upstream scalability scenarios 1, 2 and 6 (docs/behaviour.md SIM-101) reproduced in the
//! simulator: the engine must reach the same end state upstream reaches.

use std::path::Path;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_objects::K8sObject;
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

fn scenario(name: &str) -> Scenario {
    let text = bundled(name).unwrap_or_else(|| panic!("bundled scenario {name} is missing"));
    parse_scenario(text, name, Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn options(scenario: &Scenario) -> AutoscalingOptions {
    options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Raises the group's maximum well above what the workload needs, so over-provisioning would
/// show instead of being hidden by the cap.
fn with_room_to_overshoot(mut scenario: Scenario) -> Scenario {
    for group in &mut scenario.node_groups {
        group.max_size = 2000;
    }
    scenario
}

/// Plays the scenario and checks what every upstream scenario promises: exactly 1000 nodes, every
/// new node full (30 test pods), every schedulable pod running, the initial node untouched.
fn assert_thousand_full_nodes(scenario: &Scenario, impossible_pods: usize) {
    let mut sim = Simulation::new(scenario, options(scenario));
    sim.play_to_end();
    let cluster = sim.cluster();
    assert_eq!(
        cluster.node_count(),
        1000,
        "{}: nodes at the end",
        scenario.name
    );
    // Pods bound to the initial node from the start: the scenario filled it with them.
    let initial_pods = scenario
        .objects
        .iter()
        .filter(|o| matches!(o, K8sObject::Pod(_)))
        .count();
    let running = cluster
        .pods()
        .iter()
        .filter(|r| r.is_workload() && r.is_running())
        .count();
    assert_eq!(
        running,
        999 * 30 + initial_pods,
        "{}: running pods",
        scenario.name
    );
    for node in cluster.nodes() {
        let info = cluster
            .snapshot()
            .node(node.id)
            .expect("registered node is in the snapshot");
        let expected = if node.node.name == "nodes-0" {
            initial_pods
        } else {
            30
        };
        assert_eq!(
            info.pods.len(),
            expected,
            "{}: node {}",
            scenario.name,
            node.node.name
        );
    }
    let result = sim.into_result();
    let summary = &result.summary;
    assert_eq!(summary.pods.pending, impossible_pods, "{}", scenario.name);
    assert_eq!(
        summary.pods.never_schedulable, impossible_pods,
        "{}",
        scenario.name
    );
    let group = summary.groups.values().next().expect("one group");
    assert_eq!(group.final_size, 1000);
    assert_eq!(
        group.peak_size, 1000,
        "{}: the group never grew past 1000",
        scenario.name
    );
    assert_eq!(group.nodes_added, 999);
    assert!(
        summary.all_expectations_hold(),
        "{}: {:?}",
        scenario.name,
        summary.expectations
    );
}

#[test]
fn scenario_1_scales_up_to_a_thousand_full_nodes() {
    assert_thousand_full_nodes(&with_room_to_overshoot(scenario("upstream-1")), 0);
}

#[test]
fn scenario_2_second_burst_causes_no_over_provisioning() {
    assert_thousand_full_nodes(&with_room_to_overshoot(scenario("upstream-2")), 0);
}

#[test]
fn scenario_6_impossible_pods_do_not_block_the_others() {
    assert_thousand_full_nodes(&with_room_to_overshoot(scenario("upstream-6")), 1000);
}

#[test]
fn bundled_upstream_scenarios_state_their_end_state_and_it_holds() {
    for name in ["upstream-1", "upstream-6"] {
        let scenario = scenario(name);
        let result = Simulation::new(&scenario, options(&scenario)).finish();
        assert!(!result.summary.expectations.is_empty(), "{name}");
        assert!(
            result.summary.all_expectations_hold(),
            "{name}: {:?}",
            result.summary.expectations
        );
    }
}
