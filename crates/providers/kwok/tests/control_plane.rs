//! The kwok provider against a real API server with kwok running: configuration and templates come
//! from ConfigMaps, `IncreaseSize` creates Nodes that kwok makes Ready, `DeleteNodes` removes them,
//! the group bounds are enforced, and `Cleanup` removes every node the provider created.
//!
//! One control plane serves the whole scenario: starting one costs seconds of CPU on a small machine.

mod support;

use ferroscale_core::cloud::{CloudError, CloudProvider};
use ferroscale_provider_kwok::{ConfigSource, KwokProvider};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use support::*;

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
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
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn model_node(nodes: &Api<Node>, name: &str) -> ferroscale_model::Node {
    let node = nodes.get(name).await.expect("get node");
    ferroscale_objects::node_from_k8s(&node).expect("convert node")
}

/// docs/behaviour.md KWOK-102, KWOK-109: groups grow and shrink through Node objects within their
/// bounds, and `HasInstance` says which machines exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_groups_grow_shrink_and_keep_their_bounds() {
    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    configure(&client, 1, 3).await;

    let provider = build_provider(&client).await;
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

    // Grow: two real Node objects that kwok makes Ready. The target moves at once; the Node
    // objects follow in the background.
    let nodes: Api<Node> = Api::all(client.clone());
    group.increase_size(2).await.expect("increase by 2");
    assert_eq!(group.target_size().await.unwrap(), 2);
    assert_eq!(group.nodes().await.unwrap().len(), 2);
    let created = wait_node_count(&nodes, 2).await;
    wait_instances_running(group.as_ref()).await;
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
    wait_instances_running(group.as_ref()).await;
    let foreign_refused = group.delete_nodes(&[foreign]).await.unwrap_err();
    assert!(
        foreign_refused.to_string().contains("not a kwok node"),
        "{foreign_refused}"
    );

    // Refresh resets the target to the existing nodes.
    provider.refresh().await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 2);
    // The deleted node's machine is gone; the remaining one's is there.
    assert!(!provider.has_instance(&first).await.unwrap());
    let remaining = model_node(&nodes, &created[1]).await;
    assert!(provider.has_instance(&remaining).await.unwrap());

    // Cleanup removes every node the provider created, and the group forgets them at once.
    provider.cleanup().await.expect("cleanup");
    assert!(node_names(&nodes).await.is_empty());
    assert_eq!(group.nodes().await.unwrap(), Vec::new());
    provider.refresh().await.unwrap();
    assert_eq!(group.target_size().await.unwrap(), 0);
}

/// docs/behaviour.md KWOK-110: once the provider's watch of the Nodes follows them, a refresh in a
/// quiet cluster lists no Node (what a Node does that is not about membership, a label here, does
/// not make it list), and a Node of the group deleted by someone else is still seen by the next
/// refreshes, well before the list the provider takes at least once a minute anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_refresh_lists_no_node_and_still_sees_a_node_deleted_by_others() {
    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    configure(&client, 0, 3).await;
    let provider = build_provider(&client).await;
    let group = provider.node_groups().await.unwrap().remove(0);
    let nodes: Api<Node> = Api::all(client.clone());
    group.increase_size(2).await.expect("increase by 2");
    let created = wait_node_count(&nodes, 2).await;
    wait_instances_running(group.as_ref()).await;

    // The provider's own changes and the watch's first list each make a refresh list; then the
    // refreshes go quiet.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let before = provider.node_lists();
        provider.refresh().await.expect("refresh");
        if provider.node_lists() == before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "every refresh still lists the Nodes ({} lists)",
            provider.node_lists()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let quiet = provider.node_lists();
    let labelled = serde_json::json!({"metadata": {"labels": {"ferroscale.test/touched": "yes"}}});
    nodes
        .patch(
            &created[0],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&labelled),
        )
        .await
        .expect("label a node");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    for _ in 0..5 {
        provider.refresh().await.expect("refresh");
    }
    assert_eq!(
        provider.node_lists(),
        quiet,
        "a quiet refresh lists nothing"
    );
    assert_eq!(group.target_size().await.unwrap(), 2);

    // Someone else deletes one of the group's Nodes: the next refreshes see it go.
    nodes
        .delete(&created[0], &kube::api::DeleteParams::default())
        .await
        .expect("delete a node behind the provider's back");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while group.target_size().await.unwrap() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a Node deleted by others was not seen within 20 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        provider.refresh().await.expect("refresh");
    }
    assert!(provider.node_lists() > quiet);
    let instances = group.nodes().await.unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].id, format!("kwok:{}", created[1]));
}

