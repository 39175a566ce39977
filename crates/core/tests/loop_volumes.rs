//! Volume-aware scheduling through `run_once` with the in-memory contracts (docs/behaviour.md
//! VOL-101 to VOL-108): scale-up grows only groups where a pod's volumes can follow it, balancing
//! respects that, an unbound `Immediate` claim triggers nothing, scale-down keeps nodes whose pods'
//! volumes cannot move, and a template's CSINode limits how many volumes a new node takes.

mod loop_fakes;

use std::sync::Arc;

use ferroscale_core::autoscaler::{Autoscaler, LoopOutcome};
use ferroscale_core::cloud::NodeTemplate;
use ferroscale_core::kubernetes::WorkloadController;
use ferroscale_core::options::AutoscalingOptions;
use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::{
    AccessMode, ClaimPhase, CsiNode, CsiNodeDriver, Labels, NodeOperator, NodeRequirement,
    NodeSelector, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass,
    TopologyRequirement, TopologySelectorTerm, Volume, VolumeBindingMode, VolumePhase,
    VolumeSource,
};
use loop_fakes::*;

const DRIVER: &str = "csi.example.com";

fn options(flags: &[(&str, &str)]) -> AutoscalingOptions {
    let mut options = AutoscalingOptions::default();
    for (flag, value) in flags {
        options.set(flag, value).expect("valid flag");
    }
    options.validate().expect("valid options");
    options
}

/// A group whose template nodes are in `zone` with `cpu_milli` cores.
fn zonal_group(cloud: &mut FakeCloud, log: &CallLog, id: &str, zone: &str, cpu_milli: i64) {
    let mut template = node(&format!("{id}-template"), cpu_milli, 16 << 30);
    template.labels.insert(ZONE.into(), zone.into());
    cloud.groups.push(Arc::new(FakeGroup {
        id: id.into(),
        min: 0,
        max: 10,
        target: Default::default(),
        instances: Default::default(),
        template: NodeTemplate {
            node: template,
            pods: Vec::new(),
            csi_node: None,
            resource_slices: Vec::new(),
        },
        fail_delete: Default::default(),
        failing: Default::default(),
        log: log.clone(),
    }));
}

/// A full node outside every group, so the cluster is not empty.
fn full_unmanaged_node(cluster: &FakeCluster) {
    cluster.add_node(node("n0", 4000, 16 << 30));
    cluster.add_pod(pod_on("base", "n0", 3900));
}

/// The fakes with one zonal group per `(zone, cpu_milli)` (the group is named after its zone) and
/// one full node outside every group.
fn zonal_cluster(zones: &[(&str, i64)]) -> (CallLog, FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    for (zone, cpu_milli) in zones {
        zonal_group(&mut cloud, &log, zone, zone, *cpu_milli);
    }
    let cluster = FakeCluster::new(log.clone());
    full_unmanaged_node(&cluster);
    (log, cloud, cluster)
}

fn with_claim(mut pod: Pod, claim: &str) -> Pod {
    pod.volumes.push(Volume {
        name: "data".into(),
        source: VolumeSource::PersistentVolumeClaim {
            claim_name: claim.into(),
        },
    });
    pod
}

fn in_zone(key: &str, values: &[&str]) -> NodeSelector {
    NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![NodeRequirement {
                key: key.into(),
                operator: NodeOperator::In,
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
            match_fields: Vec::new(),
        }],
    }
}

/// A claim bound to a volume whose node affinity is `affinity` (and zone label `zone`, if any).
fn bound_pair(
    claim: &str,
    affinity: NodeSelector,
    zone: Option<&str>,
) -> (PersistentVolumeClaim, PersistentVolume) {
    let volume = format!("pv-{claim}");
    (
        PersistentVolumeClaim {
            namespace: "default".into(),
            name: claim.into(),
            uid: format!("uid-{claim}"),
            storage_class_name: Some("zonal".into()),
            volume_name: Some(volume.clone()),
            access_modes: vec![AccessMode::ReadWriteOnce],
            phase: ClaimPhase::Bound,
            requested_storage: 10 << 30,
            ..PersistentVolumeClaim::default()
        },
        PersistentVolume {
            name: volume,
            labels: zone
                .map(|z| Labels::from([(ZONE.to_string(), z.to_string())]))
                .unwrap_or_default(),
            storage_class_name: Some("zonal".into()),
            access_modes: vec![AccessMode::ReadWriteOnce],
            capacity_storage: 10 << 30,
            node_affinity: Some(affinity),
            csi_driver: Some(DRIVER.into()),
            phase: VolumePhase::Bound,
            ..PersistentVolume::default()
        },
    )
}

