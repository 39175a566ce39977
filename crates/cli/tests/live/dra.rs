//! Dynamic Resource Allocation end to end (docs/dra.md DRA-180, DRA-181): two kwok groups, `cpu`
//! with small nodes and `gpu` whose template declares two devices of `gpu.example.com`. The test
//! plays the DRA driver: every node of the `gpu` group gets a node-local ResourceSlice with two
//! devices as soon as it appears. Pods claim GPUs through a ResourceClaimTemplate; the real
//! kube-scheduler (DynamicResources plugin) allocates the claims and binds the pods, and the
//! kube-controller-manager makes and deletes the pods' claims. Ferroscale reads the DRA objects
//! with the least-privilege RBAC of `deploy/manifests/rbac.yaml`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use crate::harness::{self, Cluster, wait_until};
use crate::{QUICK_SCALE_DOWN, wait_for_first_status};

const DRIVER: &str = "gpu.example.com";
const GPU_POOL: &str = "pool=gpu";
const CPU_POOL: &str = "pool=cpu";
/// Devices each node of the `gpu` group publishes.
const GPUS_PER_NODE: usize = 2;

/// `cpu`: 4-CPU nodes, no devices; `gpu`: 16-CPU nodes with two GPUs. With `least-waste` a 1-CPU
/// pod wastes less on a `cpu` node, so a scale-up that ignored claims would pick `cpu`.
fn templates() -> String {
    let slices = format!(
        "[{{\"driver\":\"{DRIVER}\",\"devices\":[{{\"name\":\"gpu-0\",\"attributes\":{{\"model\":{{\"string\":\"a100\"}}}}}},{{\"name\":\"gpu-1\",\"attributes\":{{\"model\":{{\"string\":\"a100\"}}}}}}]}}]"
    );
    let template = |pool: &str, cpu: &str, extra: &str| {
        format!(
            "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {pool}\n    labels: {{pool: {pool}}}\n    annotations:\n      cluster-autoscaler.kwok.nodegroup/min-count: \"0\"\n      cluster-autoscaler.kwok.nodegroup/max-count: \"5\"\n{extra}  status:\n    capacity: {{cpu: \"{cpu}\", memory: 32Gi, pods: \"110\"}}\n    allocatable: {{cpu: \"{cpu}\", memory: 32Gi, pods: \"110\"}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: List\nitems:\n{}{}",
        template("cpu", "4", ""),
        template(
            "gpu",
            "16",
            &format!("      {SLICES_ANNOTATION}: '{slices}'\n")
        )
    )
}

/// The kwok template annotation that declares a group's node-local slices (docs/behaviour.md
/// KWOK-107).
const SLICES_ANNOTATION: &str = "cluster-autoscaler.kwok.nodegroup/resource-slices";

/// The DeviceClass `gpu` (every device of the driver whose model is known) and the claim template
/// `one-gpu` (one such device).
async fn create_class_and_template(client: &Client) {
    let class: DeviceClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression":
            format!("device.driver == '{DRIVER}' && has(device.attributes['{DRIVER}'].model)")}}]},
    }))
    .expect("DeviceClass");
    Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the DeviceClass");
    for (name, count) in [("one-gpu", 1), ("three-gpus", 3)] {
        let template: ResourceClaimTemplate = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count,
            }}]}}},
        }))
        .expect("ResourceClaimTemplate");
        Api::<ResourceClaimTemplate>::namespaced(client.clone(), harness::APPS)
            .create(&PostParams::default(), &template)
            .await
            .expect("create the ResourceClaimTemplate");
    }
}

/// Plays the DRA driver of the `gpu` nodes: each one gets a slice `<node>-gpu` in pool `<node>`
/// with `GPUS_PER_NODE` devices, owned by the Node so that the garbage collector removes it with
/// the node.
async fn publish_slices(client: Client) {
    let nodes = Api::<Node>::all(client.clone());
    let slices = Api::<ResourceSlice>::all(client);
    let mut published = BTreeSet::new();
    loop {
        if let Ok(list) = nodes.list(&ListParams::default().labels(GPU_POOL)).await {
            for node in list.items {
                let (Some(name), Some(uid)) = (node.metadata.name, node.metadata.uid) else {
                    continue;
                };
                if published.contains(&uid) {
                    continue;
                }
                let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
                    "metadata": {
                        "name": format!("{name}-gpu"),
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
                    },
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": name,
                        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                        "devices": (0..GPUS_PER_NODE).map(|i| serde_json::json!({
                            "name": format!("gpu-{i}"),
                            "attributes": {"model": {"string": "a100"}},
                        })).collect::<Vec<_>>(),
                    },
                }))
                .expect("ResourceSlice");
                if slices.create(&PostParams::default(), &slice).await.is_ok() {
                    published.insert(uid);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Deployment of 1-CPU pods, each with its own claim made from `template`.
async fn create_claiming_app(client: &Client, name: &str, replicas: i32, template: &str) {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{
                        "name": "main",
                        "image": "registry.example/train:1",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "256Mi"},
                            "claims": [{"name": "gpu"}],
                        },
                    }],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                    "tolerations": [{"key": "kwok-provider", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }))
    .expect("Deployment");
    Api::<Deployment>::namespaced(client.clone(), harness::APPS)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
}

