//! `ferroscale run --cloud-provider=kwok` end to end, as an operator deploys it: a real
//! kube-apiserver, kube-scheduler, kube-controller-manager and kwok on loopback, Ferroscale's own
//! RBAC and kwok provider manifests applied, and the binary started as a separate process that
//! authenticates as its ServiceAccount. Every test drives the cluster only through the API, the
//! way a user would, and checks what a user would see.
//!
//! Each test starts its own control plane (nodes are cluster-wide, so tests cannot share one).

mod api_access;
mod batching;
mod capacity;
mod chart_arguments;
mod cloud_node_controller;
mod clusterapi;
mod dra;
mod exoscale;
mod harness;
mod metrics;
mod replay;
mod scheduler_paused;
mod shutdown;
#[path = "../support/mod.rs"]
mod support;
mod unreachable;
mod upstream_rbac;
mod volumes;

use std::time::Duration;

use harness::{App, Cluster, TO_BE_DELETED, has_taint, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// Short timings so a scale-down happens within seconds; everything else keeps upstream
/// defaults.
const QUICK_SCALE_DOWN: &[&str] = &[
    "--scale-down-unneeded-time=5s",
    "--scale-down-delay-after-add=0s",
    "--scale-down-delay-after-delete=0s",
    "--scale-down-delay-after-failure=5s",
    "--node-delete-delay-after-taint=2s",
];

fn quick_scale_down_and(extra: &[&'static str]) -> Vec<&'static str> {
    QUICK_SCALE_DOWN.iter().chain(extra).copied().collect()
}

/// Metrics are published when the iteration that acted ends, which can be after its nodes
/// appeared or went: wait for the value rather than read it once.
async fn wait_for_metric(autoscaler: &harness::Autoscaler, name: &str, value: f64) {
    wait_until(&format!("{name} to reach {value}"), async || {
        autoscaler.metric_sum(name) == value
    })
    .await;
}

async fn wait_for_first_status(cluster: &Cluster) {
    wait_until("the status ConfigMap of the first iteration", async || {
        cluster.status().await.is_some()
    })
    .await;
}

/// The whole cycle: pods the real scheduler cannot place → Ferroscale grows the kwok group →
/// kwok's nodes become Ready → the scheduler binds the pods and they run. Then the pods go →
/// after the unneeded time the nodes are tainted and deleted. Events, the status ConfigMap and
/// the metrics tell the story along the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_grow_the_group_and_idle_nodes_are_removed() {
    let cluster = Cluster::start().await;
    let autoscaler = cluster.start_autoscaler("main", QUICK_SCALE_DOWN);
    wait_for_first_status(&cluster).await;
    assert!(
        cluster.pool_nodes().await.is_empty(),
        "the pool starts empty"
    );

    // The README walkthrough's workload: three pods of 3 CPU, one per 4-CPU node.
    harness::apply_manifest(
        &cluster.client,
        &harness::deploy_dir().join("examples/kwok-demo.yaml"),
    )
    .await;
    let running = cluster.wait_running("demo", 3).await;
    let nodes = cluster.wait_pool_ready(3).await;
    let mut used: Vec<&String> = running.values().collect();
    used.sort();
    used.dedup();
    assert_eq!(used.len(), 3, "one pod per new node: {running:?}");
    assert!(
        cluster
            .event_reasons(harness::APPS, "Pod")
            .await
            .contains(&"TriggeredScaleUp".to_string())
    );
    wait_for_metric(&autoscaler, "cluster_autoscaler_scaled_up_nodes_total", 3.0).await;
    let status = cluster.status().await.expect("status ConfigMap");
    let status: serde_yaml_ng::Value = serde_yaml_ng::from_str(&status).expect("status is YAML");
    assert_eq!(
        status["autoscalerStatus"].as_str(),
        Some("Running"),
        "{status:?}"
    );
    let groups = status["nodeGroups"].as_sequence().expect("nodeGroups");
    assert!(
        groups.iter().any(|g| g["name"].as_str() == Some("general")),
        "{groups:?}"
    );

    // The pods go: after the unneeded time every node is tainted, then deleted.
    cluster.scale_app("demo", 0).await;
    let tainted = cluster.wait_pool_removed().await;
    assert!(
        !tainted.is_empty(),
        "nodes carry {TO_BE_DELETED} before they go (seen on {tainted:?} of {nodes:?})"
    );
    assert!(
        cluster
            .event_reasons(harness::NAMESPACE, "ConfigMap")
            .await
            .iter()
            .any(|reason| reason == "ScaleDownEmpty"),
        "a ScaleDownEmpty event is recorded on the status ConfigMap"
    );
    wait_for_metric(
        &autoscaler,
        "cluster_autoscaler_scaled_down_nodes_total",
        3.0,
    )
    .await;
}

/// `ferroscale run --cloud-provider=externalgrpc` driving `ferroscale serve-provider
/// --cloud-provider=kwok` over mutual TLS behaves as `--cloud-provider=kwok` does: the same
/// workload gets the same nodes, and they go when it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn externalgrpc_to_a_served_kwok_provider_scales_like_kwok() {
    let cluster = Cluster::start().await;
    let (server, cloud_config) = cluster.start_provider_server("provider-server");
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let mut flags = quick_scale_down_and(&["--cloud-provider=externalgrpc"]);
    flags.push(&cloud_config);
    let mut autoscaler = cluster.start_autoscaler("main", &flags);
    wait_for_first_status(&cluster).await;

    harness::apply_manifest(
        &cluster.client,
        &harness::deploy_dir().join("examples/kwok-demo.yaml"),
    )
    .await;
    let running = cluster.wait_running("demo", 3).await;
    let nodes = cluster.wait_pool_ready(3).await;
    assert!(
        running.values().all(|node| nodes.contains(node)),
        "{running:?}"
    );
    wait_for_metric(&autoscaler, "cluster_autoscaler_scaled_up_nodes_total", 3.0).await;

    cluster.scale_app("demo", 0).await;
    wait_until("the idle pool to be removed", async || {
        cluster.pool_nodes().await.is_empty()
    })
    .await;
    assert!(autoscaler.is_running());
    assert!(
        server.log().contains("NodeGroupIncreaseSize")
            && server.log().contains("NodeGroupDeleteNodes"),
        "the resizes went through the gRPC service"
    );
}

/// With `--frequent-loops-enabled` (the default) a new unschedulable pod starts an iteration
/// after the batching window; the ten-minute scan interval never comes into play.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_unschedulable_pod_wakes_the_loop_before_the_scan_interval() {
    let cluster = Cluster::start().await;
    let autoscaler = cluster.start_autoscaler("main", &["--scan-interval=10m"]);
    wait_for_first_status(&cluster).await;
    cluster.create_app(App::new("burst", 2, "3")).await;
    cluster.wait_running("burst", 2).await;
    cluster.wait_pool_ready(2).await;
    wait_for_metric(&autoscaler, "cluster_autoscaler_scaled_up_nodes_total", 2.0).await;
}

