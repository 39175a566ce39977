//! The capacity APIs end to end (docs/capacity-apis.md): the project's generated CRDs installed
//! on the test control plane, then ProvisioningRequests, a CapacityBuffer and a CapacityQuota
//! created the way a user or a batch system creates them, and Ferroscale (`run
//! --cloud-provider=kwok`, its least-privilege RBAC) judged by what it writes back and by the
//! nodes of the kwok group `general` (4 CPU, 0 to 20 nodes).

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};

use crate::harness::{self, App, Cluster, has_taint, wait_until};
use crate::{QUICK_SCALE_DOWN, TO_BE_DELETED, wait_for_first_status};

const GROUP: &str = "autoscaling.x-k8s.io";

fn resource(kind: &str, version: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: version.to_string(),
        api_version: format!("{GROUP}/{version}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// Installs the CRDs of `deploy/crds`, as an operator does before turning the features on.
async fn install_crds(cluster: &Cluster) {
    ferroscale_testing_control_plane::install_capacity_crds(&cluster.client)
        .await
        .expect("install the project's capacity CRDs");
}

fn provisioning_requests() -> ApiResource {
    resource("ProvisioningRequest", "v1", "provisioningrequests")
}

fn buffers() -> ApiResource {
    resource("CapacityBuffer", "v1beta1", "capacitybuffers")
}

fn quotas() -> ApiResource {
    resource("CapacityQuota", "v1beta1", "capacityquotas")
}

/// Creates an object of a capacity kind from its JSON form.
async fn create(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    value: serde_json::Value,
) {
    let object: DynamicObject = serde_json::from_value(value).expect("object");
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    };
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", resource.kind));
}

/// A PodTemplate in the apps namespace whose pod requests `cpu` and tolerates the kwok taint.
async fn create_pod_template(client: &Client, name: &str, cpu: &str) {
    let template: k8s_openapi::api::core::v1::PodTemplate =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{
                        "name": "main",
                        "image": "registry.example/work:1",
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                    }],
                    "tolerations": [{"key": "kwok-provider", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        }))
        .expect("PodTemplate");
    Api::<k8s_openapi::api::core::v1::PodTemplate>::namespaced(client.clone(), harness::APPS)
        .create(&PostParams::default(), &template)
        .await
        .expect("create the PodTemplate");
}

async fn create_request(
    client: &Client,
    name: &str,
    class: &str,
    template: &str,
    count: i32,
    parameters: serde_json::Value,
) {
    create(
        client,
        &provisioning_requests(),
        Some(harness::APPS),
        serde_json::json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "ProvisioningRequest",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": class,
                "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
                "parameters": parameters,
            },
        }),
    )
    .await;
}

/// `(status, reason)` of condition `type_` of a namespaced object of a capacity kind.
async fn condition(
    client: &Client,
    resource: &ApiResource,
    name: &str,
    type_: &str,
) -> Option<(String, String)> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), harness::APPS, resource);
    let object = api.get_opt(name).await.ok()??;
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

async fn wait_condition(
    client: &Client,
    resource: &ApiResource,
    name: &str,
    type_: &str,
    status: &str,
) -> String {
    let mut reason = String::new();
    wait_until(
        &format!("{} {name} to have {type_}={status}", resource.kind),
        async || match condition(client, resource, name, type_).await {
            Some((s, r)) if s == status => {
                reason = r;
                true
            }
            _ => false,
        },
    )
    .await;
    reason
}