fn unbound_claim(name: &str, class: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        storage_class_name: Some(class.into()),
        access_modes: vec![AccessMode::ReadWriteOnce],
        requested_storage: 10 << 30,
        ..PersistentVolumeClaim::default()
    }
}

fn class(mode: VolumeBindingMode, zones: &[&str]) -> StorageClass {
    StorageClass {
        name: "zonal".into(),
        provisioner: DRIVER.into(),
        binding_mode: mode,
        allowed_topologies: if zones.is_empty() {
            Vec::new()
        } else {
            vec![TopologySelectorTerm {
                requirements: vec![TopologyRequirement {
                    key: ZONE.into(),
                    values: zones.iter().map(|z| z.to_string()).collect(),
                }],
            }]
        },
    }
}

fn add_bound(cluster: &FakeCluster, pair: (PersistentVolumeClaim, PersistentVolume)) {
    let mut state = cluster.state();
    state.volumes.claims.push(Arc::new(pair.0));
    state.volumes.volumes.push(Arc::new(pair.1));
}

fn increases(log: &CallLog) -> Vec<String> {
    let mut calls = calls(log, "cloud.increase_size");
    calls.sort();
    calls
}

/// docs/behaviour.md VOL-102: a pending pod whose bound volume lives in zone-b grows the zone-b
/// group, although the expander prefers the zone-a group (less waste) for a pod without volumes.
#[test]
fn a_pod_whose_volume_is_in_zone_b_grows_only_the_zone_b_group() {
    let setup = |claimed: bool| {
        let (log, cloud, cluster) = zonal_cluster(&[("zone-a", 4000), ("zone-b", 8000)]);
        let pod = pending_pod("db-0", 3000, t(0));
        if claimed {
            add_bound(
                &cluster,
                bound_pair("data-db-0", in_zone(ZONE, &["zone-b"]), Some("zone-b")),
            );
            cluster.add_pod(with_claim(pod, "data-db-0"));
        } else {
            cluster.add_pod(pod);
        }
        (log, cloud, cluster)
    };
    let flags = [("expander", "least-waste")];

    let (log, cloud, cluster) = setup(false);
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size zone-a 1"]);

    let (log, cloud, cluster) = setup(true);
    let outcome = run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size zone-b 1"]);
    // The next loop sees the upcoming zone-b node and asks for nothing more.
    assert!(outcome.scale_up.is_some());
}

/// docs/behaviour.md VOL-102: with `--balance-similar-node-groups` the zone-a group, similar in every
/// other way, does not take a share of pods whose volumes live in zone-b.
#[test]
fn balancing_does_not_spread_zone_b_volumes_to_zone_a() {
    let setup = |claimed: bool| {
        let (log, cloud, cluster) = zonal_cluster(&[("zone-a", 4000), ("zone-b", 4000)]);
        for i in 0..2 {
            let pod = pending_pod(&format!("db-{i}"), 3000, t(0));
            if claimed {
                let claim = format!("data-db-{i}");
                add_bound(
                    &cluster,
                    bound_pair(&claim, in_zone(ZONE, &["zone-b"]), Some("zone-b")),
                );
                cluster.add_pod(with_claim(pod, &claim));
            } else {
                cluster.add_pod(pod);
            }
        }
        (log, cloud, cluster)
    };
    let flags = [("balance-similar-node-groups", "true")];

    let (log, cloud, cluster) = setup(false);
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(
        increases(&log),
        vec![
            "cloud.increase_size zone-a 1",
            "cloud.increase_size zone-b 1"
        ]
    );

    let (log, cloud, cluster) = setup(true);
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size zone-b 2"]);
}

/// docs/behaviour.md VOL-103: an unbound claim of a `WaitForFirstConsumer` class whose allowed
/// topologies name zone-a grows the zone-a group, the expander's second choice.
#[test]
fn a_wait_for_first_consumer_claim_picks_the_zone_its_class_allows() {
    let (log, cloud, cluster) = zonal_cluster(&[("zone-a", 8000), ("zone-b", 4000)]);
    {
        let mut state = cluster.state();
        state.volumes.storage_classes.push(Arc::new(class(
            VolumeBindingMode::WaitForFirstConsumer,
            &["zone-a"],
        )));
        state
            .volumes
            .claims
            .push(Arc::new(unbound_claim("data-db-0", "zonal")));
    }
    cluster.add_pod(with_claim(pending_pod("db-0", 3000, t(0)), "data-db-0"));
    let flags = [("expander", "least-waste")];
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size zone-a 1"]);
}