/// Two nodes each run one small pod after a big workload leaves. Both are underutilized; the
/// autoscaler drains one, the evicted pod's Deployment recreates it on the other node, and the
/// drained node is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_underutilized_node_is_drained_and_its_pod_moves() {
    let cluster = Cluster::start().await;
    let autoscaler = cluster.start_autoscaler("main", QUICK_SCALE_DOWN);
    wait_for_first_status(&cluster).await;
    let nodes = two_nodes_with_one_small_pod_each(&cluster, &[], &[]).await;

    cluster.delete_app("big").await;
    wait_until("one node drained and deleted", async || {
        cluster.pool_nodes().await.len() == 1
    })
    .await;
    let survivor = cluster.pool_node_names().await;
    let mut pods = cluster.wait_running("small-a", 1).await;
    pods.extend(cluster.wait_running("small-b", 1).await);
    assert!(
        pods.values().all(|node| survivor.contains(node)),
        "both small pods run on the remaining node {survivor:?}: {pods:?} (nodes were {nodes:?})"
    );
    assert!(autoscaler.metric_sum("cluster_autoscaler_evicted_pods_total") >= 1.0);
    assert!(
        cluster
            .event_reasons(harness::NAMESPACE, "ConfigMap")
            .await
            .contains(&"ScaleDown".to_string())
    );
    // The remaining node stays: its pods have nowhere to go.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(cluster.pool_node_names().await, survivor);
}