/// docs/behaviour.md KWOK-108, KWOK-109: a group whose template says it has no cloud-controller-manager
/// creates Nodes as a kubelet with `--cloud-provider=external` registers them (uninitialized
/// taint, no zone or instance-type label), and deleting a machine leaves its Node object behind,
/// no longer played by kwok, still placed in its group by `NodeGroupForNode` but no longer one of
/// its instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ccm_nodes_register_uninitialized_and_outlive_their_machines() {
    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    put_configmap(&client, "kwok-provider-config", "config", CONFIG).await;
    let templates = templates(0, 3).replace(
        "labels: {pool: workers}",
        "labels: {pool: workers, topology.kubernetes.io/zone: zone-a, node.kubernetes.io/instance-type: m.large}",
    ).replace(
        "annotations:\n",
        "annotations:\n      cluster-autoscaler.kwok.nodegroup/cloud-controller-manager: \"false\"\n",
    );
    put_configmap(&client, "kwok-provider-templates", "templates", &templates).await;
    let provider = build_provider(&client).await;
    let group = provider.node_groups().await.unwrap().remove(0);
    let template = group.template_node_info().await.expect("template");
    assert_eq!(
        template.node.label("topology.kubernetes.io/zone"),
        Some("zone-a")
    );

    let nodes: Api<Node> = Api::all(client.clone());
    group.increase_size(1).await.expect("increase by 1");
    let created = wait_node_count(&nodes, 1).await;
    wait_instances_running(group.as_ref()).await;
    let node = model_node(&nodes, &created[0]).await;
    assert!(node.has_taint("node.cloudprovider.kubernetes.io/uninitialized"));
    assert_eq!(node.label("topology.kubernetes.io/zone"), None);
    assert_eq!(node.label("node.kubernetes.io/instance-type"), None);
    assert_eq!(node.label("pool"), Some("workers"));

    group
        .delete_nodes(std::slice::from_ref(&node))
        .await
        .expect("delete the machine");
    assert_eq!(node_names(&nodes).await, created, "the Node object stays");
    let left = nodes.get(&created[0]).await.expect("the Node");
    let annotations = left.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("kwok.x-k8s.io/node"),
        "{annotations:?}"
    );
    assert_eq!(
        annotations
            .get("cluster-autoscaler.kwok.nodegroup/machine-deleted")
            .map(String::as_str),
        Some("true")
    );
    provider.refresh().await.unwrap();
    assert_eq!(group.nodes().await.unwrap(), Vec::new());
    assert_eq!(group.target_size().await.unwrap(), 0);
    assert!(!provider.has_instance(&node).await.unwrap());
    let placed = provider
        .node_group_for_node(&node)
        .await
        .unwrap()
        .expect("still placed in its group");
    assert_eq!(placed.id(), "workers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_templates_configmap_is_an_error_naming_it() {
    let control_plane = start_control_plane().await;
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

/// An admission policy refusing every Node of the `workers` pool: the API server answers each
/// creation with an error, as it would a quota or a webhook.
const REFUSE_WORKER_NODES: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: refuse-worker-nodes}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["nodes"]}
  validations:
  - expression: "!has(object.metadata.labels) || !('pool' in object.metadata.labels) || object.metadata.labels['pool'] != 'workers'"
    message: "no worker nodes today"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: refuse-worker-nodes}
spec:
  policyName: refuse-worker-nodes
  validationActions: [Deny]
"#;

/// Log output captured in memory.
#[derive(Clone, Default)]
struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// A current-thread runtime, so the background creations log through the subscriber set for this
// thread.
#[tokio::test]
async fn nodes_that_cannot_be_created_are_failed_instances_and_a_warning() {
    use ferroscale_core::cloud::{ErrorClass, InstanceState};
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::PostParams;

    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let control_plane = start_control_plane().await;
    let client = client_for(&control_plane).await;
    configure(&client, 0, 5).await;
    let mut documents = REFUSE_WORKER_NODES.split("\n---\n");
    let policy: ValidatingAdmissionPolicy =
        serde_yaml_ng::from_str(documents.next().unwrap()).unwrap();
    let binding: ValidatingAdmissionPolicyBinding =
        serde_yaml_ng::from_str(documents.next().unwrap()).unwrap();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the policy");
    let nodes: Api<Node> = Api::all(client.clone());
    // The API server applies a new policy after a moment: wait until a worker Node is refused.
    let probe: Node =
        serde_yaml_ng::from_str("metadata: {name: probe, labels: {pool: workers}}").unwrap();
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while nodes.create(&PostParams::default(), &probe).await.is_ok() {
        let _ = nodes.delete("probe", &Default::default()).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the policy never applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let provider = build_provider(&client).await;
    let group = provider.node_groups().await.unwrap().remove(0);
    group
        .increase_size(2)
        .await
        .expect("the request is accepted");
    assert_eq!(group.target_size().await.unwrap(), 2);

    // Both become failed instances: Creating with error info naming the refusal.
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let failed = loop {
        let instances = group.nodes().await.unwrap();
        let failed: Vec<_> = instances
            .iter()
            .filter_map(|instance| instance.status.clone())
            .filter(|status| status.state == InstanceState::Creating)
            .filter_map(|status| status.error)
            .collect();
        if failed.len() == 2 {
            break instances;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failed instances: {instances:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for instance in &failed {
        let error = instance
            .status
            .as_ref()
            .and_then(|s| s.error.as_ref())
            .unwrap();
        assert_eq!(error.class, ErrorClass::Other);
        assert!(error.message.contains("no worker nodes today"), "{error:?}");
    }
    let warning = log
        .text()
        .lines()
        .find(|line| line.contains("could not be created"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no warning in {}", log.text()));
    assert!(
        warning.contains("WARN") && warning.contains("failed=2"),
        "{warning}"
    );
    assert!(node_names(&nodes).await.is_empty());

    // The core deletes failed instances through placeholders carrying only the instance id.
    let placeholders: Vec<ferroscale_model::Node> = failed
        .iter()
        .map(|instance| {
            let mut node = ferroscale_model::Node::new(
                instance.id.clone(),
                ferroscale_model::Resources::new(0, 0),
            );
            node.provider_id = instance.id.clone();
            node
        })
        .collect();
    group
        .delete_nodes(&placeholders)
        .await
        .expect("failed instances are deleted");
    assert_eq!(group.target_size().await.unwrap(), 0);
    assert!(group.nodes().await.unwrap().is_empty());
}
