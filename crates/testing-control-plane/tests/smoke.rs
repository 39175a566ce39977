//! End-to-end proof of the harness: a real API server accepts a fake node and a pod over its REST
//! API with the admin certificate, kwok makes the node Ready, the real scheduler binds the pod to it,
//! and kwok reports the pod Running; the data survives an API server restart.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_testing_control_plane::{
    ControlPlane, FAKE_NODE_ANNOTATION_KEY, FAKE_NODE_ANNOTATION_VALUE,
};
use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Long enough for kwok and the scheduler on a loaded 2-core machine; the test normally needs a
/// second or two.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration from the kubeconfig");
    Client::try_from(config).expect("client")
}

fn fake_node(name: &str) -> Node {
    let capacity: BTreeMap<String, Quantity> = [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]
        .into_iter()
        .map(|(resource, amount)| (resource.to_owned(), Quantity(amount.to_owned())))
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(BTreeMap::from([(
                FAKE_NODE_ANNOTATION_KEY.to_owned(),
                FAKE_NODE_ANNOTATION_VALUE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

fn pod_requesting(name: &str, cpu: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some("registry.invalid/app:1".to_owned()),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "cpu".to_owned(),
                        Quantity(cpu.to_owned()),
                    )])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
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

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Polls `get` until `done` holds, returning the last object; panics with it when time runs out.
async fn wait_for<T>(api: &Api<T>, name: &str, what: &str, done: impl Fn(&T) -> bool) -> T
where
    T: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        match api.get(name).await {
            Ok(object) if done(&object) => return object,
            Ok(object) => last = Some(object),
            Err(error) => eprintln!("get {name}: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{name} did not become {what} within {WAIT_LIMIT:?}; last seen: {last:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_node_gets_ready_and_the_real_scheduler_binds_a_pod_that_kwok_runs() {
    let control_plane = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .expect("start-up thread")
        .expect("control plane starts (run scripts/control-plane/build.sh first)");
    let client = client_for(&control_plane).await;

    let version = client.apiserver_version().await.expect("/version");
    assert_eq!(version.major, "1", "{version:?}");

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &fake_node("fake-node-1"))
        .await
        .expect("create the fake node");
    let node = wait_for(&nodes, "fake-node-1", "Ready", is_ready).await;
    let allocatable = node
        .status
        .and_then(|status| status.allocatable)
        .unwrap_or_default();
    assert_eq!(
        allocatable.get("cpu"),
        Some(&Quantity("4".to_owned())),
        "kwok keeps the capacity the node was created with"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // A pod that fits goes to the node; one asking for more CPU than any node has stays Pending.
    pods.create(&PostParams::default(), &pod_requesting("fits", "1"))
        .await
        .expect("create the pod that fits");
    pods.create(&PostParams::default(), &pod_requesting("too-big", "8"))
        .await
        .expect("create the pod that fits nowhere");

    let running = wait_for(&pods, "fits", "Running", |pod| {
        phase(pod) == Some("Running")
    })
    .await;
    let bound_to = running.spec.and_then(|spec| spec.node_name);
    assert_eq!(bound_to.as_deref(), Some("fake-node-1"));

    let unschedulable = wait_for(&pods, "too-big", "marked unschedulable", |pod| {
        pod.status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions.iter().any(|condition| {
                    condition.type_ == "PodScheduled"
                        && condition.status == "False"
                        && condition.reason.as_deref() == Some("Unschedulable")
                })
            })
    })
    .await;
    assert_eq!(phase(&unschedulable), Some("Pending"));
    assert_eq!(unschedulable.spec.and_then(|spec| spec.node_name), None);

    // The API server comes back on the same address with the same data, and clients reconnect.
    let control_plane = tokio::task::spawn_blocking(move || {
        control_plane.restart_apiserver().map(|()| control_plane)
    })
    .await
    .expect("restart thread")
    .expect("API server restarts");
    let after_restart = wait_for(&pods, "fits", "Running after the restart", |pod| {
        phase(pod) == Some("Running")
    })
    .await;
    assert_eq!(
        after_restart
            .spec
            .and_then(|spec| spec.node_name)
            .as_deref(),
        Some("fake-node-1")
    );

    control_plane.stop();
}
