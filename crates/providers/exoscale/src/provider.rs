//! The `CloudProvider` and its node groups (docs/exoscale.md EXO-07–EXO-30): node → group
//! resolution through the API, the cache of discovered groups, and the operations of Instance Pool
//! and SKS Nodepool groups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use ferroscale_core::cloud::resize_merge::{MergedResize, ResizeMerger};
use ferroscale_core::cloud::{
    CloudError, CloudProvider, ErrorClass, GpuConfig, Instance, InstanceErrorInfo, InstanceState,
    InstanceStatus, NodeGroup,
};
use ferroscale_model::Node;
use futures::{StreamExt, TryStreamExt, stream};
use tracing::{debug, error, info, warn};

use crate::api::{self, MANAGER_INSTANCE_POOL, MANAGER_SKS_NODEPOOL};
use crate::client::{ApiClient, ClientOptions};
use crate::config::{ConfigError, ExoscaleConfig, NodeGroupSpec};
use crate::operations::{Timing, complete_operation, wait_until_running};

/// The value of `--cloud-provider`.
pub const PROVIDER_NAME: &str = "exoscale";

/// Prefix of the nodes' `spec.providerID`.
pub const PROVIDER_ID_PREFIX: &str = "exoscale://";

/// The legacy control-plane taint that exempts a node without provider ID (docs/exoscale.md EXO-Q4:
/// not `node-role.kubernetes.io/control-plane`).
pub const MASTER_TAINT: &str = "node-role.kubernetes.io/master";

/// Max size of a group without `--nodes` bounds when the instance quota is unlimited (`limit`
/// −1, docs/exoscale.md EXO-Q2): 5,000 nodes, the largest cluster Kubernetes supports. Upstream
/// would keep −1 and refuse every scale-up.
pub const UNLIMITED_QUOTA_MAX: i64 = 5000;

/// Error info of an instance in a state the core has no name for (docs/exoscale.md EXO-24).
pub const UNKNOWN_STATE_ERROR_CODE: &str = "no-code-exoscale";

/// Instance reads in flight at once in `nodes()`.
const CONCURRENT_INSTANCE_READS: usize = 8;

/// GPU resources a node may carry, for the generic GPU config.
const GPU_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "habana.ai/gaudi",
    "gpu.intel.com/xe",
    "amd.com/gpu",
    "microsoft.com/directx",
];

/// Everything the provider builds once and its groups share.
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    pub client: ClientOptions,
    pub timing: Timing,
}

#[derive(Debug)]
struct Shared {
    client: ApiClient,
    zone: String,
    node_specs: Vec<String>,
    timing: Timing,
    /// One resize call per group at a time, increases merged while one is in flight
    /// (docs/exoscale.md EXO-33). Shared because groups are rebuilt on every lookup.
    resizes: ResizeMerger,
    /// Each group's size and members, shared by every object of the group: a merged call made
    /// through one object must be seen by the others (docs/exoscale.md EXO-17, EXO-33).
    caches: Mutex<HashMap<String, Arc<Mutex<GroupCache>>>>,
}

/// The Exoscale cloud provider.
#[derive(Debug)]
pub struct ExoscaleProvider {
    shared: Arc<Shared>,
    /// Groups discovered through `node_group_for_node`, in discovery order.
    groups: Mutex<Vec<Arc<ExoscaleNodeGroup>>>,
}

impl ExoscaleProvider {
    /// Reads the configuration through `lookup` (in the binary `|name| std::env::var(name).ok()`)
    /// and builds the provider without calling the API. `node_specs` are the `--nodes` values,
    /// checked only when a group's bounds are looked up (as upstream).
    pub fn from_env(
        lookup: impl Fn(&str) -> Option<String>,
        node_specs: Vec<String>,
        options: ProviderOptions,
    ) -> Result<ExoscaleProvider, ConfigError> {
        ExoscaleProvider::new(&ExoscaleConfig::from_lookup(lookup)?, node_specs, options)
    }

    /// [`ExoscaleProvider::from_env`] on the process environment with the default options: what
    /// `ferroscale run` and `serve-provider` use, `nodes` being the `--nodes` values.
    pub fn from_process_env(nodes: &[String]) -> Result<ExoscaleProvider, ConfigError> {
        ExoscaleProvider::from_env(
            |name| std::env::var(name).ok(),
            nodes.to_vec(),
            ProviderOptions::default(),
        )
    }