async fn node_names(cluster: &Cluster, selector: &str) -> Vec<String> {
    cluster
        .nodes()
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// Allocated claims in the apps namespace: claim name → (driver, pool) of each allocated device.
async fn allocations(client: &Client) -> BTreeMap<String, Vec<(String, String)>> {
    Api::<ResourceClaim>::namespaced(client.clone(), harness::APPS)
        .list(&ListParams::default())
        .await
        .expect("list ResourceClaims")
        .items
        .into_iter()
        .filter_map(|claim| {
            let allocation = claim.status?.allocation?;
            let devices = allocation
                .devices?
                .results
                .into_iter()
                .flatten()
                .map(|r| (r.driver, r.pool))
                .collect();
            Some((claim.metadata.name?, devices))
        })
        .collect()
}

/// Stops the slice publisher when the test ends, whatever happens.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Two pods claiming one GPU each: only the `gpu` group grows, by one node (two devices), the
/// scheduler allocates both claims there; a pod claiming three GPUs, more than any node has,
/// stays pending and grows nothing. When the pods go, their claims go, and the GPU node is
/// removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_claiming_gpus_grow_the_gpu_group_and_its_node_goes_with_the_claims() {
    let cluster = Cluster::start().await;
    cluster.use_templates(templates()).await;
    create_class_and_template(&cluster.client).await;
    let _publisher = AbortOnDrop(tokio::spawn(publish_slices(cluster.client.clone())));
    let mut flags = QUICK_SCALE_DOWN.to_vec();
    flags.push("--expander=least-waste");
    let _autoscaler = cluster.start_autoscaler("main", &flags);
    wait_for_first_status(&cluster).await;

    create_claiming_app(&cluster.client, "train", 2, "one-gpu").await;
    create_claiming_app(&cluster.client, "huge", 1, "three-gpus").await;
    let running = cluster.wait_running("train", 2).await;
    let gpu_nodes = node_names(&cluster, GPU_POOL).await;
    assert_eq!(
        gpu_nodes.len(),
        1,
        "one GPU node holds both pods: {gpu_nodes:?}"
    );
    assert!(
        running.values().all(|node| node == &gpu_nodes[0]),
        "both pods run on the GPU node: {running:?}"
    );
    let allocated = allocations(&cluster.client).await;
    let on_gpu_node: Vec<_> = allocated
        .values()
        .filter(|devices| devices == &&vec![(DRIVER.to_string(), gpu_nodes[0].clone())])
        .collect();
    assert_eq!(
        on_gpu_node.len(),
        2,
        "each pod's claim holds one device of the GPU node: {allocated:?}"
    );

    // The three-GPU pod fits no template: it stays pending, and nothing grows for it.
    for _ in 0..10 {
        assert!(
            node_names(&cluster, CPU_POOL).await.is_empty(),
            "cpu never grows"
        );
        assert_eq!(
            node_names(&cluster, GPU_POOL).await.len(),
            1,
            "gpu keeps one node"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let huge: Vec<Pod> = cluster
        .pods()
        .list(&ListParams::default().labels("app=huge"))
        .await
        .expect("list pods")
        .items;
    assert!(
        huge.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()),
        "the three-GPU pod stays pending"
    );
    assert!(
        cluster
            .event_reasons(harness::APPS, "Pod")
            .await
            .contains(&"NotTriggerScaleUp".to_string()),
        "the three-GPU pod is told why nothing grows"
    );

    // The pods go, their generated claims with them, and the idle GPU node is removed.
    cluster.delete_app("huge").await;
    cluster.delete_app("train").await;
    wait_until("the claims of the deleted pods to go", async || {
        allocations(&cluster.client).await.is_empty()
    })
    .await;
    wait_until("the idle GPU node to be removed", async || {
        node_names(&cluster, GPU_POOL).await.is_empty()
    })
    .await;
}
