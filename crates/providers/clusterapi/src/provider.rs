//! `ClusterApiProvider`: the `CloudProvider` over the management cluster's watch caches
//! (docs/clusterapi.md CAPI-07, CAPI-13, CAPI-21–CAPI-25, CAPI-56, CAPI-59) and the start-up
//! configuration (CAPI-01–CAPI-07).
//!
//! Deliberate differences from upstream, each an operator would want:
//! - a resource with a bad size annotation is skipped on its own with a warning Event; upstream
//!   drops every node group of the provider (docs/clusterapi.md CAPI-Q1);
//! - waiting for an infrastructure template cache is bounded (CAPI-Q8);
//! - Machine template labels are read from Cluster API's real path as well (CAPI-Q5, see
//!   `template`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferroscale_core::cloud::resize_merge::ResizeMerger;
use ferroscale_core::cloud::{CloudError, CloudProvider, GpuConfig, NodeGroup};
use ferroscale_model::Node;
use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::api::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};

use crate::discovery::{self, DiscoverySpec};
use crate::ids::{SyntheticId, normalize_provider_id};
use crate::keys::{self, Keys};
use crate::management::{
    CapiResources, InfrastructureCaches, StartError, WarningEvents, WatchedStore, wait_synced,
    watch_dynamic, watch_nodes,
};
use crate::node_group::ClusterApiNodeGroup;
use crate::rollout;
use crate::scalable::{self, ScalableKind};

/// How long start-up waits for the initial lists of the management and workload caches.
const INITIAL_SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a template lookup waits for a new infrastructure template cache (docs/clusterapi.md
/// CAPI-Q8).
const TEMPLATE_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the provider's two clients come from (docs/clusterapi.md CAPI-07). `None` means the
/// in-cluster service account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigPaths {
    pub management: Option<PathBuf>,
    pub workload: Option<PathBuf>,
}

impl KubeconfigPaths {
    /// docs/clusterapi.md CAPI-07: the management cluster is `--cloud-config`; when that is empty
    /// it is `--kubeconfig` unless `--clusterapi-cloud-config-authoritative` is set, in which case
    /// it is the in-cluster configuration. The workload cluster is always `--kubeconfig`.
    pub fn select(
        cloud_config: Option<&Path>,
        kubeconfig: Option<&Path>,
        authoritative: bool,
    ) -> KubeconfigPaths {
        let management = match cloud_config {
            Some(path) => Some(path.to_path_buf()),
            None if authoritative => None,
            None => kubeconfig.map(Path::to_path_buf),
        };
        KubeconfigPaths {
            management,
            workload: kubeconfig.map(Path::to_path_buf),
        }
    }
}

/// Start-up configuration from the environment and the discovery flags (docs/clusterapi.md
/// CAPI-01–CAPI-06).
#[derive(Debug, Clone)]
pub struct ClusterApiConfig {
    pub keys: Keys,
    /// `CAPI_VERSION`; `None` discovers the preferred version.
    pub version: Option<String>,
    pub discovery: Vec<DiscoverySpec>,
    /// `CAPI_SCALE_ZERO_DEFAULT_ARCH`, validated.
    pub default_architecture: String,
    pub initial_sync_timeout: Duration,
    pub template_sync_timeout: Duration,
}

/// A configuration the provider cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--node-group-auto-discovery: {0}")]
    Discovery(#[from] discovery::DiscoveryError),
}

impl ClusterApiConfig {
    /// Reads `CAPI_GROUP`, `CAPI_VERSION` and `CAPI_SCALE_ZERO_DEFAULT_ARCH` through `env` (the
    /// process environment in the binary) and parses the `--node-group-auto-discovery` specs.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        discovery_specs: &[String],
    ) -> Result<ClusterApiConfig, ConfigError> {
        let keys = Keys::new(env("CAPI_GROUP").as_deref());
        let version = env("CAPI_VERSION").filter(|v| !v.is_empty());
        let (default_architecture, warning) =
            keys::default_architecture(env("CAPI_SCALE_ZERO_DEFAULT_ARCH").as_deref());
        if let Some(warning) = warning {
            tracing::error!("{warning}");
        }
        Ok(ClusterApiConfig {
            keys,
            version,
            discovery: discovery::parse_specs(discovery_specs)?,
            default_architecture,
            initial_sync_timeout: INITIAL_SYNC_TIMEOUT,
            template_sync_timeout: TEMPLATE_SYNC_TIMEOUT,
        })
    }
}

