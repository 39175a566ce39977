//! The Cluster API provider against a real API server serving the real Cluster API CRDs
//! (the behaviour statements of docs/clusterapi.md): the provider is started and called as the
//! binary does, and every effect is read back from the API server. `MachineController` plays
//! Cluster API's controllers where Machines and Nodes must come and go.
//!
//! Each test starts its own control plane and is named after the statements of
//! docs/clusterapi.md it covers (`c22_` checks CAPI-22). Run with `--test-threads=1` on 2 cores.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ferroscale_core::cloud::{
    CloudProvider, ErrorClass, Instance, InstanceState, InstanceStatus, NodeTemplate,
};
use ferroscale_provider_clusterapi::ClusterApiProvider;
use ferroscale_testing_control_plane::cluster_api::{
    CAPACITY_ANNOTATION_PREFIX, CLUSTER_API_GROUP, DEPLOYMENT_NAME_LABEL,
    FAIL_PROVISIONING_ANNOTATION, OMIT_PROVIDER_ID_ANNOTATION, PROVISIONING_DELAY_ANNOTATION,
    REVISION_ANNOTATION, create_object, create_test_machine_template,
};
use ferroscale_testing_control_plane::{
    ClusterApi, ClusterApiKind, MachineController, ScalableResource, install_cluster_api_crds,
    wait_for_machines,
};

use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

/// docs/clusterapi.md CAPI-03 (an empty `CAPI_GROUP` is the default), CAPI-04 and CAPI-05
/// (version from `CAPI_VERSION` verbatim, else the preferred one; a group the server does not
/// serve stops start-up; MachineDeployments and MachinePools watched when served) and CAPI-02 (with
/// `CAPI_GROUP=test.k8s.io` the resources of that group are the node groups, the paused key keeps
/// its own group, and deletion marks Machines with `test.k8s.io/delete-machine`).
///
/// Checks docs/clusterapi.md CAPI-61.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c02_c03_c04_c05_version_discovery_served_kinds_and_a_renamed_group() {
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
    upstream_md
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create md-upstream");

    // CAPI-04: without CAPI_VERSION the preferred version; MachineDeployments and MachinePools
    // are served by the real CRDs, so both are watched.
    let discovered = provider(&client, &[], &[]).await;
    assert_eq!(discovered.group_version(), (CLUSTER_API_GROUP, "v1beta2"));
    assert_eq!(discovered.watches(), (true, true));
    assert_eq!(
        group_ids(&discovered).await,
        ["MachineDeployment/default/md-upstream"]
    );
    // 3: an empty CAPI_GROUP is the default group.
    let empty_group = provider(&client, &[("CAPI_GROUP", "")], &[]).await;
    assert_eq!(empty_group.group_version(), (CLUSTER_API_GROUP, "v1beta2"));
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

    // CAPI-02 with CAPI_GROUP=test.k8s.io.
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
        resource
            .create(&client, ClusterApiKind::MachineDeployment)
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

/// docs/clusterapi.md CAPI-11, CAPI-13–CAPI-15, CAPI-18–CAPI-20 on real objects, and CAPI-16 with
/// Ferroscale's deliberate difference CAPI-Q1: a MachineDeployment with a bad size annotation is
/// skipped on its own and a Warning Event naming the annotation is recorded on it, while the others
/// stay node groups.
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
    let md_a = md_a
        .create(&client, ClusterApiKind::MachineDeployment)
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
        resource
            .create(&client, ClusterApiKind::MachineDeployment)
            .await
            .expect("create a MachineDeployment");
    }
    let equal = ScalableResource::new(&api, "default", "ms-equal")
        .replicas(2)
        .size_limits(2, 2);
    equal
        .create(&client, ClusterApiKind::MachineSet)
        .await
        .expect("create ms-equal");
    let pool = ScalableResource::new(&api, "default", "mp-0")
        .replicas(1)
        .size_limits(1, 4);
    pool.create(&client, ClusterApiKind::MachinePool)
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
    // 14: a min annotation without a max one is not a group, and says so once.
    let min_only = warnings_on(&client, "md-min-only").await;
    assert_eq!(min_only.len(), 1, "{min_only:?}");
    assert!(
        min_only[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&max_key) && m.contains("missing")),
        "{min_only:?}"
    );

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

/// The id of the group `NodeGroupForNode` gives the node, `None` for no group.
async fn group_of(provider: &ClusterApiProvider, node: &ferroscale_model::Node) -> Option<String> {
    provider
        .node_group_for_node(node)
        .await
        .unwrap_or_else(|error| panic!("node group of {}: {error}", node.provider_id))
        .map(|group| group.id().to_string())
}

fn machine_name(machine: &DynamicObject) -> String {
    machine.metadata.name.clone().expect("Machine name")
}

