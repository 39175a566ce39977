//! `scheduler-config-file` in scenarios (docs/behaviour.md SCHED-102–SCHED-105): the same scenario
//! with and without a kube-scheduler configuration next to it, through the real engine loop and
//! the scheduler stand-in.

use std::path::PathBuf;

use ferroscale_sim::record::SimulationResult;
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::parse_scenario;

const CONFIG_HEAD: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n";

/// A directory of this test's own, holding the scheduler configuration the scenario names.
fn scenario_dir(test: &str, config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ferroscale-sim-schedconfig-{}-{test}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scheduler.yaml"), format!("{CONFIG_HEAD}{config}")).unwrap();
    dir
}

/// Runs `body` (node groups and events) with the scheduler configuration `config` when given.
fn run(test: &str, body: &str, config: Option<&str>) -> SimulationResult {
    let options = if config.is_some() {
        // Relative to the scenario file.
        "options:\n  scheduler-config-file: scheduler.yaml\n"
    } else {
        ""
    };
    let text = format!(
        "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: {test}\nduration: 20m\n{options}{body}"
    );
    let dir = scenario_dir(test, config.unwrap_or(""));
    let scenario = parse_scenario(&text, "test.yaml", &dir).unwrap_or_else(|e| panic!("{e}"));
    let options = options_for(&scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    Simulation::new(&scenario, options).finish()
}

fn group(id: &str, zone: &str, initial: usize, extra_template: &str) -> String {
    format!(
        r#"
  - id: {id}
    minSize: 0
    maxSize: 10
    initialSize: {initial}
    provisioningDelay: 60s
    template:
      metadata:
        labels: {{topology.kubernetes.io/zone: {zone}}}
{extra_template}      status:
        allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
"#
    )
}

fn pods(count: usize, cpu: &str, extra_requests: &str, owner: &str) -> String {
    format!(
        r#"
events:
  - at: 0s
    create:
      count: {count}
      pod:
        apiVersion: v1
        kind: Pod
        metadata:
          name: web
          namespace: default
          labels: {{app: web}}
{owner}        spec:
          containers:
            - name: main
              resources: {{requests: {{cpu: "{cpu}", memory: 1Gi{extra_requests}}}}}
"#
    )
}

/// docs/behaviour.md SCHED-102, SCHED-105: a template the pods do not tolerate gets no scale-up,
/// until the profile disables TaintToleration; the scheduler stand-in then binds them too.
#[test]
fn a_disabled_taint_filter_lets_pods_fit_a_tainted_template() {
    let body = format!(
        "nodeGroups:{}{}",
        group(
            "dedicated",
            "zone-a",
            0,
            "      spec:\n        taints: [{key: dedicated, value: db, effect: NoSchedule}]\n"
        ),
        pods(4, "1", "", "")
    );
    let without = run("taints-default", &body, None);
    assert_eq!(without.summary.groups["dedicated"].scale_ups, 0);
    assert_eq!(without.summary.pods.pending, 4);

    let with = run(
        "taints-disabled",
        &body,
        Some("- plugins:\n    filter:\n      disabled: [{name: TaintToleration}]\n"),
    );
    assert_eq!(with.summary.groups["dedicated"].nodes_added, 1);
    assert_eq!(with.summary.pods.running, 4);
}

/// docs/behaviour.md SCHED-104: a request of an extended resource no template has blocks
/// scale-up, unless NodeResourcesFit ignores it.
#[test]
fn an_ignored_extended_resource_no_longer_blocks_scale_up() {
    let body = format!(
        "nodeGroups:{}{}",
        group("plain", "zone-a", 0, ""),
        pods(3, "1", ", example.com/dongle: 1", "")
    );
    let without = run("dongle-default", &body, None);
    assert_eq!(without.summary.groups["plain"].scale_ups, 0);
    assert_eq!(without.summary.pods.pending, 3);

    let with = run(
        "dongle-ignored",
        &body,
        Some(
            "- pluginConfig:\n  - name: NodeResourcesFit\n    args: {ignoredResources: [example.com/dongle]}\n",
        ),
    );
    assert_eq!(with.summary.groups["plain"].nodes_added, 1);
    assert_eq!(with.summary.pods.running, 3);
}

/// docs/behaviour.md SCHED-103: a ReplicaSet's pods without constraints of their own pile into
/// one group's new nodes; with a DoNotSchedule zone default they spread over the three zones.
#[test]
fn default_zone_spread_makes_scale_up_spread_over_zones() {
    let owner = "          ownerReferences:\n            - {apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: rs-web-1, controller: true}\n";
    // One node per zone holds two 1.5-cpu pods each; the other six pods need new nodes.
    let body = format!(
        "nodeGroups:{}{}{}{}",
        group("a", "zone-a", 1, ""),
        group("b", "zone-b", 1, ""),
        group("c", "zone-c", 1, ""),
        pods(12, "1500m", "", owner)
    );
    let sizes = |r: &SimulationResult| -> Vec<usize> {
        ["a", "b", "c"]
            .iter()
            .map(|g| r.summary.groups[*g].final_size)
            .collect()
    };
    let without = run("spread-default", &body, None);
    assert_eq!(without.summary.pods.running, 12);
    assert!(
        sizes(&without).iter().any(|n| *n >= 3),
        "without default constraints one group takes the new nodes: {:?}",
        sizes(&without)
    );

    let with = run(
        "spread-list",
        &body,
        Some(
            "- pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
",
        ),
    );
    assert_eq!(with.summary.pods.running, 12);
    assert_eq!(sizes(&with), vec![2, 2, 2]);
}

/// docs/behaviour.md SCHED-101: a refused configuration stops the scenario before it runs, naming
/// the option, the file, the field and the value.
#[test]
fn a_refused_configuration_names_the_file_and_the_field() {
    let dir = scenario_dir("refused", "- percentageOfNodesToScore: 30\n");
    let text = "apiVersion: ferroscale/v1alpha1\nkind: Scenario\nname: refused\nduration: 1m\n\
                options:\n  scheduler-config-file: scheduler.yaml\n";
    let scenario = parse_scenario(text, "test.yaml", &dir).unwrap_or_else(|e| panic!("{e}"));
    let e = options_for(&scenario, &[]).unwrap_err().to_string();
    let file = dir.join("scheduler.yaml").display().to_string();
    assert!(
        e.contains("scheduler-config-file")
            && e.contains(&file)
            && e.contains("profiles[0].percentageOfNodesToScore: 30"),
        "{e}"
    );
}
