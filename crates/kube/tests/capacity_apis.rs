//! The capacity APIs against a real control plane, with the CRDs installed from the project's
//! generated manifests (`deploy/crds/`): before the CRDs exist the watched kinds are empty, synced
//! caches; afterwards Gather reads every kind (older served versions included), resolves a
//! buffer's Deployment into its pod shape through a dry-run pod, and the engine's three writes
//! (two status subresources and a buffer's PodTemplate) land and are read back.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use ferroscale_core::kubernetes::ClusterApi;
use ferroscale_kube::{
    CacheConfig, CapacityWatches, ClusterCaches, KubeCluster, KubeClusterConfig,
};
use ferroscale_model::capacity::{
    ApiCondition, CapacityBufferStatus, ProvisioningRequestStatus, ScalableRef,
};
use ferroscale_model::{ConditionStatus, Timestamp};
use ferroscale_objects::ferroscale_capacity_apis::{
    capacity_buffer, capacity_quota, provisioning_request,
};
use ferroscale_testing_control_plane::{ControlPlane, Options, install_capacity_crds};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, PodSpec, PodTemplate, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

const WAIT_LIMIT: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "batch";
const AUTOSCALER_NAMESPACE: &str = "kube-system";
const ALL: CapacityWatches = CapacityWatches {
    provisioning_requests: true,
    buffers: true,
    quotas: true,
};

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

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

fn template_spec(app: &str, cpu: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".to_string(),
                image: Some("registry.invalid/app:1".to_string()),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_string(), Quantity(cpu.to_string())),
                        ("memory".to_string(), Quantity("128Mi".to_string())),
                    ])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_yaml_ng::from_str(text).expect("test object YAML")
}

async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("creating {object:?}: {e}"));
}

