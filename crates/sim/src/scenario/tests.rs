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

/// docs/behaviour.md SIM-106: `cloudControllerManager` defaults to true; `false` is read; a value
/// that is not a boolean names the field.
#[test]
fn cloud_controller_manager_is_a_boolean_defaulting_to_true() {
    let s = parse(VALID).unwrap();
    assert!(s.node_groups.iter().all(|g| g.cloud_controller_manager));
    let without = mutate(
        "    provisioningDelay: 90s\n",
        "    provisioningDelay: 90s\n    cloudControllerManager: false\n",
    );
    let s = parse(&without).unwrap();
    assert!(!s.node_groups[0].cloud_controller_manager);
    assert!(s.node_groups[1].cloud_controller_manager);
    let bad = mutate(
        "    provisioningDelay: 90s\n",
        "    provisioningDelay: 90s\n    cloudControllerManager: sometimes\n",
    );
    let e = parse_err(&bad);
    assert!(e.to_string().contains("cloudControllerManager"), "{e}");
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

/// A temporary directory for one test's files, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("ferroscale-scenario-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse_limited(text: &str, base_dir: &Path, limits: &Limits) -> Result<Scenario, ScenarioError> {
    parse_scenario_with(text, "test.yaml", base_dir, limits)
}

#[test]
fn a_pod_count_beyond_the_limit_is_refused_before_any_pod_exists() {
    assert_error(
        &mutate("count: 300", "count: 100000000000"),
        "events[1].create.count",
        "count: 100000000000",
        "more than the 1,000,000 pods",
    );
    // Several events that each stay under the limit but add up beyond it.
    let limits = Limits {
        pods: 500,
        ..Limits::DEFAULT
    };
    let text = mutate(
        "  - at: 50m\n    cordon:",
        "  - at: 1h\n    create:\n      count: 201\n      pod: {apiVersion: v1, kind: Pod, metadata: {name: more}, spec: {containers: [{name: c}]}}\n  - at: 50m\n    cordon:",
    );
    let e = parse_limited(&text, Path::new("."), &limits).unwrap_err();
    assert_eq!(e.field, "events[2].create.count", "{e}");
    assert!(e.message.contains("501 pods"), "{e}");
}

/// A group's maxSize is what its cloud would allow, not what the run creates: a cluster
/// replayed with 200 groups of maxSize 1000 is read, only the nodes that exist at time 0 count.
#[test]
fn node_limit_counts_the_nodes_at_time_zero_not_the_groups_maxima() {
    let groups: String = (0..200)
        .map(|i| {
            format!(
                "  - {{id: pool-{i}, minSize: 0, maxSize: 1000, initialSize: 1, template: {{}}}}\n"
            )
        })
        .collect();
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nduration: 10m\nnodeGroups:\n{groups}"
    );
    let scenario = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(scenario.node_groups.len(), 200);
    assert_eq!(scenario.node_limit, Limits::DEFAULT.nodes);

    // The nodes at time 0 are bounded: initial sizes first, then with the Node objects.
    let limits = Limits {
        nodes: 2,
        ..Limits::DEFAULT
    };
    let e = parse_limited(VALID, Path::new("."), &limits).unwrap_err();
    assert_eq!(e.field, "nodeGroups[0].initialSize", "{e}");
    assert_eq!(e.line, Some(line_of(VALID, "initialSize: 3")), "{e}");
    assert!(e.message.contains("initial sizes add up to 3"), "{e}");
    assert!(e.message.contains("more than the 2 nodes"), "{e}");
    let limits = Limits {
        nodes: 3,
        ..Limits::DEFAULT
    };
    let with_node = mutate(
        "  - inline: {apiVersion: v1, kind: Service, metadata: {name: web}}",
        "  - inline: {apiVersion: v1, kind: Service, metadata: {name: web}}\n  - inline: {apiVersion: v1, kind: Node, metadata: {name: loose}}",
    );
    let e = parse_limited(&with_node, Path::new("."), &limits).unwrap_err();
    assert_eq!(e.field, "objects", "{e}");
    assert!(
        e.message
            .contains("1 Node objects and the node groups' initial sizes (3)"),
        "{e}"
    );
    assert_eq!(
        parse_limited(VALID, Path::new("."), &limits)
            .map(|s| s.node_limit)
            .map_err(|e| e.to_string()),
        Ok(3)
    );
}

