//! `KubeCluster` against a real control plane (etcd, kube-apiserver, kube-controller-manager and
//! kwok), one per test binary with sequential steps: the caches see objects come, change and go,
//! converted (storage and DRA objects included); an object the model rejects does not stop the others;
//! taints and cordoning round-trip; a PDB refuses an eviction that otherwise succeeds; events and
//! the status ConfigMap land; the caches recover after the API server restarts.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use ferroscale_core::events::{Event, EventObject};
use ferroscale_core::kubernetes::{
    ClusterApi, ClusterObjects, EvictionError, STATUS_LAST_UPDATED_ANNOTATION, StatusConfigMap,
};
use ferroscale_kube::{CacheConfig, ClusterCaches, KubeCluster, KubeClusterConfig};
use ferroscale_model::{
    AccessMode, AllocationMode, DeviceAttribute, DeviceRequestKind, Taint, TaintEffect, Timestamp,
    VolumeBindingMode,
};
use ferroscale_testing_control_plane::{
    ControlPlane, FAKE_NODE_ANNOTATION_KEY, FAKE_NODE_ANNOTATION_VALUE, Options,
};
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, Node, NodeStatus, PersistentVolume, PersistentVolumeClaim,
    Pod, PodSpec, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Generous for a loaded 2-core machine; each step normally takes a second or two.
const WAIT_LIMIT: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "apps";
const AUTOSCALER_NAMESPACE: &str = "kube-system";

async fn config_for(control_plane: &ControlPlane) -> Config {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration")
}

