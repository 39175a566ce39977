//! Volume-aware scheduling in the simulator: scenarios with claims, volumes, storage classes and
//! CSINodes play with the same volume filters as the engine, and `explain`, the timeline and the
//! HTML report name a volume verdict like any other filter's.

use std::path::Path;
use std::time::Duration;

use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::ClaimPhase;
use ferroscale_sim::explain::{ExplainAt, PodOutcome, explain, render_explanation};
use ferroscale_sim::report::render_html;
use ferroscale_sim::runner::{Simulation, options_for};
use ferroscale_sim::scenario::{Scenario, bundled, parse_scenario};

const VOLUME_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";

fn zonal(text_change: impl Fn(String) -> String) -> Scenario {
    let text = bundled("zonal-volumes").expect("the bundled zonal-volumes scenario");
    parse_scenario(&text_change(text.to_string()), "zonal", Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn options(scenario: &Scenario) -> AutoscalingOptions {
    options_for(scenario, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn group_size(simulation: &Simulation, group: &str) -> usize {
    simulation
        .cluster()
        .nodes()
        .filter(|n| n.group.as_deref() == Some(group))
        .count()
}

/// The bundled scenario's promise: balanced web nodes, then the database grows zone-b alone.
#[test]
fn the_zonal_volumes_scenario_grows_only_the_volumes_zone() {
    let scenario = zonal(|t| t);
    let result = Simulation::new(&scenario, options(&scenario)).finish();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

/// The database pods run on zone-b nodes only, and their claims stay bound to their volumes.
#[test]
fn database_pods_run_where_their_volumes_are() {
    let scenario = zonal(|t| t);
    let mut simulation = Simulation::new(&scenario, options(&scenario));
    simulation.play_to_end();
    let cluster = simulation.cluster();
    let db: Vec<_> = cluster
        .live_pods()
        .filter(|r| r.pod.labels.get("app").map(String::as_str) == Some("db"))
        .collect();
    assert_eq!(db.len(), 3);
    for record in db {
        let node = record.pod.node_name.as_deref().expect("db pod runs");
        assert_eq!(
            cluster.node(node).and_then(|n| n.group.as_deref()),
            Some("general-b"),
            "{} runs in zone-b",
            record.pod.key()
        );
    }
    assert!(
        cluster
            .storage()
            .objects()
            .claims
            .iter()
            .all(|c| c.phase == ClaimPhase::Bound)
    );
    assert_eq!(group_size(&simulation, "general-a"), 1);
}

/// With zone-b full (its maximum already reached by the web node), nothing can help the database
/// pods: `explain`, the timeline and the HTML report say why zone-a cannot, in the scheduler's
/// words, and zone-a still does not grow.
#[test]
fn explain_and_the_report_name_the_volume_conflict() {
    let scenario = zonal(|t| {
        t.replacen(
            "  - id: general-b\n    minSize: 0\n    maxSize: 10",
            "  - id: general-b\n    minSize: 0\n    maxSize: 1",
            1,
        )
    });
    assert_eq!(scenario.node_groups[1].max_size, 1);
    let explanation = explain(
        &scenario,
        options(&scenario),
        ExplainAt::Time(Duration::from_secs(6 * 60)),
    );
    let db_verdict = explanation
        .groups
        .iter()
        .find(|g| g.pods.iter().any(|p| p == "shop/db-0"))
        .expect("the db pods are explained");
    let PodOutcome::NotHelped { per_group } = &db_verdict.outcome else {
        panic!("db pods cannot be helped: {:?}", db_verdict.outcome)
    };
    let zone_a = per_group
        .iter()
        .find(|(g, _)| g == "general-a")
        .map(|(_, r)| r.as_str());
    assert_eq!(zone_a, Some(VOLUME_CONFLICT), "{per_group:?}");
    let text = render_explanation(&explanation);
    assert!(text.contains(VOLUME_CONFLICT), "{text}");

    let mut simulation = Simulation::new(&scenario, options(&scenario));
    simulation.play_to_end();
    assert_eq!(
        group_size(&simulation, "general-a"),
        1,
        "zone-a never grows"
    );
    let result = simulation.finish();
    assert!(
        result
            .timeline
            .iter()
            .any(|e| e.why.contains(&format!("general-a: {VOLUME_CONFLICT}"))),
        "the timeline names the volume conflict"
    );
    // The report escapes the reason's apostrophes like any text.
    let in_html = VOLUME_CONFLICT.replace('\'', "&#39;");
    assert!(render_html(&result).contains(&in_html));
}

const CSI_LIMITS: &str = r#"apiVersion: ferroscale/v1alpha1
kind: Scenario
name: csi-limits
duration: 10m
options:
  scan-interval: 10s
nodeGroups:
  - id: pool
    minSize: 0
    maxSize: 5
    csiDrivers:
      - {name: ebs.csi.aws.com, count: 1}
    template:
      metadata: {labels: {topology.kubernetes.io/zone: zone-a}}
      status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}
objects:
  - inline: {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: gp3}, provisioner: ebs.csi.aws.com, volumeBindingMode: WaitForFirstConsumer}
  - inline: {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data-0}, spec: {accessModes: [ReadWriteOnce], storageClassName: gp3, resources: {requests: {storage: 1Gi}}}}
  - inline: {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data-1}, spec: {accessModes: [ReadWriteOnce], storageClassName: gp3, resources: {requests: {storage: 1Gi}}}}
events:
  - at: 1m
    create:
      pod: {apiVersion: v1, kind: Pod, metadata: {name: app-0}, spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}], volumes: [{name: data, persistentVolumeClaim: {claimName: data-0}}]}}
  - at: 1m
    create:
      pod: {apiVersion: v1, kind: Pod, metadata: {name: app-1}, spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}], volumes: [{name: data, persistentVolumeClaim: {claimName: data-1}}]}}