    /// Builds the provider from an explicit configuration (e.g. one whose `endpoint` points at a
    /// local fake of the API).
    pub fn new(
        config: &ExoscaleConfig,
        node_specs: Vec<String>,
        options: ProviderOptions,
    ) -> Result<ExoscaleProvider, ConfigError> {
        for spec in &node_specs {
            if let Err(error) = NodeGroupSpec::parse(spec) {
                warn!(%error, "this --nodes value will fail node group lookups that examine it");
            }
        }
        let client = ApiClient::new(config, options.client)?;
        info!(zone = %config.zone, endpoint = %client.base_url(), "exoscale provider configured");
        Ok(ExoscaleProvider {
            shared: Arc::new(Shared {
                client,
                zone: config.zone.clone(),
                node_specs,
                timing: options.timing,
                resizes: ResizeMerger::new(),
                caches: Mutex::new(HashMap::new()),
            }),
            groups: Mutex::new(Vec::new()),
        })
    }

    /// The cached group with this id (the Instance Pool id), as its concrete type.
    pub fn cached_group(&self, id: &str) -> Option<Arc<ExoscaleNodeGroup>> {
        self.cached_groups()
            .iter()
            .find(|group| group.id == id)
            .cloned()
    }

    fn cached_groups(&self) -> MutexGuard<'_, Vec<Arc<ExoscaleNodeGroup>>> {
        self.groups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// docs/exoscale.md EXO-07–EXO-10: the group of instance `instance_id`, freshly read from the
    /// API.
    async fn resolve(&self, instance_id: &str) -> Result<Option<ExoscaleNodeGroup>, CloudError> {
        let client = &self.shared.client;
        let instance = client.get_instance(instance_id).await.map_err(|e| {
            provider_error(format!(
                "unable to retrieve Compute instance {instance_id}: {e}"
            ))
        })?;
        let Some(pool_id) = managed_by(instance.manager.as_ref(), MANAGER_INSTANCE_POOL) else {
            return Ok(None);
        };
        let pool = client.get_instance_pool(&pool_id).await.map_err(|e| {
            provider_error(format!("unable to retrieve Instance Pool {pool_id}: {e}"))
        })?;

        if let Some(nodepool_id) = managed_by(pool.manager.as_ref(), MANAGER_SKS_NODEPOOL) {
            let clusters = client
                .list_sks_clusters()
                .await
                .map_err(|e| provider_error(format!("unable to list SKS clusters: {e}")))?;
            let found = clusters.sks_clusters.iter().flatten().find_map(|cluster| {
                cluster
                    .nodepools
                    .iter()
                    .flatten()
                    .find(|nodepool| nodepool.id.as_deref() == Some(nodepool_id.as_str()))
                    .map(|nodepool| (cluster, nodepool))
            });
            let Some((cluster, nodepool)) = found else {
                return Err(provider_error(format!(
                    "no SKS Nodepool found with ID {nodepool_id} in zone {}",
                    self.shared.zone
                )));
            };
            let nodepool_name = nodepool.name.clone().unwrap_or_default();
            let (min, max) = self.bounds(&nodepool_name).await?;
            // The group's id is the nodepool's Instance Pool; the pool we came from is it.
            let id = nodepool
                .instance_pool
                .as_ref()
                .and_then(|reference| reference.id.clone())
                .unwrap_or(pool_id);
            let cache = self.shared.cache_for(
                &id,
                GroupCache {
                    size: nodepool.size.unwrap_or(0),
                    members: Vec::new(),
                },
            );
            return Ok(Some(ExoscaleNodeGroup {
                id,
                kind: GroupKind::SksNodepool {
                    cluster_id: cluster.id.clone().unwrap_or_default(),
                    nodepool_id,
                    nodepool_name,
                },
                min,
                max,
                cache,
                shared: Arc::clone(&self.shared),
            }));
        }

        let pool_name = pool.name.clone().unwrap_or_default();
        let (min, max) = self.bounds(&pool_name).await?;
        let id = pool.id.clone().unwrap_or(pool_id);
        let cache = self.shared.cache_for(
            &id,
            GroupCache {
                size: pool.size.unwrap_or(0),
                members: pool.member_ids(),
            },
        );
        Ok(Some(ExoscaleNodeGroup {
            id,
            kind: GroupKind::InstancePool { pool_name },
            min,
            max,
            cache,
            shared: Arc::clone(&self.shared),
        }))
    }

