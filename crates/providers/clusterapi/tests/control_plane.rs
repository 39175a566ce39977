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

use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
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

async fn create_namespace(client: &Client, name: &str) {
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|error| panic!("creating namespace {name}: {error}"));
}

/// The Warning Events recorded on the object `name` in `default`.
async fn warnings_on(client: &Client, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|event| event.type_.as_deref() == Some("Warning"))
        .collect()
}

/// Statements 11, 13–15, 18–20 on real objects, and 16 with Ferroscale's deliberate difference
/// from quirk Q1: a MachineDeployment with a bad size annotation is skipped on its own and a
/// Warning Event naming the annotation is recorded on it, while the others stay node groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_c13_c16_c18_c19_node_groups_from_real_objects_with_discovery_filters() {
    let (_control_plane, client) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    create_namespace(&client, "blue").await;
    let min_key = api.key("cluster-api-autoscaler-node-group-min-size");
    let max_key = api.key("cluster-api-autoscaler-node-group-max-size");

    let mut md_a = ScalableResource::new(&api, "default", "md-a")
        .replicas(2)
        .size_limits(1, 10);
    md_a.labels.insert("color".into(), "green".into());
    let md_a = create_object(
        &client,
        &api,
        ClusterApiKind::MachineDeployment,
        &md_a.machine_deployment(),
    )
    .await
    .expect("create md-a");
    // md-a's MachineSet, with size annotations of its own: still not a group (18).
    let mut owned = ScalableResource::new(&api, "default", "ms-owned")
        .replicas(2)
        .size_limits(1, 10)
        .machine_set();
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": api.api_version(),
        "kind": "MachineDeployment",
        "name": "md-a",
        "uid": md_a.metadata.uid.clone().expect("uid"),
        "controller": true,
    }]);
    create_object(&client, &api, ClusterApiKind::MachineSet, &owned)
        .await
        .expect("create ms-owned");
    let deployments = [
        ScalableResource::new(&api, "default", "md-paused")
            .replicas(1)
            .size_limits(1, 10)
            .annotation("cluster.x-k8s.io/paused", "true"),
        ScalableResource::new(&api, "default", "md-bad-max")
            .replicas(1)
            .annotation(&min_key, "1")
            .annotation(&max_key, "ten"),
        ScalableResource::new(&api, "default", "md-inverted")
            .replicas(1)
            .size_limits(5, 2),
        ScalableResource::new(&api, "default", "md-min-only")
            .replicas(1)
            .annotation(&min_key, "1"),
        {
            let mut blue = ScalableResource::new(&api, "blue", "md-blue")
                .replicas(1)
                .size_limits(1, 3);
            blue.cluster_name = "other".into();
            blue.labels.insert("color".into(), "blue".into());
            blue
        },
    ];
    for resource in &deployments {
        create_object(
            &client,
            &api,
            ClusterApiKind::MachineDeployment,
            &resource.machine_deployment(),
        )
        .await
        .expect("create a MachineDeployment");
    }
    let equal = ScalableResource::new(&api, "default", "ms-equal")
        .replicas(2)
        .size_limits(2, 2);
    create_object(
        &client,
        &api,
        ClusterApiKind::MachineSet,
        &equal.machine_set(),
    )
    .await
    .expect("create ms-equal");
    let pool = ScalableResource::new(&api, "default", "mp-0")
        .replicas(1)
        .size_limits(1, 4);
    create_object(
        &client,
        &api,
        ClusterApiKind::MachinePool,
        &pool.machine_pool(),
    )
    .await
    .expect("create mp-0");

    let all = [
        "MachineDeployment/blue/md-blue",
        "MachineDeployment/default/md-a",
        "MachinePool/default/mp-0",
        "MachineSet/default/ms-equal",
    ];
    let provider = provider(&client, &[], &[]).await;
    assert_eq!(group_ids(&provider).await, all);
    let md_a = group(&provider, "MachineDeployment/default/md-a").await;
    assert_eq!((md_a.min_size(), md_a.max_size()), (1, 10));
    assert_eq!(md_a.target_size().await.expect("target size"), 2);
    assert_eq!(
        md_a.debug(),
        "MachineDeployment/default/md-a (min: 1, max: 10, replicas: 2)"
    );
    let equal = group(&provider, "MachineSet/default/ms-equal").await;
    assert_eq!((equal.min_size(), equal.max_size()), (2, 2));

    // 16: each bad resource carries one Warning Event naming its annotation and value, recorded
    // once however often the groups are listed.
    assert_eq!(group_ids(&provider).await, all);
    let bad_max = warnings_on(&client, "md-bad-max").await;
    assert_eq!(bad_max.len(), 1, "{bad_max:?}");
    let message = bad_max[0].message.clone().unwrap_or_default();
    assert!(
        message.contains(&max_key) && message.contains("ten"),
        "{message}"
    );
    assert_eq!(
        bad_max[0].involved_object.kind.as_deref(),
        Some("MachineDeployment")
    );
    let inverted = warnings_on(&client, "md-inverted").await;
    assert_eq!(inverted.len(), 1, "{inverted:?}");
    assert!(
        inverted[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&max_key) || m.contains(&min_key)),
        "{inverted:?}"
    );
    assert!(warnings_on(&client, "md-a").await.is_empty());

    // 11: discovery specs filter by namespace, cluster name and labels; any spec may match.
    for (specs, expected) in [
        (
            &["clusterapi:namespace=blue"][..],
            &["MachineDeployment/blue/md-blue"][..],
        ),
        (
            &["clusterapi:clusterName=other"],
            &["MachineDeployment/blue/md-blue"],
        ),
        (
            &["clusterapi:color=green"],
            &["MachineDeployment/default/md-a"],
        ),
        (
            &["clusterapi:color=green", "clusterapi:clusterName=other"],
            &[
                "MachineDeployment/blue/md-blue",
                "MachineDeployment/default/md-a",
            ],
        ),
        (&["clusterapi:"], &all),
        (&["clusterapi:color=purple"], &[]),
    ] {
        let filtered = support::provider(&client, &[], specs).await;
        assert_eq!(group_ids(&filtered).await, expected, "discovery {specs:?}");
    }
}