/// The same two underutilized nodes, but one node's pod is protected by a PodDisruptionBudget
/// that allows no disruption and the other's pod says `safe-to-evict: "false"`: neither node is
/// tainted or removed, and the metrics say why. (The drain test above shows the same nodes go
/// when nothing protects their pods.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_and_a_non_evictable_pod_keep_their_nodes() {
    let cluster = Cluster::start().await;
    // Re-examined every few seconds rather than every five minutes, so the metrics keep naming
    // the reasons and not only `RecentlyUnremovable`.
    let autoscaler = cluster.start_autoscaler(
        "main",
        &quick_scale_down_and(&["--unremovable-node-recheck-timeout=3s"]),
    );
    wait_for_first_status(&cluster).await;
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "small-a"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "small-a"}}}
    }))
    .expect("PDB");
    Api::<PodDisruptionBudget>::namespaced(cluster.client.clone(), harness::APPS)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create PDB");
    let nodes = two_nodes_with_one_small_pod_each(
        &cluster,
        &[],
        &[("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")],
    )
    .await;

    cluster.delete_app("big").await;
    // Upstream reports both as `BlockedByPod` (the PDB as the pod's NotEnoughPdb rule).
    wait_until("both nodes reported blocked by their pods", async || {
        autoscaler.metric("cluster_autoscaler_unremovable_nodes_count{reason=\"BlockedByPod\"}")
            == Some(2.0)
    })
    .await;
    // Several unneeded times later nothing has been touched.
    for _ in 0..20 {
        let pool = cluster.pool_nodes().await;
        assert_eq!(pool.len(), 2, "both nodes stay");
        assert!(
            pool.iter().all(|node| !has_taint(node, TO_BE_DELETED)),
            "no node is tainted for deletion"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(cluster.pool_node_names().await, nodes);
    assert_eq!(
        autoscaler.metric_sum("cluster_autoscaler_evicted_pods_total"),
        0.0
    );
}

/// Two replicas with `--leader-elect`: only the Lease holder acts, so a pending pod gets exactly
/// one node; when the leader dies the standby takes the Lease and serves the next pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_act_once_and_the_standby_takes_over() {
    let cluster = Cluster::start().await;
    let election = [
        "--leader-elect=true",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let mut replicas = [
        cluster.start_autoscaler("replica-0", &election),
        cluster.start_autoscaler("replica-1", &election),
    ];
    wait_for_first_status(&cluster).await;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), harness::NAMESPACE);
    let holder = leases
        .get("cluster-autoscaler")
        .await
        .expect("the Lease exists")
        .spec
        .and_then(|spec| spec.holder_identity)
        .expect("a holder");

    cluster.create_app(App::new("one", 1, "3")).await;
    cluster.wait_running("one", 1).await;
    cluster.wait_pool_ready(1).await;
    // Several scan intervals later still one node: the standby did not act too.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(cluster.pool_nodes().await.len(), 1);
    let scaled: Vec<f64> = replicas
        .iter()
        .map(|r| r.metric_sum("cluster_autoscaler_scaled_up_nodes_total"))
        .collect();
    let leader = scaled
        .iter()
        .position(|n| *n == 1.0)
        .unwrap_or_else(|| panic!("one replica scaled up once: {scaled:?}"));
    assert_eq!(
        scaled[1 - leader],
        0.0,
        "the standby never acts: {scaled:?}"
    );

    replicas[leader].crash();
    cluster.scale_app("one", 2).await;
    cluster.wait_running("one", 2).await;
    cluster.wait_pool_ready(2).await;
    let standby = &replicas[1 - leader];
    wait_for_metric(standby, "cluster_autoscaler_scaled_up_nodes_total", 1.0).await;
    let new_holder = leases
        .get("cluster-autoscaler")
        .await
        .expect("the Lease")
        .spec
        .and_then(|spec| spec.holder_identity)
        .expect("a holder");
    assert_ne!(new_holder, holder, "the standby holds the Lease now");
}