#[test]
fn counts_of_groups_events_expectations_and_files_are_bounded() {
    let tight = |limits: Limits, field: &str, part: &str| {
        let e = parse_limited(VALID, Path::new("."), &limits).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(part), "{e}");
    };
    tight(
        Limits {
            node_groups: 1,
            ..Limits::DEFAULT
        },
        "nodeGroups",
        "2 node groups; a scenario may have at most 1",
    );
    tight(
        Limits {
            events: 3,
            ..Limits::DEFAULT
        },
        "events",
        "4 events; a scenario may have at most 3",
    );
    tight(
        Limits {
            expectations: 2,
            ..Limits::DEFAULT
        },
        "expect",
        "4 expectations; a scenario may have at most 2",
    );
    let two_files = mutate(
        "objects:\n",
        "objects:\n  - file: a.yaml\n  - file: b.yaml\n",
    );
    let e = parse_limited(
        &two_files,
        Path::new("."),
        &Limits {
            object_files: 1,
            ..Limits::DEFAULT
        },
    )
    .unwrap_err();
    assert_eq!(e.field, "objects", "{e}");
    assert!(e.message.contains("2 objects files"), "{e}");
}

#[test]
fn a_duration_beyond_thirty_days_is_refused() {
    assert_error(
        &mutate("duration: 2h", "duration: 9000h"),
        "duration",
        "duration",
        "longer than the 720h0m0s a scenario may last",
    );
}

#[test]
fn events_and_expectations_after_the_end_are_refused() {
    assert_error(
        &mutate("  - at: 55m", "  - at: 3h"),
        "events[3].at",
        "at: 3h",
        "after the end of the scenario (duration 2h0m0s)",
    );
    assert_error(
        &mutate(
            "  - at: 30m\n    pendingPods",
            "  - at: 99h\n    pendingPods",
        ),
        "expect[1].at",
        "at: 99h",
        "after the end",
    );
    // At the end exactly is still inside the run.
    assert!(
        parse(&mutate(
            "  - at: 30m\n    pendingPods",
            "  - at: 2h\n    pendingPods"
        ))
        .is_ok()
    );
}

#[test]
fn objects_are_read_only_from_regular_files() {
    let dir = TempDir::new("special-files");
    std::fs::create_dir_all(dir.0.join("a-directory")).unwrap();
    for (file, kind) in [
        ("/dev/zero", "a character device"),
        ("a-directory", "a directory"),
    ] {
        let text = mutate("objects:\n", &format!("objects:\n  - file: {file}\n"));
        let e = parse_scenario(&text, "test.yaml", &dir.0).unwrap_err();
        assert_eq!(e.field, "objects[0].file", "{e}");
        assert_eq!(e.line, Some(line_of(&text, "- file:")), "{e}");
        assert!(e.message.contains(kind), "{e}");
        assert!(e.message.contains("only regular files"), "{e}");
    }
    let e = load_scenario(Path::new("/dev/zero")).unwrap_err();
    assert!(e.message.contains("a character device"), "{e}");
}

#[test]
fn an_objects_file_one_byte_over_the_limit_is_refused_without_reading_it() {
    let dir = TempDir::new("file-size");
    // Larger than the scenario text, so the scenario itself stays within the per-file limits.
    let pod = format!(
        "# {}\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c}}]}}\n",
        "padding ".repeat(1000)
    );
    std::fs::write(dir.0.join("pods.yaml"), &pod).unwrap();
    let text = mutate("objects:\n", "objects:\n  - file: pods.yaml\n");
    let exact = Limits {
        file_bytes: pod.len() as u64,
        ..Limits::DEFAULT
    };
    assert!(parse_limited(&text, &dir.0, &exact).is_ok());
    let one_short = Limits {
        file_bytes: pod.len() as u64 - 1,
        ..Limits::DEFAULT
    };
    let e = parse_limited(&text, &dir.0, &one_short).unwrap_err();
    assert_eq!(e.field, "objects[0].file", "{e}");
    assert!(
        e.message.contains(&format!(
            "a file may have at most {} bytes",
            group_digits(pod.len() as u64 - 1)
        )),
        "{e}"
    );
    // The scenario's own bytes count against the total for all files.
    let total = Limits {
        total_bytes: (text.len() + pod.len() - 1) as u64,
        ..Limits::DEFAULT
    };
    let e = parse_limited(&text, &dir.0, &total).unwrap_err();
    assert!(e.message.contains("together"), "{e}");
    // The scenario text itself.
    let small = Limits {
        file_bytes: text.len() as u64 - 1,
        ..Limits::DEFAULT
    };
    let e = parse_limited(&text, &dir.0, &small).unwrap_err();
    assert!(e.message.contains("at most"), "{e}");
}