/// docs/clusterapi.md CAPI-22–CAPI-32 on real Machines made by the test controller: nodes map to
/// the MachineDeployment, standalone MachineSet or MachinePool behind them (through the Node's
/// annotations when a Machine has no provider id), unknown ids and orphan Machines map to no
/// group, paused groups keep their nodes out (19), and Machines report running, pending, failed
/// (v1beta2's failure message) and deleting instances whose synthetic ids map back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c19_c22_c32_nodes_map_to_groups_and_machines_report_their_state() {
    let (_control_plane, client) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let deployment = ScalableResource::new(&api, "default", "md-map")
        .replicas(1)
        .size_limits(1, 5);
    deployment
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create md-map");
    let solo = ScalableResource::new(&api, "default", "ms-solo")
        .replicas(1)
        .size_limits(1, 5);
    let no_id = ScalableResource::new(&api, "default", "ms-noid")
        .replicas(1)
        .size_limits(1, 5)
        .annotation(OMIT_PROVIDER_ID_ANNOTATION, "true");
    let paused = ScalableResource::new(&api, "default", "ms-paused")
        .replicas(1)
        .size_limits(1, 5)
        .annotation("cluster.x-k8s.io/paused", "");
    let slow = ScalableResource::new(&api, "default", "ms-slow")
        .replicas(1)
        .size_limits(0, 5)
        .annotation(PROVISIONING_DELAY_ANNOTATION, "3600s");
    let failing = ScalableResource::new(&api, "default", "ms-failing")
        .replicas(1)
        .size_limits(0, 5)
        .annotation(FAIL_PROVISIONING_ANNOTATION, "no capacity in zone-a");
    let deleting = ScalableResource::new(&api, "default", "ms-deleting")
        .replicas(1)
        .size_limits(0, 5)
        .capacity("2", "8Gi");
    for resource in [&solo, &no_id, &paused, &slow, &failing, &deleting] {
        resource
            .create(&client, ClusterApiKind::MachineSet)
            .await
            .expect("create a MachineSet");
    }
    let pool = ScalableResource::new(&api, "default", "mp-0")
        .replicas(2)
        .size_limits(1, 5);
    pool.create(&client, ClusterApiKind::MachinePool)
        .await
        .expect("create mp-0");
    // A Machine with a provider id that no MachineSet owns (25).
    let mut orphan = ScalableResource::new(&api, "default", "orphan").machine_set();
    orphan["kind"] = json!("Machine");
    orphan["spec"] = json!({
        "clusterName": "test-cluster",
        "bootstrap": { "dataSecretName": "orphan-bootstrap" },
        "infrastructureRef": orphan["spec"]["template"]["spec"]["infrastructureRef"].clone(),
        "providerID": "test:///default/orphan",
    });
    create_object(&client, &api, ClusterApiKind::Machine, &orphan)
        .await
        .expect("create the orphan Machine");

    let controller =
        MachineController::start(client.clone(), client.clone(), &api.group, &api.version)
            .await
            .expect("start the test controller");
    let mut running = Vec::new();
    for resource in [&deployment, &solo, &no_id, &paused, &deleting] {
        let machines = wait_for_machines(
            &client,
            &api,
            "default",
            &resource.label_selector(),
            1,
            WAIT_LIMIT,
        )
        .await
        .expect("one running Machine");
        running.push(machines[0].clone());
    }
    let [
        md_machine,
        solo_machine,
        no_id_machine,
        paused_machine,
        deleting_machine,
    ] = running.try_into().expect("five Machines");
    let slow_machine = single_machine(&client, &api, &slow, "ms-slow's Machine provisions", |m| {
        m.data["status"]["phase"] == "Provisioning"
    })
    .await;
    let failed_machine =
        single_machine(&client, &api, &failing, "ms-failing's Machine fails", |m| {
            m.data["status"]["phase"] == "Failed"
        })
        .await;
    let pool_ids: Vec<String> = eventually("mp-0 lists two provider ids", || async {
        let pool = read(&client, &api, ClusterApiKind::MachinePool, "mp-0").await;
        let ids: Vec<String> = pool.data["spec"]["providerIDList"]
            .as_array()
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| id.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if ids.len() == 2 {
            Ok(ids)
        } else {
            Err(format!("{ids:?}"))
        }
    })
    .await;
    // The deleting Machine: held by a finalizer of the test once the controller deletes it.
    api.namespaced(&client, ClusterApiKind::Machine, "default")
        .patch(
            &machine_name(&deleting_machine),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": [
                "testing.ferroscale.dev/machine-controller",
                "testing.ferroscale.dev/held-by-the-test",
            ] } })),
        )
        .await
        .expect("hold the Machine");
    api.namespaced(&client, ClusterApiKind::MachineSet, "default")
        .patch_scale(
            "ms-deleting",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
        )
        .await
        .expect("scale ms-deleting to zero");

    let provider = provider(&client, &[], &[]).await;

    // 22: each kind of node maps to its group.
    let md_node = model_node(&client, &machine_name(&md_machine)).await;
    assert_eq!(
        group_of(&provider, &md_node).await.as_deref(),
        Some("MachineDeployment/default/md-map")
    );
    let solo_node = model_node(&client, &machine_name(&solo_machine)).await;
    assert_eq!(
        group_of(&provider, &solo_node).await.as_deref(),
        Some("MachineSet/default/ms-solo")
    );
    for id in &pool_ids {
        let name = id.rsplit('/').next().expect("node name");
        let pool_node = model_node(&client, name).await;
        assert_eq!(pool_node.provider_id, *id);
        assert_eq!(
            group_of(&provider, &pool_node).await.as_deref(),
            Some("MachinePool/default/mp-0")
        );
    }
    // 23 and 25: unknown ids and a Machine without a MachineSet give no group, no error.
    let unknown = node_with_provider_id("nothing", "test:///default/nothing");
    assert_eq!(group_of(&provider, &unknown).await, None);
    let orphan = node_with_provider_id("orphan", "test:///default/orphan");
    assert_eq!(group_of(&provider, &orphan).await, None);
    // 24: the Machine without spec.providerID is found through its Node's annotations.
    assert!(no_id_machine.data["spec"]["providerID"].is_null());
    let no_id_node = model_node(&client, &machine_name(&no_id_machine)).await;
    assert_eq!(
        group_of(&provider, &no_id_node).await.as_deref(),
        Some("MachineSet/default/ms-noid")
    );
    // 19: a paused group keeps its nodes.
    let paused_node = model_node(&client, &machine_name(&paused_machine)).await;
    assert_eq!(group_of(&provider, &paused_node).await, None);
    assert!(provider.has_instance(&md_node).await.expect("has instance"));

    // 26: spec.providerID verbatim, Running.
    let md_group = group(&provider, "MachineDeployment/default/md-map").await;
    assert_eq!(
        md_group.nodes().await.expect("instances"),
        [Instance::running(md_node.provider_id.clone())]
    );
    // 27: no provider id on the Machine: its Node's.
    let no_id_group = group(&provider, "MachineSet/default/ms-noid").await;
    assert_eq!(
        no_id_group.nodes().await.expect("instances"),
        [Instance::running(no_id_node.provider_id.clone())]
    );
    // 28: without a Node yet.
    let slow_group = group(&provider, "MachineSet/default/ms-slow").await;
    let pending_id = format!("pending-machine-default_{}", machine_name(&slow_machine));
    assert_eq!(
        slow_group.nodes().await.expect("instances"),
        [Instance {
            id: pending_id.clone(),
            status: Some(InstanceStatus {
                state: InstanceState::Creating,
                error: None
            }),
        }]
    );
    // 30: failed, read from v1beta2's status.deprecated.v1beta1.failureMessage.
    let failing_group = group(&provider, "MachineSet/default/ms-failing").await;
    let failed = failing_group.nodes().await.expect("instances");
    let failed_id = format!("failed-machine-default_{}", machine_name(&failed_machine));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id, failed_id);
    let status = failed[0].status.clone().expect("a status");
    assert_eq!(status.state, InstanceState::Creating);
    let error = status.error.expect("error info");
    assert_eq!(
        (error.class, error.code.as_str()),
        (ErrorClass::Other, "ProvisioningFailed")
    );
    // 29: being deleted.
    let deleting_group = group(&provider, "MachineSet/default/ms-deleting").await;
    let deleting_id = format!(
        "deleting-machine-default_{}",
        machine_name(&deleting_machine)
    );
    instances_once(
        deleting_group.as_ref(),
        "ms-deleting reports a deleting Machine",
        |i| {
            i == [Instance {
                id: deleting_id.clone(),
                status: Some(InstanceStatus {
                    state: InstanceState::Deleting,
                    error: None,
                }),
            }]
        },
    )
    .await;
    // 32: pool members are the providerIDList entries, Running.
    let pool_group = group(&provider, "MachinePool/default/mp-0").await;
    let mut members = pool_group.nodes().await.expect("instances");
    members.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected: Vec<Instance> = pool_ids.iter().map(Instance::running).collect();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(members, expected);
    // 31: synthetic ids passed back as provider ids resolve to the same groups.
    for (id, group_id) in [
        (&pending_id, "MachineSet/default/ms-slow"),
        (&failed_id, "MachineSet/default/ms-failing"),
    ] {
        let node = node_with_provider_id("synthetic", id);
        assert_eq!(
            group_of(&provider, &node).await.as_deref(),
            Some(group_id),
            "{id}"
        );
    }
    controller.stop().await;
}