/// What every node group of the provider shares: clients, caches and the deletion lock.
pub(crate) struct Shared {
    pub config: ClusterApiConfig,
    pub resources: CapiResources,
    pub management: Client,
    pub machine_deployments: Option<WatchedStore<DynamicObject>>,
    pub machine_sets: WatchedStore<DynamicObject>,
    pub machines: WatchedStore<DynamicObject>,
    pub machine_pools: Option<WatchedStore<DynamicObject>>,
    pub nodes: WatchedStore<K8sNode>,
    pub infrastructure: InfrastructureCaches,
    pub events: WarningEvents,
    /// docs/clusterapi.md CAPI-42: one deletion at a time across every group, so replicas read
    /// under it are current.
    pub delete_lock: tokio::sync::Mutex<()>,
    /// docs/clusterapi.md CAPI-62: one size change per group at a time, increases that arrive
    /// meanwhile merged into one PATCH (answering the replicas it set). Shared because groups
    /// are rebuilt at every call.
    pub resizes: ResizeMerger<i64>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("group", &self.resources.group)
            .field("version", &self.resources.version)
            .finish()
    }
}

/// The Cluster API cloud provider.
#[derive(Debug, Clone)]
pub struct ClusterApiProvider {
    shared: Arc<Shared>,
}

impl ClusterApiProvider {
    /// Discovers the API (docs/clusterapi.md CAPI-04, CAPI-05), starts the watches (CAPI-59) and
    /// waits for their initial lists. Every failure is fatal, as upstream.
    pub async fn start(
        management: Client,
        workload: Client,
        config: ClusterApiConfig,
    ) -> Result<ClusterApiProvider, StartError> {
        let resources =
            CapiResources::discover(&management, config.keys.group(), config.version.as_deref())
                .await?;
        let namespace = discovery::watch_namespace(&config.discovery);
        let watch =
            |resource: &ApiResource| watch_dynamic(&management, resource, namespace.as_deref());
        let machine_deployments = resources.machine_deployments.as_ref().map(watch);
        let machine_sets = watch(&resources.machine_sets);
        let machines = watch(&resources.machines);
        let machine_pools = resources.machine_pools.as_ref().map(watch);
        let nodes = watch_nodes(&workload);
        let timeout = config.initial_sync_timeout;
        if let Some(store) = &machine_deployments {
            wait_synced(&store.store, "machinedeployments", timeout).await?;
        }
        wait_synced(&machine_sets.store, "machinesets", timeout).await?;
        wait_synced(&machines.store, "machines", timeout).await?;
        if let Some(store) = &machine_pools {
            wait_synced(&store.store, "machinepools", timeout).await?;
        }
        wait_synced(&nodes.store, "workload nodes", timeout).await?;
        tracing::info!(
            group = %resources.group,
            version = %resources.version,
            machine_deployments = machine_deployments.is_some(),
            machine_pools = machine_pools.is_some(),
            namespace = namespace.as_deref().unwrap_or("(all)"),
            "Cluster API provider watching the management cluster"
        );
        let infrastructure =
            InfrastructureCaches::new(management.clone(), namespace, config.template_sync_timeout);
        Ok(ClusterApiProvider {
            shared: Arc::new(Shared {
                events: WarningEvents::new(management.clone()),
                config,
                resources,
                management,
                machine_deployments,
                machine_sets,
                machines,
                machine_pools,
                nodes,
                infrastructure,
                delete_lock: tokio::sync::Mutex::new(()),
                resizes: ResizeMerger::new(),
            }),
        })
    }

    /// The group/version in effect (docs/clusterapi.md CAPI-04).
    pub fn group_version(&self) -> (&str, &str) {
        (&self.shared.resources.group, &self.shared.resources.version)
    }

    /// Whether MachineDeployments and MachinePools are served and watched (docs/clusterapi.md
    /// CAPI-05).
    pub fn watches(&self) -> (bool, bool) {
        (
            self.shared.machine_deployments.is_some(),
            self.shared.machine_pools.is_some(),
        )
    }
}

impl Shared {
    pub(crate) fn store(&self, kind: ScalableKind) -> Option<&WatchedStore<DynamicObject>> {
        match kind {
            ScalableKind::MachineDeployment => self.machine_deployments.as_ref(),
            ScalableKind::MachineSet => Some(&self.machine_sets),
            ScalableKind::MachinePool => self.machine_pools.as_ref(),
        }
    }