async fn start_cluster(server: &ferroscale_kube::ApiServer, client: &Client) -> KubeCluster {
    let caches = ClusterCaches::start(
        client.clone(),
        &CacheConfig::new(AUTOSCALER_NAMESPACE).with_capacity(ALL),
    );
    caches
        .wait_until_ready(WAIT_LIMIT)
        .await
        .expect("caches sync");
    let mut config = KubeClusterConfig::new(AUTOSCALER_NAMESPACE);
    config.buffer_pod_dry_run = true;
    KubeCluster::new(server, caches, config).expect("cluster client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_apis_are_read_and_written_on_a_real_api_server() {
    let options = Options {
        scheduler: false,
        ..Options::default()
    };
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("start-up task")
        .expect("control plane");
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let kube_config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    let server = ferroscale_kube::ApiAccess {
        qps: -1.0,
        ..ferroscale_kube::ApiAccess::default()
    }
    .server(kube_config)
    .expect("API server");
    let client = server.client().expect("client");

    // Without the CRDs: every capacity cache is synced and empty, and Gather works.
    let before = start_cluster(&server, &client).await;
    let objects = before.gather().await.expect("gather without the CRDs");
    assert!(objects.capacity.provisioning_requests.is_empty());
    assert!(objects.capacity.buffers.is_empty());
    assert!(objects.capacity.quotas.is_empty());
    drop(before);

    let names = install_capacity_crds(&client)
        .await
        .expect("install the CRDs");
    assert_eq!(names.len(), 3, "{names:?}");

    create(
        &Api::<Namespace>::all(client.clone()),
        &Namespace {
            metadata: meta(NAMESPACE, None),
            ..Namespace::default()
        },
    )
    .await;
    create(
        &Api::<PodTemplate>::namespaced(client.clone(), NAMESPACE),
        &PodTemplate {
            metadata: meta("worker", Some(NAMESPACE)),
            template: Some(template_spec("worker", "2")),
        },
    )
    .await;
    create(
        &Api::<Deployment>::namespaced(client.clone(), NAMESPACE),
        &Deployment {
            metadata: meta("web", Some(NAMESPACE)),
            spec: Some(DeploymentSpec {
                replicas: Some(3),
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                    ..LabelSelector::default()
                },
                template: template_spec("web", "500m"),
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        },
    )
    .await;
    create(
        &Api::<provisioning_request::v1::ProvisioningRequest>::namespaced(client.clone(), NAMESPACE),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1\nkind: ProvisioningRequest\nmetadata: {name: check, namespace: batch}\nspec:\n  provisioningClassName: check-capacity.autoscaling.x-k8s.io\n  podSets: [{podTemplateRef: {name: worker}, count: 4}]\n",
        ),
    )
    .await;
    create(
        &Api::<provisioning_request::v1beta1::ProvisioningRequest>::namespaced(
            client.clone(),
            NAMESPACE,
        ),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: ProvisioningRequest\nmetadata: {name: atomic, namespace: batch}\nspec:\n  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io\n  podSets: [{podTemplateRef: {name: worker}, count: 2}]\n",
        ),
    )
    .await;
    create(
        &Api::<capacity_buffer::v1alpha1::CapacityBuffer>::namespaced(client.clone(), NAMESPACE),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1alpha1\nkind: CapacityBuffer\nmetadata: {name: warm, namespace: batch}\nspec:\n  scalableRef: {apiGroup: apps, kind: Deployment, name: web}\n  percentage: 50\n",
        ),
    )
    .await;
    create(
        &Api::<capacity_quota::v1beta1::CapacityQuota>::all(client.clone()),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {name: team-a}\nspec:\n  selector: {matchLabels: {team: a}}\n  limits: {resources: {cpu: \"64\", nodes: 10}}\n",
        ),
    )
    .await;
    create(
        &Api::<capacity_quota::v1alpha1::CapacityQuota>::all(client.clone()),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1alpha1\nkind: CapacityQuota\nmetadata: {name: everything}\nspec:\n  limits: {resources: {nodes: 100}}\n",
        ),
    )
    .await;
    // The CRDs' own validation refuses what upstream's refuses: both references on one buffer.
    let refused = Api::<capacity_buffer::v1beta1::CapacityBuffer>::namespaced(
        client.clone(),
        NAMESPACE,
    )
    .create(
        &PostParams::default(),
        &yaml(
            "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: both, namespace: batch}\nspec:\n  podTemplateRef: {name: worker}\n  scalableRef: {apiGroup: apps, kind: Deployment, name: web}\n  replicas: 1\n",
        ),
    )
    .await;
    assert!(
        refused.is_err(),
        "a buffer with both references was accepted"
    );

    let cluster = start_cluster(&server, &client).await;
    let objects = eventually("Gather reads every capacity kind", || async {
        let objects = cluster.gather().await.ok()?;
        let capacity = &objects.capacity;
        (capacity.provisioning_requests.len() == 2
            && capacity.buffers.len() == 1
            && capacity.quotas.len() == 2
            && capacity.pod_template(NAMESPACE, "worker").is_some())
        .then_some(objects)
    })
    .await;
    let capacity = &objects.capacity;
    let mut classes: Vec<_> = capacity
        .provisioning_requests
        .iter()
        .map(|r| (r.name.as_str(), r.class.as_str(), r.pod_sets[0].count))
        .collect();
    classes.sort();
    assert_eq!(
        classes,
        [
            (
                "atomic",
                "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                2
            ),
            ("check", "check-capacity.autoscaling.x-k8s.io", 4)
        ]
    );
    let worker = capacity.pod_template(NAMESPACE, "worker").unwrap();
    assert_eq!(worker.pod.requests.get("cpu"), 2000);
    let buffer = capacity.buffers[0].clone();
    assert_eq!(buffer.spec.percentage, Some(50));
    let reference = ScalableRef {
        api_group: "apps".to_string(),
        kind: "Deployment".to_string(),
        name: "web".to_string(),
    };
    let scalable = capacity
        .scalable(NAMESPACE, &reference)
        .expect("the buffer's Deployment is resolved")
        .clone();
    assert_eq!(scalable.error, None);
    assert_eq!(scalable.replicas, 3);
    let shape = scalable.pod.as_ref().expect("the Deployment's pod shape");
    assert_eq!(shape.requests.get("cpu"), 500);
    let mut quotas: Vec<_> = capacity.quotas.iter().map(|q| q.name.as_str()).collect();
    quotas.sort();
    assert_eq!(quotas, ["everything", "team-a"]);

    // The status writes land and the next Gather reads them back.
    let accepted = ProvisioningRequestStatus {
        conditions: vec![ApiCondition {
            type_: "Accepted".to_string(),
            status: ConditionStatus::True,
            reason: "Accepted".to_string(),
            message: "Provisioning Request was accepted".to_string(),
            last_transition: Timestamp::from_secs(1_800_000_000),
            observed_generation: 1,
        }],
        details: BTreeMap::new(),
    };
    cluster
        .update_provisioning_request_status(NAMESPACE, "check", &accepted)
        .await
        .expect("request status write");
    let (template, generation) = cluster
        .ensure_buffer_pod_template(&buffer, &scalable)
        .await
        .expect("the buffer's PodTemplate");
    assert!(generation >= 1, "generation {generation}");
    let buffer_status = CapacityBufferStatus {
        pod_template_ref: Some(template.clone()),
        replicas: Some(2),
        pod_template_generation: Some(generation),
        conditions: Vec::new(),
        provisioning_strategy: Some("buffer.x-k8s.io/active-capacity".to_string()),
        ready_replicas: Some(1),
    };
    cluster
        .update_capacity_buffer_status(NAMESPACE, "warm", &buffer_status)
        .await
        .expect("buffer status write");
    eventually(
        "the written statuses and template are read back",
        || async {
            let objects = cluster.gather().await.ok()?;
            let capacity = &objects.capacity;
            let request = capacity
                .provisioning_requests
                .iter()
                .find(|r| r.name == "check")?;
            let buffer = capacity.buffers.first()?;
            let template = capacity.pod_template(NAMESPACE, &template)?;
            (request.status == accepted
                && buffer.status == buffer_status
                && template.pod.requests.get("cpu") == 500)
                .then_some(())
        },
    )
    .await;
    let written = Api::<PodTemplate>::namespaced(client.clone(), NAMESPACE)
        .get(&template)
        .await
        .expect("the buffer's PodTemplate");
    let owner = &written.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CapacityBuffer", "warm")
    );

    // A missing object is NotFound, named.
    let missing = cluster
        .update_provisioning_request_status(NAMESPACE, "nope", &accepted)
        .await
        .expect_err("no such request");
    assert!(missing.to_string().contains("nope"), "{missing}");
}