/// Observes for `seconds` that the group keeps `count` nodes.
async fn pool_stays_at(cluster: &Cluster, count: usize, seconds: u64, why: &str) {
    for _ in 0..seconds {
        let nodes = cluster.pool_node_names().await;
        assert_eq!(nodes.len(), count, "{why}: {nodes:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// check-capacity: a request whose pods fit the free room of the existing node is Provisioned
/// (and nothing is added for it); one whose pods need more than the cluster has, with
/// `noRetry`, Fails — and check-capacity never adds a node either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_capacity_requests_are_judged_against_the_cluster_as_it_is() {
    let cluster = Cluster::start().await;
    install_crds(&cluster).await;
    let _autoscaler = cluster.start_autoscaler("main", &["--enable-provisioning-requests=true"]);
    wait_for_first_status(&cluster).await;

    // One node with 3 CPU free.
    cluster.create_app(App::new("base", 1, "1")).await;
    cluster.wait_running("base", 1).await;
    assert_eq!(cluster.pool_node_names().await.len(), 1);

    create_pod_template(&cluster.client, "half", "500m").await;
    create_request(
        &cluster.client,
        "fits",
        "check-capacity.autoscaling.x-k8s.io",
        "half",
        4,
        serde_json::json!({}),
    )
    .await;
    create_request(
        &cluster.client,
        "too-big",
        "check-capacity.autoscaling.x-k8s.io",
        "half",
        40,
        serde_json::json!({"noRetry": "true"}),
    )
    .await;
    let found = wait_condition(
        &cluster.client,
        &provisioning_requests(),
        "fits",
        "Provisioned",
        "True",
    )
    .await;
    assert_eq!(found, "CapacityIsFound");
    let not_found = wait_condition(
        &cluster.client,
        &provisioning_requests(),
        "too-big",
        "Failed",
        "True",
    )
    .await;
    assert_eq!(not_found, "CapacityIsNotFound");
    pool_stays_at(&cluster, 1, 5, "check-capacity adds no node").await;
}

/// best-effort-atomic: a request for three 3-CPU pods grows the group by exactly three nodes and
/// is Provisioned; the pods that then arrive consuming it run on those nodes, and nothing more
/// is added for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_request_grows_the_group_by_its_size_and_its_pods_run_there() {
    let cluster = Cluster::start().await;
    install_crds(&cluster).await;
    let _autoscaler = cluster.start_autoscaler("main", &["--enable-provisioning-requests=true"]);
    wait_for_first_status(&cluster).await;

    create_pod_template(&cluster.client, "big", "3").await;
    create_request(
        &cluster.client,
        "batch",
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "big",
        3,
        serde_json::json!({}),
    )
    .await;
    wait_condition(
        &cluster.client,
        &provisioning_requests(),
        "batch",
        "Provisioned",
        "True",
    )
    .await;
    let nodes = cluster.wait_pool_ready(3).await;
    assert_eq!(nodes.len(), 3, "exactly the request's size: {nodes:?}");

    let consume = [
        ("autoscaling.x-k8s.io/consume-provisioning-request", "batch"),
        (
            "autoscaling.x-k8s.io/provisioning-class-name",
            "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        ),
    ];
    cluster
        .create_app(App {
            annotations: &consume,
            ..App::new("batch", 3, "3")
        })
        .await;
    let running = cluster.wait_running("batch", 3).await;
    let mut hosts: Vec<&String> = running.values().collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "one pod per provisioned node: {running:?}");
    pool_stays_at(&cluster, 3, 5, "the consuming pods add nothing").await;
}

/// A buffer of one 3-CPU chunk adds a spare node before any pod needs it and keeps it past the
/// unneeded time; a quota of two nodes on the group then stops a scale-up at its limit, with the
/// quota named where an operator looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_keeps_a_spare_node_and_a_quota_stops_a_scale_up() {
    let cluster = Cluster::start().await;
    install_crds(&cluster).await;
    let mut flags = QUICK_SCALE_DOWN.to_vec();
    flags.extend([
        "--capacity-buffer-controller-enabled=true",
        "--capacity-buffer-pod-injection-enabled=true",
        "--capacity-quotas-enabled=true",
    ]);
    let _autoscaler = cluster.start_autoscaler("main", &flags);
    wait_for_first_status(&cluster).await;

    create_pod_template(&cluster.client, "spare", "3").await;
    create(
        &cluster.client,
        &buffers(),
        Some(harness::APPS),
        serde_json::json!({
            "apiVersion": format!("{GROUP}/v1beta1"),
            "kind": "CapacityBuffer",
            "metadata": {"name": "headroom"},
            "spec": {"podTemplateRef": {"name": "spare"}, "replicas": 1},
        }),
    )
    .await;
    wait_condition(
        &cluster.client,
        &buffers(),
        "headroom",
        "ReadyForProvisioning",
        "True",
    )
    .await;
    let spare = cluster.wait_pool_ready(1).await;
    // Well past --scale-down-unneeded-time=5s: the buffer's chunk holds the node.
    for _ in 0..20 {
        let nodes = cluster.pool_nodes().await;
        assert_eq!(nodes.len(), 1, "the spare node stays");
        assert!(
            nodes.iter().all(|n| !has_taint(n, TO_BE_DELETED)),
            "the spare node is never marked for deletion"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(cluster.pool_node_names().await, spare);

    create(
        &cluster.client,
        &quotas(),
        None,
        serde_json::json!({
            "apiVersion": format!("{GROUP}/v1beta1"),
            "kind": "CapacityQuota",
            "metadata": {"name": "general-cap"},
            "spec": {
                "selector": {"matchLabels": {"pool": "general"}},
                "limits": {"resources": {"nodes": "2"}},
            },
        }),
    )
    .await;
    // Four more 3-CPU pods would need four more nodes; the quota leaves room for one.
    cluster.create_app(App::new("many", 4, "3")).await;
    cluster.wait_pool_ready(2).await;
    pool_stays_at(&cluster, 2, 10, "the quota caps the group at two nodes").await;
    wait_until(
        "the quota named in the pods' events or the status",
        async || {
            let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
                cluster.client.clone(),
                harness::APPS,
            )
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
            let in_events = events.iter().any(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("general-cap"))
            });
            let in_status = cluster
                .status()
                .await
                .is_some_and(|s| s.contains("general-cap"));
            in_events || in_status
        },
    )
    .await;
}
