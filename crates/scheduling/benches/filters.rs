//! Filter throughput on a 5,000-node, 150,000-pod snapshot in three zones, and the cost of a
//! what-if branch.
//!
//! * `check/*` — one `check` call (PreFilter work included) on a node, cycling over the nodes;
//!   `zonal_volume` is a pod whose bound claim's volume lives in one zone (the volume filters'
//!   cost; every other pod has no claim and skips them).
//! * `profile/*` — `check` under a scheduler profile (`--scheduler-config-file`) with a default
//!   zone spread constraint and an ignored extended resource.
//! * `scan/*` — `find_node` for a pod that fits nowhere, so every node is filtered once; the
//!   throughput is nodes filtered per second.
//! * `branch/*` — open a branch, add a node with 30 pods (or place 30 pods on existing nodes), drop
//!   the branch (which reverts it).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferroscale_model::Node;
use ferroscale_model::labels::{HOSTNAME, ZONE};
use ferroscale_model::{
    AccessMode, ClaimPhase, LabelSelector, Labels, NodeInclusionPolicy, NodeOperator,
    NodeRequirement, NodeSelector, NodeSelectorTerm, OwnerRef, PersistentVolume,
    PersistentVolumeClaim, Pod, PodAffinityTerm, Resources, TopologySpreadConstraint,
    UnsatisfiableAction, Volume, VolumeObjects, VolumePhase, VolumeSource,
};
use ferroscale_scheduling::scheduler_config::SpreadDefaulting;
use ferroscale_scheduling::{
    NodeId, SchedulerProfile, Snapshot, VolumeCatalogue, check, find_node,
};

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 30;
const SERVICES: usize = 50;

fn node(i: usize) -> Arc<Node> {
    let mut allocatable = Resources::new(32_000, 128 << 30);
    allocatable.pods = 110;
    let mut n = Node::new(format!("node-{i}"), allocatable);
    n.labels.insert(ZONE.into(), format!("zone-{}", i % 3));
    Arc::new(n)
}

fn anti_affinity(selector: (&str, &str), key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector::from_labels([selector])),
        namespaces: vec![],
        namespace_selector: None,
        topology_key: key.into(),
    }
}

fn zone_spread(app: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: UnsatisfiableAction::DoNotSchedule,
        label_selector: Some(LabelSelector::from_labels([("app", app)])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}

fn placed_pod(node: usize, k: usize) -> Arc<Pod> {
    let mut p = Pod::new("default", format!("pod-{node}-{k}"));
    p.requests = Resources::new(100, 256 << 20);
    p.labels.insert(
        "app".into(),
        format!("svc-{}", (node * PODS_PER_NODE + k) % SERVICES),
    );
    p.labels.insert("common".into(), "yes".into());
    p.node_name = Some(ferroscale_model::format_compact!("node-{node}"));
    // One pod in thirty repels its own service per host, as in a real cluster.
    if k == 0 {
        let app = p.labels["app"].clone();
        p.pod_anti_affinity
            .push(anti_affinity(("app", &app), HOSTNAME));
    }
    Arc::new(p)
}

fn cluster() -> (Snapshot, Vec<NodeId>) {
    let mut s = Snapshot::new();
    let mut ids = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let id = s.add_node(node(i));
        for k in 0..PODS_PER_NODE {
            s.add_pod(id, placed_pod(i, k));
        }
        ids.push(id);
    }
    (s, ids)
}

fn pending(name: &str, app: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.requests = Resources::new(500, 1 << 30);
    p.labels.insert("app".into(), app.into());
    p
}

