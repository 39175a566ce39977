//! The kwok cloud provider (docs/behaviour.md KWOK-101–KWOK-103): node groups whose "machines" are
//! Node objects created in the cluster itself and brought to life by kwok, which plays their
//! kubelet. Useful to exercise the whole autoscaler against a real API server without a cloud.
//!
//! - [`config`]: the configuration document (`readNodesFrom`, grouping key, taint, GPUs).
//! - [`templates`]: template nodes → groups, bounds, prepared fake nodes.
//! - [`KwokProvider`] / [`KwokNodeGroup`]: the `CloudProvider` and `NodeGroup` implementations.
//!
//! The provider keeps each group's target size and nodes in memory, as upstream does: `refresh`
//! resets the target to the number of existing nodes, so a restart loses nothing that matters.
//! Every change the provider makes itself is recorded as it makes it, so what it reports never
//! waits for a `refresh`: `increase_size` records the new nodes as instances being created and
//! creates their Node objects in the background (a bounded number at a time), so it answers at
//! once at any size; a creation that fails turns the node into a failed instance, which the core
//! backs off and deletes as it does for any cloud; `delete_nodes` and `cleanup` forget each node
//! as its Node object goes.
//!
//! A group whose template node says `cluster-autoscaler.kwok.nodegroup/cloud-controller-manager:
//! "false"` stands for a cloud without a cloud-controller-manager (docs/behaviour.md KWOK-108):
//! its new Nodes register uninitialized, and `delete_nodes` deletes the machine but leaves the
//! Node object behind, no longer played by kwok — what `--cloud-node-controller` is for.

pub mod config;
pub mod templates;
mod watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, Instance, InstanceErrorInfo, InstanceState,
    InstanceStatus, NodeGroup, NodeTemplate,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use rand::RngExt;
use thiserror::Error;

pub use config::{ConfigError, GroupingKey, KwokConfig, ReadNodesFrom};
pub use templates::{GroupSpec, TemplateError};

use templates::{
    GROUP_NAME_ANNOTATION, KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE,
    MACHINE_DELETED_ANNOTATION, node_from_template, uninitialized_node_from_template,
};

/// Env: name of the configuration ConfigMap.
pub const CONFIGMAP_ENV: &str = "KWOK_PROVIDER_CONFIGMAP";
pub const DEFAULT_CONFIGMAP: &str = "kwok-provider-config";
/// Env: the namespace of the configuration and templates ConfigMaps.
pub const NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// Env: `local` makes the provider use the local kubeconfig instead of the in-cluster account.
pub const MODE_ENV: &str = "KWOK_PROVIDER_MODE";
/// Where a pod finds its own namespace when `POD_NAMESPACE` is not set.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// Key of the configuration document in its ConfigMap.
pub const CONFIG_KEY: &str = "config";
/// Key of the templates in the templates ConfigMap.
pub const TEMPLATES_KEY: &str = "templates";
/// Length of the random suffix of new node names.
const NODE_SUFFIX_LEN: usize = 5;

/// Errors building the provider.
#[derive(Debug, Error)]
pub enum KwokError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Templates(#[from] TemplateError),
    #[error("reading {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ConfigMap {namespace}/{name}: {reason}")]
    ConfigMap {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error(
        "the kwok provider needs a namespace: set {NAMESPACE_ENV} or run in a pod ({SERVICE_ACCOUNT_NAMESPACE_FILE})"
    )]
    NoNamespace,
    #[error("{action}: {source}")]
    Api { action: String, source: kube::Error },
    #[error("Kubernetes client configuration: {0}")]
    ClientConfig(String),
}

/// What the process environment says about the provider, read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KwokEnvironment {
    /// `KWOK_PROVIDER_CONFIGMAP` (default `kwok-provider-config`).
    pub configmap: String,
    /// `POD_NAMESPACE`, else the service-account namespace file.
    pub namespace: Option<String>,
    /// `KWOK_PROVIDER_MODE=local`.
    pub local_mode: bool,
}

impl KwokEnvironment {
    pub fn from_process() -> KwokEnvironment {
        let non_empty = |v: String| {
            let v = v.trim().to_string();
            (!v.is_empty()).then_some(v)
        };
        let namespace = std::env::var(NAMESPACE_ENV)
            .ok()
            .and_then(non_empty)
            .or_else(|| {
                std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
                    .ok()
                    .and_then(non_empty)
            });
        KwokEnvironment {
            configmap: std::env::var(CONFIGMAP_ENV)
                .ok()
                .and_then(non_empty)
                .unwrap_or_else(|| DEFAULT_CONFIGMAP.to_string()),
            namespace,
            local_mode: std::env::var(MODE_ENV).is_ok_and(|m| m.trim() == "local"),
        }
    }