    pub(crate) fn api_resource(&self, kind: ScalableKind) -> Option<&ApiResource> {
        match kind {
            ScalableKind::MachineDeployment => self.resources.machine_deployments.as_ref(),
            ScalableKind::MachineSet => Some(&self.resources.machine_sets),
            ScalableKind::MachinePool => self.resources.machine_pools.as_ref(),
        }
    }

    fn allowed(&self, object: &DynamicObject) -> bool {
        discovery::is_allowed(&self.config.discovery, object, &self.config.keys)
    }

    /// A scalable resource or Machine by namespace/name, treated as absent when discovery does
    /// not allow it (docs/clusterapi.md CAPI-11).
    fn by_key(
        &self,
        store: &WatchedStore<DynamicObject>,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        store
            .store
            .find(|o| o.namespace().as_deref() == Some(namespace) && o.name_any() == name)
            .filter(|o| self.allowed(o))
    }

    pub(crate) fn machine_by_key(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.by_key(&self.machines, namespace, name)
    }

    /// The workload Node whose normalised provider id is `id`.
    pub(crate) fn node_by_normalized_id(&self, id: &str) -> Option<Arc<K8sNode>> {
        if id.is_empty() {
            return None;
        }
        self.nodes.store.find(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| normalize_provider_id(p) == id)
        })
    }

    /// The provider id of the workload Node named `name`.
    pub(crate) fn node_provider_id(&self, name: &str) -> Option<String> {
        self.nodes
            .store
            .find(|n| n.name_any() == name)
            .and_then(|n| n.spec.as_ref()?.provider_id.clone())
    }

    /// docs/clusterapi.md CAPI-24: the Machine behind a normalised provider id.
    pub(crate) fn find_machine(&self, id: &str) -> Result<Option<Arc<DynamicObject>>, CloudError> {
        if !id.is_empty() {
            let hits: Vec<Arc<DynamicObject>> = self.machines.store.state_filter(|m| {
                machine_provider_id(m).is_some_and(|p| normalize_provider_id(p) == id)
            });
            match hits.len() {
                0 => {}
                1 => return Ok(hits.into_iter().next()),
                n => {
                    return Err(CloudError::Provider(format!(
                        "{n} Machines have provider id {id}"
                    )));
                }
            }
        }
        if let Some(synthetic) = SyntheticId::parse(id) {
            return Ok(self.machine_by_key(synthetic.namespace(), synthetic.name()));
        }
        let Some(node) = self.node_by_normalized_id(id) else {
            return Ok(None);
        };
        let annotations = node.annotations();
        let keys = &self.config.keys;
        match (
            annotations.get(&keys.node_cluster_namespace()),
            annotations.get(&keys.node_machine()),
        ) {
            (Some(namespace), Some(machine)) => Ok(self.machine_by_key(namespace, machine)),
            _ => Ok(None),
        }
    }

    /// docs/clusterapi.md CAPI-22, CAPI-23, CAPI-25: the scalable resource behind a normalised
    /// provider id.
    pub(crate) fn resource_for_id(
        &self,
        id: &str,
    ) -> Result<Option<(ScalableKind, Arc<DynamicObject>)>, CloudError> {
        if let Some(pools) = &self.machine_pools
            && !id.is_empty()
        {
            let hits = pools.store.state_filter(|pool| {
                provider_id_list(pool)
                    .iter()
                    .any(|p| normalize_provider_id(p) == id)
            });
            match hits.len() {
                0 => {}
                1 => {
                    return Ok(hits
                        .into_iter()
                        .next()
                        .map(|pool| (ScalableKind::MachinePool, pool)));
                }
                n => {
                    return Err(CloudError::Provider(format!(
                        "{n} MachinePools list provider id {id}"
                    )));
                }
            }
        }
        let Some(machine) = self.find_machine(id)? else {
            return Ok(None);
        };
        let namespace = machine.namespace().unwrap_or_default();
        let Some(set_name) = scalable::owner_name(&machine, "MachineSet") else {
            return Ok(None);
        };
        let Some(machine_set) = self.by_key(&self.machine_sets, &namespace, set_name) else {
            return Ok(None);
        };
        if let Some(deployments) = &self.machine_deployments
            && let Some(deployment_name) = scalable::owner_name(&machine_set, "MachineDeployment")
            && let Some(deployment) = self.by_key(deployments, &namespace, deployment_name)
        {
            return Ok(Some((ScalableKind::MachineDeployment, deployment)));
        }
        Ok(Some((ScalableKind::MachineSet, machine_set)))
    }
}

