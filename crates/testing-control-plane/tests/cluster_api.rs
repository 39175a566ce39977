//! The Cluster API test support against a real control plane: the real CRDs installed (also under
//! another group, as the autoscaler's `CAPI_GROUP` needs), and the test controller scaling Machines
//! and kwok Nodes. Each test starts its own control plane; run with `--test-threads=1` on 2 cores.

use std::future::Future;
use std::time::Duration;

use ferroscale_testing_control_plane::cluster_api::{
    CLUSTER_API_GROUP, FAIL_PROVISIONING_ANNOTATION, OMIT_PROVIDER_ID_ANNOTATION,
    PROVISIONING_DELAY_ANNOTATION, REVISION_ANNOTATION, create_test_machine_template,
    describe_machines,
};
use ferroscale_testing_control_plane::{
    ClusterApi, ClusterApiKind, ControlPlane, MachineController, Options, ScalableResource,
    install_cluster_api_crds, wait_for_machines,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// Generous for a loaded 2-core machine; each step normally takes a second or two.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

async fn start(options: Options) -> (ControlPlane, Client) {
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("control-plane start task")
        .expect("start the test control plane");
    let client = client_of(&control_plane).await;
    (control_plane, client)
}

async fn client_of(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    Client::try_from(config).expect("client")
}

/// A cluster whose Nodes kwok makes Ready; no scheduler or controller manager (no pods here).
fn with_kwok() -> Options {
    Options {
        scheduler: false,
        controller_manager: false,
        ..Options::default()
    }
}

/// An API server and etcd only: enough for CRDs and a management cluster.
fn api_server_only() -> Options {
    Options {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_crds_are_served_under_their_own_group_and_a_renamed_one() {
    let (_control_plane, client) = start(api_server_only()).await;
    for group in [CLUSTER_API_GROUP, "test.k8s.io"] {
        let installed = install_cluster_api_crds(&client, group)
            .await
            .expect("install the Cluster API CRDs");
        assert_eq!(installed.group, group);
        // Without CAPI_VERSION the autoscaler takes the preferred version.
        assert_eq!(installed.preferred_version, "v1beta2", "{installed:?}");
        assert_eq!(
            installed.served_versions,
            ["v1beta2", "v1beta1"],
            "{installed:?}"
        );

        // The builders' objects pass the real schemas, and the scale subresource the autoscaler
        // reads and patches works under the group.
        let api = installed.preferred();
        let resource = ScalableResource::new(&api, "default", "md-0")
            .replicas(2)
            .size_limits(1, 5);
        resource
            .create(&client, ClusterApiKind::MachineDeployment)
            .await
            .expect("create a MachineDeployment");
        let deployments = api.namespaced(&client, ClusterApiKind::MachineDeployment, "default");
        let scale = deployments.get_scale("md-0").await.expect("read the scale");
        assert_eq!(scale.spec.and_then(|spec| spec.replicas), Some(2));
        deployments
            .patch_scale(
                "md-0",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
            )
            .await
            .expect("scale to zero");
        let stored = deployments
            .get("md-0")
            .await
            .expect("read the MachineDeployment");
        assert_eq!(stored.data["spec"]["replicas"], 0);
        assert_eq!(
            stored.metadata.annotations.unwrap_or_default()
                [&format!("{group}/cluster-api-autoscaler-node-group-max-size")],
            "5"
        );
    }

    // The infrastructure template keeps the status the scale-from-zero path reads.
    let capacity = [("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "1")]
        .into_iter()
        .map(|(name, quantity)| (name.to_owned(), quantity.to_owned()))
        .collect();
    let template = create_test_machine_template(
        &client,
        "default",
        "tpl",
        &capacity,
        Some(("arm64", "linux")),
    )
    .await
    .expect("create a TestMachineTemplate");
    assert_eq!(template.data["status"]["capacity"]["memory"], "32Gi");
    assert_eq!(template.data["status"]["capacity"]["nvidia.com/gpu"], "1");
    assert_eq!(template.data["status"]["nodeInfo"]["architecture"], "arm64");
    assert_eq!(
        template.data["status"]["nodeInfo"]["operatingSystem"],
        "linux"
    );
}

/// Polls `probe` every 200 ms until it returns `Ok`, or fails the test with its last `Err`.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last_seen) if tokio::time::Instant::now() >= deadline => {
                panic!("{what} within {WAIT_LIMIT:?}; last seen: {last_seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn set_replicas(
    client: &Client,
    api: &ClusterApi,
    kind: ClusterApiKind,
    name: &str,
    replicas: u32,
) {
    api.namespaced(client, kind, "default")
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .expect("patch the scale subresource");
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Waits until the Nodes of the Machines exist and are Ready, and returns them in Machine order.
async fn ready_nodes_of(workload: &Client, machines: &[DynamicObject]) -> Vec<Node> {
    let nodes = Api::<Node>::all(workload.clone());
    let names: Vec<String> = machines
        .iter()
        .map(|machine| {
            machine.data["status"]["nodeRef"]["name"]
                .as_str()
                .expect("nodeRef")
                .to_owned()
        })
        .collect();
    eventually("the Machines' Nodes are Ready", || {
        let nodes = nodes.clone();
        let names = names.clone();
        async move {
            let mut found = Vec::new();
            for name in &names {
                match nodes.get_opt(name).await {
                    Ok(Some(node)) if is_ready(&node) => found.push(node),
                    Ok(Some(_)) => return Err(format!("Node {name} is not Ready")),
                    Ok(None) => return Err(format!("Node {name} does not exist")),
                    Err(error) => return Err(error.to_string()),
                }
            }
            Ok(found)
        }
    })
    .await
}

/// Names of the Nodes that carry `label` (`key=value`).
async fn node_names(workload: &Client, label: &str) -> Vec<String> {
    let mut names: Vec<String> = Api::<Node>::all(workload.clone())
        .list(&ListParams::default().labels(label))
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter(|node| node.metadata.deletion_timestamp.is_none())
        .filter_map(|node| node.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_scales_machines_and_kwok_nodes_and_a_pool_follows_its_replicas() {
    let (_control_plane, client) = start(with_kwok()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let controller =
        MachineController::start(client.clone(), client.clone(), &api.group, &api.version)
            .await
            .expect("start the test controller");

    let deployment = ScalableResource::new(&api, "default", "md-0")
        .size_limits(0, 5)
        .capacity("2", "8Gi")
        .node_label("pool", "general");
    deployment
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create the MachineDeployment");
    let selector = deployment.label_selector();

    // 0 → 3: Machines with provider IDs, their Nodes Ready with the annotated capacity.
    set_replicas(&client, &api, ClusterApiKind::MachineDeployment, "md-0", 3).await;
    let machines = wait_for_machines(&client, &api, "default", &selector, 3, WAIT_LIMIT)
        .await
        .expect("three running Machines");
    let nodes = ready_nodes_of(&client, &machines).await;
    for (machine, node) in machines.iter().zip(&nodes) {
        let machine_name = machine.metadata.name.as_deref().expect("name");
        let provider_id = node.spec.as_ref().and_then(|spec| spec.provider_id.clone());
        assert_eq!(
            provider_id.as_deref(),
            machine.data["spec"]["providerID"].as_str()
        );
        assert!(
            provider_id
                .as_deref()
                .is_some_and(|id| id.ends_with(&format!("/{machine_name}"))),
            "{provider_id:?}"
        );
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations["cluster.x-k8s.io/machine"], machine_name);
        assert_eq!(annotations["cluster.x-k8s.io/cluster-namespace"], "default");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["pool"], "general");
        let capacity = node
            .status
            .as_ref()
            .and_then(|status| status.capacity.clone())
            .unwrap_or_default();
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(capacity["memory"].0, "8Gi");
    }

    // The MachineSet is the deployment's, at revision 1, with the deployment-name label.
    let sets = api
        .namespaced(&client, ClusterApiKind::MachineSet, "default")
        .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=md-0"))
        .await
        .expect("list MachineSets")
        .items;
    assert_eq!(sets.len(), 1, "{sets:?}");
    let owner = &sets[0]
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("MachineDeployment", "md-0", Some(true))
    );
    assert_eq!(
        sets[0].metadata.annotations.clone().unwrap_or_default()[REVISION_ANNOTATION],
        "1"
    );
    assert_eq!(sets[0].data["spec"]["replicas"], 3);

    // 3 → 2 with the oldest Machine marked: the marked one goes, not the newest.
    let mut by_age = machines.clone();
    by_age.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    let marked = by_age[0].metadata.name.clone().expect("name");
    api.namespaced(&client, ClusterApiKind::Machine, "default")
        .patch(
            &marked,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "cluster.x-k8s.io/delete-machine": "now" } } })),
        )
        .await
        .expect("mark a Machine for deletion");
    set_replicas(&client, &api, ClusterApiKind::MachineDeployment, "md-0", 2).await;
    let remaining = wait_for_machines(&client, &api, "default", &selector, 2, WAIT_LIMIT)
        .await
        .expect("two running Machines");
    let remaining_names: Vec<String> = remaining
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    assert!(
        !remaining_names.contains(&marked),
        "{marked} was kept: {}",
        describe_machines(&remaining)
    );
    eventually("the marked Machine's Node is deleted", || {
        let client = client.clone();
        let marked = marked.clone();
        async move {
            let nodes = node_names(&client, "pool=general").await;
            if nodes.contains(&marked) {
                Err(format!("{nodes:?}"))
            } else {
                Ok(())
            }
        }
    })
    .await;

    // 2 → 1: one Machine, one Node.
    set_replicas(&client, &api, ClusterApiKind::MachineDeployment, "md-0", 1).await;
    let last = wait_for_machines(&client, &api, "default", &selector, 1, WAIT_LIMIT)
        .await
        .expect("one running Machine");
    let last_name = last[0].metadata.name.clone().expect("name");
    eventually("only the last Machine's Node is left", || {
        let client = client.clone();
        let last_name = last_name.clone();
        async move {
            let nodes = node_names(&client, "pool=general").await;
            if nodes == [last_name] {
                Ok(())
            } else {
                Err(format!("{nodes:?}"))
            }
        }
    })
    .await;

    // A MachinePool: providerIDList and Nodes follow spec.replicas, no Machines.
    let pool = ScalableResource::new(&api, "default", "mp-0")
        .replicas(2)
        .size_limits(0, 4)
        .node_label("pool", "pooled");
    pool.create(&client, ClusterApiKind::MachinePool)
        .await
        .expect("create the MachinePool");
    let pools = api.namespaced(&client, ClusterApiKind::MachinePool, "default");
    for replicas in [2_usize, 1] {
        if replicas == 1 {
            set_replicas(&client, &api, ClusterApiKind::MachinePool, "mp-0", 1).await;
        }
        eventually(&format!("the MachinePool has {replicas} members"), || {
            let client = client.clone();
            let pools = pools.clone();
            async move {
                let pool = pools.get("mp-0").await.map_err(|error| error.to_string())?;
                let ids: Vec<String> = pool.data["spec"]["providerIDList"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(|id| id.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let nodes = node_names(&client, "pool=pooled").await;
                let expected: Vec<String> = nodes
                    .iter()
                    .map(|node| format!("test:///default/{node}"))
                    .collect();
                if ids.len() == replicas && ids == expected {
                    Ok(())
                } else {
                    Err(format!("providerIDList {ids:?}, nodes {nodes:?}"))
                }
            }
        })
        .await;
    }
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_in_a_management_cluster_get_nodes_in_a_workload_cluster_under_a_renamed_group() {
    let (_management_plane, management) = start(api_server_only()).await;
    let (_workload_plane, workload) = start(with_kwok()).await;
    let group = "test.k8s.io";
    let api = install_cluster_api_crds(&management, group)
        .await
        .expect("install the Cluster API CRDs under test.k8s.io")
        .preferred();
    let controller =
        MachineController::start(management.clone(), workload.clone(), group, &api.version)
            .await
            .expect("start the test controller");
    let machines = api.namespaced(&management, ClusterApiKind::Machine, "default");

    // A MachineSet of its own (no deployment), slow to provision, whose Machines get no provider ID.
    let slow = ScalableResource::new(&api, "default", "ms-slow")
        .replicas(1)
        .annotation(PROVISIONING_DELAY_ANNOTATION, "3s")
        .annotation(OMIT_PROVIDER_ID_ANNOTATION, "true");
    slow.create(&management, ClusterApiKind::MachineSet)
        .await
        .expect("create the slow MachineSet");
    let slow_selector = slow.label_selector();
    eventually(
        "the slow Machine is seen provisioning, without a Node",
        || {
            let machines = machines.clone();
            let selector = slow_selector.clone();
            async move {
                let list = machines
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|error| error.to_string())?
                    .items;
                match list.as_slice() {
                    [machine]
                        if machine.data["status"]["phase"] == "Provisioning"
                            && machine.data["status"]["nodeRef"].is_null() =>
                    {
                        Ok(())
                    }
                    other => Err(describe_machines(other)),
                }
            }
        },
    )
    .await;
    let running = wait_for_machines(&management, &api, "default", &slow_selector, 1, WAIT_LIMIT)
        .await
        .expect("the slow Machine runs after its delay");
    let machine_name = running[0].metadata.name.clone().expect("name");
    assert!(
        running[0].data["spec"]["providerID"].is_null(),
        "{:?}",
        running[0].data
    );
    let node = &ready_nodes_of(&workload, &running).await[0];
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations["test.k8s.io/machine"], machine_name);
    assert_eq!(annotations["test.k8s.io/cluster-namespace"], "default");
    assert!(
        node.spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .is_some_and(|id| id.ends_with(&machine_name)),
        "{:?}",
        node.spec
    );
    // The Node is in the workload cluster only.
    let management_node = Api::<Node>::all(management.clone())
        .get_opt(&machine_name)
        .await
        .expect("look for the Node in the management cluster");
    assert!(management_node.is_none());

    // A MachineSet whose provisioning fails: phase Failed with the message, and no Node.
    let failing = ScalableResource::new(&api, "default", "ms-failing")
        .replicas(1)
        .annotation(FAIL_PROVISIONING_ANNOTATION, "no capacity in zone-a");
    failing
        .create(&management, ClusterApiKind::MachineSet)
        .await
        .expect("create the failing MachineSet");
    let failing_selector = failing.label_selector();
    let failed = eventually("the failing Machine is Failed with its message", || {
        let machines = machines.clone();
        let selector = failing_selector.clone();
        async move {
            let list = machines
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|error| error.to_string())?
                .items;
            match list.as_slice() {
                [machine] if machine.data["status"]["phase"] == "Failed" => Ok(machine.clone()),
                other => Err(describe_machines(other)),
            }
        }
    })
    .await;
    // v1beta2 has no status.failureMessage; the message lives where v1beta2 keeps it.
    assert_eq!(api.version, "v1beta2");
    assert_eq!(
        failed.data["status"]["deprecated"]["v1beta1"]["failureMessage"],
        "no capacity in zone-a"
    );
    assert!(failed.data["status"]["nodeRef"].is_null());
    let failed_name = failed.metadata.name.clone().expect("name");
    let failed_node = Api::<Node>::all(workload.clone())
        .get_opt(&failed_name)
        .await
        .expect("look for a Node of the failed Machine");
    assert!(failed_node.is_none());

    // Scaling the failing set to zero deletes the Machine completely.
    set_replicas(
        &management,
        &api,
        ClusterApiKind::MachineSet,
        "ms-failing",
        0,
    )
    .await;
    wait_for_machines(
        &management,
        &api,
        "default",
        &failing_selector,
        0,
        WAIT_LIMIT,
    )
    .await
    .expect("the failed Machine is deleted");
    controller.stop().await;
}