/// Whether any Machine of the resource carries the delete annotation.
async fn any_marked(client: &Client, api: &ClusterApi, resource: &ScalableResource) -> bool {
    machines_of(client, api, resource)
        .await
        .iter()
        .any(|machine| has_annotation(machine, &api.key("delete-machine")))
}

/// docs/clusterapi.md CAPI-33–CAPI-43 with the test controller playing Cluster API: sizes go
/// through the scale subresource and are read back from the API server; deleting nodes removes
/// exactly their Machines; foreign nodes, the min bound and Machines already being deleted change
/// nothing; a MachinePool without Machines only loses a replica; and when lowering replicas fails
/// after the Machine was marked, the mark is removed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c33_c43_sizes_through_the_scale_subresource_and_the_delete_machine_protocol() {
    let (_control_plane, client) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let sized = ScalableResource::new(&api, "default", "md-sized")
        .replicas(3)
        .size_limits(1, 10);
    let deleted = ScalableResource::new(&api, "default", "md-del")
        .replicas(4)
        .size_limits(1, 10);
    let other = ScalableResource::new(&api, "default", "md-other")
        .replicas(1)
        .size_limits(1, 5);
    let over = ScalableResource::new(&api, "default", "md-over")
        .replicas(3)
        .size_limits(1, 5);
    for resource in [&sized, &deleted, &other, &over] {
        resource
            .create(&client, ClusterApiKind::MachineDeployment)
            .await
            .expect("create a MachineDeployment");
    }
    let pending = ScalableResource::new(&api, "default", "ms-pending")
        .replicas(2)
        .size_limits(0, 5)
        .annotation(PROVISIONING_DELAY_ANNOTATION, "3600s");
    pending
        .create(&client, ClusterApiKind::MachineSet)
        .await
        .expect("create ms-pending");
    let pool = ScalableResource::new(&api, "default", "mp-0")
        .replicas(2)
        .size_limits(1, 5);
    pool.create(&client, ClusterApiKind::MachinePool)
        .await
        .expect("create mp-0");
    let controller =
        MachineController::start(client.clone(), client.clone(), &api.group, &api.version)
            .await
            .expect("start the test controller");
    let mut running = Vec::new();
    for (resource, count) in [(&sized, 3), (&deleted, 4), (&other, 1), (&over, 3)] {
        running.push(
            wait_for_machines(
                &client,
                &api,
                "default",
                &resource.label_selector(),
                count,
                WAIT_LIMIT,
            )
            .await
            .expect("running Machines"),
        );
    }
    let [_, deleted_machines, other_machines, over_machines] =
        running.try_into().expect("four lists");
    eventually("ms-pending has two provisioning Machines", || async {
        let machines = machines_of(&client, &api, &pending).await;
        let provisioning = machines
            .iter()
            .filter(|m| m.data["status"]["phase"] == "Provisioning")
            .count();
        if provisioning == 2 {
            Ok(())
        } else {
            Err(format!("{machines:?}"))
        }
    })
    .await;
    let pool_ids: Vec<String> = eventually("mp-0 lists two provider ids", || async {
        let pool = read(&client, &api, ClusterApiKind::MachinePool, "mp-0").await;
        let ids: Vec<String> = pool.data["spec"]["providerIDList"]
            .as_array()
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| id.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if ids.len() == 2 {
            Ok(ids)
        } else {
            Err(format!("{ids:?}"))
        }
    })
    .await;
    let provider = provider(&client, &[], &[]).await;
    let replicas_of = |kind, name: &'static str| stored_replicas(&client, &api, kind, name);
    let md = ClusterApiKind::MachineDeployment;

    // 33, 36: three running Machines at replicas 3 cannot lose a target without losing a node.
    let sized_group = group(&provider, "MachineDeployment/default/md-sized").await;
    assert_eq!(sized_group.target_size().await.expect("target size"), 3);
    let error = sized_group
        .decrease_target_size(-1)
        .await
        .expect_err("no pending Machine");
    assert!(
        error
            .to_string()
            .contains("attempt to delete existing nodes"),
        "{error}"
    );
    let error = sized_group
        .decrease_target_size(1)
        .await
        .expect_err("positive delta");
    assert!(
        error.to_string().contains("size decrease must be negative"),
        "{error}"
    );
    assert_eq!(replicas_of(md, "md-sized").await, 3);
    // 34: through the scale subresource, bounded by max.
    let error = sized_group.increase_size(0).await.expect_err("zero delta");
    assert!(
        error.to_string().contains("size increase must be positive"),
        "{error}"
    );
    sized_group.increase_size(1).await.expect("3 → 4");
    assert_eq!(replicas_of(md, "md-sized").await, 4);
    assert_eq!(sized_group.target_size().await.expect("target size"), 4);
    let error = sized_group
        .increase_size(7)
        .await
        .expect_err("4 + 7 > max 10");
    assert!(
        error.to_string().contains("size increase too large"),
        "{error}"
    );
    assert_eq!(replicas_of(md, "md-sized").await, 4);
    // 35, 36: pending Machines do not count, and zero is written.
    let pending_group = group(&provider, "MachineSet/default/ms-pending").await;
    pending_group.decrease_target_size(-2).await.expect("2 → 0");
    let stored = read(&client, &api, ClusterApiKind::MachineSet, "ms-pending").await;
    assert_eq!(stored.data["spec"]["replicas"], json!(0));

    // 37, 42: two node-group objects built before either deletion; each deletes one node and
    // the replicas end two lower, with exactly those two Machines gone.
    let first = group(&provider, "MachineDeployment/default/md-del").await;
    let second = group(&provider, "MachineDeployment/default/md-del").await;
    let names = machine_names(&deleted_machines);
    let nodes = {
        let mut nodes = Vec::new();
        for name in &names {
            nodes.push(model_node(&client, name).await);
        }
        nodes
    };
    first
        .delete_nodes(&nodes[0..1])
        .await
        .expect("delete the first node");
    second
        .delete_nodes(&nodes[1..2])
        .await
        .expect("delete the second node");
    assert_eq!(replicas_of(md, "md-del").await, 2);
    let left = wait_for_machines(
        &client,
        &api,
        "default",
        &deleted.label_selector(),
        2,
        WAIT_LIMIT,
    )
    .await
    .expect("two Machines left");
    assert_eq!(machine_names(&left), names[2..]);

    // 39: a node of another group: an error, and nothing changes.
    let other_node = model_node(&client, &machine_names(&other_machines)[0]).await;
    let error = first
        .delete_nodes(std::slice::from_ref(&other_node))
        .await
        .expect_err("foreign node");
    assert!(
        error.to_string().contains("doesn't belong to node group"),
        "{error}"
    );
    assert_eq!(replicas_of(md, "md-del").await, 2);
    assert_eq!(replicas_of(md, "md-other").await, 1);
    assert!(!any_marked(&client, &api, &deleted).await);
    assert!(!any_marked(&client, &api, &other).await);
    // 40: at min, and below min after the deletion.
    let other_group = group(&provider, "MachineDeployment/default/md-other").await;
    let error = other_group
        .delete_nodes(&[other_node])
        .await
        .expect_err("at min");
    assert!(error.to_string().contains("min size reached"), "{error}");
    let error = first
        .delete_nodes(&nodes[2..4])
        .await
        .expect_err("2 - 2 < min 1");
    assert!(
        error.to_string().contains("unable to delete 2 machines"),
        "{error}"
    );
    assert_eq!(replicas_of(md, "md-del").await, 2);
    assert!(!any_marked(&client, &api, &deleted).await);
    assert!(!any_marked(&client, &api, &other).await);

    // 41: a Machine already being deleted (held by a finalizer of the test) is left alone.
    let machines = api.namespaced(&client, ClusterApiKind::Machine, "default");
    machines
        .patch(
            &names[2],
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": [
                "testing.ferroscale.dev/machine-controller",
                "testing.ferroscale.dev/held-by-the-test",
            ] } })),
        )
        .await
        .expect("hold the Machine");
    machines
        .delete(&names[2], &Default::default())
        .await
        .expect("delete the Machine");
    eventually("the provider sees the Machine being deleted", || async {
        let instances = first.nodes().await.map_err(|e| e.to_string())?;
        if instances
            .iter()
            .any(|i| i.id == format!("deleting-machine-default_{}", names[2]))
        {
            Ok(())
        } else {
            Err(format!("{instances:?}"))
        }
    })
    .await;
    first
        .delete_nodes(&nodes[2..3])
        .await
        .expect("nothing to do");
    assert_eq!(replicas_of(md, "md-del").await, 2);
    assert!(!has_annotation(
        &read(&client, &api, ClusterApiKind::Machine, &names[2]).await,
        &api.key("delete-machine")
    ));

    // 43: MachinePool members have no Machines: a member only lowers replicas; a stranger is
    // refused.
    let pool_group = group(&provider, "MachinePool/default/mp-0").await;
    let stranger = node_with_provider_id("stranger", "test:///default/stranger");
    pool_group
        .delete_nodes(&[stranger])
        .await
        .expect_err("not a member");
    assert_eq!(replicas_of(ClusterApiKind::MachinePool, "mp-0").await, 2);
    let member = node_with_provider_id("member", &pool_ids[0]);
    pool_group
        .delete_nodes(&[member])
        .await
        .expect("delete a member");
    assert_eq!(replicas_of(ClusterApiKind::MachinePool, "mp-0").await, 1);

    // A group above its max (max lowered to 1 under 3 replicas) is not grown further but can
    // still lose nodes: upstream refuses this decrease too (its write checks both bounds);
    // Ferroscale checks a decrease against min only (docs/clusterapi.md CAPI-60).
    api.namespaced(&client, md, "default")
        .patch(
            "md-over",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                api.key("cluster-api-autoscaler-node-group-max-size"): "1",
            } } })),
        )
        .await
        .expect("lower md-over's max");
    let over_group = eventually("md-over's max is 1", || async {
        let over_group = group(&provider, "MachineDeployment/default/md-over").await;
        if over_group.max_size() == 1 {
            Ok(over_group)
        } else {
            Err(over_group.debug())
        }
    })
    .await;
    let error = over_group
        .increase_size(1)
        .await
        .expect_err("3 + 1 > max 1");
    assert!(
        error.to_string().contains("size increase too large"),
        "{error}"
    );
    let over_node = model_node(&client, &machine_names(&over_machines)[0]).await;
    over_group
        .delete_nodes(&[over_node])
        .await
        .expect("a decrease towards the bounds is allowed");
    assert_eq!(replicas_of(md, "md-over").await, 2);
    controller.stop().await;
}