/// docs/behaviour.md VOL-104: a pod with an unbound claim of an `Immediate` class waits for the
/// control plane to bind it; no node can help, so nothing is scaled up, and the pod's
/// NotTriggerScaleUp reason says why.
#[test]
fn an_unbound_immediate_claim_triggers_no_scale_up() {
    let (log, cloud, cluster) = zonal_cluster(&[("zone-a", 4000)]);
    {
        let mut state = cluster.state();
        state
            .volumes
            .storage_classes
            .push(Arc::new(class(VolumeBindingMode::Immediate, &[])));
        state
            .volumes
            .claims
            .push(Arc::new(unbound_claim("data-db-0", "zonal")));
    }
    cluster.add_pod(with_claim(pending_pod("db-0", 3000, t(0)), "data-db-0"));
    let outcome = run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert!(increases(&log).is_empty());
    let plan = outcome.scale_up.expect("scale-up ran");
    let reasons: Vec<&str> = plan
        .pods_not_helped
        .iter()
        .flat_map(|v| v.per_group.iter().map(|(_, r)| r.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec!["pod has unbound immediate PersistentVolumeClaims"]
    );
}

/// Group `pool` with `n1` (zone-a, one small pod using claim `data-web-0`) and `n2` in
/// `other_zone` with room for that pod.
fn drain_setup(other_zone: &str) -> (FakeCloud, FakeCluster) {
    let log = CallLog::default();
    let mut cloud = FakeCloud::new(log.clone());
    cloud.add_group("pool", 0, 10);
    let cluster = FakeCluster::new(log);
    for (name, zone) in [("n1", "zone-a"), ("n2", other_zone)] {
        let mut n = node(name, 4000, 16 << 30);
        n.labels.insert(ZONE.into(), zone.into());
        n.labels.insert(HOSTNAME.into(), name.into());
        cloud.add_instance("pool", &n);
        cluster.add_node(n);
    }
    cluster.add_pod(with_claim(pod_on("web-0", "n1", 200), "data-web-0"));
    // n2 is busy enough not to be a scale-down candidate itself.
    cluster.add_pod(pod_on("web-1", "n2", 2500));
    cluster.state().controllers.push(WorkloadController {
        kind: "ReplicaSet".into(),
        namespace: "default".into(),
        name: "web".into(),
        uid: "uid-rs-web".into(),
        replicas: Some(2),
    });
    (cloud, cluster)
}

fn n1_unneeded(outcome: &LoopOutcome) -> bool {
    outcome
        .scale_down
        .as_ref()
        .is_some_and(|plan| plan.unneeded.iter().any(|u| u.node == "n1"))
}

/// docs/behaviour.md VOL-108: scale-down simulates where a node's pods go with the volume filters,
/// so a node whose pod's local volume is pinned to it stays, and a node whose pod's zonal volume
/// can follow it to another node of the same zone can go.
#[test]
fn scale_down_keeps_nodes_whose_pods_volumes_cannot_follow_them() {
    let run_loop = |cloud: &FakeCloud, cluster: &FakeCluster| {
        let mut autoscaler = Autoscaler::new(options(&[("scale-down-unneeded-time", "0s")]), 1);
        run(&mut autoscaler, cloud, cluster, t(10_000))
    };

    // A zonal volume, another node in the same zone: n1 can go.
    let (cloud, cluster) = drain_setup("zone-a");
    add_bound(
        &cluster,
        bound_pair("data-web-0", in_zone(ZONE, &["zone-a"]), Some("zone-a")),
    );
    assert!(n1_unneeded(&run_loop(&cloud, &cluster)));

    // A local volume pinned to n1 by hostname: its pod cannot move, n1 stays.
    let (cloud, cluster) = drain_setup("zone-a");
    add_bound(
        &cluster,
        bound_pair("data-web-0", in_zone(HOSTNAME, &["n1"]), None),
    );
    let outcome = run_loop(&cloud, &cluster);
    assert!(!n1_unneeded(&outcome));
    let plan = outcome.scale_down.expect("scale-down ran");
    assert!(plan.unremovable.iter().any(|u| u.node == "n1"));

    // A zonal volume whose zone has no other node: n1 stays as well.
    let (cloud, cluster) = drain_setup("zone-b");
    add_bound(
        &cluster,
        bound_pair("data-web-0", in_zone(ZONE, &["zone-a"]), Some("zone-a")),
    );
    assert!(!n1_unneeded(&run_loop(&cloud, &cluster)));
}

/// docs/behaviour.md VOL-107: a template's CSINode limits how many CSI volumes binpacking
/// puts on each new node; with `--enable-csi-node-aware-scheduling=false` it is ignored.
#[test]
fn a_template_csi_node_limits_volumes_per_new_node() {
    let setup = || {
        let log = CallLog::default();
        let mut cloud = FakeCloud::new(log.clone());
        let mut template = node("pool-template", 8000, 32 << 30);
        template.labels.insert(ZONE.into(), "zone-a".into());
        cloud.groups.push(Arc::new(FakeGroup {
            id: "pool".into(),
            min: 0,
            max: 10,
            target: Default::default(),
            instances: Default::default(),
            template: NodeTemplate {
                node: template,
                pods: Vec::new(),
                csi_node: Some(CsiNode {
                    node_name: "pool-template".into(),
                    drivers: vec![CsiNodeDriver {
                        name: DRIVER.into(),
                        allocatable_count: Some(2),
                        topology_keys: Vec::new(),
                    }],
                }),
                resource_slices: Vec::new(),
            },
            fail_delete: Default::default(),
            failing: Default::default(),
            log: log.clone(),
        }));
        let cluster = FakeCluster::new(log.clone());
        full_unmanaged_node(&cluster);
        cluster.state().volumes.storage_classes.push(Arc::new(class(
            VolumeBindingMode::WaitForFirstConsumer,
            &[],
        )));
        for i in 0..4 {
            let claim = format!("data-db-{i}");
            cluster
                .state()
                .volumes
                .claims
                .push(Arc::new(unbound_claim(&claim, "zonal")));
            cluster.add_pod(with_claim(
                pending_pod(&format!("db-{i}"), 100, t(0)),
                &claim,
            ));
        }
        (log, cloud, cluster)
    };

    // Four small pods would share one node; two volumes per node make it two nodes.
    let (log, cloud, cluster) = setup();
    run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size pool 2"]);

    let (log, cloud, cluster) = setup();
    let flags = [("enable-csi-node-aware-scheduling", "false")];
    run(
        &mut Autoscaler::new(options(&flags), 1),
        &cloud,
        &cluster,
        t(100),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size pool 1"]);
}

/// docs/behaviour.md VOL-107: a template built from a real node of the group keeps that node's
/// CSINode, so its volume limit applies to the new nodes too.
#[test]
fn a_template_from_a_real_node_keeps_its_csi_node_limits() {
    let setup = |with_csi_node: bool| {
        let log = CallLog::default();
        let mut cloud = FakeCloud::new(log.clone());
        cloud.add_group("pool", 0, 10);
        let cluster = FakeCluster::new(log.clone());
        let real = node("pool-1", 4000, 16 << 30);
        cloud.add_instance("pool", &real);
        cluster.add_node(real);
        cluster.add_pod(pod_on("base", "pool-1", 4000));
        let mut state = cluster.state();
        if with_csi_node {
            state.volumes.csi_nodes.push(Arc::new(CsiNode {
                node_name: "pool-1".into(),
                drivers: vec![CsiNodeDriver {
                    name: DRIVER.into(),
                    allocatable_count: Some(1),
                    topology_keys: Vec::new(),
                }],
            }));
        }
        state.volumes.storage_classes.push(Arc::new(class(
            VolumeBindingMode::WaitForFirstConsumer,
            &[],
        )));
        for i in 0..2 {
            let claim = format!("data-db-{i}");
            state
                .volumes
                .claims
                .push(Arc::new(unbound_claim(&claim, "zonal")));
        }
        drop(state);
        for i in 0..2 {
            cluster.add_pod(with_claim(
                pending_pod(&format!("db-{i}"), 100, t(0)),
                &format!("data-db-{i}"),
            ));
        }
        (log, cloud, cluster)
    };

    let (log, cloud, cluster) = setup(false);
    run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100_000),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size pool 1"]);

    let (log, cloud, cluster) = setup(true);
    run(
        &mut Autoscaler::new(options(&[]), 1),
        &cloud,
        &cluster,
        t(100_000),
    );
    assert_eq!(increases(&log), vec!["cloud.increase_size pool 2"]);
}
