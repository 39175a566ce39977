//! Volume-aware scale-up end to end: two kwok groups in two zones, a StatefulSet whose claims are
//! pre-bound to static PersistentVolumes in zone-b (a `WaitForFirstConsumer` class with no
//! provisioner). Ferroscale must grow only the zone-b group, even where its expander or
//! `--balance-similar-node-groups` would otherwise pick or share zone-a, and the real scheduler
//! then binds the pods there. Ferroscale reads the claims, volumes and classes with the
//! least-privilege RBAC of `deploy/manifests/rbac.yaml`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};

use crate::harness::{self, App, Cluster, is_ready, wait_until};
use crate::wait_for_first_status;

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The StatefulSet: three pods of 3 CPU, one claim each.
const REPLICAS: usize = 3;

/// Two groups that differ only in their zone label (and, when `zone_b_cpu` is larger, in size):
/// `zone-a` and `zone-b`, each from 0 to 10 nodes.
fn zonal_templates(zone_b_cpu: &str) -> String {
    let template = |zone: &str, cpu: &str| {
        format!(
            "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {zone}\n    labels: {{pool: {zone}, {ZONE_LABEL}: {zone}}}\n    annotations:\n      cluster-autoscaler.kwok.nodegroup/min-count: \"0\"\n      cluster-autoscaler.kwok.nodegroup/max-count: \"10\"\n  status:\n    capacity: {{cpu: \"{cpu}\", memory: 16Gi, pods: \"110\"}}\n    allocatable: {{cpu: \"{cpu}\", memory: 16Gi, pods: \"110\"}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: List\nitems:\n{}{}",
        template("zone-a", "4"),
        template("zone-b", zone_b_cpu)
    )
}

/// The class, and one static volume per replica in zone-b, each pre-bound to its claim
/// `data-db-<i>` (which the StatefulSet controller creates).
async fn create_zone_b_volumes(cluster: &Cluster) {
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .expect("StorageClass");
    Api::<StorageClass>::all(cluster.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the StorageClass");
    for i in 0..REPLICAS {
        let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("db-{i}-zone-b"), "labels": {ZONE_LABEL: "zone-b"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "zonal",
                "local": {"path": format!("/mnt/db-{i}")},
                "claimRef": {"namespace": harness::APPS, "name": format!("data-db-{i}")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": ZONE_LABEL, "operator": "In", "values": ["zone-b"]}
                ]}]}},
            },
        }))
        .expect("PersistentVolume");
        Api::<PersistentVolume>::all(cluster.client.clone())
            .create(&PostParams::default(), &volume)
            .await
            .expect("create a PersistentVolume");
    }
}

/// `db`: three 3-CPU pods created at once, each with a claim `data-db-<i>` of the zonal class.
async fn create_stateful_set(cluster: &Cluster) {
    let set: StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": "db",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "containers": [{
                        "name": "db",
                        "image": "registry.example/db:1",
                        "resources": {"requests": {"cpu": "3", "memory": "256Mi"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                    "tolerations": [{"key": "kwok-provider", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "zonal",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }],
        },
    }))
    .expect("StatefulSet");
    Api::<StatefulSet>::namespaced(cluster.client.clone(), harness::APPS)
        .create(&PostParams::default(), &set)
        .await
        .expect("create the StatefulSet");
}

/// Node names per zone label value (`zone-a`, `zone-b`), of every kwok group node.
async fn nodes_by_zone(cluster: &Cluster) -> BTreeMap<String, Vec<Node>> {
    let mut zones: BTreeMap<String, Vec<Node>> = BTreeMap::new();
    for node in cluster
        .nodes()
        .list(&ListParams::default().labels(ZONE_LABEL))
        .await
        .expect("list nodes")
        .items
    {
        let zone = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ZONE_LABEL))
            .cloned()
            .unwrap_or_default();
        zones.entry(zone).or_default().push(node);
    }
    zones
}

async fn zone_count(cluster: &Cluster, zone: &str) -> usize {
    nodes_by_zone(cluster).await.get(zone).map_or(0, Vec::len)
}