const GI: i64 = 1024 * 1024 * 1024;

/// The cpu (millicores) and memory (bytes) of a group's scale-from-zero template node.
async fn template_capacity(provider: &ClusterApiProvider, id: &str) -> (i64, i64, NodeTemplate) {
    let template = group(provider, id)
        .await
        .template_node_info()
        .await
        .unwrap_or_else(|error| panic!("template of {id}: {error}"));
    let capacity = &template.node.capacity;
    (capacity.get("cpu"), capacity.get("memory"), template)
}

/// docs/clusterapi.md CAPI-17, CAPI-44, CAPI-47 and CAPI-48 on real objects — scale from zero
/// with capacity from the annotations only, from a TestMachineTemplate's
/// `status.capacity`/`status.nodeInfo` only (a v1beta2 `{apiGroup, kind, name}` reference), from
/// both (the annotation wins), and from neither (no group) — and CAPI-57: the nodes of a
/// MachineDeployment whose older-revision MachineSet still has replicas are vetoed for scale-down
/// until it is scaled to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c17_c44_c47_c48_c57_scale_from_zero_capacity_sources_and_the_rollout_veto() {
    let (_control_plane, client) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let capacity: BTreeMap<String, String> = [("cpu", "8"), ("memory", "32Gi")]
        .into_iter()
        .map(|(name, quantity)| (name.to_string(), quantity.to_string()))
        .collect();
    create_test_machine_template(
        &client,
        "default",
        "tpl-a",
        &capacity,
        Some(("arm64", "linux")),
    )
    .await
    .expect("create the TestMachineTemplate");
    let mut from_template = ScalableResource::new(&api, "default", "md-template").size_limits(0, 5);
    from_template.infrastructure_template = Some("tpl-a".into());
    let mut from_both = ScalableResource::new(&api, "default", "md-both")
        .size_limits(0, 5)
        .annotation(&format!("{CAPACITY_ANNOTATION_PREFIX}cpu"), "2");
    from_both.infrastructure_template = Some("tpl-a".into());
    let zero_groups = [
        ScalableResource::new(&api, "default", "md-annotations")
            .size_limits(0, 5)
            .capacity("4", "16Gi"),
        from_template,
        from_both,
        // No capacity anywhere (its reference names a template that does not exist).
        ScalableResource::new(&api, "default", "md-nothing").size_limits(0, 5),
    ];
    for resource in &zero_groups {
        resource
            .create(&client, ClusterApiKind::MachineDeployment)
            .await
            .expect("create a MachineDeployment at zero");
    }
    // A rolling MachineDeployment: an older-revision MachineSet of it, made by hand, still has
    // a replica while the controller's new MachineSet (revision 2) has the other.
    let rolling = ScalableResource::new(&api, "default", "md-rolling")
        .replicas(1)
        .size_limits(1, 5);
    let rolling_md = rolling
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create md-rolling");
    let mut old_set = rolling.machine_set();
    old_set["metadata"]["name"] = json!("md-rolling-old");
    old_set["metadata"]["labels"] = json!({ DEPLOYMENT_NAME_LABEL: "md-rolling" });
    old_set["metadata"]["annotations"] = json!({ REVISION_ANNOTATION: "1" });
    old_set["metadata"]["ownerReferences"] = json!([{
        "apiVersion": api.api_version(),
        "kind": "MachineDeployment",
        "name": "md-rolling",
        "uid": rolling_md.metadata.uid.clone().expect("uid"),
        "controller": true,
    }]);
    create_object(&client, &api, ClusterApiKind::MachineSet, &old_set)
        .await
        .expect("create the old MachineSet");
    let controller =
        MachineController::start(client.clone(), client.clone(), &api.group, &api.version)
            .await
            .expect("start the test controller");
    let rolling_machines = wait_for_machines(
        &client,
        &api,
        "default",
        &rolling.label_selector(),
        2,
        WAIT_LIMIT,
    )
    .await
    .expect("a Machine of each MachineSet");
    let new_set = read(&client, &api, ClusterApiKind::MachineSet, "md-rolling-ms").await;
    assert_eq!(
        new_set.metadata.annotations.clone().unwrap_or_default()[REVISION_ANNOTATION],
        "2"
    );

    let provider = provider(&client, &[], &[]).await;
    assert_eq!(
        group_ids(&provider).await,
        [
            "MachineDeployment/default/md-annotations",
            "MachineDeployment/default/md-both",
            "MachineDeployment/default/md-rolling",
            "MachineDeployment/default/md-template",
        ]
    );
    // Annotations only.
    let (cpu, memory, _) =
        template_capacity(&provider, "MachineDeployment/default/md-annotations").await;
    assert_eq!((cpu, memory), (4000, 16 * GI));
    // The template only: its capacity and its nodeInfo.
    let (cpu, memory, template) =
        template_capacity(&provider, "MachineDeployment/default/md-template").await;
    assert_eq!((cpu, memory), (8000, 32 * GI));
    assert_eq!(template.node.label("kubernetes.io/arch"), Some("arm64"));
    assert_eq!(template.node.label("kubernetes.io/os"), Some("linux"));
    // Both: the annotation's cpu, the template's memory.
    let (cpu, memory, _) = template_capacity(&provider, "MachineDeployment/default/md-both").await;
    assert_eq!((cpu, memory), (2000, 32 * GI));
    // 44: no capacity → not implemented (the engine then copies a real node).
    let rolling_group = group(&provider, "MachineDeployment/default/md-rolling").await;
    assert!(
        rolling_group
            .template_node_info()
            .await
            .is_err_and(|error| error.is_not_implemented())
    );

    // 57: both Machines' nodes are vetoed while the old MachineSet has a replica.
    let mut nodes = Vec::new();
    for name in machine_names(&rolling_machines) {
        nodes.push(Arc::new(model_node(&client, &name).await));
    }
    let names: HashSet<String> = nodes.iter().map(|node| node.name.clone()).collect();
    assert_eq!(provider.scale_down_vetoes(&nodes).await, names);
    // A node no group owns is vetoed too.
    let stranger = Arc::new(node_with_provider_id(
        "stranger",
        "test:///default/stranger",
    ));
    assert!(
        provider
            .scale_down_vetoes(&[stranger])
            .await
            .contains("stranger")
    );
    api.namespaced(&client, ClusterApiKind::MachineSet, "default")
        .patch_scale(
            "md-rolling-old",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
        )
        .await
        .expect("scale the old MachineSet to zero");
    let remaining = wait_for_machines(
        &client,
        &api,
        "default",
        &rolling.label_selector(),
        1,
        WAIT_LIMIT,
    )
    .await
    .expect("only the new MachineSet's Machine");
    let kept = Arc::new(model_node(&client, &machine_names(&remaining)[0]).await);
    eventually("the rollout veto is lifted", || async {
        let vetoed = provider.scale_down_vetoes(&[Arc::clone(&kept)]).await;
        if vetoed.is_empty() {
            Ok(())
        } else {
            Err(format!("{vetoed:?}"))
        }
    })
    .await;
    controller.stop().await;
}

