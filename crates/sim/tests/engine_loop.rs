//! The simulator's engine loop against small scenarios: provisioning delays, failure injection and
//! backoff, expectations, and the bundled default scenario.

use std::path::Path;

use ferroscale_sim::record::{EntryKind, SimulationResult};
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, default_scenario, parse_scenario};

fn parse(text: &str) -> Scenario {
    parse_scenario(text, "test.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn run(scenario: &Scenario) -> SimulationResult {
    let options = options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    Simulation::new(scenario, options).finish()
}

fn entries(result: &SimulationResult, kind: EntryKind) -> Vec<String> {
    result
        .timeline
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| format!("{} {} — {}", e.at, e.what, e.why))
        .collect()
}

/// `count` pods of `cpu` each, created at `at`.
fn pods_event(at: &str, name: &str, count: usize, cpu: &str) -> String {
    format!(
        r#"
  - at: {at}
    create:
      count: {count}
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}
        spec:
          containers:
            - name: main
              image: busybox
              resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}
"#
    )
}

fn group(id: &str, max: usize, delay: &str, extra: &str) -> String {
    format!(
        r#"
  - id: {id}
    minSize: 0
    maxSize: {max}
    initialSize: 0
    provisioningDelay: {delay}
    pricePerHour: 0.2
{extra}
    template:
      metadata:
        labels: {{node.kubernetes.io/instance-type: {id}-type}}
      status:
        allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
"#
    )
}

#[test]
fn the_default_scenario_meets_its_expectations() {
    let scenario = default_scenario().unwrap_or_else(|e| panic!("{e}"));
    let result = run(&scenario);
    assert!(!result.summary.expectations.is_empty());
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

#[test]
fn no_second_scale_up_while_nodes_are_on_their_way() {
    // 12 pods of 1 cpu need 3 nodes of 4 cpu; nodes take 5 minutes to arrive while the engine
    // looks every 10 seconds. Placeholders for the requested nodes must absorb the pods.
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: slow-nodes\nduration: 15m\n\
         nodeGroups:{}\nevents:{}",
        group("slow", 10, "5m", ""),
        pods_event("0s", "web", 12, "1")
    );
    let result = run(&parse(&text));
    let slow = &result.summary.groups["slow"];
    assert_eq!(
        slow.scale_ups,
        1,
        "{:?}",
        entries(&result, EntryKind::ScaleUp)
    );
    assert_eq!(slow.nodes_added, 3);
    assert_eq!(slow.peak_size, 3);
    assert_eq!(result.summary.pods.running, 12);
    // Nothing can run before the nodes exist: every pod waited at least the provisioning delay.
    assert!(
        result.summary.pods.wait_seconds.p50 >= 300.0,
        "{:?}",
        result.summary.pods
    );
    let ready = result
        .timeline
        .iter()
        .find(|e| e.kind == EntryKind::NodesReady)
        .expect("ready");
    let scaled = result
        .timeline
        .iter()
        .find(|e| e.kind == EntryKind::ScaleUp)
        .expect("scale-up");
    assert_eq!(ready.at.since(scaled.at).as_secs(), 300);
}

#[test]
fn a_failing_group_is_backed_off_and_another_group_is_chosen() {
    // `cheap` is preferred by the price expander but its IncreaseSize fails for the first 20
    // minutes; the engine must back it off and use `costly` instead, and never touch `cheap`
    // during the backoff.
    let cheap_failures =
        "    failures:\n      increaseSize: {from: 0s, to: 20m, errorClass: OutOfResources}";
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: stockout\nduration: 10m\n\
         options: {{expander: price}}\nnodeGroups:{}{}\nevents:{}",
        group("cheap", 10, "60s", cheap_failures).replace("pricePerHour: 0.2", "pricePerHour: 0.1"),
        group("costly", 10, "60s", "").replace("pricePerHour: 0.2", "pricePerHour: 0.5"),
        pods_event("0s", "web", 8, "1")
    );
    let result = run(&parse(&text));
    let failures = entries(&result, EntryKind::Failure);
    assert!(failures.iter().any(|f| f.contains("cheap")), "{failures:?}");
    let backoffs = entries(&result, EntryKind::Backoff);
    assert!(
        backoffs.iter().any(|b| b.contains("cheap backed off")),
        "{backoffs:?}"
    );
    // Exactly one failed attempt: the group is left alone during its backoff.
    assert_eq!(
        failures
            .iter()
            .filter(|f| f.contains("IncreaseSize of cheap"))
            .count(),
        1
    );
    assert_eq!(result.summary.groups["cheap"].nodes_added, 0);
    assert_eq!(result.summary.groups["costly"].nodes_added, 2);
    assert_eq!(result.summary.pods.running, 8);
}

