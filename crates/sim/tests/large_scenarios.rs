//! The bundled large clusters `large-15k` and `large-65k` (docs/scenario.md): they are the size
//! they claim, within the scenario limits, and the first loops of the 15,000-node one do what
//! the scenario is there to measure (scale-down finds unneeded nodes, scale-up grows the batch
//! groups). Their whole 30-minute runs are too slow for CI: `scripts/large-scenarios.sh` plays
//! them with `ferroscale simulate` and checks their expectations.

use std::collections::BTreeSet;
use std::path::Path;

use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Check, Scenario, ScenarioAction, bundled, parse_scenario};

fn scenario(name: &str) -> Scenario {
    let text = bundled(name).unwrap_or_else(|| panic!("bundled scenario {name} is missing"));
    parse_scenario(text, name, Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

/// (pods created bound to a node, pods created pending) by the scenario's `create` events.
fn created_pods(scenario: &Scenario) -> (usize, usize) {
    let mut bound = 0;
    let mut pending = 0;
    for event in &scenario.events {
        if let ScenarioAction::Create { count, bind, .. } = &event.action {
            match bind {
                Some(_) => bound += count,
                None => pending += count,
            }
        }
    }
    (bound, pending)
}

#[test]
fn large_scenarios_have_the_size_they_claim_within_the_limits() {
    for (name, nodes, pods) in [
        ("large-15k", 15_000, 450_000),
        ("large-65k", 65_000, 1_000_000),
    ] {
        let scenario = scenario(name);
        let initial: usize = scenario.node_groups.iter().map(|g| g.initial_size).sum();
        assert_eq!(initial, nodes, "{name}: nodes at time 0");
        let (bound, pending) = created_pods(&scenario);
        // Exactly at the pod limit for the 65,000-node cluster: every `create.count` counts.
        assert_eq!(bound + pending, pods, "{name}: pods");
        assert_eq!(pending * 20, pods, "{name}: 5 % of the pods are pending");
        let zones: BTreeSet<&str> = scenario
            .node_groups
            .iter()
            .filter_map(|g| {
                g.template
                    .labels
                    .get("topology.kubernetes.io/zone")
                    .map(String::as_str)
            })
            .collect();
        assert_eq!(zones.len(), 3, "{name}: groups across three zones");
        let max_total: usize = scenario.node_groups.iter().map(|g| g.max_size).sum();
        assert!(max_total <= 100_000, "{name}: within the node limit");
        assert!(
            scenario
                .expect
                .iter()
                .any(|e| e.check == Check::PendingPods(0)),
            "{name}: every pending pod is expected to run at the end"
        );
        options_for(&scenario, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The 15,000-node cluster: the loop at time 0 finds underutilized nodes unneeded (the pending
/// pods are still inside the 2-second batching window), and the next loop grows the batch
/// groups for the pending pods, balanced across the zones.
#[test]
fn large_15k_first_loops_find_unneeded_nodes_and_scale_up() {
    let scenario = scenario("large-15k");
    let mut simulation = Simulation::new(&scenario, options_for(&scenario, &[]).unwrap());
    let first = simulation.next_loop().expect("a loop at time 0");
    assert_eq!(simulation.cluster().node_count(), 15_000);
    assert_eq!(simulation.cluster().pending_count(), 22_500);
    let unneeded = first
        .outcome
        .scale_down
        .as_ref()
        .map(|p| p.unneeded.len())
        .unwrap_or(0);
    assert!(unneeded > 0, "the first loop finds unneeded nodes");
    let second = simulation.next_loop().expect("a loop at 10 s");
    let plan = second.outcome.scale_up.as_ref().expect("a scale-up plan");
    let grown: BTreeSet<&str> = plan
        .increases
        .iter()
        .filter(|i| i.delta() > 0)
        .map(|i| i.group_id.as_str())
        .collect();
    assert_eq!(
        grown,
        BTreeSet::from(["batch-a", "batch-b", "batch-c"]),
        "the batch groups grow, balanced across the zones"
    );
}