/// Polls `check` until it returns `Some`, failing with `what` after [`WAIT_LIMIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(WAIT_LIMIT, async {
        loop {
            if let Some(value) = check().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn fake_node(name: &str, capacity: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(BTreeMap::from([(
                FAKE_NODE_ANNOTATION_KEY.to_string(),
                FAKE_NODE_ANNOTATION_VALUE.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            capacity: Some(quantities(capacity)),
            allocatable: Some(quantities(capacity)),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

fn pod_spec(node: Option<&str>, priority_class: Option<&str>) -> PodSpec {
    PodSpec {
        node_name: node.map(str::to_string),
        priority_class_name: priority_class.map(str::to_string),
        containers: vec![Container {
            name: "app".to_string(),
            image: Some("registry.invalid/app:1".to_string()),
            resources: Some(ResourceRequirements {
                requests: Some(quantities(&[("cpu", "250m"), ("memory", "64Mi")])),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }],
        ..PodSpec::default()
    }
}

fn pod(name: &str, app: &str, node: Option<&str>, priority_class: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec(node, priority_class)),
        ..Pod::default()
    }
}

fn has_pod(objects: &ClusterObjects, name: &str) -> bool {
    objects
        .pods
        .iter()
        .any(|p| p.namespace == NAMESPACE && p.name == name)
}

struct Fixture {
    control_plane: ControlPlane,
    client: Client,
    cluster: KubeCluster,
}

impl Fixture {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    async fn gathered(&self) -> ClusterObjects {
        self.cluster.gather().await.expect("gather")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_cluster_caches_and_actuation() {
    // The scheduler is not needed (pods are bound by spec.nodeName); the controller manager is,
    // for PodDisruptionBudget status; kwok runs the pods on the fake nodes.
    let options = Options {
        scheduler: false,
        ..Options::default()
    };
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("start-up task")
        .expect("control plane");
    eprintln!("control plane started");
    let kube_config = config_for(&control_plane).await;
    // Unlimited, so that the test's steps never wait for a token.
    let server = ferroscale_kube::ApiAccess {
        qps: -1.0,
        ..ferroscale_kube::ApiAccess::default()
    }
    .server(kube_config)
    .expect("API server");
    let client = server.client().expect("client");
    let caches = ClusterCaches::start(client.clone(), &CacheConfig::new(AUTOSCALER_NAMESPACE));
    caches
        .wait_until_ready(WAIT_LIMIT)
        .await
        .expect("caches sync");
    let cluster = KubeCluster::new(
        &server,
        caches,
        KubeClusterConfig::new(AUTOSCALER_NAMESPACE),
    )
    .expect("cluster client");
    let fixture = Fixture {
        control_plane,
        client,
        cluster,
    };

    // Progress on stderr, so a slow or stuck step can be told from the others.
    let started = std::time::Instant::now();
    let step = |name: &str| eprintln!("[{:>6.1?}] {name}", started.elapsed());
    step("caches follow the cluster");
    caches_follow_the_cluster(&fixture).await;
    step("storage objects");
    caches_hold_storage_objects(&fixture).await;
    step("DRA objects");
    caches_hold_dra_objects(&fixture).await;
    step("taint and cordon");
    taint_and_cordon_round_trip(&fixture).await;
    step("evictions");
    evictions_respect_disruption_budgets(&fixture).await;
    step("events and status");
    events_and_status_configmap(&fixture).await;
    step("API server restart");
    caches_recover_after_apiserver_restart(&fixture).await;
    step("done");
}

/// Claims, volumes, classes and CSINodes are watched and converted for the volume filters, and a
/// deleted claim leaves the model.
async fn caches_hold_storage_objects(fixture: &Fixture) {
    let client = &fixture.client;
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}
        ]}],
    }))
    .expect("StorageClass");
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the StorageClass");
    let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-b", "labels": {"topology.kubernetes.io/zone": "zone-b"}},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOncePod"],
            "storageClassName": "zonal",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-b"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
            ]}]}},
        },
    }))
    .expect("PersistentVolume");
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .expect("create the PersistentVolume");
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data-db-0"},
        "spec": {
            "accessModes": ["ReadWriteOncePod"],
            "storageClassName": "zonal",
            "resources": {"requests": {"storage": "5Gi"}},
        },
    }))
    .expect("PersistentVolumeClaim");
    let claims: Api<PersistentVolumeClaim> = fixture.api();
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
    let csi_node: CSINode = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}}]},
    }))
    .expect("CSINode");
    Api::<CSINode>::all(client.clone())
        .create(&PostParams::default(), &csi_node)
        .await
        .expect("create the CSINode");

    let volumes = eventually("the caches show the storage objects", || async {
        let volumes = fixture.gathered().await.volumes;
        let complete = volumes.claims.iter().any(|c| c.name == "data-db-0")
            && volumes.volumes.iter().any(|v| v.name == "pv-b")
            && volumes.storage_classes.iter().any(|c| c.name == "zonal")
            && volumes.csi_nodes.iter().any(|c| c.node_name == "n1");
        complete.then_some(volumes)
    })
    .await;
    let claim = volumes
        .claims
        .iter()
        .find(|c| c.name == "data-db-0")
        .expect("claim");
    assert_eq!(claim.namespace, NAMESPACE);
    assert_eq!(claim.access_modes, vec![AccessMode::ReadWriteOncePod]);
    assert_eq!(claim.requested_storage, 5 << 30);
    let volume = volumes
        .volumes
        .iter()
        .find(|v| v.name == "pv-b")
        .expect("volume");
    assert_eq!(volume.csi_driver.as_deref(), Some("ebs.csi.aws.com"));
    assert!(volume.node_affinity.is_some());
    let class = volumes
        .storage_classes
        .iter()
        .find(|c| c.name == "zonal")
        .expect("class");
    assert_eq!(class.binding_mode, VolumeBindingMode::WaitForFirstConsumer);
    assert_eq!(class.allowed_topologies.len(), 1);
    let csi = volumes
        .csi_nodes
        .iter()
        .find(|c| c.node_name == "n1")
        .expect("CSINode");
    assert_eq!(
        csi.driver("ebs.csi.aws.com")
            .and_then(|d| d.allocatable_count),
        Some(25)
    );

    claims
        .delete("data-db-0", &DeleteParams::default())
        .await
        .expect("delete the claim");
    eventually("the deleted claim to leave the caches", || async {
        let volumes = fixture.gathered().await.volumes;
        (!volumes.claims.iter().any(|c| c.name == "data-db-0")).then_some(())
    })
    .await;
}

