//! What a run accepts and what it reports: settings that would make a run loop without end or mean
//! nothing (a sub-second scan interval, a utilization threshold of 5, more loops than a run may
//! have), pods bound by name to a node without room, and the summary's sizes and pod waits.

use std::path::Path;

use ferroscale_sim::record::SimulationResult;
use ferroscale_sim::report::render_json;
use ferroscale_sim::runner::{SettingsError, Simulation, options_for, options_for_with};
use ferroscale_sim::scenario::{Limits, Scenario, parse_scenario};

fn parse(text: &str) -> Scenario {
    parse_scenario(text, "test.yaml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn run(scenario: &Scenario) -> SimulationResult {
    let options = options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    Simulation::new(scenario, options).finish()
}

/// One group of nodes with 4 CPUs and room for `pods` pods, `initial` of them at the start (at
/// most `max`), and `events` below.
fn scenario(duration: &str, options: &str, initial: usize, max: usize, events: &str) -> String {
    format!(
        r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: settings
duration: {duration}
options:
  scan-interval: 10s
{options}
nodeGroups:
  - id: g
    minSize: 0
    maxSize: {max}
    initialSize: {initial}
    provisioningDelay: 60s
    template:
      status:
        allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
events:
{events}
"#
    )
}

fn pods(count: usize, cpu: &str, bind: &str) -> String {
    format!(
        r#"  - at: 0s
    create:
      count: {count}
      {bind}
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {{name: web, namespace: default}}
        spec:
          containers: [{{name: web, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"#
    )
}

#[test]
fn a_scan_interval_below_one_second_is_refused_from_the_scenario_and_from_set() {
    let text = scenario("10m", "", 1, 1, &pods(1, "1", ""))
        .replace("scan-interval: 10s", "scan-interval: 0s");
    match options_for(&parse(&text), &[]) {
        Err(SettingsError::ScenarioOption { flag, source }) => {
            assert_eq!(flag, "scan-interval");
            assert!(
                source.to_string().contains("at most once per 1s"),
                "{source}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let text = scenario("10m", "", 1, 1, &pods(1, "1", ""));
    let overrides = [("scan-interval".to_string(), "500ms".to_string())];
    assert!(matches!(
        options_for(&parse(&text), &overrides),
        Err(SettingsError::Override { flag, .. }) if flag == "scan-interval"
    ));
    let overrides = [("scan-interval".to_string(), "1s".to_string())];
    assert!(options_for(&parse(&text), &overrides).is_ok());
}

#[test]
fn utilization_thresholds_outside_zero_to_one_are_refused() {
    for flag in [
        "scale-down-utilization-threshold",
        "scale-down-gpu-utilization-threshold",
    ] {
        let text = scenario("10m", &format!("  {flag}: 5"), 1, 1, &pods(1, "1", ""));
        match options_for(&parse(&text), &[]) {
            Err(SettingsError::ScenarioOption {
                flag: refused,
                source,
            }) => {
                assert_eq!(refused, flag);
                assert!(source.to_string().contains("between 0 and 1"), "{source}");
            }
            other => panic!("{flag}: expected a refusal, got {other:?}"),
        }
        let text = scenario("10m", "", 1, 1, &pods(1, "1", ""));
        let negative = [(flag.to_string(), "-0.1".to_string())];
        assert!(options_for(&parse(&text), &negative).is_err(), "{flag}");
        let fine = [(flag.to_string(), "1".to_string())];
        assert!(options_for(&parse(&text), &fine).is_ok(), "{flag}");
    }
}

#[test]
fn more_engine_loops_than_a_run_may_have_are_refused_before_running() {
    // 720 hours at one loop per second: 2,592,000 loops.
    let text = scenario("720h", "", 1, 1, &pods(1, "1", ""));
    let overrides = [("scan-interval".to_string(), "1s".to_string())];
    match options_for(&parse(&text), &overrides) {
        Err(e @ SettingsError::TooManyLoops { loops, .. }) => {
            assert_eq!(loops, 2_592_000);
            assert!(e.to_string().contains("at most 100,000"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let text = scenario("10m", "", 1, 1, &pods(1, "1", ""));
    let limits = Limits {
        loops: 59,
        ..Limits::DEFAULT
    };
    assert!(matches!(
        options_for_with(&parse(&text), &[], &limits),
        Err(SettingsError::TooManyLoops { loops: 60, .. })
    ));
    let limits = Limits {
        loops: 60,
        ..Limits::DEFAULT
    };
    assert!(options_for_with(&parse(&text), &[], &limits).is_ok());
}

#[test]
fn pods_bound_by_name_beyond_a_nodes_pod_capacity_are_refused_and_wait() {
    // 200 tiny pods bound to g-0, which holds 110; the group cannot grow.
    let bind = "bind: {nodePrefix: g-, podsPerNode: 200}";
    let result = run(&parse(&scenario("5m", "", 1, 1, &pods(200, "1m", bind))));
    let pods = &result.summary.pods;
    assert_eq!(pods.running, 110, "{pods:?}");
    assert_eq!(pods.pending, 90, "{pods:?}");
    assert!(
        result
            .timeline
            .iter()
            .any(|e| e.what == "node g-0 refused 90 pod(s) bound to it by name (OutOfpods)"),
        "{:#?}",
        result.timeline
    );
}

#[test]
fn pods_bound_by_name_beyond_a_nodes_cpu_wait_for_the_scheduler_and_get_a_new_node() {
    // Six 1-CPU pods bound to one 4-CPU node: two are refused, and a scale-up gives them a node.
    let bind = "bind: {nodePrefix: g-, podsPerNode: 6}";
    let result = run(&parse(&scenario("10m", "", 1, 2, &pods(6, "1", bind))));
    assert!(
        result
            .timeline
            .iter()
            .any(|e| e.what == "node g-0 refused 2 pod(s) bound to it by name (OutOfcpu)"),
        "{:#?}",
        result.timeline
    );
    assert_eq!(result.summary.pods.running, 6);
    assert_eq!(result.summary.groups["g"].final_size, 2);
}

#[test]
fn the_summary_names_peak_size_and_configured_bounds() {
    // Ten 1-CPU pods on 4-CPU nodes: three nodes at the peak, of at most 10.
    let result = run(&parse(&scenario("10m", "", 1, 10, &pods(10, "1", ""))));
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&result)).unwrap_or_else(|e| panic!("{e}"));
    let group = &json["groups"]["g"];
    assert_eq!(group["peakSize"], 3, "{json}");
    assert_eq!(group["maxSize"], 10, "{json}");
    assert_eq!(group["minSize"], 0, "{json}");
    assert_eq!(group["finalSize"], 3, "{json}");
}

#[test]
fn pod_waits_count_pods_that_never_started_until_the_end() {
    // Eight 2-CPU pods, one 4-CPU node that cannot be joined by another: two start at once, six
    // wait the whole 10 minutes.
    let result = run(&parse(&scenario("10m", "", 1, 1, &pods(8, "2", ""))));
    let pods = &result.summary.pods;
    assert_eq!(pods.running, 2);
    assert_eq!(pods.never_started, 6);
    assert_eq!(pods.wait_seconds.p50, 600.0, "{pods:?}");
    assert_eq!(pods.wait_seconds.max, 600.0, "{pods:?}");
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&result)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["pods"]["neverStarted"], 6, "{json}");
}

/// The node limit bounds the nodes a run creates, not the group's maxSize: with room for 12 nodes,
/// 40 pods of 4 CPUs that each need their own node stop the run at the scale-up that would go past
/// it, naming the group and the figures, and the cloud never allocated more; the same scenario
/// with `max-nodes-total` under the limit plays to its end.
#[test]
fn a_run_that_would_create_more_nodes_than_the_limit_stops_with_the_figures() {
    let limits = Limits {
        nodes: 12,
        ..Limits::DEFAULT
    };
    let parse_limited = |text: &str| {
        ferroscale_sim::scenario::parse_scenario_with(text, "test.yaml", Path::new("."), &limits)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let unbounded = parse_limited(&scenario("10m", "", 2, 1000, &pods(40, "4", "")));
    assert_eq!(unbounded.node_limit, 12);
    let result = run(&unbounded);
    let reason = result
        .node_limit_exceeded
        .as_deref()
        .unwrap_or_else(|| panic!("the run did not stop: {:#?}", result.summary));
    assert!(
        reason.contains("node group g asked for 38 more node(s)"),
        "{reason}"
    );
    assert!(reason.contains("while the cloud held 2"), "{reason}");
    assert!(
        reason.contains("more than the 12 nodes a run may have"),
        "{reason}"
    );
    assert!(
        result.summary.groups["g"].peak_size <= 12,
        "{:#?}",
        result.summary
    );
    assert!(
        result.summary.simulated_seconds < 600,
        "{:#?}",
        result.summary
    );

    let capped = parse_limited(&scenario(
        "10m",
        "  max-nodes-total: 10",
        2,
        1000,
        &pods(40, "4", ""),
    ));
    let result = run(&capped);
    assert_eq!(result.node_limit_exceeded, None);
    assert_eq!(result.summary.simulated_seconds, 600);
    assert_eq!(result.summary.groups["g"].final_size, 10);
}