    /// docs/exoscale.md EXO-12–EXO-14: the `--nodes` bounds named `name`, else 1 and the instance
    /// quota.
    async fn bounds(&self, name: &str) -> Result<(i64, i64), CloudError> {
        match NodeGroupSpec::find(&self.shared.node_specs, name) {
            Err(error) => Err(CloudError::IllegalConfiguration(error.to_string())),
            Ok(Some(spec)) => Ok((spec.min, spec.max)),
            Ok(None) => Ok((1, self.shared.quota_max().await?)),
        }
    }
}

impl Shared {
    /// The shared cache of group `id`, set to what a lookup has just read.
    fn cache_for(&self, id: &str, fresh: GroupCache) -> Arc<Mutex<GroupCache>> {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        let cache = caches.entry(id.to_string()).or_default();
        *cache.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
        Arc::clone(cache)
    }

    /// The instance quota as a max size (docs/exoscale.md EXO-Q2: unlimited becomes
    /// [`UNLIMITED_QUOTA_MAX`]).
    async fn quota_max(&self) -> Result<i64, CloudError> {
        let quota = self.client.get_instance_quota().await.map_err(|e| {
            provider_error(format!("unable to retrieve Compute instances quota: {e}"))
        })?;
        Ok(match quota.limit {
            Some(limit) if limit < 0 => UNLIMITED_QUOTA_MAX,
            Some(limit) => limit,
            None => 0,
        })
    }
}

/// The id of `manager` when it is of `kind`.
fn managed_by(manager: Option<&api::Manager>, kind: &str) -> Option<String> {
    let manager = manager?;
    if manager.kind.as_deref() != Some(kind) {
        return None;
    }
    manager.id.clone().filter(|id| !id.is_empty())
}

fn provider_error(message: String) -> CloudError {
    error!("{message}");
    CloudError::Provider(message)
}

/// The instance id in a provider ID: without the `exoscale://` prefix, or the whole string.
pub fn instance_id(provider_id: &str) -> &str {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .unwrap_or(provider_id)
}

#[async_trait]
impl CloudProvider for ExoscaleProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn gpu_label(&self) -> &str {
        ""
    }

    /// Upstream's generic helper: a node has a GPU when it has a non-zero allocatable amount of a
    /// known GPU resource (there is no GPU label).
    fn node_gpu_config(&self, node: &Node) -> Option<GpuConfig> {
        let resource = GPU_RESOURCES
            .iter()
            .find(|name| node.allocatable.get(name) > 0)?;
        Some(GpuConfig {
            label: String::new(),
            gpu_type: String::new(),
            resource_name: resource.to_string(),
        })
    }

    async fn node_groups(&self) -> Result<Vec<Arc<dyn NodeGroup>>, CloudError> {
        Ok(self
            .cached_groups()
            .iter()
            .map(|group| Arc::clone(group) as Arc<dyn NodeGroup>)
            .collect())
    }

    async fn node_group_for_node(
        &self,
        node: &Node,
    ) -> Result<Option<Arc<dyn NodeGroup>>, CloudError> {
        let id = instance_id(&node.provider_id);
        if id.is_empty() {
            if node.taints.iter().any(|taint| taint.key == MASTER_TAINT) {
                return Ok(None);
            }
            return Err(provider_error(format!(
                "unable to retrieve instance ID from Node {:?}: providerID {:?}",
                node.name, node.provider_id
            )));
        }
        let Some(group) = self.resolve(id).await? else {
            return Ok(None);
        };
        let group = Arc::new(group);
        {
            let mut groups = self.cached_groups();
            match groups.iter_mut().find(|cached| cached.id == group.id) {
                Some(cached) => *cached = Arc::clone(&group),
                None => groups.push(Arc::clone(&group)),
            }
        }
        self.refresh().await?;
        Ok(Some(group))
    }

    /// Upstream answers `true` together with "not implemented"; a `Result` carries one of the two
    /// and the core reads NotImplemented the same way.
    async fn has_instance(&self, _node: &Node) -> Result<bool, CloudError> {
        Err(CloudError::NotImplemented)
    }

    /// docs/exoscale.md EXO-16: drops the cached groups whose pool is gone (404); any other error
    /// keeps the cache as it is and fails. Sizes and members are not re-read here.
    async fn refresh(&self) -> Result<(), CloudError> {
        let ids: Vec<String> = self
            .cached_groups()
            .iter()
            .map(|group| group.id.clone())
            .collect();
        let mut gone = Vec::new();
        for id in ids {
            match self.shared.client.get_instance_pool(&id).await {
                Ok(_) => {}
                Err(e) if e.error.is_not_found() => {
                    info!(group = %id, "Instance Pool is gone, dropping its node group");
                    gone.push(id);
                }
                Err(e) => {
                    return Err(provider_error(format!(
                        "unable to refresh node group {id}: {e}"
                    )));
                }
            }
        }
        self.shared
            .caches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| !gone.contains(id));
        let mut groups = self.cached_groups();
        groups.retain(|group| !gone.contains(&group.id));
        if groups.is_empty() {
            info!(
                "no node groups found: autoscaling is disabled until a node of an Instance Pool is seen"
            );
        }
        Ok(())
    }
}

