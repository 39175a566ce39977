//! Scenario parsing: the documented format parses into the documented values, and every class of
//! mistake is reported with file, line and field.

use std::path::Path;
use std::time::Duration;

use ferroscale_core::cloud::ErrorClass;
use ferroscale_model::TaintEffect;
use proptest::prelude::*;

use super::*;

const VALID: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: burst-of-web-pods
duration: 2h
seed: 42
options:
  scan-interval: 10s
  expander: least-waste
  balance-similar-node-groups: true
  max-nodes-total: 50
nodeGroups:
  - id: general-a
    minSize: 0
    maxSize: 100
    initialSize: 3
    provisioningDelay: 90s
    failures:
      increaseSize: {from: 10m, to: 20m, errorClass: OutOfResources}
    pricePerHour: 0.192
    template:
      metadata:
        labels: {topology.kubernetes.io/zone: zone-a, node.kubernetes.io/instance-type: m5.xlarge}
      status:
        allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  - id: gpu
    minSize: 0
    maxSize: 2
    template:
      spec:
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      status:
        capacity: {cpu: "8", memory: 64Gi, nvidia.com/gpu: "1"}
objects:
  - inline: {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 1000}
  - inline: {apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web, namespace: default}, spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}}
  - inline: {apiVersion: v1, kind: Service, metadata: {name: web}}
events:
  - at: 45m
    delete: {selector: "app=web", count: 200}
  - at: 0s
    create:
      count: 300
      pod:
        apiVersion: v1
        kind: Pod
        metadata: {name: web, labels: {app: web}}
        spec:
          priorityClassName: high
          containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
  - at: 50m
    cordon: {node: general-a-1}
  - at: 55m
    uncordon: {node: general-a-1}
expect:
  - at: end
    group: general-a
    nodes: {min: 10, max: 12}
  - at: 30m
    pendingPods: 0
  - runningPods: 300
  - totalNodes: {max: 20}
"#;

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    parse_scenario(text, "test.yaml", Path::new("."))
}

fn parse_err(text: &str) -> ScenarioError {
    match parse(text) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn the_documented_example_parses() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.name, "burst-of-web-pods");
    assert_eq!(s.duration, Duration::from_secs(7200));
    assert_eq!(s.seed, 42);
    assert_eq!(
        s.options[0],
        ("scan-interval".to_string(), "10s".to_string())
    );
    assert_eq!(
        s.options[2],
        (
            "balance-similar-node-groups".to_string(),
            "true".to_string()
        )
    );
    assert_eq!(
        s.options[3],
        ("max-nodes-total".to_string(), "50".to_string())
    );

    let a = &s.node_groups[0];
    assert_eq!((a.min_size, a.max_size, a.initial_size), (0, 100, 3));
    assert_eq!(a.provisioning_delay, Duration::from_secs(90));
    assert_eq!(a.price_per_hour, Some(0.192));
    assert_eq!(a.template.name, "general-a-template");
    assert_eq!(a.template.allocatable.cpu_milli, 4000);
    assert_eq!(
        a.template.capacity.memory,
        16 << 30,
        "capacity defaults to allocatable"
    );
    assert!(a.template.is_ready());
    assert_eq!(
        a.failures,
        [FailureWindow {
            operation: CloudOperation::IncreaseSize,
            from: Duration::from_secs(600),
            to: Duration::from_secs(1200),
            error_class: ErrorClass::OutOfResources,
        }]
    );
    assert!(a.failures[0].covers(Duration::from_secs(600)));
    assert!(!a.failures[0].covers(Duration::from_secs(1200)));

    let gpu = &s.node_groups[1];
    assert_eq!(gpu.initial_size, 0);
    assert_eq!(gpu.provisioning_delay, DEFAULT_PROVISIONING_DELAY);
    assert_eq!(
        gpu.template.allocatable.get("nvidia.com/gpu"),
        1,
        "allocatable defaults to capacity"
    );
    assert_eq!(gpu.template.taints[0].effect, TaintEffect::NoSchedule);

    assert_eq!(s.objects.len(), 2);
    assert_eq!(s.warnings.len(), 1, "the Service is skipped with a warning");

    // Events are in time order, whatever the file order.
    let times: Vec<u64> = s.events.iter().map(|e| e.at.as_secs()).collect();
    assert_eq!(times, [0, 2700, 3000, 3300]);
    let ScenarioAction::Create { count, pod, .. } = &s.events[0].action else {
        panic!()
    };
    assert_eq!(*count, 300);
    assert_eq!(
        pod.priority,
        Some(1000),
        "the priority class comes from the objects"
    );
    assert_eq!(pod.requests.cpu_milli, 500);
    assert_eq!(pod.namespace, "default");
    let ScenarioAction::Delete { selector, count } = &s.events[1].action else {
        panic!()
    };
    assert_eq!(*count, Some(200));
    assert_eq!(
        selector.match_labels.get("app").map(String::as_str),
        Some("web")
    );
    assert!(
        matches!(&s.events[2].action, ScenarioAction::Cordon { node } if node == "general-a-1")
    );

    assert_eq!(
        s.expect[0],
        Expectation {
            at: CheckTime::End,
            check: Check::GroupNodes {
                group: "general-a".into(),
                min: 10,
                max: 12
            }
        }
    );
    assert_eq!(s.expect[1].at, CheckTime::At(Duration::from_secs(1800)));
    assert_eq!(s.expect[1].check, Check::PendingPods(0));
    assert_eq!(
        s.expect[2],
        Expectation {
            at: CheckTime::End,
            check: Check::RunningPods(300)
        }
    );
    assert_eq!(s.expect[3].check, Check::TotalNodes { min: 0, max: 20 });
}

