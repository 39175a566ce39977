//! The Cluster API provider against a real API server serving the real Cluster API CRDs (spec
//! `clusterapi.md` §20): the provider is started and called as the binary does, and every effect
//! is read back from the API server. `MachineController` plays Cluster API's controllers where
//! Machines and Nodes must come and go.
//!
//! Each test starts its own control plane and is named after the conformance statements it
//! covers. Run with `--test-threads=1` on 2 cores.

mod support;

use ferroscale_core::cloud::CloudProvider;
use ferroscale_testing_control_plane::cluster_api::{CLUSTER_API_GROUP, create_object};
use ferroscale_testing_control_plane::{
    ClusterApiKind, MachineController, ScalableResource, install_cluster_api_crds,
    wait_for_machines,
};

use support::*;

/// Statements 4 and 5 (version from `CAPI_VERSION` verbatim, else the preferred one; a group the
/// server does not serve stops start-up; MachineDeployments and MachinePools watched when
/// served) and 2 (with `CAPI_GROUP=test.k8s.io` the resources of that group are the node groups,
/// the paused key keeps its own group, and deletion marks Machines with
/// `test.k8s.io/delete-machine`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c02_c04_c05_version_discovery_served_kinds_and_a_renamed_group() {
    let (_control_plane, client) = start(api_server_only()).await;
    let upstream = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let renamed = install_cluster_api_crds(&client, "test.k8s.io")
        .await
        .expect("install the Cluster API CRDs under test.k8s.io")
        .preferred();

    // A group under the upstream name, which a provider of test.k8s.io must not see.
    let upstream_md = ScalableResource::new(&upstream, "default", "md-upstream")
        .replicas(1)
        .size_limits(1, 5);
    create_object(
        &client,
        &upstream,
        ClusterApiKind::MachineDeployment,
        &upstream_md.machine_deployment(),
    )
    .await
    .expect("create md-upstream");

    // §4.1: without CAPI_VERSION the preferred version; MachineDeployments and MachinePools
    // are served by the real CRDs, so both are watched.
    let discovered = provider(&client, &[], &[]).await;
    assert_eq!(discovered.group_version(), (CLUSTER_API_GROUP, "v1beta2"));
    assert_eq!(discovered.watches(), (true, true));
    assert_eq!(
        group_ids(&discovered).await,
        ["MachineDeployment/default/md-upstream"]
    );
    // CAPI_VERSION is used verbatim although v1beta2 is preferred, and the objects are read
    // through it.
    let pinned = provider(&client, &[("CAPI_VERSION", "v1beta1")], &[]).await;
    assert_eq!(pinned.group_version(), (CLUSTER_API_GROUP, "v1beta1"));
    assert_eq!(pinned.watches(), (true, true));
    assert_eq!(
        group_ids(&pinned).await,
        ["MachineDeployment/default/md-upstream"]
    );
    // Start-up errors name what is not served.
    let error = try_provider(&client, &[("CAPI_GROUP", "absent.example.com")], &[])
        .await
        .expect_err("a group the server does not serve");
    assert!(error.to_string().contains("absent.example.com"), "{error}");
    let error = try_provider(&client, &[("CAPI_VERSION", "v9")], &[])
        .await
        .expect_err("a version the server does not serve");
    assert!(error.to_string().contains("cluster.x-k8s.io/v9"), "{error}");

    // §2 with CAPI_GROUP=test.k8s.io.
    let group_md = ScalableResource::new(&renamed, "default", "md-renamed")
        .replicas(2)
        .size_limits(1, 5);
    let paused_upstream_key = ScalableResource::new(&renamed, "default", "md-paused")
        .replicas(1)
        .size_limits(1, 5)
        .annotation("cluster.x-k8s.io/paused", "");
    let paused_group_key = ScalableResource::new(&renamed, "default", "md-not-paused")
        .replicas(1)
        .size_limits(1, 5)
        .annotation("test.k8s.io/paused", "");
    // Size keys under the upstream group mean nothing under test.k8s.io.
    let upstream_keys = ScalableResource::new(&renamed, "default", "md-upstream-keys")
        .replicas(1)
        .annotation(
            "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
            "5",
        );
    for resource in [
        &group_md,
        &paused_upstream_key,
        &paused_group_key,
        &upstream_keys,
    ] {
        create_object(
            &client,
            &renamed,
            ClusterApiKind::MachineDeployment,
            &resource.machine_deployment(),
        )
        .await
        .expect("create a MachineDeployment under test.k8s.io");
    }
    let controller = MachineController::start(
        client.clone(),
        client.clone(),
        "test.k8s.io",
        &renamed.version,
    )
    .await
    .expect("start the test controller");
    let machines = wait_for_machines(
        &client,
        &renamed,
        "default",
        &group_md.label_selector(),
        2,
        WAIT_LIMIT,
    )
    .await
    .expect("md-renamed has two running Machines");
    // No controller from here on: the delete annotation stays for the test to read.
    controller.stop().await;

    let provider = provider(&client, &[("CAPI_GROUP", "test.k8s.io")], &[]).await;
    assert_eq!(provider.group_version(), ("test.k8s.io", "v1beta2"));
    assert_eq!(
        group_ids(&provider).await,
        [
            "MachineDeployment/default/md-not-paused",
            "MachineDeployment/default/md-renamed",
        ]
    );
    let marked_name = machine_names(&machines)[0].clone();
    let node = model_node(&client, &marked_name).await;
    let found = provider
        .node_group_for_node(&node)
        .await
        .expect("node group lookup")
        .expect("the node has a group");
    assert_eq!(found.id(), "MachineDeployment/default/md-renamed");
    found.delete_nodes(&[node]).await.expect("delete the node");
    let marked = read(&client, &renamed, ClusterApiKind::Machine, &marked_name).await;
    assert!(
        has_annotation(&marked, "test.k8s.io/delete-machine"),
        "{:?}",
        marked.metadata
    );
    assert!(!has_annotation(&marked, "cluster.x-k8s.io/delete-machine"));
    let other = read(
        &client,
        &renamed,
        ClusterApiKind::Machine,
        &machine_names(&machines)[1],
    )
    .await;
    assert!(!has_annotation(&other, "test.k8s.io/delete-machine"));
    assert_eq!(
        stored_replicas(
            &client,
            &renamed,
            ClusterApiKind::MachineDeployment,
            "md-renamed"
        )
        .await,
        1
    );
}