/// What backs a node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKind {
    /// A plain Instance Pool, scaled through `/instance-pool/{id}`.
    InstancePool { pool_name: String },
    /// An SKS Nodepool, scaled through `/sks-cluster/{cluster}/nodepool/{nodepool}`.
    SksNodepool {
        cluster_id: String,
        nodepool_id: String,
        nodepool_name: String,
    },
}

/// Values read by the latest lookup of the group, adjusted by the scale and evict calls made
/// since.
#[derive(Debug, Default)]
struct GroupCache {
    size: i64,
    /// Member ids of a plain pool at build time (SKS groups re-read them).
    members: Vec<String>,
}

/// A node group: an Instance Pool, plain or behind an SKS Nodepool.
#[derive(Debug)]
pub struct ExoscaleNodeGroup {
    /// The Instance Pool id (for SKS groups, the nodepool's pool).
    id: String,
    kind: GroupKind,
    min: i64,
    max: i64,
    cache: Arc<Mutex<GroupCache>>,
    shared: Arc<Shared>,
}

impl ExoscaleNodeGroup {
    pub fn kind(&self) -> &GroupKind {
        &self.kind
    }

    fn cache(&self) -> MutexGuard<'_, GroupCache> {
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The max an increase is checked against: for a plain pool with no positive stored max, the
    /// live quota (0 when it cannot be read), as upstream's `MaxSize`.
    async fn max_for_increase(&self) -> i64 {
        match self.kind {
            GroupKind::InstancePool { .. } if self.max <= 0 => {
                self.shared.quota_max().await.unwrap_or(0)
            }
            _ => self.max,
        }
    }

    /// The eviction of `nodes` (docs/exoscale.md EXO-21, EXO-22), run in the group's turn.
    async fn evict(&self, nodes: &[Node]) -> Result<(), CloudError> {
        self.wait_running().await?;
        let ids: Vec<String> = nodes
            .iter()
            .map(|node| instance_id(&node.provider_id).to_string())
            .collect();
        let client = &self.shared.client;
        let started = match &self.kind {
            GroupKind::InstancePool { .. } => {
                client
                    .evict_instance_pool_members(&self.id, ids.clone())
                    .await
            }
            GroupKind::SksNodepool {
                cluster_id,
                nodepool_id,
                ..
            } => {
                client
                    .evict_sks_nodepool_members(cluster_id, nodepool_id, ids.clone())
                    .await
            }
        }
        .map_err(|e| provider_error(format!("node group {}: evict {ids:?}: {e}", self.id)))?;
        complete_operation(client, started, &self.shared.timing)
            .await
            .map_err(|e| provider_error(format!("node group {}: evict {ids:?}: {e}", self.id)))?;
        self.wait_running().await?;
        let mut cache = self.cache();
        cache.size -= i64::try_from(ids.len()).unwrap_or(i64::MAX);
        // Evicted members are destroyed: reading them again would fail `nodes()` until the
        // group is rebuilt.
        cache.members.retain(|member| !ids.contains(member));
        Ok(())
    }

