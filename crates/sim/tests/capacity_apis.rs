//! The capacity APIs in the simulator: the bundled `capacity-apis` scenario (a CapacityBuffer, a
//! CapacityQuota, check-capacity and best-effort-atomic ProvisioningRequests) played through the
//! real engine, and what its reports show (docs/scenario.md, "Capacity APIs").

use std::path::Path;

use ferroscale_sim::record::{EntryKind, SimulationResult};
use ferroscale_sim::report::{render_html, render_json, render_text};
use ferroscale_sim::runner::{options_for, simulate};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

fn text() -> String {
    bundled("capacity-apis")
        .expect("the bundled capacity-apis scenario")
        .to_string()
}

fn parse(text: &str) -> Scenario {
    parse_scenario(text, "capacity-apis", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn run(scenario: &Scenario) -> SimulationResult {
    let options = options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    simulate(scenario, options)
}

fn request<'a>(
    result: &'a SimulationResult,
    name: &str,
) -> &'a ferroscale_sim::record::RequestSummary {
    result
        .summary
        .capacity
        .provisioning_requests
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("request {name} in {:?}", result.summary.capacity))
}

#[test]
fn the_buffer_keeps_a_spare_node_that_scale_down_leaves_alone() {
    let result = run(&parse(&text()));
    assert!(
        result.summary.all_expectations_hold(),
        "{}",
        render_text(&result)
    );
    let general = &result.summary.groups["general"];
    assert_eq!((general.final_size, general.nodes_removed), (2, 0));
    let buffer = &result.summary.capacity.buffers[0];
    assert_eq!(buffer.name, "default/spare");
    assert_eq!(
        (buffer.replicas, buffer.pod_cpu_milli, buffer.ready),
        (Some(1), Some(3000), true)
    );
    assert!(result.timeline.iter().any(|e| e.kind == EntryKind::Buffer
        && e.what == "capacitybuffer/default/spare keeps headroom for 1 × (3000 mCPU, 4Gi)"));

    // Without the buffer nothing asks for the spare node.
    let without = text().replace("        replicas: 1\n", "        replicas: 0\n");
    let result = run(&parse(&without));
    assert_eq!(result.summary.groups["general"].peak_size, 1);
}

#[test]
fn the_quota_stops_team_a_at_two_nodes_and_says_so() {
    let result = run(&parse(&text()));
    let team = &result.summary.groups["team-a"];
    assert_eq!((team.final_size, team.peak_size), (2, 2));
    let quota = &result.summary.capacity.quotas[0];
    assert_eq!(quota.name, "team-a");
    assert_eq!(quota.limits["nodes"], "2");
    assert_eq!(quota.usage["nodes"], "2");
    assert!(quota.stopped_scale_ups >= 1);
    assert!(
        quota
            .last_reason
            .contains("exceeded quota: \"CapacityQuota/team-a\", resources: nodes"),
        "{}",
        quota.last_reason
    );
    let first = result
        .timeline
        .iter()
        .find(|e| e.kind == EntryKind::Quota)
        .expect("a quota line");
    assert!(
        first
            .why
            .contains("capping scale-up of node group team-a from 4 to 2 nodes")
    );
    let html = render_html(&result);
    assert!(html.contains("<h2>CapacityQuotas</h2>"));
    assert!(html.contains("exceeded quota: &quot;CapacityQuota/team-a&quot;"));

    // Raising the limit lets the group take all four pods.
    let raised = text().replace("resources: {nodes: \"2\"}", "resources: {nodes: \"10\"}");
    let result = run(&parse(&raised));
    assert_eq!(result.summary.groups["team-a"].final_size, 4);
}

#[test]
fn check_capacity_requests_show_their_life_one_provisioned_one_not() {
    let result = run(&parse(&text()));
    let fits = request(&result, "batch/fits");
    let life: Vec<(f64, &str, &str, &str)> = fits
        .life
        .iter()
        .map(|c| {
            (
                c.at_seconds,
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        &life[..2],
        [
            (240.0, "Accepted", "True", "Accepted"),
            (240.0, "Provisioned", "True", "CapacityIsFound")
        ]
    );
    // The booking ends when its pods never come.
    assert!(
        life[2..]
            .iter()
            .any(|(_, t, s, _)| *t == "BookingExpired" && *s == "True"),
        "{life:?}"
    );
    let too_big = request(&result, "batch/too-big");
    assert!(
        too_big.life.iter().any(|c| c.type_ == "Provisioned"
            && c.status == "False"
            && c.reason == "CapacityIsNotFound"),
        "{:?}",
        too_big.life
    );
    assert_ne!(too_big.state, "Provisioned");
    // Nothing grows for a check-capacity request.
    assert_eq!(result.summary.groups["general"].peak_size, 2);

    let json: serde_json::Value = serde_json::from_str(&render_json(&result)).unwrap();
    let requests = json["capacity"]["provisioningRequests"].as_array().unwrap();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["life"][1]["type"], "Provisioned");
    assert!(render_text(&result).contains("4m  Provisioned=True (CapacityIsFound)"));
}

/// The best-effort-atomic request: one scale-up of exactly its three nodes, then Provisioned,
/// and its consumer pods run on them.
#[test]
fn the_atomic_request_grows_batch_by_its_size_and_its_pods_run() {
    let result = run(&parse(&text()));
    let batch = &result.summary.groups["batch"];
    assert_eq!((batch.scale_ups, batch.nodes_added), (1, 3));
    let train = request(&result, "batch/train");
    assert!(
        train.life.iter().any(|c| c.type_ == "Provisioned"
            && c.status == "True"
            && c.reason == "CapacityIsProvisioned"),
        "{:?}",
        train.life
    );
    // The three trainer pods consume the request and run; only two analytics pods wait.
    assert_eq!(result.summary.pods.pending, 2);
}

#[test]
fn events_create_capacity_objects_alone() {
    let with_count = text().replace(
        "    create:\n      object:\n        apiVersion: autoscaling.x-k8s.io/v1\n        kind: ProvisioningRequest\n        metadata: {name: fits",
        "    create:\n      count: 2\n      object:\n        apiVersion: autoscaling.x-k8s.io/v1\n        kind: ProvisioningRequest\n        metadata: {name: fits",
    );
    let e = parse_scenario(&with_count, "s", Path::new(".")).unwrap_err();
    assert_eq!(e.field, "events[1].create.object");
    assert!(e.message.contains("no pod, count, bind or rate"), "{e}");

    let bad = text().replace("count: 2}]", "count: 0}]");
    let e = parse_scenario(&bad, "s", Path::new(".")).unwrap_err();
    assert!(e.field.starts_with("events[2].create.object"), "{e}");
    assert!(
        e.message.contains("ProvisioningRequest batch/too-big"),
        "{e}"
    );
}
