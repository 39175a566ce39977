//! `--cloud-node-controller` on a cluster without a cloud-controller-manager
//! (docs/cloud-node-controller.md): `ferroscale run --cloud-provider=externalgrpc` against
//! `ferroscale serve-provider --cloud-provider=kwok`, whose group is declared a cloud without a
//! CCM (docs/behaviour.md KWOK-108): its new Nodes register as a kubelet with
//! `--cloud-provider=external` does — uninitialized taint, no zone, region or instance-type
//! label — and a deleted machine leaves its Node behind, which kube-controller-manager marks not
//! Ready once kwok stops playing its kubelet.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams, PostParams};

use crate::harness::{self, Cluster, has_taint, is_ready, wait_until};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const ZONE: &str = "topology.kubernetes.io/zone";
const MACHINE_DELETED: &str = "cluster-autoscaler.kwok.nodegroup/machine-deleted";

/// The kwok group `general` of deploy/manifests, with zone, region and instance type in its
/// template, declared a cloud without a cloud-controller-manager.
const TEMPLATES: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: general
    labels:
      pool: general
      topology.kubernetes.io/zone: zone-a
      topology.kubernetes.io/region: region-1
      node.kubernetes.io/instance-type: metal.large
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "0"
      cluster-autoscaler.kwok.nodegroup/max-count: "20"
      cluster-autoscaler.kwok.nodegroup/cloud-controller-manager: "false"
  status:
    capacity: {cpu: "4", memory: 16Gi, pods: "110"}
    allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
"#;

/// The provider server with the templates above, and the autoscaler driving it with the
/// controller on.
fn start(cluster: &Cluster, grace: &'static str) -> (harness::Autoscaler, harness::Autoscaler) {
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let grace = format!("--cloud-node-removal-grace-period={grace}");
    let mut flags: Vec<&str> = crate::QUICK_SCALE_DOWN.to_vec();
    flags.extend([
        "--cloud-provider=externalgrpc",
        "--cloud-node-controller=true",
        cloud_config.as_str(),
        grace.as_str(),
    ]);
    let autoscaler = cluster.start_autoscaler("main", &flags);
    (server, autoscaler)
}

/// `replicas` pods of 3 CPU (one per 4-CPU node) that only a node labelled zone-a can take: the
/// real scheduler binds them only once the controller has initialized their nodes.
async fn create_zonal_app(cluster: &Cluster, replicas: i32) {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "zonal"}},
            "template": {
                "metadata": {"labels": {"app": "zonal"}},
                "spec": {
                    "nodeSelector": {ZONE: "zone-a"},
                    "containers": [{
                        "name": "app",
                        "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "3", "memory": "256Mi"}},
                    }],
                    "tolerations": [{
                        "key": "kwok-provider", "operator": "Equal", "value": "true",
                        "effect": "NoSchedule",
                    }],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }))
    .expect("Deployment");
    cluster
        .deployments()
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
}