/// The API server goes away for a while and comes back: the autoscaler keeps running, its
/// watches resume, and it serves pods created after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscaler_recovers_when_the_api_server_restarts() {
    let cluster = Cluster::start().await;
    let mut autoscaler = cluster.start_autoscaler("main", &[]);
    wait_for_first_status(&cluster).await;
    let control_plane = &cluster.control_plane;
    tokio::task::block_in_place(|| control_plane.stop_apiserver()).expect("stop the API server");
    // A few failed iterations' worth.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        autoscaler.is_running(),
        "an unreachable API server is not fatal"
    );
    tokio::task::block_in_place(|| control_plane.start_apiserver()).expect("start the API server");

    cluster.create_app(App::new("after", 2, "3")).await;
    cluster.wait_running("after", 2).await;
    cluster.wait_pool_ready(2).await;
    assert!(autoscaler.is_running());
}

/// A crash after a node was tainted for deletion but before it was deleted leaves the taint
/// behind; the next process removes it at start-up and leaves the node alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_taint_and_delete_is_cleaned_up_on_restart() {
    let cluster = Cluster::start().await;
    // A long delay between taint and delete leaves time to crash in between.
    let mut first = cluster.start_autoscaler(
        "before-crash",
        &quick_scale_down_and(&["--node-delete-delay-after-taint=10m"]),
    );
    wait_for_first_status(&cluster).await;
    cluster.create_app(App::new("short", 1, "3")).await;
    cluster.wait_running("short", 1).await;
    let nodes = cluster.wait_pool_ready(1).await;
    cluster.scale_app("short", 0).await;
    wait_until("the idle node to be tainted for deletion", async || {
        cluster
            .pool_nodes()
            .await
            .iter()
            .any(|node| has_taint(node, TO_BE_DELETED))
    })
    .await;
    first.crash();

    // Scale-down off: only the start-up clean-up may touch the node.
    let _second = cluster.start_autoscaler("after-crash", &["--scale-down-enabled=false"]);
    wait_until("the leftover taint to be removed", async || {
        cluster
            .pool_nodes()
            .await
            .iter()
            .all(|node| !has_taint(node, TO_BE_DELETED))
    })
    .await;
    assert_eq!(cluster.pool_node_names().await, nodes, "the node is kept");
    let node = cluster.nodes().get(&nodes[0]).await.expect("node");
    assert_ne!(
        node.spec.and_then(|spec| spec.unschedulable),
        Some(true),
        "the node is schedulable again"
    );
    // The cleaned node is usable: a new pod lands on it without a scale-up.
    cluster
        .deployments()
        .patch(
            "short",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale up the app");
    let running = cluster.wait_running("short", 1).await;
    assert!(running.values().all(|node| nodes.contains(node)));
}

/// Builds two nodes through a scale-up for a "big" app (one 3-CPU pod per node), then places
/// one 500m pod of "small-a" on the first and one of "small-b" on the second (the other node
/// cordoned meanwhile, so the real scheduler has one choice). Returns the node names.
async fn two_nodes_with_one_small_pod_each(
    cluster: &Cluster,
    a_annotations: &'static [(&'static str, &'static str)],
    b_annotations: &'static [(&'static str, &'static str)],
) -> Vec<String> {
    cluster.create_app(App::new("big", 2, "3")).await;
    cluster.wait_running("big", 2).await;
    let nodes = cluster.wait_pool_ready(2).await;
    for (app, annotations, node, other) in [
        ("small-a", a_annotations, &nodes[0], &nodes[1]),
        ("small-b", b_annotations, &nodes[1], &nodes[0]),
    ] {
        cluster.cordon(other, true).await;
        let mut small = App::new(app, 1, "500m");
        small.annotations = annotations;
        cluster.create_app(small).await;
        let placed = cluster.wait_running(app, 1).await;
        cluster.cordon(other, false).await;
        assert_eq!(placed.values().next(), Some(node), "{app} on {node}");
    }
    nodes
}