expect:
  - at: end
    group: pool
    nodes: {min: 2, max: 2}
  - at: end
    runningPods: 2
"#;

/// A group's `csiDrivers` limit is simulated on its template and reported by its nodes: two tiny
/// pods whose claims are provisioned by a driver that attaches one volume per node need two nodes,
/// and each claim gets a volume provisioned in the node's zone.
#[test]
fn group_csi_drivers_limit_the_volumes_per_new_node() {
    let scenario =
        parse_scenario(CSI_LIMITS, "csi-limits", Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        scenario.node_groups[0].csi_drivers[0].allocatable_count,
        Some(1)
    );
    let mut simulation = Simulation::new(&scenario, options(&scenario));
    simulation.play_to_end();
    let storage = simulation.cluster().storage().objects();
    assert_eq!(
        storage.csi_nodes.len(),
        2,
        "each new node reports its CSINode"
    );
    assert!(storage.claims.iter().all(|c| c.phase == ClaimPhase::Bound));
    assert!(storage.volumes.iter().all(|v| {
        v.labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str)
            == Some("zone-a")
    }));
    let result = simulation.finish();
    assert!(
        result.summary.all_expectations_hold(),
        "{:?}",
        result.summary.expectations
    );
}

/// `csiDrivers` entries are checked like every other field: the error names the field and value.
#[test]
fn bad_csi_drivers_are_refused_naming_the_field() {
    for (replacement, field, message) in [
        (
            "{name: ebs.csi.aws.com, count: -1}",
            "nodeGroups[0].csiDrivers[0].count",
            "-1",
        ),
        (
            "{name: \"\", count: 1}",
            "nodeGroups[0].csiDrivers[0].name",
            "needs a name",
        ),
        (
            "{name: a, count: 1}\n      - {name: a}",
            "nodeGroups[0].csiDrivers[1].name",
            "listed twice",
        ),
        (
            "{name: a, limit: 1}",
            "nodeGroups[0].csiDrivers[0]",
            "limit",
        ),
    ] {
        let text = CSI_LIMITS.replace("{name: ebs.csi.aws.com, count: 1}", replacement);
        let e = parse_scenario(&text, "bad.yaml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with(field), "{replacement}: {e}");
        assert!(e.to_string().contains(message), "{replacement}: {e}");
        assert!(e.line.is_some(), "{e}");
    }
}
