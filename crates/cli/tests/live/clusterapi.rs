//! `ferroscale run --cloud-provider=clusterapi` end to end: the real Cluster API CRDs, a test
//! controller playing the MachineDeployment/MachineSet/Machine controllers (it creates Machines
//! and kwok Nodes as replicas change and removes `delete-machine`-marked Machines first), the
//! management RBAC of deploy/clusterapi, and the binary as its ServiceAccount.

use std::collections::{BTreeMap, BTreeSet};

use ferroscale_testing_control_plane::cluster_api::{
    ClusterApi, ClusterApiKind, MachineController, ScalableResource, install_cluster_api_crds,
};
use ferroscale_testing_control_plane::{ControlPlane, Options};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::harness::{
    App, Cluster, TO_BE_DELETED, admin_client, apply_manifest, deploy_dir, has_taint, wait_until,
};
use crate::{QUICK_SCALE_DOWN, wait_for_first_status};

/// Installs the CRDs and the management RBAC in `management` and starts the test controller.
async fn cluster_api(management: &Client, workload: &Client) -> (ClusterApi, MachineController) {
    let installed = install_cluster_api_crds(management, "cluster.x-k8s.io")
        .await
        .expect("install the Cluster API CRDs (run scripts/control-plane/build.sh)");
    apply_manifest(
        management,
        &deploy_dir().join("clusterapi").join("rbac-management.yaml"),
    )
    .await;
    let api = installed.preferred();
    let controller = MachineController::start(
        management.clone(),
        workload.clone(),
        &api.group,
        &api.version,
    )
    .await
    .expect("start the test Machine controller");
    (api, controller)
}

async fn create_namespace(client: &Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
}

/// A MachineDeployment of 4-CPU, 16 GiB nodes labelled `pool=general` (the harness's pool).
async fn create_machine_deployment(client: &Client, resource: ScalableResource) {
    let mut resource = resource.capacity("4", "16Gi");
    resource.node_labels = BTreeMap::from([("pool".to_string(), "general".to_string())]);
    resource
        .create(client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create the MachineDeployment");
}

async fn replicas(client: &Client, api: &ClusterApi, namespace: &str, name: &str) -> i64 {
    let object: DynamicObject = api
        .namespaced(client, ClusterApiKind::MachineDeployment, namespace)
        .get(name)
        .await
        .expect("read the MachineDeployment");
    object.data["spec"]["replicas"].as_i64().unwrap_or(-1)
}

async fn machines(client: &Client, api: &ClusterApi, namespace: &str) -> Vec<DynamicObject> {
    api.namespaced(client, ClusterApiKind::Machine, namespace)
        .list(&ListParams::default())
        .await
        .expect("list Machines")
        .items
}

/// The whole cycle on one cluster that is both management and workload (one kubeconfig): pods
/// the nodes cannot hold → the MachineDeployment grows through its scale subresource → the
/// controller's Machines and Nodes appear → the pods run. Then the pods go → Ferroscale picks
/// nodes, marks exactly their Machines `delete-machine` and lowers replicas → those Machines
/// (and only those) are removed, down to the minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterapi_grows_a_machine_deployment_and_removes_exactly_the_chosen_machines() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let (api, _controller) = cluster_api(&client, &client).await;
    create_namespace(&client, "team-a").await;
    create_machine_deployment(
        &client,
        ScalableResource::new(&api, "team-a", "workers")
            .replicas(1)
            .size_limits(1, 4),
    )
    .await;
    cluster.wait_pool_ready(1).await;

    let mut flags = QUICK_SCALE_DOWN.to_vec();
    flags.extend([
        "--cloud-provider=clusterapi",
        "--node-group-auto-discovery=clusterapi:namespace=team-a",
    ]);
    let autoscaler = cluster.start_autoscaler("clusterapi", &flags);
    wait_for_first_status(&cluster).await;

    // Three pods of 3 CPU: one per 4-CPU node.
    cluster.create_app(App::new("web", 3, "3")).await;
    cluster.wait_running("web", 3).await;
    assert_eq!(replicas(&client, &api, "team-a", "workers").await, 3);
    let grown: BTreeSet<String> = machines(&client, &api, "team-a")
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert_eq!(grown.len(), 3, "one Machine per replica");

    // Scale-down: remember every node Ferroscale taints for deletion.
    cluster.delete_app("web").await;
    let mut chosen = BTreeSet::new();
    wait_until(
        "the MachineDeployment back at its minimum of 1",
        async || {
            for node in cluster.pool_nodes().await {
                if has_taint(&node, TO_BE_DELETED) {
                    chosen.insert(node.name_any());
                }
            }
            replicas(&client, &api, "team-a", "workers").await == 1
                && machines(&client, &api, "team-a").await.len() == 1
        },
    )
    .await;
    // A taint can come and go between two looks; the Events stay.
    chosen.extend(cluster.nodes_scaled_down().await);
    let survivors: BTreeSet<String> = machines(&client, &api, "team-a")
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    // The controller names each Node after its Machine: the Machines removed are exactly the
    // nodes Ferroscale chose, so the delete-machine annotation steered the MachineSet.
    let removed: BTreeSet<String> = grown.difference(&survivors).cloned().collect();
    assert_eq!(removed.len(), 2, "{}", autoscaler.log());
    assert!(
        removed.is_subset(&chosen),
        "removed Machines {removed:?} were not all chosen by Ferroscale ({chosen:?})\n{}",
        autoscaler.log()
    );
    assert!(
        survivors.is_disjoint(&chosen),
        "a node Ferroscale chose survived: {survivors:?} vs {chosen:?}"
    );
    assert!(
        autoscaler.log().contains("Machine marked for deletion"),
        "{}",
        autoscaler.log()
    );
}