#[test]
fn expectations_are_checked_at_their_time_and_failures_reported() {
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: checks\nduration: 10m\n\
         nodeGroups:{}\nevents:{}\nexpect:\n\
         \x20 - {{at: 30s, pendingPods: 4}}\n\
         \x20 - {{at: end, pendingPods: 0}}\n\
         \x20 - {{at: end, group: g, nodes: {{min: 5, max: 6}}}}\n",
        group("g", 10, "60s", ""),
        pods_event("0s", "web", 4, "1")
    );
    let result = run(&parse(&text));
    let outcomes: Vec<(bool, &str)> = result
        .summary
        .expectations
        .iter()
        .map(|e| (e.ok, e.observed.as_str()))
        .collect();
    // At 30 s the node requested at 10-20 s is not there yet; at the end one node runs all four.
    assert_eq!(outcomes, vec![(true, "4"), (true, "0"), (false, "1")]);
    assert!(!result.summary.all_expectations_hold());
}

#[test]
fn pods_that_fit_no_template_stay_pending_and_are_explained() {
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: too-big\nduration: 5m\n\
         nodeGroups:{}\nevents:{}",
        group("g", 10, "60s", ""),
        pods_event("0s", "huge", 2, "64")
    );
    let scenario = parse(&text);
    let result = run(&scenario);
    assert_eq!(result.summary.pods.pending, 2);
    assert_eq!(result.summary.pods.never_schedulable, 2);
    assert_eq!(result.summary.groups["g"].scale_ups, 0);
    let not_helped = entries(&result, EntryKind::NotHelped);
    assert_eq!(
        not_helped.len(),
        1,
        "reported once, not every loop: {not_helped:?}"
    );
    assert!(
        not_helped[0].contains("g: Insufficient cpu"),
        "{not_helped:?}"
    );

    let options = options_for(&scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    let explanation = ferroscale_sim::explain::explain(
        &scenario,
        options,
        ferroscale_sim::explain::ExplainAt::FirstPending,
    );
    let text = ferroscale_sim::explain::render_explanation(&explanation);
    assert!(
        text.contains("2 pod(s) did not trigger a scale-up"),
        "{text}"
    );
    assert!(text.contains("  g: Insufficient cpu"), "{text}");
}

#[test]
fn instances_that_fail_to_be_created_back_the_group_off_and_are_cleaned_up() {
    use ferroscale_core::cloud::ErrorClass;
    use ferroscale_model::Timestamp;
    use ferroscale_sim::cloud::{FailingCall, FailureWindow};
    use ferroscale_sim::runner::group_specs;

    // The cloud accepts `cheap`'s resize but never delivers the machines (a stockout). The engine
    // must notice the failed instances, back `cheap` off, remove them, and use `costly`.
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: stockout\nduration: 10m\n\
         options: {{expander: price}}\nnodeGroups:{}{}\nevents:{}",
        group("cheap", 10, "60s", "").replace("pricePerHour: 0.2", "pricePerHour: 0.1"),
        group("costly", 10, "60s", "").replace("pricePerHour: 0.2", "pricePerHour: 0.5"),
        pods_event("0s", "web", 8, "1")
    );
    let scenario = parse(&text);
    let mut specs = group_specs(&scenario);
    specs[0].failures.push(FailureWindow {
        call: FailingCall::InstanceCreation,
        from: Timestamp::from_secs(0),
        to: Timestamp::from_secs(1200),
        class: ErrorClass::OutOfResources,
    });
    let options = options_for(&scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    let result = Simulation::with_groups(&scenario, options, specs).finish();

    let failures = entries(&result, EntryKind::Failure);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("2 instance(s) of cheap failed to be created")),
        "{failures:?}"
    );
    let backoffs = entries(&result, EntryKind::Backoff);
    assert!(
        backoffs.iter().any(|b| b.contains("cheap backed off")),
        "{backoffs:?}"
    );
    let cheap = &result.summary.groups["cheap"];
    assert_eq!((cheap.scale_ups, cheap.nodes_added), (1, 0));
    assert_eq!(result.summary.groups["costly"].nodes_added, 2);
    assert_eq!(result.summary.pods.running, 8);
    // The failed instances were deleted, so nothing is billed for them after the cleanup.
    assert!(
        result.summary.node_hours < 2.0 * 10.0 / 60.0 + 0.01,
        "{}",
        result.summary.node_hours
    );
}