/// ResourceSlices, DeviceClasses, ResourceClaims and their templates (`resource.k8s.io/v1`) are
/// watched and converted for the DynamicResources filter (docs/dra.md DRA-146), and a deleted
/// claim leaves the model.
async fn caches_hold_dra_objects(fixture: &Fixture) {
    let client = &fixture.client;
    let class: DeviceClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
    }))
    .expect("DeviceClass");
    Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the DeviceClass");
    let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "gpu-0",
                "attributes": {"model": {"string": "A100"}},
                "capacity": {"memory": {"value": "80Gi"}},
            }],
        },
    }))
    .expect("ResourceSlice");
    Api::<ResourceSlice>::all(client.clone())
        .create(&PostParams::default(), &slice)
        .await
        .expect("create the ResourceSlice");
    let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu-claim"},
        "spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}},
        ]}},
    }))
    .expect("ResourceClaim");
    let claims: Api<ResourceClaim> = fixture.api();
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
    let template: ResourceClaimTemplate = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All"}},
        ]}}},
    }))
    .expect("ResourceClaimTemplate");
    let templates: Api<ResourceClaimTemplate> = fixture.api();
    templates
        .create(&PostParams::default(), &template)
        .await
        .expect("create the claim template");

    let dra = eventually("the caches show the DRA objects", || async {
        let dra = fixture.gathered().await.dra;
        let complete = dra.classes.iter().any(|c| c.name == "gpu.example.com")
            && dra.slices.iter().any(|s| s.name == "n1-gpu")
            && dra.claims.iter().any(|c| c.name == "gpu-claim")
            && dra.templates.iter().any(|t| t.name == "one-gpu");
        complete.then_some(dra)
    })
    .await;
    let slice = dra
        .slices
        .iter()
        .find(|s| s.name == "n1-gpu")
        .expect("slice");
    assert_eq!(slice.node_name(), Some("n1"));
    assert_eq!(
        slice.devices[0].attributes.get("gpu.example.com/model"),
        Some(&DeviceAttribute::String("A100".into()))
    );
    assert!(
        slice.devices[0]
            .capacity
            .contains_key("gpu.example.com/memory")
    );
    let class = dra
        .classes
        .iter()
        .find(|c| c.name == "gpu.example.com")
        .expect("class");
    assert_eq!(class.selectors.len(), 1);
    let claim = dra
        .claims
        .iter()
        .find(|c| c.name == "gpu-claim")
        .expect("claim");
    assert_eq!(claim.namespace, NAMESPACE);
    assert!(!claim.is_allocated());
    let DeviceRequestKind::Exactly(request) = &claim.spec.requests[0].kind else {
        panic!("an exact request: {:?}", claim.spec)
    };
    assert_eq!(request.allocation_mode, AllocationMode::ExactCount(2));
    let template = dra
        .templates
        .iter()
        .find(|t| t.name == "one-gpu")
        .expect("template");
    assert_eq!(template.namespace, NAMESPACE);

    claims
        .delete("gpu-claim", &DeleteParams::default())
        .await
        .expect("delete the claim");
    eventually("the deleted claim to leave the caches", || async {
        let dra = fixture.gathered().await.dra;
        (!dra.claims.iter().any(|c| c.name == "gpu-claim")).then_some(())
    })
    .await;
}