/// The management-cluster role of the provider for MachineDeployments (docs/clusterapi.md
/// CAPI-61), with or without `patch` on their scale subresource.
async fn grant_management_role(client: &Client, user: &str, may_patch_scale: bool) {
    let scale_verbs: &[&str] = if may_patch_scale {
        &["get", "patch", "update"]
    } else {
        &["get"]
    };
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": "ferroscale-management" },
        "rules": [
            {
                "apiGroups": [CLUSTER_API_GROUP],
                "resources": ["machinedeployments", "machinesets", "machinepools", "machines"],
                "verbs": ["get", "list", "watch", "update", "patch"],
            },
            {
                "apiGroups": [CLUSTER_API_GROUP],
                "resources": ["machinedeployments/scale"],
                "verbs": scale_verbs,
            },
            { "apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"] },
        ],
    }))
    .expect("ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "ferroscale-management" },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "ferroscale-management",
        },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .expect("ClusterRoleBinding");
    let apply = PatchParams::apply("ferroscale-test").force();
    Api::<ClusterRole>::all(client.clone())
        .patch("ferroscale-management", &apply, &Patch::Apply(&role))
        .await
        .expect("apply the ClusterRole");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch("ferroscale-management", &apply, &Patch::Apply(&binding))
        .await
        .expect("apply the ClusterRoleBinding");
}