impl Shared {
    /// docs/clusterapi.md CAPI-22 without building the group: the unpaused scalable resource behind
    /// a node's provider id (normalised here), `None` when the node is not autoscaled.
    pub(crate) fn active_resource(
        &self,
        provider_id: &str,
    ) -> Result<Option<(ScalableKind, Arc<DynamicObject>)>, CloudError> {
        Ok(self
            .resource_for_id(normalize_provider_id(provider_id))?
            .filter(|(_, resource)| !scalable::is_paused(resource)))
    }
}

/// `spec.providerID` of a Machine, when set and non-empty.
pub(crate) fn machine_provider_id(machine: &DynamicObject) -> Option<&str> {
    machine.data["spec"]["providerID"]
        .as_str()
        .filter(|p| !p.is_empty())
}

/// `spec.providerIDList` of a MachinePool.
pub(crate) fn provider_id_list(pool: &DynamicObject) -> Vec<&str> {
    pool.data["spec"]["providerIDList"]
        .as_array()
        .map(|ids| ids.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default()
}

#[async_trait]
impl CloudProvider for ClusterApiProvider {
    fn name(&self) -> &str {
        "clusterapi"
    }

    fn gpu_label(&self) -> &str {
        keys::GPU_LABEL
    }

    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        crate::gpu::node_gpu_config(node)
    }

    /// docs/clusterapi.md CAPI-13, CAPI-18, CAPI-19: every allowed, unpaused resource with a
    /// positive max size. MachineSets owned by a MachineDeployment are never groups of their own.
    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        let mut groups: Vec<Arc<dyn NodeGroup>> = Vec::new();
        for kind in [
            ScalableKind::MachineSet,
            ScalableKind::MachineDeployment,
            ScalableKind::MachinePool,
        ] {
            let Some(store) = self.shared.store(kind) else {
                continue;
            };
            let mut candidates = store.store.state();
            candidates.sort_by_key(|o| (o.namespace(), o.name_any()));
            for object in candidates {
                if kind == ScalableKind::MachineSet
                    && scalable::owned_by_machine_deployment(&object)
                {
                    continue;
                }
                if !self.shared.allowed(&object) || scalable::is_paused(&object) {
                    continue;
                }
                // A resource that cannot be built was reported on the object; the others
                // keep working (the deliberate difference docs/clusterapi.md CAPI-Q1).
                if let Ok(Some(group)) =
                    ClusterApiNodeGroup::build(Arc::clone(&self.shared), kind, object).await
                {
                    groups.push(Arc::new(group));
                }
            }
        }
        Ok(groups)
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        let failed = |e: CloudError| {
            CloudError::Provider(format!(
                "failed to build nodegroup for node {}: {e}",
                node.name
            ))
        };
        let Some((kind, resource)) = self
            .shared
            .active_resource(&node.provider_id)
            .map_err(failed)?
        else {
            return Ok(None);
        };
        Ok(
            ClusterApiNodeGroup::build(Arc::clone(&self.shared), kind, resource)
                .await
                .map_err(failed)?
                .map(|g| Arc::new(g) as Arc<dyn NodeGroup>),
        )
    }

    /// docs/clusterapi.md CAPI-Q11 (kept from upstream): the Machine named by the node's
    /// annotations.
    async fn has_instance(&self, node: &Node) -> Result<bool, CloudError> {
        let keys = &self.shared.config.keys;
        let machine = match (
            node.annotations.get(&keys.node_cluster_namespace()),
            node.annotations.get(&keys.node_machine()),
        ) {
            (Some(namespace), Some(name)) => self.shared.machine_by_key(namespace, name),
            _ => None,
        };
        match machine {
            Some(_) => Ok(true),
            None => Err(CloudError::Provider(format!(
                "machine not found for node {}",
                node.name
            ))),
        }
    }

    /// docs/clusterapi.md CAPI-57: nodes of a MachineDeployment that is rolling out (or whose
    /// rollout state cannot be read) stay out of scale-down, as do nodes whose group cannot be
    /// found.
    async fn scale_down_vetoes(&self, nodes: &[Arc<Node>]) -> HashSet<String> {
        let mut vetoed = HashSet::new();
        let mut rolling: HashMap<String, bool> = HashMap::new();
        let machine_sets = self.shared.machine_sets.store.state();
        let machine_sets: Vec<&DynamicObject> = machine_sets.iter().map(Arc::as_ref).collect();
        for node in nodes {
            let id = normalize_provider_id(&node.provider_id);
            let resource = match self.shared.resource_for_id(id) {
                Ok(Some((kind, resource))) => (kind, resource),
                Ok(None) => {
                    tracing::debug!(node = %node.name, "no node group: not a scale-down candidate");
                    vetoed.insert(node.name.clone());
                    continue;
                }
                Err(error) => {
                    tracing::warn!(node = %node.name, %error, "node group lookup failed: not a scale-down candidate");
                    vetoed.insert(node.name.clone());
                    continue;
                }
            };
            let (ScalableKind::MachineDeployment, deployment) = resource else {
                continue;
            };
            let key = format!(
                "{}/{}",
                deployment.namespace().unwrap_or_default(),
                deployment.name_any()
            );
            let rolling_out = match rolling.get(&key) {
                Some(known) => *known,
                None => {
                    let answer = match rollout::is_rolling_out(&deployment, &machine_sets) {
                        Ok(answer) => answer,
                        Err(error) => {
                            tracing::warn!(deployment = %key, %error, "rollout state unknown: keeping its nodes");
                            true
                        }
                    };
                    if answer {
                        tracing::info!(deployment = %key, "MachineDeployment is rolling out: its nodes are not scale-down candidates");
                    }
                    rolling.insert(key, answer);
                    answer
                }
            };
            if rolling_out {
                vetoed.insert(node.name.clone());
            }
        }
        vetoed
    }

    /// Freshness comes from the watches (docs/clusterapi.md CAPI-59).
    async fn refresh(&self) -> Result<(), CloudError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/clusterapi.md CAPI-07 and the four layouts of docs/clusterapi.md.
    #[test]
    fn c07_management_kubeconfig_follows_cloud_config_then_kubeconfig_unless_authoritative() {
        let workload = Path::new("/workload");
        let management = Path::new("/management");
        // One kubeconfig for both.
        assert_eq!(
            KubeconfigPaths::select(None, Some(workload), false),
            KubeconfigPaths {
                management: Some(workload.into()),
                workload: Some(workload.into()),
            }
        );
        // The authoritative flag: the management cluster is the in-cluster one.
        assert_eq!(
            KubeconfigPaths::select(None, Some(workload), true),
            KubeconfigPaths {
                management: None,
                workload: Some(workload.into()),
            }
        );
        // Two kubeconfigs; --cloud-config wins whatever the flag says.
        for authoritative in [false, true] {
            assert_eq!(
                KubeconfigPaths::select(Some(management), Some(workload), authoritative),
                KubeconfigPaths {
                    management: Some(management.into()),
                    workload: Some(workload.into()),
                }
            );
        }
        // In the workload cluster with --cloud-config only.
        assert_eq!(
            KubeconfigPaths::select(Some(management), None, false),
            KubeconfigPaths {
                management: Some(management.into()),
                workload: None,
            }
        );
        // Both in-cluster.
        assert_eq!(
            KubeconfigPaths::select(None, None, false),
            KubeconfigPaths {
                management: None,
                workload: None,
            }
        );
    }

    #[test]
    fn configuration_comes_from_the_capi_variables_and_discovery_flags() {
        let env = |name: &str| match name {
            "CAPI_GROUP" => Some("test.k8s.io".to_string()),
            "CAPI_VERSION" => Some("v1beta1".to_string()),
            "CAPI_SCALE_ZERO_DEFAULT_ARCH" => Some("arm64".to_string()),
            _ => None,
        };
        let config =
            ClusterApiConfig::from_env(env, &["clusterapi:namespace=a".to_string()]).unwrap();
        assert_eq!(config.keys.group(), "test.k8s.io");
        assert_eq!(config.version.as_deref(), Some("v1beta1"));
        assert_eq!(config.default_architecture, "arm64");
        assert_eq!(config.discovery.len(), 1);
        let config =
            ClusterApiConfig::from_env(|name| (name == "CAPI_VERSION").then(String::new), &[])
                .unwrap();
        assert_eq!(config.keys.group(), "cluster.x-k8s.io");
        assert_eq!(config.version, None, "an empty CAPI_VERSION means discover");
        let err =
            ClusterApiConfig::from_env(|_| None, &["clusterapi:a=b=c".to_string()]).unwrap_err();
        assert!(err.to_string().contains("clusterapi:a=b=c"), "{err}");
    }
}