async fn caches_follow_the_cluster(fixture: &Fixture) {
    let client = &fixture.client;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NAMESPACE.to_string()),
                    labels: Some(BTreeMap::from([("team".to_string(), "web".to_string())])),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .expect("namespace");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &fake_node("n1", &[("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]),
        )
        .await
        .expect("node n1");
    // The API server accepts any non-negative quantity; the model holds at most i64::MAX units,
    // so this node cannot be converted. It must be left out without disturbing anything else.
    nodes
        .create(
            &PostParams::default(),
            &fake_node(
                "huge",
                &[
                    ("cpu", "4"),
                    ("memory", "16Gi"),
                    ("example.com/widgets", "100E"),
                ],
            ),
        )
        .await
        .expect("node huge (accepted by the API server)");
    Api::<PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &PriorityClass {
                metadata: ObjectMeta {
                    name: Some("important".to_string()),
                    ..ObjectMeta::default()
                },
                value: Some(1000),
                ..PriorityClass::default()
            },
        )
        .await
        .expect("priority class");
    let pods: Api<Pod> = fixture.api();
    pods.create(
        &PostParams::default(),
        &pod("web-0", "web", Some("n1"), Some("important")),
    )
    .await
    .expect("pod web-0");
    let replica_sets: Api<ReplicaSet> = fixture.api();
    replica_sets
        .create(
            &PostParams::default(),
            &ReplicaSet {
                metadata: ObjectMeta {
                    name: Some("web-rs".to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(ReplicaSetSpec {
                    replicas: Some(0),
                    selector: LabelSelector {
                        match_labels: Some(BTreeMap::from([("app".to_string(), "rs".to_string())])),
                        ..LabelSelector::default()
                    },
                    template: Some(PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(BTreeMap::from([("app".to_string(), "rs".to_string())])),
                            ..ObjectMeta::default()
                        }),
                        spec: Some(pod_spec(None, None)),
                    }),
                    ..ReplicaSetSpec::default()
                }),
                ..ReplicaSet::default()
            },
        )
        .await
        .expect("replica set");
    Api::<ConfigMap>::namespaced(client.clone(), AUTOSCALER_NAMESPACE)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("cluster-autoscaler-priority-expander".to_string()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    "priorities".to_string(),
                    "10:\n  - .*\n".to_string(),
                )])),
                ..ConfigMap::default()
            },
        )
        .await
        .expect("priority expander configmap");

    let objects = eventually("the caches show the new objects", || async {
        let objects = fixture.gathered().await;
        let complete = objects.nodes.iter().any(|n| n.name == "n1")
            && has_pod(&objects, "web-0")
            && objects.controllers.iter().any(|c| c.name == "web-rs")
            && objects.namespaces.iter().any(|n| n.name == NAMESPACE)
            && objects.priority_expander_config.is_some();
        complete.then_some(objects)
    })
    .await;
    let node = objects
        .nodes
        .iter()
        .find(|n| n.name == "n1")
        .expect("node n1");
    assert_eq!(
        (node.allocatable.get("cpu"), node.allocatable.get("memory")),
        (4000, 16 << 30),
        "allocatable converted (millicores, bytes)"
    );
    let web = objects
        .pods
        .iter()
        .find(|p| p.name == "web-0")
        .expect("pod web-0");
    assert_eq!(web.priority, Some(1000), "the PriorityClass value applies");
    assert_eq!(web.node_name.as_deref(), Some("n1"));
    let rs = objects
        .controllers
        .iter()
        .find(|c| c.name == "web-rs")
        .expect("replica set");
    assert_eq!((rs.kind.as_str(), rs.replicas), ("ReplicaSet", Some(0)));
    assert_eq!(
        objects
            .priority_expander_config
            .as_deref()
            .map(|c| c.text()),
        Some("10:\n  - .*\n")
    );
    let namespace = objects
        .namespaces
        .iter()
        .find(|n| n.name == NAMESPACE)
        .expect("namespace");
    assert_eq!(
        namespace.labels.get("team").map(String::as_str),
        Some("web")
    );

    // The node the model rejects is left out and counted; everything else flows.
    assert!(!objects.nodes.iter().any(|n| n.name == "huge"));
    assert!(fixture.cluster.caches().conversion_failures() >= 1);

    // Updates and deletions arrive too.
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"pool": "blue"}}})),
        )
        .await
        .expect("label n1");
    pods.delete("web-0", &DeleteParams::default())
        .await
        .expect("delete web-0");
    eventually("the label and the deletion reach the caches", || async {
        let objects = fixture.gathered().await;
        let labelled = objects
            .nodes
            .iter()
            .any(|n| n.name == "n1" && n.labels.get("pool").map(String::as_str) == Some("blue"));
        (labelled && !has_pod(&objects, "web-0")).then_some(())
    })
    .await;

    // Once fixed, the rejected node enters the model (and is no longer counted as a failure).
    nodes
        .delete("huge", &DeleteParams::default())
        .await
        .expect("delete huge");
    eventually(
        "the rejected node's deletion clears its failure",
        || async { (fixture.cluster.caches().conversion_failures() == 0).then_some(()) },
    )
    .await;
}