/// Waits for the db pods to run, and checks they run in zone-b with their claims bound.
async fn db_runs_in_zone_b(cluster: &Cluster) {
    let running = cluster.wait_running("db", REPLICAS).await;
    let zones = nodes_by_zone(cluster).await;
    let zone_b: Vec<String> = zones
        .get("zone-b")
        .into_iter()
        .flatten()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert!(
        running.values().all(|node| zone_b.contains(node)),
        "every db pod runs in zone-b ({zone_b:?}): {running:?}"
    );
    let claims = Api::<PersistentVolumeClaim>::namespaced(cluster.client.clone(), harness::APPS);
    for i in 0..REPLICAS {
        let claim = claims
            .get(&format!("data-db-{i}"))
            .await
            .expect("the StatefulSet's claim");
        assert_eq!(
            claim.status.and_then(|s| s.phase).as_deref(),
            Some("Bound"),
            "data-db-{i} is bound"
        );
    }
}

/// zone-a never gets a node while the scheduler binds the db pods and for several scan intervals
/// after (a zone-a node would never be used by them and would be added every loop).
async fn zone_a_stays_at(cluster: &Cluster, count: usize) {
    for _ in 0..10 {
        assert_eq!(
            zone_count(cluster, "zone-a").await,
            count,
            "zone-a keeps {count} nodes: {:?}",
            nodes_by_zone(cluster)
                .await
                .into_iter()
                .map(|(zone, nodes)| (zone, nodes.len()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// With `least-waste`, zone-a's 4-CPU nodes waste less for 3-CPU pods than zone-b's 16-CPU ones,
/// so a scale-up that ignored volumes would grow zone-a. The claims' volumes are in zone-b: only
/// zone-b grows, by one node holding all three pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_with_zonal_volumes_grows_only_the_volumes_zone() {
    let cluster = Cluster::start().await;
    cluster.use_templates(zonal_templates("16")).await;
    create_zone_b_volumes(&cluster).await;
    let _autoscaler = cluster.start_autoscaler("main", &["--expander=least-waste"]);
    wait_for_first_status(&cluster).await;

    create_stateful_set(&cluster).await;
    db_runs_in_zone_b(&cluster).await;
    assert_eq!(zone_count(&cluster, "zone-b").await, 1);
    zone_a_stays_at(&cluster, 0).await;
    let ready = nodes_by_zone(&cluster).await;
    assert!(ready["zone-b"].iter().all(is_ready));
}

/// `--balance-similar-node-groups` with two groups that differ only in zone: pods without volumes
/// are shared between the zones (one node each), but the db pods, whose volumes are in zone-b,
/// grow zone-b alone — balancing only shares a scale-up among groups where the pods fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balancing_similar_groups_respects_the_volumes_zone() {
    let cluster = Cluster::start().await;
    cluster.use_templates(zonal_templates("4")).await;
    create_zone_b_volumes(&cluster).await;
    // The groups differ in their `pool` label too (the kwok provider's grouping key), which
    // similarity must not count, as for any label naming the group.
    let _autoscaler = cluster.start_autoscaler(
        "main",
        &[
            "--balance-similar-node-groups=true",
            "--balancing-ignore-label=pool",
        ],
    );
    wait_for_first_status(&cluster).await;

    // Balancing is on: two 3-CPU pods without volumes get one new node in each zone.
    cluster.create_app(App::new("web", 2, "3")).await;
    cluster.wait_running("web", 2).await;
    wait_until("one web node in each zone", async || {
        zone_count(&cluster, "zone-a").await == 1 && zone_count(&cluster, "zone-b").await == 1
    })
    .await;

    create_stateful_set(&cluster).await;
    db_runs_in_zone_b(&cluster).await;
    assert_eq!(
        zone_count(&cluster, "zone-b").await,
        1 + REPLICAS,
        "one more zone-b node per db pod"
    );
    zone_a_stays_at(&cluster, 1).await;
}