/// Two Cluster API clusters in two namespaces of one management cluster: the discovery filter
/// `clusterName=green` makes only green's MachineDeployment a node group, so pending pods grow
/// green and leave blue alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterapi_discovery_filter_scales_only_the_selected_cluster() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let (api, _controller) = cluster_api(&client, &client).await;
    for color in ["blue", "green"] {
        create_namespace(&client, color).await;
        let mut resource = ScalableResource::new(&api, color, &format!("{color}-workers"))
            .replicas(1)
            .size_limits(1, 3);
        resource.cluster_name = color.to_string();
        create_machine_deployment(&client, resource).await;
    }
    cluster.wait_pool_ready(2).await;

    let autoscaler = cluster.start_autoscaler(
        "clusterapi-green",
        &[
            "--cloud-provider=clusterapi",
            "--node-group-auto-discovery=clusterapi:clusterName=green",
        ],
    );
    wait_for_first_status(&cluster).await;
    // Each 4-CPU node holds one 3-CPU pod: two more nodes are needed.
    cluster.create_app(App::new("web", 4, "3")).await;
    wait_until("green grown to 3 replicas", async || {
        replicas(&client, &api, "green", "green-workers").await == 3
    })
    .await;
    // Blue's node holds one pod too: all four run.
    cluster.wait_running("web", 4).await;
    assert_eq!(
        replicas(&client, &api, "blue", "blue-workers").await,
        1,
        "blue is outside the discovery filter: {}",
        autoscaler.log()
    );
    let status = cluster.status().await.expect("status ConfigMap");
    assert!(
        status.contains("MachineDeployment/green/green-workers"),
        "{status}"
    );
    assert!(!status.contains("blue-workers"), "{status}");
}

/// Layout 4 of docs/clusterapi.md: the Cluster API objects live in a separate management
/// cluster (`--cloud-config`), nodes and pods in the workload cluster (`--kubeconfig`). The
/// group starts at zero replicas, so the scale-up uses the template built from the capacity
/// annotations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterapi_with_a_separate_management_cluster_scales_up_from_zero() {
    let cluster = Cluster::start().await;
    let management_plane = tokio::task::spawn_blocking(|| {
        ControlPlane::start_with(Options {
            scheduler: false,
            controller_manager: false,
            kwok: false,
            ..Options::default()
        })
    })
    .await
    .expect("management control-plane task")
    .expect("start the management control plane");
    let management = admin_client(management_plane.kubeconfig_path()).await;
    let (api, _controller) = cluster_api(&management, &cluster.client).await;
    create_namespace(&management, "prod").await;
    create_machine_deployment(
        &management,
        ScalableResource::new(&api, "prod", "workers")
            .replicas(0)
            .size_limits(0, 2),
    )
    .await;

    let cloud_config = format!(
        "--cloud-config={}",
        management_plane.kubeconfig_path().display()
    );
    let autoscaler = cluster.start_autoscaler(
        "clusterapi-two-clusters",
        &["--cloud-provider=clusterapi", &cloud_config],
    );
    wait_for_first_status(&cluster).await;
    cluster.create_app(App::new("web", 1, "2")).await;
    cluster.wait_running("web", 1).await;
    assert_eq!(
        replicas(&management, &api, "prod", "workers").await,
        1,
        "{}",
        autoscaler.log()
    );
    // The Node is in the workload cluster only.
    let management_nodes = Api::<Node>::all(management.clone())
        .list(&ListParams::default())
        .await
        .expect("list management nodes");
    assert!(management_nodes.items.is_empty());
    assert_eq!(cluster.pool_nodes().await.len(), 1);
}

/// `serve-provider --cloud-provider=clusterapi` wraps the provider in the externalgrpc service
/// (mutual TLS), and `run --cloud-provider=externalgrpc` scales the MachineDeployment through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterapi_served_over_externalgrpc_scales_the_machine_deployment() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let (api, _controller) = cluster_api(&client, &client).await;
    create_namespace(&client, "team-a").await;
    create_machine_deployment(
        &client,
        ScalableResource::new(&api, "team-a", "workers")
            .replicas(1)
            .size_limits(1, 3),
    )
    .await;
    cluster.wait_pool_ready(1).await;

    let (server, cloud_config) = cluster.start_provider_server_for(
        "clusterapi-server",
        &[
            "--provider=clusterapi",
            "--node-group-auto-discovery=clusterapi:namespace=team-a",
        ],
    );
    let cloud_config = format!("--cloud-config={}", cloud_config.display());
    let autoscaler = cluster.start_autoscaler(
        "externalgrpc-to-clusterapi",
        &["--cloud-provider=externalgrpc", &cloud_config],
    );
    wait_for_first_status(&cluster).await;
    cluster.create_app(App::new("web", 2, "3")).await;
    cluster.wait_running("web", 2).await;
    assert_eq!(
        replicas(&client, &api, "team-a", "workers").await,
        2,
        "autoscaler: {}\nserver: {}",
        autoscaler.log(),
        server.log()
    );
    assert!(
        server.log().contains("MachineDeployment/team-a/workers"),
        "{}",
        server.log()
    );
}