async fn taint_and_cordon_round_trip(fixture: &Fixture) {
    let cluster = &fixture.cluster;
    let nodes: Api<Node> = Api::all(fixture.client.clone());
    let taint = Taint::new(
        "ToBeDeletedByClusterAutoscaler",
        "1700000000",
        TaintEffect::NoSchedule,
    );
    cluster
        .taint_node("n1", taint.clone(), true)
        .await
        .expect("taint n1");
    let live = nodes.get("n1").await.expect("n1");
    let spec = live.spec.expect("node spec");
    assert_eq!(spec.unschedulable, Some(true), "cordoned");
    let taints = spec.taints.unwrap_or_default();
    assert_eq!(
        taints
            .iter()
            .filter(|t| t.key == "ToBeDeletedByClusterAutoscaler")
            .map(|t| (t.value.as_deref(), t.effect.as_str()))
            .collect::<Vec<_>>(),
        vec![(Some("1700000000"), "NoSchedule")]
    );
    // The label set in the previous step survived the read-modify-replace.
    assert_eq!(
        live.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pool"))
            .map(String::as_str),
        Some("blue")
    );
    let model = cluster.node("n1").await.expect("node").expect("n1 exists");
    assert!(model.unschedulable);
    assert!(model.taints.iter().any(|t| t.key == taint.key));

    // Tainting again with a new value replaces the taint rather than adding a second one.
    cluster
        .taint_node(
            "n1",
            Taint::new(&taint.key, "1700000099", TaintEffect::NoSchedule),
            true,
        )
        .await
        .expect("re-taint n1");
    let again = nodes.get("n1").await.expect("n1");
    let values: Vec<_> = again
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key == taint.key)
        .map(|t| t.value)
        .collect();
    assert_eq!(values, vec![Some("1700000099".to_string())]);

    cluster
        .untaint_node("n1", &taint.key, true)
        .await
        .expect("untaint n1");
    let spec = nodes.get("n1").await.expect("n1").spec.unwrap_or_default();
    assert_ne!(spec.unschedulable, Some(true), "uncordoned");
    assert!(
        !spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == taint.key)
    );

    assert!(cluster.node("absent").await.expect("lookup").is_none());
    assert!(
        cluster
            .taint_node("absent", taint, true)
            .await
            .is_err_and(|e| matches!(
                e,
                ferroscale_core::kubernetes::ClusterError::NotFound { .. }
            ))
    );
}

