//! Set-up shared by the control-plane tests of the Cluster API provider: control planes, clients,
//! the provider started as the binary starts it, and reads of what the API server holds.
//!
//! Everything fails the test with the reason (a missing control-plane binary or CRD names the
//! build script); nothing is skipped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferroscale_core::cloud::{CloudProvider, NodeGroup};
use ferroscale_provider_clusterapi::management::StartError;
use ferroscale_provider_clusterapi::{ClusterApiConfig, ClusterApiProvider};
use ferroscale_testing_control_plane::{ClusterApi, ClusterApiKind, ControlPlane, Options};
use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::api::{Api, DynamicObject};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Generous for a loaded 2-core machine; each step normally takes a second or two.
pub const WAIT_LIMIT: Duration = Duration::from_secs(120);

pub async fn start(options: Options) -> (ControlPlane, Client) {
    let control_plane = tokio::task::spawn_blocking(move || ControlPlane::start_with(options))
        .await
        .expect("control-plane start task")
        .expect("start the test control plane");
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    let client = Client::try_from(config).expect("client");
    (control_plane, client)
}

/// An API server and etcd only: the provider and the test controller need nothing else (Nodes
/// are objects; no kubelet has to make them Ready for the provider).
pub fn api_server_only() -> Options {
    Options {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        ..Options::default()
    }
}

/// The configuration the binary builds from these environment variables and discovery flags.
pub fn config(env: &[(&str, &str)], discovery: &[&str]) -> ClusterApiConfig {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let discovery: Vec<String> = discovery.iter().map(|s| s.to_string()).collect();
    ClusterApiConfig::from_env(
        |name| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        },
        &discovery,
    )
    .expect("a valid provider configuration")
}

pub async fn try_provider(
    client: &Client,
    env: &[(&str, &str)],
    discovery: &[&str],
) -> Result<ClusterApiProvider, StartError> {
    ClusterApiProvider::start(client.clone(), client.clone(), config(env, discovery)).await
}

/// The provider on one cluster that is both management and workload cluster.
pub async fn provider(
    client: &Client,
    env: &[(&str, &str)],
    discovery: &[&str],
) -> ClusterApiProvider {
    try_provider(client, env, discovery)
        .await
        .expect("start the Cluster API provider")
}

/// Sorted ids of `NodeGroups()`.
pub async fn group_ids(provider: &ClusterApiProvider) -> Vec<String> {
    let mut ids: Vec<String> = provider
        .node_groups()
        .await
        .expect("node groups")
        .iter()
        .map(|group| group.id().to_string())
        .collect();
    ids.sort();
    ids
}

/// The group `NodeGroups()` lists under `id`.
pub async fn group(provider: &ClusterApiProvider, id: &str) -> Arc<dyn NodeGroup> {
    let groups = provider.node_groups().await.expect("node groups");
    let ids: Vec<String> = groups.iter().map(|g| g.id().to_string()).collect();
    groups
        .into_iter()
        .find(|group| group.id() == id)
        .unwrap_or_else(|| panic!("no node group {id} among {ids:?}"))
}

/// Polls `probe` every 200 ms until it returns `Ok`, or fails the test with its last `Err`.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last_seen) if tokio::time::Instant::now() >= deadline => {
                panic!("{what} within {WAIT_LIMIT:?}; last seen: {last_seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The engine's view of a workload Node, as the binary converts it.
pub async fn model_node(client: &Client, name: &str) -> ferroscale_model::Node {
    let node = Api::<K8sNode>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|error| panic!("reading Node {name}: {error}"));
    ferroscale_objects::convert::node_from_k8s(&node).expect("convert the Node")
}

/// A Node the engine could hold with this provider id (for ids no real Node carries).
pub fn node_with_provider_id(name: &str, provider_id: &str) -> ferroscale_model::Node {
    let mut node = ferroscale_model::Node::new(name, ferroscale_model::Resources::default());
    node.provider_id = provider_id.to_string();
    node
}

/// An object as the API server holds it now.
pub async fn read(
    client: &Client,
    api: &ClusterApi,
    kind: ClusterApiKind,
    name: &str,
) -> DynamicObject {
    api.namespaced(client, kind, "default")
        .get(name)
        .await
        .unwrap_or_else(|error| panic!("reading {} {name}: {error}", kind.kind()))
}

/// `spec.replicas` as the API server holds it now.
pub async fn stored_replicas(
    client: &Client,
    api: &ClusterApi,
    kind: ClusterApiKind,
    name: &str,
) -> i64 {
    read(client, api, kind, name).await.data["spec"]["replicas"]
        .as_i64()
        .unwrap_or_else(|| panic!("{} {name} has no spec.replicas", kind.kind()))
}

/// Names of the Machines of a resource (by its selector label), sorted.
pub fn machine_names(machines: &[DynamicObject]) -> Vec<String> {
    let mut names: Vec<String> = machines
        .iter()
        .filter_map(|machine| machine.metadata.name.clone())
        .collect();
    names.sort();
    names
}

/// Whether the object carries the annotation `key`.
pub fn has_annotation(object: &DynamicObject, key: &str) -> bool {
    object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(key))
}

/// The Machines of a resource (by its selector label) as the API server holds them now.
pub async fn machines_of(
    client: &Client,
    api: &ClusterApi,
    resource: &ferroscale_testing_control_plane::ScalableResource,
) -> Vec<DynamicObject> {
    let mut machines = api
        .namespaced(client, ClusterApiKind::Machine, "default")
        .list(&kube::api::ListParams::default().labels(&resource.label_selector()))
        .await
        .expect("list Machines")
        .items;
    machines.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    machines
}

/// Waits until the resource has exactly one Machine and `ready` accepts it, and returns it.
pub async fn single_machine(
    client: &Client,
    api: &ClusterApi,
    resource: &ferroscale_testing_control_plane::ScalableResource,
    what: &str,
    ready: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    eventually(what, || async {
        let machines = machines_of(client, api, resource).await;
        match machines.as_slice() {
            [machine] if ready(machine) => Ok(machine.clone()),
            other => Err(ferroscale_testing_control_plane::cluster_api::describe_machines(other)),
        }
    })
    .await
}

/// The instances of a group, once `expected` says they are what the watch caches should show.
pub async fn instances_once(
    group: &dyn NodeGroup,
    what: &str,
    expected: impl Fn(&[ferroscale_core::cloud::Instance]) -> bool,
) -> Vec<ferroscale_core::cloud::Instance> {
    eventually(what, || async {
        let instances = group.nodes().await.map_err(|e| e.to_string())?;
        if expected(&instances) {
            Ok(instances)
        } else {
            Err(format!("{instances:?}"))
        }
    })
    .await
}

/// A client of the control plane that acts as `user` (in `system:authenticated`, so discovery is
/// allowed) through impersonation by the admin, so RBAC decides what it may do.
pub async fn client_as(control_plane: &ControlPlane, user: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(control_plane.kubeconfig_path()).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_string()]);
    Client::try_from(config).expect("client")
}