#[test]
fn minimal_scenario_gets_defaults() {
    let s = parse("apiVersion: ferroscale/v1alpha1\nkind: Scenario\nduration: 10m\nnodeGroups:\n- {id: g, minSize: 2, maxSize: 3, template: {}}\n").unwrap();
    assert_eq!(s.seed, DEFAULT_SEED);
    assert_eq!(s.node_groups[0].initial_size, 2);
    assert!(s.events.is_empty() && s.expect.is_empty() && s.objects.is_empty());
}

/// Replaces `from` with `to` in the valid scenario; the replacement must happen.
fn mutate(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "{from}");
    VALID.replacen(from, to, 1)
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or(0)
}

#[track_caller]
fn assert_error(text: &str, field: &str, line_needle: &str, message_part: &str) {
    let e = parse_err(text);
    assert_eq!(e.origin, "test.yaml");
    assert_eq!(e.field, field, "{e}");
    assert_eq!(e.line, Some(line_of(text, line_needle)), "{e}");
    assert!(e.message.contains(message_part), "{e}");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!(
            "test.yaml:{}: {field}",
            line_of(text, line_needle)
        )),
        "{shown}"
    );
}

#[test]
fn yaml_syntax_error() {
    let text = mutate("  expander: least-waste", "  expander: [least-waste");
    let e = parse_err(&text);
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn wrong_api_version_and_kind() {
    assert_error(
        &mutate("ferroscale/v1alpha1", "ferroscale/v2"),
        "apiVersion",
        "apiVersion",
        "ferroscale/v1alpha1",
    );
    assert_error(
        &mutate("kind: Scenario", "kind: Scenery"),
        "kind",
        "kind: Scenery",
        "Scenery",
    );
}

#[test]
fn missing_required_fields() {
    let e = parse_err(&mutate("duration: 2h\n", ""));
    assert!(e.message.contains("duration"), "{e}");
    let e = parse_err(&mutate("    maxSize: 2\n", ""));
    assert_eq!(e.field, "nodeGroups[1]");
    assert!(e.message.contains("maxSize"), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    let e = parse_err(&mutate("    maxSize: 100", "    maxsize: 100"));
    assert!(e.message.contains("maxsize"), "{e}");
    assert_eq!(e.line, Some(line_of(VALID, "maxSize: 100")));
}

#[test]
fn bad_durations() {
    assert_error(
        &mutate("duration: 2h", "duration: 2hours"),
        "duration",
        "duration",
        "2hours",
    );
    assert_error(
        &mutate("provisioningDelay: 90s", "provisioningDelay: -5s"),
        "nodeGroups[0].provisioningDelay",
        "provisioningDelay",
        "negative",
    );
    assert_error(
        &mutate("  - at: 45m", "  - at: 45"),
        "events[0].at",
        "at: 45",
        "45",
    );
    assert_error(
        &mutate("  - at: 30m", "  - at: later"),
        "expect[1].at",
        "at: later",
        "end",
    );
}

#[test]
fn bad_sizes() {
    assert_error(
        &mutate("    maxSize: 2", "    maxSize: -2"),
        "nodeGroups[1].maxSize",
        "maxSize: -2",
        "negative",
    );
    assert_error(
        &mutate("    initialSize: 3", "    initialSize: 101"),
        "nodeGroups[0].initialSize",
        "initialSize",
        "outside",
    );
    assert_error(
        &mutate(
            "    minSize: 0\n    maxSize: 2",
            "    minSize: 3\n    maxSize: 2",
        ),
        "nodeGroups[1].maxSize",
        "maxSize: 2",
        "smaller than minSize",
    );
}

#[test]
fn duplicate_group_ids() {
    let text = mutate("  - id: gpu", "  - id: general-a");
    let e = parse_err(&text);
    assert_eq!(e.field, "nodeGroups[1].id");
    assert!(e.message.contains("duplicate"), "{e}");
    // The second group's line, not the first's.
    assert_eq!(e.line, Some(line_of(VALID, "- id: gpu")));
}

#[test]
fn unknown_group_in_expect() {
    assert_error(
        &mutate("    group: general-a", "    group: general-z"),
        "expect[0].group",
        "group: general-z",
        "general-z",
    );
}

#[test]
fn bad_quantities_in_templates_and_pods() {
    assert_error(
        &mutate("memory: 64Gi", "memory: 64Gx"),
        "nodeGroups[1].template.status.capacity.memory",
        "64Gx",
        "64Gx",
    );
    assert_error(
        &mutate("cpu: 500m", "cpu: 500mm"),
        "events[1].create.pod.spec.containers[0].resources.requests.cpu",
        "500mm",
        "Pod default/web",
    );
    assert_error(
        &mutate("effect: NoSchedule}]", "effect: Never}]"),
        "nodeGroups[1].template.spec.taints[0].effect",
        "Never",
        "Never",
    );
}

#[test]
fn bad_selector_and_event_shape() {
    assert_error(
        &mutate("app=web\"", "app in (web\""),
        "events[0].delete.selector",
        "app in (web",
        "selector",
    );
    let e = parse_err(&mutate(
        "    cordon: {node: general-a-1}",
        "    cordon: {node: general-a-1}\n    uncordon: {node: x}",
    ));
    assert_eq!(e.field, "events[2]");
    assert!(e.message.contains("exactly one"));
}

#[test]
fn bad_inline_objects() {
    let e = parse_err(&mutate("kind: Service", "kind: Pod, spec: {containers: 3}"));
    assert_eq!(e.field, "objects[2].inline.spec.containers", "{e}");
    assert_eq!(e.line, Some(line_of(VALID, "kind: Service")));
    let e = parse_err(&mutate(
        "value: 1000",
        "value: 1000, preemptionPolicy: Sometimes",
    ));
    assert_eq!(e.field, "objects[0].inline.preemptionPolicy", "{e}");
}

#[test]
fn objects_files_resolve_relative_to_the_scenario() {
    let dir = std::env::temp_dir().join(format!("ferroscale-scenario-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = "apiVersion: v1\nkind: Pod\nmetadata: {name: bound, namespace: default}\nspec:\n  nodeName: general-a-0\n  containers: [{name: c, resources: {requests: {cpu: 1}}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: fast}}}]\n";
    std::fs::write(
        dir.join("dump.yaml"),
        dump.split("---").next().unwrap_or_default(),
    )
    .unwrap();
    std::fs::write(dir.join("broken.yaml"), dump).unwrap();
    let with_file =
        |file: &str| VALID.replacen("objects:\n", &format!("objects:\n  - file: {file}\n"), 1);

    std::fs::write(dir.join("scenario.yaml"), with_file("dump.yaml")).unwrap();
    let s = load_scenario(&dir.join("scenario.yaml")).unwrap();
    assert!(
        s.objects.iter().any(
            |o| matches!(o, K8sObject::Pod(p) if p.node_name.as_deref() == Some("general-a-0"))
        )
    );

    std::fs::write(dir.join("scenario.yaml"), with_file("broken.yaml")).unwrap();
    let e = load_scenario(&dir.join("scenario.yaml")).unwrap_err();
    assert!(e.origin.ends_with("broken.yaml"), "{e}");
    assert_eq!(e.line, Some(12), "{e}");
    assert_eq!(e.field, "spec.containers[0].resources.requests.cpu");

    std::fs::write(dir.join("scenario.yaml"), with_file("missing.yaml")).unwrap();
    let e = load_scenario(&dir.join("scenario.yaml")).unwrap_err();
    assert_eq!(e.field, "objects[0].file");
    assert!(e.origin.ends_with("scenario.yaml"));
    assert_eq!(
        e.line,
        Some(line_of(&with_file("missing.yaml"), "missing.yaml"))
    );

    let e = load_scenario(&dir.join("nowhere.yaml")).unwrap_err();
    assert!(e.message.contains("cannot read"));
    let _ = std::fs::remove_dir_all(&dir);
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text);
    }

    #[test]
    fn mutated_scenarios_never_panic(position in 0usize..VALID.len(), cut in 0usize..30, replacement in "[-:{}\\[\\],'\" a-zA-Z0-9.\n]{0,8}") {
        let mut text = VALID.to_string();
        let end = (position + cut).min(text.len());
        text.replace_range(position..end, &replacement);
        let _ = parse(&text);
    }
}