async fn evictions_respect_disruption_budgets(fixture: &Fixture) {
    let cluster = &fixture.cluster;
    let pods: Api<Pod> = fixture.api();
    pods.create(
        &PostParams::default(),
        &pod("guarded", "guarded", Some("n1"), None),
    )
    .await
    .expect("pod guarded");
    pods.create(
        &PostParams::default(),
        &pod("free", "free", Some("n1"), None),
    )
    .await
    .expect("pod free");
    let pdbs: Api<PodDisruptionBudget> = fixture.api();
    pdbs.create(
        &PostParams::default(),
        &PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("guarded".to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(1)),
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        "app".to_string(),
                        "guarded".to_string(),
                    )])),
                    ..LabelSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            ..PodDisruptionBudget::default()
        },
    )
    .await
    .expect("pdb");

    // Wait until kwok runs both pods and the disruption controller has counted the guarded one.
    eventually(
        "both pods run and the PDB allows 0 disruptions with 1 healthy pod",
        || async {
            let objects = fixture.gathered().await;
            let running = |name: &str| {
                objects
                    .pods
                    .iter()
                    .any(|p| p.name == name && p.phase == ferroscale_model::PodPhase::Running)
            };
            let pdb_counted = pdbs
                .get_status("guarded")
                .await
                .ok()
                .and_then(|p| p.status)
                .is_some_and(|s| s.current_healthy == Some(1) && s.disruptions_allowed == Some(0));
            let pdb_cached = objects
                .pdbs
                .iter()
                .any(|p| p.name == "guarded" && p.disruptions_allowed == Some(0));
            (running("guarded") && running("free") && pdb_counted && pdb_cached).then_some(())
        },
    )
    .await;

    // The refusal comes back as an answer, not after minutes of client-side 429 retries (the
    // bound is a hang detector, far above a normal call).
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        cluster.evict_pod(NAMESPACE, "guarded", 30),
    )
    .await
    .expect("a refused eviction returns instead of being retried by the client");
    assert!(
        matches!(refused, Err(EvictionError::DisruptionBudget { ref pod, .. }) if pod == "apps/guarded"),
        "expected a PDB refusal, got {refused:?}"
    );
    assert!(
        cluster
            .pod_status(NAMESPACE, "guarded")
            .await
            .expect("pod status")
            .is_some(),
        "a refused eviction leaves the pod"
    );

    cluster
        .evict_pod(NAMESPACE, "free", 0)
        .await
        .expect("evict the unprotected pod");
    eventually("the evicted pod is gone", || async {
        cluster
            .pod_status(NAMESPACE, "free")
            .await
            .expect("pod status")
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        cluster.evict_pod(NAMESPACE, "free", 0).await,
        Err(EvictionError::NotFound {
            pod: "apps/free".to_string()
        })
    );

    // Once the budget allows a disruption, the same eviction goes through.
    pdbs.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .expect("relax pdb");
    eventually("the relaxed PDB lets the eviction through", || async {
        cluster.evict_pod(NAMESPACE, "guarded", 0).await.ok()
    })
    .await;
    // Pods on n1 from the cache: neither evicted pod stays.
    eventually("the cache drops the evicted pods", || async {
        let on_n1 = cluster.pods_on_node("n1").await.expect("pods on n1");
        on_n1.is_empty().then_some(())
    })
    .await;
}