/// Claims `data-<zone>` bound to volumes pinned (node affinity and labels) to `<zone>`.
fn zonal_volumes(zones: &[&str]) -> Arc<VolumeCatalogue> {
    let mut objects = VolumeObjects::default();
    for zone in zones {
        objects.claims.push(Arc::new(PersistentVolumeClaim {
            namespace: "default".into(),
            name: format!("data-{zone}"),
            volume_name: Some(format!("pv-{zone}")),
            access_modes: vec![AccessMode::ReadWriteOnce],
            phase: ClaimPhase::Bound,
            ..PersistentVolumeClaim::default()
        }));
        objects.volumes.push(Arc::new(PersistentVolume {
            name: format!("pv-{zone}"),
            labels: Labels::from([(ZONE.to_string(), zone.to_string())]),
            node_affinity: Some(NodeSelector {
                terms: vec![NodeSelectorTerm {
                    match_expressions: vec![NodeRequirement {
                        key: ZONE.into(),
                        operator: NodeOperator::In,
                        values: vec![zone.to_string()],
                    }],
                    match_fields: Vec::new(),
                }],
            }),
            csi_driver: Some("csi.example.com".into()),
            phase: VolumePhase::Bound,
            ..PersistentVolume::default()
        }));
    }
    Arc::new(VolumeCatalogue::new(&objects))
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

fn filters(c: &mut Criterion) {
    let (mut s, ids) = cluster();
    s.set_volume_catalogue(zonal_volumes(&["zone-1", "zone-9"]));
    let zonal = with_claim(pending("zonal", "new-zonal"), "data-zone-1");

    let plain = pending("plain", "new-plain");
    let mut anti = pending("anti", "new-anti");
    anti.pod_anti_affinity
        .push(anti_affinity(("app", "new-anti"), HOSTNAME));
    let mut spread = pending("spread", "svc-7");
    spread.topology_spread.push(zone_spread("svc-7"));

    let mut group = c.benchmark_group("check");
    group.throughput(Throughput::Elements(1));
    for (name, pod) in [
        ("plain", &plain),
        ("anti_affinity", &anti),
        ("zone_spread", &spread),
        ("zonal_volume", &zonal),
    ] {
        let mut next = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                next = (next + 1) % ids.len();
                black_box(check(&mut s, pod, ids[next]))
            })
        });
    }
    group.finish();

    // Pods that every node rejects, each at a different filter.
    let mut too_big = plain.clone();
    too_big.requests = Resources::new(64_000, 0);
    let mut repelled = anti.clone();
    repelled.pod_anti_affinity[0] = anti_affinity(("common", "yes"), HOSTNAME);
    let mut unspreadable = spread.clone();
    unspreadable.topology_spread[0].min_domains = Some(4);
    // Its volume lives in a zone without nodes.
    let homeless = with_claim(pending("homeless", "new-homeless"), "data-zone-9");
    let mut group = c.benchmark_group("scan");
    group.throughput(Throughput::Elements(NODES as u64));
    for (name, pod) in [
        ("plain_resources", &too_big),
        ("anti_affinity", &repelled),
        ("zone_spread", &unspreadable),
        ("zonal_volume", &homeless),
    ] {
        assert!(find_node(&mut s, pod, 0).is_none());
        group.bench_function(name, |b| b.iter(|| black_box(find_node(&mut s, pod, 0))));
    }
    group.finish();

    // The same checks under a `--scheduler-config-file` profile: a zone default constraint for a
    // ReplicaSet's pod without constraints of its own, and an ignored extended resource.
    let mut profile = SchedulerProfile::default();
    profile.spread_defaulting = SpreadDefaulting::List;
    profile.default_constraints = vec![TopologySpreadConstraint {
        label_selector: None,
        ..zone_spread("unused")
    }];
    profile.ignored_resources = vec!["example.com/dongle".into()];
    s.set_scheduler_profile(Arc::new(profile));
    let mut replica = pending("replica", "svc-7");
    replica.owner_references.push(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "svc-7-rs".into(),
        uid: "uid-svc-7-rs".into(),
        controller: true,
    });
    let mut dongle = plain.clone();
    dongle.requests.set("example.com/dongle", 1);
    let mut group = c.benchmark_group("profile");
    group.throughput(Throughput::Elements(1));
    for (name, pod) in [
        ("check_plain", &plain),
        ("check_default_zone_spread", &replica),
        ("check_ignored_resource", &dongle),
    ] {
        let mut next = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                next = (next + 1) % ids.len();
                black_box(check(&mut s, pod, ids[next]))
            })
        });
    }
    group.finish();
}

fn branches(c: &mut Criterion) {
    let (mut s, ids) = cluster();
    // Register the indexes the benchmarks above use, so reverts must maintain them.
    let mut spread = pending("spread", "svc-7");
    spread.topology_spread.push(zone_spread("svc-7"));
    let _ = check(&mut s, &spread, ids[0]);
    let new_pods: Vec<Arc<Pod>> = (0..PODS_PER_NODE).map(|k| placed_pod(NODES, k)).collect();

    let mut group = c.benchmark_group("branch");
    group.bench_function("fork_add_node_30_pods_revert", |b| {
        b.iter(|| {
            let mut branch = s.branch();
            let id = branch.add_node(node(NODES));
            for p in &new_pods {
                branch.add_pod(id, p.clone());
            }
        })
    });
    group.bench_function("fork_place_30_pods_revert", |b| {
        b.iter(|| {
            let mut branch = s.branch();
            for (k, p) in new_pods.iter().enumerate() {
                branch.add_pod(ids[k * 97 % NODES], p.clone());
            }
        })
    });
    group.bench_function("fork_revert_empty", |b| {
        b.iter(|| drop(black_box(s.branch())))
    });
    group.finish();
    black_box(s.pod_count());
}

criterion_group!(benches, filters, branches);
criterion_main!(benches);