/// docs/clusterapi.md CAPI-38 with a scale PATCH the management cluster really refuses (RBAC
/// without `machinedeployments/scale` patch): the Machine is marked, the PATCH fails, the mark is
/// removed again and the error returned; once the role allows the PATCH the same deletion works.
/// Also docs/clusterapi.md CAPI-07: Machines in a management cluster and Nodes in a separate
/// workload cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c38_a_refused_scale_patch_rolls_the_mark_back_with_separate_management_and_workload_clusters()
 {
    let (management_plane, management) = start(api_server_only()).await;
    let (_workload_plane, workload) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&management, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let user = "ferroscale-autoscaler";
    grant_management_role(&management, user, false).await;
    let limited = client_as(&management_plane, user).await;
    let deployment = ScalableResource::new(&api, "default", "md-0")
        .replicas(2)
        .size_limits(1, 5);
    deployment
        .create(&management, ClusterApiKind::MachineDeployment)
        .await
        .expect("create md-0");
    let controller = MachineController::start(
        management.clone(),
        workload.clone(),
        &api.group,
        &api.version,
    )
    .await
    .expect("start the test controller");
    let machines = wait_for_machines(
        &management,
        &api,
        "default",
        &deployment.label_selector(),
        2,
        WAIT_LIMIT,
    )
    .await
    .expect("two running Machines");
    let names = machine_names(&machines);
    let provider = ClusterApiProvider::start(limited, workload.clone(), config(&[], &[]))
        .await
        .expect("start the provider with the management role");

    // The Node is in the workload cluster only.
    let node = model_node(&workload, &names[0]).await;
    let md_group = provider
        .node_group_for_node(&node)
        .await
        .expect("node group lookup")
        .expect("the node has a group");
    assert_eq!(md_group.id(), "MachineDeployment/default/md-0");
    let before = read(&management, &api, ClusterApiKind::Machine, &names[0]).await;
    let error = md_group
        .delete_nodes(std::slice::from_ref(&node))
        .await
        .expect_err("the scale PATCH is forbidden");
    assert!(error.to_string().contains("scaling"), "{error}");
    let after = read(&management, &api, ClusterApiKind::Machine, &names[0]).await;
    assert!(
        !has_annotation(&after, &api.key("delete-machine")),
        "{:?}",
        after.metadata
    );
    // Written twice (mark, then rollback), not left untouched.
    assert_ne!(
        before.metadata.resource_version,
        after.metadata.resource_version
    );
    assert_eq!(
        stored_replicas(&management, &api, ClusterApiKind::MachineDeployment, "md-0").await,
        2
    );

    grant_management_role(&management, user, true).await;
    eventually(
        "the deletion succeeds once the PATCH is allowed",
        || async {
            md_group
                .delete_nodes(std::slice::from_ref(&node))
                .await
                .map_err(|error| error.to_string())
        },
    )
    .await;
    assert_eq!(
        stored_replicas(&management, &api, ClusterApiKind::MachineDeployment, "md-0").await,
        1
    );
    let left = wait_for_machines(
        &management,
        &api,
        "default",
        &deployment.label_selector(),
        1,
        WAIT_LIMIT,
    )
    .await
    .expect("one Machine left");
    assert_eq!(machine_names(&left), names[1..]);
    controller.stop().await;
}

