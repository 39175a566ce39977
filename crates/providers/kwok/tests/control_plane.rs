//! The kwok provider against a real API server with kwok running: configuration and templates come
//! from ConfigMaps, `IncreaseSize` creates Nodes that kwok makes Ready, `DeleteNodes` removes them,
//! the group bounds are enforced, and `Cleanup` removes every node the provider created.
//!
//! One control plane serves the whole scenario: starting one costs seconds of CPU on a small machine.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_core::cloud::{CloudError, CloudProvider};
use ferroscale_provider_kwok::{ConfigSource, KwokProvider};
use ferroscale_testing_control_plane::ControlPlane;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

const WAIT_LIMIT: Duration = Duration::from_secs(120);
const NAMESPACE: &str = "kube-system";

const CONFIG: &str = r#"
apiVersion: v1alpha1
readNodesFrom: configmap
nodegroups:
  fromNodeLabelKey: "pool"
configmap:
  name: kwok-provider-templates
"#;

const TEMPLATES: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: workers-template
    labels: {pool: workers}
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "1"
      cluster-autoscaler.kwok.nodegroup/max-count: "3"
  status:
    capacity: {cpu: "4", memory: 16Gi, pods: "110"}
    allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
"#;

async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    Client::try_from(config).expect("client")
}

async fn put_configmap(client: &Client, name: &str, key: &str, text: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_string(), text.to_string())])),
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &configmap)
        .await
        .expect("create ConfigMap");
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn node_names(nodes: &Api<Node>) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

/// Polls until every named node is Ready.
async fn wait_ready(nodes: &Api<Node>, names: &[String]) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let mut all_ready = true;
        for name in names {
            match nodes.get(name).await {
                Ok(node) if is_ready(&node) => {}
                _ => all_ready = false,
            }
        }
        if all_ready {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nodes {names:?} did not become Ready within {WAIT_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn model_node(nodes: &Api<Node>, name: &str) -> ferroscale_model::Node {
    let node = nodes.get(name).await.expect("get node");
    ferroscale_objects::node_from_k8s(&node).expect("convert node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_groups_grow_shrink_and_keep_their_bounds() {
    let control_plane = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .expect("start-up thread")
        .expect("control plane starts (run scripts/control-plane/build.sh first)");
    let client = client_for(&control_plane).await;
    put_configmap(&client, "kwok-provider-config", "config", CONFIG).await;
    put_configmap(&client, "kwok-provider-templates", "templates", TEMPLATES).await;

    let source = ConfigSource::ConfigMap {
        namespace: NAMESPACE.to_string(),
        name: "kwok-provider-config".to_string(),
    };
    let provider = KwokProvider::build(client.clone(), &source, Some(NAMESPACE))
        .await
        .expect("provider builds from the ConfigMaps");
    let groups = provider.node_groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    let group = &groups[0];
    assert_eq!(
        (group.id(), group.min_size(), group.max_size()),
        ("workers", 1, 3)
    );
    assert_eq!(
        group.target_size().await.unwrap(),
        0,
        "refresh counts existing nodes"
    );

    // Grow: two real Node objects that kwok makes Ready.
    let nodes: Api<Node> = Api::all(client.clone());
    group.increase_size(2).await.expect("increase by 2");
    assert_eq!(group.target_size().await.unwrap(), 2);
    let created = node_names(&nodes).await;
    assert_eq!(created.len(), 2, "{created:?}");
    for name in &created {
        assert!(
            name.starts_with("workers-") && name.len() == "workers-".len() + 5,
            "{name}"
        );
    }
    wait_ready(&nodes, &created).await;
    let first = model_node(&nodes, &created[0]).await;
    assert_eq!(first.provider_id, format!("kwok:{}", created[0]));
    assert!(first.taints.iter().any(|t| t.key == "kwok-provider"));
    let owner = provider
        .node_group_for_node(&first)
        .await
        .unwrap()
        .expect("group of a kwok node");
    assert_eq!(owner.id(), "workers");
    let mut instances: Vec<String> = group
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    instances.sort();
    assert_eq!(
        instances,
        created
            .iter()
            .map(|n| format!("kwok:{n}"))
            .collect::<Vec<_>>()
    );

    // Max size: 2 + 2 > 3.
    let over = group.increase_size(2).await.unwrap_err();
    assert!(matches!(over, CloudError::InvalidRequest(_)), "{over}");
    assert_eq!(
        node_names(&nodes).await.len(),
        2,
        "nothing created over max"
    );

    // Decrease target: only unfulfilled requests may be cancelled.
    let refused = group.decrease_target_size(-1).await.unwrap_err();
    assert!(refused.to_string().contains("existing nodes"), "{refused}");

    // Delete one node: it is gone from the API and the target follows.
    group
        .delete_nodes(std::slice::from_ref(&first))
        .await
        .expect("delete one");
    assert_eq!(node_names(&nodes).await, vec![created[1].clone()]);
    assert_eq!(group.target_size().await.unwrap(), 1);

    // Min size 1: the last node stays.
    let last = model_node(&nodes, &created[1]).await;
    let below_min = group.delete_nodes(&[last]).await.unwrap_err();
    assert!(below_min.to_string().contains("min size"), "{below_min}");
    assert_eq!(node_names(&nodes).await, vec![created[1].clone()]);

    // A node that is not a kwok node is refused, and ignored by NodeGroupForNode.
    let mut foreign =
        ferroscale_model::Node::new("foreign", ferroscale_model::Resources::new(1000, 1 << 30));
    foreign.provider_id = "aws:///i-123".to_string();
    assert!(
        provider
            .node_group_for_node(&foreign)
            .await
            .unwrap()
            .is_none()
    );
    group.increase_size(1).await.expect("back to 2");
    let foreign_refused = group.delete_nodes(&[foreign]).await.unwrap_err();
    assert!(
        foreign_refused.to_string().contains("not a kwok node"),
        "{foreign_refused}"
    );

    // Refresh resets the target to the existing nodes.
    provider.refresh().await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 2);
    assert!(provider.has_instance(&first).await.unwrap());

    // Cleanup removes every node the provider created.
    provider.cleanup().await.expect("cleanup");
    assert!(node_names(&nodes).await.is_empty());
    provider.refresh().await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_templates_configmap_is_an_error_naming_it() {
    let control_plane = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .expect("start-up thread")
        .expect("control plane starts (run scripts/control-plane/build.sh first)");
    let client = client_for(&control_plane).await;
    put_configmap(&client, "kwok-provider-config", "config", CONFIG).await;
    put_configmap(
        &client,
        "kwok-provider-templates",
        "templates",
        "kind: Node\nmetadata:\n  name: t\n  labels: {pool: workers}\n  annotations: {cluster-autoscaler.kwok.nodegroup/min-count: many}\n",
    )
    .await;
    let source = ConfigSource::ConfigMap {
        namespace: NAMESPACE.to_string(),
        name: "kwok-provider-config".to_string(),
    };
    let error = KwokProvider::build(client.clone(), &source, Some(NAMESPACE))
        .await
        .err()
        .expect("malformed templates are refused")
        .to_string();
    assert!(
        error.contains("ConfigMap kube-system/kwok-provider-templates")
            && error.contains("min-count")
            && error.contains("\"many\""),
        "{error}"
    );
    let missing = ConfigSource::ConfigMap {
        namespace: NAMESPACE.to_string(),
        name: "no-such-config".to_string(),
    };
    let error = KwokProvider::build(client, &missing, Some(NAMESPACE))
        .await
        .err()
        .expect("a missing ConfigMap is refused")
        .to_string();
    assert!(error.contains("kube-system/no-such-config"), "{error}");
}