async fn events_and_status_configmap(fixture: &Fixture) {
    let cluster = &fixture.cluster;
    let pods: Api<Pod> = fixture.api();
    pods.create(&PostParams::default(), &pod("pending", "p", None, None))
        .await
        .expect("pending pod");
    eventually("the pending pod is cached", || async {
        has_pod(&fixture.gathered().await, "pending").then_some(())
    })
    .await;
    let status = StatusConfigMap {
        namespace: AUTOSCALER_NAMESPACE.to_string(),
        name: "cluster-autoscaler-status".to_string(),
        last_updated: "2026-01-02 03:04:05.000000006 +0000 UTC".to_string(),
        status_yaml: "autoscalerStatus: Running\n".to_string(),
        written_at: Timestamp(0),
    };
    cluster.write_status(&status).await.expect("create status");
    // Written twice: the second write updates the existing ConfigMap.
    let second = StatusConfigMap {
        last_updated: "2026-01-02 03:04:15.000000006 +0000 UTC".to_string(),
        ..status.clone()
    };
    cluster.write_status(&second).await.expect("update status");
    let configmaps: Api<ConfigMap> = Api::namespaced(fixture.client.clone(), AUTOSCALER_NAMESPACE);
    let written = configmaps
        .get("cluster-autoscaler-status")
        .await
        .expect("status configmap");
    assert_eq!(
        written
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATUS_LAST_UPDATED_ANNOTATION))
            .map(String::as_str),
        Some("2026-01-02 03:04:15.000000006 +0000 UTC")
    );
    assert_eq!(
        written
            .data
            .as_ref()
            .and_then(|d| d.get("status"))
            .map(String::as_str),
        Some("autoscalerStatus: Running\n")
    );

    cluster
        .publish_events(&[
            Event::normal(
                EventObject::Pod(format!("{NAMESPACE}/pending")),
                "NotTriggerScaleUp",
                "pod didn't trigger scale-up",
            ),
            Event::normal(
                EventObject::Node("n1".to_string()),
                "ScaleDown",
                "marked the node as toBeDeleted/unschedulable",
            ),
            Event::warning(
                EventObject::StatusConfigMap,
                "ScaleUpTimedOut",
                "nodes added to group g1 failed to register",
            ),
        ])
        .await;
    let pod_uid = pods.get("pending").await.expect("pending pod").metadata.uid;
    let event_list = |namespace: &str| {
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(fixture.client.clone(), namespace);
        async move {
            events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
        }
    };
    let ours = |events: Vec<k8s_openapi::api::core::v1::Event>, reason: &str| {
        events.into_iter().find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("cluster-autoscaler")
        })
    };
    let on_pod = ours(event_list(NAMESPACE).await, "NotTriggerScaleUp").expect("pod event");
    assert_eq!(on_pod.involved_object.kind.as_deref(), Some("Pod"));
    assert_eq!(on_pod.involved_object.name.as_deref(), Some("pending"));
    assert_eq!(
        on_pod.involved_object.uid, pod_uid,
        "kubectl describe finds it by uid"
    );
    assert_eq!(on_pod.type_.as_deref(), Some("Normal"));
    let on_node = ours(event_list("default").await, "ScaleDown").expect("node event");
    assert_eq!(on_node.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(on_node.involved_object.name.as_deref(), Some("n1"));
    let on_status =
        ours(event_list(AUTOSCALER_NAMESPACE).await, "ScaleUpTimedOut").expect("status event");
    assert_eq!(on_status.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(
        on_status.involved_object.name.as_deref(),
        Some("cluster-autoscaler-status")
    );
    assert_eq!(on_status.type_.as_deref(), Some("Warning"));

    cluster
        .delete_status(AUTOSCALER_NAMESPACE, "cluster-autoscaler-status")
        .await
        .expect("delete status");
    assert!(
        configmaps
            .get_opt("cluster-autoscaler-status")
            .await
            .expect("get")
            .is_none()
    );
    // Deleting it again (a second shutdown) is not an error.
    cluster
        .delete_status(AUTOSCALER_NAMESPACE, "cluster-autoscaler-status")
        .await
        .expect("delete missing status");
}

async fn caches_recover_after_apiserver_restart(fixture: &Fixture) {
    let control_plane = &fixture.control_plane;
    // Keep the restart (which blocks) off the runtime threads the watchers run on.
    tokio::task::block_in_place(|| control_plane.restart_apiserver()).expect("restart");
    let nodes: Api<Node> = Api::all(fixture.client.clone());
    eventually("the API server accepts writes again", || async {
        nodes
            .create(
                &PostParams::default(),
                &fake_node("after-restart", &[("cpu", "2"), ("memory", "8Gi")]),
            )
            .await
            .ok()
    })
    .await;
    let pods: Api<Pod> = fixture.api();
    pods.delete("pending", &DeleteParams::default())
        .await
        .expect("delete pending");
    eventually("the caches see changes made after the restart", || async {
        let objects = fixture.gathered().await;
        (objects.nodes.iter().any(|n| n.name == "after-restart") && !has_pod(&objects, "pending"))
            .then_some(())
    })
    .await;
    assert!(fixture.cluster.caches().synced());
}