/// Reason and message of every Event about Node `node`.
async fn node_events(cluster: &Cluster, node: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(cluster.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Node")
                && e.involved_object.name.as_deref() == Some(node)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

fn annotated(node: &Node, key: &str) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

fn label<'n>(node: &'n Node, key: &str) -> Option<&'n str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Waits until every node of the pool has lost its machine and is not Ready; returns them.
async fn wait_pool_left_behind(cluster: &Cluster) -> Vec<String> {
    let mut names = Vec::new();
    wait_until(
        "the pool's machines deleted and their Nodes not Ready",
        async || {
            let nodes = cluster.pool_nodes().await;
            names = nodes
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            !nodes.is_empty()
                && nodes
                    .iter()
                    .all(|n| annotated(n, MACHINE_DELETED) && !is_ready(n))
        },
    )
    .await;
    names
}

/// docs/cloud-node-controller.md CNC-101–CNC-107: with no CCM, no manual step. Pods that need
/// the zone label grow the group; its Nodes register uninitialized and without the label, the
/// controller initializes them from the template and the real scheduler binds the pods. After
/// the scale-down the machines are gone, their Nodes left behind go not Ready, and the
/// controller deletes them. A Node outside every group — uninitialized, never Ready — is never
/// touched, and an event says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ccm_new_nodes_are_initialized_and_removed_machines_leave_no_node() {
    let cluster = Cluster::start().await;
    cluster.use_templates(TEMPLATES.to_string()).await;
    let outsider: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "outsider", "labels": {"kubernetes.io/hostname": "outsider"}},
        "spec": {
            "providerID": "metal://rack-7/outsider",
            "taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
        },
    }))
    .expect("Node");
    cluster
        .nodes()
        .create(&PostParams::default(), &outsider)
        .await
        .expect("create the outsider");
    let (server, autoscaler) = start(&cluster, "5s");

    create_zonal_app(&cluster, 2).await;
    let running = cluster.wait_running("zonal", 2).await;
    let nodes = cluster.wait_pool_ready(2).await;
    let used: BTreeSet<&String> = running.values().collect();
    assert_eq!(used.len(), 2, "one pod per new node: {running:?}");
    for node in cluster.pool_nodes().await {
        let name = node.metadata.name.clone().unwrap_or_default();
        assert!(!has_taint(&node, UNINITIALIZED), "{name} is still tainted");
        assert_eq!(label(&node, ZONE), Some("zone-a"), "{name}");
        assert_eq!(
            label(&node, "node.kubernetes.io/instance-type"),
            Some("metal.large"),
            "{name}"
        );
        // The labels were set by the controller: the node registered without them.
        let events = node_events(&cluster, &name).await;
        assert!(
            events.iter().any(|(reason, message)| reason == "Synced"
                && message
                    .contains("removed the node.cloudprovider.kubernetes.io/uninitialized taint")
                && message.contains("set topology.kubernetes.io/zone=zone-a")),
            "{name}: {events:?}"
        );
    }

    // The pods go: the nodes are removed, their machines deleted, and the Nodes left behind are
    // deleted by the controller once they are not Ready.
    cluster.scale_app("zonal", 0).await;
    let mut left_behind = BTreeSet::new();
    wait_until("the pool's Node objects to be deleted", async || {
        let pool = cluster.pool_nodes().await;
        for node in &pool {
            if annotated(node, MACHINE_DELETED) {
                left_behind.extend(node.metadata.name.clone());
            }
        }
        pool.is_empty()
    })
    .await;
    assert_eq!(
        left_behind,
        nodes.iter().cloned().collect::<BTreeSet<_>>(),
        "every machine was deleted before its Node"
    );
    for name in &nodes {
        let events = node_events(&cluster, name).await;
        assert!(
            events.iter().any(|(reason, _)| reason == "DeletingNode"),
            "{name}: {events:?}"
        );
    }
    assert!(
        server.log().contains("NodeGroupDeleteNodes"),
        "the machines went through the gRPC service"
    );

    // The outsider: still there, still tainted, never initialized nor deleted, told once why.
    let outsider = cluster.nodes().get("outsider").await.expect("the outsider");
    assert!(has_taint(&outsider, UNINITIALIZED));
    assert_eq!(label(&outsider, ZONE), None);
    let events = node_events(&cluster, "outsider").await;
    let told: Vec<&(String, String)> = events
        .iter()
        .filter(|(reason, _)| reason == "CloudNodeNotInitialized")
        .collect();
    assert_eq!(told.len(), 1, "{events:?}");
    assert!(
        told[0].1.contains("is not an instance of any node group"),
        "{told:?}"
    );
    assert!(
        events.iter().all(|(reason, _)| reason != "DeletingNode"),
        "{events:?}"
    );
    let log = autoscaler.log();
    assert!(log.contains("cloud node controller on"), "{log}");
}

/// docs/cloud-node-controller.md CNC-108: while the provider does not answer, a Node whose
/// machine is gone is not deleted, however long it is not Ready; once the provider answers
/// again, it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_provider_failing_no_node_is_deleted() {
    let cluster = Cluster::start().await;
    cluster.use_templates(TEMPLATES.to_string()).await;
    let grace = Duration::from_secs(10);
    let (server, autoscaler) = start(&cluster, "10s");

    create_zonal_app(&cluster, 1).await;
    cluster.wait_running("zonal", 1).await;
    cluster.wait_pool_ready(1).await;
    cluster.scale_app("zonal", 0).await;
    let left = wait_pool_left_behind(&cluster).await;

    // The provider stops answering (its calls time out) before the grace period can pass.
    server.signal(libc::SIGSTOP);
    let stopped = tokio::time::Instant::now();
    tokio::time::sleep(grace * 5).await;
    assert_eq!(
        cluster.pool_node_names().await,
        left,
        "nothing is deleted while the provider fails"
    );
    let log = autoscaler.log();
    assert!(
        log.contains("cloud provider refresh failed"),
        "the provider was failing: {log}"
    );
    eprintln!(
        "the Node of a deleted machine was kept for {:?} while the provider was stopped",
        stopped.elapsed()
    );

    server.signal(libc::SIGCONT);
    wait_until(
        "the Node to be deleted once the provider answers",
        async || cluster.pool_nodes().await.is_empty(),
    )
    .await;
}