#[test]
fn nesting_a_hundred_thousand_levels_deep_fails_before_parsing() {
    let deep = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nduration: 1m\noptions: {{a: {}}}\n",
        "[".repeat(100_000) + &"]".repeat(100_000)
    );
    let e = parse_err(&deep);
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.message.contains("nested more than 64 levels"), "{e}");
    // Block style: a thousand levels are enough to cross the limit (a hundred thousand would be
    // gigabytes of indentation, refused by the file size limit anyway).
    let block: String = (0..1_000)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .collect();
    let e = parse_err(&format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nduration: 1m\noptions:\n{block}"
    ));
    assert!(e.message.contains("nested more than 64 levels"), "{e}");

    // The same bound holds in an objects file.
    let dir = TempDir::new("nesting");
    std::fs::write(
        dir.0.join("deep.yaml"),
        format!(
            "apiVersion: v1\nkind: List\nitems: {}\n",
            "[".repeat(100_000)
        ),
    )
    .unwrap();
    let text = mutate("objects:\n", "objects:\n  - file: deep.yaml\n");
    let e = parse_scenario(&text, "test.yaml", &dir.0).unwrap_err();
    assert!(e.origin.ends_with("deep.yaml"), "{e}");
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn negative_quantities_are_refused_with_their_field() {
    assert_error(
        &mutate(
            "requests: {cpu: 500m, memory: 1Gi}",
            "requests: {cpu: -500m, memory: 1Gi}",
        ),
        "events[1].create.pod.spec.containers[0].resources.requests.cpu",
        "cpu: -500m",
        "must not be negative",
    );
    assert_error(
        &mutate(
            "allocatable: {cpu: \"4\", memory: 16Gi",
            "allocatable: {cpu: \"4\", memory: -16Gi",
        ),
        "nodeGroups[0].template.status.allocatable.memory",
        "memory: -16Gi",
        "must not be negative",
    );
    assert_error(
        &mutate("capacity: {cpu: \"8\"", "capacity: {cpu: \"-8\""),
        "nodeGroups[1].template.status.capacity.cpu",
        "capacity:",
        "must not be negative",
    );
}