    /// One scale call carrying `resize.delta` on top of the current target (docs/exoscale.md
    /// EXO-18–EXO-20, EXO-33), run in the group's turn: the cached size it starts from already
    /// includes every earlier call of the group.
    async fn scale_up(&self, resize: MergedResize) -> Result<(), CloudError> {
        let delta = i64::try_from(resize.delta).unwrap_or(i64::MAX);
        let size = self.cache().size;
        let target = size.saturating_add(delta);
        if resize.is_merged() {
            debug!(
                group = %self.id,
                increases = resize.callers,
                delta = resize.delta,
                target,
                "merged size increases that arrived during a resize into one scale call"
            );
        }
        let max = self.max_for_increase().await;
        if target > max {
            return Err(CloudError::InvalidRequest(format!(
                "size increase is too large (current: {size} desired: {target} max: {max})"
            )));
        }
        let client = &self.shared.client;
        let started = match &self.kind {
            GroupKind::InstancePool { .. } => client.scale_instance_pool(&self.id, target).await,
            GroupKind::SksNodepool {
                cluster_id,
                nodepool_id,
                ..
            } => {
                client
                    .scale_sks_nodepool(cluster_id, nodepool_id, target)
                    .await
            }
        }
        .map_err(|e| provider_error(format!("node group {}: scale to {target}: {e}", self.id)))?;
        complete_operation(client, started, &self.shared.timing)
            .await
            .map_err(|e| {
                provider_error(format!("node group {}: scale to {target}: {e}", self.id))
            })?;
        self.wait_running().await?;
        self.cache().size = target;
        debug!(group = %self.id, target, "node group scaled up");
        Ok(())
    }

    async fn wait_running(&self) -> Result<(), CloudError> {
        wait_until_running(&self.shared.client, &self.id, &self.shared.timing)
            .await
            .map_err(|e| provider_error(format!("node group {}: {e}", self.id)))
    }

    /// Maps an API instance to the core's instance (docs/exoscale.md EXO-24).
    fn instance(id: &str, state: Option<&str>) -> Instance {
        let state = match state {
            None | Some("") => None,
            Some("starting") => Some(InstanceState::Creating),
            Some("running") => Some(InstanceState::Running),
            Some("stopping") => Some(InstanceState::Deleting),
            Some(_) => {
                // Upstream reports no state with error info; the core tells states apart only
                // by Creating and Deleting, so Running with the error info reads the same.
                return Instance {
                    id: format!("{PROVIDER_ID_PREFIX}{id}"),
                    status: Some(InstanceStatus {
                        state: InstanceState::Running,
                        error: Some(InstanceErrorInfo {
                            class: ErrorClass::Other,
                            code: UNKNOWN_STATE_ERROR_CODE.to_string(),
                            message: "error".to_string(),
                        }),
                    }),
                };
            }
        };
        Instance {
            id: format!("{PROVIDER_ID_PREFIX}{id}"),
            status: state.map(|state| InstanceStatus { state, error: None }),
        }
    }
}

fn to_usize(value: i64) -> usize {
    usize::try_from(value).unwrap_or(0)
}

#[async_trait]
impl NodeGroup for ExoscaleNodeGroup {
    fn id(&self) -> &str {
        &self.id
    }

    /// Plain pools report a stored min ≤ 0 as 1 (docs/exoscale.md EXO-Q9); SKS groups the stored
    /// min.
    fn min_size(&self) -> usize {
        match self.kind {
            GroupKind::InstancePool { .. } if self.min <= 0 => 1,
            _ => to_usize(self.min),
        }
    }

    /// The stored max. Upstream reads the live quota here for a plain pool whose stored max is
    /// not positive; this method cannot call the API, so `increase_size` does that instead.
    fn max_size(&self) -> usize {
        to_usize(self.max)
    }

    fn debug(&self) -> String {
        format!(
            "Node group ID: {} (min:{} max:{})",
            self.id,
            self.min_size(),
            self.max_size()
        )
    }

    async fn target_size(&self) -> Result<usize, CloudError> {
        Ok(to_usize(self.cache().size))
    }

    /// docs/exoscale.md EXO-18–EXO-20, EXO-33: increases arriving while a resize of the group is
    /// in flight go as one scale call for their sum.
    async fn increase_size(&self, delta: usize) -> Result<(), CloudError> {
        if delta == 0 {
            return Err(CloudError::InvalidRequest(
                "delta must be positive, have: 0".to_string(),
            ));
        }
        self.shared
            .resizes
            .increase(&self.id, delta, |resize| self.scale_up(resize))
            .await
    }

    /// docs/exoscale.md EXO-21, EXO-22. Membership is not checked (EXO-Q8): the API refuses foreign
    /// instances.
    async fn delete_nodes(&self, nodes: &[Node]) -> Result<(), CloudError> {
        if nodes.is_empty() {
            // Nothing to evict: the API would refuse an empty list.
            return Ok(());
        }
        // One resize of the group at a time: the eviction lowers the size the cache holds, which
        // an increase in flight would otherwise overwrite (docs/exoscale.md EXO-33).
        self.shared
            .resizes
            .exclusive(&self.id, self.evict(nodes))
            .await
    }

