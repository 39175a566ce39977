//! What the kwok provider's tests against the real control plane share: a client for it, the
//! configuration and templates ConfigMaps, and waits on Node objects and on the group's instances.

#![allow(dead_code)] // Each test binary uses its own part of this module.

use std::collections::BTreeMap;
use std::time::Duration;

use ferroscale_core::cloud::{InstanceState, NodeGroup};
use ferroscale_testing_control_plane::ControlPlane;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub const WAIT_LIMIT: Duration = Duration::from_secs(120);
pub const NAMESPACE: &str = "kube-system";

pub const CONFIG: &str = r#"
apiVersion: v1alpha1
readNodesFrom: configmap
nodegroups:
  fromNodeLabelKey: "pool"
configmap:
  name: kwok-provider-templates
"#;

/// One group `workers` of 4-CPU nodes with the given bounds.
pub fn templates(min: usize, max: usize) -> String {
    format!(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: workers-template
    labels: {{pool: workers}}
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "{min}"
      cluster-autoscaler.kwok.nodegroup/max-count: "{max}"
  status:
    capacity: {{cpu: "4", memory: 16Gi, pods: "110"}}
    allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}
"#
    )
}

pub async fn start_control_plane() -> ControlPlane {
    tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .expect("start-up thread")
        .expect("control plane starts (run scripts/control-plane/build.sh first)")
}

pub async fn client_for(control_plane: &ControlPlane) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client configuration");
    Client::try_from(config).expect("client")
}

pub async fn put_configmap(client: &Client, name: &str, key: &str, text: &str) {
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

/// The provider built from the ConfigMaps [`configure`] (or a test) wrote.
pub async fn build_provider(client: &Client) -> ferroscale_provider_kwok::KwokProvider {
    let source = ferroscale_provider_kwok::ConfigSource::ConfigMap {
        namespace: NAMESPACE.to_string(),
        name: "kwok-provider-config".to_string(),
    };
    ferroscale_provider_kwok::KwokProvider::build(client.clone(), &source, Some(NAMESPACE))
        .await
        .expect("provider builds from the ConfigMaps")
}

/// The configuration and templates ConfigMaps of one `workers` group with these bounds.
pub async fn configure(client: &Client, min: usize, max: usize) {
    put_configmap(client, "kwok-provider-config", "config", CONFIG).await;
    put_configmap(
        client,
        "kwok-provider-templates",
        "templates",
        &templates(min, max),
    )
    .await;
}

pub async fn node_names(nodes: &Api<Node>) -> Vec<String> {
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

/// Polls until exactly `count` Node objects exist; returns their names.
pub async fn wait_node_count(nodes: &Api<Node>, count: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let names = node_names(nodes).await;
        if names.len() == count {
            return names;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} Nodes instead of {count} after {WAIT_LIMIT:?}",
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls until every instance of `group` is Running (its Node object exists).
pub async fn wait_instances_running(group: &dyn NodeGroup) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let instances = group.nodes().await.expect("instances");
        let running = instances.iter().all(|instance| {
            instance
                .status
                .as_ref()
                .is_some_and(|status| status.state == InstanceState::Running)
        });
        if running {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "instances not all Running after {WAIT_LIMIT:?}: {instances:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