    /// The client configuration: the local kubeconfig (`--kubeconfig`, else the default one) in
    /// local mode or when a kubeconfig is given, the in-cluster service account otherwise.
    pub async fn client_config(
        &self,
        kubeconfig: Option<&Path>,
    ) -> Result<kube::Config, KwokError> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions::default();
        let config = match kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| KwokError::ClientConfig(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| KwokError::ClientConfig(format!("{}: {e}", path.display())))?
            }
            None if self.local_mode => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| KwokError::ClientConfig(e.to_string()))?,
            None => {
                kube::Config::incluster().map_err(|e| KwokError::ClientConfig(e.to_string()))?
            }
        };
        Ok(config)
    }
}

/// Where the configuration document is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--cloud-config`.
    File(PathBuf),
    /// The `config` key of this ConfigMap.
    ConfigMap { namespace: String, name: String },
}

async fn read_configmap_key(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<String, KwokError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let configmap_error = |reason: String| KwokError::ConfigMap {
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason,
    };
    let configmap = api
        .get(name)
        .await
        .map_err(|e| configmap_error(format!("cannot be read: {e}")))?;
    configmap
        .data
        .and_then(|mut data| data.remove(key))
        .ok_or_else(|| configmap_error(format!("has no key {key:?}")))
}

/// Reads and parses the configuration document.
pub async fn load_config(client: &Client, source: &ConfigSource) -> Result<KwokConfig, KwokError> {
    match source {
        ConfigSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| KwokError::ReadFile {
                path: path.clone(),
                source,
            })?;
            Ok(KwokConfig::parse(&text, &path.display().to_string())?)
        }
        ConfigSource::ConfigMap { namespace, name } => {
            let text = read_configmap_key(client, namespace, name, CONFIG_KEY).await?;
            let origin = format!("ConfigMap {namespace}/{name} key {CONFIG_KEY}");
            Ok(KwokConfig::parse(&text, &origin)?)
        }
    }
}

/// Reads the template nodes the configuration points at: the templates ConfigMap in `namespace`,
/// or the cluster's own Nodes.
pub async fn load_group_specs(
    client: &Client,
    config: &KwokConfig,
    namespace: Option<&str>,
) -> Result<Vec<GroupSpec>, KwokError> {
    match config.read_nodes_from {
        ReadNodesFrom::ConfigMap => {
            let namespace = namespace.ok_or(KwokError::NoNamespace)?;
            let name = &config.templates_configmap;
            let text = read_configmap_key(client, namespace, name, TEMPLATES_KEY).await?;
            let origin = format!("ConfigMap {namespace}/{name} key {TEMPLATES_KEY}");
            let nodes = templates::parse_template_nodes(&text, &origin)?;
            Ok(templates::group_specs(&nodes, config, &origin)?)
        }
        ReadNodesFrom::Cluster => {
            let api: Api<Node> = Api::all(client.clone());
            let nodes =
                api.list(&ListParams::default())
                    .await
                    .map_err(|source| KwokError::Api {
                        action: "listing the cluster's Nodes as templates".to_string(),
                        source,
                    })?;
            Ok(templates::group_specs(
                &nodes.items,
                config,
                "the cluster's Nodes",
            )?)
        }
    }
}

fn provider_error(action: impl std::fmt::Display, error: kube::Error) -> CloudError {
    CloudError::Provider(format!("{action}: {error}"))
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// How many Node objects the provider creates or deletes at once: enough that 500 new nodes take
/// seconds, not minutes, few enough not to flood the API server.
const API_CONCURRENCY: usize = 32;

/// The instance error code of a node whose Node object could not be created.
pub const CREATE_FAILED_CODE: &str = "KwokCreateNodeFailed";

/// Where a node of the group stands, as far as the provider knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodeStatus {
    /// Requested by `increase_size`; its Node object is being created in the background.
    Creating,
    /// Its Node object exists.
    Running,
    /// Its Node object could not be created: reported as an instance still being created with
    /// error info, so the core backs the group off and deletes it, as for any failed instance.
    Failed(String),
}

/// A node of the group, as the group remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupNode {
    name: String,
    provider_id: String,
    status: NodeStatus,
    /// The group's [`GroupState::version`] when the provider last changed this entry.
    changed: u64,
}

impl GroupNode {
    fn instance(&self) -> Instance {
        let status = match &self.status {
            NodeStatus::Running => return Instance::running(self.provider_id.clone()),
            NodeStatus::Creating => InstanceStatus {
                state: InstanceState::Creating,
                error: None,
            },
            NodeStatus::Failed(message) => InstanceStatus {
                state: InstanceState::Creating,
                error: Some(InstanceErrorInfo {
                    class: ErrorClass::Other,
                    code: CREATE_FAILED_CODE.to_string(),
                    message: message.clone(),
                }),
            },
        };
        Instance {
            id: self.provider_id.clone(),
            status: Some(status),
        }
    }
}

/// A group's target and nodes. Every change the provider makes (creating, deleting, cleaning up)
/// is recorded here as it happens, so `target_size` and `nodes` never depend on a `refresh` to
/// catch up with the provider's own work; `refresh` only brings in what others changed.
#[derive(Debug, Default)]
struct GroupState {
    target_size: usize,
    nodes: Vec<GroupNode>,
    /// Counts the provider's changes, so that `refresh` can tell a change made while it was
    /// listing (newer than its list) from one its list already shows.
    version: u64,
    /// Nodes the provider deleted, with the version of the deletion, until a list newer than the
    /// deletion is merged.
    deleted: HashMap<String, u64>,
}