    /// docs/exoscale.md EXO-Q1, EXO-23: succeeds without doing anything; the next rebuild shows the
    /// real size.
    async fn decrease_target_size(&self, _delta: i64) -> Result<(), CloudError> {
        Ok(())
    }

    /// docs/exoscale.md EXO-24, EXO-25: plain pools read their cached members (EXO-Q5), SKS groups
    /// re-read the pool.
    async fn nodes(&self) -> Result<Vec<Instance>, CloudError> {
        let client = &self.shared.client;
        let members = match self.kind {
            GroupKind::InstancePool { .. } => self.cache().members.clone(),
            GroupKind::SksNodepool { .. } => client
                .get_instance_pool(&self.id)
                .await
                .map_err(|e| {
                    provider_error(format!("unable to retrieve Instance Pool {}: {e}", self.id))
                })?
                .member_ids(),
        };
        // One read per member, a few at a time (in member order): sequential reads would make
        // a loop of a large group as slow as the sum of the round trips.
        stream::iter(members)
            .map(|member| async move {
                let instance = client.get_instance(&member).await.map_err(|e| {
                    provider_error(format!("unable to retrieve Compute instance {member}: {e}"))
                })?;
                Ok(ExoscaleNodeGroup::instance(
                    &member,
                    instance.state.as_deref(),
                ))
            })
            .buffered(CONCURRENT_INSTANCE_READS)
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(kind: GroupKind, min: i64, max: i64) -> ExoscaleNodeGroup {
        let config = ExoscaleConfig {
            zone: "ch-gva-2".into(),
            api_key: crate::config::Secret::new("k"),
            api_secret: crate::config::Secret::new("s"),
            environment: "api".into(),
            endpoint: None,
        };
        ExoscaleNodeGroup {
            id: "pool".into(),
            kind,
            min,
            max,
            cache: Arc::new(Mutex::new(GroupCache {
                size: 1,
                members: Vec::new(),
            })),
            shared: Arc::new(Shared {
                client: ApiClient::new(&config, ClientOptions::default()).unwrap(),
                zone: "ch-gva-2".into(),
                node_specs: Vec::new(),
                timing: Timing::default(),
                resizes: ResizeMerger::new(),
                caches: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// docs/exoscale.md EXO-26 (min part) and EXO-Q9: a plain group stored with min 0 reports 1, an
    /// SKS group its stored min.
    #[test]
    fn c26_plain_min_clamped_to_one() {
        let plain = group(
            GroupKind::InstancePool {
                pool_name: "w".into(),
            },
            0,
            5,
        );
        assert_eq!(plain.min_size(), 1);
        let sks = group(
            GroupKind::SksNodepool {
                cluster_id: "c".into(),
                nodepool_id: "n".into(),
                nodepool_name: "w".into(),
            },
            0,
            5,
        );
        assert_eq!(sks.min_size(), 0);
        assert_eq!(plain.debug(), "Node group ID: pool (min:1 max:5)");
    }

    /// docs/exoscale.md EXO-24 (mapping part).
    #[test]
    fn c24_instance_state_mapping() {
        let status = |state| ExoscaleNodeGroup::instance("i", state).status;
        assert_eq!(
            ExoscaleNodeGroup::instance("i", Some("running")).id,
            "exoscale://i"
        );
        assert_eq!(
            status(Some("running")).map(|s| s.state),
            Some(InstanceState::Running)
        );
        assert_eq!(
            status(Some("starting")).map(|s| s.state),
            Some(InstanceState::Creating)
        );
        assert_eq!(
            status(Some("stopping")).map(|s| s.state),
            Some(InstanceState::Deleting)
        );
        assert_eq!(status(None), None);
        assert_eq!(status(Some("")), None);
        for other in ["stopped", "destroying", "error", "migrating", "whatever"] {
            let error = status(Some(other)).and_then(|s| s.error).unwrap();
            assert_eq!(error.class, ErrorClass::Other);
            assert_eq!(error.code, "no-code-exoscale");
            assert_eq!(error.message, "error");
        }
    }

    #[test]
    fn provider_ids() {
        assert_eq!(instance_id("exoscale://abc"), "abc");
        assert_eq!(instance_id("abc"), "abc");
        assert_eq!(instance_id("exoscale://"), "");
        assert_eq!(instance_id(""), "");
    }
}
