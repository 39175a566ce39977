//! Clouds without a cloud-controller-manager in the simulator, with and without the cloud node
//! controller (docs/behaviour.md SIM-106, docs/cloud-node-controller.md).

use std::path::Path;

use ferroscale_sim::record::{CloudNodeSummary, EntryKind};
use ferroscale_sim::report::{render_html, render_json};
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

fn bare_metal() -> Scenario {
    let text = bundled("bare-metal").expect("the bundled bare-metal scenario");
    parse_scenario(text, "bare-metal", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn play(scenario: &Scenario, set: &[(&str, &str)]) -> Simulation<'static> {
    let set: Vec<(String, String)> = set
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let options = options_for(scenario, &set).unwrap_or_else(|e| panic!("{e}"));
    let mut simulation = Simulation::new(scenario, options);
    simulation.play_to_end();
    simulation
}

/// SIM-106: the bundled scenario's promise. The group's new nodes register uninitialized, the
/// controller initializes them (the pods that need the zone label run), and once their machines
/// are gone the controller deletes the Nodes left behind; the spare server outside every group
/// keeps its taint and is never deleted.
#[test]
fn the_bare_metal_scenario_initializes_new_nodes_and_deletes_those_left_behind() {
    let scenario = bare_metal();
    let simulation = play(&scenario, &[]);
    let spare = simulation
        .cluster()
        .node("spare-server")
        .expect("the spare server stays");
    assert!(spare.node.has_taint(UNINITIALIZED));
    let result = simulation.into_result();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
    assert_eq!(
        result.summary.groups["metal"].cloud_nodes,
        Some(CloudNodeSummary {
            cloud_controller_manager: false,
            initialized: 6,
            node_objects_deleted: 6,
            left_behind: 0,
        })
    );
    // docs/cloud-node-controller.md CNC-111: the loop that ran between the nodes' registration
    // and their initialization did not ask for them again.
    assert_eq!(
        (
            result.summary.groups["metal"].scale_ups,
            result.summary.groups["metal"].nodes_added
        ),
        (1, 6)
    );
    let lines: Vec<&str> = result
        .timeline
        .iter()
        .filter(|e| e.kind == EntryKind::CloudNode)
        .map(|e| e.what.as_str())
        .collect();
    for expected in [
        "CloudNodeNotInitialized on node/spare-server",
        "the cloud node controller initialized 6 node(s) of metal",
        "6 Node object(s) of metal outlive their machines",
        "the cloud node controller deleted 6 Node object(s) of metal",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(expected)),
            "{expected}: {lines:#?}"
        );
    }
    let json = render_json(&result);
    assert!(
        json.contains("\"cloudNodes\"") && json.contains("\"nodeObjectsDeleted\": 6"),
        "{json}"
    );
    let html = render_html(&result);
    assert!(html.contains("<h2>Node initialization and removal</h2>"));
    assert!(html.contains("k-cloud-node"));
}

/// SIM-106: without the controller nothing initializes the nodes — the pods that need the zone
/// label never run — and every machine the group removes leaves its Node behind, not Ready.
#[test]
fn without_the_controller_nodes_stay_uninitialized_and_outlive_their_machines() {
    let scenario = bare_metal();
    let simulation = play(&scenario, &[("cloud-node-controller", "false")]);
    let metal: Vec<_> = simulation
        .cluster()
        .nodes()
        .filter(|n| n.group.as_deref() == Some("metal"))
        .map(|n| n.node.clone())
        .collect();
    assert!(!metal.is_empty());
    for node in &metal {
        assert!(node.has_taint(UNINITIALIZED), "{}", node.name);
        assert!(!node.is_ready(), "{} is left not Ready", node.name);
        assert_eq!(node.label("topology.kubernetes.io/zone"), None);
    }
    let result = simulation.into_result();
    let metal_summary = &result.summary.groups["metal"];
    let cloud_nodes = metal_summary
        .cloud_nodes
        .clone()
        .expect("a cloudNodes line");
    assert_eq!(cloud_nodes.initialized, 0);
    assert_eq!(cloud_nodes.node_objects_deleted, 0);
    assert_eq!(cloud_nodes.left_behind, metal.len());
    assert_eq!(
        metal_summary.nodes_removed,
        metal.len(),
        "every machine went"
    );
    assert_eq!(result.summary.pods.running, 0);
    assert_eq!(result.summary.pods.never_started, 6);
}

/// SIM-106: a group with a cloud-controller-manager is as before — initialized nodes, Nodes gone
/// with their machines — and its summary has no `cloudNodes` line.
#[test]
fn a_group_with_a_ccm_is_untouched_and_reports_no_cloud_node_line() {
    let text = bundled("bare-metal")
        .expect("bare-metal")
        .replace("    cloudControllerManager: false\n", "");
    let scenario =
        parse_scenario(&text, "with-ccm", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let result = play(&scenario, &[]).into_result();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
    assert_eq!(result.summary.groups["metal"].cloud_nodes, None);
    assert!(
        result
            .timeline
            .iter()
            .filter(|e| e.kind == EntryKind::CloudNode)
            .all(|e| e.what.contains("spare-server")),
        "only the spare server is talked about"
    );
}