impl GroupState {
    fn bump(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Forgets a node the provider deleted (or gave up creating).
    fn remove(&mut self, name: &str) {
        if let Some(at) = self.position(name) {
            self.nodes.remove(at);
            self.target_size = self.target_size.saturating_sub(1);
        }
        let version = self.bump();
        self.deleted.insert(name.to_string(), version);
    }

    /// Merges a list of the group's Node objects taken when the state was at version `listed_at`:
    /// the target becomes the number of nodes. Nodes still being created or failed are kept
    /// (they have no Node object to list); so are changes the provider made after the list was
    /// taken.
    fn merge_listed(&mut self, listed: Vec<(String, String)>, listed_at: u64) {
        let listed_names: HashSet<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
        self.nodes.retain(|node| {
            node.status != NodeStatus::Running
                || node.changed > listed_at
                || listed_names.contains(node.name.as_str())
        });
        for (name, provider_id) in listed {
            let deleted_since_list = self
                .deleted
                .get(&name)
                .is_some_and(|&version| version > listed_at);
            if deleted_since_list {
                continue;
            }
            match self.position(&name) {
                Some(at) => self.nodes[at].status = NodeStatus::Running,
                None => self.nodes.push(GroupNode {
                    name,
                    provider_id,
                    status: NodeStatus::Running,
                    changed: listed_at,
                }),
            }
        }
        self.deleted.retain(|_, version| *version > listed_at);
        self.target_size = self.nodes.len();
    }
}

/// The part of a group its background creations share with it.
#[derive(Debug)]
struct Shared {
    id: String,
    template: Node,
    /// docs/behaviour.md KWOK-108: `false` when the group is a cloud without a
    /// cloud-controller-manager.
    cloud_controller_manager: bool,
    nodes_api: Api<Node>,
    state: Mutex<GroupState>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, GroupState> {
        // A panic elsewhere cannot leave the counters half-written; keep serving.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates the Node objects of `names`, [`API_CONCURRENCY`] at a time, recording each outcome
    /// in the state. A node the provider stopped wanting meanwhile (deleted, cleaned up) is not
    /// created, or deleted again if its creation was already under way.
    async fn create_nodes(self: Arc<Self>, names: Vec<String>) {
        let requested = names.len();
        let failures: Vec<String> = futures::stream::iter(names)
            .map(|name| Arc::clone(&self).create_node(name))
            .buffer_unordered(API_CONCURRENCY)
            .filter_map(|outcome| async move { outcome.err() })
            .collect()
            .await;
        match failures.first() {
            None => tracing::debug!(group = %self.id, count = requested, "kwok: new Nodes created"),
            Some(first) => tracing::warn!(
                group = %self.id,
                failed = failures.len(),
                requested,
                first_error = %first,
                "kwok: some new Nodes could not be created; they are reported as failed \
                 instances until the autoscaler deletes them"
            ),
        }
    }

    async fn create_node(self: Arc<Self>, name: String) -> Result<(), String> {
        let still_wanted = {
            let state = self.state();
            state
                .position(&name)
                .is_some_and(|at| state.nodes[at].status == NodeStatus::Creating)
        };
        if !still_wanted {
            return Ok(());
        }
        let node = if self.cloud_controller_manager {
            node_from_template(&self.template, &name)
        } else {
            uninitialized_node_from_template(&self.template, &name)
        };
        let created = self.nodes_api.create(&PostParams::default(), &node).await;
        let unwanted = {
            let mut state = self.state();
            let version = state.bump();
            let entry = state.position(&name);
            match (created, entry) {
                (Ok(_), Some(at)) => {
                    let node = &mut state.nodes[at];
                    node.status = NodeStatus::Running;
                    node.changed = version;
                    false
                }
                (Ok(_), None) => true,
                (Err(error), Some(at)) => {
                    let message = format!("creating Node {name}: {error}");
                    tracing::debug!(group = %self.id, error = %message, "kwok: creating a Node failed");
                    let node = &mut state.nodes[at];
                    node.status = NodeStatus::Failed(message.clone());
                    node.changed = version;
                    return Err(message);
                }
                // Failed, but no longer wanted either: nothing to report.
                (Err(_), None) => false,
            }
        };
        if unwanted {
            tracing::debug!(group = %self.id, node = %name, "kwok: deleting a Node created after it was no longer wanted");
            match self.nodes_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(format!(
                        "deleting Node {name}, created after it was no longer wanted: {error}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Deletes the machines of `names`, forgetting each one as soon as it is gone; returns the
    /// failures. With a cloud-controller-manager (the provider's own part) the Node object goes
    /// with the machine; without one the Node stays behind (docs/behaviour.md KWOK-108).
    async fn delete_nodes(&self, names: Vec<String>) -> Vec<String> {
        let forget = |name: &str| self.state().remove(name);
        if self.cloud_controller_manager {
            delete_node_objects(&self.nodes_api, names, forget).await
        } else {
            leave_node_objects(&self.nodes_api, names, forget).await
        }
    }
}

/// The machines of `names` are gone but, with no cloud-controller-manager to delete them, their
/// Node objects stay, as a kubelet's Node outlives its machine. kwok lets go of a Node it plays
/// only when the Node is deleted (it keeps renewing the Node's Lease otherwise), so each Node is
/// replaced by a copy that kwok does not play — kwok's annotation removed,
/// [`MACHINE_DELETED_ANNOTATION`] added, labels, taints and status kept — which the control
/// plane then marks not Ready as it would a kubelet that stopped. [`API_CONCURRENCY`] at a time;
/// calls `gone` for each machine deleted; returns the failures.
async fn leave_node_objects(
    nodes_api: &Api<Node>,
    names: Vec<String>,
    gone: impl Fn(&str),
) -> Vec<String> {
    let gone = &gone;
    futures::stream::iter(names)
        .map(|name| async move {
            match leave_node_object(nodes_api, &name).await {
                Ok(()) => {
                    gone(&name);
                    None
                }
                Err(error) => Some(format!("deleting the machine of Node {name}: {error}")),
            }
        })
        .buffer_unordered(API_CONCURRENCY)
        .filter_map(|failure| async move { failure })
        .collect()
        .await
}

/// Replaces one Node by its copy without kwok (see [`leave_node_objects`]).
async fn leave_node_object(nodes_api: &Api<Node>, name: &str) -> Result<(), kube::Error> {
    const CREATE_ATTEMPTS: usize = 20;
    let node = match nodes_api.get(name).await {
        Ok(node) => node,
        Err(error) if is_not_found(&error) => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut copy = node.clone();
    let meta = &mut copy.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.generation = None;
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    annotations.remove(KWOK_NODE_ANNOTATION);
    annotations.insert(MACHINE_DELETED_ANNOTATION.to_string(), "true".to_string());
    let delete = DeleteParams {
        preconditions: Some(Preconditions {
            uid: node.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match nodes_api.delete(name, &delete).await {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => return Ok(()),
        Err(error) => return Err(error),
    }
    // A Node has no finalizers of its own: it is gone at once, or after a moment.
    let mut attempt = 0;
    loop {
        attempt += 1;
        match nodes_api.create(&PostParams::default(), &copy).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < CREATE_ATTEMPTS => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Deletes the Node objects of `names`, [`API_CONCURRENCY`] at a time, calling `deleted` for each
/// one that is gone (already gone included); returns the failures.
async fn delete_node_objects(
    nodes_api: &Api<Node>,
    names: Vec<String>,
    deleted: impl Fn(&str),
) -> Vec<String> {
    let deleted = &deleted;
    futures::stream::iter(names)
        .map(|name| async move {
            match nodes_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Some(format!("deleting Node {name}: {error}")),
            }
            deleted(&name);
            None
        })
        .buffer_unordered(API_CONCURRENCY)
        .filter_map(|failure| async move { failure })
        .collect()
        .await
}

/// One kwok node group.
#[derive(Debug)]
pub struct KwokNodeGroup {
    spec: GroupSpec,
    shared: Arc<Shared>,
}

impl KwokNodeGroup {
    fn state(&self) -> MutexGuard<'_, GroupState> {
        self.shared.state()
    }

    fn new_node_name(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut rng = rand::rng();
        let suffix: String = (0..NODE_SUFFIX_LEN)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect();
        format!("{}-{suffix}", self.spec.id)
    }
}

fn is_kwok_node(annotations: &ferroscale_model::Labels) -> bool {
    annotations.get(KWOK_NODE_ANNOTATION).map(String::as_str) == Some(KWOK_NODE_ANNOTATION_VALUE)
}

/// The name of the node of `provider_id` (`kwok:<name>`), when it is one of this provider's.
fn name_of_provider_id(provider_id: &str) -> Option<&str> {
    provider_id.strip_prefix(templates::PROVIDER_ID_PREFIX)
}

#[async_trait]
impl NodeGroup for KwokNodeGroup {
    fn id(&self) -> &str {
        &self.spec.id
    }

    fn min_size(&self) -> usize {
        self.spec.min_size
    }

    fn max_size(&self) -> usize {
        self.spec.max_size
    }

    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(self.state().target_size)
    }

    /// Records the new target and the new nodes (as instances being created), then creates their
    /// Node objects in the background: the call answers at once at any size, and a node whose
    /// creation fails shows up in `nodes` as a failed instance.
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        if delta == 0 {
            return Err(CloudError::InvalidRequest(
                "size increase must be positive".to_string(),
            ));
        }
        let names = {
            let mut state = self.state();
            let wanted = state.target_size.saturating_add(delta);
            if wanted > self.spec.max_size {
                return Err(CloudError::InvalidRequest(format!(
                    "size increase too large for node group {}: desired {wanted}, max {}",
                    self.spec.id, self.spec.max_size
                )));
            }
            let version = state.bump();
            let mut names = Vec::with_capacity(delta);
            while names.len() < delta {
                let name = self.new_node_name();
                if state.position(&name).is_some() || names.contains(&name) {
                    continue;
                }
                names.push(name);
            }
            state.nodes.extend(names.iter().map(|name| GroupNode {
                provider_id: format!("{}{name}", templates::PROVIDER_ID_PREFIX),
                name: name.clone(),
                status: NodeStatus::Creating,
                changed: version,
            }));
            state.target_size = wanted;
            names
        };
        tracing::debug!(group = %self.spec.id, delta, "kwok: IncreaseSize");
        tokio::spawn(Arc::clone(&self.shared).create_nodes(names));
        Ok(())
    }

    /// Deletes the nodes' machines, and with them their Node objects unless the group has no
    /// cloud-controller-manager (KWOK-108); a node the group still creates or failed to create has
    /// no Node object yet, and is only forgotten (its creation, if under way, is undone when it
    /// ends).
    async fn delete_nodes(&self, nodes: &[ferroscale_model::Node]) -> Result<(), CloudError> {
        let mut to_delete = Vec::new();
        {
            let mut state = self.state();
            // A node the group knows is its own by name or provider id; placeholders the core
            // makes for instances without a Node object carry only the latter.
            let known: Vec<Option<GroupNode>> = nodes
                .iter()
                .map(|node| {
                    name_of_provider_id(&node.provider_id)
                        .and_then(|name| state.position(name))
                        .or_else(|| state.position(&node.name))
                        .map(|at| state.nodes[at].clone())
                })
                .collect();
            for (node, known) in nodes.iter().zip(&known) {
                if known.is_some() {
                    continue;
                }
                if !is_kwok_node(&node.annotations) {
                    return Err(CloudError::InvalidRequest(format!(
                        "node {} is not a kwok node (annotation {KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE} missing)",
                        node.name
                    )));
                }
                let group = node.annotations.get(GROUP_NAME_ANNOTATION);
                if group.map(String::as_str) != Some(self.spec.id.as_str()) {
                    return Err(CloudError::InvalidRequest(format!(
                        "node {} does not belong to node group {} ({GROUP_NAME_ANNOTATION}={})",
                        node.name,
                        self.spec.id,
                        group.map(String::as_str).unwrap_or("<none>")
                    )));
                }
            }
            let target = state.target_size;
            if target < self.spec.min_size.saturating_add(nodes.len()) {
                return Err(CloudError::InvalidRequest(format!(
                    "deleting {} nodes would take node group {} below its min size {} (target {target})",
                    nodes.len(),
                    self.spec.id,
                    self.spec.min_size
                )));
            }
            for (node, known) in nodes.iter().zip(known) {
                match known {
                    Some(entry) if entry.status != NodeStatus::Running => state.remove(&entry.name),
                    Some(entry) => to_delete.push(entry.name),
                    None => to_delete.push(node.name.clone()),
                }
            }
        }
        tracing::debug!(group = %self.spec.id, count = nodes.len(), "kwok: DeleteNodes");
        let failures = self.shared.delete_nodes(to_delete).await;
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CloudError::Provider(format!(
                "node group {}: {}",
                self.spec.id,
                failures.join("; ")
            )))
        }
    }

    async fn decrease_target_size(&self, delta: i64) -> Result<(), CloudError> {
        if delta >= 0 {
            return Err(CloudError::InvalidRequest(format!(
                "size decrease must be negative, got {delta}"
            )));
        }
        let mut state = self.state();
        let decrease = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
        let existing = state.nodes.len();
        match state.target_size.checked_sub(decrease) {
            Some(new_target) if new_target >= existing => {
                tracing::debug!(group = %self.spec.id, delta, "kwok: DecreaseTargetSize");
                state.target_size = new_target;
                state.bump();
                Ok(())
            }
            _ => Err(CloudError::InvalidRequest(format!(
                "attempt to delete existing nodes of node group {}: target {}, delta {delta}, existing nodes {existing}",
                self.spec.id, state.target_size
            ))),
        }
    }

    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self.state().nodes.iter().map(GroupNode::instance).collect())
    }

    async fn template_node_info(&self) -> Result<NodeTemplate, CloudError> {
        templates::template_node_info(&self.spec.template).map_err(|reason| {
            CloudError::Provider(format!("template of node group {}: {reason}", self.spec.id))
        })
    }

    async fn get_options(
        &self,
    ) -> Result<Option<ferroscale_core::cloud::GroupOptions>, CloudError> {
        Ok(None)
    }
}

/// What `refresh`, `cleanup` and the membership watch read of a listed Node: its name, annotations
/// and providerID, and the resourceVersion a watch resumes from.
/// Everything else (status, images, managed fields: most of each object's bytes) is skipped
/// while parsing instead of being built into a full `Node` and dropped; at 1,000 nodes that
/// parse, once per loop, took about a tenth of the autoscaler's CPU (docs/benchmarks.md, "The
/// live loop at 1,000 nodes").
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(from = "ListedNodeFields")]
struct ListedNode {
    metadata: ObjectMeta,
    provider_id: Option<String>,
}

#[derive(serde::Deserialize)]
struct ListedNodeFields {
    metadata: Option<ListedNodeMeta>,
    spec: Option<ListedNodeSpec>,
}

#[derive(serde::Deserialize)]
struct ListedNodeMeta {
    name: Option<String>,
    /// What a watch resumes from (the membership watch, KWOK-110).
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct ListedNodeSpec {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
}

impl From<ListedNodeFields> for ListedNode {
    fn from(fields: ListedNodeFields) -> ListedNode {
        let (name, resource_version, annotations) =
            fields.metadata.map_or((None, None, None), |meta| {
                (meta.name, meta.resource_version, meta.annotations)
            });
        ListedNode {
            metadata: ObjectMeta {
                name,
                resource_version,
                annotations,
                ..ObjectMeta::default()
            },
            provider_id: fields.spec.and_then(|spec| spec.provider_id),
        }
    }
}

/// Listed at the Nodes' own path: a `Node` in everything but what is parsed of it.
impl kube::Resource for ListedNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(dynamic: &()) -> std::borrow::Cow<'_, str> {
        Node::kind(dynamic)
    }
    fn group(dynamic: &()) -> std::borrow::Cow<'_, str> {
        Node::group(dynamic)
    }
    fn version(dynamic: &()) -> std::borrow::Cow<'_, str> {
        Node::version(dynamic)
    }
    fn api_version(dynamic: &()) -> std::borrow::Cow<'_, str> {
        Node::api_version(dynamic)
    }
    fn plural(dynamic: &()) -> std::borrow::Cow<'_, str> {
        Node::plural(dynamic)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The group of a Node the provider manages (kwok's fake-node annotation and a group
/// annotation); `None` for any other Node.
fn managed_group(node: &ListedNode) -> Option<&str> {
    let annotations = node.metadata.annotations.as_ref()?;
    if annotations.get(KWOK_NODE_ANNOTATION).map(String::as_str) != Some(KWOK_NODE_ANNOTATION_VALUE)
    {
        return None;
    }
    annotations.get(GROUP_NAME_ANNOTATION).map(String::as_str)
}

/// A managed Node's group and provider ID, what the membership watch compares.
fn managed_member(node: &ListedNode) -> Option<watch::Member> {
    Some((managed_group(node)?.to_owned(), node.provider_id.clone()))
}

/// What the last list of Nodes was taken against: the membership watch's change count and each
/// group's version when it started, and when.
#[derive(Debug)]
struct LastList {
    changes: u64,
    versions: Vec<u64>,
    started: Instant,
}

impl LastList {
    /// The cluster's managed Nodes are still the ones that list found, and the groups hold all
    /// it said: no membership change since it started, no change by the provider either (a
    /// change during the list is one the list may not show), and not too long ago.
    fn still_holds(&self, changes: u64, versions: &[u64], now: Instant) -> bool {
        self.changes == changes
            && self.versions == versions
            && now.duration_since(self.started) < watch::LIST_AT_LEAST_EVERY
    }
}

/// The kwok provider.
pub struct KwokProvider {
    config: KwokConfig,
    nodes_api: Api<Node>,
    /// The same Nodes, parsed only as far as [`ListedNode`].
    listed_nodes_api: Api<ListedNode>,
    groups: Vec<Arc<KwokNodeGroup>>,
    /// Started by the first `refresh` (which runs on a tokio runtime; building the provider
    /// need not).
    membership: OnceLock<watch::MembershipWatch>,
    last_list: Mutex<Option<LastList>>,
    node_lists: AtomicU64,
}

impl KwokProvider {
    /// Reads the configuration and templates and builds the groups, then refreshes them from the
    /// cluster's Nodes.
    pub async fn build(
        client: Client,
        source: &ConfigSource,
        namespace: Option<&str>,
    ) -> Result<KwokProvider, KwokError> {
        let config = load_config(&client, source).await?;
        let specs = load_group_specs(&client, &config, namespace).await?;
        let provider = KwokProvider::from_specs(client, config, specs);
        provider
            .refresh()
            .await
            .map_err(|e| KwokError::ClientConfig(format!("first refresh: {e}")))?;
        Ok(provider)
    }

    /// Groups from already parsed specs; targets start at each group's desired count until the
    /// first `refresh`.
    pub fn from_specs(client: Client, config: KwokConfig, specs: Vec<GroupSpec>) -> KwokProvider {
        let nodes_api: Api<Node> = Api::all(client.clone());
        let listed_nodes_api: Api<ListedNode> = Api::all(client);
        let groups = specs
            .into_iter()
            .map(|spec| {
                Arc::new(KwokNodeGroup {
                    shared: Arc::new(Shared {
                        id: spec.id.clone(),
                        template: spec.template.clone(),
                        cloud_controller_manager: spec.cloud_controller_manager,
                        nodes_api: nodes_api.clone(),
                        state: Mutex::new(GroupState {
                            target_size: spec.desired_size,
                            ..GroupState::default()
                        }),
                    }),
                    spec,
                })
            })
            .collect();
        KwokProvider {
            config,
            nodes_api,
            listed_nodes_api,
            groups,
            membership: OnceLock::new(),
            last_list: Mutex::new(None),
            node_lists: AtomicU64::new(0),
        }
    }

    /// How many times the provider has listed the cluster's Nodes (`refresh`, `cleanup`): a
    /// diagnostic, which shows that a quiet cluster's refreshes list nothing (KWOK-110).
    pub fn node_lists(&self) -> u64 {
        self.node_lists.load(Ordering::Relaxed)
    }

    fn last_list(&self) -> MutexGuard<'_, Option<LastList>> {
        self.last_list
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn groups(&self) -> &[Arc<KwokNodeGroup>] {
        &self.groups
    }

    /// Every Node this provider manages (the fake-node and group annotations), as much of each
    /// as `refresh` and `cleanup` read.
    async fn managed_nodes(&self) -> Result<Vec<ListedNode>, CloudError> {
        self.node_lists.fetch_add(1, Ordering::Relaxed);
        let list = self
            .listed_nodes_api
            .list(&ListParams::default())
            .await
            .map_err(|e| provider_error("listing Nodes", e))?;
        Ok(list
            .items
            .into_iter()
            .filter(|node| managed_group(node).is_some())
            .collect())
    }
}

#[async_trait]
impl CloudProvider for KwokProvider {
    fn name(&self) -> &str {
        "kwok"
    }

    fn gpu_label(&self) -> &str {
        &self.config.gpu.label_key
    }

    fn available_gpu_types(&self) -> Vec<String> {
        self.config.gpu.available_types.clone()
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .groups
            .iter()
            .map(|g| Arc::clone(g) as Arc<dyn NodeGroup>)
            .collect())
    }

    async fn node_group_for_node(
        &self,
        node: &ferroscale_model::Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        if !node.provider_id.starts_with("kwok") {
            return Ok(None);
        }
        let Some(group_id) =
            node.annotations
                .get(GROUP_NAME_ANNOTATION)
                .or_else(|| match &self.config.grouping {
                    GroupingKey::Label(key) => node.labels.get(key),
                    GroupingKey::Annotation(key) => node.annotations.get(key),
                })
        else {
            return Ok(None);
        };
        Ok(self
            .groups
            .iter()
            .find(|g| &g.spec.id == group_id)
            .map(|g| Arc::clone(g) as Arc<dyn NodeGroup>))
    }

    /// Whether a group of this provider has the node's machine (being created included).
    async fn has_instance(&self, node: &ferroscale_model::Node) -> Result<bool, CloudError> {
        Ok(self.groups.iter().any(|group| {
            group
                .state()
                .nodes
                .iter()
                .any(|n| n.provider_id == node.provider_id)
        }))
    }

    /// Lists the Nodes and merges each group's into its state, unless the membership watch says
    /// the last list still holds (KWOK-110).
    async fn refresh(&self) -> Result<(), CloudError> {
        let listed_at: Vec<u64> = self.groups.iter().map(|g| g.state().version).collect();
        let membership = self.membership.get_or_init(|| {
            watch::MembershipWatch::start(self.listed_nodes_api.clone(), managed_member)
        });
        // Read before the list starts: a change during the list moves it past this mark.
        let changes = membership.changes();
        let started = Instant::now();
        if let Some(changes) = changes
            && self
                .last_list()
                .as_ref()
                .is_some_and(|last| last.still_holds(changes, &listed_at, started))
        {
            return Ok(());
        }
        let nodes = self.managed_nodes().await?;
        for (group, listed_at) in self.groups.iter().zip(&listed_at) {
            let members: Vec<(String, String)> = nodes
                .iter()
                .filter(|node| managed_group(node) == Some(group.spec.id.as_str()))
                .map(|node| {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let provider_id = node
                        .provider_id
                        .clone()
                        .unwrap_or_else(|| format!("{}{name}", templates::PROVIDER_ID_PREFIX));
                    (name, provider_id)
                })
                .collect();
            group.state().merge_listed(members, *listed_at);
        }
        *self.last_list() = changes.map(|changes| LastList {
            changes,
            versions: listed_at,
            started,
        });
        Ok(())
    }

    /// Deletes every kwok Node of the provider's groups and forgets them at once, so that
    /// `nodes` and `target_size` no longer report them even before the next `refresh`. Creations
    /// still under way are abandoned (and their Nodes deleted when they complete).
    async fn cleanup(&self) -> Result<(), CloudError> {
        for group in &self.groups {
            let mut state = group.state();
            let pending: Vec<String> = state
                .nodes
                .iter()
                .filter(|node| node.status != NodeStatus::Running)
                .map(|node| node.name.clone())
                .collect();
            for name in pending {
                state.remove(&name);
            }
        }
        let names: Vec<String> = self
            .managed_nodes()
            .await?
            .into_iter()
            .filter_map(|node| node.metadata.name)
            .collect();
        let failures = delete_node_objects(&self.nodes_api, names, |name| {
            for group in &self.groups {
                let mut state = group.state();
                if state.position(name).is_some() {
                    state.remove(name);
                }
            }
        })
        .await;
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CloudError::Provider(format!(
                "deleting kwok Nodes: {}",
                failures.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    /// `refresh` reads a listed Node's name, annotations and providerID, and nothing else, from
    /// the Nodes' own path.
    #[test]
    fn a_listed_node_keeps_what_refresh_reads_and_skips_the_rest() {
        let full = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "kwok-fake-small-1",
                "uid": "u1",
                "resourceVersion": "42",
                "labels": {"kubernetes.io/hostname": "kwok-fake-small-1"},
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE, GROUP_NAME_ANNOTATION: "small"},
                "managedFields": [{"manager": "kwok", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"providerID": "kwok:kwok-fake-small-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1}],
            },
        });
        let listed: ListedNode = serde_json::from_value(full).expect("a Node parses");
        assert_eq!(listed.metadata.name.as_deref(), Some("kwok-fake-small-1"));
        assert_eq!(
            listed
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GROUP_NAME_ANNOTATION))
                .map(String::as_str),
            Some("small")
        );
        assert_eq!(
            listed.provider_id.as_deref(),
            Some("kwok:kwok-fake-small-1")
        );
        assert!(listed.metadata.labels.is_none() && listed.metadata.managed_fields.is_none());
        // A watch of listed Nodes resumes from the last one's version.
        assert_eq!(listed.metadata.resource_version.as_deref(), Some("42"));

        let bare: ListedNode =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "spec": null}))
                .expect("a Node without spec parses");
        assert_eq!(bare.provider_id, None);
        assert_eq!(ListedNode::url_path(&(), None), Node::url_path(&(), None));
    }

    fn node(name: &str, status: NodeStatus, changed: u64) -> GroupNode {
        GroupNode {
            name: name.to_string(),
            provider_id: format!("kwok:{name}"),
            status,
            changed,
        }
    }

    fn listed(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|name| (name.to_string(), format!("kwok:{name}")))
            .collect()
    }

    fn names(state: &GroupState) -> Vec<&str> {
        let mut names: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_refresh_keeps_nodes_still_being_created_or_failed_and_drops_nodes_gone_elsewhere() {
        let mut state = GroupState {
            target_size: 4,
            nodes: vec![
                node("a", NodeStatus::Running, 1),
                node("b", NodeStatus::Running, 1),
                node("c", NodeStatus::Creating, 1),
                node("d", NodeStatus::Failed("quota".into()), 1),
            ],
            version: 1,
            ..GroupState::default()
        };
        // `b` was deleted by someone else; `e` was created by someone else.
        state.merge_listed(listed(&["a", "e"]), 1);
        assert_eq!(names(&state), ["a", "c", "d", "e"]);
        assert_eq!(state.target_size, 4);
    }

    #[test]
    fn a_refresh_does_not_undo_what_the_provider_did_while_it_listed() {
        let mut state = GroupState {
            target_size: 2,
            nodes: vec![
                node("a", NodeStatus::Running, 1),
                node("b", NodeStatus::Creating, 1),
            ],
            version: 1,
            ..GroupState::default()
        };
        let listed_at = state.version;
        // While the list is read: `a` is deleted, `b`'s Node object is created.
        state.remove("a");
        let version = state.bump();
        state.nodes[0].status = NodeStatus::Running;
        state.nodes[0].changed = version;
        // The list predates both changes.
        state.merge_listed(listed(&["a"]), listed_at);
        assert_eq!(names(&state), ["b"]);
        assert_eq!(state.target_size, 1);
        // A later list that no longer shows `a` forgets the deletion.
        state.merge_listed(listed(&["b"]), state.version);
        assert!(state.deleted.is_empty());
        assert_eq!(names(&state), ["b"]);
    }

    #[test]
    fn instances_report_creation_and_its_failure() {
        let creating = node("c", NodeStatus::Creating, 0).instance();
        assert_eq!(
            creating.status.map(|s| (s.state, s.error)),
            Some((InstanceState::Creating, None))
        );
        let failed = node("d", NodeStatus::Failed("creating Node d: denied".into()), 0).instance();
        let status = failed.status.expect("a status");
        assert_eq!(status.state, InstanceState::Creating);
        let error = status.error.expect("error info");
        assert_eq!(
            (error.class, error.code.as_str(), error.message.as_str()),
            (
                ErrorClass::Other,
                CREATE_FAILED_CODE,
                "creating Node d: denied"
            )
        );
        assert_eq!(
            node("a", NodeStatus::Running, 0).instance(),
            Instance::running("kwok:a")
        );
    }
}