#[test]
fn unknown_fields_inside_kubernetes_objects_are_refused() {
    assert_error(
        &mutate(
            "          priorityClassName: high\n",
            "          priorityClassName: high\n          nodeSelektor: {disk: ssd}\n",
        ),
        "events[1].create.pod.spec.nodeSelektor",
        "nodeSelektor",
        "unknown field `nodeSelektor`",
    );
    assert_error(
        &mutate(
            "        taints: [{key: nvidia.com/gpu,",
            "        taint: [{key: nvidia.com/gpu,",
        ),
        "nodeGroups[1].template.spec.taint",
        "taint:",
        "unknown field `taint`",
    );
    let e = parse_err(&mutate(
        "metadata: {name: web, namespace: default}, spec: {maxUnavailable: 1,",
        "metadata: {name: web, namespace: default}, spec: {maxUnavailabel: 1,",
    ));
    assert_eq!(e.field, "objects[1].inline.spec.maxUnavailabel", "{e}");
    assert!(e.message.contains("unknown field"), "{e}");

    let dir = TempDir::new("strict-file");
    std::fs::write(
        dir.0.join("pods.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    containers:\n    - name: c\n      resourcez: {}\n",
    )
    .unwrap();
    let text = mutate("objects:\n", "objects:\n  - file: pods.yaml\n");
    let e = parse_scenario(&text, "test.yaml", &dir.0).unwrap_err();
    assert!(e.origin.ends_with("pods.yaml"), "{e}");
    assert_eq!(e.field, "items[0].spec.containers[0].resourcez", "{e}");
    assert_eq!(e.line, Some(10), "{e}");
}

/// docs/scenario.md "Pods arriving over time": `rate` spreads a create over one-second steps,
/// copies numbered across the steps.
#[test]
fn a_rate_spreads_the_copies_over_time() {
    let s = parse(&mutate(
        "      count: 300\n",
        "      count: 50\n      rate: 20/s\n",
    ))
    .unwrap();
    let steps: Vec<(Duration, usize, Option<usize>)> = s
        .events
        .iter()
        .filter_map(|e| match &e.action {
            ScenarioAction::Create {
                count, first_copy, ..
            } => Some((e.at, *count, *first_copy)),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (Duration::ZERO, 20, Some(0)),
            (Duration::from_secs(1), 20, Some(20)),
            (Duration::from_secs(2), 10, Some(40)),
        ]
    );
    assert_eq!(copy_name("web", 10, Some(40), 3).as_deref(), Some("web-43"));
    assert_eq!(copy_name("web", 1, Some(7), 0).as_deref(), Some("web-7"));
    assert_eq!(copy_name("web", 3, None, 2).as_deref(), Some("web-2"));
    assert_eq!(copy_name("web", 1, None, 0), None);
    // Per minute: one pod every 12 s.
    let s = parse(&mutate(
        "      count: 300\n",
        "      count: 3\n      rate: 5/m\n",
    ))
    .unwrap();
    let at: Vec<u64> = s
        .events
        .iter()
        .filter(|e| matches!(e.action, ScenarioAction::Create { .. }))
        .map(|e| e.at.as_secs())
        .collect();
    assert_eq!(at, vec![0, 12, 24]);
}

/// A bad rate is an error naming `create.rate`, its line and the value; rates that do not make
/// sense with the rest of the create are refused too.
#[test]
fn bad_rates_are_refused_with_field_and_value() {
    assert_error(
        &mutate("      count: 300\n", "      count: 300\n      rate: fast\n"),
        "events[1].create.rate",
        "rate: fast",
        "\"fast\" is not a rate: expected pods per second",
    );
    assert_error(
        &mutate("      count: 300\n", "      count: 300\n      rate: 0/s\n"),
        "events[1].create.rate",
        "rate: 0/s",
        "0/s is outside the accepted rates, from 1/h to 100000/s",
    );
    assert_error(
        &mutate(
            "      count: 300\n",
            "      count: 300\n      rate: 10/s\n      bind: {nodePrefix: general-a-}\n",
        ),
        "events[1].create.rate",
        "rate: 10/s",
        "rate and bind do not go together",
    );
    let object = mutate(
        "  - at: 50m\n    cordon:",
        "  - at: 1h\n    create:\n      rate: 1/s\n      object: {apiVersion: v1, kind: PodTemplate, metadata: {name: t}, template: {spec: {containers: [{name: c}]}}}\n  - at: 50m\n    cordon:",
    );
    let e = parse_err(&object);
    assert_eq!(e.field, "events[2].create.object", "{e}");
    assert!(e.message.contains("no pod, count, bind or rate"), "{e}");
}

/// The steps of a rate count as events: a slow rate over many pods is refused by the events
/// limit, naming the rate, before anything is created.
#[test]
fn the_steps_of_a_rate_count_against_the_events_limit() {
    let text = mutate("      count: 300\n", "      count: 300\n      rate: 1/s\n");
    let limits = Limits {
        events: 300,
        ..Limits::DEFAULT
    };
    let e = parse_limited(&text, Path::new("."), &limits).unwrap_err();
    assert_eq!(e.field, "events[1].create.rate", "{e}");
    assert!(
        e.message
            .contains("300 pods at 1/s arrive in more steps than the 300 events"),
        "{e}"
    );
    // With room for every step and the other three events, it parses.
    let limits = Limits {
        events: 303,
        ..Limits::DEFAULT
    };
    assert_eq!(
        parse_limited(&text, Path::new("."), &limits)
            .unwrap()
            .events
            .len(),
        303
    );
}
