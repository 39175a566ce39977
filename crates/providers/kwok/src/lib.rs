//! The kwok cloud provider (docs/behaviour.md KWOK-101–KWOK-103): node groups whose "machines" are
//! Node objects created in the cluster itself and brought to life by kwok, which plays their
//! kubelet. Useful to exercise the whole autoscaler against a real API server without a cloud.
//!
//! - [`config`]: the configuration document (`readNodesFrom`, grouping key, taint, GPUs).
//! - [`templates`]: template nodes → groups, bounds, prepared fake nodes.
//! - [`KwokProvider`] / [`KwokNodeGroup`]: the `CloudProvider` and `NodeGroup` implementations.
//!
//! The provider keeps each group's target size in memory, as upstream does: `refresh` resets it
//! to the number of existing nodes, so a restart loses nothing that matters.

pub mod config;
pub mod templates;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use ferroscale_core::cloud::{CloudError, CloudProvider, Instance, NodeGroup, NodeTemplate};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rand::RngExt;
use thiserror::Error;

pub use config::{ConfigError, GroupingKey, KwokConfig, ReadNodesFrom};
pub use templates::{GroupSpec, TemplateError};

use templates::{
    GROUP_NAME_ANNOTATION, KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE, node_from_template,
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

/// A node this provider created, as the group remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupNode {
    name: String,
    provider_id: String,
}

#[derive(Debug, Default)]
struct GroupState {
    target_size: usize,
    nodes: Vec<GroupNode>,
}

/// One kwok node group.
#[derive(Debug)]
pub struct KwokNodeGroup {
    spec: GroupSpec,
    nodes_api: Api<Node>,
    state: Mutex<GroupState>,
}

impl KwokNodeGroup {
    fn state(&self) -> MutexGuard<'_, GroupState> {
        // A panic elsewhere cannot leave the counters half-written; keep serving.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        if delta == 0 {
            return Err(CloudError::InvalidRequest(
                "size increase must be positive".to_string(),
            ));
        }
        let target = self.state().target_size;
        let wanted = target.saturating_add(delta);
        if wanted > self.spec.max_size {
            return Err(CloudError::InvalidRequest(format!(
                "size increase too large for node group {}: desired {wanted}, max {}",
                self.spec.id, self.spec.max_size
            )));
        }
        tracing::debug!(group = %self.spec.id, delta, "kwok: IncreaseSize");
        for _ in 0..delta {
            let name = self.new_node_name();
            let node = node_from_template(&self.spec.template, &name);
            self.nodes_api
                .create(&PostParams::default(), &node)
                .await
                .map_err(|e| provider_error(format_args!("creating Node {name}"), e))?;
            let mut state = self.state();
            state.target_size += 1;
            state.nodes.push(GroupNode {
                provider_id: format!("{}{name}", templates::PROVIDER_ID_PREFIX),
                name,
            });
        }
        Ok(())
    }

    async fn delete_nodes(&self, nodes: &[ferroscale_model::Node]) -> Result<(), CloudError> {
        for node in nodes {
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
        let target = self.state().target_size;
        if target < self.spec.min_size.saturating_add(nodes.len()) {
            return Err(CloudError::InvalidRequest(format!(
                "deleting {} nodes would take node group {} below its min size {} (target {target})",
                nodes.len(),
                self.spec.id,
                self.spec.min_size
            )));
        }
        tracing::debug!(group = %self.spec.id, count = nodes.len(), "kwok: DeleteNodes");
        for node in nodes {
            match self
                .nodes_api
                .delete(&node.name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(provider_error(
                        format_args!("deleting Node {}", node.name),
                        e,
                    ));
                }
            }
            let mut state = self.state();
            state.nodes.retain(|n| n.name != node.name);
            state.target_size = state.target_size.saturating_sub(1);
        }
        Ok(())
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
                Ok(())
            }
            _ => Err(CloudError::InvalidRequest(format!(
                "attempt to delete existing nodes of node group {}: target {}, delta {delta}, existing nodes {existing}",
                self.spec.id, state.target_size
            ))),
        }
    }

    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self
            .state()
            .nodes
            .iter()
            .map(|n| Instance::running(n.provider_id.clone()))
            .collect())
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

/// The kwok provider.
pub struct KwokProvider {
    config: KwokConfig,
    nodes_api: Api<Node>,
    groups: Vec<Arc<KwokNodeGroup>>,
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
        let nodes_api: Api<Node> = Api::all(client);
        let groups = specs
            .into_iter()
            .map(|spec| {
                Arc::new(KwokNodeGroup {
                    state: Mutex::new(GroupState {
                        target_size: spec.desired_size,
                        nodes: Vec::new(),
                    }),
                    spec,
                    nodes_api: nodes_api.clone(),
                })
            })
            .collect();
        KwokProvider {
            config,
            nodes_api,
            groups,
        }
    }

    pub fn groups(&self) -> &[Arc<KwokNodeGroup>] {
        &self.groups
    }

    /// Every Node this provider manages (the fake-node and group annotations).
    async fn managed_nodes(&self) -> Result<Vec<Node>, CloudError> {
        let list = self
            .nodes_api
            .list(&ListParams::default())
            .await
            .map_err(|e| provider_error("listing Nodes", e))?;
        Ok(list
            .items
            .into_iter()
            .filter(|node| {
                node.metadata.annotations.as_ref().is_some_and(|a| {
                    a.get(KWOK_NODE_ANNOTATION).map(String::as_str)
                        == Some(KWOK_NODE_ANNOTATION_VALUE)
                        && a.contains_key(GROUP_NAME_ANNOTATION)
                })
            })
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

    async fn has_instance(&self, _node: &ferroscale_model::Node) -> Result<bool, CloudError> {
        Ok(true)
    }

    async fn refresh(&self) -> Result<(), CloudError> {
        let nodes = self.managed_nodes().await?;
        for group in &self.groups {
            let members: Vec<GroupNode> = nodes
                .iter()
                .filter(|node| {
                    node.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(GROUP_NAME_ANNOTATION))
                        == Some(&group.spec.id)
                })
                .map(|node| {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    GroupNode {
                        provider_id: node
                            .spec
                            .as_ref()
                            .and_then(|s| s.provider_id.clone())
                            .unwrap_or_else(|| format!("{}{name}", templates::PROVIDER_ID_PREFIX)),
                        name,
                    }
                })
                .collect();
            let mut state = group.state();
            state.target_size = members.len();
            state.nodes = members;
        }
        Ok(())
    }

    async fn cleanup(&self) -> Result<(), CloudError> {
        let nodes = self.managed_nodes().await?;
        let mut failures = Vec::new();
        for node in nodes {
            let name = node.metadata.name.unwrap_or_default();
            match self.nodes_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
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