const SCALE_DOWN_FEATURES: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
duration: 1h
nodeGroups:
  - id: g
    minSize: 0
    maxSize: 10
    failures:
      instanceCreation: {from: 5m, to: 10m, errorClass: OutOfResources}
      deleteNodes: [{from: 20m, to: 25m}]
    template: {}
events:
  - at: 0s
    create:
      count: 5
      bind: {nodePrefix: g-, firstIndex: 2, podsPerNode: 2}
      pod: {apiVersion: v1, kind: Pod, metadata: {name: web}}
  - at: 30m
    removeNode: {node: g-3}
  - at: 31m
    deleteController: {kind: ReplicaSet, name: web-1}
expect:
  - {at: end, group: g, nodesRemoved: {min: 1, max: 2}}
  - {at: end, nodesRemoved: {max: 3}}
  - {at: end, lostPods: 0}
"#;

#[test]
fn scale_down_features_parse() {
    let s = parse(SCALE_DOWN_FEATURES).unwrap_or_else(|e| panic!("{e}"));
    let failures = &s.node_groups[0].failures;
    assert_eq!(failures.len(), 2);
    assert!(
        failures
            .iter()
            .any(|w| w.operation == CloudOperation::InstanceCreation
                && w.error_class == ErrorClass::OutOfResources
                && w.from == Duration::from_secs(300))
    );
    let ScenarioAction::Create {
        bind: Some(bind), ..
    } = &s.events[0].action
    else {
        panic!("create with bind: {:?}", s.events[0].action);
    };
    // Copies 0-1 on g-2, 2-3 on g-3, 4 on g-4.
    let nodes: Vec<String> = (0..5).map(|i| bind.node_for(i)).collect();
    assert_eq!(nodes, ["g-2", "g-2", "g-3", "g-3", "g-4"]);
    assert!(matches!(&s.events[1].action, ScenarioAction::RemoveNode { node } if node == "g-3"));
    assert!(matches!(
        &s.events[2].action,
        ScenarioAction::DeleteController { kind, namespace, name }
            if kind == "ReplicaSet" && namespace == "default" && name == "web-1"
    ));
    assert_eq!(
        s.expect[0].check,
        Check::NodesRemoved {
            group: Some("g".into()),
            min: 1,
            max: 2
        }
    );
    assert_eq!(
        s.expect[1].check,
        Check::NodesRemoved {
            group: None,
            min: 0,
            max: 3
        }
    );
    assert_eq!(s.expect[2].check, Check::LostPods(0));
}

#[test]
fn bad_bind_is_refused() {
    let text = SCALE_DOWN_FEATURES.replace("podsPerNode: 2", "podsPerNode: 0");
    assert_error(
        &text,
        "events[0].create.bind.podsPerNode",
        "podsPerNode",
        "at least 1",
    );
    let text = SCALE_DOWN_FEATURES.replace("nodePrefix: g-,", "nodePrefix: \"\",");
    assert_error(
        &text,
        "events[0].create.bind.nodePrefix",
        "nodePrefix",
        "must not be empty",
    );
}