/// docs/clusterapi.md CAPI-62: while `IncreaseSize(3)` is in flight, `IncreaseSize(2)` (through
/// another object of the same group, as after a rebuild) and `IncreaseSize(4)` wait and go as one
/// scale PATCH for their sum: the resource's generation moves twice, not three times, replicas
/// end at 1 + 3 + 2 + 4, and every object of the group reports that target. A merged PATCH that
/// is refused (past the max, checked on the sum) fails every increase it carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c62_increases_during_a_size_change_are_merged_into_one_patch() {
    let (_control_plane, client) = start(api_server_only()).await;
    let api = install_cluster_api_crds(&client, CLUSTER_API_GROUP)
        .await
        .expect("install the Cluster API CRDs")
        .preferred();
    let merged = ScalableResource::new(&api, "default", "md-merged")
        .replicas(1)
        .size_limits(1, 12);
    merged
        .create(&client, ClusterApiKind::MachineDeployment)
        .await
        .expect("create a MachineDeployment");
    let provider = provider(&client, &[], &[]).await;
    let md = ClusterApiKind::MachineDeployment;
    let generation = || async {
        read(&client, &api, md, "md-merged")
            .await
            .metadata
            .generation
    };
    let id = "MachineDeployment/default/md-merged";
    let first = group(&provider, id).await;
    let rebuilt = group(&provider, id).await;
    let before = generation().await.expect("a generation");

    // Polled in this order in one task: the first increase's request is out before the others
    // ask, so they wait behind it together.
    let results = futures::join!(
        first.increase_size(3),
        rebuilt.increase_size(2),
        first.increase_size(4)
    );
    assert_eq!(results, (Ok(()), Ok(()), Ok(())));
    assert_eq!(stored_replicas(&client, &api, md, "md-merged").await, 10);
    assert_eq!(generation().await, Some(before + 2), "two scale PATCHes");
    assert_eq!(first.target_size().await, Ok(10));
    assert_eq!(rebuilt.target_size().await, Ok(10));

    let results = futures::join!(
        first.increase_size(1),
        rebuilt.increase_size(1),
        first.increase_size(1)
    );
    assert_eq!(results.0, Ok(()));
    for refused in [results.1, results.2] {
        let error = refused.expect_err("11 + 2 > max 12");
        assert!(
            error.to_string().contains("size increase too large"),
            "{error}"
        );
    }
    assert_eq!(stored_replicas(&client, &api, md, "md-merged").await, 11);
    assert_eq!(generation().await, Some(before + 3));
}
